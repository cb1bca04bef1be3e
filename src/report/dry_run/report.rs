//! What a rendering of the plan is handed: the [`Scope`] of the report, the [`Counts`]
//! of each phase, and the [`Report`] it implements (`table`, `json`).

use anyhow::Result;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::config::{Batch, Topics};
use crate::domain::{BookingRow, Phase};
use crate::render::Stdout;
use crate::store::{BatchWrite, Poison, Quarantined};

/// What the report is about: one cycle, or every candidate, at AsOf.
pub(super) struct Scope {
    pub(super) run_id: Uuid,
    pub(super) as_of: DateTime<Utc>,
    /// Candidates per phase one cycle takes; `None` with `--all`.
    pub(super) limit: Option<i64>,
    pub(super) batch: Batch,
    /// The contract versions a cycle would publish each expiry in (`--topics`).
    pub(super) topics: Topics,
}

/// What a cycle at AsOf would do in one phase, counted as it is printed.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub(super) candidates: u64,
    pub(super) would_expire: u64,
    pub(super) rejected: u64,
    pub(super) quarantined: u64,
    pub(super) left_for_later: u64,
}

/// How the plan is printed, in the order it is read: per phase its expiries (chunk by
/// chunk), then the guard's refusals, then the quarantined rows (chunk by chunk), then
/// the phase's end; at last the end of the report.
pub(super) trait Report {
    fn expiries(
        &mut self,
        s: &Scope,
        phase: Phase,
        writes: &[BatchWrite],
        out: &mut Stdout,
    ) -> Result<()>;
    fn expiries_done(&mut self, s: &Scope, phase: Phase, out: &mut Stdout) -> Result<()>;
    fn rejected(
        &mut self,
        s: &Scope,
        phase: Phase,
        rejected: &[(BookingRow, Poison)],
        out: &mut Stdout,
    ) -> Result<()>;
    fn quarantined(
        &mut self,
        s: &Scope,
        phase: Phase,
        q: &[Quarantined],
        out: &mut Stdout,
    ) -> Result<()>;
    fn phase_done(
        &mut self,
        s: &Scope,
        phase: Phase,
        counts: &Counts,
        listed_in_quarantine: u64,
        out: &mut Stdout,
    ) -> Result<()>;
    fn end(&mut self, s: &Scope, phases: &[(Phase, Counts)], out: &mut Stdout) -> Result<()>;
}
