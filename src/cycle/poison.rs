//! What a refused row becomes: the poison entry of an update the database dropped
//! without an error, and the quarantine of a booking whose own transaction fails.

use crate::store::Session;
use anyhow::Result;
use log::error;
use uuid::Uuid;

use super::types::{Batch, BatchOutcome, Lane};
use super::{logbook, schedule};
use crate::domain::{self, Phase};
use crate::exit::{ClassifyExt, Failure};
use crate::store::{self, BatchEnd, Poison};

/// The poison entries of the rows of `writes` that the write neither expired nor saw
/// refused: the database dropped their update without an error.
pub(super) fn dropped_updates(
    writes: &[domain::BatchWrite],
    written: &store::WriteOutcome,
    phase: Phase,
) -> Vec<Poison> {
    let done: std::collections::HashSet<Uuid> = written
        .expired
        .iter()
        .copied()
        .chain(
            written
                .rejected
                .iter()
                .map(|(i, _)| writes[*i].expiry.booking_id),
        )
        .collect();
    writes
        .iter()
        .filter(|w| !done.contains(&w.expiry.booking_id))
        .map(|w| Poison {
            booking_id: w.expiry.booking_id,
            tenant_id: w.expiry.tenant_id,
            version: w.expiry.expected_version,
            status: w.expiry.from.as_str().to_owned(),
            phase,
            reason: UPDATE_DROPPED,
            error: "the database changed nothing for the expiry's UPDATE of this locked row \
                    and raised no error: a BEFORE UPDATE trigger on crm.bookings returned NULL \
                    for it, or a rule rewrote the update; nothing was written or sent for it. \
                    Ask the owners of crm.bookings to let the job's update through"
                .to_owned(),
            sqlstate: None,
        })
        .collect()
}

/// The quarantine reason of an update the database dropped without an error.
pub(crate) const UPDATE_DROPPED: &str = "update_dropped";

/// Why the one booking of a batch taken `alone` failed, when the failure is the
/// booking's to carry: a server error while the session is open, no signal came and
/// the cycle's deadline has not passed (a statement the cycle cancelled says nothing
/// about the row). Anything else is the phase's failure.
pub(super) fn alone_refusal(
    client: &Session,
    b: &Batch,
    e: &anyhow::Error,
) -> Option<store::DbRejection> {
    let passed = schedule::passed(b.ends, b.cycle.now());
    if client.is_closed() || b.cycle.signal().is_some() || passed {
        return None;
    }
    crate::exit::store_error(e).and_then(store::StoreError::refusal)
}

/// Quarantines the booking `row` whose own transaction failed with `refusal` (the
/// failed transaction rolled back; a new one is open), in a transaction of its own, and
/// tells it like any other refused row.
pub(super) fn quarantine_alone(
    lane: &mut Lane,
    b: &Batch,
    row: &domain::BookingRow,
    refusal: store::DbRejection,
    at_commit: bool,
) -> Result<BatchOutcome> {
    let phase = b.phase;
    let error = if at_commit {
        format!("at COMMIT: {}", refusal.message)
    } else {
        refusal.message.clone()
    };
    let poison = Poison {
        booking_id: row.id,
        tenant_id: row.tenant_id,
        version: row.version,
        status: row.status.clone(),
        phase,
        reason: "database",
        error,
        sqlstate: Some(refusal.sqlstate.clone()),
    };
    let written = store::quarantine(
        lane.client,
        lane.stmts,
        b.cycle.run_id,
        b.cycle.as_of,
        std::slice::from_ref(&poison),
    );
    let end = if written.is_ok() {
        BatchEnd::Commit
    } else {
        BatchEnd::Rollback
    };
    let ended = store::end_and_chain(lane.client, end, None);
    written.map_err(|e| e.context(format!("{phase} batch: quarantine failed; rolled back")))?;
    ended.classify(
        Failure::Temporary,
        format!("{phase} batch: the quarantine's commit failed; rolled back"),
    )?;
    error!(BookingId:% = poison.booking_id, TenantId:% = poison.tenant_id, Phase:% = phase,
           SqlState = refusal.sqlstate.as_str(), Error = poison.error.as_str();
           "item failed: the booking's write fails on its own, quarantined");
    logbook::item_failed(poison.booking_id, poison.tenant_id, &poison.error);
    Ok(BatchOutcome {
        claimed: 1,
        last: row.deadline(phase).map(|d| (d, row.id)),
        poison: 1,
        ..BatchOutcome::default()
    })
}
