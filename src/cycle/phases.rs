//! Both phases, batch by batch in turn (Reserve, Booking, Reserve, …), each until its
//! queue is empty for us or it took `max_batches`, while the cycle's budget allows a
//! new batch (see [`Budget`]). Taking turns keeps a backlog of one phase from holding
//! back the other's expiries when a catch-up needs several cycles. When the first turn
//! finds both phases with a backlog (both batches full: after an outage), the Booking
//! phase goes on on a second session of its own, side by side with the Reserve phase
//! on this one (`side_by_side`): the two use both the database's and the client's
//! time, which one session alternates between. A normal minute never opens it.
//!
//! A phase that fails does not stop the other: its batch rolled back, the error is
//! kept, the other phase goes on, and the cycle then fails with the first error (a
//! poison row in one phase must never hold back the other's expiries). A signal or a
//! lost connection stop everything. Running out of budget with rows left is a normal
//! end: the rest waits for the next cycle, and how much is left is logged.

use crate::store::Session;
use anyhow::Result;
use log::error;

use super::batch::{self, Batch};
use super::schedule::{self, Budget, Gate, PhaseFailed, Turn};
use super::{Cycle, CycleResult, report, side_by_side, upkeep};
use crate::domain::Phase;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::preflight::{self, Paused, Writer};
use crate::store::{self, CycleStatements, Db, Switch};

/// How the phases' batches ended so far.
#[derive(Default)]
pub(super) struct Drained {
    pub(super) first_error: Option<anyhow::Error>,
    /// The budget allowed no further batch while a phase was still open.
    pub(super) out_of_budget: bool,
    /// Nothing more may run: a signal, a lost connection, the budget spent, or a pause.
    pub(super) stopped: bool,
    /// `run-once` was paused while the cycle worked.
    pub(super) paused: Option<Paused>,
}

/// One session's chain of batch transactions (see `store::begin_chain`), and the pause
/// switch as its last round trip read it.
pub(super) struct Lane<'s> {
    pub(super) client: &'s mut Session,
    pub(super) stmts: &'s CycleStatements,
    pub(super) switch: Switch,
}

impl<'s> Lane<'s> {
    /// Begins the session's chain, reading the pause switch in the same round trip.
    pub(super) fn begin(
        client: &'s mut Session,
        stmts: &'s CycleStatements,
        cycle: &Cycle,
    ) -> Result<Self> {
        let switch = store::begin_chain(client, cycle.pause.command()).classify(
            Failure::Temporary,
            "cannot begin the first batch's transaction",
        )?;
        Ok(Lane {
            client,
            stmts,
            switch,
        })
    }

    /// The pause at this batch boundary: as the last round trip read it, or read now
    /// when it did not.
    fn paused(&mut self, cycle: &Cycle) -> Result<Option<Paused>> {
        let now = cycle.driver.clock.now();
        match self.switch.take() {
            Some(row) => Ok(row.map(|row| Paused::of(&row, now))),
            None => cycle.pause.check(self.client, now),
        }
    }
}

pub(super) fn run_phases(
    db: &mut Db,
    stmts: &CycleStatements,
    cycle: Cycle,
    result: &mut CycleResult,
) -> Result<()> {
    let cfg = cycle.cfg;
    let mut budget = Budget::new(cfg.deadline, cycle.started);
    let mut turns = Phase::ALL.map(Turn::new);
    let mut drained = Drained::default();
    let failed_before = upkeep::read_failures(&mut db.client, cfg, &mut turns);
    let mut lane = Lane::begin(&mut db.client, stmts, &cycle)?;
    drain(
        &cycle,
        &mut lane,
        &mut budget,
        &mut turns,
        result,
        &mut drained,
        true,
    );
    // The pause switch as this session's last round trip read it, for its next batch.
    let mut switch = lane.switch.take();
    if !drained.stopped && drained.first_error.is_none() && schedule::both_have_a_backlog(&turns) {
        let mut on_two = side_by_side::OnTwo {
            budget: &mut budget,
            turns: &mut turns,
            result: &mut *result,
            drained: &mut drained,
        };
        side_by_side::side_by_side(db, stmts, &cycle, &mut switch, &mut on_two);
    }
    // What is still open takes turns on this session: after a normal first turn, or
    // when the second session could not be opened or failed.
    if !drained.stopped {
        let mut lane = Lane {
            client: &mut db.client,
            stmts,
            switch,
        };
        drain(
            &cycle,
            &mut lane,
            &mut budget,
            &mut turns,
            result,
            &mut drained,
            false,
        );
    }
    let client = &mut db.client;
    store::end_chain(client);
    if drained.out_of_budget && drained.first_error.is_none() {
        let unfinished: Vec<Phase> = turns.iter().filter(|t| t.open).map(|t| t.phase).collect();
        report::report_left(client, stmts, &cycle, &budget, &unfinished);
    }
    let mut first_error = drained.first_error;
    if let Some(paused) = drained.paused {
        let done = format!(
            "no batch started after it; the {} bookings expired before stay expired",
            result.reserve_expired_count + result.booking_expired_count
        );
        preflight::stopped_mid_run(Writer::RunOnce, &paused, &done);
        result.paused = Some(paused);
    }
    if !client.is_closed() {
        // A batch that failed before the pause is remembered all the same: the next
        // cycle isolates it row by row.
        if let Some(before) = &failed_before {
            upkeep::remember_failures(client, before, &turns, cycle.as_of, cycle.run_id);
        }
    }
    if result.paused.is_none() && !client.is_closed() {
        upkeep::release_stale_quarantine(client, stmts, &cycle, &budget, &mut first_error);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

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
                    budget.batch_took(cycle.driver.monotonic.since(batch_started));
                    turn.batch_done(claimed, last, cfg.batch.size, cfg.batch.max_batches);
                }
                Err(e) => {
                    let fatal = cycle.signal().is_some() || lane.client.is_closed();
                    // Remembered for the next cycle, whatever the error, unless the
                    // batch was stopped from here (a signal, the deadline) or the
                    // session is gone.
                    let remembered =
                        (!fatal && !budget.left(cycle.now()).is_zero()).then(|| PhaseFailed {
                            sqlstate: store::code_in(&e).map(str::to_owned),
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
