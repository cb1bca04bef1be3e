-- The xmin horizon's holders for the read-only role, without pg_read_all_stats
-- (migration 11), and the revoke of the membership migration 10 once granted.
-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
--
-- Every statement may run again (OR REPLACE; REVOKE and GRANT are idempotent; the DO
-- block changes a role membership, no table).
--
-- `backlog` names the sessions whose transaction holds the xmin horizon back by PID,
-- user, application, state and age. Migration 10 made the read-only role a member of
-- pg_read_all_stats for that, which also let it read every session's query text in
-- pg_stat_activity, cluster-wide (other applications' statements: literals, personal
-- data). This function returns what `backlog` needs, per session of this database
-- holding an xid or a snapshot, and never the query text. It runs with its owner's
-- rights (SECURITY DEFINER) and a fixed search_path, so a caller's objects cannot stand
-- in for the catalog's: migrate as a superuser (or a member of pg_read_all_stats) for it
-- to see every session; a less privileged owner sees what that owner may see, and
-- `backlog` lists the rest as sessions of unknown age.
CREATE OR REPLACE FUNCTION crm.booking_expiration_xmin_holders()
RETURNS TABLE (
    pid integer,
    datname text,
    usesysid oid,
    usename text,
    application_name text,
    backend_type text,
    state text,
    xact_start timestamptz,
    backend_xid xid,
    backend_xmin xid,
    transaction_age interval,
    xmin_age integer
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a.pid, a.datname::text, a.usesysid, a.usename::text, a.application_name,
           a.backend_type, a.state, a.xact_start, a.backend_xid, a.backend_xmin,
           now() - a.xact_start, greatest(age(a.backend_xid), age(a.backend_xmin))
      FROM pg_catalog.pg_stat_activity a
     WHERE (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
       AND (a.datname = current_database() OR a.datname IS NULL)
$$;

REVOKE ALL ON FUNCTION crm.booking_expiration_xmin_holders() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION crm.booking_expiration_xmin_holders()
    TO crm_booking_expiration_readonly;

-- The membership migration 10 granted goes. Revoking it needs what granting it needed
-- (a superuser, or a role holding it WITH ADMIN OPTION): without that the migration
-- warns and goes on, and a DBA runs the REVOKE.
DO $$
BEGIN
    IF pg_has_role('crm_booking_expiration_readonly', 'pg_read_all_stats', 'MEMBER') THEN
        REVOKE pg_read_all_stats FROM crm_booking_expiration_readonly;
    END IF;
EXCEPTION
    WHEN insufficient_privilege THEN
        RAISE WARNING 'cannot revoke pg_read_all_stats from crm_booking_expiration_readonly (%); '
                      'run REVOKE pg_read_all_stats FROM crm_booking_expiration_readonly as a superuser',
                      SQLERRM;
    -- Another database migrating at the same moment revoked it first (memberships are
    -- cluster-wide: "tuple concurrently updated"); only a membership left is a fault.
    WHEN OTHERS THEN
        IF pg_has_role('crm_booking_expiration_readonly', 'pg_read_all_stats', 'MEMBER') THEN
            RAISE;
        END IF;
END
$$;
