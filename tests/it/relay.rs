//! `relay-outbox` against a real Apache Kafka 4.x broker, read back by a real consumer.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::kafka::*;
use common::*;
use serde_json::json;
use uuid::Uuid;

const TOPIC: &str = "pin.crm.booking-expired.v1";

fn relay(db: &TestDb, brokers: &str, extra: &[&str]) -> Run {
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

fn relay_ok(db: &TestDb, brokers: &str, extra: &[&str]) -> serde_json::Value {
    let run = relay(db, brokers, extra);
    assert_eq!(run.code, 0, "relay failed:\n{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

/// Expires `n` bookings with run-once and points their outbox rows at `topic`.
fn expire_into(db: &TestDb, n: usize, topic: &str) -> CycleResult {
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
fn insert_outbox(
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

fn pending(c: &mut postgres::Client) -> i64 {
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
fn contract_exactly_one_message_per_expiry_with_key_partition_headers_and_payload() {
    let broker = OwnBroker::start();
    create_topic(&broker.brokers, TOPIC, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 40, |i| {
        if i % 2 == 0 {
            Seed::new("AwaitingPayment", Some(-50 - i as i64), None)
        } else {
            Seed::booked(-50 - i as i64)
        }
    });
    let cycle = db.run_once(&[]);
    assert_eq!((cycle.reserve, cycle.booking), (20, 20));

    let result = relay_ok(&db, &broker.brokers, &[]);
    assert_eq!(result["Published"], json!(40));
    assert_eq!(result["Failed"], json!(0));
    assert_eq!(result["Skipped"], json!(false));
    assert_eq!(pending(&mut c), 0);

    let got = consume(&broker.brokers, TOPIC, 6, 40, Duration::from_secs(30));
    assert_eq!(got.len(), 40, "exactly one message per expired booking");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/contracts/booking-expired.v1.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    let outbox: HashMap<String, (Uuid, serde_json::Value)> = c
        .query("SELECT aggregateid, id, payload FROM crm.outbox", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let mut keys = std::collections::HashSet::new();
    for m in &got {
        assert!(
            keys.insert(m.key.clone()),
            "one message per booking: {}",
            m.key
        );
        let booking_id: Uuid = m.key.parse().unwrap();
        assert_eq!(
            m.key,
            booking_id.to_string(),
            "canonical lowercase hyphenated key"
        );
        assert_eq!(
            m.partition,
            java_partition(&m.key, 6),
            "Java murmur2 partition of {}",
            m.key
        );
        let (message_id, payload) = &outbox[&m.key];
        assert_eq!(&m.payload, payload);
        if let Err(e) = validator.validate(&m.payload) {
            panic!("payload violates the contract schema: {e}: {}", m.payload);
        }
        let b = booking(&mut c, booking_id);
        let phase = if b.status == "ReserveExpired" {
            "Reserve"
        } else {
            "Booking"
        };
        assert_eq!(
            m.payload,
            json!({
                "BookingId": b.id.to_string(),
                "TenantId": b.tenant_id.to_string(),
                "DealId": b.deal_id.to_string(),
                "PropertyObjectId": b.property_object_id.to_string(),
                "Phase": phase,
                "ExpiredAt": b.expired_at.unwrap().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            })
        );
        let want: BTreeMap<String, String> = [
            ("ce_specversion", "1.0".to_owned()),
            ("ce_id", message_id.to_string()),
            ("ce_type", "pin.crm.booking-expired".to_owned()),
            ("ce_source", "/pin/crm/booking-expiration".to_owned()),
            ("ce_subject", m.key.clone()),
            (
                "ce_time",
                m.payload["ExpiredAt"].as_str().unwrap().to_owned(),
            ),
            ("content-type", "application/json".to_owned()),
            ("ce_contractversion", "1".to_owned()),
            ("ce_correlationid", cycle.run_id.to_string()),
            ("traceparent", m.headers["traceparent"].clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(m.headers, want);
        let tp: Vec<&str> = m.headers["traceparent"].split('-').collect();
        assert_eq!(
            (tp[0], tp[1], tp[3]),
            ("00", cycle.run_id.simple().to_string().as_str(), "01")
        );
        assert_eq!(tp[2].len(), 16);
    }

    // A second relay sends nothing new.
    let again = relay_ok(&db, &broker.brokers, &[]);
    assert_eq!(again["Published"], json!(0));
    assert_eq!(
        consume(&broker.brokers, TOPIC, 6, 41, Duration::from_secs(3)).len(),
        40
    );
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
    assert!(consume(&brokers, &topic, 6, 1, Duration::from_secs(3)).is_empty());
}

#[test]
fn broker_down_marks_nothing_and_a_later_run_delivers_everything_in_key_order() {
    let broker = OwnBroker::start();
    let topic = unique_topic();
    create_topic(&broker.brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    expire_into(&db, 10, &topic);
    // Three events of one key, written by another writer, in this order.
    let key = Uuid::new_v4().to_string();
    let ordered: Vec<Uuid> = (0..3)
        .map(|n| insert_outbox(&mut c, &topic, &key, &json!({"n": n})))
        .collect();
    broker.stop();

    let run = relay(&db, &broker.brokers, &[]);
    assert_eq!(run.code, 69, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("cannot reach Kafka at {}", broker.brokers)),
        "{}",
        run.stderr
    );
    // The result line still comes, with the reason.
    let result: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["Published"], json!(0));
    assert!(
        result["StoppedEarly"]
            .as_str()
            .unwrap()
            .contains(&format!("cannot reach Kafka at {}", broker.brokers)),
        "{}",
        run.stdout
    );
    assert_eq!(pending(&mut c), 13, "nothing marked published");

    broker.restart();
    let result = relay_ok(&db, &broker.brokers, &[]);
    assert_eq!(result["Published"], json!(13));
    assert_eq!(pending(&mut c), 0);
    let got = consume(&broker.brokers, &topic, 6, 13, Duration::from_secs(30));
    assert_eq!(got.len(), 13);
    let same_key: Vec<Uuid> = got
        .iter()
        .filter(|m| m.key == key)
        .map(|m| m.headers["ce_id"].parse().unwrap())
        .collect();
    assert_eq!(same_key, ordered, "per-key order kept");
}

#[test]
fn broker_killed_mid_relay_loses_nothing_and_duplicates_only_by_ce_id() {
    let broker = OwnBroker::start();
    let topic = unique_topic();
    create_topic(&broker.brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    // 30,000 pending rows, written as another writer would.
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired', $1,
                jsonb_build_object('n', i)
           FROM generate_series(1, 30000) i",
        &[&topic],
    )
    .unwrap();
    let child = Background::start(db.command(&[
        "relay-outbox",
        "--brokers",
        &broker.brokers,
        "--batch-size",
        "500",
        "--message-timeout",
        "3s",
        "--deadline",
        "10m",
    ]));
    wait_until(Duration::from_secs(60), "some rows published", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) > 0
    });
    broker.kill();
    let run = child.wait();
    assert!(
        run.code == 69 || run.code == 75,
        "exit {}: {}",
        run.code,
        run.stderr
    );
    let marked_before = marked_published(&mut c);
    assert!(marked_before.len() < 30_000, "killed mid-relay");
    // A broker outage is nothing the rows did: none backs off or counts a failure.
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE failures > 0 OR next_attempt_at IS NOT NULL"
        ),
        0
    );

    broker.restart();
    let result = relay_ok(
        &db,
        &broker.brokers,
        &["--batch-size", "5000", "--deadline", "10m"],
    );
    assert_eq!(
        result["Published"].as_u64().unwrap() as usize + marked_before.len(),
        30_000
    );
    assert_eq!(pending(&mut c), 0);

    let got = consume(&broker.brokers, &topic, 6, 30_000, Duration::from_secs(90));
    let mut by_id: HashMap<String, Vec<&Received>> = HashMap::new();
    for m in &got {
        by_id.entry(m.headers["ce_id"].clone()).or_default().push(m);
    }
    assert_eq!(by_id.len(), 30_000, "every row reached the topic");
    for id in &marked_before {
        assert!(
            by_id.contains_key(id),
            "a row marked published was really delivered: {id}"
        );
    }
    for copies in by_id.values() {
        let first = copies[0];
        assert!(
            copies
                .iter()
                .all(|m| m.key == first.key && m.payload == first.payload)
        );
    }
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
    // The first follows long enough that the second surely starts within its window,
    // however slow a loaded machine makes either one's start.
    let first = spawn(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "15s"]));
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
    let first = Run::of(first.wait_with_output().unwrap());
    assert_eq!(first.code, 0, "{}", first.stderr);
    let worked: serde_json::Value = serde_json::from_str(first.stdout.trim()).unwrap();
    assert_eq!(worked["Published"], json!(4));
    assert_eq!(
        consume(&brokers, &topic, 6, 5, Duration::from_secs(3)).len(),
        4
    );
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
    let got = consume(&brokers, &topic, 6, 5, Duration::from_secs(20));
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
    let follower = spawn(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "20s"]));
    wait_until(Duration::from_secs(20), "the relay to listen", || {
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
        Duration::from_secs(15),
        "the new row to be published",
        || {
            count(
                &mut c,
                "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
            ) == 1
        },
    );
    let got = consume(&brokers, &topic, 6, 1, Duration::from_secs(10));
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
