//! The topics the relay's rows wait for (`sql/014_outbox_topic_waits.sql`): one fact per
//! topic that is missing or unusable, written by the relay, read by `backlog`. The
//! waiting rows of `crm.outbox` are never written for it. Optional for a release: a
//! database at the schema before it has no such table, and then the relay keeps the
//! facts for its run only and `backlog` sees only the rows an older relay marked.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;

use super::timestamp;
use crate::Conn;
use crate::domain::Timestamp;

/// The migration that makes the table, named in the warning when it is missing.
pub const TOPIC_WAIT_MIGRATION: &str = "sql/014_outbox_topic_waits.sql";

/// A topic that cannot take its rows, as a relay found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicWait {
    pub topic: String,
    /// The topic check's words: why it cannot take them.
    pub reason: String,
    /// When a relay first found it so.
    pub since: Timestamp,
    /// When a relay last checked it.
    pub checked_at: Timestamp,
}

/// Whether this session may read the facts (`write`: and write them), asked of the
/// catalog so that a database without migration 14 is no error. Each privilege on its
/// own: a list is true when any one of them is held. (CASE: the table's privileges are
/// asked only when it exists.)
const USABLE_SQL: &str = "\
SELECT CASE WHEN to_regclass('crm.booking_expiration_topic_wait') IS NULL THEN false
            ELSE has_table_privilege('crm.booking_expiration_topic_wait', 'SELECT')
             AND (NOT $1 OR (has_table_privilege('crm.booking_expiration_topic_wait', 'INSERT')
                        AND has_table_privilege('crm.booking_expiration_topic_wait', 'UPDATE')
                        AND has_table_privilege('crm.booking_expiration_topic_wait', 'DELETE')))
       END AS usable";

/// The topics rows wait for, in topic order; `None` when this session cannot read them
/// (or, with `write`, write them): migration 14 not applied, or the role lacks the
/// grant.
pub fn topic_waits(client: &mut impl Conn, write: bool) -> Result<Option<Vec<TopicWait>>> {
    let client = client.pg();
    let usable: bool = client
        .query_one(USABLE_SQL, &[&write])
        .context("cannot look up crm.booking_expiration_topic_wait")?
        .get("usable");
    if !usable {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT topic, reason, since, checked_at FROM crm.booking_expiration_topic_wait
              ORDER BY topic",
            &[],
        )
        .context("cannot read crm.booking_expiration_topic_wait")?;
    Ok(Some(
        rows.iter()
            .map(|r| TopicWait {
                topic: r.get("topic"),
                reason: r.get("reason"),
                since: timestamp::get(r, "since"),
                checked_at: timestamp::get(r, "checked_at"),
            })
            .collect(),
    ))
}

/// Records that each topic of `waits` (topic, reason) cannot take its rows, as checked
/// at `now`: one row per topic, its `since` kept when it waited already.
pub fn record_topic_waits(
    client: &mut impl Conn,
    waits: &[(&str, &str)],
    now: DateTime<Utc>,
) -> Result<()> {
    let client = client.pg();
    if waits.is_empty() {
        return Ok(());
    }
    let (topics, reasons): (Vec<&str>, Vec<&str>) = waits.iter().copied().unzip();
    client
        .execute(
            "INSERT INTO crm.booking_expiration_topic_wait AS w (topic, reason, since, checked_at)
             SELECT topic, reason, $3, $3 FROM unnest($1::text[], $2::text[]) AS f(topic, reason)
             ON CONFLICT (topic) DO UPDATE
                SET reason = excluded.reason, checked_at = excluded.checked_at",
            &[&topics, &reasons, &now],
        )
        .context("cannot record the topics rows wait for in crm.booking_expiration_topic_wait")?;
    Ok(())
}

/// Forgets the facts of `topics`: they can take their rows again, or none waits.
pub fn end_topic_waits(client: &mut impl Conn, topics: &[&str]) -> Result<()> {
    let client = client.pg();
    if topics.is_empty() {
        return Ok(());
    }
    client
        .execute(
            "DELETE FROM crm.booking_expiration_topic_wait WHERE topic = ANY($1::text[])",
            &[&topics],
        )
        .context("cannot clear the topics rows waited for in crm.booking_expiration_topic_wait")?;
    Ok(())
}
