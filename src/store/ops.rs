//! The operators' SQL (`sql/009_operations.sql`): pause switches, the operations trail,
//! re-queueing outbox rows (republish, retry-failed), what `explain` reads about one
//! booking, and the database's hygiene (dead tuples, sizes, the xmin horizon).

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use super::expiration::{BOOKING_COLUMNS, booking_row};
use crate::domain::{BookingRow, Timestamp};

/// A pause switch that is on.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseRow {
    pub command: String,
    pub paused_at: DateTime<Utc>,
    pub paused_by: String,
    pub reason: String,
}

/// A pause switch as read: a `paused_at` someone set by hand to `±infinity` or a year
/// past 9999 reads as the nearest moment of years 1–9999, so no command fails on it.
const PAUSE_COLUMNS: &str = "command, \
     least(greatest(paused_at, '0001-01-01 00:00:00Z'), '9999-12-31 23:59:59Z') AS paused_at, \
     paused_by, reason";

fn pause_row(r: &postgres::Row) -> PauseRow {
    PauseRow {
        command: r.get("command"),
        paused_at: r.get("paused_at"),
        paused_by: r.get("paused_by"),
        reason: r.get("reason"),
    }
}

/// Whether this session can read the pause switches: the table exists (migration 9)
/// and the role may read it. A job on an older schema, or under a role without the
/// grant, is simply not paused; the schema check names what is missing.
pub fn pauses_readable(client: &mut impl GenericClient) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT to_regclass('crm.booking_expiration_pause') IS NOT NULL
                    AND has_table_privilege('crm.booking_expiration_pause', 'SELECT')",
            &[],
        )
        .context("cannot look up the pause switches")?;
    Ok(row.get(0))
}

/// Every pause switch that is on, by command; empty when they cannot be read.
pub fn pauses(client: &mut impl GenericClient) -> Result<Vec<PauseRow>> {
    if !pauses_readable(client)? {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            &format!("SELECT {PAUSE_COLUMNS} FROM crm.booking_expiration_pause ORDER BY command"),
            &[],
        )
        .context("cannot read the pause switches")?;
    Ok(rows.iter().map(pause_row).collect())
}

/// Turns the switch of `command` on, unless it is on already; returns the switch as it
/// is now and whether this call turned it on.
pub fn pause(
    client: &mut impl GenericClient,
    command: &str,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(PauseRow, bool)> {
    let inserted = client
        .query_opt(
            "INSERT INTO crm.booking_expiration_pause (command, paused_at, paused_by, reason)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (command) DO NOTHING
             RETURNING command, paused_at, paused_by, reason",
            &[&command, &now, &by, &reason],
        )
        .context("cannot switch the pause on")?;
    if let Some(row) = inserted {
        return Ok((pause_row(&row), true));
    }
    let row = client
        .query_one(
            &format!("SELECT {PAUSE_COLUMNS} FROM crm.booking_expiration_pause WHERE command = $1"),
            &[&command],
        )
        .context("cannot read the pause switch")?;
    Ok((pause_row(&row), false))
}

/// Turns the switch of `command` off; returns the pause it ended, if it was on.
pub fn resume(client: &mut impl GenericClient, command: &str) -> Result<Option<PauseRow>> {
    let row = client
        .query_opt(
            &format!(
                "DELETE FROM crm.booking_expiration_pause WHERE command = $1 \
                 RETURNING {PAUSE_COLUMNS}"
            ),
            &[&command],
        )
        .context("cannot switch the pause off")?;
    Ok(row.as_ref().map(pause_row))
}

/// One entry of the operations trail.
#[derive(Debug, Clone)]
pub struct Operation<'a> {
    pub at: DateTime<Utc>,
    pub actor: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub reason: &'a str,
    pub outbox_ids: &'a [Uuid],
}

/// Appends to the operations trail; returns the entry's id.
pub fn record(client: &mut impl GenericClient, op: &Operation<'_>) -> Result<i64> {
    let rows = i32::try_from(op.outbox_ids.len()).unwrap_or(i32::MAX);
    let row = client
        .query_one(
            "INSERT INTO crm.booking_expiration_operations
                 (at, actor, action, target, reason, rows, outbox_ids)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &op.at,
                &op.actor,
                &op.action,
                &op.target,
                &op.reason,
                &rows,
                &op.outbox_ids,
            ],
        )
        .context("cannot append to crm.booking_expiration_operations")?;
    Ok(row.get(0))
}

/// Which outbox rows a republish or retry selects.
#[derive(Debug, Clone)]
pub enum Selection {
    Ids(Vec<Uuid>),
    Booking(Uuid),
    Window {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    /// Every failed row (retry-failed --all).
    AllFailed,
}

/// What a re-queue may take: rows already published (republish) and failed rows, or
/// failed rows only (retry-failed). Pending rows are never touched: they go anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    PublishedOrFailed,
    FailedOnly,
}

/// An outbox row as an operator selects it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub id: Uuid,
    pub aggregateid: String,
    pub r#type: String,
    pub topic: String,
    pub occurred_at: Timestamp,
    pub published_at: Option<Timestamp>,
    pub failed_at: Option<Timestamp>,
    pub attempts: i32,
    pub failures: i32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
}

impl OutboxEntry {
    pub fn state(&self) -> &'static str {
        if self.published_at.is_some() {
            "published"
        } else if self.failed_at.is_some() {
            "failed"
        } else {
            "pending"
        }
    }
}

const ENTRY_COLUMNS: &str = "o.id, o.aggregateid, o.type, o.topic, o.occurred_at, o.published_at, \
     o.failed_at, o.attempts, o.failures, o.next_attempt_at, o.last_error, \
     o.delivered_partition, o.delivered_offset";

fn entry(r: &postgres::Row) -> OutboxEntry {
    OutboxEntry {
        id: r.get("id"),
        aggregateid: r.get("aggregateid"),
        r#type: r.get("type"),
        topic: r.get("topic"),
        occurred_at: r.get("occurred_at"),
        published_at: r.get("published_at"),
        failed_at: r.get("failed_at"),
        attempts: r.get("attempts"),
        failures: r.get("failures"),
        next_attempt_at: r.get("next_attempt_at"),
        last_error: r.get("last_error"),
        partition: r.get("delivered_partition"),
        offset: r.get("delivered_offset"),
    }
}

/// The `WHERE` of a selection, with its parameter(s) from `$1`.
fn selection_sql(sel: &Selection) -> &'static str {
    match sel {
        Selection::Ids(_) => "o.id = ANY($1)",
        Selection::Booking(_) => "o.aggregateid = $1::uuid::text",
        Selection::Window { .. } => "o.occurred_at >= $1 AND o.occurred_at < $2",
        Selection::AllFailed => "o.failed_at IS NOT NULL",
    }
}

impl Requeue {
    /// The rows of a selection this re-queues (published or failed; failed only).
    fn predicate(self) -> &'static str {
        match self {
            Requeue::PublishedOrFailed => "(o.published_at IS NOT NULL OR o.failed_at IS NOT NULL)",
            Requeue::FailedOnly => "(o.published_at IS NULL AND o.failed_at IS NOT NULL)",
        }
    }
}

/// Runs a statement over a selection: its parameters first, then `extra`.
fn query_selection(
    client: &mut impl GenericClient,
    sql: &str,
    sel: &Selection,
    extra: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<Vec<postgres::Row>, postgres::Error> {
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = match sel {
        Selection::Ids(ids) => vec![ids],
        Selection::Booking(id) => vec![id],
        Selection::Window { since, until } => vec![since, until],
        Selection::AllFailed => vec![],
    };
    params.extend_from_slice(extra);
    client.query(sql, &params)
}

/// The number of the first parameter after a selection's own.
fn next_param(sel: &Selection) -> usize {
    match sel {
        Selection::Ids(_) | Selection::Booking(_) => 2,
        Selection::Window { .. } => 3,
        Selection::AllFailed => 1,
    }
}

/// How many rows of a selection a re-queue takes, and how many it leaves alone;
/// counted without loading or locking any.
pub fn count_selection(
    client: &mut impl GenericClient,
    sel: &Selection,
    which: Requeue,
) -> Result<(u64, u64)> {
    let sql = format!(
        "SELECT count(*) FILTER (WHERE {p}) AS take, count(*) FILTER (WHERE NOT {p}) AS leave
           FROM crm.outbox o WHERE {}",
        selection_sql(sel),
        p = which.predicate()
    );
    let rows =
        query_selection(client, &sql, sel, &[]).context("cannot count the selected outbox rows")?;
    let (take, leave): (i64, i64) = (rows[0].get("take"), rows[0].get("leave"));
    Ok((take.max(0) as u64, leave.max(0) as u64))
}

/// The next `limit` rows of a selection that a re-queue takes, after `seq` `after`, in
/// write order, with their `seq`; locked when `lock` (only these: the selection's
/// pending rows never are).
pub fn requeue_batch(
    client: &mut impl GenericClient,
    sel: &Selection,
    which: Requeue,
    after: i64,
    limit: i64,
    lock: bool,
) -> Result<Vec<(i64, OutboxEntry)>> {
    let n = next_param(sel);
    let sql = format!(
        "SELECT {ENTRY_COLUMNS}, o.seq FROM crm.outbox o
          WHERE {} AND {} AND o.seq > ${n} ORDER BY o.seq LIMIT ${}{}",
        selection_sql(sel),
        which.predicate(),
        n + 1,
        if lock { " FOR UPDATE OF o" } else { "" }
    );
    let rows = query_selection(client, &sql, sel, &[&after, &limit])
        .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(|r| (r.get("seq"), entry(r))).collect())
}

/// The first `limit` rows of a selection that a re-queue leaves alone, in write order;
/// never locked.
pub fn left_alone(
    client: &mut impl GenericClient,
    sel: &Selection,
    which: Requeue,
    limit: i64,
) -> Result<Vec<OutboxEntry>> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM crm.outbox o
          WHERE {} AND NOT {} ORDER BY o.seq LIMIT ${}",
        selection_sql(sel),
        which.predicate(),
        next_param(sel)
    );
    let rows = query_selection(client, &sql, sel, &[&limit])
        .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(entry).collect())
}

/// Which of `ids` name an outbox row.
pub fn existing_ids(client: &mut impl GenericClient, ids: &[Uuid]) -> Result<Vec<Uuid>> {
    Ok(client
        .query("SELECT id FROM crm.outbox WHERE id = ANY($1)", &[&ids])
        .context("cannot read the selected outbox rows")?
        .iter()
        .map(|r| r.get("id"))
        .collect())
}

/// The rows a selection names, in write order (a booking's few, for `explain`).
fn select_outbox(client: &mut impl GenericClient, sel: &Selection) -> Result<Vec<OutboxEntry>> {
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM crm.outbox o WHERE {} ORDER BY o.seq",
        selection_sql(sel),
    );
    let rows = match sel {
        Selection::Ids(ids) => client.query(&sql, &[ids]),
        Selection::Booking(id) => client.query(&sql, &[id]),
        Selection::Window { since, until } => client.query(&sql, &[since, until]),
        Selection::AllFailed => client.query(&sql, &[]),
    }
    .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(entry).collect())
}

/// Puts the rows back into the relay's queue, as they are (same id, so the same `ce_id`
/// goes out again and consumers dedupe): the delivery marks and the receipt are cleared,
/// nothing is inserted. Returns how many rows changed. A relay following the outbox
/// is notified on the insert trigger's channel, delivered when the caller commits.
pub fn requeue(client: &mut impl GenericClient, ids: &[Uuid]) -> Result<u64> {
    let changed = client
        .execute(
            "UPDATE crm.outbox
                SET published_at = NULL, failed_at = NULL, next_attempt_at = NULL,
                    failures = 0, last_error = NULL,
                    delivered_partition = NULL, delivered_offset = NULL
              WHERE id = ANY($1) AND (published_at IS NOT NULL OR failed_at IS NOT NULL)",
            &[&ids],
        )
        .context("cannot re-queue the outbox rows")?;
    if changed > 0 {
        client
            .execute("SELECT pg_notify($1, '')", &[&crate::store::OUTBOX_CHANNEL])
            .context("cannot notify the relay of the re-queued rows")?;
    }
    Ok(changed)
}

/// The outbox rows of one booking (its aggregate id), in write order.
pub fn outbox_of_booking(client: &mut impl GenericClient, id: Uuid) -> Result<Vec<OutboxEntry>> {
    select_outbox(client, &Selection::Booking(id))
}

/// One booking as the cycle reads it, and whether it exists.
pub fn booking(client: &mut impl GenericClient, id: Uuid) -> Result<Option<BookingRow>> {
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

pub fn poison_of(client: &mut impl GenericClient, id: Uuid) -> Result<Option<PoisonEntry>> {
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
        first_seen_at: r.get("first_seen_at"),
        last_seen_at: r.get("last_seen_at"),
        retry_at: r.get("retry_at"),
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
pub fn row_lock(client: &mut impl GenericClient, id: Uuid) -> Result<Option<RowLock>> {
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

pub fn audit_of(client: &mut impl GenericClient, id: Uuid) -> Result<Vec<AuditEntry>> {
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
            at: r.get("at"),
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

pub fn timeline_of(
    client: &mut impl GenericClient,
    deal_id: Uuid,
    id: Uuid,
) -> Result<Vec<TimelineEntry>> {
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
            occurred_at: r.get("occurred_at"),
            kind: r.get("kind"),
            correlation_id: r.get("correlation_id"),
        })
        .collect())
}
