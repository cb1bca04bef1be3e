//! The plan as a table for people.

use anyhow::Result;
use uuid::Uuid;

use super::report::{Counts, Report, Scope};
use crate::domain::{BookingRow, Phase, rfc3339};
use crate::render::{
    self, SHORT_ID_WIDTH, Stdout, StreamTable, TIME_S_WIDTH, TIME_WIDTH, Table, UUID_WIDTH,
};
use crate::store::{BatchWrite, Poison, Quarantined};

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
pub(super) struct TableReport {
    /// Everything in full (`--wide`) instead of the layout that fits 120 columns.
    wide: bool,
    started: bool,
    /// The expiry table of the phase under way, once its heading is out.
    expiries: Option<StreamTable>,
    quarantined: Option<Table>,
    buf: String,
}

impl TableReport {
    pub(super) fn new(wide: bool) -> Self {
        TableReport {
            wide,
            ..TableReport::default()
        }
    }

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
        .map(|from| render::width(&format!("{from} → {to}")))
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
