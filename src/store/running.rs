//! Which runs are working right now, and whether their pause switch is on, as cheap as
//! a run can ask between its batches.
//!
//! A working run (`run-once` past its pause check, the relay holding its lock) holds a
//! session-level shared advisory lock with two keys: the first names the command, the
//! second is the latest moment the run can end (Unix seconds, as an unsigned 32-bit
//! number: good until 2106). `pg_locks` shows both to every role, so `pause --wait`
//! sees who works and until when without any privilege, and the lock ends with the
//! session, however the run ends.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient, SimpleQueryMessage};

/// The first key of the working lock of `command` (ASCII "bkx1", "bkx2").
pub fn working_key(command: &str) -> i32 {
    match command {
        "run-once" => 0x626b_7831,
        _ => 0x626b_7832,
    }
}

/// Holds the working lock of `command` until this session ends; `ends` is the latest
/// moment the run can end. Shared: runs of the same command never wait for each other.
pub fn announce_working(
    client: &mut impl GenericClient,
    command: &str,
    ends: DateTime<Utc>,
) -> Result<()> {
    // Rounded up to the second: the lock never says a run ends before it can.
    let up = i64::from(ends.timestamp_subsec_nanos() > 0);
    let ends = u32::try_from((ends.timestamp() + up).max(0)).unwrap_or(u32::MAX);
    client
        .execute(
            "SELECT pg_advisory_lock_shared($1, $2)",
            &[&working_key(command), &(ends as i32)],
        )
        .context("cannot take the working lock")?;
    Ok(())
}

/// A run of a command working now: its session and the latest moment it can end.
#[derive(Debug, Clone, PartialEq)]
pub struct Working {
    pub pid: i32,
    pub ends: DateTime<Utc>,
}

/// The runs of `command` working now on this database, latest end first.
pub fn working(client: &mut impl GenericClient, command: &str) -> Result<Vec<Working>> {
    let rows = client
        .query(
            "SELECT l.pid, l.objid::int8 AS ends FROM pg_catalog.pg_locks l
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                AND l.classid::int8 = $1
                AND l.database = (SELECT oid FROM pg_catalog.pg_database
                                   WHERE datname = current_database())
              ORDER BY ends DESC, l.pid",
            &[&i64::from(working_key(command))],
        )
        .context("cannot read which runs are working (pg_locks)")?;
    Ok(rows
        .iter()
        .map(|r| Working {
            pid: r.get("pid"),
            ends: DateTime::from_timestamp(r.get("ends"), 0).unwrap_or_default(),
        })
        .collect())
}

/// Whether the pause switch of `command` is on: one round trip (the simple query
/// protocol, no statement to prepare), for a run to ask between its batches. Runs in
/// whatever transaction the session has open and takes no lock. `command` is one of
/// the fixed command names, never operator input.
pub fn switch_on(client: &mut Client, command: &'static str) -> Result<bool> {
    debug_assert!(command.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'));
    let messages = client
        .simple_query(&format!(
            "SELECT 1 FROM crm.booking_expiration_pause WHERE command = '{command}'"
        ))
        .context("cannot read the pause switch")?;
    Ok(messages
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(_))))
}

/// Wakes a following relay waiting for outbox rows (it listens on the outbox channel),
/// so it reads its pause switch now; delivered when the caller's transaction commits.
pub fn wake_relay(client: &mut impl GenericClient) -> Result<()> {
    client
        .execute(
            "SELECT pg_notify($1, '')",
            &[&super::outbox::OUTBOX_CHANNEL],
        )
        .context("cannot notify the following relay")?;
    Ok(())
}
