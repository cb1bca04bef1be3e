//! The relay's own state (`sql/016_relay_receipts.sql`): a receipt per delivered row,
//! the exceptions (rows backing off, failed, waiting or re-queued), and per set of
//! outbox types a watermark: `floor` (every own row at or below it is settled) and
//! `high` (the highest `seq` dealt with). Nothing here updates `crm.outbox`; the legacy
//! marks (the columns the release before reads) are written by [`super::outbox`]'s
//! statements, beside these, while they are on. The sweep that moves the floor is
//! [`super::sweep`]; docs/design.md ("The relay's state")
//! argues that the watermark loses no row although commits come out of `seq` order.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use crate::domain::OutboxTypes;
use crate::{Conn, Prepared, Sql};

/// A row's delivery state as operators read it (explain, republish, retry-failed), a
/// derived table to name in a FROM (`(…) o`) with the columns of `crm.outbox` the
/// operators' statements read: its exception, else its receipt, else what the release
/// before wrote in the columns; but a failure written in the columns after the
/// exception or the receipt (by the release before, or an operator) is the row's
/// latest word and wins. Not a view: nothing of the job's may depend on the CRM's
/// columns (a view would keep the CRM from changing them). A filter on `o.id`,
/// `o.aggregateid` or `o.seq` reaches `crm.outbox`'s index through it.
pub(crate) const OUTBOX_STATE_SQL: &str = "\
SELECT s.id, s.aggregateid, s.type, s.topic, s.occurred_at, s.seq,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_published_at
            ELSE s.published_at END AS published_at,
       CASE WHEN s.src = 'exception' THEN s.e_failed_at
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.failed_at END AS failed_at,
       CASE WHEN s.src = 'exception' THEN s.e_attempts
            WHEN s.src = 'receipt' THEN greatest(s.attempts, 1)
            ELSE s.attempts END AS attempts,
       CASE WHEN s.src = 'exception' THEN s.e_failures
            WHEN s.src = 'receipt' THEN 0
            ELSE s.failures END AS failures,
       CASE WHEN s.src = 'exception' THEN s.e_next_attempt_at
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.next_attempt_at END AS next_attempt_at,
       CASE WHEN s.src = 'exception' THEN s.e_last_error
            WHEN s.src = 'receipt' THEN NULL
            ELSE s.last_error END AS last_error,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_partition
            ELSE s.delivered_partition END AS delivered_partition,
       CASE WHEN s.src = 'exception' THEN NULL
            WHEN s.src = 'receipt' THEN s.r_offset
            ELSE s.delivered_offset END AS delivered_offset,
       s.e_reason AS exception
  FROM (SELECT o.id, o.aggregateid, o.type, o.topic, o.occurred_at, o.seq, o.published_at,
               o.failed_at, o.attempts, o.failures, o.next_attempt_at, o.last_error,
               o.delivered_partition, o.delivered_offset,
               r.published_at AS r_published_at, r.partition AS r_partition,
               r.\"offset\" AS r_offset,
               e.reason AS e_reason, e.attempts AS e_attempts, e.failures AS e_failures,
               e.next_attempt_at AS e_next_attempt_at, e.last_error AS e_last_error,
               e.failed_at AS e_failed_at,
               CASE WHEN o.failed_at IS NOT NULL AND o.published_at IS NULL
                         AND o.failed_at > coalesce(e.since, r.published_at, '-infinity')
                    THEN 'columns'
                    WHEN e.seq IS NOT NULL THEN 'exception'
                    WHEN r.seq IS NOT NULL THEN 'receipt'
                    ELSE 'columns' END AS src
          FROM crm.outbox o
          LEFT JOIN crm.booking_expiration_receipt r ON r.seq = o.seq
          LEFT JOIN crm.booking_expiration_exception e ON e.seq = o.seq) s";

/// Whether the tables of migration 16 exist and this session may write them (`write`,
/// which also needs migration 17's columns: the relay's sweep) or read them.
const USABLE_SQL: &str = "\
SELECT CASE WHEN to_regclass('crm.booking_expiration_relay_state') IS NULL
              OR to_regclass('crm.booking_expiration_receipt') IS NULL
              OR to_regclass('crm.booking_expiration_exception') IS NULL THEN false
            ELSE has_table_privilege('crm.booking_expiration_receipt', 'SELECT')
             AND has_table_privilege('crm.booking_expiration_exception', 'SELECT')
             AND (NOT $1 OR (EXISTS (SELECT 1 FROM pg_attribute
                                      WHERE attrelid = to_regclass('crm.outbox')
                                        AND attname = 'inserted_xid' AND NOT attisdropped)
                        AND EXISTS (SELECT 1 FROM pg_attribute
                                     WHERE attrelid = to_regclass('crm.booking_expiration_relay_state')
                                       AND attname = 'high_snapshot' AND NOT attisdropped)
                        AND has_table_privilege('crm.booking_expiration_relay_state', 'UPDATE')
                        AND has_table_privilege('crm.booking_expiration_receipt', 'INSERT')
                        AND has_table_privilege('crm.booking_expiration_exception', 'INSERT')))
       END AS usable";

/// Whether the relay's own tables are there (and, with `write`, writable, with
/// migration 17's columns): a database at the schema before has none, and every reader
/// then reads `crm.outbox`'s columns; a relay then keeps the release before's state in
/// them.
pub fn relay_state_usable(client: &mut impl Conn, write: bool) -> Result<bool> {
    Ok(client
        .pg()
        .query_one(USABLE_SQL, &[&write])
        .context("cannot look up crm.booking_expiration_relay_state")?
        .get("usable"))
}

/// The watermark of `types` when the relay keeps its state apart and writes no legacy
/// marks (`--legacy-marks off`): then the columns of `crm.outbox` say nothing of the
/// rows it relayed, and the figures are read from its own state. `None` when the
/// columns tell the truth (the legacy marks on, no relay run yet, or no migration 16).
pub(crate) fn own_watermark(
    client: &mut impl Conn,
    types: &OutboxTypes,
) -> Result<Option<Watermark>> {
    let client = client.pg();
    if !relay_state_usable(client, false)? {
        return Ok(None);
    }
    let row = client
        .query_opt(
            "SELECT floor, high FROM crm.booking_expiration_relay_state
              WHERE types = $1 AND NOT legacy_marks",
            &[&types_key(types)],
        )
        .context("cannot read the relay's watermark")?;
    Ok(row.map(|r| Watermark {
        floor: r.get("floor"),
        high: r.get("high"),
    }))
}

/// The key of a set of outbox types in the state table: sorted, comma-separated.
pub(crate) fn types_key(types: &OutboxTypes) -> String {
    let mut names: Vec<&str> = types.as_slice().iter().map(String::as_str).collect();
    names.sort_unstable();
    names.join(",")
}

/// The watermark of a set of outbox types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watermark {
    pub floor: i64,
    pub high: i64,
}

/// The watermark of `types` as a run finds it ([`load_watermark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    pub watermark: Watermark,
    /// The sweep has no snapshot yet: the watermark was made by the release before
    /// migration 17 (the first sweep starts from a snapshot of its own, and reads the
    /// rows in (floor, high] by seq, as every sweep does).
    pub unswept: bool,
}

/// The watermark of `types`, made on the first start in one statement with the snapshot
/// the sweep starts from (`swept`): the floor just below the oldest own row that
/// snapshot sees pending by the columns with neither receipt nor exception, or the
/// newest row when there is none (every own row that snapshot sees at or below the floor
/// is settled). `high` is the floor while the legacy marks are on (the columns are the
/// truth then, and the fetch's filter on them skips what was settled); with them off it
/// is the newest receipt's `seq` when that is above the floor, and the first sweep
/// ([`sweep`]) takes the unsettled rows of that window as exceptions: the columns of
/// rows delivered under another set of types, with the marks off, say pending, and
/// every such row has a receipt, so none lies above the newest one. Above it the fetch
/// takes the rows as they come: a backlog never relayed is not turned into exceptions
/// row by row. The rows of transactions still in progress in that snapshot, at any
/// `seq`, are the sweep's: it reads every transaction that commits after it.
/// `legacy_marks` is recorded for the operators' commands. The oldest unsettled row is
/// found in `seq` order and the search stops there (`ORDER BY seq LIMIT 1`, not
/// `min()`, which the planner answers with a scan of the whole outbox).
pub fn load_watermark(
    client: &mut impl Conn,
    types: &OutboxTypes,
    legacy_marks: bool,
    now: DateTime<Utc>,
) -> Result<Loaded> {
    let client = client.pg();
    let key = types_key(types);
    let row = client
        .query_opt(
            "UPDATE crm.booking_expiration_relay_state
                SET legacy_marks = $2, updated_at = $3
              WHERE types = $1 RETURNING floor, high, swept IS NULL AS unswept",
            &[&key, &legacy_marks, &now],
        )
        .context("cannot read the relay's watermark")?;
    let row = match row {
        Some(row) => row,
        None => client
            .query_one(
                "INSERT INTO crm.booking_expiration_relay_state AS s
                        (types, floor, high, legacy_marks, updated_at, swept, swept_at)
                 SELECT $1, f, CASE WHEN $3 THEN f ELSE greatest(f, coalesce(d, f)) END, $3, $4,
                        pg_current_snapshot(), $4
                   FROM (SELECT coalesce((SELECT o.seq FROM crm.outbox o
                                           WHERE o.published_at IS NULL AND o.failed_at IS NULL
                                             AND o.type = ANY($2::text[])
                                             AND NOT EXISTS (
                                                 SELECT 1 FROM crm.booking_expiration_receipt r
                                                  WHERE r.seq = o.seq)
                                             AND o.seq NOT IN (
                                                 SELECT seq FROM crm.booking_expiration_exception)
                                           ORDER BY o.seq LIMIT 1) - 1,
                                         (SELECT max(seq) FROM crm.outbox), 0) AS f,
                                (SELECT max(r.seq) FROM crm.booking_expiration_receipt r) AS d) x
                 ON CONFLICT (types) DO UPDATE SET updated_at = EXCLUDED.updated_at
                 RETURNING s.floor, s.high, s.swept IS NULL AS unswept",
                &[&key, &types.as_slice(), &legacy_marks, &now],
            )
            .context("cannot make the relay's watermark")?,
    };
    Ok(Loaded {
        watermark: Watermark {
            floor: row.get("floor"),
            high: row.get("high"),
        },
        unswept: row.get("unswept"),
    })
}

/// An exception row as the relay reads it each batch: the rows of its types still to
/// be settled, and the failed ones above `high` (so that no fetch takes them anew).
#[derive(Debug, Clone, PartialEq)]
pub struct Exception {
    pub seq: i64,
    pub key: String,
    pub topic: String,
    pub attempts: i32,
    pub failures: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub failed: bool,
}

/// What the fetch above `high` must know of the relay's own state: the exceptions of
/// its types it needs (see [`Exception`]), and the `seq`s above `high` that already have
/// a receipt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settling {
    pub exceptions: Vec<Exception>,
    /// Rows above `high` delivered already, the lowest `DELIVERED_ABOVE` at most:
    /// exceptions above `high` sent as exceptions (a row held behind an older one of its
    /// key, or by its topic, by a run that ended before its batch's mark moved `high`
    /// past it), or rows of another set of types another relay delivered. Their
    /// receipts are there but `high` is not, so the fetch of new rows must not take
    /// them again.
    pub delivered_above: Vec<i64>,
    /// Where the fetch must stop when there were more (the last of them): beyond it
    /// a delivered row could be taken again. `i64::MAX` when all were read.
    pub fetch_upto: i64,
}

/// The receipts above `high` one fetch reads at most ([`Settling::delivered_above`]).
pub(crate) const DELIVERED_ABOVE: i64 = 10_000;

/// The exceptions of `$1` (the types) the fetch needs (see [`Exception`]), and the
/// receipts above `$2` (`high`; [`Settling::delivered_above`]), in one statement: the
/// receipts' part is one range of their key, bounded, almost always empty.
pub(crate) const SETTLING_SQL: &str = "\
SELECT seq, key, topic, attempts, failures, next_attempt_at,
       failed_at IS NOT NULL AS failed, false AS delivered
  FROM crm.booking_expiration_exception
 WHERE type = ANY($1::text[]) AND (failed_at IS NULL OR seq > $2)
UNION ALL
(SELECT seq, NULL, NULL, NULL, NULL, NULL, NULL, true
   FROM crm.booking_expiration_receipt
  WHERE seq > $2
  ORDER BY seq
  LIMIT $3::int8 + 1)
 ORDER BY seq";

/// `SETTLING_SQL` prepared on the session that fetches: it runs before every fetch.
pub fn prepare_settling(client: &mut impl Conn) -> Result<Prepared> {
    let client = client.pg();
    Ok(Prepared(client.prepare(SETTLING_SQL)?))
}

/// Reads `SETTLING_SQL` (`sql`: it, or its prepared statement) for `types` above
/// `high`.
pub fn settling(
    client: &mut impl Conn,
    sql: &(impl Sql + ?Sized),
    types: &OutboxTypes,
    high: i64,
) -> Result<Settling> {
    let client = client.pg();
    let rows = client
        .query(sql.stmt(), &[&types.as_slice(), &high, &DELIVERED_ABOVE])
        .context("cannot read the relay's exceptions")?;
    let mut settling = Settling {
        fetch_upto: i64::MAX,
        ..Settling::default()
    };
    for r in &rows {
        if r.get("delivered") {
            if settling.delivered_above.len() as i64 == DELIVERED_ABOVE {
                settling.fetch_upto = *settling.delivered_above.last().expect("not empty");
            } else {
                settling.delivered_above.push(r.get("seq"));
            }
            continue;
        }
        settling.exceptions.push(Exception {
            seq: r.get("seq"),
            key: r.get("key"),
            topic: r.get("topic"),
            attempts: r.get("attempts"),
            failures: r.get("failures"),
            next_attempt_at: r.get("next_attempt_at"),
            failed: r.get("failed"),
        });
    }
    Ok(settling)
}

/// An exception as the relay writes it: the row, why, and its counters.
#[derive(Debug, Clone, PartialEq)]
pub struct NewException<'a> {
    pub seq: i64,
    pub id: Uuid,
    pub key: &'a str,
    pub topic: &'a str,
    pub r#type: &'a str,
    pub reason: &'static str,
    pub attempts: i32,
    pub failures: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error: Option<&'a str>,
    pub failed_at: Option<DateTime<Utc>>,
}

/// Writes exceptions in one statement: a row already there takes the new state (its
/// counters as given), a new one is added. Returns how many were written.
pub fn put_exceptions(
    client: &mut impl Conn,
    rows: &[NewException],
    now: DateTime<Utc>,
) -> Result<u64> {
    let client = client.pg();
    if rows.is_empty() {
        return Ok(0);
    }
    let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let keys: Vec<&str> = rows.iter().map(|r| r.key).collect();
    let topics: Vec<&str> = rows.iter().map(|r| r.topic).collect();
    let types: Vec<&str> = rows.iter().map(|r| r.r#type).collect();
    let reasons: Vec<&str> = rows.iter().map(|r| r.reason).collect();
    let attempts: Vec<i32> = rows.iter().map(|r| r.attempts).collect();
    let failures: Vec<i32> = rows.iter().map(|r| r.failures).collect();
    let next: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.next_attempt_at).collect();
    let errors: Vec<Option<&str>> = rows.iter().map(|r| r.last_error).collect();
    let failed: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.failed_at).collect();
    client
        .execute(
            "INSERT INTO crm.booking_expiration_exception AS e
                    (seq, id, key, topic, type, reason, attempts, failures, next_attempt_at,
                     last_error, failed_at, since)
             SELECT t.*, $12::timestamptz
               FROM unnest($1::int8[], $2::uuid[], $3::text[], $4::text[], $5::text[],
                           $6::text[], $7::int4[], $8::int4[], $9::timestamptz[],
                           $10::text[], $11::timestamptz[]) AS t
             ON CONFLICT (seq) DO UPDATE
                SET reason = EXCLUDED.reason, attempts = EXCLUDED.attempts,
                    failures = EXCLUDED.failures, next_attempt_at = EXCLUDED.next_attempt_at,
                    last_error = EXCLUDED.last_error, failed_at = EXCLUDED.failed_at",
            &[
                &seqs, &ids, &keys, &topics, &types, &reasons, &attempts, &failures, &next,
                &errors, &failed, &now,
            ],
        )
        .context("cannot record the relay's exceptions")
}
