//! Pause switches kept in the database (`crm.booking_expiration_pause`): `pause` and
//! `resume` switch them, `run-once` and `relay-outbox` honour them first thing.

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use postgres::GenericClient;
use serde::Serialize;

use crate::cli::{Pausable, PauseArgs};
use crate::clock::{Clock, SystemClock};
use crate::config::DbConfig;
use crate::domain::rfc3339;
use crate::exit::{ClassifyExt, Failure};
use crate::report::format::{duration, seconds};
use crate::store::ops::{self, Operation, PauseRow};
use crate::store::{self, Need};

/// A pause in force, as runs, `backlog` and `explain` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Paused {
    pub command: String,
    pub since: String,
    pub by: String,
    pub reason: String,
    pub paused_for_seconds: f64,
}

impl Paused {
    pub fn of(row: &PauseRow, now: DateTime<Utc>) -> Self {
        Paused {
            command: row.command.clone(),
            since: rfc3339(row.paused_at),
            by: row.paused_by.clone(),
            reason: row.reason.clone(),
            paused_for_seconds: seconds(now - row.paused_at).max(0.0),
        }
    }
}

/// The pause of `command`, if it is switched off, logged as the run's one line about
/// it: the caller then does nothing and exits 0. A schema without the switches (not yet
/// migrated) pauses nothing; the schema check names what is missing.
pub fn honour(
    client: &mut impl GenericClient,
    command: Pausable,
    now: DateTime<Utc>,
) -> Result<Option<Paused>> {
    let pauses =
        ops::pauses(client).classify(Failure::Temporary, "cannot read the pause switches")?;
    let Some(row) = pauses.iter().find(|p| p.command == command.as_str()) else {
        return Ok(None);
    };
    let paused = Paused::of(row, now);
    info!(command = command.as_str(), paused_since = paused.since.as_str(),
          paused_by = paused.by.as_str(), reason = paused.reason.as_str(),
          paused_for_s = paused.paused_for_seconds;
          "{} is paused since {} ({} ago) by {}: {}; doing nothing until `booking-expire resume {}`",
          command.as_str(), paused.since, duration(now - row.paused_at), paused.by, paused.reason,
          command.as_str());
    Ok(Some(paused))
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Outcome<'a> {
    command: &'a str,
    paused: bool,
    /// False when the switch already was as asked: nothing was written.
    changed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pause: Option<Paused>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operation_id: Option<i64>,
}

/// `pause COMMAND --reason TEXT`.
pub fn pause(args: &PauseArgs) -> Result<()> {
    switch(args, true)
}

/// `resume COMMAND --reason TEXT`.
pub fn resume(args: &PauseArgs) -> Result<()> {
    switch(args, false)
}

fn switch(args: &PauseArgs, on: bool) -> Result<()> {
    let cfg = DbConfig::from_args(&args.database)?;
    let mut db = store::connect(&cfg)?;
    db.require_writable(&cfg, if on { "pause" } else { "resume" })?;
    store::check_schema(&mut db.client, Need::Operate)?;
    let command = args.command.as_str();
    let now = SystemClock.now();
    let mut tx = db
        .client
        .transaction()
        .classify(Failure::Temporary, "cannot begin a transaction")?;
    let by = super::actor(&mut tx, &args.actor)?;
    let (pause, changed) = if on {
        let (row, inserted) = ops::pause(&mut tx, command, &by, &args.actor.reason, now)?;
        (Some(Paused::of(&row, now)), inserted)
    } else {
        let ended = ops::resume(&mut tx, command)?;
        let changed = ended.is_some();
        (ended.map(|row| Paused::of(&row, now)), changed)
    };
    let operation_id = if changed {
        Some(ops::record(
            &mut tx,
            &Operation {
                at: now,
                actor: &by,
                action: if on { "pause" } else { "resume" },
                target: command,
                reason: &args.actor.reason,
                outbox_ids: &[],
            },
        )?)
    } else {
        None
    };
    tx.commit()
        .classify(Failure::Temporary, "cannot commit the switch")?;
    if changed {
        info!(command, by = by.as_str(), reason = args.actor.reason.as_str();
              "{}", if on { "paused" } else { "resumed" });
    }
    if args.json {
        let outcome = Outcome {
            command,
            paused: on,
            changed,
            pause,
            operation_id,
        };
        return crate::report::format::print(&format!("{}\n", serde_json::to_string(&outcome)?));
    }
    let line = match (on, changed, &pause) {
        (true, true, _) => format!(
            "{command} paused by {by}: {}; its runs exit 0 at once until `booking-expire resume {command}`",
            args.actor.reason
        ),
        (true, false, Some(p)) => format!(
            "{command} was already paused since {} by {}: {}; nothing changed",
            p.since, p.by, p.reason
        ),
        (false, true, Some(p)) => format!(
            "{command} resumed by {by} after {} (paused since {} by {}: {}); its next run works as usual",
            duration(now - DateTime::parse_from_rfc3339(&p.since)?.with_timezone(&Utc)),
            p.since,
            p.by,
            p.reason
        ),
        _ => format!("{command} was not paused; nothing changed"),
    };
    crate::report::format::print(&format!("{line}\n"))
}
