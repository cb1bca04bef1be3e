//! Pause switches (`pause`/`resume`): a paused command exits 0 at once saying since when,
//! by whom and why, and does nothing; `backlog` shows the pause; `resume` lets the next
//! run work; every switch is in the operations trail.

use crate::common;
use crate::postgres;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use serde_json::Value;
use std::time::Duration;

fn ops_rows(c: &mut postgres::Client) -> Vec<(String, String, String, String)> {
    c.query(
        "SELECT action, target, actor, reason FROM crm.booking_expiration_operations ORDER BY id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

#[test]
fn a_paused_relay_leaves_rows_pending_and_resume_lets_the_next_run_deliver_them() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let me = db.user();
    let mut c = db.client();
    seed_many(&mut c, 3, |i| Seed::booked(-60 - i as i64));
    assert_eq!(db.run_once(&[]).booking, 3);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();

    let paused = db.run(&[
        "pause",
        "relay-outbox",
        "--reason",
        "Kafka incident INC-42",
        "--actor",
        "alice",
    ]);
    assert_eq!(paused.code, 0, "{}", paused.stderr);
    assert!(
        paused.stdout.starts_with(&format!(
            "relay-outbox paused by alice (database user {me}): Kafka incident INC-42"
        )),
        "{}",
        paused.stdout
    );

    let relay = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(relay.code, 0, "{}", relay.stderr);
    assert!(
        relay.stderr.contains("relay-outbox is paused since ")
            && relay.stderr.contains(&format!(
                "by alice (database user {me}): Kafka incident INC-42; doing nothing"
            )),
        "{}",
        relay.stderr
    );
    let result: Value = serde_json::from_str(relay.stdout.trim()).unwrap();
    assert_eq!(result["Published"], 0);
    assert_eq!(result["Paused"]["Reason"], "Kafka incident INC-42");
    assert_eq!(
        result["Paused"]["By"],
        format!("alice (database user {me})")
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        3
    );
    // run-once is not paused by it.
    seed(&mut c, &[Seed::reserved(-30)]);
    assert_eq!(db.run_once(&[]).reserve, 1);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();

    // backlog shows the pause, in all three formats.
    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let report: Value = serde_json::from_str(backlog.stdout.trim()).unwrap();
    let pauses = report["Paused"].as_array().unwrap();
    assert_eq!(pauses.len(), 1, "{report}");
    assert_eq!(pauses[0]["Command"], "relay-outbox");
    assert_eq!(pauses[0]["Reason"], "Kafka incident INC-42");
    let table = db.run(&["backlog"]);
    assert!(
        table.stdout.contains("PAUSED relay-outbox"),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains("relay-outbox is paused since ")
            && table
                .stdout
                .contains("(booking-expire resume relay-outbox)"),
        "{}",
        table.stdout
    );
    let prom = db.run(&["backlog", "--format", "prometheus"]);
    assert!(
        prom.stdout
            .contains("crm_booking_expiration_paused_seconds{step=\"run-once\"} 0\n"),
        "{}",
        prom.stdout
    );
    let relay_paused_for: f64 = prom
        .stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("crm_booking_expiration_paused_seconds{step=\"relay-outbox\"} ")
        })
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        relay_paused_for > 0.0 && relay_paused_for < 60.0,
        "{relay_paused_for}"
    );

    // Pausing again changes nothing and says since when.
    let again = db.run(&[
        "pause",
        "relay-outbox",
        "--reason",
        "again",
        "--actor",
        "bob",
    ]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stdout
            .starts_with("relay-outbox was already paused since ")
            && again.stdout.contains(&format!(
                "by alice (database user {me}): Kafka incident INC-42; nothing changed"
            )),
        "{}",
        again.stdout
    );

    let resumed = db.run(&[
        "resume",
        "relay-outbox",
        "--reason",
        "Kafka is back",
        "--actor",
        "bob",
        "--json",
    ]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    let resumed: Value = serde_json::from_str(resumed.stdout.trim()).unwrap();
    assert_eq!(resumed["Changed"], true);
    assert_eq!(resumed["Pause"]["Reason"], "Kafka incident INC-42");

    let relay = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(relay.code, 0, "{}", relay.stderr);
    let result: Value = serde_json::from_str(relay.stdout.trim()).unwrap();
    assert_eq!(result["Published"], 4);
    assert!(result.get("Paused").is_none(), "{result}");
    assert_eq!(
        consume(&brokers, &topic, 6, 4, std::time::Duration::from_secs(20)).len(),
        4
    );

    assert_eq!(
        ops_rows(&mut c),
        vec![
            (
                "pause".to_owned(),
                "relay-outbox".to_owned(),
                format!("alice (database user {me})"),
                "Kafka incident INC-42".to_owned()
            ),
            (
                "resume".to_owned(),
                "relay-outbox".to_owned(),
                format!("bob (database user {me})"),
                "Kafka is back".to_owned()
            ),
        ]
    );
    let not_paused = db.run(&["resume", "relay-outbox", "--reason", "twice"]);
    assert_eq!(not_paused.code, 0);
    assert_eq!(
        not_paused.stdout,
        "relay-outbox was not paused; nothing changed\n"
    );
    assert_eq!(ops_rows(&mut c).len(), 2);
}

#[test]
fn a_paused_cycle_expires_nothing_and_exits_0_at_once() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed(&mut c, &[Seed::reserved(-60), Seed::booked(-60)]);
    let run = db.run(&[
        "pause",
        "run-once",
        "--reason",
        "data incident: bad deadlines imported",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("run-once is paused since ")
            && run.stderr.contains("data incident: bad deadlines imported; doing nothing until `booking-expire resume run-once`"),
        "{}",
        run.stderr
    );
    let result: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["ReserveExpiredCount"], 0);
    assert_eq!(result["BookingExpiredCount"], 0);
    assert_eq!(result["Paused"]["Command"], "run-once");
    for id in &ids {
        assert_ne!(status_of(&mut c, *id), "ReserveExpired");
    }
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 0);

    let run = db.run(&["resume", "run-once", "--reason", "deadlines repaired"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(db.run_once(&[]).counts(), (1, 1, 0, 0));
}

#[test]
fn bad_pause_commands_are_usage_errors_naming_the_flag() {
    let db = TestDb::new();
    let run = db.run(&["pause", "relay-outbox"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(run.stderr.contains("--reason <TEXT>"), "{}", run.stderr);
    let run = db.run(&["pause", "dry-run", "--reason", "x"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains("invalid value 'dry-run'")
            && run
                .stderr
                .contains("[possible values: run-once, relay-outbox]"),
        "{}",
        run.stderr
    );
    let run = db.run(&["pause", "run-once", "--reason", "  "]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains("--reason <TEXT>': must not be empty"),
        "{}",
        run.stderr
    );
    assert_eq!(
        count(
            &mut db.client(),
            "SELECT count(*) FROM crm.booking_expiration_pause"
        ),
        0
    );
}

#[test]
fn only_the_operator_role_may_switch_pauses() {
    let db = TestDb::new();
    let mut admin = db.client();
    let operator_role = LoginRole::member_of(&db, "op", "crm_booking_expiration_operator");
    let worker_role = LoginRole::member_of(&db, "wk", "crm_booking_expiration_worker");
    let (operator, worker) = (operator_role.name.clone(), worker_role.name.clone());
    let as_role = |role: &str, args: &[&str]| {
        let mut cmd = db.command(args);
        cmd.env("DATABASE_URL", with_user(&db.url, role));
        Run::of(cmd.output().unwrap())
    };
    let run = as_role(&worker, &["pause", "run-once", "--reason", "x"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "role {worker} lacks privileges for pause and resume: INSERT on \
             crm.booking_expiration_pause, DELETE on crm.booking_expiration_pause, INSERT on \
             crm.booking_expiration_operations (GRANT crm_booking_expiration_operator TO {worker}; \
             see sql/009_operations.sql)"
        )),
        "{}",
        run.stderr
    );
    let run = as_role(&operator, &["pause", "run-once", "--reason", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The worker reads its switch under its own role.
    let run = as_role(&worker, &["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("run-once is paused since"),
        "{}",
        run.stderr
    );
    let run = as_role(&operator, &["resume", "run-once", "--reason", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Both roles can be dropped afterwards (the operator's with what it was granted).
    drop((operator_role, worker_role));
    let left = admin
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)",
            &[&operator, &worker],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(left, 0, "{operator} and {worker} dropped");
}

/// A gate on the cycle's batch write: once more than `after` audit rows (committed, plus
/// the batch's own) exist, each batch's write waits for advisory lock `key`, which the
/// returned session holds until it is dropped or unlocks it. The batches before pass.
fn gate_after(db: &TestDb, key: i64, after: i64) -> postgres::Client {
    let mut gate = db.client();
    gate.batch_execute(&format!(
        "CREATE FUNCTION crm.gate_after() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF (SELECT count(*) FROM crm.booking_audit) > {after} THEN
             PERFORM pg_advisory_xact_lock({key});
           END IF;
           RETURN NULL;
         END $$;
         CREATE TRIGGER gate_after AFTER INSERT ON crm.booking_audit
           FOR EACH STATEMENT EXECUTE FUNCTION crm.gate_after();
         SELECT pg_advisory_lock({key});"
    ))
    .unwrap();
    gate
}

/// Sessions of the job on `db` waiting for a lock in the batch write.
fn writes_waiting(c: &mut postgres::Client, db: &TestDb) -> i64 {
    count(
        c,
        &format!(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = '{}' AND application_name = 'booking-expire'
                AND wait_event_type = 'Lock' AND strpos(query, 'crm.booking_audit') > 0",
            db.name
        ),
    )
}

fn expired(c: &mut postgres::Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.bookings WHERE expired_at IS NOT NULL",
    )
}

#[test]
fn a_pause_stops_a_working_cycle_at_the_next_batch_boundary_and_pause_waits_for_it() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 300, |i| Seed::booked(-600 - i as i64));
    // Five batches of 10 commit; the sixth waits in its write, in flight.
    let mut gate = gate_after(&db, 7_001, 50);
    let cycle = Background::start(db.command(&[
        "run-once",
        "--batch-size",
        "10",
        "--max-batches",
        "1000",
        "--deadline",
        "2m",
    ]));
    wait_until(
        Duration::from_secs(30),
        "the sixth batch at the gate",
        || writes_waiting(&mut c, &db) == 1,
    );
    let before_pause = expired(&mut c);
    assert_eq!(before_pause, 50);

    let pause = Background::start(db.command(&[
        "pause",
        "run-once",
        "--reason",
        "INC-7: bad deadlines imported",
        "--actor",
        "alice",
        "--wait",
        "5m",
        "--json",
    ]));
    // Committed, and `pause` has looked at the working runs once (its session's last
    // statement is the read of pg_locks).
    wait_until(
        Duration::from_secs(30),
        "the pause to look at the work",
        || {
            count(
                &mut c,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = '{}' AND strpos(query, 'FROM pg_catalog.pg_locks l') > 0
                    AND pid <> pg_backend_pid()",
                    db.name
                ),
            ) == 1
        },
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_expiration_pause"),
        1
    );
    // The pause is in force: the batch in flight commits, no other batch starts.
    gate.batch_execute("SELECT pg_advisory_unlock(7001)")
        .unwrap();

    let cycle = cycle.wait();
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    let result: Value = serde_json::from_str(cycle.stdout.trim()).unwrap();
    assert_eq!(result["BookingExpiredCount"], 60, "{result}");
    assert_eq!(result["Paused"]["Reason"], "INC-7: bad deadlines imported");
    assert!(
        cycle
            .stderr
            .contains("run-once paused while working, since ")
            && cycle.stderr.contains(
                "INC-7: bad deadlines imported; stopped at the batch boundary: no batch started \
                 after it; the 60 bookings expired before stay expired; doing nothing until \
                 `booking-expire resume run-once`"
            ),
        "{}",
        cycle.stderr
    );
    // Whole batches only, the one in flight the last: 240 of the 300 are left.
    let after = expired(&mut c);
    assert_eq!(after, before_pause + 10);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), after);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status = 'Booked'"
        ),
        300 - after
    );

    let pause = pause.wait();
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    let outcome: Value = serde_json::from_str(pause.stdout.trim()).unwrap();
    assert_eq!(outcome["Changed"], true);
    assert_eq!(outcome["Working"]["AtPause"], 1, "{outcome}");
    assert_eq!(outcome["Working"]["StillWorking"], serde_json::json!([]));

    // Nothing works now, and a new run does nothing.
    let again = db.run(&["pause", "run-once", "--reason", "again"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stdout
            .ends_with("; nothing changed; no run of it was working\n"),
        "{}",
        again.stdout
    );
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("run-once is paused since "),
        "{}",
        run.stderr
    );
    assert_eq!(expired(&mut c), after);
}

#[test]
fn a_pause_stops_both_sessions_of_a_catch_up_and_pause_says_what_still_works() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 400, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600 - i as i64)
        } else {
            Seed::booked(-600 - i as i64)
        }
    });
    let mut gate = gate_after(&db, 7_002, 60);
    let cycle = Background::start(db.command(&[
        "run-once",
        "--batch-size",
        "10",
        "--max-batches",
        "1000",
        "--deadline",
        "2m",
    ]));
    // Both phases, each on its session, wait at the gate with a batch in flight.
    wait_until(Duration::from_secs(30), "both sessions at the gate", || {
        writes_waiting(&mut c, &db) == 2
    });
    let before_pause = expired(&mut c);

    // The cycle cannot pass the gate: after a short wait `pause` says what still works.
    let pause = db.run(&[
        "pause", "run-once", "--reason", "INC-8", "--actor", "bob", "--wait", "200ms",
    ]);
    assert_eq!(pause.code, 1, "{}", pause.stderr);
    assert!(
        pause
            .stdout
            .contains("; 1 run still finishing after waiting 200ms (session PID ")
            && pause
                .stdout
                .contains("): it stops after its batch in flight, at the latest by "),
        "{}",
        pause.stdout
    );
    assert!(
        pause
            .stderr
            .contains("run-once is paused, but 1 run of it is still working after --wait 200ms"),
        "{}",
        pause.stderr
    );
    gate.batch_execute("SELECT pg_advisory_unlock(7002)")
        .unwrap();

    let cycle = cycle.wait();
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    assert!(
        cycle
            .stderr
            .contains("both phases have a backlog: the Booking phase goes on on a second session"),
        "{}",
        cycle.stderr
    );
    let result: Value = serde_json::from_str(cycle.stdout.trim()).unwrap();
    assert_eq!(result["Paused"]["Reason"], "INC-8");
    let reserve = result["ReserveExpiredCount"].as_i64().unwrap();
    let booking = result["BookingExpiredCount"].as_i64().unwrap();
    // The two batches in flight committed; neither session started another.
    assert_eq!(reserve + booking, before_pause + 20, "{result}");
    assert_eq!((reserve % 10, booking % 10), (0, 0), "{result}");
    assert_eq!(expired(&mut c), reserve + booking);
    assert!(reserve + booking < 400);

    // Once it has stopped, `pause` says nothing works.
    let again = db.run(&["pause", "run-once", "--reason", "INC-8", "--wait", "30s"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.ends_with("no run of it was working\n"),
        "{}",
        again.stdout
    );
}

#[test]
fn a_pause_stops_a_following_relay_before_its_next_batch() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let relay = Background::start(db.command(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--follow",
        "2m",
        "--batch-size",
        "5",
    ]));
    // A steady trickle of events, one commit at a time, until the test is done.
    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let stop = Arc::clone(&stop);
        let mut w = db.client();
        let topic = topic.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                w.execute(
                    "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                             headers, occurred_at)
                     VALUES (gen_random_uuid(), 'Booking', gen_random_uuid()::text,
                             'pin.crm.booking-expired', $1, '{}'::jsonb, '{}'::jsonb, now())",
                    &[&topic],
                )
                .unwrap();
                // The trickle's pace (the workload), not a wait for anything.
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let published = |c: &mut postgres::Client| {
        count(
            c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        )
    };
    wait_until(
        Duration::from_secs(60),
        "the relay to send 30 events",
        || published(&mut c) >= 30,
    );

    let pause = db.run(&[
        "pause",
        "relay-outbox",
        "--reason",
        "INC-9: broker upgrade",
        "--wait",
        "0s",
    ]);
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    // Every row written from here on was written after the pause committed.
    let last_before: i64 = c
        .query_one("SELECT coalesce(max(seq), 0) FROM crm.outbox", &[])
        .unwrap()
        .get(0);
    let published_at_pause = published(&mut c);

    let waited = db.run(&["pause", "relay-outbox", "--reason", "INC-9", "--wait", "1m"]);
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    assert!(
        waited.stdout.ends_with("no run of it was working\n")
            || waited.stdout.contains("the 1 run working stopped within "),
        "{}",
        waited.stdout
    );
    let relay = relay.wait();
    // More rows keep coming after the relay stopped: they stay pending.
    wait_until(
        Duration::from_secs(30),
        "rows written after the pause",
        || {
            count(
                &mut c,
                &format!("SELECT count(*) FROM crm.outbox WHERE seq > {last_before}"),
            ) >= 20
        },
    );
    stop.store(true, Ordering::Relaxed);
    trickle.join().unwrap();

    assert_eq!(relay.code, 0, "{}", relay.stderr);
    let result: Value = serde_json::from_str(relay.stdout.trim()).unwrap();
    assert_eq!(result["Paused"]["Reason"], "INC-9: broker upgrade");
    assert!(
        relay.stderr.contains("relay-outbox paused while working, since ")
            && relay.stderr.contains(
                "INC-9: broker upgrade; stopped at the batch boundary: the fetched batch is not sent"
            ),
        "{}",
        relay.stderr
    );
    // No row written after the pause went out; of the rows before it, at most the
    // batches in flight (3 × 5) were marked after it.
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.outbox WHERE seq > {last_before} AND published_at IS NOT NULL"
            )
        ),
        0
    );
    let final_published = published(&mut c);
    assert!(
        final_published - published_at_pause <= 15,
        "{published_at_pause} published at the pause, {final_published} in the end"
    );
    assert_eq!(result["Published"].as_i64().unwrap(), final_published);
    // What the topic holds is exactly what was marked: the batch fetched when the
    // relay saw the pause was not sent.
    let marked: std::collections::BTreeSet<String> = c
        .query(
            "SELECT id::text FROM crm.outbox WHERE published_at IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let sent: std::collections::BTreeSet<String> =
        consume(&brokers, &topic, 6, marked.len(), Duration::from_secs(30))
            .into_iter()
            .map(|m| m.headers["ce_id"].clone())
            .collect();
    assert_eq!(sent, marked);
}
