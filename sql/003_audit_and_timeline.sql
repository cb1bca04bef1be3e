-- One audit row per status transition, and the deal-timeline entry written for the
-- domain event BookingExpired (its subscriber in the CRM is the deal timeline).
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Both tables are the job's own. crm.booking_audit.version is bigint from the start: a
-- CRM whose booking version is bigint can pass 2^31. (0.1.0 created it integer here and
-- changed it to bigint in migration 8, a rewrite of the whole table under an exclusive
-- lock; a database migrated by 0.1.0 has bigint already, a fresh one gets it here, and
-- migration 8 no longer touches the column.) Indexes are built CONCURRENTLY: the tables
-- only grow. Every statement may run again (IF NOT EXISTS).
CREATE TABLE IF NOT EXISTS crm.booking_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    booking_id  uuid        NOT NULL,
    tenant_id   uuid        NOT NULL,
    from_status text        NOT NULL,
    to_status   text        NOT NULL,
    version     bigint      NOT NULL,   -- the booking's version after the transition
    actor       text        NOT NULL,
    run_id      uuid        NULL,       -- correlation id of the run that made it
    at          timestamptz NOT NULL
);

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_booking_audit_booking_id
    ON crm.booking_audit (booking_id);

CREATE TABLE IF NOT EXISTS crm.deal_timeline (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deal_id        uuid        NOT NULL,
    tenant_id      uuid        NOT NULL,
    booking_id     uuid        NOT NULL,
    kind           text        NOT NULL,  -- 'BookingReserveExpired' | 'BookingExpired'
    occurred_at    timestamptz NOT NULL,
    correlation_id uuid        NULL,
    details        jsonb       NOT NULL DEFAULT '{}'::jsonb
);

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_deal_timeline_deal_id
    ON crm.deal_timeline (deal_id, occurred_at);
