//! Honouring a pause switch (`crm.booking_expiration_pause`, switched by `pause` and
//! `resume`): first thing in the preflight and, while the run works, again at every
//! batch boundary ([`PauseWatch`]), so a pause stops the runs working now too; and the
//! working lock `pause --wait` waits on.

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use serde::Serialize;

use super::writer::Writer;
use crate::domain::Worker;
use crate::domain::rfc3339;
use crate::exit::{ClassifyExt, Failure};
use crate::render::duration;
use crate::store::ops::PauseRow;
use crate::store::running;

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
            paused_for_seconds: crate::clock::seconds(now - row.paused_at).max(0.0),
        }
    }
}

/// The pause of `writer`, switched on as `row` says, logged as the run's one line about
/// it: the caller then does nothing and exits 0.
pub(super) fn honour(writer: Writer, row: &PauseRow, now: DateTime<Utc>) -> Paused {
    let paused = Paused::of(row, now);
    let command = writer.as_str();
    info!(Command = command, PausedSince = paused.since.as_str(),
          PausedBy = paused.by.as_str(), Reason = paused.reason.as_str(),
          PausedForSeconds = paused.paused_for_seconds;
          "{} is paused since {} ({} ago) by {}: {}; doing nothing until `booking-expire resume {}`",
          command, paused.since, duration(now - row.paused_at), paused.by, paused.reason,
          command);
    paused
}

/// The pause switch of a command as its working run watches it at every batch
/// boundary, on the session the run already holds: the cycle reads it in the round trip
/// that ends each batch's transaction ([`PauseWatch::switch`]), the relay after each
/// fetch ([`PauseWatch::check`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PauseWatch {
    writer: Writer,
    /// False on a schema without the switches, or for a role that may not read them:
    /// nothing pauses the run then (as the preflight).
    readable: bool,
}

impl PauseWatch {
    pub(crate) fn new(writer: Writer, readable: bool) -> Self {
        PauseWatch { writer, readable }
    }

    /// The switch to read with a statement the run makes anyway, or `None` when it
    /// cannot be read.
    pub(crate) fn switch(&self) -> Option<Worker> {
        self.readable.then(|| self.writer.worker())
    }

    /// The pause, if the switch is on now: one round trip.
    pub(crate) fn check(&self, client: &mut Session, now: DateTime<Utc>) -> Result<Option<Paused>> {
        let Some(worker) = self.switch() else {
            return Ok(None);
        };
        let row = running::pause_switch(client, worker)
            .classify(Failure::Temporary, "cannot read the pause switch")?;
        Ok(row.map(|row| Paused::of(&row, now)))
    }
}

/// Logs the one line of a run that the pause stopped while it worked; `done` says what
/// it did up to the boundary and what still finishes.
pub(crate) fn stopped_mid_run(writer: Writer, paused: &Paused, done: &str) {
    let command = writer.as_str();
    info!(Command = command, PausedSince = paused.since.as_str(),
          PausedBy = paused.by.as_str(), Reason = paused.reason.as_str(),
          PausedForSeconds = paused.paused_for_seconds;
          "{} paused while working, since {} by {}: {}; stopped at the batch boundary: {}; \
           doing nothing until `booking-expire resume {}`",
          command, paused.since, paused.by, paused.reason, done, command);
}

/// Marks this session as a working run of `writer` until it ends, at the latest at
/// `ends` (see [`running`]): what `pause --wait` waits for.
pub(crate) fn announce_working(
    client: &mut Session,
    writer: Writer,
    ends: DateTime<Utc>,
) -> Result<()> {
    running::announce_working(client, writer.worker(), ends)
        .classify(Failure::Temporary, "cannot mark this run as working")
}
