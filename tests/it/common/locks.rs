//! Locks and gates: holding one statement of the job on an advisory lock, and what the
//! job's sessions wait for, hold and leave behind.

use crate::postgres;
use std::time::Duration;

use postgres::{Client, NoTls};

use super::*;

/// A gate on one statement of the job: a trigger makes it wait for advisory lock `key`,
/// which the returned session holds until [`open_gate`] (or until it is dropped).
/// `trigger` is the trigger's definition up to `EXECUTE`, e.g.
/// `TRIGGER g AFTER INSERT ON crm.deal_timeline FOR EACH STATEMENT`, or a
/// `CONSTRAINT TRIGGER … DEFERRABLE INITIALLY DEFERRED FOR EACH ROW` to block a COMMIT
/// (with a trigger that defers it again: the batches set their constraints immediate).
pub fn hold_gate(url: &str, key: i64, trigger: &str) -> Client {
    let mut gate = Client::connect(url, NoTls).expect("connect the gate");
    gate.batch_execute(&format!(
        "CREATE FUNCTION crm.gate_{key}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock({key}); RETURN NULL; END $$;
         CREATE {trigger} EXECUTE FUNCTION crm.gate_{key}();
         SELECT pg_advisory_lock({key});"
    ))
    .expect("install the gate");
    gate
}

pub fn open_gate(gate: &mut Client, key: i64) {
    gate.batch_execute(&format!("SELECT pg_advisory_unlock({key})"))
        .expect("open the gate");
}

/// Whether a session of the job (application_name `booking-expire`) on database
/// `db_name` waits for a lock in a statement whose text contains `query_part`.
pub fn job_waits_in(c: &mut Client, db_name: &str, query_part: &str) -> bool {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'booking-expire'
            AND wait_event_type = 'Lock' AND strpos(query, $2) > 0",
        &[&db_name, &query_part],
    )
    .unwrap()
    .get::<_, i64>(0)
        > 0
}

/// Sessions of the job connected to database `db_name`.
pub fn job_sessions(c: &mut Client, db_name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'booking-expire'",
        &[&db_name],
    )
    .unwrap()
    .get(0)
}

/// Locks held or awaited by the job's sessions on database `db_name`.
pub fn job_locks(c: &mut Client, db_name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.datname = $1 AND a.application_name = 'booking-expire'",
        &[&db_name],
    )
    .unwrap()
    .get(0)
}

/// Waits until the job has no session (hence no lock) left on the database, and
/// checks that every row of `crm.bookings` can be locked at once.
pub fn assert_locks_released(c: &mut Client, db_name: &str) {
    wait_until(Duration::from_secs(15), "the job's sessions to end", || {
        job_sessions(c, db_name) == 0
    });
    assert_eq!(job_locks(c, db_name), 0, "no lock left by the job");
    let all = count(c, "SELECT count(*) FROM crm.bookings");
    let mut tx = c.transaction().unwrap();
    let lockable = tx
        .query("SELECT id FROM crm.bookings FOR UPDATE NOWAIT", &[])
        .expect("every booking lockable at once")
        .len() as i64;
    assert_eq!(lockable, all);
    tx.rollback().unwrap();
}
