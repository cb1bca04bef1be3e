-- crm.bookings: owned by the CRM; this is the reference DDL the job is built and
-- tested against (docs/design.md, "Data"). Exactly these columns and the two partial
-- indexes that carry the claim's ORDER BY.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Online: each statement runs on its own (no transaction block), so the indexes are
-- built CONCURRENTLY: the CRM's writes to crm.bookings go on while they build. Every
-- statement may run again (IF NOT EXISTS).
CREATE SCHEMA IF NOT EXISTS crm;

CREATE TABLE IF NOT EXISTS crm.bookings (
    id                 uuid        PRIMARY KEY,
    tenant_id          uuid        NOT NULL,
    deal_id            uuid        NOT NULL,
    property_object_id uuid        NOT NULL,
    status             text        NOT NULL,
    reserve_expires_at timestamptz NULL,
    booking_expires_at timestamptz NULL,
    expired_at         timestamptz NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- squawk-ignore prefer-bigint-over-int -- the CRM's column, as its contract fixes it; the job reads smallint, integer or bigint
    version            integer     NOT NULL
);

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_bookings_reserve_expires_at
    ON crm.bookings (reserve_expires_at, id)
    WHERE status IN ('Reserved', 'AwaitingPayment');

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_bookings_booking_expires_at
    ON crm.bookings (booking_expires_at, id)
    WHERE status = 'Booked';
