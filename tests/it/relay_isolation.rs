//! One outbox row can never stop the relay, and only a row's own fault counts against
//! it: rows of a topic that cannot take them wait uncounted and unwritten (a
//! configuration fault, one fact per topic),
//! rows the broker refuses back off on their own (with a capped number of failures),
//! while every other row is delivered in the same run; per-key order (within a topic)
//! holds across the wait. Against a real Apache Kafka broker.

use crate::common;
use crate::postgres;

use std::collections::HashSet;

use common::kafka::*;
use common::*;
use uuid::Uuid;

fn relay(db: &TestDb, brokers: &str) -> Run {
    db.run(&[
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "3s",
    ])
}

/// (published, failed, failures, backing off, last_error) of a row.
fn state(c: &mut postgres::Client, id: Uuid) -> (bool, bool, i32, bool, Option<String>) {
    let r = c
        .query_one(
            "SELECT published_at IS NOT NULL, failed_at IS NOT NULL, failures,
                    next_attempt_at > now(), last_error
               FROM crm.outbox WHERE id = $1",
            &[&id],
        )
        .unwrap();
    (
        r.get(0),
        r.get(1),
        r.get(2),
        r.get::<_, Option<bool>>(3).unwrap_or(false),
        r.get(4),
    )
}

#[test]
fn a_missing_or_mis_partitioned_topic_holds_only_its_own_rows() {
    let brokers = shared_brokers();
    let good = unique_topic();
    create_topic(&brokers, &good, 6, &[]);
    let three = unique_topic();
    create_topic(&brokers, &three, 3, &[]);
    let missing = format!("{}-missing", unique_topic());
    let db = TestDb::new();
    let mut c = db.client();
    // The bad rows come first, at the head of the queue.
    let mut held = Vec::new();
    for (topic, n) in [(&missing, 3), (&three, 2)] {
        for i in 0..n {
            held.push(insert_outbox_row(
                &mut c,
                topic,
                &Uuid::new_v4().to_string(),
                i,
            ));
        }
    }
    let delivered: Vec<Uuid> = (0..5)
        .map(|n| insert_outbox_row(&mut c, &good, &Uuid::new_v4().to_string(), n))
        .collect();

    let held_versions = {
        let all = versions(&mut c);
        let n = held.len();
        all.split(';').take(n).collect::<Vec<_>>().join(";")
    };
    let run = relay(&db, &brokers);
    assert_eq!(run.code, 78, "the failure is reported:\n{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("Kafka topic {missing} does not exist")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("the topic cannot take these rows"),
        "a log line per unusable topic:\n{}",
        run.stderr
    );
    for id in &delivered {
        assert!(state(&mut c, *id).0, "healthy row {id} published");
    }
    let read = consume(&brokers, &good, 6, 5, std::time::Duration::from_secs(30));
    let ids: HashSet<String> = read.iter().map(|m| m.headers["ce_id"].clone()).collect();
    let want: HashSet<String> = delivered.iter().map(Uuid::to_string).collect();
    assert_eq!(ids, want);
    for id in &held {
        let (published, failed, failures, waits, error) = state(&mut c, *id);
        assert!(!published && !failed, "held, not given up");
        assert_eq!(failures, 0, "a topic's fault is not the row's");
        assert!(
            !waits && error.is_none(),
            "the row is not written: the topic waits"
        );
    }
    assert_eq!(versions(&mut c), held_versions, "no held row written");
    // The topic's wait is one fact per topic.
    let facts: Vec<(String, String)> = c
        .query(
            "SELECT topic, reason FROM crm.booking_expiration_topic_wait ORDER BY topic",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(facts.len(), 2, "{facts:?}");
    for (topic, reason) in &facts {
        assert!(
            (*topic == missing
                && *reason
                    == format!(
                        "Kafka topic {missing} does not exist (topic auto-creation is off: create it, e.g. with 6 partitions)"
                    ))
                || (*topic == three
                    && reason
                        .starts_with(&format!("Kafka topic {three} has 3 partitions, expected 6"))),
            "{topic}: {reason}"
        );
    }
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE attempts > 0 AND published_at IS NULL"
        ),
        0,
        "no attempt counted"
    );
    // `backlog` shows the rows waiting for a missing topic.
    let backlog = db.run(&["backlog", "--format", "json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let report: serde_json::Value = serde_json::from_str(backlog.stdout.trim()).unwrap();
    assert_eq!(
        report["Outbox"]["WaitingForTopic"],
        serde_json::json!(5),
        "{report}"
    );
    // The next run asks about each topic once, still writes none of the rows, and
    // reports the topic again.
    let again = relay(&db, &brokers);
    assert_eq!(again.code, 78, "{}", again.stderr);
    assert_eq!(versions(&mut c), held_versions, "no held row written");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_topic_wait"
        ),
        2
    );
}

/// The row versions (ctid, xmin) of the rows of the job's that are still pending.
fn versions(c: &mut postgres::Client) -> String {
    c.query_one(
        "SELECT string_agg(ctid::text || '/' || xmin::text, ';' ORDER BY seq) FROM crm.outbox
          WHERE published_at IS NULL",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_row_backing_off_keeps_later_rows_of_its_key_on_its_topic_back() {
    // Order is per key within a topic (a partition belongs to one topic): a later row
    // of the key on the same topic waits; the key's row on another topic (another
    // contract version's event of the same expiry) goes.
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let other_topic = unique_topic();
    create_topic(&brokers, &other_topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let key = Uuid::new_v4().to_string();
    let first = insert_outbox_row(&mut c, &topic, &key, 1);
    c.execute(
        "UPDATE crm.outbox SET failures = 1, last_error = 'refused',
                next_attempt_at = now() + interval '1 hour'
          WHERE id = $1",
        &[&first],
    )
    .unwrap();
    let second = insert_outbox_row(&mut c, &topic, &key, 2);
    let same_key_elsewhere = insert_outbox_row(&mut c, &other_topic, &key, 3);
    let other = insert_outbox_row(&mut c, &topic, &Uuid::new_v4().to_string(), 4);
    let run = relay(&db, &brokers);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(state(&mut c, other).0);
    assert!(
        state(&mut c, same_key_elsewhere).0,
        "another topic's row of the key"
    );
    assert_eq!(state(&mut c, first).2, 1, "not retried inside the back-off");
    assert_eq!(
        state(&mut c, second),
        (false, false, 0, false, None),
        "behind a row of its key on its topic that backs off"
    );
}

#[test]
fn a_row_waiting_for_a_missing_topic_is_never_given_up() {
    let brokers = shared_brokers();
    let missing = format!("{}-missing", unique_topic());
    let db = TestDb::new();
    let mut c = db.client();
    let old = insert_outbox_row(&mut c, &missing, &Uuid::new_v4().to_string(), 1);
    // One failure short of the cap (failed sends of its own earlier); due now.
    c.execute(
        "UPDATE crm.outbox SET failures = 19, attempts = 19,
                next_attempt_at = now() - interval '1 second'
          WHERE id = $1",
        &[&old],
    )
    .unwrap();
    for _ in 0..2 {
        let before = versions(&mut c);
        let run = relay(&db, &brokers);
        assert_eq!(run.code, 78, "{}", run.stderr);
        assert!(!run.stderr.contains("marked failed"), "{}", run.stderr);
        let (published, failed, failures, _, _) = state(&mut c, old);
        assert!(!published && !failed);
        assert_eq!(failures, 19);
        assert_eq!(
            versions(&mut c),
            before,
            "not written while its topic waits"
        );
        c.execute("UPDATE crm.outbox SET next_attempt_at = now()", &[])
            .unwrap();
    }
}

/// The cap on a row's own failures (refusals nothing else classifies), applied as the
/// relay applies it to a refused row.
#[test]
fn a_row_that_keeps_failing_is_given_up_at_the_cap_and_counters_never_overflow() {
    let db = TestDb::new();
    let mut c = db.client();
    let topic = unique_topic();
    let doomed = insert_outbox_row(&mut c, &topic, &Uuid::new_v4().to_string(), 1);
    let young = insert_outbox_row(&mut c, &topic, &Uuid::new_v4().to_string(), 2);
    // One failure short of the cap, after two billion sends; due now.
    c.execute(
        "UPDATE crm.outbox SET failures = 19, attempts = 2147483647,
                next_attempt_at = now() - interval '1 second'
          WHERE id = $1",
        &[&doomed],
    )
    .unwrap();
    // A row at its 16th failure: the doubling would give 1,024 s; the cap is 10 min.
    c.execute(
        "UPDATE crm.outbox SET failures = 15 WHERE id = $1",
        &[&young],
    )
    .unwrap();
    let now: chrono::DateTime<chrono::Utc> = c.query_one("SELECT now()", &[]).unwrap().get(0);
    let refused = "Broker: refused for a reason of its own".to_owned();
    let gave_up = booking_expire_store::mark_retry(
        &mut c,
        now,
        &[(doomed, refused.clone()), (young, refused)],
        &booking_expire_domain::OutboxTypes::default(),
    )
    .unwrap();
    assert_eq!(gave_up, [doomed]);
    let r = c
        .query_one(
            "SELECT failed_at IS NOT NULL, failures, attempts, last_error, next_attempt_at
               FROM crm.outbox WHERE id = $1",
            &[&doomed],
        )
        .unwrap();
    assert!(r.get::<_, bool>(0));
    assert_eq!(r.get::<_, i32>(1), 20);
    assert_eq!(r.get::<_, i32>(2), i32::MAX);
    let error: String = r.get(3);
    assert!(
        error == "gave up after 20 failed attempts: Broker: refused for a reason of its own",
        "{error}"
    );
    assert_eq!(r.get::<_, Option<chrono::DateTime<chrono::Utc>>>(4), None);
    // The back-off counts from the `now` the mark was given, not from when it is read
    // (which a loaded host can put any time later): exactly the cap.
    let backoff: f64 = c
        .query_one(
            "SELECT extract(epoch FROM next_attempt_at - $2)::float8 FROM crm.outbox
              WHERE id = $1",
            &[&young, &now],
        )
        .unwrap()
        .get(0);
    assert_eq!(backoff, 600.0, "capped at 10 minutes");
}
