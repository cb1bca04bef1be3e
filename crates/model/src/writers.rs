//! The writers: sessions whose transactions insert one outbox row each, drawing `seq`
//! from the session's sequence cache (`CACHE` values a block: a session can draw a
//! lower `seq` after another session committed a higher one), before their xid (the
//! insert is the transaction's first write: `nextval` runs, then PostgreSQL assigns the
//! xid) or after (an earlier write took it); each commits or rolls back, in any order
//! with the others, or is prepared (`PREPARE TRANSACTION`: in progress, its session
//! free for the next transaction) and ended later. Each step returns whether it applied.

use crate::bounds::{DrawOrder, Model};
use crate::state::{Phase, State};

/// Whether `tx` may act: begun already, or its session's earlier transactions are done
/// with the session (ended or prepared).
fn may_act(s: &State, tx: usize) -> bool {
    let t = &s.txs[tx];
    match t.phase {
        Phase::Open | Phase::Prepared => true,
        Phase::Committed | Phase::RolledBack => false,
        Phase::Idle => s.txs[..tx]
            .iter()
            .filter(|o| o.session == t.session)
            .all(|o| o.ended() || o.phase == Phase::Prepared),
    }
}

fn begin(s: &mut State, tx: usize) {
    if s.txs[tx].phase == Phase::Idle {
        s.txs[tx].phase = Phase::Open;
    }
}

/// The transaction's first write takes an xid (the next one assigned).
pub fn take_xid(m: &Model, s: &mut State, tx: usize) -> bool {
    let t = s.txs[tx];
    let order_allows = match m.order {
        DrawOrder::Both => true,
        DrawOrder::XidFirst => t.seq.is_none(),
        DrawOrder::SeqFirst => t.seq.is_some(),
    };
    if !may_act(s, tx) || t.xid.is_some() || t.phase == Phase::Prepared || !order_allows {
        return false;
    }
    begin(s, tx);
    s.txs[tx].xid = Some(s.take_next_xid());
    true
}

/// `nextval`: the session's cache, refilled with the sequence's next block of `CACHE`.
pub fn draw_seq(m: &Model, s: &mut State, tx: usize) -> bool {
    let t = s.txs[tx];
    let order_allows = match m.order {
        DrawOrder::Both => true,
        DrawOrder::XidFirst => t.xid.is_some(),
        DrawOrder::SeqFirst => t.xid.is_none(),
    };
    if !may_act(s, tx) || t.seq.is_some() || !order_allows {
        return false;
    }
    begin(s, tx);
    let cache = &mut s.caches[t.session as usize];
    if cache.left == 0 {
        cache.next = s.sequence;
        cache.left = m.cache;
        s.sequence += m.cache;
    }
    s.txs[tx].seq = Some(cache.next);
    cache.next += 1;
    cache.left -= 1;
    true
}

/// The row inserted (seq and xid), the transaction ends: latest completed xid moves.
fn end(s: &mut State, tx: usize, phase: Phase) {
    s.txs[tx].phase = phase;
    if let Some(xid) = s.txs[tx].xid {
        s.latest = s.latest.max(xid);
    }
}

pub fn commit(s: &mut State, tx: usize) -> bool {
    let t = s.txs[tx];
    if !t.running() || t.xid.is_none() || t.seq.is_none() {
        return false;
    }
    end(s, tx, Phase::Committed);
    true
}

pub fn rollback(m: &Model, s: &mut State, tx: usize) -> bool {
    if !m.rollback || !s.txs[tx].running() {
        return false;
    }
    end(s, tx, Phase::RolledBack);
    true
}

/// `PREPARE TRANSACTION` of a transaction that inserted its row; one at most.
pub fn prepare(m: &Model, s: &mut State, tx: usize) -> bool {
    let t = s.txs[tx];
    let prepared = s.txs.iter().any(|o| o.phase == Phase::Prepared);
    if !m.prepare || prepared || t.phase != Phase::Open || t.xid.is_none() || t.seq.is_none() {
        return false;
    }
    s.txs[tx].phase = Phase::Prepared;
    true
}
