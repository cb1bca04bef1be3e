-- Wakes a following relay (relay-outbox --follow) the moment outbox rows commit:
-- NOTIFY is delivered at commit and collapses per transaction, so this costs one
-- notification per writing transaction, whoever the writer is.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Migration 13 (sql/013_outbox_notify_own_rows.sql) replaces this trigger with one that
-- fires only for the job's own rows. Both statements may run again (OR REPLACE).
CREATE OR REPLACE FUNCTION crm.outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crm_outbox', '');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER outbox_notify
    AFTER INSERT ON crm.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION crm.outbox_notify();
