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
-- Online: new tables and a view of the job's own; crm.outbox keeps its shape, and the
-- release before (which reads and writes the columns) keeps working beside this one.

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

-- A row's delivery state as operators read it (explain, republish, retry-failed):
-- its exception, else its receipt, else what the release before wrote in crm.outbox's
-- columns; but a failure written in the columns after the exception or the receipt
-- (by the release before, or an operator) is the row's latest word and wins.
CREATE OR REPLACE VIEW crm.booking_expiration_outbox_state AS
SELECT s.id, s.aggregateid, s.type, s.topic, s.occurred_at, s.seq,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_published_at
            ELSE s.published_at END AS published_at,
       CASE WHEN s.src = 'exception' THEN s.e_failed_at
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.failed_at END AS failed_at,
       CASE WHEN s.src = 'exception' THEN s.e_attempts
            WHEN s.src = 'receipt' THEN greatest(s.attempts, 1)
            ELSE s.attempts END AS attempts,
       CASE WHEN s.src = 'exception' THEN s.e_failures
            WHEN s.src = 'receipt' THEN 0
            ELSE s.failures END AS failures,
       CASE WHEN s.src = 'exception' THEN s.e_next_attempt_at
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.next_attempt_at END AS next_attempt_at,
       CASE WHEN s.src = 'exception' THEN s.e_last_error
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.last_error END AS last_error,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_partition
            ELSE s.delivered_partition END AS delivered_partition,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_offset
            ELSE s.delivered_offset END AS delivered_offset,
       s.e_reason AS exception
  FROM (SELECT o.id, o.aggregateid, o.type, o.topic, o.occurred_at, o.seq, o.published_at,
               o.failed_at, o.attempts, o.failures, o.next_attempt_at, o.last_error,
               o.delivered_partition, o.delivered_offset,
               r.published_at AS r_published_at, r.partition AS r_partition,
               r."offset" AS r_offset,
               e.reason AS e_reason, e.attempts AS e_attempts, e.failures AS e_failures,
               e.next_attempt_at AS e_next_attempt_at, e.last_error AS e_last_error,
               e.failed_at AS e_failed_at,
               CASE WHEN o.failed_at IS NOT NULL AND o.published_at IS NULL
                         AND o.failed_at > coalesce(e.since, r.published_at, '-infinity')
                    THEN 'columns'
                    WHEN e.seq IS NOT NULL THEN 'exception'
                    WHEN r.seq IS NOT NULL THEN 'receipt'
                    ELSE 'columns' END AS src
          FROM crm.outbox o
          LEFT JOIN crm.booking_expiration_receipt r ON r.seq = o.seq
          LEFT JOIN crm.booking_expiration_exception e ON e.seq = o.seq) s;

GRANT SELECT, INSERT, UPDATE, DELETE
   ON crm.booking_expiration_receipt, crm.booking_expiration_exception,
      crm.booking_expiration_relay_state
   TO crm_outbox_relay;
-- republish and retry-failed re-queue through the exceptions.
GRANT SELECT, INSERT, UPDATE, DELETE ON crm.booking_expiration_exception
   TO crm_booking_expiration_operator;
GRANT SELECT, DELETE ON crm.booking_expiration_receipt TO crm_booking_expiration_operator;
GRANT SELECT ON crm.booking_expiration_relay_state, crm.booking_expiration_outbox_state
   TO crm_booking_expiration_operator;
GRANT SELECT
   ON crm.booking_expiration_receipt, crm.booking_expiration_exception,
      crm.booking_expiration_relay_state, crm.booking_expiration_outbox_state
   TO crm_booking_expiration_readonly;
