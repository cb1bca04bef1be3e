//! `republish` and `retry-failed` against a real PostgreSQL and a real Kafka: re-queued
//! rows go out again with the same ce_id, nothing is duplicated in the outbox, and the
//! operations trail says who, when, why and how many.

use crate::common;
use crate::postgres;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use serde_json::Value;
use uuid::Uuid;

fn relay(db: &TestDb, brokers: &str) -> Value {
    let run = db.run(&["relay-outbox", "--brokers", brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap()
}

fn json_run(db: &TestDb, args: &[&str]) -> Value {
    let run = db.run(args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// (action, target, actor, reason, rows, outbox ids)
type OpRow = (String, String, String, String, i32, Vec<Uuid>);

fn operations(c: &mut postgres::Client) -> Vec<OpRow> {
    c.query(
        "SELECT action, target, actor, reason, rows, outbox_ids
           FROM crm.booking_expiration_operations ORDER BY id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

#[test]
fn ten_published_events_republished_reach_the_topic_again_with_the_same_ce_id() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 10, |i| Seed::booked(-60 - i as i64));
    assert_eq!(db.run_once(&[]).booking, 10);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    assert_eq!(relay(&db, &brokers)["Published"], 10);
    let first = consume(&brokers, &topic, 6, 10, Duration::from_secs(20));
    assert_eq!(first.len(), 10);
    let ids: Vec<Uuid> = c
        .query("SELECT id FROM crm.outbox ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let since = "2000-01-01T00:00:00Z";
    let before = checksum(&mut c);

    // A dry run lists them and changes nothing.
    let dry = json_run(
        &db,
        &[
            "republish",
            "--since",
            since,
            "--until",
            "now",
            "--reason",
            "consumer lost data",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(dry["DryRun"], true);
    assert_eq!(dry["Requeued"], 10);
    assert_eq!(dry["OperationId"], Value::Null);
    assert_eq!(checksum(&mut c), before);
    assert_eq!(operations(&mut c), vec![]);

    let done = json_run(
        &db,
        &[
            "republish",
            "--since",
            since,
            "--until",
            "now",
            "--reason",
            "billing consumer purged its DLQ (INC-9)",
            "--actor",
            "dave",
            "--json",
        ],
    );
    assert_eq!(done["Requeued"], 10);
    let rows: Vec<String> = done["Rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rows, ids.iter().map(Uuid::to_string).collect::<Vec<_>>());
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.outbox"),
        10,
        "no row was added"
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL AND delivered_offset IS NULL"
        ),
        10
    );
    let ops = operations(&mut c);
    assert_eq!(ops.len(), 1);
    let (action, target, actor, reason, n, op_ids) = &ops[0];
    assert_eq!(action, "republish");
    assert!(
        target.starts_with("written from 2000-01-01T00:00:00Z until "),
        "{target}"
    );
    assert_eq!(actor, &format!("dave (database user {})", db.user()));
    assert_eq!(reason, "billing consumer purged its DLQ (INC-9)");
    assert_eq!(*n, 10);
    assert_eq!(op_ids, &ids);
    let op_id: i64 = c
        .query_one("SELECT id FROM crm.booking_expiration_operations", &[])
        .unwrap()
        .get(0);
    assert_eq!(done["OperationId"], op_id);

    assert_eq!(relay(&db, &brokers)["Published"], 10);
    let all = consume(&brokers, &topic, 6, 20, Duration::from_secs(20));
    assert_eq!(all.len(), 20);
    // Each ce_id twice, with the same key and payload, at a new offset.
    let mut by_ce_id: BTreeMap<String, Vec<&common::kafka::Received>> = BTreeMap::new();
    for m in &all {
        by_ce_id
            .entry(m.headers["ce_id"].clone())
            .or_default()
            .push(m);
    }
    assert_eq!(by_ce_id.keys().cloned().collect::<Vec<_>>(), {
        let mut s: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        s.sort();
        s
    });
    for (ce_id, copies) in &by_ce_id {
        assert_eq!(copies.len(), 2, "{ce_id}");
        assert_eq!(copies[0].key, copies[1].key);
        assert_eq!(copies[0].payload, copies[1].payload);
        assert_eq!(copies[0].partition, copies[1].partition);
        assert!(copies[0].offset < copies[1].offset);
    }
    // The new receipts point at the second copies.
    for (id, p, o) in c
        .query(
            "SELECT id, delivered_partition, delivered_offset FROM crm.outbox",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, Uuid>(0), r.get::<_, i32>(1), r.get::<_, i64>(2)))
    {
        let copies = &by_ce_id[&id.to_string()];
        assert_eq!((copies[1].partition, copies[1].offset), (p, o));
    }
}

#[test]
fn selections_leave_pending_rows_alone_and_name_what_is_missing() {
    let db = TestDb::new();
    let mut c = db.client();
    let published = insert_outbox_rows(&mut c, OutboxState::Published, &[60, 50]);
    let pending = insert_outbox_rows(&mut c, OutboxState::Pending, &[40]);
    let failed = insert_outbox_rows(&mut c, OutboxState::Failed, &[30]);
    let gone = Uuid::new_v4();
    let list = [published[0], pending[0], failed[0], gone]
        .iter()
        .map(Uuid::to_string)
        .collect::<Vec<_>>()
        .join(",");

    let out = json_run(
        &db,
        &["republish", "--ids", &list, "--reason", "replay", "--json"],
    );
    assert_eq!(out["Requeued"], 2);
    let states: Vec<(String, String)> = out["Rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["Id"].as_str().unwrap().to_owned(),
                r["State"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (published[0].to_string(), "published".to_owned()),
            (failed[0].to_string(), "failed".to_owned())
        ]
    );
    assert_eq!(out["LeftAlone"][0]["Id"], pending[0].to_string());
    assert_eq!(out["LeftAlone"][0]["State"], "pending");
    assert_eq!(out["NotFound"], serde_json::json!([gone.to_string()]));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL AND failed_at IS NULL"
        ),
        3
    );

    // retry-failed takes failed rows only.
    c.execute(
        "UPDATE crm.outbox SET failed_at = now(), failures = 20, last_error = 'gave up' WHERE id = $1",
        &[&failed[0]],
    )
    .unwrap();
    let out = json_run(
        &db,
        &["retry-failed", "--all", "--reason", "topic fixed", "--json"],
    );
    assert_eq!(out["Requeued"], 1);
    assert_eq!(out["Rows"][0]["Id"], failed[0].to_string());
    let row = c
        .query_one(
            "SELECT failures, last_error, failed_at IS NULL FROM crm.outbox WHERE id = $1",
            &[&failed[0]],
        )
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 0);
    assert_eq!(row.get::<_, Option<String>>(1), None);
    assert!(row.get::<_, bool>(2));
    let out = json_run(
        &db,
        &[
            "retry-failed",
            "--ids",
            &published[1].to_string(),
            "--reason",
            "x",
            "--json",
        ],
    );
    assert_eq!(out["Requeued"], 0);
    assert_eq!(out["LeftAlone"][0]["State"], "published");
    assert_eq!(out["OperationId"], Value::Null);
    let ops = operations(&mut c);
    assert_eq!(
        ops.iter().map(|o| (o.0.as_str(), o.4)).collect::<Vec<_>>(),
        [("republish", 2), ("retry-failed", 1)]
    );
}

#[test]
fn bad_requeue_commands_are_refused_before_any_change() {
    let db = TestDb::new();
    let mut c = db.client();
    insert_outbox_rows(&mut c, OutboxState::Published, &[60, 50, 40]);
    let before = checksum(&mut c);
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["republish", "--reason", "x"],
            64,
            "the following required arguments were not provided",
        ),
        (
            &["republish", "--booking", &Uuid::nil().to_string()],
            64,
            "--reason <TEXT>",
        ),
        (
            &["republish", "--ids", "nope", "--reason", "x"],
            64,
            "\"nope\" is not a UUID",
        ),
        (
            &[
                "republish",
                "--since",
                "2026-01-01T00:00:00Z",
                "--reason",
                "x",
            ],
            64,
            "--until <T>",
        ),
        (
            &["republish", "--all", "--reason", "x"],
            64,
            "republish: --all is only for retry-failed",
        ),
        (
            &[
                "republish",
                "--since",
                "2026-01-02T00:00:00Z",
                "--until",
                "2026-01-01T00:00:00Z",
                "--reason",
                "x",
            ],
            64,
            "republish: --since 2026-01-02T00:00:00Z is not before --until 2026-01-01T00:00:00Z",
        ),
        (
            &[
                "republish",
                "--since",
                "2000-01-01T00:00:00Z",
                "--until",
                "now",
                "--reason",
                "x",
                "--max-rows",
                "2",
            ],
            64,
            "republish: the selection holds 3 rows to re-queue, more than --max-rows 2",
        ),
        (
            &[
                "republish",
                "--ids",
                &Uuid::nil().to_string(),
                "--booking",
                &Uuid::nil().to_string(),
                "--reason",
                "x",
            ],
            64,
            "cannot be used with",
        ),
    ];
    for (args, code, message) in cases {
        let run = db.run(args);
        assert_eq!(run.code, *code, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(message), "{args:?}: {}", run.stderr);
    }
    assert_eq!(checksum(&mut c), before);
    assert_eq!(operations(&mut c), vec![]);
}

/// A window over every row written so far.
const WINDOW: [&str; 4] = ["--since", "2000-01-01T00:00:00Z", "--until", "now"];

#[test]
fn a_window_is_counted_before_anything_is_locked_and_only_the_requeued_rows_are_locked() {
    let db = TestDb::new();
    let mut c = db.client();
    let ages: Vec<i64> = (0..1_200).map(|i| 60 + i).collect();
    let published = insert_outbox_rows(&mut c, OutboxState::Published, &ages);
    let pending = insert_outbox_rows(&mut c, OutboxState::Pending, &[70, 80]);
    let before = checksum(&mut c);

    // Another session holds a published row and a pending row of the window, as a
    // relay marking them would.
    let mut holder = db.client();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM crm.outbox WHERE id = ANY($1) FOR UPDATE",
        &[&vec![published[0], pending[0]]],
    )
    .unwrap();

    // Over --max-rows: refused from the count, without waiting on the held row.
    let mut args = vec!["republish", "--reason", "replay", "--lock-timeout", "60s"];
    args.extend_from_slice(&WINDOW);
    args.extend_from_slice(&["--max-rows", "1000"]);
    let run = db.run(&args);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "republish: the selection holds 1200 rows to re-queue, more than --max-rows 1000"
        ),
        "{}",
        run.stderr
    );
    assert_eq!(checksum(&mut c), before);

    // Within --max-rows, with only the pending row held: the pending rows are never
    // locked, so the re-queue does not wait for them.
    tx.rollback().unwrap();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM crm.outbox WHERE id = $1 FOR UPDATE",
        &[&pending[0]],
    )
    .unwrap();
    let mut args = vec![
        "republish",
        "--reason",
        "replay",
        "--lock-timeout",
        "1s",
        "--json",
    ];
    args.extend_from_slice(&WINDOW);
    args.extend_from_slice(&["--max-rows", "2000"]);
    let out = json_run(&db, &args);
    assert_eq!(out["Requeued"], 1200);
    // The report lists the first 1000 and counts the rest; the trail has every id.
    assert_eq!(out["Rows"].as_array().unwrap().len(), 1000);
    assert_eq!(out["RowsNotShown"], 200);
    assert_eq!(out["LeftAlone"].as_array().unwrap().len(), 2);
    assert_eq!(out["LeftAloneNotShown"], 0);
    tx.rollback().unwrap();
    let ops = operations(&mut c);
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0].4, 1200);
    assert_eq!(ops[0].5.len(), 1200);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL AND failed_at IS NULL"
        ),
        1202
    );
}
