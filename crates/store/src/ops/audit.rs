//! `audit`'s SQL: where the window's receipts say its rows went (the first offset per
//! partition to read from), the topic's messages loaded chunk by chunk with binary
//! `COPY` into a temporary table of this session, and the two anti-joins in the
//! database: the job's rows of the window whose `ce_id` is not on their topic, and the
//! window's messages with no outbox row. Every result is kept in a temporary table, so
//! the counts, the listing and the repair read the same rows, and no side is ever
//! held in the program's memory. The tables live as long as the session (the command
//! refuses a transaction pooler).

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use uuid::Uuid;

use crate::Conn;
use crate::domain::{OutboxTypes, Timestamp};
use crate::timestamp;

/// The rows and messages an audit compares: the job's rows (`types`) on `topics`
/// written in `[since, until)`, and the messages of `topics` with a timestamp there.
#[derive(Debug, Clone, Copy)]
pub struct AuditWindow<'a> {
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub topics: &'a [String],
    pub types: &'a OutboxTypes,
}

/// A message of the topic, as the read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenMessage {
    pub partition: i32,
    pub offset: i64,
    pub ce_id: Option<String>,
    pub timestamp_ms: Option<i64>,
}

/// Where the delivery state is read: the relay's own state, or on a database without
/// it `crm.outbox`'s columns (as `republish` reads it).
fn state_source(client: &mut (impl GenericClient + Conn)) -> Result<(String, bool)> {
    Ok(if crate::relay_state_usable(client, false)? {
        (format!("({})", crate::relay_state::OUTBOX_STATE_SQL), true)
    } else {
        ("crm.outbox".to_owned(), false)
    })
}

const WINDOW_SQL: &str = "o.type = ANY($1::text[]) AND o.topic = ANY($2::text[])
   AND o.occurred_at >= $3 AND o.occurred_at < $4";

/// Per topic and partition, the lowest offset a delivery receipt of the window's rows
/// names (the receipt, or the release before's columns): where their messages begin.
pub fn receipt_starts(
    client: &mut impl Conn,
    w: &AuditWindow<'_>,
) -> Result<Vec<(String, i32, i64)>> {
    let client = client.pg();
    let (source, _) = state_source(client)?;
    let sql = format!(
        "SELECT o.topic, o.delivered_partition AS partition, min(o.delivered_offset) AS first
           FROM {source} o
          WHERE {WINDOW_SQL} AND o.delivered_partition IS NOT NULL
            AND o.delivered_offset IS NOT NULL
          GROUP BY 1, 2 ORDER BY 1, 2"
    );
    Ok(client
        .query(&sql, &[&w.types.as_slice(), &w.topics, &w.since, &w.until])
        .context("cannot read the delivery receipts of the window's outbox rows")?
        .iter()
        .map(|r| (r.get("topic"), r.get("partition"), r.get("first")))
        .collect())
}

/// Lets a session that is read-only by default (`default_transaction_read_only` on
/// the role, as the operators' login has it) create the audit's temporary tables: its
/// transactions from here on may write, and the role's privileges still bound what it
/// writes (the read-only role may write nothing of the schema). Only on a primary: a
/// standby cannot hold temporary tables at all.
pub fn allow_temp_tables(client: &mut impl Conn) -> Result<()> {
    client
        .pg()
        .batch_execute("SET default_transaction_read_only = off")
        .context("cannot allow the audit's temporary tables on a read-only session")
}

/// Makes this session's empty table of the messages seen (again, if an earlier audit
/// on the session left one).
pub fn begin_seen(client: &mut impl Conn) -> Result<()> {
    client
        .pg()
        .batch_execute(
            "DROP TABLE IF EXISTS pg_temp.booking_expiration_audit_seen;
             CREATE TEMP TABLE booking_expiration_audit_seen (
                 topic text NOT NULL, partition integer NOT NULL, \"offset\" bigint NOT NULL,
                 ce_id text NULL, ce_uuid uuid NULL, ts_ms bigint NULL)",
        )
        .context("cannot create the audit's temporary table (the TEMP privilege)")
}

/// Adds a chunk of `topic`'s messages to the table of the messages seen, in one binary
/// `COPY`; returns how many.
pub fn copy_seen(client: &mut impl Conn, topic: &str, chunk: &[SeenMessage]) -> Result<u64> {
    let client = client.pg();
    let writer = client
        .copy_in(
            "COPY pg_temp.booking_expiration_audit_seen
                  (topic, partition, \"offset\", ce_id, ce_uuid, ts_ms)
             FROM STDIN (FORMAT binary)",
        )
        .context("cannot copy the topic's messages into the audit's table")?;
    let mut w = BinaryCopyInWriter::new(
        writer,
        &[
            Type::TEXT,
            Type::INT4,
            Type::INT8,
            Type::TEXT,
            Type::UUID,
            Type::INT8,
        ],
    );
    for m in chunk {
        // A header is any bytes: text holds no NUL.
        let ce_id = m.ce_id.as_ref().map(|c| c.replace('\0', "\u{fffd}"));
        let ce_uuid = m.ce_id.as_deref().and_then(|c| Uuid::parse_str(c).ok());
        w.write(&[
            &topic,
            &m.partition,
            &m.offset,
            &ce_id,
            &ce_uuid,
            &m.timestamp_ms,
        ])
        .context("cannot copy the topic's messages into the audit's table")?;
    }
    w.finish()
        .context("cannot copy the topic's messages into the audit's table")
}

/// What the comparison found, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditCounts {
    /// The window's own rows.
    pub rows: u64,
    /// Of them, not on their topic: delivered (a receipt says where) …
    pub missing_published: u64,
    /// … failed (the relay gave up on them) …
    pub missing_failed: u64,
    /// … and pending (not sent yet).
    pub missing_pending: u64,
    /// The window's messages on the topics.
    pub messages: u64,
    /// Of them, with no outbox row: one whose row was purged after the retention (or
    /// whose receipt is still there) …
    pub no_row_purged: u64,
    /// … and one nothing explains.
    pub no_row: u64,
}

/// Compares the messages seen with the outbox, both ways, in the database: the
/// results stay in this session's tables for [`missing`], [`no_row`] and
/// [`missing_to_requeue`]. A message older than `purge_cutoff` whose row is gone, or
/// whose `ce_id` a receipt still names, counts as purged.
pub fn compare(
    client: &mut impl Conn,
    w: &AuditWindow<'_>,
    purge_cutoff: DateTime<Utc>,
) -> Result<AuditCounts> {
    let client = client.pg();
    let (source, own_state) = state_source(client)?;
    client
        .batch_execute(
            "CREATE INDEX ON pg_temp.booking_expiration_audit_seen (ce_uuid);
             ANALYZE pg_temp.booking_expiration_audit_seen;
             DROP TABLE IF EXISTS pg_temp.booking_expiration_audit_missing;
             CREATE TEMP TABLE booking_expiration_audit_missing (
                 seq bigint NOT NULL, id uuid NOT NULL, aggregateid text NOT NULL,
                 topic text NOT NULL, occurred_at timestamptz NOT NULL, state text NOT NULL,
                 at timestamptz NULL, partition integer NULL, \"offset\" bigint NULL);
             DROP TABLE IF EXISTS pg_temp.booking_expiration_audit_no_row;
             CREATE TEMP TABLE booking_expiration_audit_no_row (
                 topic text NOT NULL, partition integer NOT NULL, \"offset\" bigint NOT NULL,
                 ce_id text NULL, ts_ms bigint NULL, purged boolean NOT NULL)",
        )
        .context("cannot create the audit's temporary tables")?;
    let params: [&(dyn postgres::types::ToSql + Sync); 4] =
        [&w.types.as_slice(), &w.topics, &w.since, &w.until];
    let rows: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM crm.outbox o WHERE {WINDOW_SQL}"),
            &params,
        )
        .context("cannot count the window's outbox rows")?
        .get(0);
    client
        .execute(
            &format!(
                "INSERT INTO pg_temp.booking_expiration_audit_missing
                 SELECT o.seq, o.id, o.aggregateid, o.topic, o.occurred_at,
                        CASE WHEN o.published_at IS NOT NULL THEN 'published'
                             WHEN o.failed_at IS NOT NULL THEN 'failed'
                             ELSE 'pending' END,
                        coalesce(o.published_at, o.failed_at),
                        o.delivered_partition, o.delivered_offset
                   FROM {source} o
                  WHERE {WINDOW_SQL}
                    AND NOT EXISTS (SELECT 1 FROM pg_temp.booking_expiration_audit_seen s
                                     WHERE s.ce_uuid = o.id AND s.topic = o.topic)"
            ),
            &params,
        )
        .context("cannot compare the window's outbox rows with the topic")?;
    let (since_ms, until_ms, cutoff_ms) = (
        w.since.timestamp_millis(),
        w.until.timestamp_millis(),
        purge_cutoff.timestamp_millis(),
    );
    // The receipts' ids are joined by hash: the table has no index on them.
    let receipt = if own_state {
        "LEFT JOIN crm.booking_expiration_receipt r ON r.id = s.ce_uuid"
    } else {
        "LEFT JOIN (SELECT NULL::uuid AS id) r ON false"
    };
    client
        .execute(
            &format!(
                "INSERT INTO pg_temp.booking_expiration_audit_no_row
                 SELECT s.topic, s.partition, s.\"offset\", s.ce_id, s.ts_ms,
                        r.id IS NOT NULL OR coalesce(s.ts_ms < $3, false)
                   FROM pg_temp.booking_expiration_audit_seen s
                   {receipt}
                  WHERE coalesce(s.ts_ms >= $1 AND s.ts_ms < $2, true)
                    AND NOT EXISTS (SELECT 1 FROM crm.outbox o WHERE o.id = s.ce_uuid)"
            ),
            &[&since_ms, &until_ms, &cutoff_ms],
        )
        .context("cannot compare the topic with the outbox")?;
    let counts = client
        .query_one(
            "SELECT (SELECT count(*) FROM pg_temp.booking_expiration_audit_missing
                      WHERE state = 'published') AS published,
                    (SELECT count(*) FROM pg_temp.booking_expiration_audit_missing
                      WHERE state = 'failed') AS failed,
                    (SELECT count(*) FROM pg_temp.booking_expiration_audit_missing
                      WHERE state = 'pending') AS pending,
                    (SELECT count(*) FROM pg_temp.booking_expiration_audit_seen
                      WHERE coalesce(ts_ms >= $1 AND ts_ms < $2, true)) AS messages,
                    (SELECT count(*) FROM pg_temp.booking_expiration_audit_no_row
                      WHERE purged) AS purged,
                    (SELECT count(*) FROM pg_temp.booking_expiration_audit_no_row
                      WHERE NOT purged) AS no_row",
            &[&since_ms, &until_ms],
        )
        .context("cannot count the audit's findings")?;
    let n = |c: &str| counts.get::<_, i64>(c).max(0) as u64;
    Ok(AuditCounts {
        rows: rows.max(0) as u64,
        missing_published: n("published"),
        missing_failed: n("failed"),
        missing_pending: n("pending"),
        messages: n("messages"),
        no_row_purged: n("purged"),
        no_row: n("no_row"),
    })
}

/// An own row of the window that is not on its topic.
#[derive(Debug, Clone, PartialEq)]
pub struct MissingRow {
    pub id: Uuid,
    pub aggregateid: String,
    pub topic: String,
    pub occurred_at: Timestamp,
    /// `published`, `failed` or `pending`.
    pub state: String,
    /// When it was published, or failed.
    pub at: Option<Timestamp>,
    /// Where its receipt says it went.
    pub partition: Option<i32>,
    pub offset: Option<i64>,
}

/// The first `limit` rows [`compare`] found missing, in write order.
pub fn missing(client: &mut impl Conn, limit: i64) -> Result<Vec<MissingRow>> {
    Ok(client
        .pg()
        .query(
            "SELECT id, aggregateid, topic, occurred_at, state, at, partition, \"offset\"
               FROM pg_temp.booking_expiration_audit_missing ORDER BY seq LIMIT $1",
            &[&limit],
        )
        .context("cannot read the rows missing from the topic")?
        .iter()
        .map(|r| MissingRow {
            id: r.get("id"),
            aggregateid: r.get("aggregateid"),
            topic: r.get("topic"),
            occurred_at: timestamp::get(r, "occurred_at"),
            state: r.get("state"),
            at: timestamp::get_opt(r, "at"),
            partition: r.get("partition"),
            offset: r.get("offset"),
        })
        .collect())
}

/// A message of the window with no outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRow {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub ce_id: Option<String>,
    pub timestamp_ms: Option<i64>,
    /// Older than the purge's cutoff, or its receipt is still there.
    pub purged: bool,
}

/// The first `limit` messages [`compare`] found with no row, those nothing explains
/// first, then by topic, partition and offset.
pub fn no_row(client: &mut impl Conn, limit: i64) -> Result<Vec<NoRow>> {
    Ok(client
        .pg()
        .query(
            "SELECT topic, partition, \"offset\", ce_id, ts_ms, purged
               FROM pg_temp.booking_expiration_audit_no_row
              ORDER BY purged, topic, partition, \"offset\" LIMIT $1",
            &[&limit],
        )
        .context("cannot read the messages with no outbox row")?
        .iter()
        .map(|r| NoRow {
            topic: r.get("topic"),
            partition: r.get("partition"),
            offset: r.get("offset"),
            ce_id: r.get("ce_id"),
            timestamp_ms: r.get("ts_ms"),
            purged: r.get("purged"),
        })
        .collect())
}

/// The next `limit` missing rows a re-queue takes (published or failed; the pending
/// ones go anyway), after `seq` `after`, in write order, with their `seq`.
pub fn missing_to_requeue(
    client: &mut impl Conn,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, Uuid)>> {
    Ok(client
        .pg()
        .query(
            "SELECT seq, id FROM pg_temp.booking_expiration_audit_missing
              WHERE state <> 'pending' AND seq > $1 ORDER BY seq LIMIT $2",
            &[&after, &limit],
        )
        .context("cannot read the rows missing from the topic")?
        .iter()
        .map(|r| (r.get("seq"), r.get("id")))
        .collect())
}
