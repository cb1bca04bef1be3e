-- The relay's wake-up fires only for the job's own rows (migration 13): the NOTIFY
-- trigger of migration 6 becomes a row trigger for the type 'pin.crm.booking-expired'.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Why: a transaction with a pending notification takes a lock at its commit that every
-- other notifying commit of the server waits for (it keeps the notification queue in
-- commit order), so the statement trigger of migration 6 serialised the commits of
-- every writer of crm.outbox, the CRM's other producers included. With this trigger
-- their inserts never NOTIFY. The job's own inserts still do, once per transaction
-- (notifications of one channel and payload collapse within a transaction), for the
-- run-once of 0.1.0 and of later releases alike: a rollback across this migration is
-- safe. The relay's other wake-ups (republish, retry-failed) send NOTIFY themselves.
--
-- One statement (CREATE OR REPLACE TRIGGER, PostgreSQL 14 and later, may change a
-- statement trigger into a row trigger): the old trigger is replaced in the same
-- transaction, under a SHARE ROW EXCLUSIVE lock on crm.outbox taken for an instant, so
-- no insert commits between the two without a trigger. It may run again. The function
-- of migration 6 serves both (an AFTER trigger's result is ignored).
CREATE OR REPLACE TRIGGER outbox_notify
    AFTER INSERT ON crm.outbox
    FOR EACH ROW
    WHEN (NEW.type = 'pin.crm.booking-expired')
    EXECUTE FUNCTION crm.outbox_notify();
