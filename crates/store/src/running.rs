//! Which runs are working right now, and whether their pause switch is on, as cheap as
//! a run can ask between its batches.
//!
//! A working run (a cycle past its pause check, the relay holding its lock) holds a
//! session-level shared advisory lock with two keys: the first names its kind, the
//! second is the latest moment the run can end (Unix seconds, as an unsigned 32-bit
//! number: good until 2106). `pg_locks` shows both to every role, so `pause --wait`
//! sees who works and until when without any privilege, and the lock ends with the
//! session, however the run ends.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::{GenericClient, SimpleQueryMessage, SimpleQueryRow};

use super::ops::PauseRow;
use crate::{Conn, Session};

use crate::domain::Worker;

/// The first key of a worker's working lock (ASCII "bkx1", "bkx2").
fn working_key(worker: Worker) -> i32 {
    match worker {
        Worker::Cycle => 0x626b_7831,
        Worker::Relay => 0x626b_7832,
    }
}

/// Holds the working lock of `worker` until this session ends; `ends` is the latest
/// moment the run can end. Shared: runs of the same kind never wait for each other.
/// One round trip (the simple query protocol: the keys are numbers of ours).
pub fn announce_working(client: &mut Session, worker: Worker, ends: DateTime<Utc>) -> Result<()> {
    let client = client.pg();
    // Rounded up to the second: the lock never says a run ends before it can.
    let up = i64::from(ends.timestamp_subsec_nanos() > 0);
    let ends = u32::try_from((ends.timestamp() + up).max(0)).unwrap_or(u32::MAX);
    client
        .simple_query(&format!(
            "SELECT pg_advisory_lock_shared({}, {})",
            working_key(worker),
            ends as i32
        ))
        .context("cannot take the working lock")?;
    Ok(())
}

/// A run working now: its session and the latest moment it can end.
#[derive(Debug, Clone, PartialEq)]
pub struct Working {
    pub pid: i32,
    pub ends: DateTime<Utc>,
}

/// The runs of `worker` working now on this database, latest end first.
pub fn working(client: &mut impl Conn, worker: Worker) -> Result<Vec<Working>> {
    let client = client.pg();
    let rows = client
        .query(
            "SELECT l.pid, l.objid::int8 AS ends FROM pg_catalog.pg_locks l
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                AND l.classid::int8 = $1
                AND l.database = (SELECT oid FROM pg_catalog.pg_database
                                   WHERE datname = current_database())
              ORDER BY ends DESC, l.pid",
            &[&i64::from(working_key(worker))],
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

/// The statement reading the pause switch of `worker` as a run reads it: `paused_at`
/// clamped to years 1–9999 (a moment set by hand to `±infinity` reads as the nearest),
/// in microseconds; no row when the switch is off. For the simple query protocol, so
/// that it joins a round trip the run makes anyway; takes no lock but the table's
/// share. The key is one of [`Worker::pause_key`]'s, never operator input.
pub(crate) fn pause_statement(worker: Worker) -> String {
    let command = worker.pause_key();
    format!(
        "SELECT command, paused_by, reason,
                (extract(epoch FROM least(greatest(paused_at, '0001-01-01 00:00:00Z'),
                                          '9999-12-31 23:59:59Z')) * 1000000)::int8::text
                AS paused_at_us
           FROM crm.booking_expiration_pause WHERE command = '{command}'"
    )
}

/// The pause switch in the rows [`pause_statement`] returned, if it is on.
pub(crate) fn pause_row(rows: &[SimpleQueryRow]) -> Option<PauseRow> {
    let row = rows.first()?;
    let micros: i64 = row.get("paused_at_us")?.parse().ok()?;
    Some(PauseRow {
        command: row.get("command")?.to_owned(),
        paused_at: DateTime::from_timestamp_micros(micros)?,
        paused_by: row.get("paused_by").unwrap_or_default().to_owned(),
        reason: row.get("reason").unwrap_or_default().to_owned(),
    })
}

/// The pause switch of `worker`, if it is on: one round trip while it is off (the
/// cheapest read there is: `SELECT 1`), a second for the switch's row when it is on.
/// Runs in whatever transaction the session has open.
pub fn pause_switch(client: &mut Session, worker: Worker) -> Result<Option<PauseRow>> {
    let client = client.pg();
    let command = worker.pause_key();
    let on = client
        .simple_query(&format!(
            "SELECT 1 FROM crm.booking_expiration_pause WHERE command = '{command}'"
        ))
        .context("cannot read the pause switch")?
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(_)));
    if !on {
        return Ok(None);
    }
    let rows: Vec<SimpleQueryRow> = client
        .simple_query(&pause_statement(worker))
        .context("cannot read the pause switch")?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect();
    Ok(pause_row(&rows))
}

/// Wakes a following relay waiting for outbox rows (it listens on the outbox channel),
/// so it reads its pause switch now; delivered when the caller's transaction commits.
pub fn wake_relay(client: &mut impl Conn) -> Result<()> {
    let client = client.pg();
    client
        .execute(
            "SELECT pg_notify($1, '')",
            &[&super::outbox::OUTBOX_CHANNEL],
        )
        .context("cannot notify the following relay")?;
    Ok(())
}
