//! What `explain` reads about one booking: the row as the cycle reads it, its
//! quarantine entry, who holds its row lock, its audit, timeline and outbox rows.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use super::requeue::{OutboxEntry, Selection, select_outbox};
use crate::Conn;
use crate::domain::{BookingRow, OutboxTypes, Timestamp};
use crate::expiration::{BOOKING_COLUMNS, booking_row};
use crate::timestamp;

/// The outbox rows of one booking (its aggregate id) of the job's outbox types, in write
/// order: another contract's rows of the same aggregate are not the job's.
pub fn outbox_of_booking(
    client: &mut impl Conn,
    id: Uuid,
    types: &OutboxTypes,
) -> Result<Vec<OutboxEntry>> {
    let client = client.pg();
    select_outbox(client, &Selection::Booking(id), types)
}

/// One booking as the cycle reads it, and whether it exists.
pub fn booking(client: &mut impl Conn, id: Uuid) -> Result<Option<BookingRow>> {
    let client = client.pg();
    let row = client
        .query_opt(
            &format!("SELECT {BOOKING_COLUMNS} FROM crm.bookings b WHERE b.id = $1"),
            &[&id],
        )
        .context("cannot read the booking")?;
    Ok(row.as_ref().map(booking_row))
}

/// A booking's quarantine entry, and whether it still applies to the booking as it is.
#[derive(Debug, Clone)]
pub struct PoisonEntry {
    pub phase: String,
    pub reason: String,
    pub error: String,
    pub sqlstate: Option<String>,
    pub attempts: i32,
    pub first_seen_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub retry_at: Timestamp,
    /// The entry was written for the booking's current version and status.
    pub matches_booking: bool,
}

pub fn poison_of(client: &mut impl Conn, id: Uuid) -> Result<Option<PoisonEntry>> {
    let client = client.pg();
    let row = client
        .query_opt(
            "SELECT p.phase, p.reason, p.error, p.sqlstate, p.attempts, p.first_seen_at,
                    p.last_seen_at, p.retry_at,
                    coalesce(p.booking_version = b.version AND p.booking_status = b.status::text,
                             false) AS matches_booking
               FROM crm.booking_expiration_poison p
               LEFT JOIN crm.bookings b ON b.id = p.booking_id
              WHERE p.booking_id = $1",
            &[&id],
        )
        .context("cannot read the booking's quarantine entry")?;
    Ok(row.map(|r| PoisonEntry {
        phase: r.get("phase"),
        reason: r.get("reason"),
        error: r.get("error"),
        sqlstate: r.get("sqlstate"),
        attempts: r.get("attempts"),
        first_seen_at: timestamp::get(&r, "first_seen_at"),
        last_seen_at: timestamp::get(&r, "last_seen_at"),
        retry_at: timestamp::get(&r, "retry_at"),
        matches_booking: r.get("matches_booking"),
    }))
}

/// A session holding a booking's row lock now, and the sessions waiting behind it.
#[derive(Debug, Clone)]
pub struct RowLock {
    pub pid: i32,
    pub application: Option<String>,
    pub user: Option<String>,
    pub state: Option<String>,
    pub xact_start: Option<DateTime<Utc>>,
    /// Sessions `pg_blocking_pids` says this one blocks.
    pub blocking: Vec<i32>,
}

/// Who holds the booking's row locked now. A row lock lives in the tuple (its `xmax`
/// is the locking transaction), not in `pg_locks`; the transaction's own lock there
/// names the session. Read without locking: a report never waits.
pub fn row_lock(client: &mut impl Conn, id: Uuid) -> Result<Option<RowLock>> {
    let client = client.pg();
    let row = client
        .query_opt(
            "SELECT l.pid, a.application_name, a.usename::text AS usename, a.state, a.xact_start,
                    ARRAY(SELECT w.pid FROM pg_stat_activity w
                           WHERE l.pid = ANY(pg_blocking_pids(w.pid)) ORDER BY w.pid) AS blocking
               FROM crm.bookings b
               JOIN pg_locks l ON l.locktype = 'transactionid' AND l.granted
                              AND l.mode = 'ExclusiveLock'
                              AND l.transactionid::text = b.xmax::text
               LEFT JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE b.id = $1 AND b.xmax::text <> '0' AND l.pid <> pg_backend_pid()",
            &[&id],
        )
        .context("cannot read the booking's row lock")?;
    Ok(row.map(|r| RowLock {
        pid: r.get("pid"),
        application: r.get("application_name"),
        user: r.get("usename"),
        state: r.get("state"),
        xact_start: r.get("xact_start"),
        blocking: r.get("blocking"),
    }))
}

/// An audit row of a booking.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    pub at: Timestamp,
    pub from_status: String,
    pub to_status: String,
    pub version: i64,
    pub actor: String,
    pub run_id: Option<Uuid>,
}

pub fn audit_of(client: &mut impl Conn, id: Uuid) -> Result<Vec<AuditEntry>> {
    let client = client.pg();
    let rows = client
        .query(
            "SELECT at, from_status, to_status, version::int8 AS version, actor, run_id
               FROM crm.booking_audit WHERE booking_id = $1 ORDER BY at, id",
            &[&id],
        )
        .context("cannot read the booking's audit rows")?;
    Ok(rows
        .iter()
        .map(|r| AuditEntry {
            at: timestamp::get(r, "at"),
            from_status: r.get("from_status"),
            to_status: r.get("to_status"),
            version: r.get("version"),
            actor: r.get("actor"),
            run_id: r.get("run_id"),
        })
        .collect())
}

/// A deal-timeline entry of a booking.
#[derive(Debug, Clone)]
pub struct TimelineEntry {
    pub occurred_at: Timestamp,
    pub kind: String,
    pub correlation_id: Option<Uuid>,
}

pub fn timeline_of(client: &mut impl Conn, deal_id: Uuid, id: Uuid) -> Result<Vec<TimelineEntry>> {
    let client = client.pg();
    let rows = client
        .query(
            "SELECT occurred_at, kind, correlation_id FROM crm.deal_timeline
              WHERE deal_id = $1 AND booking_id = $2 ORDER BY occurred_at, id",
            &[&deal_id, &id],
        )
        .context("cannot read the booking's timeline entries")?;
    Ok(rows
        .iter()
        .map(|r| TimelineEntry {
            occurred_at: timestamp::get(r, "occurred_at"),
            kind: r.get("kind"),
            correlation_id: r.get("correlation_id"),
        })
        .collect())
}
