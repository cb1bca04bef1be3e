//! The relay's SQL: the single-relay lock, pending rows in write order, marking rows
//! published or failed in one statement per batch, and the retention purge. Every
//! statement reads and writes only the rows of the job's outbox types (`type =
//! ANY($n)`, bound, never formatted in): an outbox shared with other producers keeps
//! their rows exactly as they are. The type is a filter on the same indexes.

use std::time::Duration;

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use crate::domain::OutboxTypes;
use crate::{Conn, Prepared, Sql};

/// The advisory lock key that makes the relay a singleton per database
/// (ASCII "bkexrlay").
const RELAY_LOCK: i64 = 0x626b_6578_726c_6179;

/// The channel `sql/006_outbox_notify.sql` notifies on every outbox insert.
pub(crate) const OUTBOX_CHANNEL: &str = "crm_outbox";

/// A pending outbox row, as the relay sends it.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub id: Uuid,
    /// The row's place in the queue (write order).
    pub seq: i64,
    pub key: String,
    pub topic: String,
    /// The payload's JSON text (empty unless `fetch` is [`Fetch::Loaded`]).
    pub payload: String,
    /// The headers' JSON text, an object of names and values (empty unless loaded).
    pub headers: String,
    /// When the row was written (for the commit → acknowledgement age). Whatever the
    /// column holds: a moment after the fetch's `now` (`infinity`, a year past 9999, a
    /// writer's clock ahead) and `-infinity` read as `now`, so every row decodes and its
    /// age is 0, never a crash of the fetch nor a sample of infinite age.
    pub occurred_at: DateTime<Utc>,
    /// The payload's and headers' text length in bytes, read before either is fetched.
    pub size: i64,
    pub fetch: Fetch,
    /// What the relay's own state needs of the row (empty from `PENDING_SQL`).
    pub extra: RowExtra,
}

/// A fetched row's type, counters and standing, for the relay's exceptions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowExtra {
    pub r#type: String,
    /// The columns of `crm.outbox` (the release before's counters), or the exception's.
    pub attempts: i32,
    pub failures: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// One of the exceptions, due now.
    pub excepted: bool,
    /// Published or failed by the release before (or an operator) meanwhile: its
    /// columns say so.
    pub legacy_published: bool,
}

/// Whether a fetched row came with its payload and headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    Loaded,
    /// Larger than the largest message: never loaded, it is marked failed.
    TooLarge,
    /// Past the batch's byte budget: left for a later batch.
    Later,
}

/// The payload and header bytes one fetch loads at most, beyond its first row (which
/// is loaded whatever its size up to the largest message): with the batches in flight
/// it bounds the relay's memory whatever the outbox holds.
pub const FETCH_BYTES: i64 = 2 * 1024 * 1024;

/// Takes the relay's session-level advisory lock; false when another relay holds it.
pub fn try_relay_lock(client: &mut impl Conn) -> Result<bool> {
    let client = client.pg();
    Ok(client
        .query_one("SELECT pg_try_advisory_lock($1) AS locked", &[&RELAY_LOCK])?
        .get("locked"))
}

/// Lets go of every advisory lock this session holds (the relay lock among them).
pub fn release_advisory_locks(client: &mut impl Conn) -> Result<()> {
    let client = client.pg();
    client.batch_execute("SELECT pg_advisory_unlock_all()")?;
    Ok(())
}

/// Subscribes this session to outbox notifications.
pub fn listen(client: &mut impl Conn) -> Result<()> {
    let client = client.pg();
    client.batch_execute(&format!("LISTEN {OUTBOX_CHANNEL}"))?;
    Ok(())
}

/// The relay's statements are written so that their plans do not depend on fresh
/// statistics. After an outage the cycle fills the outbox with a burst that autovacuum
/// has not analyzed yet: the statistics still say that almost no row is pending, and a
/// statement whose predicate the planner reads through them (`published_at IS NULL`)
/// is planned for one row: a sequential scan joined in a loop, or the pending index
/// scanned whole for each row. Each statement below therefore reaches the table only
/// through an index whose use the planner cannot cost away: the pending index for the
/// queue (it carries the ORDER BY), the key index per fetched row, the `seq` index for
/// the rows of a mark (`seq = ANY($1)`, a cost proportional to the batch, whatever the
/// statistics). `tests/it/design.rs` checks the plans on an outbox a burst filled after
/// its last ANALYZE.
///
/// The oldest rows due for sending, in write order (served by `ix_outbox_pending`):
/// pending, not waiting out a back-off, and not behind an older row of the same key
/// on the same topic that is (per-key order within a topic), nor of a key whose row is
/// still in flight at the broker (`$3`, the pipelined relay's keys in flight: a newer
/// row of such a key waits until the older one is acknowledged and marked). `$1` = the
/// limit, `$2` = now. The keys in flight are a hashed subplan (`NOT IN (SELECT
/// unnest($3))`), built once per fetch: `<> ALL($3)` would compare every row the scan
/// passes with every key in flight, since a generic plan does not hash it (`NOT IN` is
/// exact here: neither `aggregateid` nor a key in flight is ever NULL). The older row
/// of the same key is looked up once per fetched row in `ix_outbox_backing_off` (the
/// rows backing off, by key and `seq`: mostly empty, so the look-up reads no row). Its
/// pending test is written as `coalesce(…) IS NULL`, the predicate of that index, so
/// that the planner cannot pick the pending index for it, which stale statistics make
/// look empty while it holds the whole burst; and
/// `OFFSET 0` keeps it a subplan keyed by the row's key, so fresh statistics (which
/// know that hardly any row backs off) cannot turn it into a scan of the table either.
///
/// The payload and headers reach the relay only for rows it can send: each row's size
/// (their text's bytes) is read first, and a row larger than `$4` (the largest
/// message), or one past `$5` bytes loaded by the rows before it in this fetch, comes
/// without them (NULL): it is failed unread, or left for the next fetch. The sizes are
/// summed over the fetched rows only (outside the limit), so the queue's plan is the
/// same; the payload's text is made once per row, inside. `$6` = the job's outbox types:
/// a filter on the pending index (and on the key's look-up), so another producer's row
/// is never read, sent nor held as an older row of a key.
///
/// `$7` = the topics that cannot take their rows (missing, not writable, another
/// partition count: the run's topic waits): their rows are left out, untouched, however
/// many wait, and go as soon as the topic is off the list (a hashed subplan, as the
/// keys). `$8` = [`WAITING_FOR_TOPIC`]: a row the relay of the release before marked
/// waiting for its topic (`next_attempt_at` 30 s on) is due at once: its topic is
/// checked once in this run, and it goes if the topic can take it.
pub const PENDING_SQL: &str = "\
SELECT id, seq, aggregateid, topic, occurred_at, size,
       CASE WHEN size <= $4::int8 AND loaded - fits < $5::int8 THEN payload END AS payload,
       CASE WHEN size <= $4::int8 AND loaded - fits < $5::int8 THEN headers END AS headers
  FROM (SELECT q.*, sum(q.fits) OVER (ORDER BY q.seq ROWS UNBOUNDED PRECEDING) AS loaded
          FROM (SELECT r.*, CASE WHEN r.size <= $4::int8 THEN r.size ELSE 0 END AS fits
                  FROM (SELECT p.*, octet_length(p.payload)::int8 + octet_length(p.headers) AS size
                          FROM (
SELECT o.id, o.seq, o.aggregateid, o.topic, o.payload::text AS payload, o.headers::text AS headers,
       CASE WHEN isfinite(o.occurred_at) AND o.occurred_at <= $2 THEN o.occurred_at ELSE $2 END AS occurred_at
  FROM crm.outbox o
 WHERE o.published_at IS NULL AND o.failed_at IS NULL AND o.type = ANY($6::text[])
   AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $2 OR starts_with(o.last_error, $8))
   AND o.aggregateid NOT IN (SELECT unnest($3::text[]))
   AND o.topic NOT IN (SELECT unnest($7::text[]))
   AND NOT EXISTS (SELECT 1 FROM crm.outbox w
                    WHERE w.aggregateid = o.aggregateid AND w.topic = o.topic
                      AND w.seq < o.seq AND w.type = ANY($6::text[])
                      AND coalesce(w.published_at, w.failed_at) IS NULL
                      AND w.next_attempt_at > $2
                   OFFSET 0)
 ORDER BY o.seq
 LIMIT $1) p) r) q) s
 ORDER BY seq";

/// Marks acknowledged rows published: `$1` their `seq`s, `$2` their receipts (a JSON
/// object: seq → [partition, offset]), `$3` now, `$4`..=`$5` the span of `seq` the
/// batch was fetched from. A row is named by its `seq` (unique, never reused), so the
/// whole statement is one range of `ux_outbox_seq`: the span keeps the estimate right
/// even on stale statistics (a bound beyond the histogram is read from the index
/// itself), and the `seq`s are looked up in the same few index pages, where ids would
/// be 500 look-ups scattered over the primary key. The statement costs the batch, never
/// a scan of the table, and there is no join whose order stale statistics could turn
/// into a loop over the batch for each row: each row finds its receipt by its `seq` in
/// `$2`, a look-up in a sorted object (a search in an array would cost the batch's
/// length per row). `$6` = the job's outbox types.
pub const MARK_PUBLISHED_SQL: &str = "\
UPDATE crm.outbox o
   SET published_at = $3, attempts = least(o.attempts, 2147483646) + 1,
       last_error = NULL, next_attempt_at = NULL,
       delivered_partition = (($2::jsonb -> o.seq::text) ->> 0)::int4,
       delivered_offset = (($2::jsonb -> o.seq::text) ->> 1)::int8
 WHERE o.seq BETWEEN $4 AND $5 AND o.seq = ANY($1::int8[]) AND o.published_at IS NULL
   AND o.type = ANY($6::text[])";

/// What a fetch leaves out: the keys with a row in flight, and the topics that cannot
/// take their rows (their rows wait, untouched).
#[derive(Debug, Clone, Copy)]
pub struct LeftOut<'a> {
    pub keys: &'a [&'a str],
    pub topics: &'a [&'a str],
}

/// The oldest rows due for sending, none of them left out (`left_out`: a key in flight,
/// a topic that cannot take them), loaded up to `FETCH_BYTES`; a row over
/// `max_bytes` is never loaded. See `PENDING_SQL`.
///
/// `sql` is `PENDING_SQL` or the statement prepared from it ([`prepare_pending`]): the
/// relay prepares it once per session, so its 200 fetches of a 100k-row backlog are
/// neither parsed nor, once the plan is cached, planned again.
pub fn pending(
    client: &mut impl Conn,
    sql: &(impl Sql + ?Sized),
    now: DateTime<Utc>,
    limit: u32,
    left_out: LeftOut,
    max_bytes: usize,
    types: &OutboxTypes,
) -> Result<Vec<OutboxRow>> {
    let client = client.pg();
    let sql = sql.stmt();
    let max_bytes = i64::try_from(max_bytes).unwrap_or(i64::MAX);
    let rows = client.query(
        sql,
        &[
            &i64::from(limit),
            &now,
            &left_out.keys,
            &max_bytes,
            &FETCH_BYTES,
            &types.as_slice(),
            &left_out.topics,
            &WAITING_FOR_TOPIC,
        ],
    )?;
    Ok(rows
        .iter()
        .map(|r| outbox_row(r, max_bytes, RowExtra::default()))
        .collect())
}

/// A row of a pending read (`PENDING_SQL`, the watermark's `pending_above`): its payload
/// and headers when they came with it, else whether they are too large to fetch
/// (above `max_bytes`) or come in a later fetch; `extra` is what only some reads have.
pub(crate) fn outbox_row(r: &postgres::Row, max_bytes: i64, extra: RowExtra) -> OutboxRow {
    let size: i64 = r.get("size");
    let payload: Option<String> = r.get("payload");
    let headers: Option<String> = r.get("headers");
    let (fetch, payload, headers) = match (payload, headers) {
        (Some(p), Some(h)) => (Fetch::Loaded, p, h),
        _ if size > max_bytes => (Fetch::TooLarge, String::new(), String::new()),
        _ => (Fetch::Later, String::new(), String::new()),
    };
    OutboxRow {
        id: r.get("id"),
        seq: r.get("seq"),
        key: r.get("aggregateid"),
        topic: r.get("topic"),
        payload,
        headers,
        occurred_at: r.get("occurred_at"),
        size,
        fetch,
        extra,
    }
}

/// `PENDING_SQL` prepared on the session that fetches: its plan is the same custom or
/// generic (`tests/it/design.rs` checks both).
pub fn prepare_pending(client: &mut impl Conn) -> Result<Prepared> {
    let client = client.pg();
    Ok(Prepared(client.prepare(PENDING_SQL)?))
}

/// `MARK_PUBLISHED_SQL` prepared on the session that marks.
pub fn prepare_mark_published(client: &mut impl Conn) -> Result<Prepared> {
    let client = client.pg();
    Ok(Prepared(client.prepare(MARK_PUBLISHED_SQL)?))
}

/// Marks acknowledged rows published at `now`, in one statement, each with its
/// delivery receipt: the row's `seq`, and the partition and offset the broker
/// acknowledged. `span` spans the `seq` of every row in `acked` (see
/// `MARK_PUBLISHED_SQL`).
///
/// `sql` is `MARK_PUBLISHED_SQL` or the statement prepared from it
/// ([`prepare_mark_published`]), as the relay's mark session does once.
pub fn mark_published(
    client: &mut impl Conn,
    sql: &(impl Sql + ?Sized),
    now: DateTime<Utc>,
    acked: &[Receipt],
    span: (i64, i64),
    types: &OutboxTypes,
) -> Result<u64> {
    let client = client.pg();
    let sql = sql.stmt();
    if acked.is_empty() {
        return Ok(0);
    }
    let seqs: Vec<i64> = acked.iter().map(|a| a.seq).collect();
    let receipts = receipts(acked);
    let types = types.as_slice();
    Ok(client.execute(sql, &[&seqs, &receipts, &now, &span.0, &span.1, &types])?)
}

/// Where the broker put an acknowledged row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The row's `seq`.
    pub seq: i64,
    pub partition: i32,
    pub offset: i64,
}

/// The receipts of [`MARK_PUBLISHED_SQL`]: seq → [partition, offset].
fn receipts(acked: &[Receipt]) -> serde_json::Value {
    serde_json::Value::Object(
        acked
            .iter()
            .map(|r| {
                (
                    r.seq.to_string(),
                    serde_json::json!([r.partition, r.offset]),
                )
            })
            .collect(),
    )
}

/// Rows the broker can never take (too large, invalid): marked failed at `now`.
pub fn mark_failed(
    client: &mut impl Conn,
    now: DateTime<Utc>,
    failures: &[(Uuid, String)],
    types: &OutboxTypes,
) -> Result<u64> {
    let client = client.pg();
    if failures.is_empty() {
        return Ok(0);
    }
    let (ids, errors) = split(failures);
    Ok(client.execute(
        "UPDATE crm.outbox o
            SET attempts = least(o.attempts, 2147483646) + 1, last_error = f.error,
                failed_at = $3, next_attempt_at = NULL
           FROM unnest($1::uuid[], $2::text[]) AS f(id, error)
          WHERE o.id = ANY($1::uuid[]) AND o.id = f.id AND o.published_at IS NULL
            AND o.type = ANY($4::text[])",
        &[&ids, &errors, &now, &types.as_slice()],
    )?)
}

/// What `last_error` starts with in a row the relay of the release before marked
/// waiting for its topic (with `next_attempt_at` 30 s on, each time it checked the
/// topic). This relay writes no such mark: it keeps one fact per topic
/// ([`super::topic_wait`]); `backlog` and the metrics still count such rows.
pub const WAITING_FOR_TOPIC: &str = "waiting for its topic: ";

/// The most failures a row may have before the relay gives up on it (marks it failed).
/// With the back-off below, about two hours of retries.
pub const MAX_FAILURES: i32 = 20;

/// A row's own failure (its topic is unusable, or the broker refused it while taking
/// others): the row backs off — 1 s, 2 s, 4 s, … capped at 10 min — and after
/// [`MAX_FAILURES`] of them it is marked failed with the last error. Returns the ids
/// given up on. Neither counter nor back-off can overflow.
pub fn mark_retry(
    client: &mut impl Conn,
    now: DateTime<Utc>,
    failures: &[(Uuid, String)],
    types: &OutboxTypes,
) -> Result<Vec<Uuid>> {
    let client = client.pg();
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, errors) = split(failures);
    let rows = client.query(
        "UPDATE crm.outbox o
            SET attempts = least(o.attempts, 2147483646) + 1,
                failures = least(o.failures, $4 - 1) + 1,
                last_error = CASE WHEN o.failures + 1 >= $4
                                  THEN format('gave up after %s failed attempts: %s', $4, f.error)
                                  ELSE f.error END,
                failed_at = CASE WHEN o.failures + 1 >= $4 THEN $3::timestamptz END,
                next_attempt_at = CASE WHEN o.failures + 1 >= $4 THEN NULL
                                       ELSE $3::timestamptz + least(interval '1 second' * power(2, least(o.failures, 10)),
                                                       interval '10 minutes') END
           FROM unnest($1::uuid[], $2::text[]) AS f(id, error)
          WHERE o.id = ANY($1::uuid[]) AND o.id = f.id AND o.published_at IS NULL
            AND o.type = ANY($5::text[])
      RETURNING o.id, o.failed_at IS NOT NULL AS gave_up",
        &[&ids, &errors, &now, &MAX_FAILURES, &types.as_slice()],
    )?;
    Ok(rows
        .iter()
        .filter(|r| r.get::<_, bool>("gave_up"))
        .map(|r| r.get("id"))
        .collect())
}

fn split(failures: &[(Uuid, String)]) -> (Vec<Uuid>, Vec<&str>) {
    failures.iter().map(|(id, e)| (*id, e.as_str())).unzip()
}

/// Deletes up to `limit` rows of the job's types published more than `older_than`
/// before `now` (served by `ix_outbox_published_at`, the type a filter on it); returns
/// how many. Another producer's published row is never deleted, however old.
pub fn purge_published(
    client: &mut impl Conn,
    now: DateTime<Utc>,
    older_than: Duration,
    limit: u32,
    types: &OutboxTypes,
) -> Result<u64> {
    let client = client.pg();
    let seconds = older_than.as_secs_f64();
    Ok(client.execute(
        "DELETE FROM crm.outbox
          WHERE type = ANY($4::text[])
            AND id IN (SELECT id FROM crm.outbox
                        WHERE published_at < $3::timestamptz - $1 * interval '1 second'
                          AND type = ANY($4::text[])
                        ORDER BY published_at
                        LIMIT $2)",
        &[&seconds, &i64::from(limit), &now, &types.as_slice()],
    )?)
}
