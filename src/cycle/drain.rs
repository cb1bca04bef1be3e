//! The turns on one session: the open phases batch by batch in turn, each batch at a
//! boundary that checks the signal, the budget and the pause switch first. A phase
//! whose batch fails stops, and the others go on, unless the failure stops everything
//! (a signal, a lost session).

use log::error;

use super::batch;
use super::schedule::{self, Budget, Gate, PhaseFailed, Turn};
use super::types::{Batch, Cycle, CycleResult, Drained, Lane};
use crate::exit::{Failure, fail};
use crate::store;

/// The open `turns`, batch by batch in turn on `lane` (inside its chain of
/// transactions), until none is open, or after one round when `one_round`.
pub(super) fn drain(
    cycle: &Cycle,
    lane: &mut Lane,
    budget: &mut Budget,
    turns: &mut [Turn],
    result: &mut CycleResult,
    drained: &mut Drained,
    one_round: bool,
) {
    let cfg = cycle.cfg;
    while turns.iter().any(|t| t.open) {
        let mut from = 0;
        while let Some(i) = schedule::next_in_round(turns, from) {
            from = i + 1;
            let turn = &mut turns[i];
            match schedule::gate(cycle.signal(), budget, cycle.now()) {
                Gate::Go => {}
                Gate::Interrupted(signal) => {
                    drained.first_error.get_or_insert(fail(
                        Failure::Interrupted(signal),
                        format!("interrupted by signal {signal}; no new batch started"),
                    ));
                    drained.stopped = true;
                    return;
                }
                Gate::OutOfBudget => {
                    drained.out_of_budget = true;
                    drained.stopped = true;
                    return;
                }
            }
            // A pause stops the cycle at this batch boundary.
            match lane.paused(cycle) {
                Ok(None) => {}
                Ok(Some(paused)) => {
                    drained.paused = Some(paused);
                    drained.stopped = true;
                    return;
                }
                Err(e) => {
                    drained.first_error.get_or_insert(e);
                    drained.stopped = true;
                    return;
                }
            }
            let phase = turn.phase;
            let batch_started = cycle.now();
            let b = Batch {
                cycle,
                phase,
                after: turn.after,
                limit: turn.limit(cfg.batch.size),
                alone: turn.is_alone(),
                ends: budget.ends(),
            };
            match batch::run_one(lane, &b, result) {
                Ok((claimed, last)) => {
                    budget.batch_took(cycle.ambient.monotonic.since(batch_started));
                    turn.batch_done(claimed, last, cfg.batch.size, cfg.batch.max_batches);
                }
                Err(e) => {
                    let fatal = cycle.signal().is_some() || lane.client.is_closed();
                    // Remembered for the next cycle, whatever the error, unless the
                    // batch was stopped from here (a signal, the deadline) or the
                    // session is gone.
                    let remembered =
                        (!fatal && !budget.left(cycle.now()).is_zero()).then(|| PhaseFailed {
                            sqlstate: crate::exit::store_error(&e)
                                .and_then(store::StoreError::sqlstate)
                                .map(str::to_owned),
                            error: format!("{e:#}"),
                        });
                    turn.batch_failed(remembered);
                    error!(Phase:% = phase, Error:% = format!("{e:#}");
                           "phase failed; its batch rolled back");
                    drained.first_error.get_or_insert(e);
                    if fatal {
                        drained.stopped = true;
                        return;
                    }
                }
            }
        }
        if one_round {
            return;
        }
    }
}
