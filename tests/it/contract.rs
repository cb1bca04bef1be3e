//! The event contract's JSON Schemas (`contracts/`), for each major version: the
//! producer's strict one and the consumers' tolerant one, generated from
//! `contracts/asyncapi.yaml` (v1) and `contracts/asyncapi-v2.yaml` (v2).
//!
//! - formats (`uuid`, `date-time`) are asserted, not just patterned;
//! - the tables `contracts/validation-cases.json` and `validation-cases-v2.json` pass or
//!   fail each schema as they say;
//! - the consumer schema is exactly the producer schema without its producer-only
//!   keywords (so the two cannot drift apart);
//! - every producer-valid message is consumer-valid, and each schema accepts exactly
//!   what it should (a property over generated messages).
//!
//! No database or broker needed. `scripts/contract-check.sh` checks the same files
//! with the AsyncAPI tooling and ajv, and that asyncapi.yaml still generates them.

use jsonschema::Validator;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn read_json(name: &str) -> Value {
    let path = crate::common::repo().join("contracts").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The contract versions and the name each gives the developer company's id (v2 renamed
/// v1's `TenantId`).
const VERSIONS: [(u32, &str); 2] = [(1, "TenantId"), (2, "DeveloperId")];

fn producer_schema_of(major: u32) -> Value {
    read_json(&format!("booking-expired.v{major}.schema.json"))
}

fn consumer_schema_of(major: u32) -> Value {
    read_json(&format!("booking-expired.v{major}.consumer.schema.json"))
}

fn producer_schema() -> Value {
    producer_schema_of(1)
}

fn consumer_schema() -> Value {
    consumer_schema_of(1)
}

/// A validator that asserts formats (jsonschema only annotates them by default under
/// drafts 2019-09 and 2020-12) and refuses formats it does not know.
fn asserting(schema: &Value) -> Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .should_ignore_unknown_formats(false)
        .build(schema)
        .unwrap_or_else(|e| panic!("invalid schema: {e}"))
}

fn producer() -> Validator {
    asserting(&producer_schema())
}

fn consumer() -> Validator {
    asserting(&consumer_schema())
}

fn errors(v: &Validator, m: &Value) -> String {
    v.iter_errors(m)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn good() -> Value {
    json!({
        "BookingId": "6f1c2b8e-3d4a-4e5f-9a6b-7c8d9e0f1a2b",
        "TenantId": "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
        "DealId": "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e",
        "PropertyObjectId": "3c4d5e6f-7a8b-4c9d-8e0f-2a3b4c5d6e7f",
        "Phase": "Reserve",
        "ExpiredAt": "2026-11-29T18:00:00.123456Z",
    })
}

fn with(field: &str, value: Value) -> Value {
    let mut m = good();
    m[field] = value;
    m
}

#[test]
fn both_schemas_are_draft_2020_12_and_valid() {
    for schema in [producer_schema(), consumer_schema()] {
        assert_eq!(
            schema["$schema"],
            json!("https://json-schema.org/draft/2020-12/schema")
        );
        assert!(
            jsonschema::meta::is_valid(&schema),
            "{}: not a valid JSON Schema",
            schema["$id"]
        );
    }
    assert_eq!(
        producer_schema()["$id"],
        json!("urn:pin:crm:booking-expired:v1:producer")
    );
    assert_eq!(
        consumer_schema()["$id"],
        json!("urn:pin:crm:booking-expired:v1:consumer")
    );
}

#[test]
fn version_2_schemas_are_valid_and_differ_from_v1_in_the_renamed_field_only() {
    for (schema, side) in [
        (producer_schema_of(2), "producer"),
        (consumer_schema_of(2), "consumer"),
    ] {
        assert!(
            jsonschema::meta::is_valid(&schema),
            "v2 {side}: not a valid JSON Schema"
        );
        assert_eq!(
            schema["$id"],
            json!(format!("urn:pin:crm:booking-expired:v2:{side}"))
        );
    }
    for (v1, v2) in [
        (producer_schema_of(1), producer_schema_of(2)),
        (consumer_schema_of(1), consumer_schema_of(2)),
    ] {
        let mut renamed = v1["properties"].clone();
        let tenant = renamed.as_object_mut().unwrap().remove("TenantId").unwrap();
        let developer = &v2["properties"]["DeveloperId"];
        // Same type, format and pattern; only the description tells the story.
        for keyword in ["type", "format", "pattern"] {
            assert_eq!(tenant[keyword], developer[keyword], "{keyword}");
        }
        renamed["DeveloperId"] = developer.clone();
        assert_eq!(renamed, v2["properties"]);
        let required = |s: &Value| s["required"].clone();
        assert_eq!(
            required(&v2),
            json!([
                "BookingId",
                "DeveloperId",
                "DealId",
                "PropertyObjectId",
                "Phase",
                "ExpiredAt"
            ])
        );
        assert_eq!(required(&v1)[1], json!("TenantId"));
    }
}

#[test]
fn formats_are_asserted_not_just_patterned() {
    let impossible = with("ExpiredAt", json!("2026-13-45T25:61:61Z"));
    // The consumer's ExpiredAt pattern is only the shape of a date-time: the month 13
    // fits it. Without format assertion it would pass...
    let annotating = jsonschema::validator_for(&consumer_schema()).unwrap();
    assert!(
        annotating.is_valid(&impossible),
        "the pattern alone catches it: this test no longer shows what format assertion adds"
    );
    // ... and asserted, `format: date-time` rejects it, in both schemas.
    for (name, v) in [("producer", producer()), ("consumer", consumer())] {
        let e = errors(&v, &impossible);
        assert!(
            e.contains("/ExpiredAt") && e.contains("date-time"),
            "{name}: want a date-time format error at /ExpiredAt, got: {e:?}"
        );
    }
    // The identifiers' patterns are stricter than `format: uuid`, which the validator
    // knows (`should_ignore_unknown_formats(false)` would have refused the schema
    // otherwise): check that each field carries its format, in both schemas.
    for schema in [producer_schema(), consumer_schema()] {
        for field in ["BookingId", "TenantId", "DealId", "PropertyObjectId"] {
            assert_eq!(
                schema["properties"][field]["format"],
                json!("uuid"),
                "{field}"
            );
        }
        assert_eq!(
            schema["properties"]["ExpiredAt"]["format"],
            json!("date-time")
        );
    }
}

#[test]
fn the_validation_tables_pass_and_fail_each_schema_as_they_say() {
    for (major, tenant_field) in VERSIONS {
        validation_table(major, tenant_field);
    }
    // v2's own cases: a v1 value is not a v2 value; v1's old name as an extra field is.
    let table = read_json("validation-cases-v2.json");
    let case = |name: &str| {
        table["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == json!(name))
            .unwrap_or_else(|| panic!("no case {name:?} in the v2 table"))
            .clone()
    };
    let v1_value = case("a version 1 value");
    assert_eq!(
        (&v1_value["producer"], &v1_value["consumer"]),
        (&json!(false), &json!(false))
    );
    assert!(
        producer().is_valid(&v1_value["payload"]),
        "it is a good v1 value"
    );
    let both = case("DeveloperId and TenantId");
    assert_eq!(
        (&both["producer"], &both["consumer"]),
        (&json!(false), &json!(true))
    );
}

fn validation_table(major: u32, tenant_field: &str) {
    let table = read_json(if major == 1 {
        "validation-cases.json"
    } else {
        "validation-cases-v2.json"
    });
    let cases = table["cases"].as_array().unwrap();
    let producer = asserting(&producer_schema_of(major));
    let consumer = asserting(&consumer_schema_of(major));
    let mut failures = Vec::new();
    for c in cases {
        let name = c["name"].as_str().unwrap();
        for (side, v) in [("producer", &producer), ("consumer", &consumer)] {
            let want = c[side].as_bool().unwrap();
            let got = v.is_valid(&c["payload"]);
            if got != want {
                failures.push(format!(
                    "{name:?}: the {side} schema {} it ({})",
                    if got { "accepts" } else { "rejects" },
                    errors(v, &c["payload"])
                ));
            }
        }
    }
    assert!(failures.is_empty(), "v{major}: {}", failures.join("\n"));

    // The table holds the acceptance cases of the contract.
    let case = |name: &str| {
        cases
            .iter()
            .find(|c| c["name"] == json!(name))
            .unwrap_or_else(|| panic!("no case {name:?} in the table"))
    };
    let expect = |name: &str, producer: bool, consumer: bool| {
        let c = case(name);
        assert_eq!(
            (c["producer"].as_bool(), c["consumer"].as_bool()),
            (Some(producer), Some(consumer)),
            "{name}"
        );
    };
    expect("reserve", true, true);
    expect("booking", true, true);
    expect("unknown phase", false, true);
    assert_eq!(case("unknown phase")["payload"]["Phase"], json!("Hold"));
    expect("extra field", false, true);
    expect("impossible date-time", false, false);
    assert_eq!(
        case("impossible date-time")["payload"]["ExpiredAt"],
        json!("2026-13-45T25:61:61Z")
    );
    for field in [
        "BookingId",
        tenant_field,
        "DealId",
        "PropertyObjectId",
        "Phase",
        "ExpiredAt",
    ] {
        expect(&format!("missing {field}"), false, false);
    }
}

/// The consumer schema as the producer schema defines it: every keyword a node lists
/// in `x-producer-only` dropped, and the annotation with it.
fn consumer_side(node: &Value) -> Value {
    match node {
        Value::Array(items) => Value::Array(items.iter().map(consumer_side).collect()),
        Value::Object(map) => {
            let dropped: Vec<&str> = map
                .get("x-producer-only")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            map.iter()
                .filter(|(k, _)| *k != "x-producer-only" && !dropped.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), consumer_side(v)))
                .collect::<Map<_, _>>()
                .into()
        }
        other => other.clone(),
    }
}

#[test]
fn the_consumer_schema_is_the_producer_schema_without_its_producer_only_keywords() {
    let mut derived = consumer_side(&producer_schema_of(2));
    let mut consumer = consumer_schema_of(2);
    for key in ["$id", "title", "description"] {
        derived.as_object_mut().unwrap().remove(key);
        consumer.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(
        derived, consumer,
        "the v2 consumer schema drifted from its producer schema"
    );

    let mut derived = consumer_side(&producer_schema());
    let mut consumer = consumer_schema();
    // Their headers differ by design.
    for key in ["$id", "title", "description"] {
        derived.as_object_mut().unwrap().remove(key);
        consumer.as_object_mut().unwrap().remove(key);
    }
    assert_eq!(
        derived, consumer,
        "contracts/booking-expired.v1.consumer.schema.json drifted from the producer \
         schema: run scripts/contract-check.sh --write"
    );
    // And what the producer-only keywords are today: closed object, closed Phase list,
    // the producer's own timestamp form.
    let p = producer_schema();
    assert_eq!(p["additionalProperties"], json!(false));
    assert_eq!(p["x-producer-only"], json!(["additionalProperties"]));
    assert_eq!(
        p["properties"]["Phase"]["enum"],
        json!(["Reserve", "Booking"])
    );
    assert_eq!(p["properties"]["Phase"]["x-producer-only"], json!(["enum"]));
    assert_eq!(
        p["properties"]["ExpiredAt"]["x-producer-only"],
        json!(["allOf"])
    );
    let c = consumer_schema();
    assert!(c.get("additionalProperties").is_none());
    assert!(c["properties"]["Phase"].get("enum").is_none());
    assert!(c["properties"]["ExpiredAt"].get("allOf").is_none());
}

// --- the property -----------------------------------------------------------------

/// One field's value and what each side should make of it.
#[derive(Debug, Clone)]
struct Field {
    value: Option<Value>,
    producer_ok: bool,
    consumer_ok: bool,
}

fn field(value: Option<Value>, producer_ok: bool, consumer_ok: bool) -> Field {
    Field {
        value,
        producer_ok,
        consumer_ok,
    }
}

fn guid() -> impl Strategy<Value = Field> {
    prop_oneof![
        8 => any::<u128>().prop_map(|n| field(
            Some(json!(uuid::Uuid::from_u128(n).to_string())), true, true)),
        1 => any::<u128>().prop_map(|n| field(
            Some(json!(uuid::Uuid::from_u128(n).to_string().to_uppercase())), false, false)),
        1 => any::<u128>().prop_map(|n| field(
            Some(json!(uuid::Uuid::from_u128(n).simple().to_string())), false, false)),
        1 => "[0-9a-f-]{0,40}".prop_map(|s| field(Some(json!(s)), false, false)),
        1 => any::<i64>().prop_map(|n| field(Some(json!(n)), false, false)),
        1 => Just(field(None, false, false)),
    ]
    .prop_filter("a random string may happen to be a UUID", |f| {
        f.producer_ok
            || !f.value.as_ref().and_then(Value::as_str).is_some_and(|s| {
                s.len() == 36 && uuid::Uuid::parse_str(s).is_ok() && s == s.to_lowercase()
            })
    })
}

fn phase() -> impl Strategy<Value = Field> {
    prop_oneof![
        8 => proptest::sample::select(&["Reserve", "Booking"][..])
            .prop_map(|p| field(Some(json!(p)), true, true)),
        3 => "[A-Za-z]{1,12}"
            .prop_filter("a known phase", |s| s != "Reserve" && s != "Booking")
            .prop_map(|p| field(Some(json!(p)), false, true)),
        1 => any::<i32>().prop_map(|n| field(Some(json!(n)), false, false)),
        1 => Just(field(Some(Value::Null), false, false)),
        1 => Just(field(None, false, false)),
    ]
}

fn expired_at() -> impl Strategy<Value = Field> {
    // Seconds from 2000 to 2100, microseconds, and an offset in minutes.
    let moment = (
        946_684_800i64..4_102_444_800,
        0u32..1_000_000,
        -14 * 60..=14 * 60i32,
    );
    prop_oneof![
        8 => moment.clone().prop_map(|(s, us, _)| {
            let t = chrono::DateTime::from_timestamp(s, us * 1000).unwrap();
            field(Some(json!(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))), true, true)
        }),
        2 => moment.clone().prop_map(|(s, us, off)| {
            let t = chrono::DateTime::from_timestamp(s, us * 1000)
                .unwrap()
                .with_timezone(&chrono::FixedOffset::east_opt(off * 60).unwrap());
            // Any RFC 3339 offset and precision is consumer-valid; the producer writes
            // `Z` and microseconds only.
            let text = t.to_rfc3339_opts(chrono::SecondsFormat::Secs, off == 0 && us % 2 == 0);
            field(Some(json!(text)), false, true)
        }),
        // Right shape, impossible values: month, day, hour, minute or second.
        2 => (1u32..=5, 0usize..5).prop_map(|(n, which)| {
            let mut parts = ["2026", "11", "29", "18", "00", "00"];
            let bad = [
                format!("{}", 12 + n), format!("{}", 31 + n), format!("{}", 23 + n),
                format!("{}", 59 + n + 1), format!("{}", 60 + n),
            ];
            parts[which + 1] = bad[which].as_str();
            let text = format!(
                "{}-{}-{}T{}:{}:{}.000000Z", parts[0], parts[1], parts[2], parts[3], parts[4], parts[5]
            );
            field(Some(json!(text)), false, false)
        }),
        1 => Just(field(Some(json!("2026-11-29T18:00:00.123456")), false, false)),
        1 => Just(field(Some(json!("2026-11-29")), false, false)),
        1 => any::<i64>().prop_map(|n| field(Some(json!(n)), false, false)),
        1 => Just(field(None, false, false)),
    ]
}

/// A message built from generated fields, maybe with one extra field, and what each
/// schema should say about it; `tenant_field` names the developer company's id.
fn message(tenant_field: &'static str) -> impl Strategy<Value = (Value, bool, bool)> {
    (
        [guid(), guid(), guid(), guid()],
        phase(),
        expired_at(),
        proptest::option::weighted(0.2, ("[A-Z][A-Za-z]{0,10}", any::<i32>())),
    )
        .prop_map(|(guids, phase, expired_at, extra)| {
            let names = [
                "BookingId",
                tenant_field,
                "DealId",
                "PropertyObjectId",
                "Phase",
                "ExpiredAt",
            ];
            let fields: Vec<Field> = guids.into_iter().chain([phase, expired_at]).collect();
            let mut m = Map::new();
            for (name, f) in names.iter().zip(&fields) {
                if let Some(v) = &f.value {
                    m.insert((*name).to_owned(), v.clone());
                }
            }
            let mut producer_ok = fields.iter().all(|f| f.producer_ok);
            let consumer_ok = fields.iter().all(|f| f.consumer_ok);
            if let Some((name, value)) = extra
                && !names.contains(&name.as_str())
            {
                m.insert(name, json!(value));
                producer_ok = false;
            }
            (Value::Object(m), producer_ok, consumer_ok)
        })
}

proptest! {
    #[test]
    fn every_producer_valid_v2_message_is_consumer_valid((m, producer_ok, consumer_ok) in message("DeveloperId")) {
        thread_local! {
            static VALIDATORS: (Validator, Validator) =
                (asserting(&producer_schema_of(2)), asserting(&consumer_schema_of(2)));
        }
        VALIDATORS.with(|(producer, consumer)| {
            let p = producer.is_valid(&m);
            let c = consumer.is_valid(&m);
            prop_assert!(!p || c, "producer-valid but consumer-invalid: {m} ({})", errors(consumer, &m));
            prop_assert_eq!(p, producer_ok, "producer schema on {}: {}", m, errors(producer, &m));
            prop_assert_eq!(c, consumer_ok, "consumer schema on {}: {}", m, errors(consumer, &m));
            Ok(())
        })?;
    }

    #[test]
    fn every_producer_valid_message_is_consumer_valid((m, producer_ok, consumer_ok) in message("TenantId")) {
        thread_local! {
            static VALIDATORS: (Validator, Validator) = (producer(), consumer());
        }
        VALIDATORS.with(|(producer, consumer)| {
            let p = producer.is_valid(&m);
            let c = consumer.is_valid(&m);
            prop_assert!(!p || c, "producer-valid but consumer-invalid: {m} ({})", errors(consumer, &m));
            prop_assert_eq!(p, producer_ok, "producer schema on {}: {}", m, errors(producer, &m));
            prop_assert_eq!(c, consumer_ok, "consumer schema on {}: {}", m, errors(consumer, &m));
            Ok(())
        })?;
    }
}
