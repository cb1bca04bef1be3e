-- What months of minute cycles need (migration 8).
--
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
    ADD COLUMN IF NOT EXISTS failures        integer     NOT NULL DEFAULT 0;

-- The rows waiting out a back-off, by key: tiny (only rows that failed), and what the
-- relay's fetch consults to keep later rows of such a key back. Its predicate is the
-- fetch's own pending test, coalesce(published_at, failed_at) IS NULL (written so
-- that stale statistics cannot send the fetch's look-up through the pending index):
-- PostgreSQL uses a partial index only where the query implies its predicate. The
-- index this file made before, on published_at IS NULL AND failed_at IS NULL, was
-- never used by the fetch; it is replaced (dropped once, then left alone).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_indexes
                WHERE schemaname = 'crm' AND indexname = 'ix_outbox_backing_off'
                  AND indexdef NOT LIKE '%COALESCE(published_at, failed_at) IS NULL%') THEN
        DROP INDEX crm.ix_outbox_backing_off;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS ix_outbox_backing_off
    ON crm.outbox (aggregateid, seq)
    WHERE coalesce(published_at, failed_at) IS NULL AND next_attempt_at IS NOT NULL;

GRANT UPDATE (next_attempt_at, failures) ON crm.outbox TO crm_outbox_relay;

-- 3. The audit trail keeps the version a booking got; a CRM whose version column is
--    bigint can pass 2^31, so the audit column is bigint as well. (On an existing audit
--    table this rewrites it once, under an exclusive lock: run it in a quiet minute.)
DO $$
BEGIN
    IF (SELECT format_type(atttypid, NULL) FROM pg_catalog.pg_attribute
         WHERE attrelid = 'crm.booking_audit'::regclass AND attname = 'version') <> 'bigint' THEN
        ALTER TABLE crm.booking_audit ALTER COLUMN version TYPE bigint;
    END IF;
END
$$;
