//! `relay-outbox` against a three-node KRaft cluster of Apache Kafka (one JVM per node,
//! replication factor 3, min.insync.replicas 2), as production runs it: a partition's
//! leader killed mid-relay, a node restarted during `--follow`, two nodes down and
//! back. Each time every `ce_id` arrives, per-key order holds (keys with several
//! events), copies are only of the same `ce_id`, and no row is failed or counted.
//! The tests take turns on one cluster (`cluster_turn`), each on a topic and a
//! database of its own, and get it whole: the nodes the test before left down are
//! started again first.

use crate::common;
use crate::postgres;

use std::collections::HashMap;
use std::time::Duration;

use common::kafka::*;
use common::*;

const PARTITIONS: i32 = 6;

/// `n` pending rows over `n / 3` keys (three events per key, in write order),
/// written as another outbox writer would.
fn insert_rows(c: &mut postgres::Client, topic: &str, tag: &str, n: i32) {
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Booking', $3 || '-' || (i % greatest($2 / 3, 1)),
                'pin.crm.booking-expired', $1, jsonb_build_object('n', i, 'tag', $3)
           FROM generate_series(1, $2) i ORDER BY i",
        &[&topic, &n, &tag],
    )
    .unwrap();
}

fn relay_args<'a>(brokers: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
        "--deadline",
        "10m",
    ];
    args.extend_from_slice(extra);
    args
}

fn pending(c: &mut postgres::Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    )
}

/// Runs the relay until the outbox is drained (a run the cluster's fault ended, 75,
/// is followed by the next, as the CronJob would).
fn drain(db: &TestDb, brokers: &str) {
    let mut c = db.client();
    for _ in 0..10 {
        let run = db.run(&relay_args(brokers, &[]));
        assert!(
            run.code == 0 || run.code == 75,
            "exit {}: {}",
            run.code,
            run.stderr
        );
        if pending(&mut c) == 0 {
            return;
        }
    }
    panic!("{} rows still pending after 10 runs", pending(&mut c));
}

/// No row failed, backed off or counted a failure: a cluster's fault is not theirs.
fn assert_nothing_counted(c: &mut postgres::Client) {
    assert_eq!(
        count(
            c,
            "SELECT count(*) FROM crm.outbox
              WHERE failed_at IS NOT NULL OR failures > 0 OR next_attempt_at IS NOT NULL"
        ),
        0
    );
}

/// Every row is on the topic; per key, the first copies come in write order; copies
/// share the ce_id, key and payload of one row.
fn assert_delivered_in_key_order(c: &mut postgres::Client, brokers: &str, topic: &str) {
    let rows = c
        .query(
            "SELECT id::text, aggregateid FROM crm.outbox ORDER BY seq",
            &[],
        )
        .unwrap();
    let got = consume(
        brokers,
        topic,
        PARTITIONS,
        rows.len(),
        Duration::from_secs(120),
    );
    let mut by_id: HashMap<&str, Vec<&Received>> = HashMap::new();
    for m in &got {
        by_id
            .entry(m.headers["ce_id"].as_str())
            .or_default()
            .push(m);
    }
    assert_eq!(by_id.len(), rows.len(), "every ce_id arrived, no other");
    for copies in by_id.values() {
        assert!(
            copies
                .iter()
                .all(|m| m.key == copies[0].key && m.raw_payload == copies[0].raw_payload),
            "copies only of one row"
        );
    }
    // Per key, in the order the partition holds them, first copies only.
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut arrived: HashMap<&str, Vec<&str>> = HashMap::new();
    for m in &got {
        let id = m.headers["ce_id"].as_str();
        if seen.insert(id) {
            arrived.entry(m.key.as_str()).or_default().push(id);
        }
    }
    let mut written: HashMap<String, Vec<String>> = HashMap::new();
    for r in &rows {
        written
            .entry(r.get::<_, String>(1))
            .or_default()
            .push(r.get(0));
    }
    for (key, ids) in &written {
        let got: Vec<&str> = arrived[key.as_str()].clone();
        assert_eq!(got, *ids, "per-key order of {key}");
    }
}

#[test]
fn the_leader_of_a_partition_killed_mid_relay_loses_nothing_and_counts_nothing() {
    let cluster = cluster_turn();
    let topic = unique_topic();
    create_replicated_topic(&cluster.brokers, &topic, PARTITIONS);
    let db = TestDb::new();
    let mut c = db.client();
    insert_rows(&mut c, &topic, "a", 9_000);
    let relay =
        Background::start(db.command(&relay_args(&cluster.brokers, &["--batch-size", "300"])));
    wait_until(Duration::from_secs(60), "some rows published", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) > 0
    });
    let leader = cluster.leader(&topic, 0);
    cluster.kill(leader);
    let run = relay.wait();
    assert!(
        run.code == 0 || run.code == 75,
        "exit {}: {}",
        run.code,
        run.stderr
    );
    drain(&db, &cluster.brokers);
    assert_nothing_counted(&mut c);
    assert_delivered_in_key_order(&mut c, &cluster.brokers, &topic);
}

#[test]
fn a_node_restarted_during_follow_loses_nothing_and_counts_nothing() {
    let cluster = cluster_turn();
    let topic = unique_topic();
    create_replicated_topic(&cluster.brokers, &topic, PARTITIONS);
    let db = TestDb::new();
    let mut c = db.client();
    insert_rows(&mut c, &topic, "a", 600);
    let relay = Background::start(db.command(&relay_args(&cluster.brokers, &["--follow", "40s"])));
    wait_until(Duration::from_secs(60), "the first rows published", || {
        pending(&mut c) == 0
    });
    // A rolling restart's step: one node stopped, rows committed meanwhile, started.
    let node = cluster.leader(&topic, 0);
    cluster.stop(node);
    insert_rows(&mut c, &topic, "b", 600);
    cluster.restart(node);
    insert_rows(&mut c, &topic, "c", 600);
    let run = relay.wait();
    assert!(
        run.code == 0 || run.code == 75,
        "exit {}: {}",
        run.code,
        run.stderr
    );
    drain(&db, &cluster.brokers);
    assert_nothing_counted(&mut c);
    assert_delivered_in_key_order(&mut c, &cluster.brokers, &topic);
}

#[test]
fn two_nodes_down_stop_the_run_without_counting_and_their_return_delivers_everything() {
    let cluster = cluster_turn();
    let topic = unique_topic();
    create_replicated_topic(&cluster.brokers, &topic, PARTITIONS);
    let db = TestDb::new();
    let mut c = db.client();
    insert_rows(&mut c, &topic, "a", 300);
    drain(&db, &cluster.brokers);
    // No quorum and no min ISR: nothing can be acknowledged.
    cluster.kill(2);
    cluster.kill(3);
    insert_rows(&mut c, &topic, "b", 300);
    for _ in 0..2 {
        let run = db.run(&relay_args(&cluster.brokers, &[]));
        assert!(
            run.code == 69 || run.code == 75,
            "exit {}: {}",
            run.code,
            run.stderr
        );
        assert_eq!(pending(&mut c), 300, "nothing acknowledged");
        assert_eq!(
            count(
                &mut c,
                "SELECT count(*) FROM crm.outbox
                  WHERE published_at IS NULL AND attempts = 0 AND last_error IS NULL"
            ),
            300,
            "every row exactly as it was"
        );
        assert_nothing_counted(&mut c);
    }
    cluster.restart_together(&[2, 3]);
    drain(&db, &cluster.brokers);
    assert_nothing_counted(&mut c);
    assert_delivered_in_key_order(&mut c, &cluster.brokers, &topic);
}
