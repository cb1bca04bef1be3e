//! The relay's pipeline (a batch fetched and enqueued while the previous one waits for
//! its acknowledgements, marks on a session of their own) keeps the relay's guarantees:
//! per-key order within a topic across successive batches, each row sent once in a
//! run, and at least once when the relay dies between the broker's acknowledgement and
//! the mark. Against a real Apache Kafka broker.

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use common::kafka::*;
use common::*;
use serde_json::json;
use uuid::Uuid;

fn pending(c: &mut postgres::Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    )
}

#[test]
fn rows_of_one_key_in_successive_batches_are_sent_once_each_in_write_order() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    // Four keys with five rows each, between rows of keys of their own: with batches
    // of three, each key's rows fall in successive batches, the next fetched while the
    // previous one is in flight.
    let keys: Vec<String> = (0..4).map(|_| Uuid::new_v4().to_string()).collect();
    let mut written: HashMap<String, Vec<Uuid>> = HashMap::new();
    let mut n = 0;
    for _round in 0..5 {
        for key in &keys {
            n += 1;
            written
                .entry(key.clone())
                .or_default()
                .push(insert_outbox_row(&mut c, &topic, key, n));
            n += 1;
            insert_outbox_row(&mut c, &topic, &Uuid::new_v4().to_string(), n);
        }
    }
    let run = db.run(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--message-timeout",
        "5s",
        "--batch-size",
        "3",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(result["Published"], json!(40));
    assert_eq!(pending(&mut c), 0);

    let got = consume(&brokers, &topic, 6, 40, Duration::from_secs(90));
    assert_eq!(got.len(), 40, "each row sent once");
    let mut by_key: BTreeMap<String, Vec<(i32, i64, Uuid)>> = BTreeMap::new();
    for m in &got {
        let id: Uuid = m.headers["ce_id"].parse().unwrap();
        by_key
            .entry(m.key.clone())
            .or_default()
            .push((m.partition, m.offset, id));
    }
    for key in &keys {
        let mut seen = by_key[key].clone();
        seen.sort();
        let partitions: Vec<i32> = seen.iter().map(|s| s.0).collect();
        assert_eq!(partitions, vec![java_partition(key, 6); 5], "{key}");
        let order: Vec<Uuid> = seen.iter().map(|s| s.2).collect();
        assert_eq!(
            order, written[key],
            "{key}: the topic holds them in write order"
        );
        // The receipts the marks recorded say the same.
        let receipts: Vec<Uuid> = c
            .query(
                "SELECT id FROM crm.outbox WHERE aggregateid = $1 ORDER BY delivered_offset",
                &[key],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(receipts, written[key], "{key}: receipts in write order");
    }
}

#[test]
fn rows_held_for_a_topic_go_before_newer_rows_of_their_keys_when_a_batch_cannot_take_them_all() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    let db = TestDb::new();
    let mut c = db.client();
    let keys: Vec<String> = (0..4).map(|_| Uuid::new_v4().to_string()).collect();
    let mut written: HashMap<String, Vec<Uuid>> = HashMap::new();
    let mut write = |c: &mut postgres::Client, key: &str, n: i32| {
        let id = insert_outbox_row(c, &topic, key, n);
        written.entry(key.to_owned()).or_default().push(id);
    };
    // One row of each key while the topic is missing: the relay holds all four.
    for (n, key) in keys.iter().enumerate() {
        write(&mut c, key, n as i32);
    }
    let relay = |batch: &str| {
        db.run(&[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--message-timeout",
            "5s",
            "--batch-size",
            batch,
        ])
    };
    let run = relay("500");
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_exception WHERE reason = 'topic'"
        ),
        4
    );
    // A newer row of each key, the last two keys' first: with batches of two, the
    // first batch has room for two of the four held rows and takes the first two new
    // rows, which are of the keys whose held rows it left.
    for (n, key) in [&keys[2], &keys[3], &keys[0], &keys[1]]
        .into_iter()
        .enumerate()
    {
        write(&mut c, key, 10 + n as i32);
    }
    create_topic(&brokers, &topic, 6, &[]);
    let run = relay("2");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json_lines(&run.stdout)[0]["Published"], json!(8));
    let got = consume(&brokers, &topic, 6, 8, Duration::from_secs(90));
    assert_eq!(got.len(), 8, "each row sent once");
    let mut by_key: BTreeMap<&str, Vec<(i64, Uuid)>> = BTreeMap::new();
    for m in &got {
        by_key
            .entry(m.key.as_str())
            .or_default()
            .push((m.offset, m.headers["ce_id"].parse().unwrap()));
    }
    for key in &keys {
        let mut seen = by_key[key.as_str()].clone();
        seen.sort();
        let order: Vec<Uuid> = seen.iter().map(|s| s.1).collect();
        assert_eq!(order, written[key], "{key}: in write order");
    }
}

/// Rows of keys of their own on a new topic, and a session holding one row's lock (the
/// eighth's): the mark of the batch that sent that row (with the legacy marks, an
/// update of the rows) waits for it until `gate` ends its transaction.
struct Gated {
    brokers: String,
    topic: String,
    db: TestDb,
    c: postgres::Client,
    ids: Vec<Uuid>,
    gate: postgres::Client,
}

impl Gated {
    fn new(rows: i32) -> Self {
        let brokers = shared_brokers();
        let topic = unique_topic();
        create_topic(&brokers, &topic, 6, &[]);
        let db = TestDb::new();
        let mut c = db.client();
        let ids: Vec<Uuid> = (0..rows)
            .map(|n| insert_outbox_row(&mut c, &topic, &Uuid::new_v4().to_string(), n))
            .collect();
        let mut gate = db.client();
        gate.batch_execute("BEGIN").unwrap();
        gate.execute(
            "SELECT 1 FROM crm.outbox WHERE id = $1 FOR UPDATE",
            &[&ids[7]],
        )
        .unwrap();
        Gated {
            brokers,
            topic,
            db,
            c,
            ids,
            gate,
        }
    }
}

/// Waits until the relay's mark waits for the locked row ([`Gated`]).
fn wait_for_the_gated_mark(c: &mut postgres::Client) {
    wait_until(
        Duration::from_secs(90),
        "the mark waiting for the lock",
        || {
            count(
                c,
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND application_name = 'booking-expire'
                    AND wait_event_type = 'Lock' AND query LIKE 'UPDATE crm.outbox o%'",
            ) == 1
        },
    );
}

#[test]
fn a_relay_killed_after_the_acknowledgements_and_before_the_mark_sends_again() {
    // A session holding one row's lock: the mark of the batch waits for it.
    let Gated {
        brokers,
        topic,
        db,
        mut c,
        ids,
        mut gate,
    } = Gated::new(20);
    let mut relay = spawn(db.command(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--message-timeout",
        "5s",
        "--lock-timeout",
        "60s",
    ]));
    // Every message acknowledged (on the topic), the mark waiting for the lock.
    let got = consume(&brokers, &topic, 6, 20, Duration::from_secs(90));
    assert_eq!(got.len(), 20);
    wait_for_the_gated_mark(&mut c);
    relay.kill().unwrap();
    relay.wait().unwrap();
    // The server notices a dead client only when it next talks to it: the mark's
    // session is ended as the crash would have ended it had the statement not been
    // sent yet, before the lock is released.
    c.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'booking-expire'",
        &[],
    )
    .unwrap();
    wait_until(
        Duration::from_secs(90),
        "the killed relay's sessions gone",
        || {
            count(
                &mut c,
                "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'booking-expire'",
            ) == 0
        },
    );
    gate.batch_execute("ROLLBACK").unwrap();
    assert_eq!(pending(&mut c), 20, "nothing marked");

    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json_lines(&run.stdout)[0]["Published"], json!(20));
    assert_eq!(pending(&mut c), 0);
    // At least once: every event twice on the topic, under the same ce_id.
    let got = consume(&brokers, &topic, 6, 40, Duration::from_secs(90));
    let mut copies: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *copies.entry(m.headers["ce_id"].clone()).or_default() += 1;
    }
    assert_eq!(copies.len(), 20);
    assert!(copies.values().all(|&n| n == 2), "{copies:?}");
    for id in &ids {
        assert_eq!(copies[&id.to_string()], 2, "{id}");
    }
}

/// The mark session reads the next batch ahead while the relay settles the one before.
/// A read ahead that fails is logged once, and the run reads on its main session from
/// then on: it neither ends nor loses a row.
#[test]
fn a_read_ahead_that_fails_is_logged_and_the_run_reads_on_its_main_session() {
    // The first batch's mark waits for one row's lock; the mark session then has the
    // next batch's read queued behind it.
    let Gated {
        brokers,
        topic,
        db,
        mut c,
        ids,
        mut gate,
    } = Gated::new(200);
    let relay = Background::start(db.command(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--batch-size",
        "20",
        "--legacy-marks",
        "on",
        "--lock-timeout",
        "60s",
    ]));
    wait_for_the_gated_mark(&mut c);
    // The exceptions locked: the read ahead, next on the mark session, waits for them
    // once the mark is through. The main session reads nothing while reads come ahead.
    let mut exceptions = db.client();
    exceptions
        .batch_execute(
            "BEGIN; LOCK TABLE crm.booking_expiration_exception IN ACCESS EXCLUSIVE MODE",
        )
        .unwrap();
    gate.batch_execute("ROLLBACK").unwrap();
    // The read ahead waiting, on the session without the relay's advisory lock (the
    // mark session), is cancelled: it fails.
    let read_ahead = "SELECT count(*) FROM pg_stat_activity a
      WHERE datname = current_database() AND application_name = 'booking-expire'
        AND wait_event_type = 'Lock' AND query LIKE 'SELECT seq, key, topic%'
        AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')";
    wait_until(Duration::from_secs(90), "the read ahead waiting", || {
        count(&mut c, read_ahead) == 1
    });
    c.execute(
        &read_ahead.replace("SELECT count(*)", "SELECT pg_cancel_backend(a.pid)"),
        &[],
    )
    .unwrap();
    exceptions.batch_execute("COMMIT").unwrap();
    let run = relay.wait();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(json_lines(&run.stdout)[0]["Published"], json!(200));
    assert_eq!(
        run.stderr
            .matches("the relay's read ahead on its mark session failed: it reads on its main session from now on")
            .count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("canceling statement due to user request"),
        "{}",
        run.stderr
    );
    assert_eq!(pending(&mut c), 0);
    let got = consume(&brokers, &topic, 6, 200, Duration::from_secs(90));
    let sent: std::collections::HashSet<String> =
        got.iter().map(|m| m.headers["ce_id"].clone()).collect();
    assert_eq!(got.len(), 200, "each row once");
    assert!(ids.iter().all(|id| sent.contains(&id.to_string())));
}

/// The relay collects a batch's delivery reports only after it has fetched, enqueued
/// and settled others, so it may come to a batch after the batch's deadline (its
/// message timeout and a margin). The reports that arrived in time are still served
/// then, not counted as missing (which made a whole batch of acknowledged messages
/// back off as refused when a slow broker delayed the batch before it).
#[test]
fn a_batch_collected_after_its_deadline_keeps_the_reports_that_came_in_time() {
    use booking_expire::testing::config::{KafkaConfig, KafkaSecurity};
    use booking_expire::testing::kafka::{Delivery, KafkaProducer, OutMessage};

    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let message_timeout = Duration::from_secs(5);
    let mut producer = KafkaProducer::new(&KafkaConfig {
        brokers: brokers.clone(),
        security: KafkaSecurity::Plaintext,
        message_timeout,
        max_message_bytes: booking_expire::testing::config::DEFAULT_MAX_MESSAGE_BYTES,
    })
    .unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("key-{i}")).collect();
    let messages: Vec<OutMessage> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| OutMessage {
            topic: &topic,
            key,
            payload: format!("{{\"n\":{i}}}").into_bytes(),
            headers: vec![("ce_id".into(), format!("id-{i}").into())],
        })
        .collect();
    let batch = producer.enqueue(&messages);
    // The batch's deadline is set inside enqueue: at most this much later.
    let past_deadline = Instant::now() + message_timeout + Duration::from_secs(2);
    // Every message is on the topic, so its acknowledgement has been sent back.
    let got = consume(&brokers, &topic, 6, 200, Duration::from_secs(120));
    assert_eq!(got.len(), 200);
    // Behaviour: collected after the batch's deadline (the message timeout and 2 s),
    // a point in time; sleeping past it (longer under load) only makes it surer.
    std::thread::sleep(
        past_deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1),
    );
    let deliveries = producer.wait(batch);

    assert_eq!(deliveries.len(), 200);
    let mut at: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for (i, d) in deliveries.iter().enumerate() {
        match d {
            Delivery::Acked { partition, offset } => {
                assert_eq!(at.insert((*partition, *offset), i), None);
            }
            other => panic!("message {i}: {other:?}"),
        }
    }
    // Each report is the message's own: its partition and offset are where the
    // consumer found it.
    for m in &got {
        let i: usize = m.headers["ce_id"]["id-".len()..].parse().unwrap();
        assert_eq!(at[&(m.partition, m.offset)], i);
    }
}
