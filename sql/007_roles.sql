-- Least privilege: one group role per kind of work, granted exactly what its
-- subcommands touch. They are NOLOGIN: a deployment grants them to its login users
-- (CREATE ROLE expire_job LOGIN IN ROLE crm_booking_expiration_worker), so passwords
-- never live in a migration.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
--   crm_booking_expiration_worker    run-once
--   crm_outbox_relay                 relay-outbox
--   crm_booking_expiration_readonly  dry-run, backlog
--
-- Roles are cluster-wide, grants are per database. The roles are created only when
-- missing (which needs CREATEROLE; a DBA may create them beforehand instead), and two
-- databases migrating at the same moment may race to create one: the loser finds it
-- there and goes on. The grants are idempotent.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['crm_booking_expiration_worker', 'crm_outbox_relay',
                             'crm_booking_expiration_readonly'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- created meanwhile by a concurrent migration
            END;
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA crm
   TO crm_booking_expiration_worker, crm_outbox_relay, crm_booking_expiration_readonly;

-- run-once: claims (reads, row-locks) and expires bookings, writing only the
-- transition's columns; appends audit, timeline and outbox rows (never publishes or
-- rewrites them); keeps the poison quarantine.
GRANT SELECT (id, tenant_id, deal_id, property_object_id, status,
              reserve_expires_at, booking_expires_at, expired_at, version)
   ON crm.bookings TO crm_booking_expiration_worker;
GRANT UPDATE (status, expired_at, updated_at, version)
   ON crm.bookings TO crm_booking_expiration_worker;
GRANT INSERT (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
   ON crm.booking_audit TO crm_booking_expiration_worker;
GRANT INSERT (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
   ON crm.deal_timeline TO crm_booking_expiration_worker;
GRANT INSERT (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
   ON crm.outbox TO crm_booking_expiration_worker;
GRANT SELECT, INSERT, UPDATE, DELETE
   ON crm.booking_expiration_poison TO crm_booking_expiration_worker;

-- relay-outbox: reads the outbox, marks rows published or failed, purges published
-- rows after the retention. Nothing else.
GRANT SELECT, DELETE ON crm.outbox TO crm_outbox_relay;
GRANT UPDATE (published_at, attempts, last_error, failed_at)
   ON crm.outbox TO crm_outbox_relay;

-- dry-run and backlog: read the three tables they report on.
GRANT SELECT ON crm.bookings, crm.booking_expiration_poison, crm.outbox
   TO crm_booking_expiration_readonly;
