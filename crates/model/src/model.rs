//! The state machine stateright checks: its initial state, its steps ([`Action`], all
//! that may apply), and the properties: safety (no row purged without a receipt), the
//! sweep's invariant (every committed row W sees at or below the floor is settled), and
//! progress, from every reachable state once the writers stop ([`crate::progress`]).

use stateright::Property;

use crate::bounds::{Model, Rule};
use crate::progress::drain;
use crate::state::{Phase, State};
use crate::step::{Action, apply, candidates};

/// SAFETY: no row was purged without a receipt.
pub fn safe(s: &State) -> bool {
    s.lost == 0
}

/// The sweep's invariant: every committed row visible in W at or below the floor is
/// handled (a receipt or an exception) or was purged with its receipt.
pub fn settled_below_floor(m: &Model, s: &State) -> bool {
    let Some(wm) = s.wm else { return true };
    m.rule == Rule::Today
        || s.rows_in(wm.swept)
            .into_iter()
            .all(|(i, seq)| seq > wm.floor || s.handled(i))
}

/// No mark wrote a receipt a row already had (the receipts' key would refuse it, and
/// the run fail: every run after it too, while the row stays above `high`).
pub fn one_receipt(s: &State) -> bool {
    s.twice == 0
}

/// The writers stopped with no transaction in progress.
pub fn writers_quiet(s: &State) -> bool {
    s.txs
        .iter()
        .all(|t| t.phase != Phase::Open && t.phase != Phase::Prepared)
}

/// The properties' names (stateright reports a discovery by them).
pub const SAFETY: &str = "safety: no row purged without a receipt";
pub const INVARIANT: &str =
    "invariant: every committed row W sees at or below the floor is settled";
pub const ONE_RECEIPT: &str = "one receipt: no mark writes a receipt a row already has";
pub const PROGRESS: &str = "progress: once the writers stop (none in progress), the relay sends \
                            every committed row, moves the floor to high and purges every \
                            delivered row";
pub const PROGRESS_OPEN: &str = "progress past open transactions: the same from a state \
                                 where some stay in progress for ever";

impl stateright::Model for Model {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.init()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        candidates(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        apply(self, &mut next, action).then_some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SAFETY, |_, s| safe(s)),
            Property::always(INVARIANT, settled_below_floor),
            Property::always(ONE_RECEIPT, |_, s| one_receipt(s)),
            Property::always(PROGRESS, |m, s| !writers_quiet(s) || drain(m, s).is_ok()),
            // The quiet states are progress's own: one schedule per state.
            Property::always(PROGRESS_OPEN, |m, s| {
                writers_quiet(s) || drain(m, s).is_ok()
            }),
        ]
    }
}
