//! The read: everything the judgement and the report need about one booking, in one
//! READ ONLY transaction of plain SELECTs (no lock taken, none waited on).

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{BookingRow, OutboxTypes};
use crate::exit::{ClassifyExt, Failure};
use crate::preflight::Paused;
use crate::store::ops::{AuditEntry, OutboxEntry, PoisonEntry, RowLock, TimelineEntry};
use crate::store::{self, ops};

/// What was read of one booking.
pub(super) struct Facts {
    pub(super) booking: Option<BookingRow>,
    pub(super) poison: Option<PoisonEntry>,
    pub(super) lock: Option<RowLock>,
    /// The pause of run-once, if it is switched off.
    pub(super) paused: Option<Paused>,
    pub(super) audit: Vec<AuditEntry>,
    pub(super) timeline: Vec<TimelineEntry>,
    pub(super) outbox: Vec<OutboxEntry>,
}

/// The booking's outbox rows read are those of `types` (the job's).
pub(super) fn read(
    client: &mut Session,
    id: Uuid,
    as_of: DateTime<Utc>,
    types: &OutboxTypes,
) -> Result<Facts> {
    let mut tx = store::begin_read_only(client)
        .classify(Failure::Temporary, "cannot begin a read-only transaction")?;
    let booking = ops::booking(&mut tx, id)?;
    let poison = ops::poison_of(&mut tx, id)?;
    let lock = ops::row_lock(&mut tx, id)?;
    let paused = ops::pauses(&mut tx)?
        .iter()
        .find(|p| p.command == "run-once")
        .map(|p| Paused::of(p, as_of));
    let audit = ops::audit_of(&mut tx, id)?;
    let timeline = match &booking {
        Some(b) => ops::timeline_of(&mut tx, b.deal_id, id)?,
        None => Vec::new(),
    };
    let outbox = ops::outbox_of_booking(&mut tx, id, types)?;
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;
    Ok(Facts {
        booking,
        poison,
        lock,
        paused,
        audit,
        timeline,
        outbox,
    })
}
