//! Golden messages (`contracts/examples/`): the relay produces the Reserve and Booking
//! examples of each contract version (v1 `reserve`, `booking`; v2 `reserve-v2`,
//! `booking-v2`) byte for byte from fixed inputs, on a real broker; every example is
//! valid for its version's consumer schema, and the ones the producer sends for its
//! producer schema.
//!
//! `GOLDEN_BLESS=1 cargo test --test it golden::` rewrites the produced examples from what
//! the relay sent (review the diff before committing it).

use crate::common;
use crate::postgres;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use booking_expire_domain::{ContractVersion, ExpiredEvent, Expiry, Phase, event_headers};
use chrono::{DateTime, Utc};
use common::kafka::*;
use common::*;
use postgres::types::Json;
use serde_json::{Value, json};
use uuid::Uuid;

fn example_path(name: &str) -> PathBuf {
    crate::common::repo().join(format!("contracts/examples/{name}.json"))
}

fn example(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(example_path(name)).unwrap()).unwrap()
}

fn schema(name: &str) -> jsonschema::Validator {
    let path = crate::common::repo().join(format!("contracts/{name}"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap()
}

fn uuid(s: &str) -> Uuid {
    s.parse().unwrap()
}

/// The fixed inputs: an expiry, its message id (v1's; v2's is the same id with `b` in
/// place of the twelfth-last digit); the run id is shared.
fn fixed(phase: Phase) -> (Expiry, Uuid) {
    use booking_expire_domain::Status;
    let at: DateTime<Utc> = "2026-11-29T18:00:00.123456Z".parse().unwrap();
    let (booking, from, to, message) = match phase {
        Phase::Reserve => (
            "3f2a9c1e-7b4d-4e8a-9c21-5d6e7f8a9b0c",
            Status::AwaitingPayment,
            Status::ReserveExpired,
            "019ad0c4-0000-7000-8000-00000000abcd",
        ),
        Phase::Booking => (
            "8d3e4f5a-6b7c-4d8e-9f01-23456789abcd",
            Status::Booked,
            Status::BookingExpired,
            "019ad0c4-0000-7000-8000-00000000abce",
        ),
    };
    (
        Expiry {
            booking_id: uuid(booking),
            tenant_id: uuid("11111111-2222-4333-8444-555555555555"),
            deal_id: uuid("22222222-3333-4444-8555-666666666666"),
            property_object_id: uuid("33333333-4444-4555-8666-777777777777"),
            phase,
            from,
            to,
            deadline: (at - chrono::Duration::minutes(5)).into(),
            expired_at: at,
            expected_version: 3,
        },
        uuid(message),
    )
}

const RUN_ID: &str = "6c0e1f6e-57c3-4bd2-9d0c-3b1ef1a2b3c4";

#[test]
fn the_relay_produces_the_golden_messages_byte_for_byte() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let names = [(Phase::Reserve, "reserve"), (Phase::Booking, "booking")];
    for (phase, _) in names {
        let (expiry, message_id) = fixed(phase);
        // The row exactly as the cycle writes it (jsonb payload and headers).
        c.execute(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                     headers, occurred_at)
             VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, $4, $5, $6)",
            &[
                &message_id,
                &expiry.booking_id.to_string(),
                &topic,
                &Json(&*ExpiredEvent::of(&expiry).to_json()),
                &Json(&*event_headers(&expiry, message_id, uuid(RUN_ID))),
                &expiry.expired_at,
            ],
        )
        .unwrap();
    }
    // The v2 rows, as a dual-publishing cycle writes them beside the v1 rows, on a
    // topic of their own.
    let topic_v2 = unique_topic();
    create_topic(&brokers, &topic_v2, 6, &[]);
    for (phase, _) in names {
        let (expiry, message_id) = fixed(phase);
        let message_id = v2_id(message_id);
        let v2 = ContractVersion::V2;
        c.execute(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                     headers, occurred_at)
             VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, $4, $5, $6)",
            &[
                &message_id,
                &expiry.booking_id.to_string(),
                &topic_v2,
                &Json(&*v2.payload(&expiry)),
                &Json(&*v2.headers(&expiry, message_id, uuid(RUN_ID))),
                &expiry.expired_at,
            ],
        )
        .unwrap();
    }
    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The publication line names the event: its booking, deal, object, phase, moment.
    for (phase, _) in names {
        let (expiry, message_id) = fixed(phase);
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains("event published") && l.contains(&message_id.to_string()))
            .unwrap_or_else(|| panic!("no publication line for {message_id}:\n{}", run.stderr));
        for want in [
            format!("BookingId={}", expiry.booking_id),
            format!("DealId={}", expiry.deal_id),
            format!("PropertyObjectId={}", expiry.property_object_id),
            format!("Phase={phase}"),
            "ExpiredAt=2026-11-29T18:00:00.123456Z".to_owned(),
            format!("Topic={topic}"),
        ] {
            assert!(line.contains(&want), "{want} not in: {line}");
        }
    }
    for (read_from, published_as, suffix) in [
        (&topic, "pin.crm.booking-expired.v1", ""),
        (&topic_v2, "pin.crm.booking-expired.v2", "-v2"),
    ] {
        compare_with_examples(&brokers, read_from, published_as, suffix);
    }
}

/// The v2 message id of a fixed input.
fn v2_id(v1: Uuid) -> Uuid {
    let text = v1.to_string().replace("-00000000ab", "-00000000bb");
    assert_ne!(text, v1.to_string());
    uuid(&text)
}

/// Reads the two records of `read_from` and compares each with its example
/// (`reserve{suffix}`, `booking{suffix}`), which names the topic `published_as`.
fn compare_with_examples(brokers: &str, read_from: &str, published_as: &str, suffix: &str) {
    let names = [(Phase::Reserve, "reserve"), (Phase::Booking, "booking")];
    let got = consume(brokers, read_from, 6, 2, Duration::from_secs(30));
    assert_eq!(got.len(), 2);
    for (phase, name) in names {
        let name = format!("{name}{suffix}");
        let name = name.as_str();
        let (expiry, _) = fixed(phase);
        let m = got
            .iter()
            .find(|m| m.key == expiry.booking_id.to_string())
            .unwrap();
        let sent = json!({
            "topic": published_as,
            "partition": m.partition,
            "key": m.key,
            "headers": m.headers,
            "value": String::from_utf8(m.raw_payload.clone()).unwrap(),
        });
        if std::env::var_os("GOLDEN_BLESS").is_some() {
            std::fs::write(
                example_path(name),
                serde_json::to_string_pretty(&sent).unwrap() + "\n",
            )
            .unwrap();
        }
        let want = example(name);
        assert_eq!(
            sent, want,
            "{name}: what the relay sent differs from the example"
        );
        assert_eq!(m.partition, java_partition(&m.key, 6), "Java's partitioner");
    }
}

/// The value of an example, parsed.
fn value(example: &Value) -> Value {
    serde_json::from_str(example["value"].as_str().unwrap()).unwrap()
}

#[test]
fn every_example_is_valid_for_the_consumer_and_the_sent_ones_for_the_producer() {
    let producer = schema("booking-expired.v1.schema.json");
    let consumer = schema("booking-expired.v1.consumer.schema.json");
    for name in ["reserve", "booking"] {
        let v = value(&example(name));
        assert!(producer.is_valid(&v), "{name}: producer schema");
        assert!(consumer.is_valid(&v), "{name}: consumer schema");
    }
    let later = value(&example("unknown-phase-v1x"));
    assert!(consumer.is_valid(&later), "a compatible v1.x message");
    assert!(
        !producer.is_valid(&later),
        "this producer never sends it (unknown Phase, extra field)"
    );
    let twice = example("duplicate-delivery");
    let deliveries = twice["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2);
    let ids: Vec<&Value> = deliveries.iter().map(|d| &d["headers"]["ce_id"]).collect();
    assert_eq!(ids[0], ids[1], "one event, delivered twice: same ce_id");
    assert_eq!(deliveries[0]["key"], deliveries[1]["key"]);
    assert_eq!(deliveries[0]["value"], deliveries[1]["value"]);
    assert!(deliveries[0]["offset"] != deliveries[1]["offset"]);
    for d in deliveries {
        assert!(producer.is_valid(&value(d)));
    }
    // Version 2's examples: valid for v2, not for v1 (TenantId is named DeveloperId).
    let (producer_v2, consumer_v2) = (
        schema("booking-expired.v2.schema.json"),
        schema("booking-expired.v2.consumer.schema.json"),
    );
    for name in ["reserve-v2", "booking-v2"] {
        let v = value(&example(name));
        assert!(producer_v2.is_valid(&v), "{name}: v2 producer schema");
        assert!(consumer_v2.is_valid(&v), "{name}: v2 consumer schema");
        assert!(!consumer.is_valid(&v), "{name}: v1 consumer schema");
        let v1 = value(&example(name.trim_end_matches("-v2")));
        assert_eq!(v["DeveloperId"], v1["TenantId"], "{name}: the same event");
        let headers = &example(name)["headers"];
        assert_eq!(headers["ce_contractversion"], json!("2"));
        assert_eq!(headers["ce_type"], json!("pin.crm.booking-expired.v2"));
        assert_eq!(
            headers["ce_dataschema"],
            json!("urn:pin:crm:booking-expired:v2:consumer")
        );
    }

    // The examples' headers are the ten the contract names.
    let headers: BTreeMap<String, Value> =
        serde_json::from_value(example("reserve")["headers"].clone()).unwrap();
    assert_eq!(
        headers.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "ce_contractversion",
            "ce_correlationid",
            "ce_id",
            "ce_source",
            "ce_specversion",
            "ce_subject",
            "ce_time",
            "ce_type",
            "content-type",
            "traceparent"
        ]
    );
}
