//! The cycle's shared types, a leaf the other files of the cycle import: the cycle as
//! its batches see it, its result, a session's lane, a batch and what it did (staged,
//! then committed), and how the phases' batches ended. Nothing here imports another
//! file of the cycle.

use std::time::Instant;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::clock::Ambient;
use crate::config::RunOnceConfig;
use crate::domain::{self, Phase};
use crate::exit::{ClassifyExt, Failure};
use crate::obs::lateness::Lateness;
use crate::preflight::{PauseWatch, Paused};
use crate::store::{self, ClaimKey, CycleStatements, PauseRead, Poison, Session};

/// The result of a cycle, printed as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CycleResult {
    pub run_id: Uuid,
    pub as_of: String,
    pub reserve_expired_count: u64,
    pub booking_expired_count: u64,
    pub skipped_locked_count: u64,
    pub poison_count: u64,
    pub duration_ms: u64,
    /// Set when `run-once` is paused (`booking-expire pause run-once`): at the start
    /// (nothing ran), or while it worked (the counts are what committed before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// How late the committed expiries were, per phase (for the metrics push).
    #[serde(skip)]
    pub lateness: Lateness,
}

/// One cycle as its batches see it, whichever session runs them: the settings, the
/// run and its moment, what drives it (clocks, shutdown), when its budget began, and
/// the pause switch it watches.
#[derive(Clone, Copy)]
pub(super) struct Cycle<'a> {
    pub(super) cfg: &'a RunOnceConfig,
    pub(super) ambient: Ambient<'a>,
    pub(super) run_id: Uuid,
    pub(super) as_of: DateTime<Utc>,
    pub(super) started: Instant,
    pub(super) pause: PauseWatch,
}

impl Cycle<'_> {
    pub(super) fn now(&self) -> Instant {
        self.ambient.monotonic.now()
    }

    pub(super) fn elapsed(&self) -> std::time::Duration {
        self.ambient.monotonic.since(self.started)
    }

    pub(super) fn signal(&self) -> Option<i32> {
        self.ambient.shutdown.requested()
    }
}

/// One session's chain of batch transactions (see `store::begin_chain`), and the pause
/// switch as its last round trip read it.
pub(super) struct Lane<'s> {
    pub(super) client: &'s mut Session,
    pub(super) stmts: &'s CycleStatements,
    pub(super) switch: PauseRead,
}

impl<'s> Lane<'s> {
    /// Begins the session's chain, reading the pause switch in the same round trip.
    pub(super) fn begin(
        client: &'s mut Session,
        stmts: &'s CycleStatements,
        cycle: &Cycle,
    ) -> Result<Self> {
        let switch = store::begin_chain(client, cycle.pause.switch()).classify(
            Failure::Temporary,
            "cannot begin the first batch's transaction",
        )?;
        Ok(Lane {
            client,
            stmts,
            switch,
        })
    }

    /// The pause at this batch boundary: as the last round trip read it, or read now
    /// when it did not.
    pub(super) fn paused(&mut self, cycle: &Cycle) -> Result<Option<Paused>> {
        let now = cycle.ambient.clock.now();
        match self.switch.take() {
            Some(row) => Ok(row.map(|row| Paused::of(&row, now))),
            None => cycle.pause.check(self.client, now),
        }
    }
}

/// How the phases' batches ended so far.
#[derive(Default)]
pub(super) struct Drained {
    pub(super) first_error: Option<anyhow::Error>,
    /// The budget allowed no further batch while a phase was still open.
    pub(super) out_of_budget: bool,
    /// Nothing more may run: a signal, a lost connection, the budget spent, or a pause.
    pub(super) stopped: bool,
    /// `run-once` was paused while the cycle worked.
    pub(super) paused: Option<Paused>,
}

/// What a batch of a phase in a cycle is given: the cycle, the phase, and the key the
/// phase's previous batch in this cycle ended at.
pub(super) struct Batch<'a> {
    pub(super) cycle: &'a Cycle<'a>,
    pub(super) phase: Phase,
    pub(super) after: Option<ClaimKey>,
    /// How many bookings it claims: the batch size, or 1 when `alone`.
    pub(super) limit: u32,
    /// One booking in its own transaction: a failure of any kind, at any statement or
    /// at COMMIT, quarantines the booking (see `poison::quarantine_alone`).
    pub(super) alone: bool,
    /// The cycle's hard end (`None`: past what an `Instant` holds): a statement
    /// cancelled after it was cancelled by the cycle.
    pub(super) ends: Option<Instant>,
}

/// A batch written in its transaction, not yet committed: what to log once it is
/// (`logbook::committed`).
#[derive(Default)]
pub(super) struct Staged {
    pub(super) claimed: usize,
    pub(super) last: Option<ClaimKey>,
    pub(super) skipped: u64,
    pub(super) writes: Vec<domain::BatchWrite>,
    /// Rows the guard refused (quarantined with the batch).
    pub(super) refused: Vec<Poison>,
    /// Rows whose update the database dropped without an error (quarantined too).
    pub(super) dropped: Vec<Poison>,
    pub(super) written: store::WriteOutcome,
    pub(super) traced: bool,
}

/// What one batch did.
#[derive(Debug, Default)]
pub(super) struct BatchOutcome {
    pub(super) claimed: usize,
    /// The key of the last row claimed: where the phase's next batch starts.
    pub(super) last: Option<ClaimKey>,
    pub(super) expired: u64,
    pub(super) skipped: u64,
    pub(super) poison: u64,
    /// Seconds from deadline to AsOf of each committed expiry (at most the batch size).
    pub(super) lateness: Vec<f64>,
}
