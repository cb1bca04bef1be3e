//! The plan of a batch: rows + AsOf + identities in, decisions out. For each claimed
//! row, the domain's decision: the expiry to write with the exact event it publishes,
//! or the guard's refusal (poison). `run-once` writes what this decides; `dry-run`
//! prints it. No I/O, no clock: AsOf and the message ids come in (the id source is a
//! parameter), so the same rows, AsOf and ids give the same plan.

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{BookingRow, ContractVersion, ExpiredEvent, Expiry, Phase, expire};

/// The moment a cycle decides at: a given one, or now, read by the caller from its
/// clock (already at PostgreSQL's microsecond precision, see `clock::to_micros`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    Now,
    At(DateTime<Utc>),
}

impl AsOf {
    /// The moment itself; `now` is asked only for [`AsOf::Now`].
    pub fn resolve(self, now: impl FnOnce() -> DateTime<Utc>) -> DateTime<Utc> {
        match self {
            AsOf::Now => now(),
            AsOf::At(at) => at,
        }
    }
}

/// One booking to expire: the domain's decision plus the events it publishes, one per
/// configured contract version.
#[derive(Debug, Clone)]
pub struct BatchWrite {
    pub expiry: Expiry,
    /// The deal-timeline entry's details: the domain event in the shape of contract
    /// version 1, whichever versions are published. JSON text, like the events': a
    /// batch is written as it was decided, with no document built and freed per row.
    pub details: Box<RawValue>,
    /// One outbox row each, in the order the versions were configured; never empty.
    pub events: Vec<OutboxEvent>,
}

/// One outbox row: one contract version's event of one expiry.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    /// The row id and the event's `ce_id`: each version's event has its own.
    pub message_id: Uuid,
    pub topic: &'static str,
    pub payload: Box<RawValue>,
    /// An object of names and string values.
    pub headers: Box<RawValue>,
}

/// A booking the cycle could not expire, for the quarantine.
#[derive(Debug, Clone)]
pub struct Poison {
    pub booking_id: Uuid,
    pub tenant_id: Uuid,
    /// The booking's version and status as claimed: the entry applies to that row only.
    pub version: i64,
    pub status: String,
    pub phase: Phase,
    pub reason: &'static str,
    pub error: String,
    pub sqlstate: Option<String>,
}

/// The domain decision for each row of `phase` at `as_of`: what to write (with the
/// exact events it publishes, one per version of `versions`, their message ids taken
/// from `next_id` in row order, then version order), and what is poison. `run-once` and
/// `dry-run` both call this very function.
pub fn decide(
    rows: &[BookingRow],
    phase: Phase,
    as_of: DateTime<Utc>,
    run_id: Uuid,
    versions: &[ContractVersion],
    next_id: &mut dyn FnMut() -> Uuid,
) -> (Vec<BatchWrite>, Vec<Poison>) {
    let mut writes = Vec::with_capacity(rows.len());
    let mut poison = Vec::new();
    for row in rows {
        match expire(row, as_of) {
            Ok(expiry) => {
                let events = versions
                    .iter()
                    .map(|&version| {
                        let message_id = next_id();
                        OutboxEvent {
                            message_id,
                            topic: version.topic(),
                            payload: version.payload(&expiry),
                            headers: version.headers(&expiry, message_id, run_id),
                        }
                    })
                    .collect();
                writes.push(BatchWrite {
                    details: ExpiredEvent::of(&expiry).to_json(),
                    events,
                    expiry,
                });
            }
            Err(rejection) => poison.push(Poison {
                booking_id: row.id,
                tenant_id: row.tenant_id,
                version: row.version,
                status: row.status.clone(),
                phase,
                reason: rejection.code(),
                error: rejection.to_string(),
                sqlstate: None,
            }),
        }
    }
    (writes, poison)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &RawValue) -> serde_json::Value {
        serde_json::from_str(text.get()).unwrap()
    }

    fn row(status: &str, reserve_expires_at: Option<DateTime<Utc>>) -> BookingRow {
        BookingRow {
            id: Uuid::from_u128(1),
            tenant_id: Uuid::from_u128(2),
            deal_id: Uuid::from_u128(3),
            property_object_id: Uuid::from_u128(4),
            status: status.to_owned(),
            reserve_expires_at: reserve_expires_at.map(Into::into),
            booking_expires_at: None,
            expired_at: None,
            version: 7,
            version_max: i64::MAX,
        }
    }

    #[test]
    fn the_same_rows_as_of_and_ids_give_the_same_plan() {
        let as_of = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let deadline = as_of - chrono::TimeDelta::minutes(5);
        let rows = [
            row("Reserved", Some(deadline)),
            row("Booked", Some(deadline)),
        ];
        let run_id = Uuid::from_u128(9);
        let plan = || {
            let mut n = 100;
            decide(
                &rows,
                Phase::Reserve,
                as_of,
                run_id,
                &[ContractVersion::V1],
                &mut || {
                    n += 1;
                    Uuid::from_u128(n)
                },
            )
        };
        let (writes, poison) = plan();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].events.len(), 1);
        assert_eq!(writes[0].events[0].message_id, Uuid::from_u128(101));
        assert_eq!(writes[0].events[0].payload.get(), writes[0].details.get());
        assert_eq!(poison.len(), 1);
        assert_eq!(poison[0].version, 7);
        let (again, _) = plan();
        assert_eq!(
            again[0].events[0].payload.get(),
            writes[0].events[0].payload.get()
        );
        assert_eq!(
            again[0].events[0].headers.get(),
            writes[0].events[0].headers.get()
        );
    }

    #[test]
    fn each_configured_version_gets_its_own_event_id_topic_and_shape() {
        let as_of = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let rows = [row("Reserved", Some(as_of - chrono::TimeDelta::minutes(5)))];
        let mut n = 200;
        let (writes, _) = decide(
            &rows,
            Phase::Reserve,
            as_of,
            Uuid::from_u128(9),
            &[ContractVersion::V1, ContractVersion::V2],
            &mut || {
                n += 1;
                Uuid::from_u128(n)
            },
        );
        let events = &writes[0].events;
        let topics: Vec<&str> = events.iter().map(|e| e.topic).collect();
        assert_eq!(
            topics,
            ["pin.crm.booking-expired.v1", "pin.crm.booking-expired.v2"]
        );
        for (event, (id, version)) in events.iter().zip([(201, "1"), (202, "2")]) {
            assert_eq!(event.message_id, Uuid::from_u128(id));
            let headers = value(&event.headers);
            assert_eq!(headers["ce_id"], Uuid::from_u128(id).to_string());
            assert_eq!(headers["ce_contractversion"], version);
        }
        let tenant = Uuid::from_u128(2).to_string();
        let (v1, v2) = (value(&events[0].payload), value(&events[1].payload));
        assert_eq!(v1["TenantId"], tenant);
        assert_eq!(v2["DeveloperId"], tenant);
        assert!(v2.get("TenantId").is_none());
        // The timeline keeps the v1 shape whatever is published.
        assert_eq!(writes[0].details.get(), events[0].payload.get());
    }

    #[test]
    fn now_is_read_only_when_asked_for() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(AsOf::At(at).resolve(|| unreachable!()), at);
        assert_eq!(AsOf::Now.resolve(|| at), at);
    }
}
