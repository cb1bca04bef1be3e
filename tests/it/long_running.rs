//! Faults that only months of minute cycles reveal, each reproduced at its limit on a
//! real PostgreSQL: a quarantine back-off after 38 (and 2 billion) attempts, a repaired
//! booking still held by an old quarantine entry, one phase's failure stopping the
//! other, savepoints piling up during poison isolation, panics, and a CRM whose
//! bookings table uses other column types.

use crate::common;
use crate::postgres;

use std::time::Duration;

use common::*;
use uuid::Uuid;

/// A row the guard refuses (an active booking whose expired_at is set), quarantined
/// `attempts` times, due for a retry now; healthy overdue rows of both phases besides.
fn poison_due_with_attempts(db: &TestDb, attempts: i32) -> (Seed, Vec<Uuid>) {
    let mut c = db.client();
    let mut bad = Seed::reserved(-3_600);
    bad.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&bad));
    put_in_quarantine(
        &mut c,
        &bad,
        "Reserve",
        "expired_at_already_set",
        attempts,
        -1,
    );
    let healthy = seed(
        &mut c,
        &[Seed::reserved(-60), Seed::reserved(-30), Seed::booked(-60)],
    );
    (bad, healthy)
}

fn quarantine_of(c: &mut postgres::Client, id: Uuid) -> (i32, i64) {
    let row = c
        .query_one(
            "SELECT attempts, extract(epoch FROM retry_at - last_seen_at)::int8
               FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn the_back_off_is_capped_without_overflow_after_38_attempts() {
    let db = TestDb::new();
    let (bad, healthy) = poison_due_with_attempts(&db, 38);
    let mut c = db.client();
    // Before the fix, 1 minute × 2^38 overflowed an interval: the batch rolled back and
    // every later cycle exited 75 with nothing expired.
    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (2, 1, 0, 1));
    for id in healthy {
        assert!(status_of(&mut c, id).ends_with("Expired"));
    }
    assert_eq!(quarantine_of(&mut c, bad.id), (39, 3_600));
}

#[test]
fn the_attempt_counter_saturates_at_its_limit() {
    let db = TestDb::new();
    let (bad, _) = poison_due_with_attempts(&db, i32::MAX - 1);
    let mut c = db.client();
    assert_eq!(db.run_once(&[]).counts(), (2, 1, 0, 1));
    assert_eq!(quarantine_of(&mut c, bad.id), (i32::MAX, 3_600));
    // Once more at the limit: it stays there, and the cycle stays healthy.
    c.batch_execute(
        "UPDATE crm.booking_expiration_poison SET retry_at = now() - interval '1 second'",
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 1));
    assert_eq!(quarantine_of(&mut c, bad.id), (i32::MAX, 3_600));
}

#[test]
fn a_repaired_booking_expires_on_the_next_cycle_despite_its_quarantine() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut bad = Seed::booked(-600);
    bad.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&bad));
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 1));
    assert_eq!(quarantine_of(&mut c, bad.id), (1, 60));
    // A manager repairs it: new version, expired_at cleared, deadline long passed. The
    // old entry said "not before a minute from now"; it no longer describes the row.
    c.execute(
        "UPDATE crm.bookings SET expired_at = NULL, version = version + 1 WHERE id = $1",
        &[&bad.id],
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 0));
    assert_eq!(status_of(&mut c, bad.id), "BookingExpired");
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_expiration_poison"),
        0
    );
}

#[test]
fn a_quarantined_booking_broken_again_after_a_change_starts_a_new_back_off() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut bad = Seed::booked(-600);
    bad.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&bad));
    put_in_quarantine(&mut c, &bad, "Booking", "expired_at_already_set", 30, 3_000);
    // Changed (another version) but still inconsistent: judged afresh, attempt 1.
    c.execute(
        "UPDATE crm.bookings SET version = version + 1 WHERE id = $1",
        &[&bad.id],
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 1));
    assert_eq!(quarantine_of(&mut c, bad.id), (1, 60));
    let version: i64 = c
        .query_one(
            "SELECT booking_version FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&bad.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, 2);
}

#[test]
fn quarantine_entries_of_bookings_that_changed_or_went_away_are_removed() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut cancelled = Seed::booked(-600);
    cancelled.expired_at_set = true;
    let mut deleted = Seed::reserved(-600);
    deleted.expired_at_set = true;
    let mut still_bad = Seed::reserved(-600);
    still_bad.expired_at_set = true;
    seed(
        &mut c,
        &[cancelled.clone(), deleted.clone(), still_bad.clone()],
    );
    for (s, phase) in [
        (&cancelled, "Booking"),
        (&deleted, "Reserve"),
        (&still_bad, "Reserve"),
    ] {
        put_in_quarantine(&mut c, s, phase, "expired_at_already_set", 5, 3_000);
    }
    c.execute(
        "UPDATE crm.bookings SET status = 'Cancelled', version = version + 1 WHERE id = $1",
        &[&cancelled.id],
    )
    .unwrap();
    c.execute("DELETE FROM crm.bookings WHERE id = $1", &[&deleted.id])
        .unwrap();
    // The entry of the still-bad row is a year old: it stays while the row is bad.
    c.execute(
        "UPDATE crm.booking_expiration_poison SET first_seen_at = now() - interval '1 year'
          WHERE booking_id = $1",
        &[&still_bad.id],
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    let left: Vec<Uuid> = c
        .query("SELECT booking_id FROM crm.booking_expiration_poison", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, [still_bad.id]);
    // Untouched: not due yet, so neither retried nor re-counted.
    assert_eq!(quarantine_of(&mut c, still_bad.id), (5, 3_060));
}

#[test]
fn a_failing_phase_does_not_stop_the_other_phase() {
    let db = TestDb::new();
    let mut c = db.client();
    let reserve = seed_many(&mut c, 3, |i| Seed::reserved(-100 - i as i64));
    let booked = seed_many(&mut c, 4, |i| Seed::booked(-100 - i as i64));
    // Every Reserve write fails with a serialization failure: not a row's data, so the
    // whole Reserve batch rolls back.
    c.batch_execute(
        "CREATE FUNCTION crm.fail_reserve() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.status = 'ReserveExpired' THEN
             RAISE EXCEPTION 'simulated conflict' USING ERRCODE = '40001';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER fail_reserve BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.fail_reserve();",
    )
    .unwrap();
    let run = db.run(&["run-once"]);
    assert_eq!(
        run.code, 75,
        "the failure is still reported:\n{}",
        run.stderr
    );
    assert!(run.stderr.contains("simulated conflict"), "{}", run.stderr);
    for id in booked {
        assert_eq!(status_of(&mut c, id), "BookingExpired");
    }
    for id in reserve {
        assert_eq!(status_of(&mut c, id), "Reserved");
    }
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 4);
}

/// Transaction-id locks the job's session holds: one for its transaction and one for
/// each committed subtransaction that wrote (a rolled-back one releases its own). This
/// is what fills PostgreSQL's per-session subtransaction cache (64 entries).
fn xid_locks_of_the_job(c: &mut postgres::Client, db_name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.datname = $1 AND a.application_name = 'booking-expire'
            AND l.locktype = 'transactionid' AND l.granted",
        &[&db_name],
    )
    .unwrap()
    .get(0)
}

#[test]
fn isolating_many_poison_rows_leaves_no_pile_of_subtransactions() {
    let db = TestDb::new();
    let mut c = db.client();
    // 200 overdue rows; the database refuses every third one (67 rows): bisection
    // used to commit a savepoint per healthy stretch between them.
    let rows: Vec<Seed> = (0..200).map(|i| Seed::booked(-1_000 + i)).collect();
    seed(&mut c, &rows);
    let refused: Vec<Uuid> = rows.iter().step_by(3).map(|s| s.id).collect();
    let list: Vec<String> = refused.iter().map(|id| format!("'{id}'")).collect();
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.refuse_some() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.id IN ({}) THEN RAISE EXCEPTION 'frozen'; END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_some BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.refuse_some();",
        list.join(", ")
    ))
    .unwrap();
    // Hold the batch at its quarantine write, after the bisection, to look at it.
    let key = 4_242;
    let mut gate = hold_gate(
        &db.url,
        key,
        "TRIGGER g AFTER INSERT ON crm.booking_expiration_poison FOR EACH STATEMENT",
    );
    let job = Background::start(db.command(&["run-once", "--batch-size", "200"]));
    let mut observer = db.client();
    wait_until(
        Duration::from_secs(30),
        "the batch to reach the gate",
        || job_waits_in(&mut observer, &db.name, "booking_expiration_poison"),
    );
    let xid_locks = xid_locks_of_the_job(&mut observer, &db.name);
    open_gate(&mut gate, key);
    let run = job.wait();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (0, 133, 0, 67));
    // The transaction itself, and the one write of the 133 healthy rows.
    assert!(
        xid_locks <= 2,
        "{xid_locks} transaction ids held: committed subtransactions piled up"
    );
    let quarantined: Vec<Uuid> = c
        .query(
            "SELECT booking_id FROM crm.booking_expiration_poison ORDER BY booking_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut want = refused.clone();
    want.sort();
    assert_eq!(quarantined, want);
}

#[test]
fn a_panic_prints_one_line_and_exits_70() {
    let db = TestDb::new();
    let run = Run::of(
        db.command(&["backlog"])
            .env("BOOKING_EXPIRE_TEST_PANIC", "1")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 70, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].starts_with(
            "booking-expire: error: internal error (a bug; please report it): panic requested"
        ),
        "{}",
        lines[0]
    );
    // JSON logs: the same, as one JSON line.
    let run = Run::of(
        db.command(&["backlog"])
            .env("BOOKING_EXPIRE_TEST_PANIC", "1")
            .env("LOG_FORMAT", "json")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 70, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert!(line.to_string().contains("internal error (a bug"), "{line}");
}

#[test]
fn a_huge_connect_timeout_in_the_url_is_refused_not_a_panic() {
    let db = TestDb::new();
    let url = format!(
        "{}?host=127.0.0.1,127.0.0.2&connect_timeout=9223372036854775807",
        db.url.split('?').next().unwrap()
    );
    let run = Run::of(
        db.command(&["run-once"])
            .env("DATABASE_URL", &url)
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("connect_timeout=9223372036854775807 is too large")
            && run.stderr.contains("at most 3600 seconds"),
        "{}",
        run.stderr
    );
}

/// Rebuilds `crm.bookings.status` as another type, keeping the partial indexes.
fn retype_status(c: &mut postgres::Client, ddl_type: &str, prelude: &str) {
    c.batch_execute(&format!(
        "{prelude}
         DROP INDEX crm.ix_bookings_reserve_expires_at;
         DROP INDEX crm.ix_bookings_booking_expires_at;
         ALTER TABLE crm.bookings ALTER COLUMN status TYPE {ddl_type} USING status::{ddl_type};
         CREATE INDEX ix_bookings_reserve_expires_at ON crm.bookings (reserve_expires_at, id)
          WHERE status IN ('Reserved', 'AwaitingPayment');
         CREATE INDEX ix_bookings_booking_expires_at ON crm.bookings (booking_expires_at, id)
          WHERE status = 'Booked';"
    ))
    .unwrap();
}

/// Runs a dry run, a backlog and cycles on the retyped table seeded by
/// [`seed_for_retyping`], and checks what was written.
fn expires_on_a_retyped_table(db: &TestDb) {
    let mut c = db.client();
    let dry = db.run(&["dry-run", "--as-of", "now", "--json"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (2, 1, 0, 1));
    let statuses: Vec<(Uuid, String, i64)> = c
        .query(
            "SELECT id, status::text, version::int8 FROM crm.bookings ORDER BY status::text",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expired: Vec<&(Uuid, String, i64)> = statuses
        .iter()
        .filter(|s| s.1.ends_with("Expired"))
        .collect();
    assert_eq!(expired.len(), 3, "{statuses:?}");
    for (_, _, version) in expired {
        assert_eq!(*version, 2);
    }
    // The poison row is quarantined with its version and status, and stays there.
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_poison
              WHERE booking_version = 1 AND booking_status = 'Booked'"
        ),
        1
    );
}

/// Both phases, a guard-rejected row and a terminal one; seeded while the column is
/// still text (the tests' seeding writes text).
fn seed_for_retyping(db: &TestDb) {
    let mut c = db.client();
    let mut bad = Seed::booked(-300);
    bad.expired_at_set = true;
    seed(
        &mut c,
        &[
            Seed::reserved(-120),
            Seed::booked(-120),
            Seed::new("AwaitingPayment", Some(-60), None),
            bad,
            Seed::new("Cancelled", Some(-600), None),
        ],
    );
}

#[test]
fn a_bigint_version_works() {
    let db = TestDb::new();
    seed_for_retyping(&db);
    db.client()
        .batch_execute("ALTER TABLE crm.bookings ALTER COLUMN version TYPE bigint")
        .unwrap();
    expires_on_a_retyped_table(&db);
}

#[test]
fn a_varchar_status_works() {
    let db = TestDb::new();
    seed_for_retyping(&db);
    retype_status(&mut db.client(), "varchar(32)", "");
    expires_on_a_retyped_table(&db);
}

#[test]
fn an_enum_status_works() {
    let db = TestDb::new();
    seed_for_retyping(&db);
    retype_status(
        &mut db.client(),
        "crm.booking_status",
        "CREATE TYPE crm.booking_status AS ENUM ('Reserved', 'AwaitingPayment', 'Booked',
             'ReserveExpired', 'BookingExpired', 'Cancelled', 'Completed');",
    );
    expires_on_a_retyped_table(&db);
}

#[test]
fn a_version_at_its_column_limit_is_poison_and_a_bigint_column_goes_on() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut full = Seed::booked(-300);
    full.version = i32::MAX;
    let healthy = Seed::booked(-200);
    seed(&mut c, &[full.clone(), healthy.clone()]);
    // integer: the guard refuses the row whose version cannot grow, dry-run says so too.
    let dry = db.run(&["dry-run", "--as-of", "now", "--json"]);
    assert!(dry.stdout.contains("version_overflow"), "{}", dry.stdout);
    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 1));
    assert_eq!(status_of(&mut c, healthy.id), "BookingExpired");
    assert_eq!(status_of(&mut c, full.id), "Booked");
    let reason: String = c
        .query_one(
            "SELECT reason FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&full.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(reason, "version_overflow");
    // bigint: the same row expires, and its version passes 2^31.
    c.batch_execute(
        "ALTER TABLE crm.bookings ALTER COLUMN version TYPE bigint;
         UPDATE crm.booking_expiration_poison SET retry_at = now() - interval '1 second';",
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 0));
    let version: i64 = c
        .query_one(
            "SELECT version FROM crm.bookings WHERE id = $1",
            &[&full.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, i64::from(i32::MAX) + 1);
}

#[test]
fn column_types_the_job_cannot_read_are_refused_up_front() {
    let cases = [
        (
            "ALTER TABLE crm.bookings ALTER COLUMN version TYPE numeric",
            "crm.bookings.version is numeric, expected smallint, integer or bigint",
        ),
        (
            "ALTER TABLE crm.bookings ALTER COLUMN reserve_expires_at TYPE timestamp",
            "crm.bookings.reserve_expires_at is timestamp without time zone, expected timestamptz",
        ),
        (
            "ALTER TABLE crm.bookings ALTER COLUMN deal_id TYPE text",
            "crm.bookings.deal_id is text, expected uuid",
        ),
    ];
    for (ddl, want) in cases {
        let db = TestDb::new();
        db.client().batch_execute(ddl).unwrap();
        for args in [
            &["run-once"][..],
            &["dry-run", "--as-of", "now"],
            &["backlog"],
        ] {
            let run = db.run(args);
            assert_eq!(run.code, 78, "{args:?} after {ddl}: {}", run.stderr);
            assert!(
                run.stderr.contains("schema not as expected") && run.stderr.contains(want),
                "{args:?} after {ddl}: want {want:?} in\n{}",
                run.stderr
            );
        }
    }
}
