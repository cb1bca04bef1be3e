//! `relay-outbox` against a real Apache Kafka 4.x broker, read back by a real consumer.

use crate::common;
use crate::postgres;

use std::time::{Duration, Instant};

use common::kafka::*;
use common::*;
use serde_json::json;
use uuid::Uuid;

pub(crate) const TOPIC: &str = "pin.crm.booking-expired.v1";

pub(crate) fn relay(db: &TestDb, brokers: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    db.run(&args)
}

pub(crate) fn relay_ok(db: &TestDb, brokers: &str, extra: &[&str]) -> serde_json::Value {
    let run = relay(db, brokers, extra);
    assert_eq!(run.code, 0, "relay failed:\n{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

/// Expires `n` bookings with run-once and points their outbox rows at `topic`.
pub(crate) fn expire_into(db: &TestDb, n: usize, topic: &str) -> CycleResult {
    let mut c = db.client();
    seed_many(&mut c, n, |i| {
        if i % 2 == 0 {
            Seed::reserved(-100 - i as i64)
        } else {
            Seed::booked(-100 - i as i64)
        }
    });
    let result = db.run_once(&["--batch-size", "1000"]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    result
}

/// Outbox rows written directly, as another CRM writer would: the listed columns only.
pub(crate) fn insert_outbox(
    c: &mut postgres::Client,
    topic: &str,
    key: &str,
    payload: &serde_json::Value,
) -> Uuid {
    let id = Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, $4)",
        &[&id, &key, &topic, payload],
    )
    .unwrap();
    id
}

/// Small events `{"n": n}` for `ns`, each under a key of its own.
fn insert_small(c: &mut postgres::Client, topic: &str, ns: std::ops::Range<i32>) -> Vec<Uuid> {
    ns.map(|n| insert_outbox(c, topic, &Uuid::new_v4().to_string(), &json!({"n": n})))
        .collect()
}

pub(crate) fn pending(c: &mut postgres::Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    )
}

#[test]
fn murmur2_matches_kafkas_java_test_vectors() {
    // Kafka's UtilsTest.testMurmur2.
    for (input, want) in [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        ("abc", 479470107),
    ] {
        assert_eq!(java_murmur2(input.as_bytes()), want, "{input:?}");
    }
}

#[test]
fn a_rolled_back_cycle_publishes_nothing() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 5, |_| Seed::booked(-60));
    // The write blocks on a lock until its lock_timeout: the batch rolls back.
    c.batch_execute(
        "CREATE FUNCTION crm.wait_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock(77); RETURN NULL; END $$;
         CREATE TRIGGER wait_for_test AFTER INSERT ON crm.outbox
           FOR EACH STATEMENT EXECUTE FUNCTION crm.wait_for_test();",
    )
    .unwrap();
    let mut blocker = db.client();
    blocker
        .batch_execute("SELECT pg_advisory_lock(77)")
        .unwrap();
    let run = db.run(&["run-once", "--lock-timeout", "200ms"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 0);
    let result = relay_ok(&db, &brokers, &[]);
    assert_eq!(result["Published"], json!(0));
    assert_eq!(records_on(&brokers, &topic, 6), 0, "nothing sent");
}

#[test]
fn a_missing_topic_is_a_fast_clear_error_and_marks_nothing() {
    let brokers = shared_brokers();
    let topic = format!("{}-missing", unique_topic());
    let db = TestDb::new();
    let mut c = db.client();
    expire_into(&db, 3, &topic);
    let started = Instant::now();
    let run = relay(&db, &brokers, &[]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("Kafka topic {topic} does not exist")),
        "{}",
        run.stderr
    );
    // Behaviour: the topic check answers at once instead of waiting out librdkafka's
    // long metadata retries; 20 s tells the two apart under load.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not librdkafka's long metadata wait"
    );
    assert_eq!(pending(&mut c), 3);
}

#[test]
fn a_topic_with_another_partition_count_is_reported() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 3, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    expire_into(&db, 2, &topic);
    let run = relay(&db, &brokers, &[]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("Kafka topic {topic} has 3 partitions, expected 6")),
        "{}",
        run.stderr
    );
    assert_eq!(pending(&mut c), 2);
    // The rows back off (the first back-off is a second): as if that had passed.
    c.execute("UPDATE crm.outbox SET next_attempt_at = now()", &[])
        .unwrap();
    // Deliberately accepted.
    let result = relay_ok(&db, &brokers, &["--expected-partitions", "3"]);
    assert_eq!(result["Published"], json!(2));
}

#[test]
fn two_relays_at_once_one_works_the_other_exits_0() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    expire_into(&db, 4, &topic);
    // The first follows until it is stopped below (the window only bounds a relay left
    // behind), so the second starts while it holds the lock however slow a loaded
    // machine makes either one's start.
    let first = spawn(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "600s"]));
    wait_until(
        Duration::from_secs(20),
        "the first relay to take the lock",
        || {
            count(
                &mut c,
                // The relay's singleton lock (one bigint key) in this test's database.
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                    AND objsubid = 1
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            ) == 1
        },
    );
    let second = relay(&db, &brokers, &[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let skipped: serde_json::Value = serde_json::from_str(second.stdout.trim()).unwrap();
    assert_eq!(skipped["Skipped"], json!(true));
    assert_eq!(skipped["Published"], json!(0));
    assert!(
        second
            .stderr
            .contains("another relay holds the outbox lock"),
        "{}",
        second.stderr
    );
    // The first sent and marked every row; stopped now, it reports what it did (SIGTERM:
    // exit 143).
    wait_until(
        Duration::from_secs(90),
        "the first relay to mark the 4 rows",
        || pending(&mut c) == 0,
    );
    send_signal(&first, "TERM");
    let first = Run::of(first.wait_with_output().unwrap());
    assert_eq!(first.code, 143, "{}", first.stderr);
    let worked: serde_json::Value = serde_json::from_str(first.stdout.trim()).unwrap();
    assert_eq!(worked["Published"], json!(4));
    assert_eq!(worked["Skipped"], json!(false));
    assert_eq!(records_on(&brokers, &topic, 6), 4, "each row sent once");
}

#[test]
fn an_oversized_message_is_marked_failed_while_the_rest_deliver() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let small = insert_small(&mut c, &topic, 0..3);
    let huge = insert_outbox(
        &mut c,
        &topic,
        &Uuid::new_v4().to_string(),
        &json!({"blob": "x".repeat(2 * 1024 * 1024)}),
    );
    let after = insert_small(&mut c, &topic, 3..5);

    let result = relay_ok(&db, &brokers, &[]);
    assert_eq!(result["Published"], json!(5));
    assert_eq!(result["Failed"], json!(1));
    let row = c
        .query_one(
            "SELECT published_at IS NULL, failed_at IS NOT NULL, attempts, last_error FROM crm.outbox WHERE id = $1",
            &[&huge],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1));
    assert_eq!(row.get::<_, i32>(2), 1);
    let error: String = row.get(3);
    let size: i32 = c
        .query_one(
            "SELECT octet_length(payload::text) + octet_length(headers::text) FROM crm.outbox WHERE id = $1",
            &[&huge],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        error,
        format!(
            "the message is too large: its payload and headers are {size} bytes, the largest \
             message is 1000000 bytes (--max-message-bytes); it was never read"
        )
    );
    let got = consume(&brokers, &topic, 6, 5, Duration::from_secs(90));
    let mut ids: Vec<Uuid> = got
        .iter()
        .map(|m| m.headers["ce_id"].parse().unwrap())
        .collect();
    ids.sort();
    let mut want: Vec<Uuid> = small.into_iter().chain(after).collect();
    want.sort();
    assert_eq!(ids, want);
    // The failed row is not retried.
    assert_eq!(relay_ok(&db, &brokers, &[])["Failed"], json!(0));
}

#[test]
fn a_following_relay_publishes_a_new_commit_without_a_restart() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    // Stopped by SIGTERM below: the window only bounds a run left behind.
    let follower = spawn(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "300s"]));
    wait_until(Duration::from_secs(90), "the relay to listen", || {
        count(
            &mut c,
            // The relay's singleton lock (one bigint key) in this test's database.
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
                AND objsubid = 1
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        ) == 1
    });
    // A cycle commits while the relay waits.
    let id = insert_small(&mut c, &topic, 1..2)[0];
    wait_until(
        Duration::from_secs(90),
        "the new row to be published",
        || {
            count(
                &mut c,
                "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
            ) == 1
        },
    );
    let got = consume(&brokers, &topic, 6, 1, Duration::from_secs(90));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["ce_id"], id.to_string());
    send_signal(&follower, "TERM");
    let run = Run::of(follower.wait_with_output().unwrap());
    assert_eq!(run.code, 143, "{}", run.stderr);
}

#[test]
fn published_rows_past_the_retention_are_purged_in_batches() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    insert_small(&mut c, &topic, 0..9);
    // 5 published 8 days ago, 2 published yesterday, 1 failed long ago, 1 pending.
    c.batch_execute(
        "WITH o AS (SELECT id, row_number() OVER (ORDER BY seq) AS n FROM crm.outbox)
         UPDATE crm.outbox x SET
           published_at = CASE WHEN o.n <= 5 THEN now() - interval '8 days'
                               WHEN o.n <= 7 THEN now() - interval '1 day' END,
           failed_at = CASE WHEN o.n = 8 THEN now() - interval '30 days' END
          FROM o WHERE o.id = x.id",
    )
    .unwrap();
    let result = relay_ok(&db, &brokers, &["--purge-batch-size", "2"]);
    assert_eq!(result["Purged"], json!(5));
    assert_eq!(result["Published"], json!(1));
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 4);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE failed_at IS NOT NULL"
        ),
        1
    );
    // With a retention of one hour, yesterday's two go; the one just published stays.
    let kept = relay_ok(&db, &brokers, &["--retention", "1h"]);
    assert_eq!(kept["Purged"], json!(2));
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 2);
}

#[test]
fn relay_configuration_errors_exit_78_and_never_show_the_password() {
    let db = TestDb::new();
    let cases: [(&[&str], &str); 4] = [
        (&[], "set --brokers or KAFKA_BROKERS"),
        (
            &["--brokers", "kafka:abc"],
            "invalid --brokers / KAFKA_BROKERS entry \"kafka:abc\"",
        ),
        (
            &[
                "--brokers",
                "127.0.0.1:9092",
                "--kafka-security-protocol",
                "sasl_ssl",
                "--kafka-username",
                "relay",
            ],
            "set --kafka-username / KAFKA_USERNAME and KAFKA_PASSWORD",
        ),
        (
            &[
                "--brokers",
                "127.0.0.1:9092",
                "--kafka-security-protocol",
                "ssl",
                "--kafka-ca-file",
                "/nonexistent/ca.pem",
            ],
            "cannot read the Kafka CA file /nonexistent/ca.pem",
        ),
    ];
    for (args, needle) in cases {
        let run = db.run(&[&["relay-outbox"][..], args].concat());
        assert_eq!(run.code, 78, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "{args:?}: no {needle:?} in {}",
            run.stderr
        );
    }
    // A SASL password never appears, whatever happens.
    let secret = "kafka-S3cret-pw";
    let run = Run::of(
        db.command(&[
            "relay-outbox",
            "--brokers",
            "127.0.0.1:1",
            "--kafka-security-protocol",
            "sasl_plaintext",
            "--kafka-username",
            "relay",
        ])
        .env("KAFKA_PASSWORD", secret)
        .env("RUST_LOG", "debug")
        .output()
        .unwrap(),
    );
    assert!(
        !run.stderr.contains(secret) && !run.stdout.contains(secret),
        "{}",
        run.stderr
    );
}
