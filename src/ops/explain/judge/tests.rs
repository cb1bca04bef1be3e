//! Every verdict of the judgement, from plain data: no database.

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
