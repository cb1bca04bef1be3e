//! The outbox rows that wait: pending, but not due before their `next_attempt_at`
//! (backing off after a refused send, or waiting for a missing or unusable topic), per
//! topic, with the earliest moment one of them is due. Read at the end of a relay run
//! and by `backlog`.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;

use crate::domain::{OutboxTypes, Timestamp};

/// The rows waiting at `$1`, per topic; `$2` = the `last_error` prefix of a row waiting
/// for its topic. Only rows with a back-off can wait, so the scan is of the partial index
/// `ix_outbox_backing_off` (its predicate, written out here): rows that failed, few.
/// `$3` = the job's outbox types (a filter on that index): another producer's rows never
/// count.
pub const WAITING_SQL: &str = "\
SELECT topic, count(*) AS waiting,
       count(*) FILTER (WHERE starts_with(last_error, $2)) AS waiting_for_topic,
       min(next_attempt_at) AS next_due
  FROM crm.outbox
 WHERE coalesce(published_at, failed_at) IS NULL AND next_attempt_at IS NOT NULL
   AND next_attempt_at > $1 AND type = ANY($3::text[])
 GROUP BY topic ORDER BY topic";

/// The rows of one topic that wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicWaiting {
    pub topic: String,
    /// Pending rows not due yet, for whatever reason.
    pub waiting: u64,
    /// Those of them waiting for their topic (the rest back off after a refused send).
    pub waiting_for_topic: u64,
    /// When the first of them is due.
    pub next_due: Timestamp,
}

/// The rows waiting at `now`, per topic, in topic order (empty when none waits).
pub fn waiting(
    client: &mut impl GenericClient,
    now: DateTime<Utc>,
    types: &OutboxTypes,
) -> Result<Vec<TopicWaiting>> {
    let rows = client
        .query(
            WAITING_SQL,
            &[&now, &super::outbox::WAITING_FOR_TOPIC, &types.as_slice()],
        )
        .context("cannot count the outbox rows that wait")?;
    Ok(rows
        .iter()
        .map(|r| TopicWaiting {
            topic: r.get("topic"),
            waiting: r.get::<_, i64>("waiting").max(0) as u64,
            waiting_for_topic: r.get::<_, i64>("waiting_for_topic").max(0) as u64,
            next_due: r.get("next_due"),
        })
        .collect())
}

/// All topics together: rows waiting, those waiting for their topic, the earliest due.
pub fn waiting_total(per_topic: &[TopicWaiting]) -> (u64, u64, Option<Timestamp>) {
    per_topic.iter().fold((0, 0, None), |(n, t, due), w| {
        (
            n + w.waiting,
            t + w.waiting_for_topic,
            Some(due.map_or(w.next_due, |d: Timestamp| d.min(w.next_due))),
        )
    })
}
