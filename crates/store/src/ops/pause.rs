//! The pause switches (`sql/009_operations.sql`): which halves of the job are paused,
//! by whom and why; turning one on or off.

use crate::Conn;
use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;

/// A pause switch that is on.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseRow {
    pub command: String,
    pub paused_at: DateTime<Utc>,
    pub paused_by: String,
    pub reason: String,
}

/// A pause switch as read: a `paused_at` someone set by hand to `±infinity` or a year
/// past 9999 reads as the nearest moment of years 1–9999, so no command fails on it.
const PAUSE_COLUMNS: &str = "command, \
     least(greatest(paused_at, '0001-01-01 00:00:00Z'), '9999-12-31 23:59:59Z') AS paused_at, \
     paused_by, reason";

fn pause_row(r: &postgres::Row) -> PauseRow {
    PauseRow {
        command: r.get("command"),
        paused_at: r.get("paused_at"),
        paused_by: r.get("paused_by"),
        reason: r.get("reason"),
    }
}

/// Whether this session can read the pause switches: the table exists (migration 9)
/// and the role may read it. A job on an older schema, or under a role without the
/// grant, is simply not paused; the schema check names what is missing.
pub fn pauses_readable(client: &mut impl Conn) -> Result<bool> {
    let client = client.pg();
    let row = client
        .query_one(
            "SELECT to_regclass('crm.booking_expiration_pause') IS NOT NULL
                    AND has_table_privilege('crm.booking_expiration_pause', 'SELECT')",
            &[],
        )
        .context("cannot look up the pause switches")?;
    Ok(row.get(0))
}

/// Every pause switch that is on, by command; empty when they cannot be read.
pub fn pauses(client: &mut impl Conn) -> Result<Vec<PauseRow>> {
    let client = client.pg();
    if !pauses_readable(client)? {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            &format!("SELECT {PAUSE_COLUMNS} FROM crm.booking_expiration_pause ORDER BY command"),
            &[],
        )
        .context("cannot read the pause switches")?;
    Ok(rows.iter().map(pause_row).collect())
}

/// Turns the switch of `command` on, unless it is on already; returns the switch as it
/// is now and whether this call turned it on.
pub fn pause(
    client: &mut impl Conn,
    command: &str,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(PauseRow, bool)> {
    let client = client.pg();
    let inserted = client
        .query_opt(
            "INSERT INTO crm.booking_expiration_pause (command, paused_at, paused_by, reason)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (command) DO NOTHING
             RETURNING command, paused_at, paused_by, reason",
            &[&command, &now, &by, &reason],
        )
        .context("cannot switch the pause on")?;
    if let Some(row) = inserted {
        return Ok((pause_row(&row), true));
    }
    let row = client
        .query_one(
            &format!("SELECT {PAUSE_COLUMNS} FROM crm.booking_expiration_pause WHERE command = $1"),
            &[&command],
        )
        .context("cannot read the pause switch")?;
    Ok((pause_row(&row), false))
}

/// Turns the switch of `command` off; returns the pause it ended, if it was on.
pub fn resume(client: &mut impl Conn, command: &str) -> Result<Option<PauseRow>> {
    let client = client.pg();
    let row = client
        .query_opt(
            &format!(
                "DELETE FROM crm.booking_expiration_pause WHERE command = $1 \
                 RETURNING {PAUSE_COLUMNS}"
            ),
            &[&command],
        )
        .context("cannot switch the pause off")?;
    Ok(row.as_ref().map(pause_row))
}
