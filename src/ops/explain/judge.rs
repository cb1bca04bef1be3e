//! The judgement: what the next cycle at AsOf would do with one booking, and every
//! reason it would not. A pure function of what was read (the booking, its quarantine
//! entry, its row lock, the pause switch) and the moment; nothing here reads or prints.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::booking::{Rejection, Status};
use crate::domain::{self, BookingRow, rfc3339};
use crate::ops::pause::Paused;
use crate::render;
use crate::store::ops::{PoisonEntry, RowLock};

/// Would the next cycle (at AsOf) expire the booking, and every reason it would not.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct NextCycle {
    pub(super) would_expire: bool,
    pub(super) phase: Option<String>,
    pub(super) reasons: Vec<Reason>,
    pub(super) notes: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Reason {
    /// not_found, not_yet_due, terminal, guard_rejection, quarantined, locked, paused
    pub(super) code: &'static str,
    /// For a guard rejection: the guard's own code (no_deadline, unknown_status, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) guard: Option<&'static str>,
    pub(super) detail: String,
}

impl NextCycle {
    /// No booking to judge: nothing would expire.
    pub(super) fn not_found(detail: String) -> Self {
        NextCycle {
            would_expire: false,
            phase: None,
            reasons: vec![Reason {
                code: "not_found",
                guard: None,
                detail,
            }],
            notes: Vec::new(),
        }
    }
}

/// The cycle's own decision (the claim's predicate, the quarantine, SKIP LOCKED, the
/// domain guard, the pause switch) applied to one booking.
pub(super) fn judge(
    booking: Option<&BookingRow>,
    poison: Option<&PoisonEntry>,
    lock: Option<&RowLock>,
    paused: Option<&Paused>,
    as_of: DateTime<Utc>,
) -> NextCycle {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    let reason = |code, detail| Reason {
        code,
        guard: None,
        detail,
    };
    let Some(b) = booking else {
        return NextCycle::not_found("no booking with this id in crm.bookings".to_owned());
    };
    let phase = b
        .status
        .parse::<Status>()
        .ok()
        .and_then(|s| s.active_phase());
    match domain::expire(b, as_of) {
        Ok(_) => {}
        Err(Rejection::Terminal(status)) => reasons.push(reason(
            "terminal",
            match b.expired_at {
                Some(at) => format!(
                    "status {status} is terminal and never expires (expired_at {})",
                    rfc3339(at)
                ),
                None => format!("status {status} is terminal and never expires"),
            },
        )),
        Err(Rejection::NotYetDue(deadline)) => reasons.push(reason(
            "not_yet_due",
            match deadline.until(as_of) {
                Some(before) => format!(
                    "the {} deadline {} is {} after {}: a cycle after it expires the booking",
                    phase.map_or("", |p| p.as_str()),
                    rfc3339(deadline),
                    render::duration(-before),
                    rfc3339(as_of)
                ),
                // `infinity`: never due, so never claimed.
                None => format!(
                    "the {} deadline is {deadline}: never due, the cycle never claims it \
                     until the deadline changes",
                    phase.map_or("", |p| p.as_str()),
                ),
            },
        )),
        Err(rejection) => {
            // Rows the claim's predicate leaves out are never claimed; the others are
            // claimed and refused by the guard, which quarantines them as poison.
            let claimed = !matches!(
                rejection,
                Rejection::UnknownStatus(_) | Rejection::NoDeadline(_)
            );
            reasons.push(Reason {
                code: "guard_rejection",
                guard: Some(rejection.code()),
                detail: if claimed {
                    format!(
                        "the domain guard refuses it ({}: {rejection}); each claim quarantines it \
                         again with back-off: repair the row",
                        rejection.code()
                    )
                } else {
                    format!(
                        "never claimed: {rejection} ({}); repair the row",
                        rejection.code()
                    )
                },
            });
        }
    }
    if let Some(p) = poison {
        match (p.matches_booking, p.retry_at > as_of.into()) {
            (true, true) => reasons.push(reason(
                "quarantined",
                format!(
                    "in quarantine until {} ({}: {}; {} attempts since {}); the cycle leaves it \
                     alone until then",
                    rfc3339(p.retry_at),
                    p.reason,
                    p.error,
                    p.attempts,
                    rfc3339(p.first_seen_at)
                ),
            )),
            (true, false) => notes.push(format!(
                "its quarantine ended at {}: the next cycle tries it again ({}: {}; {} attempts)",
                rfc3339(p.retry_at),
                p.reason,
                p.error,
                p.attempts
            )),
            (false, _) => notes.push(format!(
                "a quarantine entry from {} ({}: {}) no longer applies: the booking changed \
                 since, the next cycle judges it afresh and drops the entry",
                rfc3339(p.last_seen_at),
                p.reason,
                p.error
            )),
        }
    }
    if let Some(l) = lock {
        reasons.push(reason(
            "locked",
            format!(
                "its row is locked right now by PID {} ({}{}{}): the cycle skips locked rows \
                 (SKIP LOCKED) until that transaction ends{}",
                l.pid,
                l.application
                    .as_deref()
                    .filter(|a| !a.is_empty())
                    .map_or("no application name".to_owned(), |a| format!(
                        "application {a}"
                    )),
                l.user
                    .as_deref()
                    .map_or(String::new(), |u| format!(", user {u}")),
                l.xact_start.map_or(String::new(), |t| format!(
                    ", transaction open for {}",
                    render::duration(as_of - t)
                )),
                if l.blocking.is_empty() {
                    String::new()
                } else {
                    format!("; it blocks PIDs {:?}", l.blocking)
                }
            ),
        ));
    }
    if let Some(p) = paused {
        reasons.push(reason(
            "paused",
            format!(
                "run-once is paused since {} by {}: {}",
                p.since, p.by, p.reason
            ),
        ));
    }
    NextCycle {
        would_expire: reasons.is_empty(),
        phase: phase.map(|p| p.as_str().to_owned()),
        reasons,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;
    use uuid::Uuid;

    use super::*;
    use crate::domain::Timestamp;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    const AS_OF: &str = "2030-01-01T12:00:00Z";

    /// A Reserved booking whose Reserve deadline passed 5 minutes before AS_OF.
    fn due() -> BookingRow {
        BookingRow {
            id: Uuid::from_u128(1),
            tenant_id: Uuid::from_u128(2),
            deal_id: Uuid::from_u128(3),
            property_object_id: Uuid::from_u128(4),
            status: "Reserved".into(),
            reserve_expires_at: Some(at("2030-01-01T11:55:00Z").into()),
            booking_expires_at: None,
            expired_at: None,
            version: 3,
            version_max: i64::from(i32::MAX),
        }
    }

    fn poison(matches_booking: bool, retry_at: &str) -> PoisonEntry {
        PoisonEntry {
            phase: "Reserve".into(),
            reason: "guard_rejection".into(),
            error: "version cannot be incremented".into(),
            sqlstate: None,
            attempts: 4,
            first_seen_at: at("2030-01-01T10:00:00Z").into(),
            last_seen_at: at("2030-01-01T11:00:00Z").into(),
            retry_at: at(retry_at).into(),
            matches_booking,
        }
    }

    fn judged(booking: &BookingRow) -> NextCycle {
        judge(Some(booking), None, None, None, at(AS_OF))
    }

    fn codes(n: &NextCycle) -> Vec<&'static str> {
        n.reasons.iter().map(|r| r.code).collect()
    }

    #[test]
    fn a_due_booking_with_nothing_in_the_way_would_expire() {
        let n = judged(&due());
        assert!(n.would_expire);
        assert_eq!(n.phase.as_deref(), Some("Reserve"));
        assert!(n.reasons.is_empty() && n.notes.is_empty(), "{n:?}");
    }

    #[test]
    fn a_missing_booking_is_not_found() {
        let n = judge(None, None, None, None, at(AS_OF));
        assert!(!n.would_expire);
        assert_eq!(n.phase, None);
        assert_eq!(codes(&n), ["not_found"]);
        assert_eq!(
            n.reasons[0].detail,
            "no booking with this id in crm.bookings"
        );
    }

    #[test]
    fn a_terminal_booking_never_expires() {
        let mut b = due();
        b.status = "ReserveExpired".into();
        let n = judged(&b);
        assert!(!n.would_expire);
        assert_eq!(n.phase, None);
        assert_eq!(codes(&n), ["terminal"]);
        assert_eq!(
            n.reasons[0].detail,
            "status ReserveExpired is terminal and never expires"
        );
        b.expired_at = Some(at("2030-01-01T11:56:00Z").into());
        assert_eq!(
            judged(&b).reasons[0].detail,
            "status ReserveExpired is terminal and never expires \
             (expired_at 2030-01-01T11:56:00.000000Z)"
        );
    }

    #[test]
    fn a_booking_not_yet_due_says_how_long_until_its_deadline() {
        let mut b = due();
        b.status = "Booked".into();
        b.booking_expires_at = Some(at("2030-01-01T13:30:05Z").into());
        let n = judged(&b);
        assert!(!n.would_expire);
        assert_eq!(n.phase.as_deref(), Some("Booking"));
        assert_eq!(codes(&n), ["not_yet_due"]);
        assert_eq!(
            n.reasons[0].detail,
            "the Booking deadline 2030-01-01T13:30:05.000000Z is 1h 30m 5s after \
             2030-01-01T12:00:00.000000Z: a cycle after it expires the booking"
        );
        b.booking_expires_at = Some(Timestamp::INFINITY);
        assert_eq!(
            judged(&b).reasons[0].detail,
            "the Booking deadline is infinity: never due, the cycle never claims it until \
             the deadline changes"
        );
    }

    #[test]
    fn guard_rejections_say_whether_the_claim_takes_the_row() {
        // Left out by the claim's predicate: never claimed.
        let mut b = due();
        b.reserve_expires_at = None;
        let n = judged(&b);
        assert_eq!(codes(&n), ["guard_rejection"]);
        assert_eq!(n.reasons[0].guard, Some("no_deadline"));
        assert!(n.reasons[0].detail.starts_with("never claimed: "), "{n:?}");
        let mut b = due();
        b.status = "Lost".into();
        let n = judged(&b);
        assert_eq!(n.reasons[0].guard, Some("unknown_status"));
        assert_eq!(n.phase, None);
        assert!(n.reasons[0].detail.starts_with("never claimed: "), "{n:?}");
        // Claimed, refused and quarantined again on each claim.
        let mut b = due();
        b.version = b.version_max;
        let n = judged(&b);
        assert_eq!(n.reasons[0].guard, Some(Rejection::VersionOverflow.code()));
        assert!(
            n.reasons[0]
                .detail
                .starts_with("the domain guard refuses it ("),
            "{n:?}"
        );
        assert!(n.reasons[0].detail.ends_with("repair the row"), "{n:?}");
    }

    #[test]
    fn a_quarantine_in_force_holds_the_booking_back() {
        let p = poison(true, "2030-01-01T12:10:00Z");
        let n = judge(Some(&due()), Some(&p), None, None, at(AS_OF));
        assert!(!n.would_expire);
        assert_eq!(codes(&n), ["quarantined"]);
        assert_eq!(
            n.reasons[0].detail,
            "in quarantine until 2030-01-01T12:10:00.000000Z (guard_rejection: version cannot \
             be incremented; 4 attempts since 2030-01-01T10:00:00.000000Z); the cycle leaves \
             it alone until then"
        );
    }

    #[test]
    fn an_ended_or_outdated_quarantine_is_only_a_note() {
        let ended = poison(true, "2030-01-01T11:59:00Z");
        let n = judge(Some(&due()), Some(&ended), None, None, at(AS_OF));
        assert!(n.would_expire, "{n:?}");
        assert_eq!(
            n.notes,
            [
                "its quarantine ended at 2030-01-01T11:59:00.000000Z: the next cycle tries it \
              again (guard_rejection: version cannot be incremented; 4 attempts)"
            ]
        );
        let outdated = poison(false, "2030-01-01T12:10:00Z");
        let n = judge(Some(&due()), Some(&outdated), None, None, at(AS_OF));
        assert!(n.would_expire, "{n:?}");
        assert!(
            n.notes[0].starts_with("a quarantine entry from 2030-01-01T11:00:00.000000Z"),
            "{n:?}"
        );
        assert!(n.notes[0].contains("no longer applies"), "{n:?}");
    }

    #[test]
    fn a_row_lock_names_its_holder() {
        let lock = RowLock {
            pid: 4242,
            application: Some("psql".into()),
            user: Some("alice".into()),
            state: Some("idle in transaction".into()),
            xact_start: Some(at(AS_OF) - TimeDelta::seconds(90)),
            blocking: vec![7, 8],
        };
        let n = judge(Some(&due()), None, Some(&lock), None, at(AS_OF));
        assert!(!n.would_expire);
        assert_eq!(codes(&n), ["locked"]);
        assert_eq!(
            n.reasons[0].detail,
            "its row is locked right now by PID 4242 (application psql, user alice, \
             transaction open for 1m 30s): the cycle skips locked rows (SKIP LOCKED) until \
             that transaction ends; it blocks PIDs [7, 8]"
        );
        let anonymous = RowLock {
            application: Some(String::new()),
            user: None,
            xact_start: None,
            blocking: Vec::new(),
            ..lock
        };
        let n = judge(Some(&due()), None, Some(&anonymous), None, at(AS_OF));
        assert_eq!(
            n.reasons[0].detail,
            "its row is locked right now by PID 4242 (no application name): the cycle skips \
             locked rows (SKIP LOCKED) until that transaction ends"
        );
    }

    #[test]
    fn a_pause_of_run_once_holds_every_booking_back() {
        let paused = Paused {
            command: "run-once".into(),
            since: "2030-01-01T11:00:00.000000Z".into(),
            by: "bob".into(),
            reason: "INC-7".into(),
            paused_for_seconds: 3600.0,
        };
        let n = judge(Some(&due()), None, None, Some(&paused), at(AS_OF));
        assert!(!n.would_expire);
        assert_eq!(codes(&n), ["paused"]);
        assert_eq!(
            n.reasons[0].detail,
            "run-once is paused since 2030-01-01T11:00:00.000000Z by bob: INC-7"
        );
    }

    #[test]
    fn every_reason_is_listed_in_order() {
        let mut b = due();
        b.reserve_expires_at = Some(at("2030-01-01T12:30:00Z").into());
        let lock = RowLock {
            pid: 1,
            application: None,
            user: None,
            state: None,
            xact_start: None,
            blocking: Vec::new(),
        };
        let paused = Paused {
            command: "run-once".into(),
            since: "-".into(),
            by: "-".into(),
            reason: "-".into(),
            paused_for_seconds: 0.0,
        };
        let p = poison(true, "2030-01-01T12:10:00Z");
        let n = judge(Some(&b), Some(&p), Some(&lock), Some(&paused), at(AS_OF));
        assert!(!n.would_expire);
        assert_eq!(
            codes(&n),
            ["not_yet_due", "quarantined", "locked", "paused"]
        );
    }
}
