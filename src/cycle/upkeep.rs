//! The cycle's bookkeeping across cycles: which phases' batch failed last cycle (they
//! take their bookings one by one), recording this cycle's failures for the next, and
//! releasing quarantine entries whose booking changed since.

use crate::store::Session;
use chrono::{DateTime, Utc};
use log::{error, info, warn};
use uuid::Uuid;

use super::schedule::{Budget, Turn};
use super::types::Cycle;
use crate::config::RunOnceConfig;
use crate::domain::rfc3339;
use crate::store::{self, CycleStatements};

/// Reads which phases' batch failed last cycle and has each take its first batch one
/// booking per transaction; `None` when the record cannot be read (migration 12 not
/// applied, no grant: the phases run as they would without it, and it is logged).
pub(super) fn read_failures(
    client: &mut Session,
    cfg: &RunOnceConfig,
    turns: &mut [Turn; 2],
) -> Option<Vec<store::PhaseFailure>> {
    let failures = match store::phase_failures(client) {
        Ok(Some(failures)) => failures,
        Ok(None) => {
            warn!(
                "crm.booking_expiration_phase_failure is missing or not granted (migration \
                   012_phase_failures.sql: run `booking-expire migrate`): a batch that fails every cycle is not \
                   isolated booking by booking"
            );
            return None;
        }
        Err(e) => {
            warn!(Error:% = format!("{e:#}"); "cannot read the phases' failures of last cycle");
            return None;
        }
    };
    for f in &failures {
        let turn = &mut turns[f.phase.slot()];
        turn.alone_left = cfg.batch.size;
        warn!(Phase:% = f.phase, Failures = f.failures,
              SqlState = f.sqlstate.as_deref().unwrap_or("-"), Error = f.error.as_str();
              "the phase's batch failed last cycle: its first batch goes one booking per \
               transaction, a booking that fails on its own is quarantined");
    }
    Some(failures)
}

/// Records, for the next cycle, each phase whose batch failed in this one, and forgets
/// the failure of a phase that ran its bookings one by one without failing. Two rows
/// at most; a failure to record is logged (the next cycle then runs in batches).
pub(super) fn remember_failures(
    client: &mut Session,
    before: &[store::PhaseFailure],
    turns: &[Turn; 2],
    as_of: DateTime<Utc>,
    run_id: Uuid,
) {
    for turn in turns {
        let had = before.iter().any(|f| f.phase == turn.phase);
        let done = match &turn.failed {
            Some(f) => store::record_phase_failure(
                client,
                turn.phase,
                f.sqlstate.as_deref(),
                &f.error,
                as_of,
                run_id,
            ),
            None if had && turn.alone_left == 0 => store::clear_phase_failure(client, turn.phase),
            None => continue,
        };
        if let Err(e) = done {
            warn!(Phase:% = turn.phase, Error:% = format!("{e:#}");
                  "cannot record the phase's failure for the next cycle");
        }
    }
}

/// Drops quarantine entries whose booking changed since (repaired, extended, cancelled,
/// deleted): they no longer describe the row, and a changed row is judged afresh.
/// Bounded per cycle; a failure here is reported like a phase's, after the phases ran.
pub(super) fn release_stale_quarantine(
    client: &mut Session,
    stmts: &CycleStatements,
    cycle: &Cycle,
    budget: &Budget,
    first_error: &mut Option<anyhow::Error>,
) {
    let as_of = cycle.as_of;
    if cycle.signal().is_some() || !budget.allows_a_batch(cycle.now()) {
        return;
    }
    match store::release_stale_quarantine(client, stmts) {
        Ok(0) => {}
        Ok(released) => {
            info!(Released = released, AsOf:% = rfc3339(as_of);
                  "quarantine entries released: their bookings changed since");
        }
        Err(e) => {
            let e = anyhow::Error::from(e).context("releasing stale quarantine entries failed");
            error!(Error:% = format!("{e:#}"); "quarantine upkeep failed");
            first_error.get_or_insert(e);
        }
    }
}
