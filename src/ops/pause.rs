//! Pause switches kept in the database (`crm.booking_expiration_pause`): `pause` and
//! `resume` switch them; `run-once` and `relay-outbox` honour them in their preflight
//! and, while they work, again at every batch boundary (`preflight::PauseWatch`), so a
//! pause stops the runs working now too. `pause` then waits, bounded, until no run
//! works any more.

use std::time::Duration;

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use serde::Serialize;

use crate::clock::{Clock, Monotonic, SystemClock, SystemMonotonic};
use crate::config::{Pausable, SwitchConfig};
use crate::domain::rfc3339;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::preflight::Paused;
use crate::render::duration;
use crate::store::duration::show_duration;
use crate::store::ops::{self, Operation};
use crate::store::running::{self, Working};
use crate::store::{self, SchemaNeed};

/// How often `pause --wait` looks whether the working runs have stopped.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// The runs of a command working when the pause took effect, and after the wait.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct WorkOutcome {
    /// Runs working right after the switch committed.
    at_pause: usize,
    /// Seconds `pause` waited for them.
    waited_seconds: f64,
    /// Runs still working when the wait ended (empty: nothing of the command works).
    still_working: Vec<StillWorking>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct StillWorking {
    pid: i32,
    /// The latest moment it ends: its --deadline (run-once), its run plus the delivery
    /// reports of what it sent (relay-outbox).
    ends_by: String,
}

/// Waits, at most `wait`, until no run of `command` works on this database.
fn wait_for_work(client: &mut Session, command: Pausable, wait: Duration) -> Result<WorkOutcome> {
    let started = SystemMonotonic.now();
    let mut working = working_now(client, command)?;
    let at_pause = working.len();
    while !working.is_empty() && started.elapsed() < wait {
        #[allow(
            clippy::disallowed_methods,
            reason = "polls the working runs until they stop, every WAIT_POLL, bounded by --wait"
        )]
        std::thread::sleep(WAIT_POLL.min(wait.saturating_sub(started.elapsed())));
        working = working_now(client, command)?;
    }
    Ok(WorkOutcome {
        at_pause,
        waited_seconds: started.elapsed().as_secs_f64(),
        still_working: working
            .iter()
            .map(|w| StillWorking {
                pid: w.pid,
                ends_by: rfc3339(w.ends),
            })
            .collect(),
    })
}

fn working_now(client: &mut Session, command: Pausable) -> Result<Vec<Working>> {
    running::working(client, command.worker()).classify(
        Failure::Temporary,
        "the switch is on, but cannot read which runs are still working",
    )
}

fn runs(n: usize) -> String {
    if n == 1 {
        "1 run".to_owned()
    } else {
        format!("{n} runs")
    }
}

impl WorkOutcome {
    /// What the work of the command does now, in a few words.
    fn sentence(&self, command: Pausable, wait: Duration, now: DateTime<Utc>) -> String {
        if self.still_working.is_empty() {
            return match self.at_pause {
                0 => "no run of it was working".to_owned(),
                n => format!(
                    "the {} working stopped within {:.1}s; no run of it works now",
                    runs(n),
                    self.waited_seconds
                ),
            };
        }
        let pids: Vec<String> = self
            .still_working
            .iter()
            .map(|w| w.pid.to_string())
            .collect();
        let latest = self
            .still_working
            .first()
            .and_then(|w| DateTime::parse_from_rfc3339(&w.ends_by).ok())
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or(now);
        let how = match command {
            Pausable::RunOnce => "it stops after its batch in flight",
            Pausable::RelayOutbox => {
                "it sends nothing more and waits for the delivery reports of what it sent"
            }
        };
        format!(
            "{} still finishing after waiting {} (session PID {}): {how}, at the latest by {} (in {})",
            runs(self.still_working.len()),
            show_duration(wait),
            pids.join(", "),
            rfc3339(latest),
            duration((latest - now).max(chrono::TimeDelta::zero())),
        )
    }
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
    /// `pause` only: the runs working when it took effect, and after the wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    working: Option<WorkOutcome>,
}

/// `pause COMMAND --reason TEXT [--wait D]` (`cfg.wait` set) and `resume COMMAND
/// --reason TEXT`: switches the pause of `cfg.command` on (with the wait for working
/// runs) or off.
pub(crate) fn switch(cfg: &SwitchConfig) -> Result<()> {
    let wait = cfg.wait;
    let on = wait.is_some();
    let mut db = store::connect(&cfg.db)?;
    db.require_writable(&cfg.db, if on { "pause" } else { "resume" })?;
    store::check_schema(&mut db.client, SchemaNeed::Operate)?;
    let command = cfg.command.as_str();
    let now = SystemClock.now();
    let mut tx = db
        .client
        .transaction()
        .classify(Failure::Temporary, "cannot begin a transaction")?;
    let by = super::actor(&mut tx, &cfg.actor)?;
    let (pause, changed) = if on {
        let (row, inserted) = ops::pause(&mut tx, command, &by, &cfg.actor.reason, now)?;
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
                reason: &cfg.actor.reason,
                outbox_ids: &[],
            },
        )?)
    } else {
        None
    };
    if on && cfg.command == Pausable::RelayOutbox {
        // Wakes a following relay that waits for outbox rows, so it sees the switch now.
        running::wake_relay(&mut tx).classify(Failure::Temporary, "cannot wake the relay")?;
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot commit the switch")?;
    let working = match wait {
        Some(wait) => Some(wait_for_work(&mut db.client, cfg.command, wait)?),
        None => None,
    };
    if changed {
        info!(Command = command, Actor = by.as_str(), Reason = cfg.actor.reason.as_str();
              "{}", if on { "paused" } else { "resumed" });
    }
    let end = SystemClock.now();
    let work = working
        .as_ref()
        .map(|w| w.sentence(cfg.command, wait.unwrap_or_default(), end));
    let still = working.as_ref().map_or(0, |w| w.still_working.len());
    if cfg.json {
        let outcome = Outcome {
            command,
            paused: on,
            changed,
            pause,
            operation_id,
            working,
        };
        crate::render::print_json(&outcome)?;
    } else {
        let work = work.as_deref().unwrap_or_default();
        // The actor and the reason on one line: a line break of theirs is escaped too.
        let one = |text: &str| crate::render::escape(text).into_owned();
        let by = one(&by);
        let line = match (on, changed, &pause) {
            (true, true, _) => format!(
                "{command} paused by {by}: {}; {work}; its runs exit 0 at once until `booking-expire resume {command}`",
                one(&cfg.actor.reason)
            ),
            (true, false, Some(p)) => format!(
                "{command} was already paused since {} by {}: {}; nothing changed; {work}",
                p.since,
                one(&p.by),
                one(&p.reason)
            ),
            (false, true, Some(p)) => format!(
                "{command} resumed by {by} after {} (paused since {} by {}: {}); its next run works as usual",
                duration(now - DateTime::parse_from_rfc3339(&p.since)?.with_timezone(&Utc)),
                p.since,
                one(&p.by),
                one(&p.reason)
            ),
            _ => format!("{command} was not paused; nothing changed"),
        };
        crate::render::print(&format!("{line}\n"))?;
    }
    if still > 0 && wait.is_some_and(|w| !w.is_zero()) {
        return Err(fail(
            Failure::Threshold,
            format!(
                "{command} is paused, but {} of it {} still working after --wait {}; run `booking-expire pause {command} --reason …` again to wait more",
                runs(still),
                if still == 1 { "is" } else { "are" },
                show_duration(wait.unwrap_or_default()),
            ),
        ));
    }
    Ok(())
}
