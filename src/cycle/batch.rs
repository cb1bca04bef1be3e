//! One batch of a phase in its own transaction, and what it did: the claim, the
//! domain's decision, the one-statement write (redone under savepoints when the
//! database refuses a row), the quarantine of the poison, the commit that chains the
//! next batch's transaction. SQL and transaction control are `store`'s.

use anyhow::Result;
use log::info;
use uuid::Uuid;

use super::types::{Batch, BatchOutcome, CycleResult, Lane, Staged};
use super::{logbook, poison};
use crate::domain::{self, Phase};
use crate::exit::{ClassifyExt, Failure};
use crate::obs::trace::{self, Attr};
use crate::store::{self, BatchEnd, ClaimKey, Poison};

/// What a batch's attempt left to know when it failed.
#[derive(Default)]
pub(super) struct Attempt {
    /// The first booking it claimed.
    pub(super) row: Option<domain::BookingRow>,
    /// The failure was the COMMIT's.
    pub(super) at_commit: bool,
}

/// One batch, counted into `result`; returns how many rows it claimed and the key of
/// the last one.
pub(super) fn run_one(
    lane: &mut Lane,
    b: &Batch,
    result: &mut CycleResult,
) -> Result<(usize, Option<ClaimKey>)> {
    let phase = b.phase;
    let span = trace::span("expire batch", vec![Attr::new("Phase", phase.to_string())]);
    let mut attempt = Attempt::default();
    let batch = match run_batch(lane, b, Isolation::OnRefusal, &mut attempt) {
        Ok(Some(batch)) => Ok(batch),
        Ok(None) => {
            info!(Phase:% = phase;
                  "the database refused a row of the batch; rolled back, redone with isolation");
            run_batch(lane, b, Isolation::Savepoints, &mut attempt).map(|b| {
                b.expect("a batch written with savepoints is never sent back for isolation")
            })
        }
        Err(e) => Err(e),
    };
    let batch = match batch {
        Ok(batch) => batch,
        Err(e) => match (
            b.alone,
            attempt.row.take(),
            poison::alone_refusal(lane.client, b, &e),
        ) {
            (true, Some(row), Some(refusal)) => {
                poison::quarantine_alone(lane, b, &row, refusal, attempt.at_commit)
                    .inspect_err(|e| span.fail(e))?
            }
            _ => {
                span.fail(&e);
                return Err(e);
            }
        },
    };
    span.set([
        Attr::new("Claimed", batch.claimed as i64),
        Attr::new("Expired", batch.expired as i64),
        Attr::new("Poison", batch.poison as i64),
        Attr::new("SkippedLocked", batch.skipped as i64),
    ]);
    drop(span);
    for seconds in &batch.lateness {
        result.lateness.observe(phase, *seconds);
    }
    match phase {
        Phase::Reserve => result.reserve_expired_count += batch.expired,
        Phase::Booking => result.booking_expired_count += batch.expired,
    }
    result.skipped_locked_count += batch.skipped;
    result.poison_count += batch.poison;
    Ok((batch.claimed, batch.last))
}

/// How a batch's write meets a row the database refuses (a trigger, a constraint).
#[derive(Clone, Copy, PartialEq)]
enum Isolation {
    /// One write statement, no savepoint; a refusal rolls the whole batch back and the
    /// caller redoes it with [`Isolation::Savepoints`]. The happy path: begin, claim,
    /// write, commit.
    OnRefusal,
    /// The write under savepoints, the refused rows isolated and quarantined, the rest
    /// written ([`store::write_isolating`]).
    Savepoints,
}

/// One batch in its own transaction, which the caller has begun (the first with
/// `BEGIN`, every later one chained by the batch before): the batch ends it with
/// `COMMIT AND CHAIN` (`store::end_and_chain`), which commits and begins the next
/// batch's transaction in the same round trip, or on any failure with `ROLLBACK AND
/// CHAIN`. The chained transaction holds no snapshot, lock or transaction id until its
/// first statement.
/// `Ok(None)`: with [`Isolation::OnRefusal`], the database refused a row; the batch
/// rolled back and nothing of it counts.
fn run_batch(
    lane: &mut Lane,
    b: &Batch,
    isolation: Isolation,
    attempt: &mut Attempt,
) -> Result<Option<BatchOutcome>> {
    let phase = b.phase;
    let outcome = batch_in_transaction(lane, b, isolation, attempt);
    let end = match &outcome {
        Ok(Some(_)) => BatchEnd::Commit,
        Ok(None) | Err(_) => BatchEnd::Rollback,
    };
    // The pause switch is read in the same round trip, for the next batch boundary;
    // not for a booking taken alone, whose failure at COMMIT is the booking's.
    let pause = if b.alone {
        None
    } else {
        b.cycle.pause.switch()
    };
    let ended = store::end_and_chain(lane.client, end, pause).map(|switch| lane.switch = switch);
    let staged = outcome?;
    attempt.at_commit = staged.is_some() && ended.is_err();
    let what = if staged.is_some() {
        "commit failed"
    } else {
        "rollback failed"
    };
    ended.classify(
        Failure::Temporary,
        format!("{phase} batch: {what}; the batch rolled back"),
    )?;
    // Committed: only now are its expiries and quarantined rows logged and counted.
    Ok(staged.map(|s| logbook::committed(s, phase)))
}

/// The batch's statements, in the transaction `run_batch` ends. Nothing is logged or
/// counted here: the transaction may still fail to commit.
fn batch_in_transaction(
    lane: &mut Lane,
    b: &Batch,
    isolation: Isolation,
    attempt: &mut Attempt,
) -> Result<Option<Staged>> {
    let &Batch {
        phase,
        after,
        limit,
        ..
    } = b;
    let (cfg, run_id, as_of) = (b.cycle.cfg, b.cycle.run_id, b.cycle.as_of);
    let stmts = lane.stmts;
    let context = |what: &str| format!("{phase} batch: {what}; the batch rolled back");
    let tx = &mut *lane.client;
    let claim = store::claim(tx, stmts, phase, as_of, limit, after)
        .map_err(|e| e.context(context("claim failed")))?;
    attempt.row = claim.rows.first().cloned();
    let last = claim.last_key(phase);
    let store::Claim {
        rows: claimed,
        skipped,
    } = claim;
    info!(Phase:% = phase, Count = claimed.len(), SkippedLocked = skipped; "batch selected");
    if claimed.is_empty() {
        // Nothing written: the commit that ends the transaction releases nothing.
        return Ok(Some(Staged {
            skipped,
            ..Staged::default()
        }));
    }

    let versions = cfg.topics.versions();
    let (mut writes, refused) =
        domain::decide(&claimed, phase, as_of, run_id, versions, &mut Uuid::now_v7);
    // While tracing is on, each event's parent is the batch that wrote it.
    let traceparent = trace::current_traceparent();
    if let Some(traceparent) = &traceparent {
        for e in writes.iter_mut().flat_map(|w| &mut w.events) {
            e.headers = domain::with_header(&e.headers, "traceparent", traceparent);
        }
    }
    let written = match isolation {
        Isolation::OnRefusal => {
            match store::write_direct(tx, stmts, run_id, as_of, &writes)
                .map_err(|e| e.context(context("write failed")))?
            {
                Ok(expired) => store::WriteOutcome {
                    expired,
                    rejected: Vec::new(),
                },
                // The transaction is aborted: `run_batch` rolls it back.
                Err(_) => return Ok(None),
            }
        }
        Isolation::Savepoints => store::write_isolating(tx, stmts, run_id, as_of, &writes)
            .map_err(|e| e.context(context("write failed")))?,
    };
    // Rows the write changed nothing for although the claim holds their lock: a BEFORE
    // UPDATE trigger returned NULL, or a rule rewrote the update. Refused like any
    // other, so that they are named, quarantined and shown by `explain`, not claimed
    // again every minute.
    let dropped = poison::dropped_updates(&writes, &written, phase);
    // The guard's refusals and the database's, quarantined in this transaction; they
    // are logged once it commits (`logbook::committed`).
    let mut poison = refused.clone();
    poison.extend(dropped.iter().cloned());
    for (index, rejection) in &written.rejected {
        let w = &writes[*index];
        poison.push(Poison {
            booking_id: w.expiry.booking_id,
            tenant_id: w.expiry.tenant_id,
            version: w.expiry.expected_version,
            status: w.expiry.from.as_str().to_owned(),
            phase,
            reason: "database",
            error: rejection.message.clone(),
            sqlstate: Some(rejection.sqlstate.clone()),
        });
    }
    store::quarantine(tx, stmts, run_id, as_of, &poison)
        .map_err(|e| e.context(context("quarantine failed")))?;
    Ok(Some(Staged {
        claimed: claimed.len(),
        last,
        skipped,
        writes,
        refused,
        dropped,
        written,
        traced: traceparent.is_some(),
    }))
}
