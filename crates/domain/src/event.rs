//! The integration event `pin.crm.booking-expired`: its contract versions (one topic
//! each), the payload of each version and its CloudEvents headers (Kafka binding,
//! binary mode).
//!
//! Version 1 is the released contract. Version 2 is its one breaking change: the field
//! `TenantId` is named `DeveloperId` (same value). A transition writes one outbox row
//! per configured version, each with its own message id, payload and headers.

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{Expiry, Phase};

pub const EVENT_TYPE: &str = "pin.crm.booking-expired";
/// The topic of contract version 1, the default.
pub const TOPIC: &str = "pin.crm.booking-expired.v1";
pub const AGGREGATE_TYPE: &str = "Booking";
pub const CE_SOURCE: &str = "/pin/crm/booking-expiration";

/// A major version of the event's contract: its own topic, payload shape and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContractVersion {
    V1,
    V2,
}

impl ContractVersion {
    /// Every version this build can write, oldest first.
    pub const ALL: [ContractVersion; 2] = [ContractVersion::V1, ContractVersion::V2];

    /// The major version number: the topic suffix and `ce_contractversion`.
    pub fn number(self) -> u32 {
        match self {
            ContractVersion::V1 => 1,
            ContractVersion::V2 => 2,
        }
    }

    /// The topic this version is published on.
    pub fn topic(self) -> &'static str {
        match self {
            ContractVersion::V1 => TOPIC,
            ContractVersion::V2 => "pin.crm.booking-expired.v2",
        }
    }

    /// The version whose topic is `topic`, if any.
    pub fn of_topic(topic: &str) -> Option<ContractVersion> {
        Self::ALL.into_iter().find(|v| v.topic() == topic)
    }

    /// `ce_type`: v1 keeps the released `pin.crm.booking-expired`; from v2 on the type
    /// names its version, so a consumer can tell the shapes apart by type alone.
    pub fn ce_type(self) -> &'static str {
        match self {
            ContractVersion::V1 => EVENT_TYPE,
            ContractVersion::V2 => "pin.crm.booking-expired.v2",
        }
    }

    /// `ce_dataschema`: the consumer schema's `$id` (`contracts/`). v1 was released
    /// without the header and keeps its ten headers unchanged.
    pub fn dataschema(self) -> Option<&'static str> {
        match self {
            ContractVersion::V1 => None,
            ContractVersion::V2 => Some("urn:pin:crm:booking-expired:v2:consumer"),
        }
    }

    /// The event's value in this version's shape, as JSON text (fields in the
    /// contract's order): written to the outbox as it is, with no document built.
    pub fn payload(self, expiry: &Expiry) -> Box<RawValue> {
        let v1 = ExpiredEvent::of(expiry);
        match self {
            ContractVersion::V1 => v1.to_json(),
            ContractVersion::V2 => json_text(&ExpiredEventV2::from(v1)),
        }
    }

    /// The CloudEvents headers of this version's event, as the JSON text of an object
    /// of names and string values, by name: see [`event_headers`].
    pub fn headers(self, expiry: &Expiry, message_id: Uuid, run_id: Uuid) -> Box<RawValue> {
        let mut pairs: Vec<(&str, String)> = vec![
            ("ce_specversion", "1.0".to_owned()),
            ("ce_id", message_id.to_string()),
            ("ce_type", self.ce_type().to_owned()),
            ("ce_source", CE_SOURCE.to_owned()),
            ("ce_subject", expiry.booking_id.to_string()),
            ("ce_time", rfc3339(expiry.expired_at)),
            ("content-type", "application/json".to_owned()),
            ("ce_contractversion", self.number().to_string()),
            ("ce_correlationid", run_id.to_string()),
            ("traceparent", traceparent(run_id, message_id)),
        ];
        if let Some(schema) = self.dataschema() {
            pairs.push(("ce_dataschema", schema.to_owned()));
        }
        pairs.sort_unstable_by_key(|&(name, _)| name);
        json_text(&Pairs(&pairs))
    }
}

/// Names and values serialized as one JSON object, in the order given.
struct Pairs<'a>(&'a [(&'a str, String)]);

impl Serialize for Pairs<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(name, value)| (name, value)))
    }
}

/// The JSON text of a value that always serializes (strings and identifiers only).
fn json_text(value: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("an event's JSON always serializes")
}

impl std::fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.topic())
    }
}

/// The event's value, contract version 1: exactly these six fields, identifiers only
/// (no PII).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExpiredEvent {
    pub booking_id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub phase: &'static str,
    /// RFC 3339 with offset.
    pub expired_at: String,
}

impl ExpiredEvent {
    pub fn of(expiry: &Expiry) -> Self {
        ExpiredEvent {
            booking_id: expiry.booking_id,
            tenant_id: expiry.tenant_id,
            deal_id: expiry.deal_id,
            property_object_id: expiry.property_object_id,
            phase: expiry.phase.as_str(),
            expired_at: rfc3339(expiry.expired_at),
        }
    }

    /// The payload's JSON text, fields in the contract's order.
    pub fn to_json(&self) -> Box<RawValue> {
        json_text(self)
    }
}

/// The event's value, contract version 2: version 1 with `TenantId` named
/// `DeveloperId` (the developer company the property object belongs to).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ExpiredEventV2 {
    pub booking_id: Uuid,
    pub developer_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub phase: &'static str,
    pub expired_at: String,
}

impl From<ExpiredEvent> for ExpiredEventV2 {
    fn from(v1: ExpiredEvent) -> Self {
        ExpiredEventV2 {
            booking_id: v1.booking_id,
            developer_id: v1.tenant_id,
            deal_id: v1.deal_id,
            property_object_id: v1.property_object_id,
            phase: v1.phase,
            expired_at: v1.expired_at,
        }
    }
}

/// RFC 3339 with microseconds (PostgreSQL's precision) and `Z` as the UTC offset.
pub fn rfc3339(at: impl Into<super::Timestamp>) -> String {
    at.into().to_string()
}

/// The CloudEvents headers of one contract-version-1 event, captured when the outbox
/// row is written. `message_id` is the outbox row's id and the event's `ce_id`;
/// `run_id` the cycle's correlation id and the W3C trace id.
pub fn event_headers(expiry: &Expiry, message_id: Uuid, run_id: Uuid) -> Box<RawValue> {
    ContractVersion::V1.headers(expiry, message_id, run_id)
}

/// `headers` (an object of names and string values) with `name` set to `value`, still
/// by name. For a header the cycle learns only while it writes (the batch's trace).
pub fn with_header(headers: &RawValue, name: &str, value: &str) -> Box<RawValue> {
    let mut pairs: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(headers.get()).expect("headers are always an object");
    pairs.insert(name.to_owned(), value.into());
    json_text(&pairs)
}

/// A W3C `traceparent`: the run is the trace, each event a span of it. The span id is
/// the random tail of the message id, so it is unique per event and reproducible.
pub fn traceparent(run_id: Uuid, message_id: Uuid) -> String {
    let span = match message_id.as_u64_pair().1 {
        0 => 1,
        s => s,
    };
    format!("00-{}-{span:016x}-01", run_id.simple())
}

impl Phase {
    /// The deal-timeline entry the domain event BookingExpired produces.
    pub fn timeline_kind(self) -> &'static str {
        match self {
            Phase::Reserve => "BookingReserveExpired",
            Phase::Booking => "BookingExpired",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Status, payload_in_contract_order};
    use chrono::{TimeZone, Utc};

    fn value(text: &RawValue) -> serde_json::Value {
        serde_json::from_str(text.get()).unwrap()
    }

    fn expiry() -> Expiry {
        Expiry {
            booking_id: Uuid::parse_str("0f8fad5b-d9cb-469f-a165-70867728950e").unwrap(),
            tenant_id: Uuid::from_u128(2),
            deal_id: Uuid::from_u128(3),
            property_object_id: Uuid::from_u128(4),
            phase: Phase::Booking,
            from: Status::Booked,
            to: Status::BookingExpired,
            deadline: Utc.with_ymd_and_hms(2026, 11, 29, 17, 0, 0).unwrap().into(),
            expired_at: Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap()
                + chrono::Duration::microseconds(123_456),
            expected_version: 1,
        }
    }

    #[test]
    fn payload_has_exactly_the_six_contract_fields() {
        let json = ExpiredEvent::of(&expiry()).to_json();
        // Written in the contract's field order.
        assert_eq!(
            json.get(),
            r#"{"BookingId":"0f8fad5b-d9cb-469f-a165-70867728950e","TenantId":"00000000-0000-0000-0000-000000000002","DealId":"00000000-0000-0000-0000-000000000003","PropertyObjectId":"00000000-0000-0000-0000-000000000004","Phase":"Booking","ExpiredAt":"2026-11-29T18:00:00.123456Z"}"#
        );
        assert_eq!(
            value(&json),
            serde_json::json!({
                "BookingId": "0f8fad5b-d9cb-469f-a165-70867728950e",
                "TenantId": "00000000-0000-0000-0000-000000000002",
                "DealId": "00000000-0000-0000-0000-000000000003",
                "PropertyObjectId": "00000000-0000-0000-0000-000000000004",
                "Phase": "Booking",
                "ExpiredAt": "2026-11-29T18:00:00.123456Z",
            })
        );
    }

    #[test]
    fn headers_follow_the_cloudevents_binary_mode() {
        let message_id = Uuid::parse_str("019ad0c4-0000-7000-8000-00000000abcd").unwrap();
        let run_id = Uuid::parse_str("6c0e1f6e-57c3-4bd2-9d0c-3b1ef1a2b3c4").unwrap();
        let text = event_headers(&expiry(), message_id, run_id);
        let headers = value(&text);
        let headers = headers.as_object().unwrap();
        // By name.
        let names: Vec<&String> = headers.keys().collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(
            text.get()
                .starts_with(r#"{"ce_contractversion":"1","ce_correlationid":"#)
        );
        let get = |k: &str| headers[k].as_str().unwrap().to_owned();
        assert_eq!(headers.len(), 10);
        assert_eq!(get("ce_specversion"), "1.0");
        assert_eq!(get("ce_id"), message_id.to_string());
        assert_eq!(get("ce_type"), "pin.crm.booking-expired");
        assert_eq!(get("ce_source"), "/pin/crm/booking-expiration");
        assert_eq!(get("ce_subject"), "0f8fad5b-d9cb-469f-a165-70867728950e");
        assert_eq!(get("ce_time"), "2026-11-29T18:00:00.123456Z");
        assert_eq!(get("content-type"), "application/json");
        assert_eq!(get("ce_contractversion"), "1");
        assert_eq!(get("ce_correlationid"), run_id.to_string());
        assert_eq!(
            get("traceparent"),
            "00-6c0e1f6e57c34bd29d0c3b1ef1a2b3c4-800000000000abcd-01"
        );
    }

    #[test]
    fn version_2_names_tenant_id_developer_id_and_its_headers_name_the_version() {
        let e = expiry();
        let v2 = value(&ContractVersion::V2.payload(&e));
        let mut want = value(&ContractVersion::V1.payload(&e));
        let tenant = want.as_object_mut().unwrap().remove("TenantId").unwrap();
        want["DeveloperId"] = tenant;
        assert_eq!(v2, want);
        assert_eq!(
            payload_in_contract_order(&v2.to_string()),
            r#"{"BookingId":"0f8fad5b-d9cb-469f-a165-70867728950e","DeveloperId":"00000000-0000-0000-0000-000000000002","DealId":"00000000-0000-0000-0000-000000000003","PropertyObjectId":"00000000-0000-0000-0000-000000000004","Phase":"Booking","ExpiredAt":"2026-11-29T18:00:00.123456Z"}"#
        );

        let message_id = Uuid::from_u128(7);
        let v1 = value(&ContractVersion::V1.headers(&e, message_id, Uuid::from_u128(8)));
        let v2 = value(&ContractVersion::V2.headers(&e, message_id, Uuid::from_u128(8)));
        assert_eq!(
            v1,
            value(&event_headers(&e, message_id, Uuid::from_u128(8)))
        );
        assert!(v1.get("ce_dataschema").is_none());
        assert_eq!(v2.as_object().unwrap().len(), 11);
        assert_eq!(v2["ce_type"], "pin.crm.booking-expired.v2");
        assert_eq!(v2["ce_contractversion"], "2");
        assert_eq!(
            v2["ce_dataschema"],
            "urn:pin:crm:booking-expired:v2:consumer"
        );
        for same in ["ce_id", "ce_subject", "ce_time", "ce_source", "traceparent"] {
            assert_eq!(v1[same], v2[same], "{same}");
        }
    }

    #[test]
    fn each_version_has_its_topic() {
        for v in ContractVersion::ALL {
            assert_eq!(ContractVersion::of_topic(v.topic()), Some(v));
            assert!(v.topic().ends_with(&format!(".v{}", v.number())));
        }
        assert_eq!(ContractVersion::of_topic("pin.crm.booking-expired"), None);
    }

    #[test]
    fn a_header_set_later_replaces_its_value_and_the_names_stay_in_order() {
        let headers = event_headers(&expiry(), Uuid::from_u128(7), Uuid::from_u128(8));
        let traced = with_header(&headers, "traceparent", "00-abc-def-01");
        let (before, after) = (value(&headers), value(&traced));
        assert_eq!(after["traceparent"], "00-abc-def-01");
        let mut want = before.clone();
        want["traceparent"] = "00-abc-def-01".into();
        assert_eq!(after, want);
        let names: Vec<&str> = traced
            .get()
            .split(['{', ','])
            .filter_map(|part| part.split('"').nth(1))
            .collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 10);
    }

    #[test]
    fn a_zero_span_id_is_never_produced() {
        let tp = traceparent(Uuid::from_u128(9), Uuid::from_u128(0));
        assert!(tp.ends_with("-0000000000000001-01"), "{tp}");
    }

    #[test]
    fn timeline_kinds_differ_per_phase() {
        assert_eq!(Phase::Reserve.timeline_kind(), "BookingReserveExpired");
        assert_eq!(Phase::Booking.timeline_kind(), "BookingExpired");
    }
}
