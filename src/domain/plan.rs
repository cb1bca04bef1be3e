//! The plan of a batch: rows + AsOf + identities in, decisions out. For each claimed
//! row, the domain's decision: the expiry to write with the exact event it publishes,
//! or the guard's refusal (poison). `run-once` writes what this decides; `dry-run`
//! prints it. No I/O, no clock: AsOf and the message ids come in (the id source is a
//! parameter), so the same rows, AsOf and ids give the same plan.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{BookingRow, ExpiredEvent, Expiry, Phase, event_headers, expire};

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

/// One booking to expire: the domain's decision plus the event it publishes.
#[derive(Debug, Clone)]
pub struct BatchWrite {
    pub expiry: Expiry,
    pub message_id: Uuid,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
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
/// exact event it publishes, its message id taken from `next_id` in row order), and
/// what is poison. `run-once` and `dry-run` both call this very function.
pub fn decide(
    rows: &[BookingRow],
    phase: Phase,
    as_of: DateTime<Utc>,
    run_id: Uuid,
    next_id: &mut dyn FnMut() -> Uuid,
) -> (Vec<BatchWrite>, Vec<Poison>) {
    let mut writes = Vec::with_capacity(rows.len());
    let mut poison = Vec::new();
    for row in rows {
        match expire(row, as_of) {
            Ok(expiry) => {
                let message_id = next_id();
                writes.push(BatchWrite {
                    payload: ExpiredEvent::of(&expiry).to_json(),
                    headers: event_headers(&expiry, message_id, run_id).into(),
                    message_id,
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

    fn row(status: &str, reserve_expires_at: Option<DateTime<Utc>>) -> BookingRow {
        BookingRow {
            id: Uuid::from_u128(1),
            tenant_id: Uuid::from_u128(2),
            deal_id: Uuid::from_u128(3),
            property_object_id: Uuid::from_u128(4),
            status: status.to_owned(),
            reserve_expires_at,
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
            decide(&rows, Phase::Reserve, as_of, run_id, &mut || {
                n += 1;
                Uuid::from_u128(n)
            })
        };
        let (writes, poison) = plan();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].message_id, Uuid::from_u128(101));
        assert_eq!(poison.len(), 1);
        assert_eq!(poison[0].version, 7);
        let (again, _) = plan();
        assert_eq!(again[0].payload, writes[0].payload);
        assert_eq!(again[0].headers, writes[0].headers);
    }

    #[test]
    fn now_is_read_only_when_asked_for() {
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(AsOf::At(at).resolve(|| unreachable!()), at);
        assert_eq!(AsOf::Now.resolve(|| at), at);
    }
}
