//! The state machine stateright checks: its bounds ([`Model`]), its steps ([`Action`]:
//! the writers' and the relay's, each one statement or one transaction of the real
//! code, atomic), and the properties: safety (no row purged without a receipt), the
//! sweep's invariant (every committed row W sees at or below the floor is settled),
//! and progress, from every reachable state once the writers stop ([`crate::progress`]).

use std::fmt;

use stateright::Property;

use crate::pg::bit;
use crate::progress::drain;
use crate::relay_state::{self, Window};
use crate::state::{Phase, State};
use crate::watermark;
use crate::writers;

/// Which floor rule the relay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Today's: the candidate floor waits for `pg_snapshot_xmin` to pass the
    /// candidate's `pg_snapshot_xmax`; the purge deletes every row of its range.
    Today,
    /// The commit sweep (`inserted_xid` against W); the purge needs a receipt.
    Sweep,
    /// The sweep that never moves the floor: safe, and must fail progress.
    NeverMoveFloor,
    /// A check of the checker: the sweep with top := S even while a batch is in flight
    /// (not `high_snapshot`): a row committed after that batch's fetch, below its P,
    /// is taken as seen by W and never fetched; the checker must find it.
    SweepTopNow,
}

/// When a writer's transaction takes its xid against when it draws `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DrawOrder {
    /// Either: both orders are explored.
    Both,
    /// An earlier write took the xid (the job's own rows).
    XidFirst,
    /// The insert is the first write: `nextval`, then the xid.
    SeqFirst,
}

/// The bounds of a check.
#[derive(Clone, Debug)]
pub struct Model {
    pub rule: Rule,
    /// The transactions of each writer session, one outbox row each.
    pub sessions: Vec<u8>,
    /// The sequence's CACHE: each session draws blocks of this many values.
    pub cache: u8,
    pub order: DrawOrder,
    /// A transaction may be prepared (one at a time).
    pub prepare: bool,
    /// A transaction may roll back (its `seq` is a gap).
    pub rollback: bool,
    /// The fetch's limit (`--batch-size`).
    pub limit: u8,
    /// Batches fetched and not yet marked, at most.
    pub in_flight: u8,
    /// Relay crashes (memory lost, batches in flight unmarked), at most.
    pub crashes: u8,
}

impl Model {
    pub fn new(rule: Rule) -> Model {
        Model {
            rule,
            sessions: vec![2, 1],
            cache: 3,
            order: DrawOrder::Both,
            prepare: true,
            rollback: true,
            limit: 2,
            in_flight: 2,
            crashes: 1,
        }
    }

    pub fn init(&self) -> State {
        State::new(&self.sessions)
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: u8 = self.sessions.iter().sum();
        write!(
            f,
            "rule {:?}: {} writer sessions {:?} ({rows} rows, one per transaction), CACHE {}, \
             seq/xid order {:?}, prepare {}, rollback {}, fetch limit {}, {} batches in \
             flight, {} relay crashes",
            self.rule,
            self.sessions.len(),
            self.sessions,
            self.cache,
            self.order,
            self.prepare,
            self.rollback,
            self.limit,
            self.in_flight,
            self.crashes
        )
    }
}

/// A step: a writer's (of transaction `tx`) or the relay's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    TakeXid(u8),
    DrawSeq(u8),
    Commit(u8),
    Rollback(u8),
    Prepare(u8),
    /// A run starts: the watermark read (made on the first start), P := high.
    Start,
    Fetch,
    /// The oldest batch in flight marked.
    Mark,
    /// Today: the gap check (start of run, every 3 s); the sweep's rules: the sweep.
    Check,
    /// An exception of row `tx` sent and marked.
    SendException(u8),
    /// A purge whose range ends at this `seq`.
    Purge(u8),
    /// The run ends (its batches marked): today's Promote check or a sweep, then down.
    End,
    /// The relay dies: its memory and its unmarked batches are lost.
    Crash,
}

/// Applies `action` to `s`; false when it does not apply there.
pub fn apply(m: &Model, s: &mut State, action: Action) -> bool {
    let applied = match action {
        Action::TakeXid(t) => writers::take_xid(m, s, t as usize),
        Action::DrawSeq(t) => writers::draw_seq(m, s, t as usize),
        Action::Commit(t) => writers::commit(s, t as usize),
        Action::Rollback(t) => writers::rollback(m, s, t as usize),
        Action::Prepare(t) => writers::prepare(m, s, t as usize),
        Action::Start => relay_state::start(s),
        Action::Fetch => watermark::fetch(m, s),
        Action::Mark => watermark::mark(m, s),
        Action::Check => check(m, s, Window::Full),
        Action::SendException(t) => watermark::send_exception(s, t as usize),
        Action::Purge(hi) => watermark::purge(m, s, hi),
        Action::End => end(m, s),
        Action::Crash => crash(m, s),
    };
    if applied {
        s.compact();
    }
    applied
}

/// The rule's check: today's gap check (with its window) or the sweep.
pub fn check(m: &Model, s: &mut State, window: Window) -> bool {
    match m.rule {
        Rule::Today => relay_state::check_gap(s, window),
        Rule::Sweep | Rule::NeverMoveFloor | Rule::SweepTopNow => relay_state::sweep(m, s),
    }
}

fn end(m: &Model, s: &mut State) -> bool {
    if !s.run.as_ref().is_some_and(|r| r.batches.is_empty()) {
        return false;
    }
    check(m, s, Window::Promote);
    s.run = None;
    true
}

fn crash(m: &Model, s: &mut State) -> bool {
    if s.run.is_none() || s.crashes >= m.crashes {
        return false;
    }
    s.run = None;
    s.crashes += 1;
    true
}

/// Every step that may apply in `s` (those that do not are refused by [`apply`]).
pub fn candidates(s: &State, out: &mut Vec<Action>) {
    for t in 0..s.txs.len() as u8 {
        out.extend([
            Action::TakeXid(t),
            Action::DrawSeq(t),
            Action::Commit(t),
            Action::Rollback(t),
            Action::Prepare(t),
        ]);
    }
    if s.run.is_none() {
        out.push(Action::Start);
        return;
    }
    out.extend([Action::Fetch, Action::Mark, Action::Check]);
    for t in 0..s.txs.len() as u8 {
        if s.exceptions & bit(t as usize) != 0 {
            out.push(Action::SendException(t));
        }
    }
    out.extend(watermark::purge_tops(s).into_iter().map(Action::Purge));
    out.extend([Action::End, Action::Crash]);
}

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
            Property::always(PROGRESS, |m, s| !writers_quiet(s) || drain(m, s).is_ok()),
            // The quiet states are progress's own: one schedule per state.
            Property::always(PROGRESS_OPEN, |m, s| {
                writers_quiet(s) || drain(m, s).is_ok()
            }),
        ]
    }
}
