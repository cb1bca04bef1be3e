//! PROGRESS, checked from a state as "a finite relay schedule reaches the goal": with
//! the writers stopped (no new transaction, those in progress left as they are), a
//! fixed schedule of the relay's own steps, the same functions the checker explores,
//! runs round after round: start a run if it is down, mark what is in flight, send the
//! exceptions, fetch and mark until nothing is left above P, check (or sweep), purge
//! the widest range. The goal: every committed row delivered (a receipt, ever) and
//! purged, no exception left, floor = high. One such schedule is the witness that the
//! goal is reachable; a rule that never moves the floor has none at all.

use crate::bounds::Model;
use crate::relay_state::Window;
use crate::state::State;
use crate::step::{Action, apply, check};
use crate::watermark::purge_tops;

/// Rounds the schedule may take: two fetches and two checks per row are more than any
/// bound here needs (today's floor moves a check after its candidate).
const ROUNDS: usize = 12;

/// Whether `s` is the goal.
pub fn goal(s: &State) -> bool {
    let committed = s.committed();
    committed & !s.delivered == 0
        && committed & !s.purged == 0
        && s.exceptions == 0
        && s.wm.is_some_and(|w| w.floor == w.high)
}

/// The schedule's last state: Ok once the goal is reached, Err when the rounds ran out.
pub fn drain(m: &Model, from: &State) -> Result<State, State> {
    let mut s = from.clone();
    for _ in 0..ROUNDS {
        if goal(&s) {
            return Ok(s);
        }
        round(m, &mut s);
    }
    if goal(&s) { Ok(s) } else { Err(s) }
}

/// One round of the schedule.
fn round(m: &Model, s: &mut State) {
    apply(m, s, Action::Start);
    while apply(m, s, Action::Mark) {}
    for t in 0..s.txs.len() as u8 {
        apply(m, s, Action::SendException(t));
    }
    while apply(m, s, Action::Fetch) {
        while apply(m, s, Action::Mark) {}
    }
    if check(m, s, Window::Full) {
        s.compact();
    }
    if let Some(&hi) = purge_tops(s).last() {
        apply(m, s, Action::Purge(hi));
    }
}
