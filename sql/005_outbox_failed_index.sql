-- Rows the relay gave up on (failed_at set) stay in the outbox, visible; `backlog`
-- counts them through this partial index, which stays as small as the failures,
-- whatever the number of published rows.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_outbox_failed
    ON crm.outbox (failed_at)
    WHERE failed_at IS NOT NULL;
