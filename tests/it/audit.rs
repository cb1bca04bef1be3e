//! `audit` against a real PostgreSQL and a real Kafka: a delivered window has nothing
//! missing; messages removed from the topic make every row of the window missing (exit
//! 2), and `--repair` sends each once more with the same ce_id, after which nothing is
//! missing; a message with no outbox row is reported, apart from one whose row was
//! purged; a topic the brokers do not know has every row missing; the topic is loaded
//! in several chunks; bad input names its flag.

use crate::common;
use crate::postgres;
use crate::rdkafka;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka::{Fresh, consume, records_on, unique_topic};
use common::*;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use uuid::Uuid;

const PARTITIONS: i32 = 6;
const SINCE: &str = "2000-01-01T00:00:00Z";

/// `audit` of `topic` since 2000 with `extra` flags: its exit code, its JSON report
/// (`--format json`), its stderr.
fn audit_json(db: &TestDb, brokers: &str, topic: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "audit",
        "--since",
        SINCE,
        "--brokers",
        brokers,
        "--topic",
        topic,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let run = db.run(&args);
    let report = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run.code, report, run.stderr)
}

/// `count` bookings expired by one cycle, their rows moved to `topic` and relayed; the
/// rows' ids in write order.
fn delivered(db: &TestDb, brokers: &str, topic: &str, count: usize) -> Vec<Uuid> {
    let mut c = db.client();
    seed_many(&mut c, count, |i| Seed::booked(-60 - i as i64));
    assert_eq!(db.run_once(&[]).booking, count as i64);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    relay(db, brokers, count);
    ids(&mut c)
}

fn relay(db: &TestDb, brokers: &str, published: usize) {
    let run = db.run(&["relay-outbox", "--brokers", brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["Published"], published as u64, "{result}");
}

fn ids(c: &mut postgres::Client) -> Vec<Uuid> {
    c.query("SELECT id FROM crm.outbox ORDER BY seq", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn strings(ids: &[Uuid]) -> Vec<String> {
    ids.iter().map(Uuid::to_string).collect()
}

fn missing_ids(report: &Value) -> Vec<String> {
    report["Missing"]["Rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_owned())
        .collect()
}

/// Removes every message of `topic` (the log start moved to the high watermark), as a
/// topic recreated empty or an unclean leader election would leave it.
fn remove_messages(brokers: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::End).unwrap();
    }
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(admin.delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .unwrap();
    for e in result.elements() {
        e.error().unwrap();
    }
    assert_eq!(records_on(brokers, topic, PARTITIONS), 0);
}

/// Sends one message with `ce_id` to `topic`, as another producer would.
fn send_foreign(brokers: &str, topic: &str, ce_id: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    producer
        .send(BaseRecord::to(topic).key("foreign").payload("{}").headers(
            OwnedHeaders::new().insert(Header {
                key: "ce_id",
                value: Some(ce_id),
            }),
        ))
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
}

#[test]
fn a_delivered_window_has_nothing_missing_read_in_several_chunks() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    delivered(&db, &brokers, &topic, 10);

    let (code, report, stderr) = audit_json(&db, &brokers, &topic, &["--chunk-rows", "3"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["Rows"], 10);
    assert_eq!(report["Messages"], 10);
    assert_eq!(report["Missing"]["Count"], 0);
    assert_eq!(report["NoRow"]["Count"], 0);
    assert_eq!(report["NoRow"]["Purged"], 0);
    // 10 messages in chunks of at most 3: 4 COPY statements.
    assert_eq!(report["ChunkRows"], 3);
    assert_eq!(report["Chunks"], 4);
    assert_eq!(report["Topics"][0]["MessagesRead"], 10);
    assert_eq!(report["Topics"][0]["Exists"], true);
    // Every partition is read from its first receipt (the window's first message).
    let partitions = report["Topics"][0]["Partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), PARTITIONS as usize);
    for p in partitions {
        assert_eq!(p["ReadFrom"], 0, "{p}");
        assert_eq!(p["MessagesRead"], p["High"], "{p}");
    }

    let run = db.run(&[
        "audit",
        "--since",
        SINCE,
        "--brokers",
        &brokers,
        "--topic",
        &topic,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "missing from their topic: 0 outbox rows (published 0, failed 0, pending 0)\n"
        ),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with("nothing is missing\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn messages_removed_from_the_topic_are_missing_and_repair_sends_each_once_more() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    let mut c = db.client();
    let rows = delivered(&db, &brokers, &topic, 6);
    remove_messages(&brokers, &topic);

    // Every row of the window is missing: exit 2, in JSON and in the table.
    let (code, report, stderr) = audit_json(&db, &brokers, &topic, &["--chunk-rows", "2"]);
    assert_eq!(code, 2, "{stderr}\n{report}");
    assert!(
        stderr.contains(
            "audit: 6 outbox rows missing from their topic, 0 messages with no outbox row"
        ),
        "{stderr}"
    );
    assert_eq!(report["Rows"], 6);
    assert_eq!(report["Messages"], 0);
    assert_eq!(report["Chunks"], 0);
    assert_eq!(report["Missing"]["Count"], 6);
    assert_eq!(report["Missing"]["Published"], 6);
    assert_eq!(report["Missing"]["Pending"], 0);
    assert_eq!(missing_ids(&report), strings(&rows));
    assert_eq!(report["Repair"], Value::Null);

    let table = db.run(&[
        "audit",
        "--since",
        SINCE,
        "--brokers",
        &brokers,
        "--topic",
        &topic,
    ]);
    assert_eq!(table.code, 2, "{}", table.stderr);
    assert!(
        table.stdout.contains(
            "missing from their topic: 6 outbox rows (published 6, failed 0, pending 0)\n"
        ),
        "{}",
        table.stdout
    );
    for id in strings(&rows) {
        let line = table
            .stdout
            .lines()
            .find(|l| l.starts_with(&id))
            .unwrap_or_else(|| panic!("{id} not listed:\n{}", table.stdout));
        assert!(line.contains(" published "), "{line}");
    }
    assert!(
        !table.stdout.contains("nothing is missing"),
        "{}",
        table.stdout
    );

    // --repair needs a reason, like republish.
    let no_reason = db.run(&[
        "audit",
        "--since",
        SINCE,
        "--brokers",
        &brokers,
        "--topic",
        &topic,
        "--repair",
    ]);
    assert_eq!(no_reason.code, 64, "{}", no_reason.stderr);
    assert!(
        no_reason.stderr.contains("--reason"),
        "{}",
        no_reason.stderr
    );

    let (code, repaired, stderr) = audit_json(
        &db,
        &brokers,
        &topic,
        &[
            "--repair",
            "--reason",
            "INC-48: topic emptied",
            "--actor",
            "dave",
        ],
    );
    assert_eq!(code, 2, "{stderr}\n{repaired}");
    assert_eq!(repaired["Missing"]["Count"], 6);
    assert_eq!(repaired["Repair"]["Requeued"], 6);
    assert_eq!(repaired["Repair"]["LeftPending"], 0);
    assert_eq!(
        repaired["Repair"]["Actor"],
        format!("dave (database user {})", db.user())
    );
    let ops: Vec<(String, String, i32, Vec<Uuid>)> = c
        .query(
            "SELECT action, reason, rows, outbox_ids FROM crm.booking_expiration_operations",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        ops,
        vec![(
            "audit --repair".to_owned(),
            "INC-48: topic emptied".to_owned(),
            6,
            rows.clone()
        )]
    );
    let op_id: i64 = c
        .query_one("SELECT id FROM crm.booking_expiration_operations", &[])
        .unwrap()
        .get(0);
    assert_eq!(repaired["Repair"]["OperationId"], op_id);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_exception WHERE reason = 'requeued'"
        ),
        6
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.outbox"),
        6,
        "no row added"
    );

    // The relay sends each again, with the same ce_id: each once on the topic's reach.
    relay(&db, &brokers, 6);
    assert_eq!(records_on(&brokers, &topic, PARTITIONS), 6);
    let on_topic = consume(&brokers, &topic, PARTITIONS, 6, Duration::from_secs(30));
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    for m in &on_topic {
        *copies.entry(m.headers["ce_id"].clone()).or_default() += 1;
    }
    let mut expected = strings(&rows);
    expected.sort();
    assert_eq!(copies.keys().cloned().collect::<Vec<_>>(), expected);
    assert!(copies.values().all(|n| *n == 1), "{copies:?}");

    let (code, after, stderr) = audit_json(&db, &brokers, &topic, &["--chunk-rows", "2"]);
    assert_eq!(code, 0, "{stderr}\n{after}");
    assert_eq!(after["Missing"]["Count"], 0);
    assert_eq!(after["Messages"], 6);
    assert_eq!(after["Chunks"], 3);
}

#[test]
fn a_message_with_no_outbox_row_is_reported_apart_from_a_purged_one() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    let mut c = db.client();
    let rows = delivered(&db, &brokers, &topic, 4);
    // One row deleted whose receipt is still there: its message counts as purged.
    c.execute("DELETE FROM crm.outbox WHERE id = $1", &[&rows[0]])
        .unwrap();
    let foreign = Uuid::new_v4().to_string();
    send_foreign(&brokers, &topic, &foreign);

    let (code, report, stderr) = audit_json(&db, &brokers, &topic, &[]);
    assert_eq!(code, 2, "{stderr}\n{report}");
    assert!(
        stderr.contains(
            "audit: 0 outbox rows missing from their topic, 1 messages with no outbox row"
        ),
        "{stderr}"
    );
    assert_eq!(report["Rows"], 3);
    assert_eq!(report["Messages"], 5);
    assert_eq!(report["Missing"]["Count"], 0);
    assert_eq!(report["NoRow"]["Count"], 1);
    assert_eq!(report["NoRow"]["Purged"], 1);
    let found: Vec<(String, String)> = report["NoRow"]["Messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["CeId"].as_str().unwrap().to_owned(),
                m["Finding"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (foreign.clone(), "no row".to_owned()),
            (rows[0].to_string(), "no row (purged?)".to_owned())
        ]
    );

    let table = db.run(&[
        "audit",
        "--since",
        SINCE,
        "--brokers",
        &brokers,
        "--topic",
        &topic,
    ]);
    assert_eq!(table.code, 2, "{}", table.stderr);
    assert!(
        table
            .stdout
            .contains("messages with no outbox row: 1 (and 1 whose row was purged?)\n"),
        "{}",
        table.stdout
    );
    let line = table
        .stdout
        .lines()
        .find(|l| l.contains(&foreign))
        .unwrap_or_else(|| panic!("{foreign} not listed:\n{}", table.stdout));
    assert!(line.ends_with("  no row"), "{line}");
}

#[test]
fn the_read_only_login_may_audit_but_not_repair() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    delivered(&db, &brokers, &topic, 2);
    // Read-only by default, and may read the outbox alone (not the relay's receipts).
    let role = ReadOnlyRole::new(&db);
    let audit = |extra: &[&str]| {
        let mut args = vec![
            "audit",
            "--since",
            SINCE,
            "--brokers",
            &brokers,
            "--topic",
            &topic,
            "--json",
        ];
        args.extend_from_slice(extra);
        let mut cmd = db.command(&args);
        cmd.env("DATABASE_URL", &role.url);
        Run::of(cmd.output().unwrap())
    };
    let run = audit(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(report["Rows"], 2);
    assert_eq!(report["Messages"], 2);
    assert_eq!(report["Missing"]["Count"], 0);
    // --repair writes the relay's state: refused before anything, on this session.
    let run = audit(&["--repair", "--reason", "r"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert!(
        run.stderr.contains("audit writes, but the server"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_operator_role_repairs_and_the_read_only_role_audits_what_the_relay_sent() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    let rows = delivered(&db, &brokers, &topic, 2);
    remove_messages(&brokers, &topic);
    let base = [
        "audit",
        "--since",
        SINCE,
        "--brokers",
        &brokers,
        "--topic",
        &topic,
        "--json",
    ];
    let operator = LoginRole::member_of(&db, "op", "crm_booking_expiration_operator");
    let run = operator.run(
        &db,
        &[&base[..], &["--repair", "--reason", "INC-49"]].concat(),
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(report["Repair"]["Requeued"], 2, "{report}");
    assert_eq!(missing_ids(&report), strings(&rows));
    relay(&db, &brokers, 2);
    // The group role of the read-only login reads the relay's receipts as well.
    let reader = LoginRole::member_of(&db, "ro", "crm_booking_expiration_readonly");
    let run = reader.run(&db, &base);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(report["Missing"]["Count"], 0, "{report}");
    assert_eq!(report["Messages"], 2, "{report}");
    // Read from the receipts of the deliveries after the removal, each a partition's
    // log start.
    for p in report["Topics"][0]["Partitions"].as_array().unwrap() {
        assert_eq!(p["ReadFrom"], p["Low"], "{p}");
    }
}

#[test]
fn a_topic_the_brokers_do_not_know_has_every_row_missing() {
    let Fresh { brokers, topic, db } = Fresh::new(PARTITIONS);
    let mut c = db.client();
    let rows = delivered(&db, &brokers, &topic, 3);
    // As if the topic were deleted: the rows name one the brokers never had.
    let gone = unique_topic();
    c.execute("UPDATE crm.outbox SET topic = $1", &[&gone])
        .unwrap();

    let (code, report, stderr) = audit_json(&db, &brokers, &gone, &[]);
    assert_eq!(code, 2, "{stderr}\n{report}");
    assert_eq!(report["Topics"][0]["Topic"], gone.as_str());
    assert_eq!(report["Topics"][0]["Exists"], false);
    assert_eq!(report["Topics"][0]["MessagesRead"], 0);
    assert_eq!(report["Missing"]["Count"], 3);
    assert_eq!(report["Missing"]["Published"], 3);
    assert_eq!(missing_ids(&report), strings(&rows));
}

#[test]
fn bad_input_names_the_flag() {
    let db = TestDb::new();
    let future = (chrono::Utc::now() + chrono::TimeDelta::days(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let run = db.run(&["audit", "--since", &future, "--brokers", "127.0.0.1:9"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("audit: --since {future} is in the future")),
        "{}",
        run.stderr
    );

    let run = db.run(&["audit", "--since", "yesterday", "--brokers", "127.0.0.1:9"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("invalid value 'yesterday' for '--since <T>'"),
        "{}",
        run.stderr
    );

    let run = db.run(&[
        "audit",
        "--since",
        "2026-11-30T12:00:00Z",
        "--until",
        "2026-11-30T11:00:00Z",
        "--brokers",
        "127.0.0.1:9",
    ]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "audit: --since 2026-11-30T12:00:00Z is not before --until 2026-11-30T11:00:00Z"
        ),
        "{}",
        run.stderr
    );

    let run = db.run(&["audit", "--brokers", "127.0.0.1:9"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(run.stderr.contains("--since <T>"), "{}", run.stderr);

    let run = db.run(&[
        "audit",
        "--since",
        SINCE,
        "--chunk-rows",
        "0",
        "--brokers",
        "127.0.0.1:9",
    ]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(run.stderr.contains("--chunk-rows"), "{}", run.stderr);
}
