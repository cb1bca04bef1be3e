//! The relay's fetch, marks and purge, each a step mirroring its statement in
//! `crates/store/src/watermark.rs`: the fetch is `PENDING_ABOVE_SQL` (own rows above P
//! visible in the statement's snapshot, none of the exceptions, `ORDER BY seq LIMIT`),
//! the mark `MARK_RECEIPTS_SQL` (receipts and `high` in one statement; the sweep's
//! rule also sets `high_snapshot`), an exception sent later is `mark_receipts` with
//! `excepted` rows (receipt in, exception out), and the purge is `purge_range` (the
//! range from the oldest receipt at or below the floor, its top cut by the retention).
//! Each returns whether it applied; the due exceptions, which the real fetch takes in
//! the same statement, are a step of their own here.

use crate::bounds::{Model, Rule};
use crate::pg::bit;
use crate::state::{Batch, State};

/// The fetch: the rows above P visible in its statement snapshot F, none of the
/// exceptions (nor, with `skip_receipts`, a row with a receipt), in `seq` order, at
/// most `limit`; P := the batch's greatest `seq`. With `skip_receipts`, a fetch not
/// cut by its limit saw every row above P: P moves past the receipts above it too,
/// and with no row to send the batch is empty (its mark moves `high` alone and keeps
/// `high_snapshot`: the store's fetch carries its snapshot on its first row). A fetch
/// that moves nothing changes nothing. With `hold` (and `holds`), the batch's last
/// row of at least two is held: it becomes an exception at once, in the fetch's
/// transaction, and the batch sends the others, P past it all the same.
pub fn fetch(m: &Model, s: &mut State, hold: bool) -> bool {
    if hold && !m.holds {
        return false;
    }
    let snapshot = s.snapshot();
    let skip = s.exceptions | if m.skip_receipts { s.receipts } else { 0 };
    let rows: Vec<(usize, u8)> = s
        .rows_in(snapshot)
        .into_iter()
        .filter(|&(i, _)| skip & bit(i) == 0)
        .collect();
    let Some(run) = &mut s.run else { return false };
    if run.batches.len() >= m.in_flight as usize {
        return false;
    }
    let batch: Vec<(usize, u8)> = rows
        .into_iter()
        .filter(|&(_, seq)| seq > run.p)
        .take(m.limit as usize)
        .collect();
    let passed = if m.skip_receipts && batch.len() < m.limit as usize {
        (0..s.txs.len())
            .filter(|&i| s.receipts & bit(i) != 0 && s.purged & bit(i) == 0)
            .filter_map(|i| s.txs[i].seq)
            .filter(|&seq| seq > run.p)
            .max()
    } else {
        None
    };
    if hold && batch.len() < 2 {
        return false;
    }
    let Some(max) = batch.last().map(|&(_, seq)| seq).max(passed) else {
        return false;
    };
    run.p = max;
    let mut rows = batch.iter().fold(0, |m, &(i, _)| m | bit(i));
    if hold {
        let (last, _) = batch[batch.len() - 1];
        rows &= !bit(last);
        s.exceptions |= bit(last);
        s.relay_write();
    }
    let run = s.run.as_mut().expect("checked above");
    run.batches.push(Batch {
        rows,
        max,
        snapshot,
    });
    true
}

/// The oldest batch's mark, in fetch order: its receipts, and `high := greatest(high,
/// batch max)`; under the sweep's rule also `high_snapshot := F` when the batch's max
/// is at or above `high`.
pub fn mark(m: &Model, s: &mut State) -> bool {
    let Some(run) = &mut s.run else { return false };
    if run.batches.is_empty() {
        return false;
    }
    let batch = run.batches.remove(0);
    s.twice |= s.receipts & batch.rows;
    s.receipts |= batch.rows;
    s.delivered |= batch.rows;
    let wm = s.wm.as_mut().expect("a run has its watermark");
    if m.rule != Rule::Today && batch.max >= wm.high && batch.rows != 0 {
        wm.high_snapshot = batch.snapshot;
    }
    wm.high = wm.high.max(batch.max);
    s.relay_write();
    true
}

/// An exception sent (the exception path, any time in a run): its receipt in, the
/// exception out, in one transaction.
pub fn send_exception(s: &mut State, tx: usize) -> bool {
    if s.run.is_none() || s.exceptions & bit(tx) == 0 {
        return false;
    }
    s.exceptions &= !bit(tx);
    s.receipts |= bit(tx);
    s.delivered |= bit(tx);
    s.relay_write();
    true
}

/// The receipts at or below the floor, by `seq`.
fn receipts_below_floor(s: &State) -> Vec<u8> {
    let floor = s.wm.map_or(0, |w| w.floor);
    let mut seqs: Vec<u8> = (0..s.txs.len())
        .filter(|&i| s.receipts & bit(i) != 0)
        .filter_map(|i| s.txs[i].seq)
        .filter(|&seq| seq <= floor)
        .collect();
    seqs.sort_unstable();
    seqs
}

/// The tops a purge's range may have: the retention (abstracted: any delivered row may
/// be purged any time after it is below the floor) cuts the range just below any
/// receipt but the first (`min(seq) FILTER (WHERE published_at >= cutoff) - 1`), or
/// at the last (`max(seq)`). The purge's `limit` is taken as larger than the model.
pub fn purge_tops(s: &State) -> Vec<u8> {
    let seqs = receipts_below_floor(s);
    let mut tops: Vec<u8> = seqs.iter().skip(1).map(|&r| r - 1).collect();
    tops.extend(seqs.last());
    tops.sort_unstable();
    tops.dedup();
    tops.retain(|&hi| hi >= seqs[0]);
    tops
}

/// The purge of the range [oldest receipt at or below the floor, `hi`]. Today's rule
/// deletes every own row of the range but the exceptions (`DELETE FROM crm.outbox …
/// NOT IN exceptions`), with or without a receipt; the sweep's rule deletes a row only
/// with its receipt and makes a committed unhandled row of the range a 'late'
/// exception ("found below the floor"). The receipts whose row is gone go too.
pub fn purge(m: &Model, s: &mut State, hi: u8) -> bool {
    let seqs = receipts_below_floor(s);
    let (Some(&lo), true) = (seqs.first(), s.run.is_some()) else {
        return false;
    };
    if !purge_tops(s).contains(&hi) {
        return false;
    }
    let range: Vec<usize> = s
        .rows()
        .into_iter()
        .filter(|&(_, seq)| lo <= seq && seq <= hi)
        .map(|(i, _)| i)
        .collect();
    for i in range {
        let b = bit(i);
        if s.exceptions & b != 0 {
            continue;
        }
        match m.rule {
            Rule::Today => {
                if s.receipts & b == 0 {
                    s.lost |= b;
                }
                s.purged |= b;
            }
            Rule::Sweep | Rule::NeverMoveFloor | Rule::SweepTopNow => {
                if s.receipts & b != 0 {
                    s.purged |= b;
                } else {
                    s.exceptions |= b;
                }
            }
        }
    }
    s.receipts &= !s.purged;
    s.relay_write();
    true
}
