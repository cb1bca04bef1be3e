//! Outbox rows as an operator selects them (by id, by booking, by time, every failed
//! one), counted, read in batches, and put back into the relay's queue (`republish`,
//! `retry-failed`).

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use crate::domain::Timestamp;

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
pub(super) fn select_outbox(
    client: &mut impl GenericClient,
    sel: &Selection,
) -> Result<Vec<OutboxEntry>> {
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
