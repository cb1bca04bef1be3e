//! Pause switches (`pause`/`resume`): a paused command exits 0 at once saying since when,
//! by whom and why, and does nothing; `backlog` shows the pause; `resume` lets the next
//! run work; every switch is in the operations trail.

mod common;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use serde_json::Value;

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
    let operator = format!("op_{}", uuid::Uuid::new_v4().simple());
    let worker = format!("wk_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!(
            "CREATE ROLE {operator} LOGIN IN ROLE crm_booking_expiration_operator;
             CREATE ROLE {worker} LOGIN IN ROLE crm_booking_expiration_worker;"
        ))
        .unwrap();
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
    drop(admin);
    let mut admin = db.client();
    admin
        .batch_execute(&format!(
            "{} DROP ROLE {operator}; DROP ROLE {worker};",
            drop_owned_sql(&operator)
        ))
        .unwrap();
}
