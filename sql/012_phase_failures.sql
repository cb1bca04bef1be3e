-- A phase whose batch failed, remembered for the next cycle (migration 12).
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- `run-once` runs once a minute, each run a new process. When a phase's batch fails
-- (any error: a constraint checked at COMMIT, a trigger raising 55P03 for one booking,
-- a timeout), the cycle records it here; the next cycle then takes that phase's first
-- batch one booking per transaction, so a booking whose write always fails is
-- quarantined with the SQLSTATE and message as its reason, and the others expire. A
-- phase that runs clean again drops its row. At most one row per phase.
CREATE TABLE IF NOT EXISTS crm.booking_expiration_phase_failure (
    phase           text        PRIMARY KEY CHECK (phase IN ('Reserve', 'Booking')),
    -- squawk-ignore prefer-bigint-over-int -- read as a 32-bit integer by the job, capped below 2^31 by the cycle; 0.1.0's databases have integer
    failures        integer     NOT NULL DEFAULT 1,   -- consecutive cycles that failed
    sqlstate        text        NULL,                 -- NULL: not a database error
    error           text        NOT NULL,
    first_failed_at timestamptz NOT NULL,
    last_failed_at  timestamptz NOT NULL,
    last_run_id     uuid        NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON crm.booking_expiration_phase_failure
   TO crm_booking_expiration_worker;
GRANT SELECT ON crm.booking_expiration_phase_failure TO crm_booking_expiration_readonly;
