//! The job as a guest in the CRM's database: sessions the owners make read-only, cut,
//! time out or limit. Every writer checks that its session can write before any work;
//! a `--follow` relay reconnects when its session drops; `run-once` makes do with one
//! connection; output to a closed pipe never aborts.

mod common;

use std::time::Duration;

use common::kafka::*;
use common::*;

/// Overdue bookings of both phases, and pending outbox rows on `topic` (written by a
/// first run-once before the database was made read-only).
fn with_work(db: &TestDb, topic: &str) -> postgres::Client {
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-100), Seed::booked(-100)]);
    db.run_once(&[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    seed(&mut c, &[Seed::reserved(-50), Seed::booked(-50)]);
    c
}

fn read_only_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("booking-expire: error:"))
        .collect()
}

#[test]
fn a_read_only_database_stops_every_writer_before_any_work_and_nothing_is_sent() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 1, &[]);
    let db = TestDb::new();
    let mut c = with_work(&db, &topic);
    let before = checksum(&mut c);
    let pending = count(
        &mut c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    );
    assert_eq!(pending, 2);
    let outbox_id: uuid::Uuid = c
        .query_one("SELECT id FROM crm.outbox LIMIT 1", &[])
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "ALTER DATABASE {} SET default_transaction_read_only = on",
        db.name
    ))
    .unwrap();
    let id = outbox_id.to_string();
    let commands: [(&str, Vec<&str>); 5] = [
        ("run-once", vec!["run-once"]),
        (
            "relay-outbox",
            vec!["relay-outbox", "--brokers", &brokers, "--follow", "2s"],
        ),
        (
            "republish",
            vec![
                "republish",
                "--ids",
                &id,
                "--reason",
                "test",
                "--actor",
                "t",
            ],
        ),
        (
            "pause",
            vec!["pause", "run-once", "--reason", "test", "--actor", "t"],
        ),
        (
            "resume",
            vec!["resume", "run-once", "--reason", "test", "--actor", "t"],
        ),
    ];
    for (name, args) in commands {
        let run = db.run(&args);
        assert_eq!(run.code, 75, "{name}:\n{}", run.stderr);
        let errors = read_only_lines(&run.stderr);
        assert_eq!(errors.len(), 1, "{name}:\n{}", run.stderr);
        let line = errors[0];
        assert!(
            line.contains(&format!("{name} writes, but the server at 127.0.0.1:"))
                && line.contains("is read-only (transaction_read_only is on")
                && line.contains("target_session_attrs=read-write"),
            "{name}: {line}"
        );
    }
    // Nothing changed, nothing reached Kafka.
    assert_eq!(checksum(&mut c), before);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        pending
    );
    assert!(consume(&brokers, &topic, 1, 1, Duration::from_secs(3)).is_empty());

    // The read-only reports still work.
    let backlog = db.run(&["backlog"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
}
