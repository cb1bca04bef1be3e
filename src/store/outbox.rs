//! The relay's SQL: the single-relay lock, pending rows in write order, marking rows
//! published or failed in one statement per batch, and the retention purge.

use std::time::Duration;

use anyhow::Result;
use postgres::GenericClient;
use uuid::Uuid;

/// The advisory lock key that makes the relay a singleton per database
/// (ASCII "bkexrlay").
const RELAY_LOCK: i64 = 0x626b_6578_726c_6179;

/// The channel `sql/006_outbox_notify.sql` notifies on every outbox insert.
pub const OUTBOX_CHANNEL: &str = "crm_outbox";

/// A pending outbox row, as the relay sends it.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub id: Uuid,
    pub key: String,
    pub topic: String,
    /// The payload's JSON text.
    pub payload: String,
    pub headers: serde_json::Value,
}

/// Takes the relay's session-level advisory lock; false when another relay holds it.
pub fn try_relay_lock(client: &mut impl GenericClient) -> Result<bool> {
    Ok(client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&RELAY_LOCK])?
        .get(0))
}

/// Subscribes this session to outbox notifications.
pub fn listen(client: &mut impl GenericClient) -> Result<()> {
    client.batch_execute(&format!("LISTEN {OUTBOX_CHANNEL}"))?;
    Ok(())
}

/// The oldest pending rows, in write order (served by `ix_outbox_pending`).
pub fn pending(client: &mut impl GenericClient, limit: u32) -> Result<Vec<OutboxRow>> {
    let rows = client.query(
        "SELECT id, aggregateid, topic, payload::text, headers
           FROM crm.outbox
          WHERE published_at IS NULL AND failed_at IS NULL
          ORDER BY seq
          LIMIT $1",
        &[&i64::from(limit)],
    )?;
    Ok(rows
        .iter()
        .map(|r| OutboxRow {
            id: r.get(0),
            key: r.get(1),
            topic: r.get(2),
            payload: r.get(3),
            headers: r.get(4),
        })
        .collect())
}

/// Marks acknowledged rows published, in one statement.
pub fn mark_published(client: &mut impl GenericClient, ids: &[Uuid]) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(client.execute(
        "UPDATE crm.outbox
            SET published_at = now(), attempts = attempts + 1, last_error = NULL
          WHERE id = ANY($1) AND published_at IS NULL",
        &[&ids],
    )?)
}

/// Records failed attempts, in one statement. `permanent` rows get `failed_at` and
/// stop being pending; the others stay pending for the next run.
pub fn mark_attempts_failed(
    client: &mut impl GenericClient,
    failures: &[(Uuid, String, bool)],
) -> Result<u64> {
    if failures.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.0).collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.1.as_str()).collect();
    let permanent: Vec<bool> = failures.iter().map(|f| f.2).collect();
    Ok(client.execute(
        "UPDATE crm.outbox o
            SET attempts = o.attempts + 1, last_error = f.error,
                failed_at = CASE WHEN f.permanent THEN now() ELSE o.failed_at END
           FROM unnest($1::uuid[], $2::text[], $3::bool[]) AS f(id, error, permanent)
          WHERE o.id = f.id AND o.published_at IS NULL",
        &[&ids, &errors, &permanent],
    )?)
}

/// Deletes up to `limit` rows published more than `older_than` ago (served by
/// `ix_outbox_published_at`); returns how many.
pub fn purge_published(
    client: &mut impl GenericClient,
    older_than: Duration,
    limit: u32,
) -> Result<u64> {
    let seconds = older_than.as_secs_f64();
    Ok(client.execute(
        "DELETE FROM crm.outbox
          WHERE id IN (SELECT id FROM crm.outbox
                        WHERE published_at < now() - $1 * interval '1 second'
                        ORDER BY published_at
                        LIMIT $2)",
        &[&seconds, &i64::from(limit)],
    )?)
}
