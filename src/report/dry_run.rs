// Over 450 lines: two renderings (table, JSON lines) of one streamed plan, beside the walk that feeds them.
//! `dry-run --as-of T`: what a cycle at moment T would expire, which events it would
//! publish, and what the guard would refuse. The same candidate query as the claim of
//! `run-once` (without its lock) and the same domain decision, `domain::decide`; only
//! the write is skipped.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use postgres::{Client, Transaction};
use serde::Serialize;
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::{Batch, DryRunConfig, Topics};
use crate::domain::{self, BookingRow, Phase, rfc3339};
use crate::exit::{ClassifyExt, Failure};
use crate::render::{
    self, SHORT_ID_WIDTH, Stdout, StreamTable, TIME_S_WIDTH, TIME_WIDTH, Table, UUID_WIDTH,
};
use crate::shutdown;
use crate::store::{self, BatchWrite, CHUNK_ROWS, Need, Poison, Quarantined};

/// What the report is about: one cycle, or every candidate, at AsOf.
struct Scope {
    run_id: Uuid,
    as_of: DateTime<Utc>,
    /// Candidates per phase one cycle takes; `None` with `--all`.
    limit: Option<i64>,
    batch: Batch,
    /// The contract versions a cycle would publish each expiry in (`--topics`).
    topics: Topics,
}

/// What a cycle at AsOf would do in one phase, counted as it is printed.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    candidates: u64,
    would_expire: u64,
    rejected: u64,
    quarantined: u64,
    left_for_later: u64,
}

/// `dry-run --as-of T`.
pub fn dry_run(cfg: &DryRunConfig, run_id: Uuid, clock: &dyn Clock) -> Result<()> {
    let batch = cfg.batch;
    let limit = cfg.limit();
    let as_of = cfg.as_of.resolve(|| clock.now());
    let per_phase = limit.map_or_else(|| "all".to_owned(), |n| n.to_string());
    info!(as_of:% = rfc3339(as_of), per_phase:% = per_phase; "dry run started: nothing will be written");

    let mut db = store::connect(&cfg.db)?;
    shutdown::on_signal(db.interrupter());
    store::check_schema(&mut db.client, Need::Report)?;
    let scope = Scope {
        run_id,
        as_of,
        limit,
        batch,
        topics: cfg.topics.clone(),
    };
    // Printed as it is read, chunk by chunk, so memory stays flat whatever the number
    // of candidates. Nothing is printed before the first query has answered.
    let mut out = Stdout::new();
    let mut report: Box<dyn Report> = if cfg.json {
        Box::new(JsonLines)
    } else {
        Box::new(TableReport {
            wide: cfg.wide,
            ..TableReport::default()
        })
    };
    stream(&mut db.client, &scope, report.as_mut(), &mut out)
        .map_err(|e| super::read_failure::in_operator_words(e, "dry-run", &cfg.db))?;
    out.finish()
}

/// Reads and prints the plan of each phase in one READ ONLY snapshot: the candidates
/// through a portal in chunks of [`CHUNK_ROWS`], each chunk decided by
/// `domain::decide` and printed before the next is read; the guard's refusals (rare)
/// are held until the phase's expiries are out; the quarantined rows follow.
fn stream(
    client: &mut Client,
    scope: &Scope,
    report: &mut dyn Report,
    out: &mut Stdout,
) -> Result<()> {
    let mut tx = store::begin_read_only(client)
        .classify(Failure::Temporary, "cannot begin a read-only transaction")?;
    let mut phases = Vec::new();
    for phase in Phase::ALL {
        let counts = stream_phase(&mut tx, scope, phase, report, out)?;
        if out.closed() {
            break;
        }
        info!(phase:% = phase, would_expire = counts.would_expire,
              candidates = counts.candidates, quarantined = counts.quarantined;
              "dry run: phase read");
        phases.push((phase, counts));
    }
    if !out.closed() {
        report.end(scope, &phases, out)?;
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;
    Ok(())
}

fn stream_phase(
    tx: &mut Transaction<'_>,
    scope: &Scope,
    phase: Phase,
    report: &mut dyn Report,
    out: &mut Stdout,
) -> Result<Counts> {
    let mut counts = Counts::default();
    let mut rejected = Vec::new();
    store::candidates_in_chunks(tx, phase, scope.as_of, scope.limit, CHUNK_ROWS, |rows| {
        counts.candidates += rows.len() as u64;
        // The dry run's own message ids, time-ordered as run-once's are.
        let (writes, poison) = domain::decide(
            &rows,
            phase,
            scope.as_of,
            scope.run_id,
            scope.topics.versions(),
            &mut Uuid::now_v7,
        );
        counts.would_expire += writes.len() as u64;
        counts.rejected += poison.len() as u64;
        if !poison.is_empty() {
            let by_id: HashMap<Uuid, &BookingRow> = rows.iter().map(|r| (r.id, r)).collect();
            rejected.extend(
                poison
                    .into_iter()
                    .map(|p| (by_id[&p.booking_id].clone(), p)),
            );
        }
        report.expiries(scope, phase, &writes, out)?;
        Ok(!out.closed())
    })?;
    if out.closed() {
        return Ok(counts);
    }
    // A short read means there is nothing beyond it; only a full one needs a count.
    counts.left_for_later = match scope.limit {
        Some(n) if counts.candidates as i64 >= n => {
            store::count_candidates(tx, phase, scope.as_of)?.saturating_sub(counts.candidates)
        }
        _ => 0,
    };
    report.expiries_done(scope, phase, out)?;
    report.rejected(scope, phase, &rejected, out)?;
    drop(rejected);
    let mut listed = 0;
    counts.quarantined =
        store::quarantined_in_chunks(tx, phase, scope.as_of, scope.limit, CHUNK_ROWS, |q| {
            listed += q.len() as u64;
            report.quarantined(scope, phase, &q, out)?;
            Ok(!out.closed())
        })?;
    if !out.closed() {
        report.phase_done(scope, phase, &counts, listed, out)?;
    }
    Ok(counts)
}

/// How the plan is printed, in the order it is read: per phase its expiries (chunk by
/// chunk), then the guard's refusals, then the quarantined rows (chunk by chunk), then
/// the phase's end; at last the end of the report.
trait Report {
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

/// The table for people. Its first lines go out with the first output, after the
/// first query has answered; the expiries stream under columns whose widths are known
/// up front (see [`expiry_table`]); the few refused and quarantined rows are collected
/// per phase and aligned to their widest cell, as before.
///
/// By default every line fits [`render::SCREEN_WIDTH`] (120) columns: ids by their
/// first characters, times at whole seconds, a status cut to the longest known one,
/// and the reason and error of a refused or quarantined row on a line of its own under
/// it, cut with `…`. `--wide` shows all of it in full, in columns.
#[derive(Default)]
struct TableReport {
    /// Everything in full (`--wide`) instead of the layout that fits 120 columns.
    wide: bool,
    started: bool,
    /// The expiry table of the phase under way, once its heading is out.
    expiries: Option<StreamTable>,
    quarantined: Option<Table>,
    buf: String,
}

impl TableReport {
    /// An id as the table shows it: in full with `--wide`, else its first characters,
    /// so the expiry table fits 120 columns.
    fn id(&self, id: Uuid) -> String {
        if self.wide {
            id.to_string()
        } else {
            render::short_id(id)
        }
    }

    /// A moment as the table shows it: microseconds with `--wide`, else whole seconds.
    fn time(&self, at: impl Into<crate::domain::Timestamp>) -> String {
        if self.wide {
            render::time(at)
        } else {
            render::time_s(at)
        }
    }

    /// A booking's status cell: in full with `--wide`, else cut to the longest status
    /// the job knows (`AwaitingPayment`), which only a status it does not know exceeds.
    fn status(&self, status: &str) -> String {
        if self.wide {
            status.to_owned()
        } else {
            render::fit(status, STATUS_WIDTH)
        }
    }

    /// Writes what `fill` puts in the buffer, after the report's first line if it is
    /// not out yet.
    fn write(&mut self, s: &Scope, out: &mut Stdout, fill: impl FnOnce(&mut String)) -> Result<()> {
        self.buf.clear();
        if !self.started {
            self.started = true;
            let what = match s.limit {
                Some(n) => format!(
                    "one cycle, up to {n} candidates per phase (--batch-size {} × --max-batches {})",
                    s.batch.size, s.batch.max_batches
                ),
                None => "every candidate (--all)".to_owned(),
            };
            self.buf.push_str(&format!(
                "dry-run at AsOf {}; nothing is written\n{what}\n",
                rfc3339(s.as_of)
            ));
        }
        fill(&mut self.buf);
        out.text(&self.buf)
    }
}

/// The longest status the job knows, `AwaitingPayment`: a status cell's width in the
/// default layout.
const STATUS_WIDTH: usize = 15;

/// The expiries of a phase: every column's width is known before the first row (ids,
/// the phase's transitions, [`render::time`] at microseconds or [`render::time_s`]);
/// OverdueBy, the last column, needs none.
fn expiry_table(phase: Phase, wide: bool) -> StreamTable {
    let (id, time) = if wide {
        (UUID_WIDTH, TIME_WIDTH)
    } else {
        (SHORT_ID_WIDTH, TIME_S_WIDTH)
    };
    let to = phase.expired_status();
    let status = phase
        .active_statuses()
        .iter()
        .map(|from| format!("{from} → {to}").chars().count())
        .max()
        .unwrap_or(0);
    StreamTable::new(&[
        ("BookingId", id),
        ("TenantId", id),
        ("DealId", id),
        ("Status", status),
        ("Deadline", time),
        ("OverdueBy", 0),
    ])
}

impl Report for TableReport {
    fn expiries(
        &mut self,
        s: &Scope,
        phase: Phase,
        writes: &[BatchWrite],
        out: &mut Stdout,
    ) -> Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut table = self.expiries.take();
        let wide = self.wide;
        let rows: Vec<[String; 4]> = writes
            .iter()
            .map(|w| {
                let e = &w.expiry;
                [
                    self.id(e.booking_id),
                    self.id(e.tenant_id),
                    self.id(e.deal_id),
                    self.time(e.deadline),
                ]
            })
            .collect();
        self.write(s, out, |buf| {
            let t = table.get_or_insert_with(|| {
                buf.push_str(&format!("\n{phase} phase: would expire\n"));
                let t = expiry_table(phase, wide);
                t.header(buf);
                t
            });
            for (w, [booking, tenant, deal, deadline]) in writes.iter().zip(rows) {
                let e = &w.expiry;
                t.row(
                    &[
                        booking,
                        tenant,
                        deal,
                        format!("{} → {}", e.from, e.to),
                        deadline,
                        render::since(s.as_of, e.deadline),
                    ],
                    buf,
                );
            }
        })?;
        self.expiries = table;
        Ok(())
    }

    fn expiries_done(&mut self, s: &Scope, phase: Phase, out: &mut Stdout) -> Result<()> {
        if self.expiries.take().is_some() {
            return Ok(());
        }
        self.write(s, out, |buf| {
            buf.push_str(&format!("\n{phase} phase: nothing would expire\n"));
        })
    }

    fn rejected(
        &mut self,
        s: &Scope,
        phase: Phase,
        rejected: &[(BookingRow, Poison)],
        out: &mut Stdout,
    ) -> Result<()> {
        if rejected.is_empty() {
            return Ok(());
        }
        let headers: &[&'static str] = if self.wide {
            &[
                "BookingId",
                "TenantId",
                "DealId",
                "Status",
                "Deadline",
                "Reason",
                "Error",
            ]
        } else {
            &["BookingId", "TenantId", "DealId", "Status", "Deadline"]
        };
        let mut t = Table::new(headers);
        for (row, poison) in rejected {
            let mut cells = vec![
                self.id(row.id),
                self.id(row.tenant_id),
                self.id(row.deal_id),
                self.status(&row.status),
                row.deadline(phase).map_or("-".to_owned(), |d| self.time(d)),
            ];
            if self.wide {
                cells.extend([poison.reason.to_owned(), one_line(&poison.error)]);
                t.row(cells);
            } else {
                t.row(cells);
                t.note(reason_note(poison.reason, &poison.error));
            }
        }
        self.write(s, out, |buf| {
            buf.push_str(&format!(
                "{phase} phase: the guard would reject (run-once quarantines these)\n"
            ));
            t.render(buf);
        })
    }

    fn quarantined(
        &mut self,
        s: &Scope,
        phase: Phase,
        q: &[Quarantined],
        _out: &mut Stdout,
    ) -> Result<()> {
        let wide = self.wide;
        let rows: Vec<Vec<String>> = q
            .iter()
            .map(|q| {
                let row = &q.booking;
                let deadline = row.deadline(phase);
                let mut cells = vec![
                    self.id(row.id),
                    self.id(row.tenant_id),
                    self.id(row.deal_id),
                    self.status(&row.status),
                    deadline.map_or("-".to_owned(), |d| self.time(d)),
                    deadline.map_or("-".to_owned(), |d| render::since(s.as_of, d)),
                ];
                if wide {
                    cells.push(q.reason.clone());
                }
                cells.extend([q.attempts.to_string(), self.time(q.retry_at)]);
                if wide {
                    cells.push(one_line(&q.error));
                }
                cells
            })
            .collect();
        let t = self.quarantined.get_or_insert_with(|| {
            let mut headers = vec![
                "BookingId",
                "TenantId",
                "DealId",
                "Status",
                "Deadline",
                "OverdueBy",
            ];
            if wide {
                headers.push("Reason");
            }
            headers.extend(["Attempts", "RetryAt"]);
            if wide {
                headers.push("Error");
            }
            Table::new(&headers)
        });
        for (q, cells) in q.iter().zip(rows) {
            t.row(cells);
            if !wide {
                t.note(reason_note(&q.reason, &q.error));
            }
        }
        Ok(())
    }

    fn phase_done(
        &mut self,
        s: &Scope,
        phase: Phase,
        counts: &Counts,
        listed_in_quarantine: u64,
        out: &mut Stdout,
    ) -> Result<()> {
        let quarantined = self.quarantined.take();
        // The AsOf is in the report's first line; the default layout leaves it out here
        // so the line fits 120 columns.
        let as_of = if self.wide {
            format!(" (AsOf {})", rfc3339(s.as_of))
        } else {
            String::new()
        };
        self.write(s, out, |buf| {
            if let Some(t) = quarantined {
                buf.push_str(&format!(
                    "{phase} phase: overdue but in quarantine as poison (not claimed before RetryAt)\n"
                ));
                t.render(buf);
                let more = counts.quarantined.saturating_sub(listed_in_quarantine);
                if more > 0 {
                    buf.push_str(&format!(
                        "… and {more} more in quarantine (--all lists every one)\n"
                    ));
                }
            }
            buf.push_str(&format!(
                "{phase}: {} would expire, {} rejected by the guard, {} in quarantine, \
                 {} left for later cycles{as_of}\n",
                counts.would_expire,
                counts.rejected,
                counts.quarantined,
                counts.left_for_later,
            ));
        })
    }

    fn end(&mut self, _: &Scope, _: &[(Phase, Counts)], _: &mut Stdout) -> Result<()> {
        Ok(())
    }
}

/// An error in full on one line (`--wide`): a line break would split the table's row.
fn one_line(error: &str) -> String {
    render::fit(error, usize::MAX)
}

/// The line under a refused or quarantined row in the default layout: its reason and
/// error, cut to fit.
fn reason_note(reason: &str, error: &str) -> String {
    if error.is_empty() {
        render::note(reason)
    } else {
        render::note(&format!("{reason}: {error}"))
    }
}

/// One JSON line per expiry, refusal and quarantined row, as each is read; the summary
/// line last, from the counts.
struct JsonLines;

fn json_line(out: &mut Stdout, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n").map_err(render::write_error)
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
