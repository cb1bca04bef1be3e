//! One row can never exhaust the relay: a row far larger than any message is failed
//! without being read, in bounded memory, while the healthy rows around it go. Against
//! a real Apache Kafka broker.

use crate::common;
use crate::postgres;

use std::time::Duration;

use common::kafka::*;
use common::*;
use serde_json::json;
use uuid::Uuid;

fn insert(c: &mut postgres::Client, topic: &str, payload: &serde_json::Value) -> Uuid {
    let id = Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, $4)",
        &[&id, &Uuid::new_v4().to_string(), &topic, payload],
    )
    .unwrap();
    id
}

/// The peak resident memory of a live process, from `/proc/<pid>/status`.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_40_mb_row_is_failed_unread_in_bounded_memory_while_the_healthy_rows_go() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let before: Vec<Uuid> = (0..10)
        .map(|n| insert(&mut c, &topic, &json!({"n": n})))
        .collect();
    let blob = "x".repeat(40 * 1024 * 1024);
    let big = insert(&mut c, &topic, &json!({ "blob": blob }));
    drop(blob);
    let after: Vec<Uuid> = (10..20)
        .map(|n| insert(&mut c, &topic, &json!({"n": n})))
        .collect();

    // Kept alive by --follow, so its peak memory can be read once the rows are done.
    let relay =
        Background::start(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "60s"]));
    let pid = relay.child.id();
    wait_until(Duration::from_secs(60), "every row settled", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL AND failed_at IS NULL",
        ) == 0
    });
    let peak = peak_rss_kib(pid);
    send_signal(&relay.child, "TERM");
    let run = relay.wait();
    assert_eq!(run.code, 143, "{}", run.stderr);
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB, over 64 MiB");

    let r = c
        .query_one(
            "SELECT failed_at IS NOT NULL, attempts, failures, last_error,
                    octet_length(payload::text) + octet_length(headers::text)
               FROM crm.outbox WHERE id = $1",
            &[&big],
        )
        .unwrap();
    assert!(r.get::<_, bool>(0), "failed at once");
    assert_eq!(r.get::<_, i32>(1), 1);
    let size: i32 = r.get(4);
    assert_eq!(
        r.get::<_, String>(3),
        format!(
            "the message is too large: its payload and headers are {size} bytes, the largest \
             message is 1000000 bytes (--max-message-bytes); it was never read"
        )
    );
    let got = consume(&brokers, &topic, 6, 20, Duration::from_secs(30));
    let mut sent: Vec<Uuid> = got
        .iter()
        .map(|m| m.headers["ce_id"].parse().unwrap())
        .collect();
    sent.sort();
    let mut want: Vec<Uuid> = before.into_iter().chain(after).collect();
    want.sort();
    assert_eq!(sent, want);
}
