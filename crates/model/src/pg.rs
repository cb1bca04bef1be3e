//! PostgreSQL's side of the model: transaction ids in assignment order, the latest
//! completed one, and the snapshots `pg_current_snapshot()` returns, as the server
//! computes them (`GetSnapshotData`): `xmax` = latest completed xid + 1, the in-progress
//! list = the running xids below `xmax`, `xmin` = the least of them (else `xmax`). A
//! running xid at or above `xmax` is in no list and invisible all the same.
//!
//! A snapshot is kept as `latest` (its `xmax` - 1) and `ended`: the writer transactions
//! that had ended when it was taken. A committed transaction's rows are visible in it
//! exactly when it had ended then (`pg_visible_in_snapshot` of its xid: below `xmax` and
//! not in progress). The relay's own transactions (marks, checks, purges) take xids
//! too and end at once, which moves `latest`; the model renumbers every xid it holds to
//! dense ranks after each step ([`compact`]), so that the endless stream of relay xids
//! keeps the state space finite while every comparison between held xids stays as it was.

/// A transaction id (a rank among the xids the state holds).
pub type Xid = u8;

/// A set of writer transactions, by their index (at most 8).
pub type Mask = u8;

/// The bit of writer transaction `tx` in a [`Mask`].
pub fn bit(tx: usize) -> Mask {
    1 << tx
}

/// A snapshot as `pg_current_snapshot()` returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// The latest completed xid when it was taken: `pg_snapshot_xmax` - 1.
    pub latest: Xid,
    /// The writer transactions (with an xid) that had ended when it was taken.
    pub ended: Mask,
}

impl Snapshot {
    /// Whether a committed writer transaction's rows are visible in this snapshot.
    pub fn sees(self, tx: usize) -> bool {
        self.ended & bit(tx) != 0
    }

    /// Whether this snapshot was taken no earlier than `other` (a later snapshot has a
    /// `latest` at least as high and every transaction `other` saw ended).
    pub fn not_older_than(self, other: Snapshot) -> bool {
        self.latest >= other.latest && self.ended & other.ended == other.ended
    }

    /// Whether this snapshot is newer than `other`: taken later and not the same
    /// (`pg_snapshot_xmax` higher, or the same with a shorter in-progress list).
    pub fn newer_than(self, other: Snapshot) -> bool {
        self.not_older_than(other) && self != other
    }

    /// Whether `pg_snapshot_xmax` of this snapshot is higher than `other`'s.
    pub fn xmax_higher(self, other: Snapshot) -> bool {
        self.latest > other.latest
    }
}

/// The dense ranks of `values` (sorted, without repeats): each xid the state holds is
/// replaced by its rank, which keeps every `<`, `<=` and `==` between them.
pub fn compact(values: &mut Vec<Xid>) {
    values.sort_unstable();
    values.dedup();
}

/// The rank of `xid` among the compacted `values`.
pub fn rank(values: &[Xid], xid: Xid) -> Xid {
    values.binary_search(&xid).expect("every xid was collected") as Xid
}
