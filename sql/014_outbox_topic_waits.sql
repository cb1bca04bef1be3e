-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
-- The topics the relay's rows wait for, one fact per topic (migration 14).
--
-- A Kafka topic that is missing, not writable or has another partition count than
-- expected cannot take its rows: they wait, uncounted, until it can. The relay keeps
-- that as one row here per topic, and leaves the waiting rows of crm.outbox as they
-- are: no write per waiting row, however many wait. Each relay run checks these topics
-- once (under --follow about once a second): a topic that can take its rows again, or
-- that no pending row waits for any more, loses its row, and its rows go. `backlog`
-- (which asks no broker) reads here which topics its pending rows wait for.
-- A new table of the job's own: nothing else is locked or rewritten.
CREATE TABLE IF NOT EXISTS crm.booking_expiration_topic_wait (
    topic      text        PRIMARY KEY,
    reason     text        NOT NULL,   -- the topic check's words: why it cannot take them
    since      timestamptz NOT NULL,   -- when a relay first found it so
    checked_at timestamptz NOT NULL    -- when a relay last checked it
);

GRANT SELECT, INSERT, UPDATE, DELETE ON crm.booking_expiration_topic_wait
   TO crm_outbox_relay;
GRANT SELECT ON crm.booking_expiration_topic_wait TO crm_booking_expiration_readonly;
