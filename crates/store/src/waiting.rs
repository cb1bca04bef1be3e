//! The outbox rows that wait, per topic: pending, but backing off after a refused send
//! (not due before their `next_attempt_at`), or waiting for a missing or unusable topic
//! (every pending row of a topic with a topic wait, and the rows the release before
//! marked so), with the earliest moment a back-off ends. Read at the end of a relay run
//! and by `backlog`.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;

use super::timestamp;
use crate::Conn;
use crate::domain::{OutboxTypes, Timestamp};

/// The rows waiting at `$1`, per topic; `$2` = the `last_error` prefix of a row the
/// release before marked waiting for its topic; `$3` = the job's outbox types (a filter
/// on each index read): another producer's rows never count; `$4` = the topics that
/// cannot take their rows (the topic waits, one fact each). Two parts:
/// - the rows with a back-off of the other topics: only rows with a back-off can wait
///   out a time, so the scan is of the partial index `ix_outbox_backing_off` (its
///   predicate, written out here): rows that failed, few;
/// - every pending row of a waiting topic (`ix_outbox_pending`, the topic a filter):
///   they wait for their topic, with no mark of their own, so they are counted where
///   they are. When no topic waits that part is never run (a one-time filter on `$4`).
///
/// `next_due` is the first back-off's end; a topic whose rows wait only for the topic
/// has none (NULL): they go when it can take them.
pub const WAITING_SQL: &str = "\
SELECT topic, count(*) AS waiting,
       count(*) FILTER (WHERE for_topic) AS waiting_for_topic,
       min(next_attempt_at) FILTER (WHERE next_attempt_at > $1) AS next_due
  FROM (SELECT topic, next_attempt_at, coalesce(starts_with(last_error, $2), false) AS for_topic
          FROM crm.outbox
         WHERE coalesce(published_at, failed_at) IS NULL AND next_attempt_at IS NOT NULL
           AND next_attempt_at > $1 AND type = ANY($3::text[]) AND topic <> ALL($4::text[])
        UNION ALL
        SELECT topic, next_attempt_at, true
          FROM crm.outbox
         WHERE published_at IS NULL AND failed_at IS NULL AND type = ANY($3::text[])
           AND topic = ANY($4::text[]) AND cardinality($4::text[]) > 0) w
 GROUP BY topic ORDER BY topic";

/// [`WAITING_SQL`] from the relay's own state (the legacy marks off): the exceptions
/// backing off of the other topics, the exceptions of the waiting topics, and those
/// topics' rows above `high` (`$5`) not fetched yet.
pub(crate) const OWN_WAITING_SQL: &str = "\
SELECT topic, count(*) AS waiting,
       count(*) FILTER (WHERE for_topic) AS waiting_for_topic,
       min(next_attempt_at) FILTER (WHERE next_attempt_at > $1) AS next_due
  FROM (SELECT topic, next_attempt_at, false AS for_topic
          FROM crm.booking_expiration_exception
         WHERE failed_at IS NULL AND next_attempt_at > $1 AND type = ANY($3::text[])
           AND topic <> ALL($4::text[]) AND $2::text IS NOT NULL
        UNION ALL
        SELECT topic, next_attempt_at, true
          FROM crm.booking_expiration_exception
         WHERE failed_at IS NULL AND type = ANY($3::text[]) AND topic = ANY($4::text[])
        UNION ALL
        SELECT topic, NULL, true
          FROM crm.outbox
         WHERE seq > $5 AND published_at IS NULL AND failed_at IS NULL
           AND type = ANY($3::text[]) AND topic = ANY($4::text[])
           AND seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
           AND cardinality($4::text[]) > 0) w
 GROUP BY topic ORDER BY topic";

/// The rows of one topic that wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicWaiting {
    pub topic: String,
    /// Pending rows not due yet, for whatever reason.
    pub waiting: u64,
    /// Those of them waiting for their topic (the rest back off after a refused send).
    pub waiting_for_topic: u64,
    /// When the first back-off of them ends; `None` when they all wait for the topic
    /// alone (they go once it can take them).
    pub next_due: Option<Timestamp>,
}

/// The rows waiting at `now`, per topic, in topic order (empty when none waits);
/// `topic_waits` = the topics that cannot take their rows.
pub fn waiting(
    client: &mut impl Conn,
    now: DateTime<Utc>,
    types: &OutboxTypes,
    topic_waits: &[&str],
) -> Result<Vec<TopicWaiting>> {
    let client = client.pg();
    let own = super::relay_state::own_watermark(client, types)?;
    let (prefix, types) = (super::outbox::WAITING_FOR_TOPIC, types.as_slice());
    let rows = match own {
        None => client.query(WAITING_SQL, &[&now, &prefix, &types, &topic_waits]),
        Some(own) => client.query(
            OWN_WAITING_SQL,
            &[&now, &prefix, &types, &topic_waits, &own.high],
        ),
    }
    .context("cannot count the outbox rows that wait")?;
    Ok(rows
        .iter()
        .map(|r| TopicWaiting {
            topic: r.get("topic"),
            waiting: r.get::<_, i64>("waiting").max(0) as u64,
            waiting_for_topic: r.get::<_, i64>("waiting_for_topic").max(0) as u64,
            next_due: timestamp::get_opt(r, "next_due"),
        })
        .collect())
}

/// All topics together: rows waiting, those waiting for their topic, the earliest due
/// (`None` when no row waits out a time).
pub fn waiting_total(per_topic: &[TopicWaiting]) -> (u64, u64, Option<Timestamp>) {
    per_topic.iter().fold((0, 0, None), |(n, t, due), w| {
        let due = match (due, w.next_due) {
            (Some(earlier), Some(next)) => Some(earlier.min(next)),
            (earlier, next) => earlier.or(next),
        };
        (n + w.waiting, t + w.waiting_for_topic, due)
    })
}
