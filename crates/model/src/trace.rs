//! Paths told as steps: a counterexample stateright found, or a fixed sequence of steps
//! replayed ([`replay`]), printed one line a step with what the state holds after it
//! (the rows, the watermark, the relay's memory).

use std::fmt::Write as _;

use crate::bounds::Model;
use crate::pg::bit;
use crate::state::{Phase, State};
use crate::step::{Action, apply};

/// The state in one line.
pub fn summary(s: &State) -> String {
    let mut out = String::new();
    for (i, t) in s.txs.iter().enumerate() {
        let Some(seq) = t.seq else {
            if t.xid.is_some() {
                let _ = write!(out, "tx{i}: xid, no seq; ");
            }
            continue;
        };
        let phase = match t.phase {
            Phase::Idle | Phase::Open => "open",
            Phase::Prepared => "prepared",
            Phase::Committed => "committed",
            Phase::RolledBack => "rolled back",
        };
        let xid = if t.xid.is_some() { "" } else { " (no xid yet)" };
        let _ = write!(out, "tx{i}: seq {seq} {phase}{xid}");
        for (mask, word) in [
            (s.receipts, " +receipt"),
            (s.exceptions, " +exception"),
            (s.purged, " PURGED"),
            (s.lost, " UNSENT"),
            (s.twice, " RECEIPT TWICE"),
        ] {
            if mask & bit(i) != 0 {
                out.push_str(word);
            }
        }
        out.push_str("; ");
    }
    match s.wm {
        None => out.push_str("| no watermark"),
        Some(w) => {
            let _ = write!(out, "| floor {} high {}", w.floor, w.high);
            if let Some((c, _)) = w.candidate {
                let _ = write!(out, " candidate {c}");
            }
        }
    }
    match &s.run {
        None => out.push_str(" | relay down"),
        Some(run) => {
            let _ = write!(out, " | P {}", run.p);
            for b in &run.batches {
                let seqs: Vec<u8> = (0..s.txs.len())
                    .filter(|&i| b.rows & bit(i) != 0)
                    .filter_map(|i| s.txs[i].seq)
                    .collect();
                let _ = write!(out, " in flight {seqs:?}");
            }
        }
    }
    out
}

/// The path's steps, one line each, numbered, with the state after each.
pub fn tell(m: &Model, actions: &[Action]) -> String {
    let mut s = m.init();
    let mut out = format!("   {}\n", m);
    for (n, &action) in actions.iter().enumerate() {
        apply(m, &mut s, action);
        let _ = writeln!(
            out,
            "{:>3}. {:<18} {}",
            n + 1,
            format!("{action:?}"),
            summary(&s)
        );
    }
    out
}

/// Replays fixed steps from the initial state: the states after each, or which step
/// does not apply.
pub fn replay(m: &Model, actions: &[Action]) -> Result<Vec<State>, String> {
    let mut s = m.init();
    let mut states = Vec::new();
    for (n, &action) in actions.iter().enumerate() {
        if !apply(m, &mut s, action) {
            return Err(format!(
                "step {} ({action:?}) does not apply after: {}",
                n + 1,
                summary(&s)
            ));
        }
        states.push(s.clone());
    }
    Ok(states)
}
