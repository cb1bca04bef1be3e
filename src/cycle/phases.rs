//! Both phases, batch by batch in turn (Reserve, Booking, Reserve, …), each until its
//! queue is empty for us or it took `max_batches`, while the cycle's budget allows a
//! new batch (see [`Budget`]). Taking turns keeps a backlog of one phase from holding
//! back the other's expiries when a catch-up needs several cycles. When the first turn
//! finds both phases with a backlog (both batches full: after an outage), the Booking
//! phase goes on on a second session of its own, side by side with the Reserve phase
//! on this one (`side_by_side`): the two use both the database's and the client's
//! time, which one session alternates between. A normal minute never opens it. The
//! turns on each session are `drain`'s.
//!
//! A phase that fails does not stop the other: its batch rolled back, the error is
//! kept, the other phase goes on, and the cycle then fails with the first error (a
//! poison row in one phase must never hold back the other's expiries). A signal or a
//! lost connection stop everything. Running out of budget with rows left is a normal
//! end: the rest waits for the next cycle, and how much is left is logged.

use anyhow::Result;

use super::drain::drain;
use super::schedule::{self, Budget, Turn};
use super::types::{Cycle, CycleResult, Drained, Lane};
use super::{logbook, side_by_side, upkeep};
use crate::domain::Phase;
use crate::preflight::{self, Writer};
use crate::store::{self, CycleStatements, Db};

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
        logbook::log_left(client, stmts, &cycle, &budget, &unfinished);
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
