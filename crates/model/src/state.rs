//! The model's state: the writers' transactions and sequence caches, the cluster's
//! latest completed xid, the relay's tables (watermark, receipts, exceptions) and the
//! outbox rows purged, the relay's memory (its fetch pointer P and the batches in
//! flight), and the history the properties read (rows delivered, rows purged unsent).
//! One writer transaction inserts at most one outbox row, so a row is named by its
//! transaction's index.

use crate::pg::{Mask, Snapshot, Xid, bit, compact, rank};

/// Where a writer transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not begun.
    Idle,
    /// Begun: its session is busy with it.
    Open,
    /// `PREPARE TRANSACTION`: still in progress, its session free for the next one.
    Prepared,
    Committed,
    RolledBack,
}

/// A writer transaction and the outbox row it inserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tx {
    pub session: u8,
    pub phase: Phase,
    pub xid: Option<Xid>,
    /// The row's `seq`, once drawn (`nextval`); the row exists once the xid is there too.
    pub seq: Option<u8>,
}

impl Tx {
    /// Still in progress (open or prepared).
    pub fn running(&self) -> bool {
        matches!(self.phase, Phase::Open | Phase::Prepared)
    }

    pub fn ended(&self) -> bool {
        matches!(self.phase, Phase::Committed | Phase::RolledBack)
    }
}

/// A session's sequence cache: the values it holds (`next`, `left` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cache {
    pub next: u8,
    pub left: u8,
}

/// The state row of `crm.booking_expiration_relay_state` (both rules' columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watermark {
    pub floor: u8,
    pub high: u8,
    /// Today's rule: the candidate floor and the snapshot it was proposed with.
    pub candidate: Option<(u8, Snapshot)>,
    /// The sweep: the snapshot of the fetch whose mark set `high`.
    pub high_snapshot: Snapshot,
    /// The sweep: W, the snapshot `floor` is paired with.
    pub swept: Snapshot,
    /// The sweep: the first one after the first start still has its seq-range check.
    pub first_sweep: bool,
}

/// A fetched batch not yet marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Batch {
    pub rows: Mask,
    pub max: u8,
    /// The fetch's statement snapshot F.
    pub snapshot: Snapshot,
}

/// The relay's memory during a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// The fetch pointer P: the greatest `seq` fetched (the DB high at the run's start).
    pub p: u8,
    /// The batches fetched and not yet marked, in fetch order.
    pub batches: Vec<Batch>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub txs: Vec<Tx>,
    pub caches: Vec<Cache>,
    /// The sequence's next value (the start of the next block a session takes).
    pub sequence: u8,
    /// The latest completed xid (writers' and the relay's own).
    pub latest: Xid,
    /// The next xid assigned: above every one the state holds (set by [`State::compact`]).
    pub next: Xid,
    /// None until the relay's first start made it.
    pub wm: Option<Watermark>,
    pub receipts: Mask,
    pub exceptions: Mask,
    /// Rows deleted by a purge.
    pub purged: Mask,
    /// Rows that ever had a receipt (history, for the properties).
    pub delivered: Mask,
    /// Rows a purge deleted without a receipt (history: the safety property).
    pub lost: Mask,
    /// Rows a mark wrote a second receipt for: the receipts' key refuses it, and the
    /// run fails (history: the property [`crate::model::ONE_RECEIPT`]).
    pub twice: Mask,
    /// The relay: None while it is down.
    pub run: Option<Run>,
    pub crashes: u8,
}

impl State {
    pub fn new(sessions: &[u8]) -> State {
        let txs = sessions
            .iter()
            .enumerate()
            .flat_map(|(s, &n)| {
                (0..n).map(move |_| Tx {
                    session: s as u8,
                    phase: Phase::Idle,
                    xid: None,
                    seq: None,
                })
            })
            .collect();
        State {
            txs,
            caches: vec![Cache { next: 0, left: 0 }; sessions.len()],
            sequence: 1,
            latest: 0,
            next: 1,
            wm: None,
            receipts: 0,
            exceptions: 0,
            purged: 0,
            delivered: 0,
            lost: 0,
            twice: 0,
            run: None,
            crashes: 0,
        }
    }

    /// `pg_current_snapshot()` now.
    pub fn snapshot(&self) -> Snapshot {
        let ended = self
            .txs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.ended() && t.xid.is_some())
            .fold(0, |m, (i, _)| m | bit(i));
        Snapshot {
            latest: self.latest,
            ended,
        }
    }

    /// Whether `pg_snapshot_xmin(pg_current_snapshot()) >= pg_snapshot_xmax(x)`: the
    /// least running xid below xmax (none: xmax itself) against `x.latest` + 1.
    pub fn xmin_reached(&self, x: Snapshot) -> bool {
        let xmin = self
            .txs
            .iter()
            .filter(|t| t.running())
            .filter_map(|t| t.xid)
            .filter(|&xid| xid <= self.latest)
            .min();
        match xmin {
            Some(xmin) => xmin > x.latest,
            None => self.latest >= x.latest,
        }
    }

    /// The next xid assigned, taken.
    pub fn take_next_xid(&mut self) -> Xid {
        self.next += 1;
        self.next - 1
    }

    /// A relay transaction that wrote something committed: it took the next xid.
    pub fn relay_write(&mut self) {
        self.latest = self.take_next_xid();
    }

    /// The committed rows still in the outbox, in `seq` order.
    pub fn rows(&self) -> Vec<(usize, u8)> {
        let mut rows: Vec<(usize, u8)> = self
            .txs
            .iter()
            .enumerate()
            .filter(|(i, t)| t.phase == Phase::Committed && self.purged & bit(*i) == 0)
            .map(|(i, t)| (i, t.seq.expect("a committed row has its seq")))
            .collect();
        rows.sort_by_key(|&(_, seq)| seq);
        rows
    }

    /// The committed rows visible in `snapshot` and still in the outbox, in `seq` order.
    pub fn rows_in(&self, snapshot: Snapshot) -> Vec<(usize, u8)> {
        let mut rows = self.rows();
        rows.retain(|&(i, _)| snapshot.sees(i));
        rows
    }

    /// A receipt or an exception.
    pub fn handled(&self, tx: usize) -> bool {
        (self.receipts | self.exceptions) & bit(tx) != 0
    }

    /// The committed rows.
    pub fn committed(&self) -> Mask {
        self.txs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.phase == Phase::Committed)
            .fold(0, |m, (i, _)| m | bit(i))
    }

    fn visit_xids(&mut self, f: &mut dyn FnMut(&mut Xid)) {
        f(&mut self.latest);
        for tx in &mut self.txs {
            if let Some(xid) = &mut tx.xid {
                f(xid);
            }
        }
        if let Some(wm) = &mut self.wm {
            if let Some((_, x)) = &mut wm.candidate {
                f(&mut x.latest);
            }
            f(&mut wm.high_snapshot.latest);
            f(&mut wm.swept.latest);
        }
        if let Some(run) = &mut self.run {
            for batch in &mut run.batches {
                f(&mut batch.snapshot.latest);
            }
        }
    }

    /// Renumbers the xids the state holds to dense ranks ([`crate::pg`]).
    pub fn compact(&mut self) {
        let mut values = Vec::new();
        self.visit_xids(&mut |x| values.push(*x));
        compact(&mut values);
        self.visit_xids(&mut |x| *x = rank(&values, *x));
        self.next = values.len() as Xid;
    }
}
