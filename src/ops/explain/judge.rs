//! The judgement: what the next cycle at AsOf would do with one booking, and every
//! reason it would not. A pure function of what was read (the booking, its quarantine
//! entry, its row lock, the pause switch) and the moment; nothing here reads or prints.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::booking::{Rejection, Status};
use crate::domain::{self, BookingRow, rfc3339};
use crate::preflight::Paused;
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
mod tests;
