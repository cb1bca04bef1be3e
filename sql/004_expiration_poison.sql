-- Poison tracking: bookings the cycle could not expire (the domain guard refused them,
-- or the database rejected their write). Each is quarantined with exponential back-off
-- (retry_at) so that it cannot block younger healthy rows, and stays visible and
-- countable for operators (backlog). A row is removed when its booking finally expires.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
CREATE TABLE IF NOT EXISTS crm.booking_expiration_poison (
    booking_id    uuid        PRIMARY KEY,
    tenant_id     uuid        NOT NULL,
    phase         text        NOT NULL,   -- 'Reserve' | 'Booking'
    reason        text        NOT NULL,   -- guard rejection code, or 'database'
    error         text        NOT NULL,   -- what was wrong, for the runbook
    sqlstate      text        NULL,       -- set when the database rejected the write
    -- squawk-ignore prefer-bigint-over-int -- read as a 32-bit integer by the job, capped below 2^31 by the cycle; 0.1.0's databases have integer
    attempts      integer     NOT NULL DEFAULT 1,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    retry_at      timestamptz NOT NULL,   -- not claimed again before this moment
    last_run_id   uuid        NULL
);
