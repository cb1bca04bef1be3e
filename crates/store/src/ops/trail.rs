//! The operations trail (`crm.booking_expiration_operations`): who did what to which
//! rows, and the database user who vouches for the actor.

use crate::Conn;
use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

/// One entry of the operations trail.
#[derive(Debug, Clone)]
pub struct Operation<'a> {
    pub at: DateTime<Utc>,
    pub actor: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub reason: &'a str,
    pub outbox_ids: &'a [Uuid],
}

/// Appends to the operations trail; returns the entry's id.
pub fn record(client: &mut impl Conn, op: &Operation<'_>) -> Result<i64> {
    let client = client.pg();
    let rows = i32::try_from(op.outbox_ids.len()).unwrap_or(i32::MAX);
    let row = client
        .query_one(
            "INSERT INTO crm.booking_expiration_operations
                 (at, actor, action, target, reason, rows, outbox_ids)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &op.at,
                &op.actor,
                &op.action,
                &op.target,
                &op.reason,
                &rows,
                &op.outbox_ids,
            ],
        )
        .context("cannot append to crm.booking_expiration_operations")?;
    Ok(row.get(0))
}

/// The database user of this session, which the database vouches for: the trail names
/// it next to the actor an operator gives.
pub fn session_user(client: &mut impl Conn) -> Result<String> {
    let client = client.pg();
    Ok(client.query_one("SELECT session_user::text", &[])?.get(0))
}
