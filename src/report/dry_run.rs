//! `dry-run --as-of T`: what a cycle at moment T would expire, which events it would
//! publish, and what the guard would refuse. The same candidate query as the claim of
//! `run-once` (without its lock) and the same domain decision, `cycle::decide`; only
//! the write is skipped.

use std::collections::HashMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use postgres::Client;
use serde::Serialize;
use uuid::Uuid;

use super::format::{self, Table};
use crate::cli::{AsOf, DryRunArgs};
use crate::config::{Batch, DbConfig};
use crate::cycle;
use crate::domain::{BookingRow, Phase, TOPIC, rfc3339};
use crate::exit::{ClassifyExt, Failure};
use crate::shutdown;
use crate::store::{self, BatchWrite, Need, Poison, Quarantined};

/// What a cycle at AsOf would do in one phase.
struct PhasePlan {
    phase: Phase,
    /// The expiries, in claim order, each with the exact event it would publish.
    writes: Vec<BatchWrite>,
    /// Candidates the guard would refuse, with the row they were read as.
    rejected: Vec<(BookingRow, Poison)>,
    /// Overdue rows the cycle leaves alone because they are quarantined.
    quarantined: Vec<Quarantined>,
    quarantined_total: u64,
    /// Candidates beyond what this cycle would claim.
    left_for_later: u64,
}

struct Plan {
    run_id: Uuid,
    as_of: DateTime<Utc>,
    /// Candidates per phase one cycle takes; `None` with `--all`.
    limit: Option<i64>,
    phases: Vec<PhasePlan>,
}

/// `dry-run --as-of T`.
pub fn dry_run(args: &DryRunArgs, run_id: Uuid) -> Result<()> {
    let db_cfg = DbConfig::from_args(&args.database)?;
    let batch = Batch::from(&args.batch);
    // run-once claims up to max_batches × batch_size per phase, oldest deadline first,
    // batch after batch; one query with their product as the limit reads the same rows.
    let limit = (!args.all).then(|| i64::from(batch.size) * i64::from(batch.max_batches));
    let as_of = match args.as_of {
        AsOf::Now => cycle::system_as_of(),
        AsOf::At(at) => at,
    };
    let per_phase = limit.map_or_else(|| "all".to_owned(), |n| n.to_string());
    info!(as_of:% = rfc3339(as_of), per_phase:% = per_phase; "dry run started: nothing will be written");

    let mut db = store::connect(&db_cfg)?;
    shutdown::on_signal(db.interrupter());
    store::check_schema(&mut db.client, Need::Report)?;
    let plan = read_plan(&mut db.client, run_id, as_of, limit)
        .map_err(|e| super::explain(e, "dry-run"))?;

    let text = if args.json {
        json_lines(&plan)?
    } else {
        table(&plan, batch)
    };
    format::print(&text)
}

fn read_plan(
    client: &mut Client,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    limit: Option<i64>,
) -> Result<Plan> {
    let mut tx = store::begin_read_only(client)
        .classify(Failure::Temporary, "cannot begin a read-only transaction")?;
    let mut phases = Vec::new();
    for phase in Phase::ALL {
        let rows = store::candidates(&mut tx, phase, as_of, limit)?;
        // A short read means there is nothing beyond it; only a full one needs a count.
        let left_for_later = match limit {
            Some(n) if rows.len() as i64 >= n => {
                store::count_candidates(&mut tx, phase, as_of)?.saturating_sub(rows.len() as u64)
            }
            _ => 0,
        };
        let (writes, poison) = cycle::decide(&rows, phase, as_of, run_id);
        let by_id: HashMap<Uuid, &BookingRow> = rows.iter().map(|r| (r.id, r)).collect();
        let rejected = poison
            .into_iter()
            .map(|p| (by_id[&p.booking_id].clone(), p))
            .collect();
        let (quarantined, quarantined_total) = store::quarantined(&mut tx, phase, as_of, limit)?;
        info!(phase:% = phase, would_expire = writes.len(), candidates = rows.len(),
              quarantined = quarantined_total; "dry run: phase read");
        phases.push(PhasePlan {
            phase,
            writes,
            rejected,
            quarantined,
            quarantined_total,
            left_for_later,
        });
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;
    Ok(Plan {
        run_id,
        as_of,
        limit,
        phases,
    })
}

fn table(plan: &Plan, batch: Batch) -> String {
    let mut out = String::new();
    let scope = match plan.limit {
        Some(n) => format!(
            "one cycle, up to {n} candidates per phase (--batch-size {} × --max-batches {})",
            batch.size, batch.max_batches
        ),
        None => "every candidate (--all)".to_owned(),
    };
    out.push_str(&format!(
        "dry-run at AsOf {}: {scope}; nothing is written\n",
        rfc3339(plan.as_of)
    ));
    for p in &plan.phases {
        let phase = p.phase;
        out.push('\n');
        if p.writes.is_empty() {
            out.push_str(&format!("{phase} phase: nothing would expire\n"));
        } else {
            out.push_str(&format!("{phase} phase: would expire\n"));
            let mut t = Table::new(&[
                "BookingId",
                "TenantId",
                "DealId",
                "Status",
                "Deadline",
                "OverdueBy",
            ]);
            for w in &p.writes {
                let e = &w.expiry;
                t.row(vec![
                    e.booking_id.to_string(),
                    e.tenant_id.to_string(),
                    e.deal_id.to_string(),
                    format!("{} → {}", e.from, e.to),
                    format::time(e.deadline),
                    format::duration(plan.as_of - e.deadline),
                ]);
            }
            t.render(&mut out);
        }
        if !p.rejected.is_empty() {
            out.push_str(&format!(
                "{phase} phase: the guard would reject (run-once quarantines these)\n"
            ));
            let mut t = Table::new(&[
                "BookingId",
                "TenantId",
                "DealId",
                "Status",
                "Deadline",
                "Reason",
                "Error",
            ]);
            for (row, poison) in &p.rejected {
                t.row(vec![
                    row.id.to_string(),
                    row.tenant_id.to_string(),
                    row.deal_id.to_string(),
                    row.status.clone(),
                    row.deadline(phase).map_or("-".to_owned(), format::time),
                    poison.reason.to_owned(),
                    poison.error.clone(),
                ]);
            }
            t.render(&mut out);
        }
        if !p.quarantined.is_empty() {
            out.push_str(&format!(
                "{phase} phase: overdue but in quarantine as poison (not claimed before RetryAt)\n"
            ));
            let mut t = Table::new(&[
                "BookingId",
                "TenantId",
                "DealId",
                "Status",
                "Deadline",
                "OverdueBy",
                "Reason",
                "Attempts",
                "RetryAt",
            ]);
            for q in &p.quarantined {
                let row = &q.booking;
                t.row(vec![
                    row.id.to_string(),
                    row.tenant_id.to_string(),
                    row.deal_id.to_string(),
                    row.status.clone(),
                    row.deadline(phase).map_or("-".to_owned(), format::time),
                    row.deadline(phase)
                        .map_or("-".to_owned(), |d| format::duration(plan.as_of - d)),
                    q.reason.clone(),
                    q.attempts.to_string(),
                    format::time(q.retry_at),
                ]);
            }
            t.render(&mut out);
            let more = p.quarantined_total - p.quarantined.len() as u64;
            if more > 0 {
                out.push_str(&format!(
                    "… and {more} more in quarantine (--all lists every one)\n"
                ));
            }
        }
        out.push_str(&format!(
            "{phase}: {} would expire, {} rejected by the guard, {} in quarantine, \
             {} left for later cycles (AsOf {})\n",
            p.writes.len(),
            p.rejected.len(),
            p.quarantined_total,
            p.left_for_later,
            rfc3339(plan.as_of)
        ));
    }
    out
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
    event: &'a serde_json::Value,
    headers: &'a serde_json::Value,
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

fn push_line(out: &mut String, value: &impl Serialize) -> Result<()> {
    out.push_str(&serde_json::to_string(value)?);
    out.push('\n');
    Ok(())
}

fn json_lines(plan: &Plan) -> Result<String> {
    let mut out = String::new();
    let summary = |p: &PhasePlan| PhaseSummary {
        would_expire: p.writes.len() as u64,
        rejected: p.rejected.len() as u64,
        quarantined: p.quarantined_total,
        left_for_later_cycles: p.left_for_later,
    };
    for p in &plan.phases {
        let phase = p.phase;
        let name = phase.as_str();
        for w in &p.writes {
            let e = &w.expiry;
            push_line(
                &mut out,
                &ExpiryLine {
                    phase: name,
                    booking_id: e.booking_id,
                    tenant_id: e.tenant_id,
                    deal_id: e.deal_id,
                    from: e.from.as_str(),
                    to: e.to.as_str(),
                    deadline: rfc3339(e.deadline),
                    overdue_by_seconds: format::seconds(plan.as_of - e.deadline),
                    topic: TOPIC,
                    event: &w.payload,
                    headers: &w.headers,
                },
            )?;
        }
        for (row, poison) in &p.rejected {
            push_line(
                &mut out,
                &RejectedLine {
                    phase: name,
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
        for q in &p.quarantined {
            let row = &q.booking;
            push_line(
                &mut out,
                &QuarantinedLine {
                    phase: name,
                    booking_id: row.id,
                    tenant_id: row.tenant_id,
                    deal_id: row.deal_id,
                    status: &row.status,
                    deadline: row.deadline(phase).map(rfc3339),
                    overdue_by_seconds: row
                        .deadline(phase)
                        .map(|d| format::seconds(plan.as_of - d)),
                    quarantined: Quarantine {
                        reason: &q.reason,
                        error: &q.error,
                        attempts: q.attempts,
                        retry_at: rfc3339(q.retry_at),
                    },
                },
            )?;
        }
    }
    let phase = |phase: Phase| {
        plan.phases
            .iter()
            .find(|p| p.phase == phase)
            .map(summary)
            .expect("every phase is planned")
    };
    push_line(
        &mut out,
        &SummaryLine {
            summary: Summary {
                run_id: plan.run_id,
                as_of: rfc3339(plan.as_of),
                all: plan.limit.is_none(),
                per_phase_limit: plan.limit,
                reserve: phase(Phase::Reserve),
                booking: phase(Phase::Booking),
            },
        },
    )?;
    Ok(out)
}
