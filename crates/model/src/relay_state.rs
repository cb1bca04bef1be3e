//! The relay's state steps, each mirroring its statements in
//! `crates/store/src/relay_state.rs`: the watermark made on the first start and read at
//! each run's start (`load_watermark`), today's gap check (`check_gap`, its `Full` and
//! `Promote` windows), and the commit sweep that replaces it (the new rule; the
//! `inserted_xid` column is the writer transaction's xid, which the model already
//! knows). Each returns whether it applied.

use crate::bounds::{Model, Moved, Rule};
use crate::pg::bit;
use crate::state::{Run, State, Watermark};

/// A run's start: the watermark read, or made on the first start, and P := high.
///
/// The first start (`load_watermark`'s insert): floor := the lowest unhandled own row
/// visible to the statement minus 1, else the greatest `seq` there, else 0; high :=
/// greatest(floor, greatest receipt `seq`) (the legacy marks off). The sweep's rule
/// takes W0 := the statement's snapshot with it (`swept`, and `high_snapshot`, which a
/// first mark replaces), and owes its first sweep the seq-range check of (floor, high].
pub fn start(s: &mut State) -> bool {
    if s.run.is_some() {
        return false;
    }
    if s.wm.is_none() {
        let w0 = s.snapshot();
        let rows = s.rows_in(w0);
        let floor = rows
            .iter()
            .find(|&&(i, _)| !s.handled(i))
            .map(|&(_, seq)| seq - 1)
            .or_else(|| rows.last().map(|&(_, seq)| seq))
            .unwrap_or(0);
        let receipt_max = rows
            .iter()
            .filter(|&&(i, _)| s.receipts & bit(i) != 0)
            .map(|&(_, seq)| seq)
            .max();
        let high = floor.max(receipt_max.unwrap_or(floor));
        s.wm = Some(Watermark {
            floor,
            high,
            candidate: None,
            high_snapshot: w0,
            swept: w0,
            first_sweep: true,
        });
    }
    let high = s.wm.expect("made above").high;
    s.run = Some(Run {
        p: high,
        batches: Vec::new(),
    });
    s.relay_write();
    true
}

/// How far today's gap check looks (`GapWindow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// (floor, high]: at a run's start and every 3 s.
    Full,
    /// (floor, candidate], only when the floor moves there: at a run's end.
    Promote,
}

/// Today's gap check, one transaction: (1) unhandled rows of the window visible now
/// become 'late' exceptions (`GAP_SQL`); (2) the floor moves to the candidate once
/// `pg_snapshot_xmin(now) >= pg_snapshot_xmax(candidate_snapshot)`; (3) a floor that
/// moved, or no candidate, or one at or below the floor, proposes high with the
/// snapshot of now.
pub fn check_gap(s: &mut State, window: Window) -> bool {
    let Some(mut wm) = s.wm else { return false };
    if s.run.is_none() {
        return false;
    }
    let now = s.snapshot();
    let reached = wm.candidate.is_some_and(|(_, x)| s.xmin_reached(x));
    let upto = match window {
        Window::Full => Some(wm.high),
        Window::Promote => wm
            .candidate
            .map(|(c, _)| c)
            .filter(|&c| reached && c > wm.floor),
    };
    if let Some(upto) = upto {
        for (i, seq) in s.rows_in(now) {
            if wm.floor < seq && seq <= upto && !s.handled(i) {
                s.exceptions |= bit(i);
            }
        }
    }
    let propose = reached || wm.candidate.is_none_or(|(c, _)| c <= wm.floor);
    if let (Some((c, _)), true) = (wm.candidate, reached) {
        wm.floor = wm.floor.max(c);
    }
    if propose {
        wm.candidate = Some((wm.high, now));
    }
    s.wm = Some(wm);
    s.relay_write();
    true
}

/// The commit sweep, one REPEATABLE READ transaction with snapshot S:
/// - top := S when the relay is idle (no batch fetched and not yet marked), else
///   `high_snapshot`; H := the DB high read in S. Skipped when top is not newer than W
///   ([`Moved`]: or, as the store's sweep reads it, when top is older)
///   (after a restart, a run's first batch in flight has the last run's
///   `high_snapshot`, older than the W of the run's first sweep);
/// - the window: own rows visible in top and not in W; each with `seq <= H` that is
///   unhandled becomes a 'late' exception (rows above H are the fetch's);
/// - W := top, floor := H (`Rule::NeverMoveFloor` keeps the floor where it is);
/// - the first sweep after the first start also makes the unhandled rows of (floor,
///   high] visible in S 'late' exceptions (a seq-range check, once; every time with
///   `seq_window`, as the store's sweep does).
pub fn sweep(m: &Model, s: &mut State) -> bool {
    let (Some(mut wm), Some(run)) = (s.wm, &s.run) else {
        return false;
    };
    let snapshot = s.snapshot();
    let top = if run.batches.is_empty() || m.rule == Rule::SweepTopNow {
        snapshot
    } else {
        wm.high_snapshot
    };
    let h = wm.high;
    let mut wrote = false;
    let moved = match m.moved {
        Moved::Newer => top.newer_than(wm.swept),
        Moved::NotOlder => top.not_older_than(wm.swept),
        Moved::XmaxHigher => top.xmax_higher(wm.swept),
    };
    if wm.first_sweep || (m.seq_window && moved) {
        for (i, seq) in s.rows_in(snapshot) {
            if wm.floor < seq && seq <= wm.high && !s.handled(i) {
                s.exceptions |= bit(i);
            }
        }
        wm.first_sweep = false;
        wrote = true;
    }
    if moved {
        for (i, seq) in s.rows_in(top) {
            if !wm.swept.sees(i) && seq <= h && !s.handled(i) {
                s.exceptions |= bit(i);
            }
        }
        wm.swept = top;
        if m.rule != Rule::NeverMoveFloor {
            wm.floor = h;
        }
        wrote = true;
    }
    s.wm = Some(wm);
    if wrote {
        s.relay_write();
    }
    wrote
}
