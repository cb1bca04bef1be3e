-- What `backlog` needs to say who holds vacuum back (migration 10).
--
-- `backlog` names the sessions whose transaction holds the xmin horizon back (so that
-- VACUUM cannot remove the outbox's dead row versions) by PID, application, state and
-- age. pg_stat_activity shows a role that is not a member of pg_read_all_stats only
-- the PID, user, application name and transaction ids of other roles' sessions: not
-- their state nor when their transaction began. The read-only role gets the
-- membership. It lets the role read every statistics view of the server (including
-- other sessions' query texts in pg_stat_activity and pg_stat_statements, which
-- `backlog` never selects) and grants no access to any table.
--
-- Granting a predefined role needs a superuser or a role holding it WITH ADMIN OPTION.
-- A migration run without that warns and goes on: `backlog` then lists such sessions
-- as "of unknown age" by their transaction ids and says what is missing; a DBA can
-- run the GRANT later.
DO $$
BEGIN
    IF NOT pg_has_role('crm_booking_expiration_readonly', 'pg_read_all_stats', 'MEMBER') THEN
        GRANT pg_read_all_stats TO crm_booking_expiration_readonly;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot grant pg_read_all_stats to crm_booking_expiration_readonly (%); '
                  'backlog will show other roles'' sessions without state and age', SQLERRM;
END
$$;
