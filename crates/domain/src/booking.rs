//! The booking aggregate as the expiration job sees it, and `expire` with its guards.

use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Timestamp;
pub use super::status::{Phase, Status};

/// A booking as read from the database. `status` stays the raw text so that a value
/// the domain does not know is a guard rejection, not a crash.
#[derive(Debug, Clone, PartialEq)]
pub struct BookingRow {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub status: String,
    /// Stored moments, whatever they hold (`±infinity`, years past 9999).
    pub reserve_expires_at: Option<Timestamp>,
    pub booking_expires_at: Option<Timestamp>,
    pub expired_at: Option<Timestamp>,
    /// The version, as a 64-bit integer whatever integer type the column has.
    pub version: i64,
    /// The largest version the column can hold (`smallint`, `integer` or `bigint`).
    pub version_max: i64,
}

impl BookingRow {
    /// The deadline of `phase` for this booking.
    pub fn deadline(&self, phase: Phase) -> Option<Timestamp> {
        match phase {
            Phase::Reserve => self.reserve_expires_at,
            Phase::Booking => self.booking_expires_at,
        }
    }
}

/// The outcome of a successful `expire`: the new state of the aggregate and everything
/// the domain event BookingExpired carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Expiry {
    pub booking_id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub phase: Phase,
    pub from: Status,
    pub to: Status,
    /// The phase's deadline; `-infinity` (always overdue) included.
    pub deadline: Timestamp,
    /// `expired_at` and `updated_at` after the transition (= AsOf).
    pub expired_at: DateTime<Utc>,
    /// The version the write must still find; the row gets `expected_version + 1`.
    pub expected_version: i64,
}

/// Why the guard refused to expire a row. A claimed row should never be refused: each
/// variant means the data or the predicate is inconsistent, so the row is poison.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// `status` holds a value this program does not know.
    UnknownStatus(String),
    /// A terminal status: it never expires.
    Terminal(Status),
    /// The phase's deadline is NULL.
    NoDeadline(Phase),
    /// The deadline has not passed: `deadline >= as_of` (`infinity`: never due).
    NotYetDue(Timestamp),
    /// An active booking with `expired_at` already set (to any value).
    ExpiredAtAlreadySet(Timestamp),
    /// The version cannot be incremented.
    VersionOverflow,
}

impl Rejection {
    /// A stable, machine-readable name of the reason (logs, poison table, reports).
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::UnknownStatus(_) => "unknown_status",
            Rejection::Terminal(_) => "terminal_status",
            Rejection::NoDeadline(_) => "no_deadline",
            Rejection::NotYetDue(_) => "not_yet_due",
            Rejection::ExpiredAtAlreadySet(_) => "expired_at_already_set",
            Rejection::VersionOverflow => "version_overflow",
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::UnknownStatus(s) => write!(f, "unknown status {s:?}"),
            Rejection::Terminal(s) => write!(f, "status {s} is terminal and never expires"),
            Rejection::NoDeadline(p) => write!(f, "the {p} deadline is null"),
            Rejection::NotYetDue(d) => write!(f, "deadline {} has not passed", shown(*d)),
            Rejection::ExpiredAtAlreadySet(at) => write!(
                f,
                "active booking already has expired_at {} (inconsistent)",
                shown(*at)
            ),
            Rejection::VersionOverflow => f.write_str("version cannot be incremented"),
        }
    }
}

/// A stored moment in a rejection's text: RFC 3339 with its offset when finite, else
/// as PostgreSQL writes it (`infinity`, `-infinity`, `+290000-01-01…`).
fn shown(at: Timestamp) -> String {
    at.finite()
        .map_or_else(|| at.to_string(), |at| at.to_rfc3339())
}

/// `Expire(AsOf)`: decides whether `row` expires at `as_of`, and into what.
///
/// The phase follows from the current status; the deadline must be strictly before
/// `as_of` (a deadline equal to AsOf has not expired yet), compared as PostgreSQL
/// compares them: `-infinity` has always passed, `infinity` never does.
pub fn expire(row: &BookingRow, as_of: DateTime<Utc>) -> Result<Expiry, Rejection> {
    let from: Status = row
        .status
        .parse()
        .map_err(|()| Rejection::UnknownStatus(row.status.clone()))?;
    let phase = from.active_phase().ok_or(Rejection::Terminal(from))?;
    if let Some(at) = row.expired_at {
        return Err(Rejection::ExpiredAtAlreadySet(at));
    }
    let deadline = row.deadline(phase).ok_or(Rejection::NoDeadline(phase))?;
    if deadline >= Timestamp::from(as_of) {
        return Err(Rejection::NotYetDue(deadline));
    }
    if row.version >= row.version_max {
        return Err(Rejection::VersionOverflow);
    }
    Ok(Expiry {
        booking_id: row.id,
        tenant_id: row.tenant_id,
        deal_id: row.deal_id,
        property_object_id: row.property_object_id,
        phase,
        from,
        to: phase.expired_status(),
        deadline,
        expired_at: as_of,
        expected_version: row.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn as_of() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap()
    }

    fn row(status: &str, reserve: Option<i64>, booking: Option<i64>) -> BookingRow {
        // Deadlines are given as seconds relative to AsOf.
        let at = |s: Option<i64>| s.map(|s| Timestamp::from(as_of() + Duration::seconds(s)));
        BookingRow {
            id: Uuid::from_u128(1),
            tenant_id: Uuid::from_u128(2),
            deal_id: Uuid::from_u128(3),
            property_object_id: Uuid::from_u128(4),
            status: status.to_owned(),
            reserve_expires_at: at(reserve),
            booking_expires_at: at(booking),
            expired_at: None,
            version: 7,
            version_max: i64::from(i32::MAX),
        }
    }

    #[test]
    fn reserve_statuses_expire_into_reserve_expired() {
        for status in ["Reserved", "AwaitingPayment"] {
            let expiry = expire(&row(status, Some(-1), None), as_of()).unwrap();
            assert_eq!(expiry.phase, Phase::Reserve);
            assert_eq!(expiry.from.as_str(), status);
            assert_eq!(expiry.to, Status::ReserveExpired);
            assert_eq!(expiry.expired_at, as_of());
            assert_eq!(
                expiry.deadline,
                Timestamp::from(as_of() - Duration::seconds(1))
            );
            assert_eq!(expiry.expected_version, 7);
        }
    }

    #[test]
    fn booked_expires_into_booking_expired() {
        let expiry = expire(&row("Booked", None, Some(-3600)), as_of()).unwrap();
        assert_eq!(expiry.phase, Phase::Booking);
        assert_eq!(expiry.from, Status::Booked);
        assert_eq!(expiry.to, Status::BookingExpired);
        assert_eq!(expiry.expired_at, as_of());
        assert_eq!(
            (
                expiry.booking_id,
                expiry.tenant_id,
                expiry.deal_id,
                expiry.property_object_id
            ),
            (
                Uuid::from_u128(1),
                Uuid::from_u128(2),
                Uuid::from_u128(3),
                Uuid::from_u128(4)
            )
        );
    }

    #[test]
    fn a_deadline_equal_to_as_of_has_not_expired() {
        for status in ["Reserved", "AwaitingPayment"] {
            assert_eq!(
                expire(&row(status, Some(0), None), as_of()),
                Err(Rejection::NotYetDue(Timestamp::from(as_of())))
            );
        }
        assert_eq!(
            expire(&row("Booked", None, Some(0)), as_of()),
            Err(Rejection::NotYetDue(Timestamp::from(as_of())))
        );
    }

    #[test]
    fn a_future_deadline_has_not_expired() {
        let later = as_of() + Duration::microseconds(1);
        assert_eq!(
            expire(
                &row("Reserved", Some(0), None),
                as_of() - Duration::microseconds(1)
            ),
            Err(Rejection::NotYetDue(Timestamp::from(as_of())))
        );
        assert_eq!(
            expire(&row("Booked", None, Some(60)), as_of()),
            Err(Rejection::NotYetDue(Timestamp::from(
                as_of() + Duration::seconds(60)
            )))
        );
        // One microsecond past the deadline is enough.
        assert!(expire(&row("Booked", None, Some(0)), later).is_ok());
    }

    #[test]
    fn the_phase_follows_the_status_not_the_other_deadline() {
        // Booked whose reserve deadline passed but booking deadline did not.
        assert_eq!(
            expire(&row("Booked", Some(-60), Some(60)), as_of()),
            Err(Rejection::NotYetDue(Timestamp::from(
                as_of() + Duration::seconds(60)
            )))
        );
        // Reserved whose booking deadline passed but reserve deadline did not.
        assert_eq!(
            expire(&row("Reserved", Some(60), Some(-60)), as_of()),
            Err(Rejection::NotYetDue(Timestamp::from(
                as_of() + Duration::seconds(60)
            )))
        );
    }

    #[test]
    fn infinite_and_far_deadlines_are_judged_as_postgresql_orders_them() {
        let far = Timestamp::from_pg_micros(720 * 146_097 * 86_400 * 1_000_000);
        let mut r = row("Reserved", None, None);
        r.reserve_expires_at = Some(Timestamp::NEG_INFINITY);
        let expiry = expire(&r, as_of()).unwrap();
        assert_eq!(expiry.deadline, Timestamp::NEG_INFINITY);
        for never in [Timestamp::INFINITY, far] {
            r.reserve_expires_at = Some(never);
            assert_eq!(expire(&r, as_of()), Err(Rejection::NotYetDue(never)));
        }
        assert_eq!(
            Rejection::NotYetDue(Timestamp::INFINITY).to_string(),
            "deadline infinity has not passed"
        );
        // The other phase's deadline plays no part, whatever it holds.
        let mut b = row("Booked", None, Some(-60));
        b.reserve_expires_at = Some(Timestamp::INFINITY);
        assert!(expire(&b, as_of()).is_ok());
        b.expired_at = Some(far);
        assert_eq!(
            expire(&b, as_of()).unwrap_err().to_string(),
            "active booking already has expired_at +290000-01-01T00:00:00.000000Z (inconsistent)"
        );
    }

    #[test]
    fn null_deadlines_are_rejected() {
        assert_eq!(
            expire(&row("Reserved", None, Some(-60)), as_of()),
            Err(Rejection::NoDeadline(Phase::Reserve))
        );
        assert_eq!(
            expire(&row("AwaitingPayment", None, None), as_of()),
            Err(Rejection::NoDeadline(Phase::Reserve))
        );
        assert_eq!(
            expire(&row("Booked", Some(-60), None), as_of()),
            Err(Rejection::NoDeadline(Phase::Booking))
        );
    }

    #[test]
    fn terminal_statuses_are_rejected_whatever_the_deadlines() {
        for status in ["ReserveExpired", "BookingExpired", "Cancelled", "Completed"] {
            for (reserve, booking) in [(Some(-60), Some(-60)), (None, None), (Some(60), None)] {
                assert_eq!(
                    expire(&row(status, reserve, booking), as_of()),
                    Err(Rejection::Terminal(status.parse().unwrap())),
                    "{status} {reserve:?} {booking:?}"
                );
            }
        }
    }

    #[test]
    fn an_active_row_with_expired_at_set_is_rejected() {
        for (status, reserve, booking) in [
            ("Reserved", Some(-60), None),
            ("AwaitingPayment", Some(-60), None),
            ("Booked", None, Some(-60)),
        ] {
            let mut r = row(status, reserve, booking);
            r.expired_at = Some(Timestamp::from(as_of() - Duration::seconds(5)));
            assert_eq!(
                expire(&r, as_of()),
                Err(Rejection::ExpiredAtAlreadySet(Timestamp::from(
                    as_of() - Duration::seconds(5)
                )))
            );
        }
    }

    #[test]
    fn unknown_status_text_is_rejected() {
        for status in ["", "reserved", "Expired", "Booked ", "'; drop table x; --"] {
            assert_eq!(
                expire(&row(status, Some(-60), Some(-60)), as_of()),
                Err(Rejection::UnknownStatus(status.to_owned()))
            );
        }
    }

    #[test]
    fn the_version_cannot_overflow_its_column() {
        let mut r = row("Booked", None, Some(-60));
        r.version = i64::from(i32::MAX);
        assert_eq!(expire(&r, as_of()), Err(Rejection::VersionOverflow));
        r.version = i64::from(i32::MAX) - 1;
        assert!(expire(&r, as_of()).is_ok());
        // A bigint column goes on where an integer column stops.
        r.version = i64::from(i32::MAX);
        r.version_max = i64::MAX;
        assert!(expire(&r, as_of()).is_ok());
        r.version = i64::MAX;
        assert_eq!(expire(&r, as_of()), Err(Rejection::VersionOverflow));
    }

    /// Every status × {past, equal, future, null} deadline of its own phase.
    #[test]
    fn status_by_deadline_table() {
        for status in Status::ALL {
            for (offset, label) in [
                (Some(-1), "past"),
                (Some(0), "equal"),
                (Some(1), "future"),
                (None, "null"),
            ] {
                let r = row(status.as_str(), offset, offset);
                let got = expire(&r, as_of());
                let want_ok = status.active_phase().is_some() && label == "past";
                assert_eq!(
                    got.is_ok(),
                    want_ok,
                    "{status} with {label} deadline: {got:?}"
                );
                if let Ok(expiry) = got {
                    assert_eq!(Some(expiry.phase), status.active_phase());
                    assert_eq!(expiry.to, expiry.phase.expired_status());
                }
            }
        }
    }
}
