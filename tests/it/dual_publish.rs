//! Dual publishing (the v2 path of the event contract) against a real PostgreSQL and a
//! real Kafka: `run-once --topics pin.crm.booking-expired.v1,pin.crm.booking-expired.v2`
//! writes, for each expiry, one outbox row per topic in the same statement as the
//! expiry; `relay-outbox` sends each row to its topic; a consumer of each topic
//! validates what it reads against its own contract version. With v1 alone (the
//! default) nothing goes to v2. The setting is validated before anything runs.
//!
//! run-once writes the contract's topic names; each test then points its rows at two
//! topics of its own on the shared broker (6 partitions each, as the relay expects),
//! one for each name, so that every record on them is the test's and a topic's
//! watermarks say at once what was, and was not, sent.

use crate::common;
use crate::postgres;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::kafka::{
    Received, consume, create_topic, java_partition, records_on, shared_brokers, unique_topic_for,
};
use common::schemas::{contract_validator, schema_errors};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

const V1: &str = "pin.crm.booking-expired.v1";
const V2: &str = "pin.crm.booking-expired.v2";

/// Two topics of the test's own, for v1 and v2, created with 6 partitions.
fn own_topics(brokers: &str) -> (String, String) {
    let (t1, t2) = (unique_topic_for("v1"), unique_topic_for("v2"));
    create_topic(brokers, &t1, 6, &[]);
    create_topic(brokers, &t2, 6, &[]);
    (t1, t2)
}

/// Points the outbox rows written for the contract's topics at the test's own: `t1`
/// for v1, `t2` for v2 (what each row carries is left as run-once wrote it).
fn point_at(c: &mut postgres::Client, t1: &str, t2: &str) {
    c.execute(
        "UPDATE crm.outbox SET topic = CASE topic WHEN $1 THEN $3 WHEN $2 THEN $4 END",
        &[&V1, &V2, &t1, &t2],
    )
    .unwrap();
}

/// Three Reserve and three Booking expiries, all overdue.
fn seed_six(c: &mut postgres::Client) -> Vec<Seed> {
    let seeds: Vec<Seed> = (0..6)
        .map(|i| {
            if i % 2 == 0 {
                Seed::reserved(-60 - i)
            } else {
                Seed::booked(-60 - i)
            }
        })
        .collect();
    seed(c, &seeds);
    seeds
}

/// The outbox rows of the database: (booking, topic) → (row id, payload, headers).
fn outbox_rows(c: &mut postgres::Client) -> HashMap<(String, String), (Uuid, Value, Value)> {
    c.query(
        "SELECT aggregateid, topic, id, payload, headers FROM crm.outbox",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3), r.get(4))))
    .collect()
}

fn relay(db: &TestDb, brokers: &str) -> Value {
    let run = db.run(&["relay-outbox", "--brokers", brokers]);
    assert_eq!(run.code, 0, "relay failed:\n{}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap()
}

#[test]
fn both_versions_configured_each_expiry_reaches_v1_and_v2_once_in_its_own_contract() {
    let brokers = shared_brokers();
    let (t1, t2) = own_topics(&brokers);
    let db = TestDb::new();
    let mut c = db.client();
    let seeds = seed_six(&mut c);

    let cycle = db.run_once(&["--topics", &format!("{V1},{V2}")]);
    assert_eq!((cycle.reserve, cycle.booking), (3, 3));

    // Written once: one audit row and one timeline entry per expiry, one outbox row per
    // expiry on each topic, each with its own id.
    assert_eq!(assert_each_expiry_written_once_per_topic(&mut c, 2), 6);
    let rows = outbox_rows(&mut c);
    assert_eq!(rows.len(), 12);
    let ids: HashSet<Uuid> = rows.values().map(|(id, _, _)| *id).collect();
    assert_eq!(ids.len(), 12, "each outbox row has its own id");
    for s in &seeds {
        let key = s.id.to_string();
        let (id1, p1, h1) = &rows[&(key.clone(), V1.to_owned())];
        let (id2, p2, h2) = &rows[&(key.clone(), V2.to_owned())];
        assert_ne!(id1, id2);
        assert_eq!(h1["ce_id"], json!(id1.to_string()));
        assert_eq!(h2["ce_id"], json!(id2.to_string()));
        // The timeline keeps the v1 shape whatever is published.
        let details: Value = c
            .query_one(
                "SELECT details FROM crm.deal_timeline WHERE booking_id = $1",
                &[&s.id],
            )
            .unwrap()
            .get(0);
        assert_eq!(&details, p1);
        assert_eq!(p2["DeveloperId"], json!(s.tenant_id.to_string()));
        assert_eq!(p1["TenantId"], json!(s.tenant_id.to_string()));
    }

    // The backlog counts rows: two per expiry are pending.
    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let backlog: Value = serde_json::from_str(backlog.stdout.trim()).unwrap();
    assert_eq!(backlog["Outbox"]["Pending"], json!(12));

    point_at(&mut c, &t1, &t2);
    // One relay run sends every row to its topic: both rows of a booking go in the
    // same batch (per-key order holds per topic), so one batch carries all twelve.
    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "relay failed:\n{}", run.stderr);
    let batches: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("batch relayed"))
        .collect();
    assert_eq!(batches.len(), 1, "{}", run.stderr);
    assert!(batches[0].contains("Sent=12"), "{}", batches[0]);
    let relayed: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(relayed["Published"], json!(12));
    assert_eq!(relayed["Failed"], json!(0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0
    );

    let v1 = consume(&brokers, &t1, 6, 6, Duration::from_secs(60));
    let v2 = consume(&brokers, &t2, 6, 6, Duration::from_secs(60));
    assert_eq!(v1.len(), 6, "one v1 record per expiry");
    assert_eq!(v2.len(), 6, "one v2 record per expiry");
    let keys: HashSet<String> = seeds.iter().map(|s| s.id.to_string()).collect();
    for records in [&v1, &v2] {
        let got: HashSet<String> = records.iter().map(|r| r.key.clone()).collect();
        assert_eq!(got, keys, "each expiry's booking once");
    }

    // Each consumer validates with its own contract version's consumer schema; what
    // is sent is also exactly its producer schema. The other version's consumer schema
    // refuses it: the shapes really differ.
    for (records, major, topic, ce_type) in [
        (&v1, 1, V1, "pin.crm.booking-expired"),
        (&v2, 2, V2, "pin.crm.booking-expired.v2"),
    ] {
        let records: &Vec<Received> = records;
        let consumer = contract_validator(major, true);
        let producer = contract_validator(major, false);
        let other = contract_validator(3 - major, true);
        for r in records {
            assert!(
                consumer.is_valid(&r.payload),
                "v{major} consumer: {}",
                schema_errors(&consumer, &r.payload)
            );
            assert!(
                producer.is_valid(&r.payload),
                "v{major} producer: {}",
                schema_errors(&producer, &r.payload)
            );
            assert!(
                !other.is_valid(&r.payload),
                "v{major} value valid for the other version"
            );
            assert_eq!(r.headers["ce_type"], ce_type);
            assert_eq!(r.headers["ce_contractversion"], major.to_string());
            assert_eq!(r.headers["ce_subject"], r.key);
            // Same key, same partition count, same partition on both topics.
            assert_eq!(r.partition, java_partition(&r.key, 6));
            let (id, payload, _) = &rows[&(r.key.clone(), topic.to_owned())];
            assert_eq!(r.headers["ce_id"], id.to_string());
            assert_eq!(&r.payload, payload);
        }
    }
    assert!(v1.iter().all(|r| !r.headers.contains_key("ce_dataschema")));
    assert!(
        v2.iter()
            .all(|r| r.headers["ce_dataschema"] == "urn:pin:crm:booking-expired:v2:consumer")
    );
    // The same event in both: every field but the renamed one is equal.
    for r1 in &v1 {
        let r2 = v2.iter().find(|r| r.key == r1.key).unwrap();
        let mut renamed = r1.payload.clone();
        let tenant = renamed.as_object_mut().unwrap().remove("TenantId").unwrap();
        renamed["DeveloperId"] = tenant;
        assert_eq!(renamed, r2.payload);
        assert_eq!(r1.headers["ce_time"], r2.headers["ce_time"]);
        assert_eq!(
            r1.headers["ce_correlationid"],
            r2.headers["ce_correlationid"]
        );
    }

    // explain shows both rows of a booking, each published to its topic (the test's
    // own, which the rows point at).
    let booking = seeds[0].id.to_string();
    let explained = db.run(&["explain", &booking, "--json"]);
    assert_eq!(explained.code, 0, "{}", explained.stderr);
    let explained: Value = serde_json::from_str(explained.stdout.trim()).unwrap();
    let mut topics: Vec<(&str, &str)> = explained["Outbox"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["Topic"].as_str().unwrap(), o["State"].as_str().unwrap()))
        .collect();
    topics.sort();
    assert_eq!(
        topics,
        [(t1.as_str(), "published"), (t2.as_str(), "published")]
    );

    // republish --booking re-queues both rows as they are (same ids), and one relay run
    // sends each again to its own topic.
    let requeued = db.run(&[
        "republish",
        "--booking",
        &booking,
        "--reason",
        "a consumer replays",
        "--actor",
        "test",
        "--json",
    ]);
    assert_eq!(requeued.code, 0, "{}", requeued.stderr);
    let requeued: Value = serde_json::from_str(requeued.stdout.trim()).unwrap();
    assert_eq!(requeued["Requeued"], json!(2));
    assert_eq!(relay(&db, &brokers)["Published"], json!(2));
    for topic in [&t1, &t2] {
        let all = consume(&brokers, topic, 6, 7, Duration::from_secs(60));
        assert_eq!(all.len(), 7, "{topic}: six events and one republished copy");
        let again: Vec<&Received> = all.iter().filter(|r| r.key == booking).collect();
        assert_eq!(
            again.len(),
            2,
            "{topic}: the event and its republished copy"
        );
        assert_eq!(again[0].headers["ce_id"], again[1].headers["ce_id"]);
        assert_eq!(again[0].payload, again[1].payload);
    }
}

#[test]
fn with_v1_alone_nothing_goes_to_v2() {
    let brokers = shared_brokers();
    let (t1, t2) = own_topics(&brokers);
    let db = TestDb::new();
    let mut c = db.client();
    let seeds = seed_six(&mut c);

    let cycle = db.run_once(&[]);
    assert_eq!((cycle.reserve, cycle.booking), (3, 3));
    assert_eq!(assert_each_expiry_written_once(&mut c), 6);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE topic = 'pin.crm.booking-expired.v1'"
        ),
        6
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 6);
    point_at(&mut c, &t1, &t2);
    assert_eq!(relay(&db, &brokers)["Published"], json!(6));

    let keys: HashSet<String> = seeds.iter().map(|s| s.id.to_string()).collect();
    let v1 = consume(&brokers, &t1, 6, 6, Duration::from_secs(60));
    assert_eq!(v1.len(), 6);
    let got: HashSet<String> = v1.iter().map(|r| r.key.clone()).collect();
    assert_eq!(got, keys);
    // The relay has ended: what v2's topic holds now is all it will ever get.
    assert_eq!(records_on(&brokers, &t2, 6), 0, "nothing sent to v2");
}

#[test]
fn after_the_sunset_v2_alone_is_written_and_the_timeline_keeps_its_shape() {
    let db = TestDb::new();
    let mut c = db.client();
    let seeds = seed_six(&mut c);
    let run = db
        .command(&["run-once"])
        .env("BOOKING_EXPIRATION_TOPICS", V2)
        .output()
        .unwrap();
    let run = Run::of(run);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(assert_each_expiry_written_once(&mut c), 6);
    let rows = outbox_rows(&mut c);
    assert!(rows.keys().all(|(_, topic)| topic == V2), "{rows:?}");
    let v2 = contract_validator(2, false);
    for s in &seeds {
        let (_, payload, headers) = &rows[&(s.id.to_string(), V2.to_owned())];
        assert!(v2.is_valid(payload), "{}", schema_errors(&v2, payload));
        assert_eq!(headers["ce_contractversion"], json!("2"));
        let details: Value = c
            .query_one(
                "SELECT details FROM crm.deal_timeline WHERE booking_id = $1",
                &[&s.id],
            )
            .unwrap()
            .get(0);
        assert_eq!(details["TenantId"], json!(s.tenant_id.to_string()));
    }
}

#[test]
fn the_topics_setting_names_the_flag_the_value_and_what_is_allowed() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_six(&mut c);
    let before = checksum(&mut c);
    let allowed = format!("allowed: a comma-separated list of {V1}, {V2}, each at most once");
    for (how, value, why) in [
        (
            "flag",
            format!("{V1},pin.crm.booking-expired.v3"),
            "unknown topic \"pin.crm.booking-expired.v3\"".to_owned(),
        ),
        ("env", format!("{V2},{V2}"), format!("{V2} is listed twice")),
        ("flag", format!("{V1},"), "an entry is empty".to_owned()),
        (
            "env",
            "booking-expired".to_owned(),
            "unknown topic \"booking-expired\"".to_owned(),
        ),
    ] {
        let mut cmd = db.command(&["run-once"]);
        if how == "flag" {
            cmd.args(["--topics", &value]);
        } else {
            cmd.env("BOOKING_EXPIRATION_TOPICS", &value);
        }
        let run = Run::of(cmd.output().unwrap());
        assert_eq!(run.code, 78, "{value}: {}", run.stderr);
        let want =
            format!("invalid --topics / BOOKING_EXPIRATION_TOPICS {value:?}: {why}; {allowed}");
        assert!(
            run.stderr.contains(&want),
            "want {want:?} in:\n{}",
            run.stderr
        );
        assert_eq!(run.stdout, "");
    }
    assert_eq!(checksum(&mut c), before, "a refused setting writes nothing");
}

#[test]
fn dry_run_shows_each_expiry_once_per_configured_topic() {
    let db = TestDb::new();
    let mut c = db.client();
    let seeds = seed_six(&mut c);
    let before = checksum(&mut c);
    let run = Run::of(
        db.command(&["dry-run", "--as-of", "now", "--json"])
            .env("BOOKING_EXPIRATION_TOPICS", format!("{V1},{V2}"))
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = json_lines(&run.stdout);
    let events: Vec<&Value> = lines.iter().filter(|l| l.get("Topic").is_some()).collect();
    assert_eq!(events.len(), 12, "{}", run.stdout);
    for s in &seeds {
        let mine: Vec<&&Value> = events
            .iter()
            .filter(|l| l["BookingId"] == json!(s.id.to_string()))
            .collect();
        let topics: Vec<&str> = mine.iter().map(|l| l["Topic"].as_str().unwrap()).collect();
        assert_eq!(topics, [V1, V2]);
        for (line, major) in mine.iter().zip([1, 2]) {
            let producer = contract_validator(major, false);
            assert!(
                producer.is_valid(&line["Event"]),
                "v{major}: {}",
                schema_errors(&producer, &line["Event"])
            );
            assert_eq!(
                line["Headers"]["ce_contractversion"],
                json!(major.to_string())
            );
        }
        assert_ne!(mine[0]["Headers"]["ce_id"], mine[1]["Headers"]["ce_id"]);
    }
    let summary = &lines.last().unwrap()["Summary"];
    assert_eq!(
        summary["Reserve"]["WouldExpire"],
        json!(3),
        "bookings, not events"
    );
    assert_eq!(summary["Booking"]["WouldExpire"], json!(3));
    assert_eq!(checksum(&mut c), before, "a dry run writes nothing");
}
