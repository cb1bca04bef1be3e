//! The steps: a writer's (one statement or its commit) or the relay's (one statement or
//! one transaction of the real code), each atomic, dispatched to the functions that
//! mirror the statements (`writers`, `watermark`, `relay_state`); after each the xids
//! are renumbered ([`State::compact`]).

use crate::bounds::{Model, Rule};
use crate::pg::bit;
use crate::relay_state::{self, Window};
use crate::state::State;
use crate::watermark;
use crate::writers;

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
    /// A fetch that holds its batch's last row as an exception (`Model::holds`).
    FetchHold,
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
        Action::Fetch => watermark::fetch(m, s, false),
        Action::FetchHold => watermark::fetch(m, s, true),
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
    out.extend([
        Action::Fetch,
        Action::FetchHold,
        Action::Mark,
        Action::Check,
    ]);
    for t in 0..s.txs.len() as u8 {
        if s.exceptions & bit(t as usize) != 0 {
            out.push(Action::SendException(t));
        }
    }
    out.extend(watermark::purge_tops(s).into_iter().map(Action::Purge));
    out.extend([Action::End, Action::Crash]);
}
