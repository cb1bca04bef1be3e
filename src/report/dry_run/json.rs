//! The plan as JSON lines, one per event, refusal and quarantined row, then a summary.

use anyhow::Result;
use serde::Serialize;
use uuid::Uuid;

use super::report::{Counts, Report, Scope};
use crate::domain::{BookingRow, Phase, rfc3339};
use crate::render::{self, Stdout};
use crate::store::{BatchWrite, Poison, Quarantined};

/// One JSON line per expiry, refusal and quarantined row, as each is read; the summary
/// line last, from the counts.
pub(super) struct JsonLines;

fn json_line(out: &mut Stdout, value: &impl Serialize) -> Result<()> {
    out.json(value)
}

impl Report for JsonLines {
    fn expiries(
        &mut self,
        s: &Scope,
        phase: Phase,
        writes: &[BatchWrite],
        out: &mut Stdout,
    ) -> Result<()> {
        // One line per event: per expiry, one per topic a cycle would publish it on.
        for (w, event) in writes
            .iter()
            .flat_map(|w| w.events.iter().map(move |ev| (w, ev)))
        {
            let e = &w.expiry;
            json_line(
                out,
                &ExpiryLine {
                    phase: phase.as_str(),
                    booking_id: e.booking_id,
                    tenant_id: e.tenant_id,
                    deal_id: e.deal_id,
                    from: e.from.as_str(),
                    to: e.to.as_str(),
                    deadline: rfc3339(e.deadline),
                    overdue_by_seconds: render::seconds_since(s.as_of, e.deadline),
                    topic: event.topic,
                    event: &event.payload,
                    headers: &event.headers,
                },
            )?;
        }
        Ok(())
    }

    fn expiries_done(&mut self, _: &Scope, _: Phase, _: &mut Stdout) -> Result<()> {
        Ok(())
    }

    fn rejected(
        &mut self,
        _: &Scope,
        phase: Phase,
        rejected: &[(BookingRow, Poison)],
        out: &mut Stdout,
    ) -> Result<()> {
        for (row, poison) in rejected {
            json_line(
                out,
                &RejectedLine {
                    phase: phase.as_str(),
                    booking_id: row.id,
                    tenant_id: row.tenant_id,
                    deal_id: row.deal_id,
                    status: &row.status,
                    deadline: row.deadline(phase).map(rfc3339),
                    rejected: poison.reason,
                    error: &poison.error,
                },
            )?;
        }
        Ok(())
    }

    fn quarantined(
        &mut self,
        s: &Scope,
        phase: Phase,
        q: &[Quarantined],
        out: &mut Stdout,
    ) -> Result<()> {
        for q in q {
            let row = &q.booking;
            json_line(
                out,
                &QuarantinedLine {
                    phase: phase.as_str(),
                    booking_id: row.id,
                    tenant_id: row.tenant_id,
                    deal_id: row.deal_id,
                    status: &row.status,
                    deadline: row.deadline(phase).map(rfc3339),
                    overdue_by_seconds: row
                        .deadline(phase)
                        .map(|d| render::seconds_since(s.as_of, d)),
                    quarantined: Quarantine {
                        reason: &q.reason,
                        error: &q.error,
                        attempts: q.attempts,
                        retry_at: rfc3339(q.retry_at),
                    },
                },
            )?;
        }
        Ok(())
    }

    fn phase_done(
        &mut self,
        _: &Scope,
        _: Phase,
        _: &Counts,
        _: u64,
        _: &mut Stdout,
    ) -> Result<()> {
        Ok(())
    }

    fn end(&mut self, s: &Scope, phases: &[(Phase, Counts)], out: &mut Stdout) -> Result<()> {
        let phase = |phase: Phase| {
            let (_, c) = phases
                .iter()
                .find(|(p, _)| *p == phase)
                .expect("every phase is planned");
            PhaseSummary {
                would_expire: c.would_expire,
                rejected: c.rejected,
                quarantined: c.quarantined,
                left_for_later_cycles: c.left_for_later,
            }
        };
        json_line(
            out,
            &SummaryLine {
                summary: Summary {
                    run_id: s.run_id,
                    as_of: rfc3339(s.as_of),
                    all: s.limit.is_none(),
                    per_phase_limit: s.limit,
                    reserve: phase(Phase::Reserve),
                    booking: phase(Phase::Booking),
                },
            },
        )
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ExpiryLine<'a> {
    phase: &'static str,
    booking_id: Uuid,
    tenant_id: Uuid,
    deal_id: Uuid,
    from: &'a str,
    to: &'a str,
    deadline: String,
    overdue_by_seconds: f64,
    topic: &'a str,
    event: &'a serde_json::value::RawValue,
    headers: &'a serde_json::value::RawValue,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RejectedLine<'a> {
    phase: &'static str,
    booking_id: Uuid,
    tenant_id: Uuid,
    deal_id: Uuid,
    status: &'a str,
    deadline: Option<String>,
    rejected: &'a str,
    error: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct QuarantinedLine<'a> {
    phase: &'static str,
    booking_id: Uuid,
    tenant_id: Uuid,
    deal_id: Uuid,
    status: &'a str,
    deadline: Option<String>,
    overdue_by_seconds: Option<f64>,
    quarantined: Quarantine<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Quarantine<'a> {
    reason: &'a str,
    error: &'a str,
    attempts: i32,
    retry_at: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SummaryLine {
    summary: Summary,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Summary {
    run_id: Uuid,
    as_of: String,
    all: bool,
    per_phase_limit: Option<i64>,
    reserve: PhaseSummary,
    booking: PhaseSummary,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PhaseSummary {
    would_expire: u64,
    rejected: u64,
    quarantined: u64,
    left_for_later_cycles: u64,
}
