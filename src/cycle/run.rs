//! The entry of `run-once`'s cycle: `run_once` (the preflight, the working lock, the
//! signal hook, the cycle's statements prepared) and `run_cycle` (on a kept session),
//! both through the deadline timer to the phases (`phases`), and the cycle's closing
//! log line.

use std::time::Instant;

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::{info, warn};

use super::phases;
use super::schedule;
use super::types::{Cycle, CycleResult};
use crate::clock::Ambient;
use crate::config::RunOnceConfig;
use crate::domain::rfc3339;
use crate::exit::{Classified, Failure};
use crate::obs::trace::{self, Attr};
use crate::preflight::{self, Checks, PauseWatch, Preflight, Writer};
use crate::shutdown;
use crate::store::{self, CycleStatements, Db};

/// Runs one cycle of run `result.run_id`, counting into `result` as batches commit, so
/// what committed is known also when the cycle fails (as `Read::read_to_end` keeps what
/// it read). On a signal it stops before the next batch (the batch in flight commits or
/// rolls back whole) and fails with `Interrupted`, after logging what it did. On an
/// infrastructure error the batch in flight rolls back.
pub fn run_once(cfg: &RunOnceConfig, ambient: Ambient, result: &mut CycleResult) -> Result<()> {
    let started = ambient.monotonic.now();
    let as_of = ambient.clock.now();
    let span = trace::span(
        "run-once cycle",
        vec![
            Attr::new("RunId", result.run_id.to_string()),
            Attr::new("AsOf", rfc3339(as_of)),
        ],
    );
    let outcome = cycle_at(cfg, ambient, as_of, started, result);
    span.set([
        Attr::new("ReserveExpiredCount", result.reserve_expired_count as i64),
        Attr::new("BookingExpiredCount", result.booking_expired_count as i64),
        Attr::new("SkippedLockedCount", result.skipped_locked_count as i64),
        Attr::new("PoisonCount", result.poison_count as i64),
        Attr::new("DurationMs", result.duration_ms as i64),
    ]);
    span.outcome(&outcome);
    outcome
}

fn cycle_at(
    cfg: &RunOnceConfig,
    ambient: Ambient,
    as_of: DateTime<Utc>,
    started: Instant,
    result: &mut CycleResult,
) -> Result<()> {
    info!(RunId:% = result.run_id, AsOf:% = rfc3339(as_of), BatchSize = cfg.batch.size,
          MaxBatches = cfg.batch.max_batches, Topics = cfg.topics.to_flag().as_str();
          "cycle started");

    let mut db = store::connect(&cfg.db)?;
    let checks = Checks {
        writer: Writer::RunOnce,
        max_clock_skew: Some(cfg.max_clock_skew),
        one_session_is_enough: true,
    };
    let pause = match preflight::check(&mut db, &cfg.db, checks, as_of)? {
        Preflight::Paused(paused) => {
            result.as_of = rfc3339(as_of);
            result.paused = Some(paused);
            result.duration_ms = ambient.monotonic.since(started).as_millis() as u64;
            return Ok(());
        }
        Preflight::Ready { pause } => pause,
    };
    // The cycle writes the job's own type alone.
    preflight::check_row_security(
        &mut db.client,
        Writer::RunOnce.as_str(),
        &crate::domain::OutboxTypes::default(),
    )?;
    // For `pause --wait`: this cycle works until its deadline at the latest.
    let left = cfg
        .deadline
        .saturating_sub(ambient.monotonic.since(started));
    preflight::announce_working(
        &mut db.client,
        Writer::RunOnce,
        schedule::working_until(as_of, left),
    )?;
    ambient.shutdown.on_signal(db.interrupter());
    let status_type = store::status_type(&mut db.client)?;
    let stmts = CycleStatements::prepare(&mut db.client, &status_type)?;
    let cycle = Cycle {
        cfg,
        ambient,
        run_id: result.run_id,
        as_of,
        started,
        pause,
    };
    cycle_on(&mut db, &stmts, cycle, result)
}

/// The cycle proper at `as_of`, on a session that is open, checked (clock, schema) and
/// has the cycle's statements prepared, for a long-lived caller (the long-horizon
/// simulation) that keeps one across cycles; `run_once` makes one per run. The cycle's
/// time budget begins now, by `ambient`'s monotonic clock.
pub fn run_cycle(
    db: &mut Db,
    stmts: &CycleStatements,
    cfg: &RunOnceConfig,
    as_of: DateTime<Utc>,
    ambient: Ambient,
    result: &mut CycleResult,
) -> Result<()> {
    let started = ambient.monotonic.now();
    let readable = store::ops::pauses_readable(&mut db.client).map_err(|e| {
        anyhow::Error::from(e).context(Classified {
            failure: Failure::Temporary,
            message: "cannot read the pause switches".to_owned(),
        })
    })?;
    let cycle = Cycle {
        cfg,
        ambient,
        run_id: result.run_id,
        as_of,
        started,
        pause: PauseWatch::new(Writer::RunOnce, readable),
    };
    cycle_on(db, stmts, cycle, result)
}

fn cycle_on(
    db: &mut Db,
    stmts: &CycleStatements,
    cycle: Cycle,
    result: &mut CycleResult,
) -> Result<()> {
    let cfg = cycle.cfg;
    result.as_of = rfc3339(cycle.as_of);
    // The hard end of the budget: a statement still running at the deadline is
    // cancelled and its batch rolls back, so a cycle never outlives its minute.
    let deadline = shutdown::Deadline::start(
        cfg.deadline.saturating_sub(cycle.elapsed()),
        db.interrupter(),
    );
    let outcome = phases::run_phases(db, stmts, cycle, result).map_err(|e| {
        if deadline.fired() {
            schedule::passed_mid_batch(e, cfg.deadline)
        } else {
            e
        }
    });
    drop(deadline);
    result.duration_ms = cycle.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => {
            info!(ReserveExpiredCount = result.reserve_expired_count,
                  BookingExpiredCount = result.booking_expired_count,
                  SkippedLockedCount = result.skipped_locked_count,
                  PoisonCount = result.poison_count,
                  DurationMs = result.duration_ms;
                  "cycle completed");
            Ok(())
        }
        Err(e) => {
            // What committed before the failure stays committed: say so, then fail.
            warn!(ReserveExpiredCount = result.reserve_expired_count,
                  BookingExpiredCount = result.booking_expired_count,
                  PoisonCount = result.poison_count,
                  DurationMs = result.duration_ms;
                  "cycle stopped early; batches committed before this point stay committed");
            Err(e)
        }
    }
}
