//! The bounds of a check and the switches between the rules: which floor rule the relay
//! runs, how many writer sessions and transactions, the sequence's CACHE, the order of
//! `seq` and xid, prepared transactions and rollbacks, the fetch's limit, the batches in
//! flight and the relay's crashes.

use std::fmt;

use crate::state::State;

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

/// When the sweep takes top as past W ("skip if top is not newer than W").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Moved {
    /// Taken later and not the same snapshot (the rule as written).
    Newer,
    /// Not older: `pg_snapshot_xmax(W) <= pg_snapshot_xmax(top)` and no xid of top's
    /// in-progress list that W saw ended (the store's `WINDOW_BOUNDS_SQL`).
    NotOlder,
    /// `pg_snapshot_xmax(top) > pg_snapshot_xmax(W)` alone.
    XmaxHigher,
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
    /// The sweep's test of top against W.
    pub moved: Moved,
    /// Every sweep, not only the first, also takes the unhandled rows of (floor, high]
    /// it sees as 'late' (the seq window the store's sweep keeps beside the commit
    /// window).
    pub seq_window: bool,
    /// A fetch may hold its last row as an exception (a row behind an older row of its
    /// key, or of a topic that cannot take it), written by the fetch, not the mark
    /// ([`crate::step::Action::FetchHold`]).
    pub holds: bool,
    /// The fetch skips the rows above P that have a receipt (the store's `settling`:
    /// a held row sent as an exception before its batch's mark moved `high` past it).
    pub skip_receipts: bool,
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
            moved: Moved::Newer,
            seq_window: false,
            holds: false,
            skip_receipts: true,
        }
    }

    pub fn init(&self) -> State {
        State::new(&self.sessions)
    }
}

impl Model {
    /// The rule, with the sweep's variant when it is not the rule as written.
    fn rule_name(&self) -> String {
        let mut name = format!("{:?}", self.rule);
        if self.rule != Rule::Today && self.moved != Moved::Newer {
            name.push_str(&format!(" (top past W: {:?})", self.moved));
        }
        if self.rule != Rule::Today && self.seq_window {
            name.push_str(" (+ the seq window each sweep)");
        }
        if self.holds {
            name.push_str(if self.skip_receipts {
                " (fetches hold rows; the fetch skips receipts above P)"
            } else {
                " (fetches hold rows; the fetch does not skip receipts above P)"
            });
        }
        name
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: u8 = self.sessions.iter().sum();
        write!(
            f,
            "rule {}: {} writer sessions {:?} ({rows} rows, one per transaction), CACHE {}, \
             seq/xid order {:?}, prepare {}, rollback {}, fetch limit {}, {} batches in \
             flight, {} relay crashes",
            self.rule_name(),
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
