//! A CRM outbox shared with other producers: the job's relay, `backlog` and operator
//! commands touch only the rows of its outbox types (`--outbox-types`, by default the
//! job's own `pin.crm.booking-expired`). Other producers' rows (the CRM's other
//! contracts of the same aggregate among them), pending, published long ago or failed,
//! on topics the broker does not have, stay byte for byte as they were and are never
//! deleted, whatever the job runs; `backlog` shows them apart. A relay meant to publish
//! the whole outbox names every type it publishes.

use crate::common;
use crate::postgres;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

const OWN_TYPE: &str = "pin.crm.booking-expired";
const CREATED: &str = "pin.crm.booking-created";
const CLOSED: &str = "pin.crm.deal-closed";

/// Every column of every other producer's row, as text, by id: equal snapshots mean
/// not a byte of them changed and none was deleted.
fn others(c: &mut postgres::Client) -> Vec<(String, String)> {
    c.query(
        "SELECT id::text, row_to_json(o)::text FROM crm.outbox o WHERE type <> $1 ORDER BY id",
        &[&OWN_TYPE],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// One other producer's row, every column given as that producer (or a relay of its
/// own) wrote it: `state` pending, published 8 days ago, failed, or pending and backing
/// off (with the job's own "waiting for its topic" words, as an unscoped relay left it).
fn other_row(c: &mut postgres::Client, r#type: &str, topic: &str, key: &str, state: &str) -> Uuid {
    let id = Uuid::now_v7();
    let (published, failed, backing_off) = match state {
        "pending" => (false, false, false),
        "published" => (true, false, false),
        "failed" => (false, true, false),
        "backing-off" => (false, false, true),
        other => panic!("{other}"),
    };
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers,
                                 occurred_at, published_at, failed_at, attempts, failures,
                                 last_error, next_attempt_at, delivered_partition, delivered_offset)
         VALUES ($1::uuid, 'Booking', $2, $3, $4,
                 jsonb_build_object('BookingId', $2::text, 'Producer', $3::text, 'N', 7),
                 jsonb_build_object('ce_type', $3::text, 'ce_id', $1::text),
                 now() - interval '9 days',
                 CASE WHEN $5 THEN now() - interval '8 days' END,
                 CASE WHEN $6 THEN now() - interval '2 days' END,
                 CASE WHEN $5 OR $6 OR $7 THEN 3 ELSE 0 END,
                 CASE WHEN $6 OR $7 THEN 2 ELSE 0 END,
                 CASE WHEN $6 THEN 'their own relay gave up'
                      WHEN $7 THEN 'waiting for its topic: theirs' END,
                 CASE WHEN $7 THEN now() + interval '1 hour' END,
                 CASE WHEN $5 THEN 4 END, CASE WHEN $5 THEN 12345 END)",
        &[
            &id,
            &key,
            &r#type,
            &topic,
            &published,
            &failed,
            &backing_off,
        ],
    )
    .unwrap();
    id
}

/// A job's own row written by hand (one published 8 days ago, one the relay gave up on).
fn own_row(c: &mut postgres::Client, topic: &str, key: &str, state: &str) -> Uuid {
    let id = Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                 occurred_at, published_at, failed_at, attempts, last_error)
         VALUES ($1, 'Booking', $2, $3, $4, jsonb_build_object('BookingId', $2::text),
                 now() - interval '9 days',
                 CASE WHEN $5 = 'published' THEN now() - interval '8 days' END,
                 CASE WHEN $5 = 'failed' THEN now() - interval '1 day' END,
                 1, CASE WHEN $5 = 'failed' THEN 'the message is too large' END)",
        &[&id, &key, &OWN_TYPE, &topic, &state],
    )
    .unwrap();
    id
}

fn ok_json(run: &Run) -> Value {
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = json_lines(&run.stdout);
    assert_eq!(lines.len(), 1, "one JSON line: {}", run.stdout);
    lines.into_iter().next().unwrap()
}

fn relay(db: &TestDb, brokers: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    ok_json(&db.run(&args))
}

fn ce_ids(got: &[common::kafka::Received]) -> BTreeSet<String> {
    got.iter().map(|m| m.headers["ce_id"].clone()).collect()
}

fn ids_of(c: &mut postgres::Client, sql: &str) -> BTreeSet<String> {
    c.query(sql, &[])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Uuid>(0).to_string())
        .collect()
}

/// The shared outbox of the tests: five expiries of the job's (on `topic`), one of its
/// rows published 8 days ago and one it gave up on, beside other producers' rows of two
/// other types, each pending, published 8 days ago, failed and backing off, on topics
/// the broker does not have. The first booking has another contract's rows too (same
/// aggregate id), published and failed. Returns the bookings.
fn shared_outbox(db: &TestDb, topic: &str) -> Vec<Uuid> {
    let mut c = db.client();
    let bookings = seed_many(&mut c, 5, |i| Seed::booked(-60 - i as i64));
    assert_eq!(db.run_once(&[]).booking, 5);
    c.execute(
        "UPDATE crm.outbox SET topic = $1 WHERE type = $2",
        &[&topic, &OWN_TYPE],
    )
    .unwrap();
    own_row(&mut c, topic, &Uuid::new_v4().to_string(), "published");
    own_row(&mut c, topic, &Uuid::new_v4().to_string(), "failed");
    let missing = unique_topic();
    for (r#type, suffix) in [(CREATED, "booking-created.v1"), (CLOSED, "deal-closed.v1")] {
        let their_topic = format!("{missing}-{suffix}");
        for state in ["pending", "pending", "published", "failed", "backing-off"] {
            other_row(
                &mut c,
                r#type,
                &their_topic,
                &Uuid::new_v4().to_string(),
                state,
            );
        }
    }
    // Another Booking contract's rows of the first booking: same aggregate id.
    let first = bookings[0].to_string();
    let created_topic = format!("{missing}-booking-created.v1");
    other_row(&mut c, CREATED, &created_topic, &first, "published");
    other_row(&mut c, CREATED, &created_topic, &first, "failed");
    bookings
}

#[test]
fn other_producers_rows_stay_byte_for_byte_through_every_relay_run_purge_and_operator_command() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let bookings = shared_outbox(&db, &topic);
    let snapshot = others(&mut c);
    assert_eq!(snapshot.len(), 12);
    let unchanged = |c: &mut postgres::Client, after: &str| {
        assert_eq!(
            others(c),
            snapshot,
            "other producers' rows changed by {after}"
        );
    };
    let expiries = ids_of(
        &mut c,
        "SELECT id FROM crm.outbox WHERE type = 'pin.crm.booking-expired'
            AND published_at IS NULL AND failed_at IS NULL",
    );
    assert_eq!(expiries.len(), 5);

    // backlog: the job's rows only, the others apart.
    let report = ok_json(&db.run(&["backlog", "--json"]));
    assert_eq!(report["Outbox"]["Pending"], 5, "{report}");
    assert_eq!(report["Outbox"]["Failed"], 1, "{report}");
    assert_eq!(report["Outbox"]["WaitingForTopic"], 0, "{report}");
    assert_eq!(report["Outbox"]["Waiting"], json!([]), "{report}");
    // Two pending and one backing off per other type; one failed per type and the
    // first booking's other contract's.
    assert_eq!(
        report["OutboxOtherProducers"],
        json!({"Pending": 6, "Failed": 3}),
        "{report}"
    );
    let table = db.run(&["backlog"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let pending_row = table
        .stdout
        .lines()
        .find(|l| l.starts_with("outbox pending "))
        .unwrap();
    assert_eq!(
        pending_row.split_whitespace().nth(2),
        Some("5"),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains(
            "other producers' rows in the outbox: 6 pending and 3 failed by this job's columns, \
             not this job's\n"
        ),
        "{}",
        table.stdout
    );
    assert_fits_120(&table.stdout);
    let prometheus = db.run(&["backlog", "--format", "prometheus"]);
    assert_eq!(prometheus.code, 0, "{}", prometheus.stderr);
    for sample in [
        "crm_booking_expiration_outbox_pending 5",
        "crm_booking_expiration_outbox_failed 1",
        "crm_booking_expiration_outbox_waiting_for_topic 0",
        "crm_booking_expiration_outbox_other_producers_rows{state=\"pending\"} 6",
        "crm_booking_expiration_outbox_other_producers_rows{state=\"failed\"} 3",
    ] {
        assert!(
            prometheus.stdout.lines().any(|l| l == sample),
            "{sample}:\n{}",
            prometheus.stdout
        );
    }
    // No waiting series for the others' topics.
    assert!(
        !prometheus.stdout.contains("outbox_waiting{"),
        "{}",
        prometheus.stdout
    );
    // --fail-above is the job's verdict: its overdue bookings (none), whatever the others.
    let probe = db.run(&["backlog", "--fail-above", "0"]);
    assert_eq!(probe.code, 0, "{}", probe.stderr);
    unchanged(&mut c, "backlog");

    // The relay: exit 0 although the others' topics are missing; exactly the job's rows
    // go, and its retention purge (7 days) takes its own 8-day-old row, never theirs.
    let result = relay(&db, &brokers, &[]);
    assert_eq!(result["Published"], 5, "{result}");
    assert_eq!(result["Failed"], 0, "{result}");
    assert_eq!(result["Retrying"], 0, "{result}");
    assert_eq!(result["Purged"], 1, "{result}");
    assert_eq!(result["Waiting"], 0, "{result}");
    assert_eq!(result["WaitingForTopic"], 0, "{result}");
    let got = consume(&brokers, &topic, 6, 5, Duration::from_secs(20));
    assert_eq!(ce_ids(&got), expiries);
    assert_eq!(got.len(), 5);
    unchanged(&mut c, "relay-outbox");

    // A purge with a short retention: the others' 8-day-old rows are still not its own.
    let result = relay(&db, &brokers, &["--retention", "1h"]);
    assert_eq!(result["Published"], 0, "{result}");
    assert_eq!(result["Purged"], 0, "{result}");
    unchanged(&mut c, "relay-outbox --retention 1h");

    // republish --booking: the booking's own row, not the other contract's of the same
    // aggregate id (published too).
    let first = bookings[0].to_string();
    let own_of_first = ids_of(
        &mut c,
        &format!(
            "SELECT id FROM crm.outbox WHERE aggregateid = '{first}' AND type = 'pin.crm.booking-expired'"
        ),
    );
    assert_eq!(own_of_first.len(), 1);
    let dry = ok_json(&db.run(&[
        "republish",
        "--booking",
        &first,
        "--reason",
        "a consumer lost it",
        "--dry-run",
        "--json",
    ]));
    assert_eq!(dry["Requeued"], 1, "{dry}");
    assert_eq!(dry["LeftAlone"], json!([]), "{dry}");
    let done = ok_json(&db.run(&[
        "republish",
        "--booking",
        &first,
        "--reason",
        "a consumer lost it",
        "--json",
    ]));
    assert_eq!(done["Requeued"], 1, "{done}");
    let rows: BTreeSet<String> = done["Rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(rows, own_of_first);
    unchanged(&mut c, "republish --booking");

    // retry-failed: the job's failed row; the others' failed rows (the first booking's
    // other contract's among them) stay failed.
    let retry = ok_json(&db.run(&[
        "retry-failed",
        "--booking",
        &first,
        "--reason",
        "theirs",
        "--json",
    ]));
    assert_eq!(retry["Requeued"], 0, "{retry}");
    let retry = ok_json(&db.run(&["retry-failed", "--all", "--reason", "fixed", "--json"]));
    assert_eq!(retry["Requeued"], 1, "{retry}");
    unchanged(&mut c, "retry-failed");

    // republish over a window that spans every row: the job's published rows only (the
    // two re-queued above are pending, left alone); an other producer's id is no row of
    // the job's.
    let window = ok_json(&db.run(&[
        "republish",
        "--since",
        "2000-01-01T00:00:00Z",
        "--until",
        "now",
        "--reason",
        "replay",
        "--json",
    ]));
    assert_eq!(window["Requeued"], 4, "{window}");
    assert_eq!(window["LeftAlone"].as_array().unwrap().len(), 2, "{window}");
    let theirs = snapshot[0].0.clone();
    let by_id = ok_json(&db.run(&[
        "republish",
        "--ids",
        &theirs,
        "--reason",
        "not ours",
        "--json",
    ]));
    assert_eq!(by_id["Requeued"], 0, "{by_id}");
    assert_eq!(by_id["NotFound"], json!([theirs]), "{by_id}");
    unchanged(&mut c, "republish --since/--until, --ids");

    // explain: the booking's own outbox row, not the other contract's.
    let explained = ok_json(&db.run(&["explain", &first, "--json"]));
    let shown: BTreeSet<String> = explained["Outbox"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shown, own_of_first, "{explained}");
    assert!(
        explained["Outbox"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["Type"] == OWN_TYPE)
    );
    unchanged(&mut c, "explain");

    // The re-queued rows go again (the job's five and the one retried; the too-large
    // row is empty here, so it goes too); still nothing of theirs.
    let result = relay(&db, &brokers, &[]);
    assert_eq!(result["Published"], 6, "{result}");
    assert_eq!(result["Purged"], 0, "{result}");
    unchanged(&mut c, "the relay after the re-queues");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE type <> 'pin.crm.booking-expired'"
        ),
        12
    );
}

#[test]
fn a_whole_outbox_relay_names_the_types_it_publishes_and_leaves_the_rest() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let theirs = format!("{}-booking-created.v1", unique_topic());
    create_topic(&brokers, &theirs, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 3, |i| Seed::reserved(-60 - i as i64));
    assert_eq!(db.run_once(&[]).reserve, 3);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let created: BTreeSet<String> = (0..2)
        .map(|_| {
            other_row(
                &mut c,
                CREATED,
                &theirs,
                &Uuid::new_v4().to_string(),
                "pending",
            )
        })
        .map(|id| id.to_string())
        .collect();
    // A third type, not named: left as it is, its missing topic never looked up.
    let closed_topic = format!("{}-deal-closed.v1", unique_topic());
    other_row(&mut c, CLOSED, &closed_topic, "k", "pending");
    other_row(&mut c, CLOSED, &closed_topic, "k", "published");
    let closed = |c: &mut postgres::Client| {
        c.query(
            "SELECT id::text, row_to_json(o)::text FROM crm.outbox o WHERE type = $1 ORDER BY id",
            &[&CLOSED],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
        .collect::<Vec<_>>()
    };
    let before = closed(&mut c);
    let both = format!("{OWN_TYPE},{CREATED}");

    let report = ok_json(&db.run(&["backlog", "--json", "--outbox-types", &both]));
    assert_eq!(report["Outbox"]["Pending"], 5, "{report}");
    assert_eq!(
        report["OutboxOtherProducers"],
        json!({"Pending": 1, "Failed": 0}),
        "{report}"
    );
    // The same setting from the job's variable.
    let run = Run::of(
        db.command(&[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--message-timeout",
            "5s",
        ])
        .env("BOOKING_EXPIRATION_OUTBOX_TYPES", &both)
        .output()
        .unwrap(),
    );
    let result = ok_json(&run);
    assert_eq!(result["Published"], 5, "{result}");
    assert!(
        run.stderr.contains(&format!("OutboxTypes={both}")),
        "{}",
        run.stderr
    );
    let ours = consume(&brokers, &topic, 6, 3, Duration::from_secs(20));
    assert_eq!(ours.len(), 3);
    let got = consume(&brokers, &theirs, 6, 2, Duration::from_secs(20));
    assert_eq!(ce_ids(&got), created);
    assert_eq!(got.len(), 2);
    assert_eq!(closed(&mut c), before);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE type = 'pin.crm.booking-created'
                AND published_at IS NOT NULL AND delivered_offset IS NOT NULL"
        ),
        2
    );
}

#[test]
fn an_empty_or_malformed_list_of_outbox_types_is_refused_naming_the_flag_and_what_is_allowed() {
    let db = TestDb::empty();
    for (command, value) in [
        ("relay-outbox", ""),
        ("backlog", "pin.crm.booking-expired,"),
        ("republish", "a b"),
        ("explain", "x,x"),
    ] {
        let flag = format!("--outbox-types={value}");
        let mut args = vec![command, flag.as_str()];
        args.extend(match command {
            "relay-outbox" => vec!["--brokers", "127.0.0.1:1"],
            "republish" => vec!["--all", "--reason", "r"],
            "explain" => vec!["bb7f5ae6"],
            _ => vec![],
        });
        let run = db.run(&args);
        assert_eq!(run.code, 64, "{command} {value:?}: {}", run.stderr);
        assert!(run.stderr.contains("--outbox-types"), "{}", run.stderr);
        assert!(
            run.stderr
                .contains("allowed: a comma-separated list of outbox event types"),
            "{}",
            run.stderr
        );
    }
    // From the variable, the note names it.
    let run = Run::of(
        db.command(&["backlog"])
            .env("BOOKING_EXPIRATION_OUTBOX_TYPES", " , ")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "the value of --outbox-types came from the environment variable \
             BOOKING_EXPIRATION_OUTBOX_TYPES"
        ),
        "{}",
        run.stderr
    );
}
