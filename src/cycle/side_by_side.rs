//! The Booking phase on a second session, side by side with the Reserve phase on the
//! first, each with the same deadline; both sessions' statements are cancelled on a
//! signal. If the second session cannot be opened (a connection limit, the database
//! going away), the Booking phase is left open and goes on taking turns on the first
//! afterwards: a slower catch-up, never a failed cycle. What either did is counted
//! into the cycle's result; a failure of either is the cycle's.

use log::{info, warn};

use super::drain::drain;
use super::schedule::{self, Budget, Turn};
use super::types::{Cycle, CycleResult, Drained, Lane};
use crate::obs::trace;
use crate::shutdown;
use crate::store::{self, CycleStatements, Db, PauseRead};

/// What the phases share across the two sessions.
pub(super) struct OnTwo<'a> {
    pub(super) budget: &'a mut Budget,
    pub(super) turns: &'a mut [Turn; 2],
    pub(super) result: &'a mut CycleResult,
    pub(super) drained: &'a mut Drained,
}

/// Runs the Reserve phase on `db` (whose pause reading is `switch`) and the Booking
/// phase on a second session, both until they are done.
pub(super) fn side_by_side(
    db: &mut Db,
    stmts: &CycleStatements,
    cycle: &Cycle,
    switch: &mut PauseRead,
    on: &mut OnTwo,
) {
    let [reserve, booking] = &mut *on.turns;
    info!(Phase:% = booking.phase, ElapsedMs = cycle.elapsed().as_millis() as u64;
          "both phases have a backlog: the Booking phase goes on on a second session");
    let cfg = cycle.cfg;
    let shutdown = cycle.ambient.shutdown;
    let mut other_budget = on.budget.clone();
    let mut other = CycleResult {
        run_id: cycle.run_id,
        lateness: on.result.lateness.clone(),
        ..CycleResult::default()
    };
    let interrupt_first = db.interrupter();
    let carried = trace::carry();
    let other_drained = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            let _span = carried.enter();
            let mut drained = Drained::default();
            let opened = store::connect_another(&cfg.db).and_then(|mut db2| {
                let status_type = store::status_type(&mut db2.client)?;
                let stmts = CycleStatements::prepare(&mut db2.client, &status_type)?;
                Ok((db2, stmts))
            });
            let (mut db2, stmts) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    // In the program's words: a connection without an answer names
                    // --connect-timeout, a server that cannot write the URL's flag.
                    warn!(Error:% = crate::exit::message(&e.into());
                          "cannot open a second session; the phases go on taking turns on one");
                    return None;
                }
            };
            let interrupt_second = db2.interrupter();
            let interrupt_at_deadline = db2.interrupter();
            let mut lane = match Lane::begin(&mut db2.client, &stmts, cycle) {
                Ok(lane) => lane,
                Err(e) => {
                    warn!(Error:% = format!("{e:#}");
                          "cannot open a second session; the phases go on taking turns on one");
                    return None;
                }
            };
            shutdown.on_signal(move || {
                interrupt_first();
                interrupt_second();
            });
            let deadline = shutdown::Deadline::start(
                cfg.deadline.saturating_sub(cycle.elapsed()),
                interrupt_at_deadline,
            );
            drain(
                cycle,
                &mut lane,
                &mut other_budget,
                std::slice::from_mut(booking),
                &mut other,
                &mut drained,
                false,
            );
            drop(lane);
            store::end_chain(&mut db2.client);
            if deadline.fired() {
                drained.first_error = drained
                    .first_error
                    .map(|e| schedule::passed_mid_batch(e, cfg.deadline));
            }
            Some(drained)
        });
        let mut lane = Lane {
            client: &mut db.client,
            stmts,
            switch: switch.take(),
        };
        drain(
            cycle,
            &mut lane,
            on.budget,
            std::slice::from_mut(reserve),
            on.result,
            on.drained,
            false,
        );
        *switch = lane.switch.take();
        match second.join() {
            Ok(d) => d,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    // The second session is closed: a signal now only needs to reach this one.
    shutdown.on_signal(db.interrupter());
    let Some(other_drained) = other_drained else {
        return;
    };
    let (result, drained) = (&mut *on.result, &mut *on.drained);
    result.booking_expired_count += other.booking_expired_count;
    result.reserve_expired_count += other.reserve_expired_count;
    result.skipped_locked_count += other.skipped_locked_count;
    result.poison_count += other.poison_count;
    on.budget.slowest = on.budget.slowest.max(other_budget.slowest);
    if let Some(e) = other_drained.first_error {
        drained.first_error.get_or_insert(e);
    }
    drained.out_of_budget |= other_drained.out_of_budget;
    drained.stopped |= other_drained.stopped;
    if drained.paused.is_none() {
        drained.paused = other_drained.paused;
    }
}
