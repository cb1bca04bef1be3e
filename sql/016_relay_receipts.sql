-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
-- The relay's own state, out of crm.outbox (migration 16): receipts, exceptions and a
-- watermark.
--
-- Until this release the relay kept its state in columns of crm.outbox (published_at,
-- attempts, last_error, failed_at, next_attempt_at, failures, delivered_partition,
-- delivered_offset): every mark was a non-HOT UPDATE of a wide row of a table shared
-- with the CRM's other producers, a new version in every one of its indexes. What only
-- the relay needs now lives in narrow tables of the job's own:
--   - a receipt per delivered row (where the broker put it);
--   - the exceptions: rows backing off, failed, waiting (for their topic, behind an
--     older row of their key) or re-queued by republish / retry-failed; normally empty;
--   - per set of outbox types, a watermark: every own row with seq <= floor is settled
--     (has a receipt, sits in the exceptions, or was marked in crm.outbox by the
--     release before), and high, the highest seq the relay has dealt with.
-- docs/design.md ("The relay's state") gives the argument that no row is lost although
-- transactions commit out of seq order.
--
-- Online: new tables of the job's own; crm.outbox keeps its shape (and nothing here
-- depends on its columns: no view, no foreign key, so the CRM may change them), and
-- the release before (which reads and writes the columns) keeps working beside this
-- one.

CREATE TABLE IF NOT EXISTS crm.booking_expiration_receipt (
    seq          bigint      PRIMARY KEY,   -- crm.outbox.seq
    id           uuid        NOT NULL,      -- crm.outbox.id, the ce_id
    published_at timestamptz NOT NULL,      -- when the broker acknowledged it
    -- squawk-ignore prefer-bigint-over-int -- a Kafka partition is a 32-bit integer, read as one by the job
    partition    integer     NOT NULL,
    "offset"     bigint      NOT NULL
);

CREATE TABLE IF NOT EXISTS crm.booking_expiration_exception (
    seq             bigint      PRIMARY KEY,   -- crm.outbox.seq
    id              uuid        NOT NULL,
    key             text        NOT NULL,      -- crm.outbox.aggregateid
    topic           text        NOT NULL,
    type            text        NOT NULL,
    -- why the row is here: 'back-off', 'failed', 'topic' (its topic cannot take it),
    -- 'behind' (an older row of its key is in flight or backing off), 'unsent' (the
    -- cluster did not acknowledge it), 'late' (committed after newer rows were relayed),
    -- 'requeued' (republish, retry-failed), 'legacy' (the release before's state)
    reason          text        NOT NULL,
    -- squawk-ignore prefer-bigint-over-int -- read as a 32-bit integer by the job, capped below 2^31
    attempts        integer     NOT NULL DEFAULT 0,
    -- squawk-ignore prefer-bigint-over-int -- read as a 32-bit integer by the job, capped below 2^31
    failures        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NULL,
    last_error      text        NULL,
    failed_at       timestamptz NULL,
    since           timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS crm.booking_expiration_relay_state (
    types              text        PRIMARY KEY,   -- the outbox types, sorted, comma-separated
    floor              bigint      NOT NULL,      -- every own row with seq <= floor is settled
    high               bigint      NOT NULL,      -- the highest seq dealt with
    -- The next floor, and the snapshot taken when it was proposed: it becomes the floor
    -- once every transaction that snapshot saw running (or had not begun) has ended.
    candidate          bigint      NULL,
    candidate_snapshot pg_snapshot NULL,
    -- Whether the relay also writes the columns of crm.outbox the release before reads.
    legacy_marks       boolean     NOT NULL DEFAULT true,
    updated_at         timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE
   ON crm.booking_expiration_receipt, crm.booking_expiration_exception,
      crm.booking_expiration_relay_state
   TO crm_outbox_relay;
-- republish and retry-failed re-queue through the exceptions.
GRANT SELECT, INSERT, UPDATE, DELETE ON crm.booking_expiration_exception
   TO crm_booking_expiration_operator;
GRANT SELECT, DELETE ON crm.booking_expiration_receipt TO crm_booking_expiration_operator;
GRANT SELECT ON crm.booking_expiration_relay_state TO crm_booking_expiration_operator;
GRANT SELECT
   ON crm.booking_expiration_receipt, crm.booking_expiration_exception,
      crm.booking_expiration_relay_state
   TO crm_booking_expiration_readonly;
