//! Outbox rows as an operator selects them (by id, by booking, by time, every failed
//! one), counted, read in batches, and put back into the relay's queue (`republish`,
//! `retry-failed`). Every statement takes only the rows of the job's outbox types (`$1`,
//! bound): another producer's row, even one of the same booking (the CRM's other
//! contracts of the aggregate share its id), is never selected, counted nor changed.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use crate::Conn;
use crate::domain::{OutboxTypes, Timestamp};
use crate::timestamp;

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
        occurred_at: timestamp::get(r, "occurred_at"),
        published_at: timestamp::get_opt(r, "published_at"),
        failed_at: timestamp::get_opt(r, "failed_at"),
        attempts: r.get("attempts"),
        failures: r.get("failures"),
        next_attempt_at: timestamp::get_opt(r, "next_attempt_at"),
        last_error: r.get("last_error"),
        partition: r.get("delivered_partition"),
        offset: r.get("delivered_offset"),
    }
}

/// Where a row's delivery state is read: the relay's own state
/// (`sql/016_relay_receipts.sql`, [`crate::relay_state::OUTBOX_STATE_SQL`]: its exception,
/// its receipt, then `crm.outbox`'s columns), or on a database without it
/// `crm.outbox`'s columns alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Columns,
    Own,
}

impl Source {
    fn of(client: &mut (impl GenericClient + Conn)) -> Result<Self> {
        Ok(if crate::relay_state_usable(client, false)? {
            Source::Own
        } else {
            Source::Columns
        })
    }

    fn from(self) -> String {
        match self {
            Source::Columns => "crm.outbox o".to_owned(),
            Source::Own => format!("({}) o", crate::relay_state::OUTBOX_STATE_SQL),
        }
    }
}

/// The `WHERE` of a selection: the job's outbox types (`$1`), then the selection's
/// parameter(s) from `$2`.
fn selection_sql(sel: &Selection, source: Source) -> &'static str {
    match (sel, source) {
        (Selection::Ids(_), _) => "o.type = ANY($1::text[]) AND o.id = ANY($2)",
        (Selection::Booking(_), _) => "o.type = ANY($1::text[]) AND o.aggregateid = $2::uuid::text",
        (Selection::Window { .. }, _) => {
            "o.type = ANY($1::text[]) AND o.occurred_at >= $2 AND o.occurred_at < $3"
        }
        (Selection::AllFailed, Source::Columns) => {
            "o.type = ANY($1::text[]) AND o.failed_at IS NOT NULL"
        }
        // The failed rows are the failed exceptions and the rows the release before
        // failed (its partial index), never a scan of the outbox.
        (Selection::AllFailed, Source::Own) => {
            "o.type = ANY($1::text[]) AND o.failed_at IS NOT NULL
             AND o.seq IN (SELECT seq FROM crm.booking_expiration_exception
                            WHERE failed_at IS NOT NULL
                           UNION ALL
                           SELECT seq FROM crm.outbox WHERE failed_at IS NOT NULL)"
        }
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

/// Runs a statement over a selection: the types, its parameters, then `extra`.
fn query_selection(
    client: &mut impl GenericClient,
    sql: &str,
    sel: &Selection,
    types: &OutboxTypes,
    extra: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<Vec<postgres::Row>, postgres::Error> {
    let types = types.as_slice();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![&types];
    match sel {
        Selection::Ids(ids) => params.push(ids),
        Selection::Booking(id) => params.push(id),
        Selection::Window { since, until } => {
            params.push(since);
            params.push(until);
        }
        Selection::AllFailed => {}
    }
    params.extend_from_slice(extra);
    client.query(sql, &params)
}

/// The number of the first parameter after the types and a selection's own.
fn next_param(sel: &Selection) -> usize {
    match sel {
        Selection::Ids(_) | Selection::Booking(_) => 3,
        Selection::Window { .. } => 4,
        Selection::AllFailed => 2,
    }
}

/// How many rows of a selection a re-queue takes, and how many it leaves alone;
/// counted without loading or locking any.
pub fn count_selection(
    client: &mut impl Conn,
    sel: &Selection,
    which: Requeue,
    types: &OutboxTypes,
) -> Result<(u64, u64)> {
    let client = client.pg();
    let source = Source::of(client)?;
    let sql = format!(
        "SELECT count(*) FILTER (WHERE {p}) AS take, count(*) FILTER (WHERE NOT {p}) AS leave
           FROM {} WHERE {}",
        source.from(),
        selection_sql(sel, source),
        p = which.predicate()
    );
    let rows = query_selection(client, &sql, sel, types, &[])
        .context("cannot count the selected outbox rows")?;
    let (take, leave): (i64, i64) = (rows[0].get("take"), rows[0].get("leave"));
    Ok((take.max(0) as u64, leave.max(0) as u64))
}

/// The next `limit` rows of a selection that a re-queue takes, after `seq` `after`, in
/// write order, with their `seq`; locked when `lock` (only these: the selection's
/// pending rows never are).
pub fn requeue_batch(
    client: &mut impl Conn,
    sel: &Selection,
    which: Requeue,
    after: i64,
    limit: i64,
    lock: bool,
    types: &OutboxTypes,
) -> Result<Vec<(i64, OutboxEntry)>> {
    let client = client.pg();
    let n = next_param(sel);
    let source = Source::of(client)?;
    // The derived table has no rows of its own to lock: the re-queue is one statement there,
    // an upsert of the exceptions (see [`requeue`]).
    let lock = lock && source == Source::Columns;
    let sql = format!(
        "SELECT {ENTRY_COLUMNS}, o.seq FROM {}
          WHERE {} AND {} AND o.seq > ${n} ORDER BY o.seq LIMIT ${}{}",
        source.from(),
        selection_sql(sel, source),
        which.predicate(),
        n + 1,
        if lock { " FOR UPDATE OF o" } else { "" }
    );
    let rows = query_selection(client, &sql, sel, types, &[&after, &limit])
        .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(|r| (r.get("seq"), entry(r))).collect())
}

/// The first `limit` rows of a selection that a re-queue leaves alone, in write order;
/// never locked.
pub fn left_alone(
    client: &mut impl Conn,
    sel: &Selection,
    which: Requeue,
    limit: i64,
    types: &OutboxTypes,
) -> Result<Vec<OutboxEntry>> {
    let client = client.pg();
    let source = Source::of(client)?;
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM {}
          WHERE {} AND NOT {} ORDER BY o.seq LIMIT ${}",
        source.from(),
        selection_sql(sel, source),
        which.predicate(),
        next_param(sel)
    );
    let rows = query_selection(client, &sql, sel, types, &[&limit])
        .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(entry).collect())
}

/// Which of `ids` name an outbox row of the job's types.
pub fn existing_ids(
    client: &mut impl Conn,
    ids: &[Uuid],
    types: &OutboxTypes,
) -> Result<Vec<Uuid>> {
    let client = client.pg();
    Ok(client
        .query(
            "SELECT id FROM crm.outbox WHERE id = ANY($1) AND type = ANY($2::text[])",
            &[&ids, &types.as_slice()],
        )
        .context("cannot read the selected outbox rows")?
        .iter()
        .map(|r| r.get("id"))
        .collect())
}

/// The rows a selection names, in write order (a booking's few, for `explain`).
pub(super) fn select_outbox(
    client: &mut (impl GenericClient + Conn),
    sel: &Selection,
    types: &OutboxTypes,
) -> Result<Vec<OutboxEntry>> {
    let source = Source::of(client)?;
    let sql = format!(
        "SELECT {ENTRY_COLUMNS} FROM {} WHERE {} ORDER BY o.seq",
        source.from(),
        selection_sql(sel, source),
    );
    let rows = query_selection(client, &sql, sel, types, &[])
        .context("cannot read the selected outbox rows")?;
    Ok(rows.iter().map(entry).collect())
}

/// Puts the rows back into the relay's queue, as they are (same id, so the same `ce_id`
/// goes out again and consumers dedupe): the delivery marks and the receipt are cleared,
/// nothing is inserted. Returns how many rows changed. A relay following the outbox
/// is notified on the insert trigger's channel, delivered when the caller commits.
pub fn requeue(client: &mut impl Conn, ids: &[Uuid], types: &OutboxTypes) -> Result<u64> {
    let client = client.pg();
    let source = Source::of(client)?;
    let changed = match source {
        Source::Columns => requeue_columns(client, ids, types)?,
        Source::Own => {
            // The columns too while a relay writes the legacy marks (or none ran yet):
            // the release before, started again, sends the row as well.
            let legacy: bool = client
                .query_one(
                    "SELECT coalesce(bool_or(legacy_marks), true) AS legacy
                       FROM crm.booking_expiration_relay_state",
                    &[],
                )
                .context("cannot read the relay's state")?
                .get("legacy");
            // The exceptions first: the state read here is of the columns the legacy
            // re-queue clears.
            let changed = client
                .query_one(&requeue_own_sql(), &[&ids, &types.as_slice()])
                .context("cannot re-queue the outbox rows")?
                .get::<_, i64>(0)
                .max(0) as u64;
            if legacy {
                requeue_columns(client, ids, types)?;
            }
            changed
        }
    };
    if changed > 0 {
        client
            .execute(
                "SELECT pg_notify($1, '')",
                &[&crate::outbox::OUTBOX_CHANNEL],
            )
            .context("cannot notify the relay of the re-queued rows")?;
    }
    Ok(changed)
}

/// The re-queue on the relay's own state: each row published or failed (as
/// [`crate::relay_state::OUTBOX_STATE_SQL`] reads it) becomes an exception due at once (a row
/// already one is reset), and its receipt goes (the relay writes the new one).
/// `crm.outbox` is not written.
fn requeue_own_sql() -> String {
    format!(
        "\
WITH sel AS (
    SELECT o.seq, o.id, o.aggregateid, o.topic, o.type, o.attempts
      FROM ({state}) o
     WHERE o.id = ANY($1) AND o.type = ANY($2::text[])
       AND (o.published_at IS NOT NULL OR o.failed_at IS NOT NULL)
), receipts AS (
    DELETE FROM crm.booking_expiration_receipt r USING sel WHERE r.seq = sel.seq
), requeued AS (
    INSERT INTO crm.booking_expiration_exception AS e
           (seq, id, key, topic, type, reason, attempts, failures, since)
    SELECT seq, id, aggregateid, topic, type, 'requeued', least(attempts, 2147483646), 0, now()
      FROM sel
    ON CONFLICT (seq) DO UPDATE
       SET reason = 'requeued', failures = 0, next_attempt_at = NULL, last_error = NULL,
           failed_at = NULL
    RETURNING 1
)
SELECT count(*) FROM requeued",
        state = crate::relay_state::OUTBOX_STATE_SQL
    )
}

/// The re-queue of the release before: the columns cleared.
fn requeue_columns(
    client: &mut impl GenericClient,
    ids: &[Uuid],
    types: &OutboxTypes,
) -> Result<u64> {
    client
        .execute(
            "UPDATE crm.outbox
                SET published_at = NULL, failed_at = NULL, next_attempt_at = NULL,
                    failures = 0, last_error = NULL,
                    delivered_partition = NULL, delivered_offset = NULL
              WHERE id = ANY($1) AND (published_at IS NOT NULL OR failed_at IS NOT NULL)
                AND type = ANY($2::text[])",
            &[&ids, &types.as_slice()],
        )
        .context("cannot re-queue the outbox rows")
}
