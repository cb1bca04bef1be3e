-- What months of minute cycles need (migration 8): a quarantine entry bound to the
-- booking's version and status, and per-row retries with back-off in the relay.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Online: columns are added without a rewrite (nullable, or a constant default), the
-- index is built CONCURRENTLY, and every statement may run again (IF NOT EXISTS).
--
-- 0.1.0's version of this file also did two things inside DO blocks, where a linter
-- cannot see them; both are gone:
--   - it dropped an ix_outbox_backing_off of an older predicate before creating it.
--     Every database 0.1.0 migrated has the index with the predicate below (0.1.0
--     applied every file on each run); a fresh one gets it here.
--   - it changed crm.booking_audit.version to bigint, which rewrote the whole audit
--     table under an exclusive lock. The column is now created bigint by migration 3;
--     a database migrated by 0.1.0 has bigint already.

-- 1. A quarantine entry applies to the booking as it was when it was quarantined: its
--    version and status. Once a manager repairs, extends or cancels the booking, the
--    entry no longer matches, the next cycle judges the row afresh, and the cycle
--    removes the stale entry. Entries written before this migration have NULL here:
--    they match nothing, so each such booking is judged once more and, if still bad,
--    quarantined again with its version.
ALTER TABLE crm.booking_expiration_poison
    ADD COLUMN IF NOT EXISTS booking_version bigint NULL,
    ADD COLUMN IF NOT EXISTS booking_status  text   NULL;

-- 2. Per-row retries in the relay. A row the broker refused while others of the same
--    run were delivered (or whose topic is missing or mis-partitioned) is retried
--    after a back-off (next_attempt_at) that doubles with each such failure (failures),
--    and is marked failed after a capped number of them, so one bad row can never
--    stop or slow the relay. Later rows of the same key wait behind it: per-key order.
ALTER TABLE crm.outbox
    ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz NULL,
    -- squawk-ignore prefer-bigint-over-int -- read as a 32-bit integer by the job, capped below 2^31 by the relay; 0.1.0's databases have integer
    ADD COLUMN IF NOT EXISTS failures        integer     NOT NULL DEFAULT 0;

-- The rows waiting out a back-off, by key: tiny (only rows that failed), and what the
-- relay's fetch consults to keep later rows of such a key back. Its predicate is the
-- fetch's own pending test, coalesce(published_at, failed_at) IS NULL (written so
-- that stale statistics cannot send the fetch's look-up through the pending index):
-- PostgreSQL uses a partial index only where the query implies its predicate.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_outbox_backing_off
    ON crm.outbox (aggregateid, seq)
    WHERE coalesce(published_at, failed_at) IS NULL AND next_attempt_at IS NOT NULL;

GRANT UPDATE (next_attempt_at, failures) ON crm.outbox TO crm_outbox_relay;
