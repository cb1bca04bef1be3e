//! The outbox's figures for `backlog` and the push after a relay run: the job's own
//! rows (those of its outbox types: pending, the oldest of them, failed, waiting for a
//! topic) and, apart, the other producers' rows of a shared outbox by the job's columns.
//! Plain SELECTs of a report's READ ONLY transaction; every outbox type is a bound
//! parameter, a filter on the partial indexes the counts read.

use crate::error::{Context, Result};
use postgres::GenericClient;

use super::timestamp;
use crate::Conn;
use crate::domain::{OutboxTypes, Timestamp};

/// The relay's queue (partial index `ix_outbox_pending`) and its oldest row: the job's
/// rows only, `$1` its outbox types (a filter on the index).
pub const OUTBOX_PENDING_SQL: &str = "\
SELECT count(*) AS pending, min(occurred_at) AS oldest_pending_at FROM crm.outbox
 WHERE published_at IS NULL AND failed_at IS NULL AND type = ANY($1::text[])";

/// Pending rows waiting for a missing or unusable topic (a configuration fault): every
/// pending row of a topic with a topic wait (`$3`, one fact per topic;
/// `ix_outbox_pending`, never read when no topic waits: a one-time filter), and the
/// rows of other topics that the release before marked so (their `last_error` starts
/// with `$1`), among the rows with a back-off (`ix_outbox_backing_off`); `$2` = the
/// job's outbox types.
pub const OUTBOX_WAITING_FOR_TOPIC_SQL: &str = "\
SELECT (SELECT count(*) FROM crm.outbox
         WHERE coalesce(published_at, failed_at) IS NULL AND next_attempt_at IS NOT NULL
           AND starts_with(last_error, $1) AND type = ANY($2::text[])
           AND topic <> ALL($3::text[]))
     + (SELECT count(*) FROM crm.outbox
         WHERE published_at IS NULL AND failed_at IS NULL AND type = ANY($2::text[])
           AND topic = ANY($3::text[]) AND cardinality($3::text[]) > 0) AS waiting";

/// Rows the relay gave up on (partial index `ix_outbox_failed`); `$1` = the job's
/// outbox types.
pub const OUTBOX_FAILED_SQL: &str = "\
SELECT count(*) AS failed FROM crm.outbox WHERE failed_at IS NOT NULL AND type = ANY($1::text[])";

/// The own state's pending rows and the oldest of them (the legacy marks off): the own
/// rows above the floor (`$2`) with neither a receipt nor an exception nor a mark of
/// the release before; those at or below it that committed after the relay's last
/// sweep (`$3`, the types' key: its swept snapshot), which its next sweep takes as
/// late; and the exceptions not failed; `$1` = the job's outbox types.
pub(crate) const OWN_PENDING_SQL: &str = "\
SELECT count(*) AS pending, min(occurred_at) AS oldest_pending_at,
       count(*) FILTER (WHERE late) AS late_unswept
  FROM (SELECT o.occurred_at, false AS late FROM crm.outbox o
         WHERE o.seq > $2 AND o.type = ANY($1::text[])
           AND o.published_at IS NULL AND o.failed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_receipt r WHERE r.seq = o.seq)
           AND o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
        UNION ALL
        SELECT o.occurred_at, true FROM crm.outbox o
         WHERE (o.inserted_xid = ANY (ARRAY(
                    SELECT pg_snapshot_xip(swept) FROM crm.booking_expiration_relay_state
                     WHERE types = $3))
                OR o.inserted_xid >= (SELECT pg_snapshot_xmax(swept)
                                        FROM crm.booking_expiration_relay_state
                                       WHERE types = $3))
           AND o.seq <= $2 AND o.type = ANY($1::text[])
           AND o.published_at IS NULL AND o.failed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_receipt r
                            WHERE r.seq = o.seq AND r.id = o.id)
           AND o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
        UNION ALL
        SELECT o.occurred_at, e.reason = 'late' FROM crm.booking_expiration_exception e
          JOIN crm.outbox o ON o.seq = e.seq
         WHERE e.failed_at IS NULL AND e.type = ANY($1::text[])) p";

/// The own state's failed rows (the legacy marks off): the failed exceptions, and the
/// rows the release before failed that were neither delivered nor re-queued since.
pub(crate) const OWN_FAILED_SQL: &str = "\
SELECT (SELECT count(*) FROM crm.booking_expiration_exception
         WHERE failed_at IS NOT NULL AND type = ANY($1::text[]))
     + (SELECT count(*) FROM crm.outbox o
         WHERE o.failed_at IS NOT NULL AND o.type = ANY($1::text[])
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_receipt r WHERE r.seq = o.seq)
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_exception e
                            WHERE e.seq = o.seq)) AS failed";

/// The own state's rows waiting for their topic (`$2`, the topic waits): the
/// exceptions of those topics not failed, and their rows above `high` (`$3`) not
/// fetched yet; `$1` = the job's outbox types.
pub(crate) const OWN_WAITING_FOR_TOPIC_SQL: &str = "\
SELECT (SELECT count(*) FROM crm.booking_expiration_exception
         WHERE failed_at IS NULL AND type = ANY($1::text[]) AND topic = ANY($2::text[]))
     + (SELECT count(*) FROM crm.outbox
         WHERE seq > $3 AND published_at IS NULL AND failed_at IS NULL
           AND type = ANY($1::text[]) AND topic = ANY($2::text[])
           AND seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
           AND cardinality($2::text[]) > 0) AS waiting";

/// Other producers' rows in a shared outbox, by the job's columns (`$1` = the job's
/// outbox types, none of which they have): pending (`ix_outbox_pending`) and failed
/// (`ix_outbox_failed`, marked by a relay that once took them as its own). Shown apart,
/// never in the job's figures: their rows are not the job's to send.
pub const OUTBOX_OTHERS_SQL: &str = "\
SELECT (SELECT count(*) FROM crm.outbox
         WHERE published_at IS NULL AND failed_at IS NULL AND type <> ALL($1::text[])) AS pending,
       (SELECT count(*) FROM crm.outbox
         WHERE failed_at IS NOT NULL AND type <> ALL($1::text[])) AS failed";

/// Other producers' rows of a shared outbox, by the job's columns: not the job's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherRows {
    /// `published_at` and `failed_at` both NULL.
    pub pending: u64,
    /// `failed_at` set.
    pub failed: u64,
}

/// How far the outbox relay is behind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutboxLag {
    pub pending: u64,
    pub oldest_pending_at: Option<Timestamp>,
    pub failed: u64,
    /// Pending rows waiting for a missing or unusable topic.
    pub waiting_for_topic: u64,
    /// Of the pending rows, the late ones (the relay's own state, the legacy marks
    /// off): committed at or below rows already relayed, found by a sweep and not sent
    /// yet, or committed below the floor since the last sweep. 0 on the columns.
    pub late: u64,
}

/// The job's own rows of the outbox: those of `types`; `topic_waits` = the topics that
/// cannot take their rows.
pub(crate) fn outbox_lag(
    client: &mut impl Conn,
    types: &OutboxTypes,
    topic_waits: &[&str],
) -> Result<OutboxLag> {
    let client = client.pg();
    if let Some(own) = super::relay_state::own_watermark(client, types)? {
        return own_lag(client, types, topic_waits, own);
    }
    let types = types.as_slice();
    let pending = client
        .query_one(OUTBOX_PENDING_SQL, &[&types])
        .context("cannot count the pending outbox rows")?;
    let failed = client
        .query_one(OUTBOX_FAILED_SQL, &[&types])
        .context("cannot count the failed outbox rows")?;
    let waiting = client
        .query_one(
            OUTBOX_WAITING_FOR_TOPIC_SQL,
            &[&super::outbox::WAITING_FOR_TOPIC, &types, &topic_waits],
        )
        .context("cannot count the outbox rows waiting for their topic")?;
    Ok(OutboxLag {
        pending: pending.get::<_, i64>("pending").max(0) as u64,
        oldest_pending_at: timestamp::get_opt(&pending, "oldest_pending_at"),
        failed: failed.get::<_, i64>("failed").max(0) as u64,
        waiting_for_topic: waiting.get::<_, i64>("waiting").max(0) as u64,
        late: 0,
    })
}

/// [`outbox_lag`] from the relay's own state.
fn own_lag(
    client: &mut impl GenericClient,
    types: &OutboxTypes,
    topic_waits: &[&str],
    own: super::relay_state::Watermark,
) -> Result<OutboxLag> {
    let key = super::relay_state::types_key(types);
    let types = types.as_slice();
    let pending = client
        .query_one(OWN_PENDING_SQL, &[&types, &own.floor, &key])
        .context("cannot count the pending outbox rows")?;
    let failed = client
        .query_one(OWN_FAILED_SQL, &[&types])
        .context("cannot count the failed outbox rows")?;
    let waiting = client
        .query_one(
            OWN_WAITING_FOR_TOPIC_SQL,
            &[&types, &topic_waits, &own.high],
        )
        .context("cannot count the outbox rows waiting for their topic")?;
    Ok(OutboxLag {
        pending: pending.get::<_, i64>("pending").max(0) as u64,
        oldest_pending_at: timestamp::get_opt(&pending, "oldest_pending_at"),
        failed: failed.get::<_, i64>("failed").max(0) as u64,
        waiting_for_topic: waiting.get::<_, i64>("waiting").max(0) as u64,
        late: pending.get::<_, i64>("late_unswept").max(0) as u64,
    })
}

/// The other producers' rows of the outbox: of no type in `types`.
pub(crate) fn other_rows(client: &mut impl Conn, types: &OutboxTypes) -> Result<OtherRows> {
    let client = client.pg();
    let row = client
        .query_one(OUTBOX_OTHERS_SQL, &[&types.as_slice()])
        .context("cannot count the other producers' outbox rows")?;
    Ok(OtherRows {
        pending: row.get::<_, i64>("pending").max(0) as u64,
        failed: row.get::<_, i64>("failed").max(0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_figures_never_lock() {
        for sql in [
            OUTBOX_PENDING_SQL,
            OUTBOX_FAILED_SQL,
            OUTBOX_WAITING_FOR_TOPIC_SQL,
            OUTBOX_OTHERS_SQL,
            OWN_PENDING_SQL,
            OWN_FAILED_SQL,
            OWN_WAITING_FOR_TOPIC_SQL,
        ] {
            assert!(!sql.contains(" FOR "), "{sql}");
        }
    }
}
