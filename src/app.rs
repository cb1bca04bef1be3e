//! Runs a resolved command: the work, then (for `run-once` and `relay-outbox`) the
//! metrics push, success or failure, never changing the outcome, then the result as one
//! JSON line on stdout. The reports print their own output as they read it.

use std::io::Write;
use std::time::Duration;

use anyhow::Result;
use log::warn;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Ambient, Clock, Monotonic, SystemClock, SystemMonotonic};
use crate::config::{Config, DbConfig, MetricsConfig, Refused};
use crate::cycle::{self, CycleResult};
use crate::domain::OutboxTypes;
use crate::obs::figures::{CycleFigures, Publications, RelayFigures, RunEnd};
use crate::obs::gauges;
use crate::obs::pushgateway::PushStep;
use crate::relay::{self, RelayResult};
use crate::shutdown::Shutdown;
use crate::store::{self, Backlog, BacklogScope};
use crate::{exit, report};

/// Limits for the short read of the backlog gauges after a run.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The gauges of a run: of its result and of how it ended.
type Gauges<R> = fn(&R, &RunEnd) -> String;

/// The gauges of a `run-once` run, from its figures.
fn cycle_gauges(result: &CycleResult, run: &RunEnd) -> String {
    let figures = CycleFigures {
        reserve_expired: result.reserve_expired_count,
        booking_expired: result.booking_expired_count,
        skipped_locked: result.skipped_locked_count,
        poison: result.poison_count,
        lateness: result.lateness.clone(),
        paused_seconds: result.paused.as_ref().map_or(0.0, |p| p.paused_for_seconds),
    };
    gauges::cycle_metrics(&figures, run)
}

/// The gauges of a `relay-outbox` run, from its figures.
fn relay_gauges(result: &RelayResult, run: &RunEnd) -> String {
    let figures = RelayFigures {
        published: result.published,
        failed: result.failed,
        purged: result.purged,
        late: result.late,
        late_below_floor: result.late_below_floor,
        skipped: result.skipped,
        publications: result
            .publications
            .iter()
            .map(|((topic, phase), rows)| Publications {
                topic: topic.clone(),
                phase: phase.clone(),
                rows: *rows,
            })
            .collect(),
        ack_ages: result.ack_ages.clone(),
        paused_seconds: result.paused.as_ref().map_or(0.0, |p| p.paused_for_seconds),
    };
    gauges::relay_metrics(&figures, run)
}

/// Runs the command of `config` as run `run_id`, on the system's clocks; signals reach
/// it through `shutdown`, which the watcher is installed on here.
pub(crate) fn run(config: Config, run_id: Uuid, shutdown: &Shutdown) -> Result<()> {
    shutdown.install(exit::signalled)?;
    // Which release this is, for the check that the schema is not too new for it.
    store::migrate::compat::set_release(env!("RELEASE_BUILT_IN"));
    let clock = SystemClock;
    let ambient = Ambient::system(shutdown);
    // run-once reads no outbox figure (its role may not read the outbox).
    let own = OutboxTypes::default();
    match config {
        Config::RunOnce(cfg, metrics) => pushed(
            &metrics,
            Some((&cfg.db, &own, shutdown)),
            PushStep::RunOnce,
            CycleResult {
                run_id,
                ..Default::default()
            },
            |result| cycle::run_once(&cfg, ambient, result),
            cycle_gauges,
        ),
        Config::RelayOutbox(cfg, metrics) => pushed(
            &metrics,
            Some((&cfg.db, &cfg.outbox_types, shutdown)),
            PushStep::RelayOutbox,
            RelayResult {
                run_id,
                ..Default::default()
            },
            |result| relay::relay_outbox(&cfg, ambient, result),
            relay_gauges,
        ),
        Config::DryRun(cfg) => report::dry_run(&cfg, run_id, &clock, shutdown),
        Config::Backlog(cfg) => report::backlog(&cfg, &clock, shutdown),
        Config::Explain(cfg) => crate::ops::explain::explain(&cfg, shutdown),
        Config::Switch(cfg) => crate::ops::pause::switch(&cfg),
        Config::Requeue(cfg) => crate::ops::republish::republish(&cfg),
        Config::Audit(cfg) => crate::ops::audit::audit(&cfg, shutdown),
        Config::Migrate(cfg) => crate::ops::migrate::migrate(&cfg, shutdown),
        Config::Completions(script) => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&script)?;
            stdout.flush()?;
            Ok(())
        }
    }
}

/// A configuration that was refused: a command that pushes metrics still pushes its
/// failure (once its Pushgateway URL was valid); the refusal is the outcome.
pub(crate) fn refused(refused: Refused, run_id: Uuid) -> anyhow::Error {
    let failed: Result<()> = Err(refused.error);
    match refused.push.map(|push| *push) {
        Some((gateway, PushStep::RunOnce)) => {
            let metrics = MetricsConfig {
                pushgateway: Some(gateway),
            };
            let result = CycleResult {
                run_id,
                ..Default::default()
            };
            pushed(
                &metrics,
                None,
                PushStep::RunOnce,
                result,
                |_| failed,
                cycle_gauges,
            )
        }
        Some((gateway, PushStep::RelayOutbox)) => {
            let metrics = MetricsConfig {
                pushgateway: Some(gateway),
            };
            let result = RelayResult {
                run_id,
                ..Default::default()
            };
            pushed(
                &metrics,
                None,
                PushStep::RelayOutbox,
                result,
                |_| failed,
                relay_gauges,
            )
        }
        None => failed,
    }
    .expect_err("a refused configuration is an error")
}

/// A command's result line, and whether it is printed also when the run fails.
trait Reported: Serialize {
    /// Records why the run stopped; true when the result is to be printed anyway.
    fn stopped_early(&mut self, _error: &anyhow::Error) -> bool {
        false
    }
}

/// A cycle that fails prints nothing: its batches either committed (and were logged)
/// or rolled back.
impl Reported for CycleResult {}

/// A relay that took the lock reports what it published and marked, and why it
/// stopped, whatever stopped it.
impl Reported for RelayResult {
    fn stopped_early(&mut self, error: &anyhow::Error) -> bool {
        if self.relayed {
            self.stopped_early = Some(format!("{error:#}"));
        }
        self.relayed
    }
}

/// Runs `work`, pushes the run's gauges (with the backlog read from `db`, when the
/// database configuration was valid; the outbox's figures of the run's outbox types),
/// then prints the result as one JSON line.
fn pushed<R: Reported>(
    metrics: &MetricsConfig,
    db: Option<(&DbConfig, &OutboxTypes, &Shutdown)>,
    step: PushStep,
    mut result: R,
    work: impl FnOnce(&mut R) -> Result<()>,
    gauges: Gauges<R>,
) -> Result<()> {
    let started = SystemMonotonic.now();
    let outcome = work(&mut result);
    if let Some(gateway) = &metrics.pushgateway {
        let duration = started.elapsed();
        let backlog = db
            .filter(|(_, _, shutdown)| shutdown.requested().is_none())
            .and_then(|(db, types, _)| read_after_run(db, types, step));
        let run = RunEnd {
            failed: outcome.is_err(),
            duration,
            backlog: backlog.as_ref().map(report::backlog_figures::backlog),
            now: SystemClock.now(),
        };
        let body = gauges(&result, &run);
        gateway.push_logged(step, &body);
    }
    if let Err(e) = &outcome
        && result.stopped_early(e)
    {
        // stdout may be gone (the pod ends): the exit code and stderr still tell.
        let _ = write!(std::io::stdout(), "{}", crate::render::json_line(&result)?);
    }
    outcome?;
    // A reader gone away (`| head`) ends the command normally, as the reports do.
    crate::render::print_json(&result)?;
    Ok(())
}

/// Reads the step's backlog figures in one short read-only transaction. Skipped after
/// a signal: the pod is going away, and its grace period is for the push.
fn read_after_run(db: &DbConfig, types: &OutboxTypes, step: PushStep) -> Option<Backlog> {
    let read = || -> Result<Backlog> {
        let mut quick = db.clone();
        let connect = quick
            .conninfo
            .connect_timeout()
            .map_or(READ_TIMEOUT, |t| t.min(READ_TIMEOUT));
        quick.conninfo.set_connect_timeout(connect);
        quick.statement_timeout = quick.statement_timeout.min(READ_TIMEOUT);
        quick.lock_timeout = quick.lock_timeout.min(READ_TIMEOUT / 2);
        let mut session = store::connect(&quick)?;
        let figures = match step {
            PushStep::RunOnce => BacklogScope::Bookings,
            PushStep::RelayOutbox => BacklogScope::Outbox,
        };
        // The cycle's clock, as `backlog` reads it.
        Ok(store::read_backlog(
            &mut session.client,
            SystemClock.now(),
            figures,
            types,
        )?)
    };
    match read() {
        Ok(backlog) => Some(backlog),
        Err(e) => {
            warn!(Error:% = format!("{e:#}");
                  "cannot read the backlog for the metrics push; pushing the run's own gauges only");
            None
        }
    }
}
