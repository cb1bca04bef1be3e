-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
-- Defence in depth for a shared outbox (migration 15): row-level security policies
-- under which the job's roles reach only the rows of the job's outbox types, whatever
-- the job's statements say. They are created here and take effect only once the
-- table's owner enables row security on crm.outbox, an explicit step (see below and
-- the deployment guide): enabling it changes things for the CRM's other roles too.
--
-- What row security on crm.outbox does, once enabled (PostgreSQL 15 and 18 alike):
--   * the table's owner, superusers and BYPASSRLS roles are not subject to it: no
--     change for them (this migration never forces it on the owner);
--   * every other role is subject to it. With the permissive policy below (PUBLIC,
--     USING and WITH CHECK true) its SELECT, INSERT, UPDATE, DELETE and COPY TO see and
--     write every row as before, but `COPY crm.outbox FROM` is refused to it ("COPY
--     FROM not supported with row-level security"), and a read with row_security = off
--     fails ("query would be affected by row-level security policy"): pg_dump run by
--     such a role fails on crm.outbox unless it runs as the owner, a superuser or a
--     BYPASSRLS role, or with --enable-row-security;
--   * logical decoding (publications, Debezium's stream) reads the WAL, never the
--     policies: every row is still streamed. A snapshot or a subscription's initial copy
--     reads the table as its connecting role: every row, through the permissive policy.
-- So nothing here enables it: `ALTER TABLE crm.outbox ENABLE ROW LEVEL SECURITY` is the
-- owner's decision, once no other writer copies into the table and the backups run as
-- a role the policies do not bind. The job logs whether the defence is on.
--
-- Online: a new table of the job's own; each policy is created only when missing (a
-- CREATE POLICY takes an ACCESS EXCLUSIVE lock on crm.outbox for an instant, under the
-- runner's lock_timeout, retried); every statement may run again.

-- 1. The outbox types the job's roles may reach: its own type, and whatever a
--    deployment whose relay publishes other types too names (`--outbox-types`). Only the
--    owner writes here (INSERT INTO crm.booking_expiration_outbox_type (type) VALUES
--    ('pin.crm.booking-created')); the job's roles read it, as the policy does for them.
CREATE TABLE IF NOT EXISTS crm.booking_expiration_outbox_type (
    type     text        PRIMARY KEY CHECK (btrim(type) <> ''),
    added_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO crm.booking_expiration_outbox_type (type)
VALUES ('pin.crm.booking-expired')
ON CONFLICT (type) DO NOTHING;

GRANT SELECT ON crm.booking_expiration_outbox_type
   TO crm_booking_expiration_worker, crm_outbox_relay, crm_booking_expiration_readonly,
      crm_booking_expiration_operator;

-- 2. The job's roles, and their members (the deployment's login roles): every row of
--    the types above, nothing else, to read, update, delete or insert. A restrictive
--    policy narrows whatever the permissive ones allow; the permissive one of the job's
--    roles makes sure they reach their own rows also where the host has policies of its
--    own (whose restrictive policies still apply to them: the host comes first).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                    WHERE polrelid = 'crm.outbox'::regclass
                      AND polname = 'booking_expiration_job') THEN
        CREATE POLICY booking_expiration_job ON crm.outbox
            AS PERMISSIVE FOR ALL
            TO crm_booking_expiration_worker, crm_outbox_relay,
               crm_booking_expiration_readonly, crm_booking_expiration_operator
            USING (true) WITH CHECK (true);
    END IF;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                    WHERE polrelid = 'crm.outbox'::regclass
                      AND polname = 'booking_expiration_own_types') THEN
        CREATE POLICY booking_expiration_own_types ON crm.outbox
            AS RESTRICTIVE FOR ALL
            TO crm_booking_expiration_worker, crm_outbox_relay,
               crm_booking_expiration_readonly, crm_booking_expiration_operator
            USING (type IN (SELECT t.type FROM crm.booking_expiration_outbox_type t))
            WITH CHECK (type IN (SELECT t.type FROM crm.booking_expiration_outbox_type t));
    END IF;
END
$$;

-- 3. Every other role as it was: a role no permissive policy admits sees no row once
--    row security is on, so this one admits every role to every row. Only where the host
--    has no row security of its own on the table (off, and no policies but the job's):
--    beside the host's own policies it would widen them, and there the host's policies
--    decide for its roles. A host that adopts policies of its own later drops this one.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                    WHERE polrelid = 'crm.outbox'::regclass
                      AND polname = 'booking_expiration_others_unchanged')
       AND NOT (SELECT relrowsecurity FROM pg_catalog.pg_class
                 WHERE oid = 'crm.outbox'::regclass)
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                        WHERE polrelid = 'crm.outbox'::regclass
                          AND polname NOT IN ('booking_expiration_job',
                                              'booking_expiration_own_types')) THEN
        CREATE POLICY booking_expiration_others_unchanged ON crm.outbox
            AS PERMISSIVE FOR ALL TO PUBLIC
            USING (true) WITH CHECK (true);
    ELSIF NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                       WHERE polrelid = 'crm.outbox'::regclass
                         AND polname = 'booking_expiration_others_unchanged') THEN
        RAISE NOTICE 'crm.outbox has row security of its own: its policies decide for the other roles';
    END IF;
END
$$;
