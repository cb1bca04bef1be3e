//! What `explain` prints, as data: the booking and everything it touches, each moment
//! as RFC 3339 text, with the judgement. `--json` prints it as it is; `text` renders it
//! for people. The rows it is made of are `store`'s, which derive no `Serialize`; the
//! structs here are their JSON shapes (moments as RFC 3339 at microseconds, `Applies`,
//! `BlockingPids`, the outbox row's `State`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::judge::NextCycle;
use super::read::Facts;
use crate::domain::{BookingRow, rfc3339};
use crate::kafka::readback::ReadBack;
use crate::preflight::Paused;
use crate::store::ops::{AuditEntry, OutboxEntry, PoisonEntry, RowLock, TimelineEntry};

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Explanation {
    /// The whole id, or the start typed when no booking's id starts with it.
    pub(super) booking_id: String,
    pub(super) as_of: String,
    pub(super) found: bool,
    pub(super) booking: Option<BookingJson>,
    pub(super) next_cycle: NextCycle,
    pub(super) quarantine: Option<QuarantineJson>,
    pub(super) lock: Option<LockJson>,
    pub(super) paused: Option<Paused>,
    pub(super) audit: Vec<AuditJson>,
    pub(super) timeline: Vec<TimelineJson>,
    pub(super) outbox: Vec<OutboxJson>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct BookingJson {
    pub(super) status: String,
    pub(super) tenant_id: Uuid,
    pub(super) deal_id: Uuid,
    pub(super) property_object_id: Uuid,
    pub(super) reserve_expires_at: Option<String>,
    pub(super) booking_expires_at: Option<String>,
    pub(super) expired_at: Option<String>,
    pub(super) version: i64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct QuarantineJson {
    pub(super) phase: String,
    pub(super) reason: String,
    pub(super) error: String,
    pub(super) sqlstate: Option<String>,
    pub(super) attempts: i32,
    pub(super) first_seen_at: String,
    pub(super) last_seen_at: String,
    pub(super) retry_at: String,
    /// The entry describes the booking as it is (same version and status).
    pub(super) applies: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct LockJson {
    pub(super) pid: i32,
    pub(super) application: Option<String>,
    pub(super) user: Option<String>,
    pub(super) state: Option<String>,
    pub(super) transaction_start: Option<String>,
    pub(super) blocking_pids: Vec<i32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct AuditJson {
    pub(super) at: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) version: i64,
    pub(super) actor: String,
    pub(super) run_id: Option<Uuid>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct TimelineJson {
    pub(super) occurred_at: String,
    pub(super) kind: String,
    pub(super) correlation_id: Option<Uuid>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct OutboxJson {
    pub(super) id: Uuid,
    pub(super) r#type: String,
    pub(super) topic: String,
    pub(super) state: &'static str,
    pub(super) occurred_at: String,
    pub(super) published_at: Option<String>,
    pub(super) partition: Option<i32>,
    pub(super) offset: Option<i64>,
    pub(super) attempts: i32,
    pub(super) failures: i32,
    pub(super) next_attempt_at: Option<String>,
    pub(super) failed_at: Option<String>,
    pub(super) last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) read_back: Option<ReadBack>,
}

impl Explanation {
    /// The explanation of the booking `id` from what was read and judged.
    pub(super) fn of(id: Uuid, as_of: DateTime<Utc>, facts: Facts, next_cycle: NextCycle) -> Self {
        Explanation {
            booking_id: id.to_string(),
            as_of: rfc3339(as_of),
            found: facts.booking.is_some(),
            booking: facts.booking.as_ref().map(booking_json),
            next_cycle,
            quarantine: facts.poison.as_ref().map(quarantine_json),
            lock: facts.lock.as_ref().map(lock_json),
            paused: facts.paused,
            audit: facts.audit.iter().map(audit_json).collect(),
            timeline: facts.timeline.iter().map(timeline_json).collect(),
            outbox: facts.outbox.iter().map(outbox_json).collect(),
        }
    }
}

/// What `explain` says of a start of an id that no booking's id has: as of an unknown
/// id, with nothing to read.
pub(super) fn no_booking_starts_with(prefix: &str, as_of: DateTime<Utc>) -> Explanation {
    Explanation {
        booking_id: prefix.to_owned(),
        as_of: rfc3339(as_of),
        found: false,
        booking: None,
        next_cycle: NextCycle::not_found(format!(
            "no booking in crm.bookings has an id starting with {prefix}"
        )),
        quarantine: None,
        lock: None,
        paused: None,
        audit: Vec::new(),
        timeline: Vec::new(),
        outbox: Vec::new(),
    }
}

fn booking_json(b: &BookingRow) -> BookingJson {
    BookingJson {
        status: b.status.clone(),
        tenant_id: b.tenant_id,
        deal_id: b.deal_id,
        property_object_id: b.property_object_id,
        reserve_expires_at: b.reserve_expires_at.map(rfc3339),
        booking_expires_at: b.booking_expires_at.map(rfc3339),
        expired_at: b.expired_at.map(rfc3339),
        version: b.version,
    }
}

fn quarantine_json(p: &PoisonEntry) -> QuarantineJson {
    QuarantineJson {
        phase: p.phase.clone(),
        reason: p.reason.clone(),
        error: p.error.clone(),
        sqlstate: p.sqlstate.clone(),
        attempts: p.attempts,
        first_seen_at: rfc3339(p.first_seen_at),
        last_seen_at: rfc3339(p.last_seen_at),
        retry_at: rfc3339(p.retry_at),
        applies: p.matches_booking,
    }
}

fn lock_json(l: &RowLock) -> LockJson {
    LockJson {
        pid: l.pid,
        application: l.application.clone(),
        user: l.user.clone(),
        state: l.state.clone(),
        transaction_start: l.xact_start.map(rfc3339),
        blocking_pids: l.blocking.clone(),
    }
}

fn audit_json(a: &AuditEntry) -> AuditJson {
    AuditJson {
        at: rfc3339(a.at),
        from: a.from_status.clone(),
        to: a.to_status.clone(),
        version: a.version,
        actor: a.actor.clone(),
        run_id: a.run_id,
    }
}

fn timeline_json(t: &TimelineEntry) -> TimelineJson {
    TimelineJson {
        occurred_at: rfc3339(t.occurred_at),
        kind: t.kind.clone(),
        correlation_id: t.correlation_id,
    }
}

fn outbox_json(o: &OutboxEntry) -> OutboxJson {
    OutboxJson {
        id: o.id,
        r#type: o.r#type.clone(),
        topic: o.topic.clone(),
        state: o.state(),
        occurred_at: rfc3339(o.occurred_at),
        published_at: o.published_at.map(rfc3339),
        partition: o.partition,
        offset: o.offset,
        attempts: o.attempts,
        failures: o.failures,
        next_attempt_at: o.next_attempt_at.map(rfc3339),
        failed_at: o.failed_at.map(rfc3339),
        last_error: o.last_error.clone(),
        read_back: None,
    }
}
