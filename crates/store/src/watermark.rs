//! The relay's queue, marks and purge over its own state ([`super::relay_state`]):
//! the fetch is one range of `ux_outbox_seq` above `high` (plus the due exceptions,
//! rare), a mark inserts the batch's receipts and moves `high` in one statement, and
//! the purge deletes own rows by `seq` range below the floor. No statement here updates
//! `crm.outbox`.

use std::time::Duration;

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use super::outbox::{FETCH_BYTES, OutboxRow, Receipt, RowExtra, outbox_row};
use super::relay_state::types_key;
use crate::domain::OutboxTypes;
use crate::{Conn, Prepared, Session, Sql};

/// The rows to send next, in `seq` order: the own rows above `$8` (`high`) that the
/// release before did not mark (its columns; a filter on the same range), none of
/// `$6` (the exceptions: theirs is another path), at most `$1` of them, read as one
/// range of `ux_outbox_seq` (or of `ix_outbox_pending`, whose order is the same); and
/// the due exceptions `$7`, by `seq` (a part never run when there are none); none above
/// `$9` (past the receipts above `high` the relay read). Payloads
/// and headers are loaded as [`super::PENDING_SQL`] does (`$3` the largest message,
/// `$4` the fetch's byte budget); `$2` = now, `$5` = the job's outbox types. The first
/// row carries the statement's snapshot: every row above `$8` it sees is in the batch
/// up to the batch's last, and the batch's mark records it for the sweep
/// ([`super::sweep::sweep`]).
///
/// No probe per row: the rows held back (a key with an older row backing off or in
/// flight, a topic that cannot take its rows) are told apart by the relay from the
/// exceptions it read once for this batch.
pub(crate) const PENDING_ABOVE_SQL: &str = "\
SELECT id, seq, aggregateid, topic, type, occurred_at, size, attempts, failures,
       next_attempt_at, last_error, published,
       CASE WHEN nth = 1 THEN pg_current_snapshot()::text END AS snapshot,
       CASE WHEN size <= $3::int8 AND loaded - fits < $4::int8 THEN payload END AS payload,
       CASE WHEN size <= $3::int8 AND loaded - fits < $4::int8 THEN headers END AS headers
  FROM (SELECT q.*, sum(q.fits) OVER w AS loaded, row_number() OVER w AS nth
          FROM (SELECT r.*, CASE WHEN r.size <= $3::int8 THEN r.size ELSE 0 END AS fits
                  FROM (SELECT p.*, octet_length(p.payload)::int8 + octet_length(p.headers) AS size
                          FROM (
(SELECT o.id, o.seq, o.aggregateid, o.topic, o.type, o.payload::text AS payload,
        o.headers::text AS headers,
        CASE WHEN isfinite(o.occurred_at) AND o.occurred_at <= $2 THEN o.occurred_at ELSE $2 END AS occurred_at,
        o.attempts, o.failures, o.next_attempt_at, o.last_error, false AS published
   FROM crm.outbox o
  WHERE o.seq > $8::int8 AND o.seq <= $9::int8 AND o.type = ANY($5::text[])
    AND o.published_at IS NULL AND o.failed_at IS NULL
    AND o.seq NOT IN (SELECT unnest($6::int8[]))
  ORDER BY o.seq
  LIMIT $1)
UNION ALL
(SELECT o.id, o.seq, o.aggregateid, o.topic, o.type, o.payload::text, o.headers::text,
        CASE WHEN isfinite(o.occurred_at) AND o.occurred_at <= $2 THEN o.occurred_at ELSE $2 END,
        o.attempts, o.failures, o.next_attempt_at, o.last_error,
        o.published_at IS NOT NULL OR o.failed_at IS NOT NULL
   FROM crm.outbox o
  WHERE o.seq = ANY($7::int8[]) AND cardinality($7::int8[]) > 0 AND o.type = ANY($5::text[]))
) p) r) q
        WINDOW w AS (ORDER BY q.seq ROWS UNBOUNDED PRECEDING)) s
 ORDER BY seq";

/// `PENDING_ABOVE_SQL` prepared on the session that fetches.
pub fn prepare_pending_above(client: &mut impl Conn) -> Result<Prepared> {
    let client = client.pg();
    Ok(Prepared(client.prepare(PENDING_ABOVE_SQL)?))
}

/// What one fetch above the watermark asks for.
#[derive(Debug, Clone, Copy)]
pub struct FetchAbove<'a> {
    pub high: i64,
    /// The fetch's last `seq` at most ([`super::relay_state::Settling::fetch_upto`]).
    pub upto: i64,
    /// The exceptions' `seq`s: never fetched as new rows.
    pub skip: &'a [i64],
    /// The due exceptions to send now.
    pub due: &'a [i64],
}

/// One fetch above the watermark: its rows and its statement's snapshot (none when it
/// found no row).
#[derive(Debug, Clone, Default)]
pub struct FetchedAbove {
    pub rows: Vec<OutboxRow>,
    pub snapshot: Option<String>,
}

/// The rows of `PENDING_ABOVE_SQL`, each with its counters and whether it is one of
/// the exceptions (`due`), and the fetch's snapshot.
#[allow(clippy::too_many_arguments)]
pub fn pending_above(
    client: &mut impl Conn,
    sql: &(impl Sql + ?Sized),
    now: DateTime<Utc>,
    limit: u32,
    above: FetchAbove,
    max_bytes: usize,
    types: &OutboxTypes,
) -> Result<FetchedAbove> {
    let client = client.pg();
    let sql = sql.stmt();
    let max_bytes = i64::try_from(max_bytes).unwrap_or(i64::MAX);
    let rows = client.query(
        sql,
        &[
            &i64::from(limit),
            &now,
            &max_bytes,
            &FETCH_BYTES,
            &types.as_slice(),
            &above.skip,
            &above.due,
            &above.high,
            &above.upto,
        ],
    )?;
    let due: std::collections::HashSet<i64> = above.due.iter().copied().collect();
    let snapshot = rows.first().and_then(|r| r.get("snapshot"));
    let rows = rows
        .iter()
        .map(|r| {
            let seq: i64 = r.get("seq");
            let extra = RowExtra {
                r#type: r.get("type"),
                attempts: r.get("attempts"),
                failures: r.get("failures"),
                next_attempt_at: r.get("next_attempt_at"),
                last_error: r.get("last_error"),
                excepted: due.contains(&seq),
                legacy_published: r.get("published"),
            };
            outbox_row(r, max_bytes, extra)
        })
        .collect();
    Ok(FetchedAbove { rows, snapshot })
}

/// A batch's mark: its receipts and the `high` it moves the watermark to, in one
/// statement; `$1`..`$4` the receipts (seq, id, partition, offset), `$5` now, `$6` the
/// types' key, `$7` the batch's `high`, `$8` its fetch's snapshot (the sweep's top while
/// batches are in flight: [`super::sweep::SweepTop::LastMark`]). Plain inserts (a receipt is new: a re-queue
/// deletes the old one), and one small row updated in place (its only index, the key,
/// is not changed: a HOT update).
pub(crate) const MARK_RECEIPTS_SQL: &str = "\
WITH state AS (
    UPDATE crm.booking_expiration_relay_state
       SET high = greatest(high, $7::int8),
           high_snapshot = CASE WHEN $7::int8 >= high AND $8::text IS NOT NULL
                                THEN $8::text::pg_snapshot ELSE high_snapshot END,
           updated_at = $5
     WHERE types = $6
)
INSERT INTO crm.booking_expiration_receipt (seq, id, published_at, partition, \"offset\")
SELECT t.seq, t.id, $5, t.partition, t.off
  FROM unnest($1::int8[], $2::uuid[], $3::int4[], $4::int8[]) AS t(seq, id, partition, off)";

/// `MARK_RECEIPTS_SQL` prepared on the session that marks.
pub fn prepare_mark_receipts(client: &mut impl Conn) -> Result<Prepared> {
    let client = client.pg();
    Ok(Prepared(client.prepare(MARK_RECEIPTS_SQL)?))
}

/// A delivered row as its receipt names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub receipt: Receipt,
    pub id: Uuid,
    /// It was one of the exceptions: that row goes with the receipt.
    pub excepted: bool,
}

/// Where a batch's mark moves `high`: the batch's last `seq` and its fetch's snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewHigh<'a> {
    pub seq: i64,
    pub snapshot: Option<&'a str>,
}

/// Records a batch's receipts and moves `high` (see `MARK_RECEIPTS_SQL`); the
/// exceptions delivered are deleted in the same transaction. Returns the receipts
/// written.
pub fn mark_receipts(
    client: &mut Session,
    sql: &(impl Sql + ?Sized),
    now: DateTime<Utc>,
    delivered: &[Delivered],
    high: NewHigh,
    types: &OutboxTypes,
    legacy: Option<(&(impl Sql + ?Sized), (i64, i64))>,
) -> Result<u64> {
    let client = client.pg();
    let sql = sql.stmt();
    let seqs: Vec<i64> = delivered.iter().map(|d| d.receipt.seq).collect();
    let ids: Vec<Uuid> = delivered.iter().map(|d| d.id).collect();
    let partitions: Vec<i32> = delivered.iter().map(|d| d.receipt.partition).collect();
    let offsets: Vec<i64> = delivered.iter().map(|d| d.receipt.offset).collect();
    let excepted: Vec<i64> = delivered
        .iter()
        .filter(|d| d.excepted)
        .map(|d| d.receipt.seq)
        .collect();
    let key = types_key(types);
    let params: [&(dyn postgres::types::ToSql + Sync); 8] = [
        &seqs,
        &ids,
        &partitions,
        &offsets,
        &now,
        &key,
        &high.seq,
        &high.snapshot,
    ];
    if excepted.is_empty() && legacy.is_none() {
        return Ok(client.execute(sql, &params)?);
    }
    let mut tx = client.transaction()?;
    // The state row first: a gap check holds it no longer than its own statements.
    if !excepted.is_empty() {
        tx.execute(
            "DELETE FROM crm.booking_expiration_receipt WHERE seq = ANY($1::int8[])",
            &[&excepted],
        )?;
    }
    let written = tx.execute(sql, &params)?;
    if !excepted.is_empty() {
        tx.execute(
            "DELETE FROM crm.booking_expiration_exception WHERE seq = ANY($1::int8[])",
            &[&excepted],
        )?;
    }
    if let Some((legacy_sql, span)) = legacy {
        let acked: Vec<Receipt> = delivered.iter().map(|d| d.receipt).collect();
        super::outbox::mark_published(&mut tx, legacy_sql, now, &acked, span, types)?;
    }
    tx.commit()?;
    Ok(written)
}

/// Deletes the exceptions of rows the release before published meanwhile (legacy
/// marks on: it sent them from its own queue).
pub fn drop_exceptions(client: &mut impl Conn, seqs: &[i64]) -> Result<u64> {
    let client = client.pg();
    if seqs.is_empty() {
        return Ok(0);
    }
    client
        .execute(
            "DELETE FROM crm.booking_expiration_exception WHERE seq = ANY($1::int8[])",
            &[&seqs],
        )
        .context("cannot drop the relay's settled exceptions")
}

/// What a purge did ([`purge_range`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Outbox rows deleted.
    pub deleted: u64,
    /// Receipts the range spanned.
    pub receipts: u64,
    /// Own rows in the range with no receipt, no exception and no mark of the release
    /// before: never deleted, made exceptions ('late') and sent.
    pub late: u64,
}

/// Deletes, by `seq` range, up to about `limit` own rows delivered more than
/// `older_than` before `now`: the range runs from the oldest receipt up to the last of
/// the next `limit` receipts (in `seq` order) that are all past the retention, never
/// above `floor`. Within it an own row goes only when it was delivered past the
/// retention: a receipt of its own (`seq` and `id`) that old, or the release before's
/// `published_at` that old (with `legacy_marks` the columns alone decide: every row
/// must carry its `published_at`, so one the release before re-queued meanwhile stays);
/// never an exception. Whatever the watermark says, a row of the range that was not
/// delivered is not deleted: one pending by the columns with neither a receipt nor an
/// exception becomes an exception ('late'), due at once. The receipts of the range
/// whose row is gone go with them. One range scan of `ux_outbox_seq` and one of the
/// receipts' key per statement, joined by hash; another producer's row is never
/// deleted.
pub fn purge_range(
    client: &mut Session,
    now: DateTime<Utc>,
    older_than: Duration,
    limit: u32,
    floor: i64,
    types: &OutboxTypes,
    legacy_marks: bool,
) -> Result<Purged> {
    let client = client.pg();
    let cutoff = now - chrono::TimeDelta::from_std(older_than).unwrap_or(chrono::TimeDelta::MAX);
    let range = client
        .query_one(
            "SELECT min(seq) AS lo, count(*) AS receipts,
                    coalesce(min(seq) FILTER (WHERE published_at >= $1) - 1, max(seq)) AS hi
               FROM (SELECT seq, published_at FROM crm.booking_expiration_receipt
                      WHERE seq <= $3 ORDER BY seq LIMIT $2) first",
            &[&cutoff, &i64::from(limit), &floor],
        )
        .context("cannot read the receipts past the retention")?;
    let (lo, hi): (Option<i64>, Option<i64>) = (range.get("lo"), range.get("hi"));
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Ok(Purged::default());
    };
    if hi < lo {
        return Ok(Purged::default());
    }
    let receipts: i64 = range.get("receipts");
    let mut tx = client.transaction()?;
    // The range's rows and its receipts are joined by hash, never by a loop.
    tx.batch_execute("SET LOCAL enable_nestloop = off")?;
    let late = tx
        .execute(
            "INSERT INTO crm.booking_expiration_exception
                    (seq, id, key, topic, type, reason, attempts, failures, since)
             SELECT o.seq, o.id, o.aggregateid, o.topic, o.type, 'late', 0, 0, $4
               FROM crm.outbox o
               LEFT JOIN crm.booking_expiration_receipt r
                      ON r.seq = o.seq AND r.id = o.id AND r.seq BETWEEN $1 AND $2
              WHERE o.seq BETWEEN $1 AND $2 AND o.type = ANY($3::text[])
                AND o.published_at IS NULL AND o.failed_at IS NULL AND r.seq IS NULL
                AND o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
             ON CONFLICT (seq) DO NOTHING",
            &[&lo, &hi, &types.as_slice(), &now],
        )
        .context("cannot take over the undelivered rows of the purge's range")?;
    let deleted = tx
        .execute(
            "DELETE FROM crm.outbox o
              WHERE o.seq BETWEEN $1 AND $2 AND o.type = ANY($3::text[])
                AND o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
                AND o.failed_at IS NULL
                AND (o.published_at < $4
                     OR (NOT $5 AND o.published_at IS NULL
                         AND (o.seq, o.id) IN (
                             SELECT r.seq, r.id FROM crm.booking_expiration_receipt r
                              WHERE r.seq BETWEEN $1 AND $2 AND r.published_at < $4)))",
            &[&lo, &hi, &types.as_slice(), &cutoff, &legacy_marks],
        )
        .context("cannot purge the delivered outbox rows")?;
    // The receipts of the range whose row is gone (deleted here or by anyone else).
    tx.execute(
        "DELETE FROM crm.booking_expiration_receipt r
          WHERE r.seq BETWEEN $1 AND $2
            AND NOT EXISTS (SELECT 1 FROM crm.outbox o
                             WHERE o.seq = r.seq AND o.seq BETWEEN $1 AND $2)",
        &[&lo, &hi],
    )
    .context("cannot purge the receipts")?;
    tx.commit()?;
    Ok(Purged {
        deleted,
        receipts: receipts.max(0) as u64,
        late,
    })
}
