//! Runs a resolved command: the work, then (for `run-once` and `relay-outbox`) the
//! metrics push, success or failure, never changing the outcome, then the result as one
//! JSON line on stdout. The reports print their own output as they read it.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::warn;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Clock, Driver, SystemClock};
use crate::config::{Config, DbConfig, MetricsConfig, Refused};
use crate::cycle::{self, CycleResult};
use crate::obs::metrics;
use crate::obs::pushgateway::Step;
use crate::relay::{self, RelayResult};
use crate::shutdown::Shutdown;
use crate::store::{self, Backlog, Figures};
use crate::{exit, report};

/// Limits for the short read of the backlog gauges after a run.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The gauges of a run: its result, whether it failed, how long it took, the backlog
/// read after it, and when it ended.
type Gauges<R> = fn(&R, bool, Duration, Option<&Backlog>, DateTime<Utc>) -> String;

/// Runs the command of `config` as run `run_id`, on the system's clocks; signals reach
/// it through `shutdown`, which the watcher is installed on here.
pub fn run(config: Config, run_id: Uuid, shutdown: &Shutdown) -> Result<()> {
    shutdown.install(exit::signalled)?;
    let clock = SystemClock;
    let driver = Driver::system(shutdown);
    match config {
        Config::RunOnce(cfg, metrics) => pushed(
            &metrics,
            Some((&cfg.db, shutdown)),
            Step::RunOnce,
            CycleResult {
                run_id,
                ..Default::default()
            },
            |result| cycle::run_once(&cfg, driver, result),
            metrics::cycle_metrics,
        ),
        Config::RelayOutbox(cfg, metrics) => pushed(
            &metrics,
            Some((&cfg.db, shutdown)),
            Step::RelayOutbox,
            RelayResult {
                run_id,
                ..Default::default()
            },
            |result| relay::relay_outbox(&cfg, driver, result),
            metrics::relay_metrics,
        ),
        Config::DryRun(cfg) => report::dry_run(&cfg, run_id, &clock),
        Config::Backlog(cfg) => report::backlog(&cfg, &clock),
        Config::Operate(command) => crate::ops::run(&command),
        Config::Completions(shell) => crate::reference::print_completions(shell),
    }
}

/// A configuration that was refused: a command that pushes metrics still pushes its
/// failure (once its Pushgateway URL was valid); the refusal is the outcome.
pub fn refused(refused: Refused, run_id: Uuid) -> anyhow::Error {
    let failed: Result<()> = Err(refused.error);
    match refused.push.map(|push| *push) {
        Some((gateway, Step::RunOnce)) => {
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
                Step::RunOnce,
                result,
                |_| failed,
                metrics::cycle_metrics,
            )
        }
        Some((gateway, Step::RelayOutbox)) => {
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
                Step::RelayOutbox,
                result,
                |_| failed,
                metrics::relay_metrics,
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
/// database configuration was valid, unless a signal came), then prints the result as
/// one JSON line.
fn pushed<R: Reported>(
    metrics: &MetricsConfig,
    db: Option<(&DbConfig, &Shutdown)>,
    step: Step,
    mut result: R,
    work: impl FnOnce(&mut R) -> Result<()>,
    gauges: Gauges<R>,
) -> Result<()> {
    let started = Instant::now();
    let outcome = work(&mut result);
    if let Some(gateway) = &metrics.pushgateway {
        let duration = started.elapsed();
        let backlog = db
            .filter(|(_, shutdown)| shutdown.requested().is_none())
            .and_then(|(db, _)| read_after_run(db, step));
        let body = gauges(
            &result,
            outcome.is_err(),
            duration,
            backlog.as_ref(),
            SystemClock.now(),
        );
        gateway.push_logged(step, &body);
    }
    if let Err(e) = &outcome
        && result.stopped_early(e)
    {
        // stdout may be gone (the pod ends): the exit code and stderr still tell.
        let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string(&result)?);
    }
    outcome?;
    // A reader gone away (`| head`) ends the command normally, as the reports do.
    crate::report::format::print(&format!("{}\n", serde_json::to_string(&result)?))?;
    Ok(())
}

/// Reads the step's backlog figures in one short read-only transaction. Skipped after
/// a signal: the pod is going away, and its grace period is for the push.
fn read_after_run(db: &DbConfig, step: Step) -> Option<Backlog> {
    let read = || -> Result<Backlog> {
        let mut quick = db.clone();
        let connect = quick
            .pg
            .get_connect_timeout()
            .map_or(READ_TIMEOUT, |t| (*t).min(READ_TIMEOUT));
        quick.pg.connect_timeout(connect);
        quick.statement_timeout = quick.statement_timeout.min(READ_TIMEOUT);
        quick.lock_timeout = quick.lock_timeout.min(READ_TIMEOUT / 2);
        let mut session = store::connect(&quick)?;
        let figures = match step {
            Step::RunOnce => Figures::Bookings,
            Step::RelayOutbox => Figures::Outbox,
        };
        // The cycle's clock, as `backlog` reads it.
        store::read_backlog(&mut session.client, SystemClock.now(), figures)
    };
    match read() {
        Ok(backlog) => Some(backlog),
        Err(e) => {
            warn!(error:% = format!("{e:#}");
                  "cannot read the backlog for the metrics push; pushing the run's own gauges only");
            None
        }
    }
}
