-- What operating the job for years needs (migration 9): pause switches, an audit trail
-- of operators' actions, delivery receipts, and autovacuum settings for the outbox.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Online: the new tables are the job's own; the outbox gets nullable columns (no
-- rewrite) and storage parameters (a SHARE UPDATE EXCLUSIVE lock, no rewrite); indexes
-- are built CONCURRENTLY; every statement may run again.

-- 1. Pause switches, one row per paused command. `run-once` and `relay-outbox` read
--    their row first thing and, when it is there, exit 0 at once saying since when, by
--    whom and why (`booking-expire pause|resume`).
CREATE TABLE IF NOT EXISTS crm.booking_expiration_pause (
    command   text        PRIMARY KEY CHECK (command IN ('run-once', 'relay-outbox')),
    paused_at timestamptz NOT NULL,
    paused_by text        NOT NULL,
    reason    text        NOT NULL CHECK (btrim(reason) <> '')
);

-- 2. Who did what to the job, when and why: pause, resume, republish, retry-failed.
--    Append-only; `outbox_ids` are the rows a republish re-queued.
CREATE TABLE IF NOT EXISTS crm.booking_expiration_operations (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    actor      text        NOT NULL,
    action     text        NOT NULL,   -- 'pause' | 'resume' | 'republish' | 'retry-failed'
    target     text        NOT NULL,   -- the command, or the selection of rows
    reason     text        NOT NULL CHECK (btrim(reason) <> ''),
    -- squawk-ignore prefer-bigint-over-int -- written as a 32-bit integer by the job; 0.1.0's databases have integer
    rows       integer     NOT NULL DEFAULT 0,
    outbox_ids uuid[]      NOT NULL DEFAULT '{}'
);

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_booking_expiration_operations_at
    ON crm.booking_expiration_operations (at);

-- 3. Delivery receipts: where the broker put each published row.
ALTER TABLE crm.outbox
    -- squawk-ignore prefer-bigint-over-int -- a Kafka partition is a 32-bit integer, read as one by the job; 0.1.0's databases have integer
    ADD COLUMN IF NOT EXISTS delivered_partition integer NULL,
    ADD COLUMN IF NOT EXISTS delivered_offset    bigint  NULL;

-- 4. Autovacuum for the outbox. Every row is inserted, updated once (published_at is
--    in the partial indexes' predicates, so the update is never HOT: it leaves a dead
--    tuple and dead entries in ix_outbox_pending) and deleted after the retention. The
--    defaults (20 % of the table + 50 rows) wait, on a 7-day table of 10 000 events a
--    day (70 000 rows), for 14 000 dead tuples: the relay's queue scan walks every dead
--    entry of ix_outbox_pending until then. A fixed 1 000 dead tuples (about 2.4 hours
--    at that rate, minutes during a drain) keeps the queue index small whatever the
--    table's size, and the insert threshold keeps the visibility map fresh so that
--    `backlog`'s counts stay index-only. ANALYZE follows the same fixed threshold, so the
--    planner's estimate of the pending rows never lags by a day.
-- squawk-ignore prefer-robust-stmts -- setting the same values again changes nothing: it may run again
ALTER TABLE crm.outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000
);

-- 5. Least privilege, in the manner of sql/007_roles.sql: a fourth group role for the
--    operators' commands (pause, resume, republish, retry-failed), created when missing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'crm_booking_expiration_operator') THEN
        BEGIN
            CREATE ROLE crm_booking_expiration_operator NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- created meanwhile by a concurrent migration
        END;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA crm TO crm_booking_expiration_operator;

-- Every command reads its pause switch; backlog and explain show them.
GRANT SELECT ON crm.booking_expiration_pause
   TO crm_booking_expiration_worker, crm_outbox_relay, crm_booking_expiration_readonly,
      crm_booking_expiration_operator;
-- The relay stores the receipt with the mark.
GRANT UPDATE (delivered_partition, delivered_offset) ON crm.outbox TO crm_outbox_relay;
-- explain reads a booking's audit and timeline rows; backlog and explain the operations.
GRANT SELECT ON crm.booking_audit, crm.deal_timeline, crm.booking_expiration_operations
   TO crm_booking_expiration_readonly;
-- The operators: switch pauses, re-queue outbox rows, append to the operations trail.
GRANT SELECT, INSERT, UPDATE, DELETE ON crm.booking_expiration_pause
   TO crm_booking_expiration_operator;
GRANT SELECT, INSERT ON crm.booking_expiration_operations TO crm_booking_expiration_operator;
GRANT SELECT ON crm.outbox TO crm_booking_expiration_operator;
GRANT UPDATE (published_at, failed_at, next_attempt_at, failures, last_error,
              delivered_partition, delivered_offset)
   ON crm.outbox TO crm_booking_expiration_operator;

-- 6. `explain BOOKING_ID` and `republish --booking` find a booking's outbox rows by
--    their aggregate id. One more entry per insert; without it each look-up would read
--    the whole retention window.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_outbox_aggregateid ON crm.outbox (aggregateid);
