//! The outbox's figures for `backlog` and the push after a relay run: the job's own
//! rows (those of its outbox types: pending, the oldest of them, failed, waiting for a
//! topic) and, apart, the other producers' rows of a shared outbox by the job's columns.
//! Plain SELECTs of a report's READ ONLY transaction; every outbox type is a bound
//! parameter, a filter on the partial indexes the counts read.

use anyhow::{Context, Result};
use postgres::GenericClient;

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
}

/// The job's own rows of the outbox: those of `types`; `topic_waits` = the topics that
/// cannot take their rows.
pub fn outbox_lag(
    client: &mut impl GenericClient,
    types: &OutboxTypes,
    topic_waits: &[&str],
) -> Result<OutboxLag> {
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
        oldest_pending_at: pending.get("oldest_pending_at"),
        failed: failed.get::<_, i64>("failed").max(0) as u64,
        waiting_for_topic: waiting.get::<_, i64>("waiting").max(0) as u64,
    })
}

/// The other producers' rows of the outbox: of no type in `types`.
pub fn other_rows(client: &mut impl GenericClient, types: &OutboxTypes) -> Result<OtherRows> {
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
        ] {
            assert!(!sql.contains(" FOR "), "{sql}");
        }
    }
}
