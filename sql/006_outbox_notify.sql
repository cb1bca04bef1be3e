-- Wakes a following relay (relay-outbox --follow) the moment outbox rows commit:
-- NOTIFY is delivered at commit and collapses per transaction, so this costs one
-- notification per writing transaction, whoever the writer is.
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
