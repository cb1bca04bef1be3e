//! `relay-outbox` against a real Apache Kafka broker of the test's own
//! (`OwnBroker`): one to stop, kill and restart under the relay, or one whose topic
//! may take the contract's real name. The helpers are those of `relay`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use crate::relay::{TOPIC, expire_into, insert_outbox, pending, relay, relay_ok};
use serde_json::json;
use uuid::Uuid;

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

    let got = consume(&broker.brokers, TOPIC, 6, 40, Duration::from_secs(90));
    assert_eq!(got.len(), 40, "exactly one message per expired booking");
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            crate::common::repo().join("contracts/booking-expired.v1.schema.json"),
        )
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
        records_on(&broker.brokers, TOPIC, 6),
        40,
        "nothing sent again"
    );
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
