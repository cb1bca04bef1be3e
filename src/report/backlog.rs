//! `backlog`: how far behind the job is. Per phase, the active bookings whose deadline
//! has passed, the oldest of them, and how late the booking the next cycle claims first
//! already is; the poison rows still waiting; the outbox's pending rows, the oldest of
//! them, and the rows the relay gave up on; the database's upkeep (`hygiene.rs`). A
//! table, one JSON object, or Prometheus gauges; `--fail-above N` turns it into a probe.
//! The outbox's figures are the job's own rows (`--outbox-types`); other producers' rows
//! of a shared outbox are shown apart, never in the job's figures nor its verdict.

use anyhow::Result;
use serde::Serialize;

use crate::clock::Clock;
use crate::config::BacklogConfig;
use crate::config::ReportFormat;
use crate::domain::{Phase, Timestamp, rfc3339};
use crate::exit::{Failure, fail};
use crate::obs::exposition::Exposition;
use crate::obs::gauges;
use crate::preflight::Defence;
use crate::render::{self, Table};
use crate::shutdown::Shutdown;
use crate::store::{
    self, Backlog, BacklogScope, NextClaim, OtherRows, OutboxLag, Overdue, SchemaNeed, TopicWait,
};

/// The figures of the report: all of them were read.
fn overdue(b: &Backlog) -> &[(Phase, Overdue)] {
    b.overdue.as_deref().unwrap_or_default()
}

fn overdue_total(b: &Backlog) -> u64 {
    overdue(b).iter().map(|(_, o)| o.count).sum()
}

fn outbox(b: &Backlog) -> OutboxLag {
    b.outbox.unwrap_or(OutboxLag {
        pending: 0,
        oldest_pending_at: None,
        failed: 0,
        waiting_for_topic: 0,
        late: 0,
    })
}

/// The relay's fact about `topic`, when it found the topic unable to take its rows.
fn topic_wait<'b>(b: &'b Backlog, topic: &str) -> Option<&'b TopicWait> {
    b.topic_waits.iter().flatten().find(|w| w.topic == topic)
}

/// The other producers' rows of the outbox (read for the report).
fn others(b: &Backlog) -> OtherRows {
    b.others.unwrap_or(OtherRows {
        pending: 0,
        failed: 0,
    })
}

/// The booking `phase`'s next claim takes first, if any is overdue and claimable.
fn next_claim(b: &Backlog, phase: Phase) -> Option<NextClaim> {
    b.next_claims
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|(p, _)| *p == phase)
        .and_then(|(_, c)| *c)
}

fn age(b: &Backlog, oldest: Option<Timestamp>) -> Option<f64> {
    oldest.map(|at| render::seconds_since(b.as_of, at))
}

/// `backlog`.
pub(crate) fn backlog(cfg: &BacklogConfig, clock: &dyn Clock, shutdown: &Shutdown) -> Result<()> {
    let mut db = store::connect(&cfg.db)?;
    shutdown.on_signal(db.interrupter());
    store::check_schema(&mut db.client, SchemaNeed::Report)?;
    let defence =
        crate::preflight::check_row_security(&mut db.client, "backlog", &cfg.outbox_types)?;
    // The cycle's clock: "overdue" here means what the next run-once would see as such.
    let as_of = clock.now();
    let threshold = chrono::TimeDelta::from_std(cfg.xmin_horizon_age)
        .expect("--xmin-horizon-age is at most 7 days");
    let report = store::read_report(
        &mut db.client,
        as_of,
        BacklogScope::All,
        &cfg.outbox_types,
        Some(threshold),
    )
    .map_err(|e| super::read_failure::in_operator_words(e.into(), "backlog", &cfg.db, shutdown))?;

    render::print(&match cfg.format {
        ReportFormat::Table => table(&report, defence),
        ReportFormat::Json => json(&report, defence)?,
        ReportFormat::Prometheus => prometheus(&report),
    })?;
    let total = overdue_total(&report);
    match cfg.fail_above {
        Some(limit) if total > limit => Err(fail(
            Failure::Threshold,
            format!("overdue bookings {total} exceed --fail-above {limit}"),
        )),
        _ => Ok(()),
    }
}

fn table(b: &Backlog, defence: Defence) -> String {
    let mut out = format!("backlog at {}\n\n", rfc3339(b.as_of));
    let mut t = Table::new(&["Backlog", "Count", "Oldest", "Age"]);
    let dash = || "-".to_owned();
    let oldest = |at: Option<Timestamp>| {
        at.map_or((dash(), dash()), |at| {
            (render::time(at), render::since(b.as_of, at))
        })
    };
    for (phase, o) in overdue(b) {
        let (at, age) = oldest(o.oldest_deadline);
        t.row(vec![
            format!("overdue {phase}"),
            o.count.to_string(),
            at,
            age,
        ]);
    }
    t.row(vec![
        "overdue total".into(),
        overdue_total(b).to_string(),
        dash(),
        dash(),
    ]);
    for phase in Phase::ALL {
        let (at, late) = oldest(next_claim(b, phase).map(|c| c.deadline));
        t.row(vec![format!("next claim {phase}"), "-".into(), at, late]);
    }
    t.row(vec![
        "poison (active, isolated)".into(),
        b.poison.unwrap_or_default().to_string(),
        dash(),
        dash(),
    ]);
    let outbox = outbox(b);
    let (at, age) = oldest(outbox.oldest_pending_at);
    t.row(vec![
        "outbox pending".into(),
        outbox.pending.to_string(),
        at,
        age,
    ]);
    t.row(vec![
        "outbox failed".into(),
        outbox.failed.to_string(),
        dash(),
        dash(),
    ]);
    if let Some(o) = b.others.filter(|o| o.pending + o.failed > 0) {
        t.row(vec![
            "other producers' outbox rows pending".into(),
            o.pending.to_string(),
            dash(),
            dash(),
        ]);
        t.note(render::note(&format!(
            "other producers' rows in the outbox: {} pending and {} failed by this job's \
             columns, not this job's",
            o.pending, o.failed
        )));
        t.note(render::note(
            "of types not in --outbox-types: never sent, marked, purged, nor counted above",
        ));
    }
    if let Some(sweep) = &b.sweep {
        let (at, age) = oldest(sweep.swept_at);
        t.row(vec![
            format!("relay floor (seq {}, high {})", sweep.floor, sweep.high),
            sweep.in_progress.to_string(),
            at,
            age,
        ]);
        t.note(render::note(
            "relay floor: Count is the transactions in progress at its last sweep (their \
             rows, at any seq, are read when they commit); Age is since it last moved",
        ));
    }
    if outbox.late > 0 {
        t.row(vec![
            "outbox late (committed below rows already relayed)".into(),
            outbox.late.to_string(),
            dash(),
            dash(),
        ]);
    }
    if outbox.waiting_for_topic > 0 {
        t.row(vec![
            "outbox waiting for a missing topic".into(),
            outbox.waiting_for_topic.to_string(),
            dash(),
            dash(),
        ]);
    }
    for w in b.waiting.as_deref().unwrap_or_default() {
        t.row(vec![
            format!("outbox waiting, topic {}", render::fit(&w.topic, 64)),
            w.waiting.to_string(),
            dash(),
            dash(),
        ]);
        t.note(render::note(&match w.next_due {
            Some(due) => {
                let due_in = due
                    .until(b.as_of)
                    .map_or_else(|| "never".to_owned(), |d| render::duration(-d));
                format!(
                    "the next is due at {} (in {due_in}); {} of them wait for their topic, the \
                     others out a back-off",
                    render::time(due),
                    w.waiting_for_topic
                )
            }
            None => format!(
                "{} of them wait for their topic; they go on the relay's first run after it \
                 can take them",
                w.waiting_for_topic
            ),
        }));
        if let Some(wait) = topic_wait(b, &w.topic) {
            t.note(render::note(&format!(
                "the topic waits since {} (checked {}): {}",
                render::time(wait.since),
                render::time(wait.checked_at),
                wait.reason
            )));
        }
    }
    for p in &b.pauses {
        t.row(vec![
            format!("PAUSED {}", p.command),
            "-".into(),
            render::time(p.paused_at),
            render::duration(b.as_of - p.paused_at),
        ]);
    }
    t.render(&mut out);
    out.push('\n');
    out.push_str(match defence {
        Defence::On => {
            "row security on crm.outbox: on (other producers' rows are hidden from this role)\n"
        }
        Defence::Off => {
            "row security on crm.outbox: off (the job's roles may reach every producer's rows)\n"
        }
        Defence::NotBinding => {
            "row security on crm.outbox: on, but not for this role (it reaches every row)\n"
        }
    });
    for p in &b.pauses {
        // Wrapped to 120 columns (the reason is the operator's text, of any length);
        // the command that ends the pause is never split.
        out.push('\n');
        let said = render::wrap(
            &format!(
                "{} is paused since {} by {}: {}",
                p.command,
                render::time(p.paused_at),
                p.paused_by,
                p.reason
            ),
            "",
            "  ",
        );
        let resume = format!("(booking-expire resume {})", p.command);
        let last = said.trim_end().rsplit('\n').next().unwrap_or_default();
        if render::width(last) + 1 + render::width(&resume) <= render::SCREEN_WIDTH {
            out.push_str(said.trim_end());
            out.push_str(&format!(" {resume}\n"));
        } else {
            out.push_str(&said);
            out.push_str(&format!("  {resume}\n"));
        }
    }
    let claims: Vec<_> = Phase::ALL
        .iter()
        .filter_map(|p| next_claim(b, *p).map(|c| (*p, c)))
        .collect();
    if !claims.is_empty() {
        out.push('\n');
    }
    for (phase, c) in claims {
        // The full id once, in the command that explains it: the line fits 120 columns.
        out.push_str(&format!(
            "next {phase} claim, {} late: booking-expire explain {}\n",
            render::since(b.as_of, c.deadline),
            c.booking_id
        ));
    }
    if let Some(h) = &b.hygiene {
        super::hygiene::table(h, b.as_of, &mut out);
    }
    out
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Json {
    as_of: String,
    overdue_total: u64,
    reserve: PhaseJson,
    booking: PhaseJson,
    poison: u64,
    outbox: OutboxJson,
    /// Other producers' rows of a shared outbox, by the job's columns: not the job's,
    /// never in `Outbox`.
    outbox_other_producers: OtherProducersJson,
    /// Whether crm.outbox's row security narrows this role: `on`, `off`, `not-binding`.
    outbox_row_security: &'static str,
    /// The pause switches that are on; empty when both commands run.
    paused: Vec<crate::preflight::Paused>,
    hygiene: Option<super::hygiene::Json>,
    /// The relay's sweep; null before migration 17 or the relay's first run.
    relay_floor: Option<RelayFloorJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RelayFloorJson {
    floor: i64,
    high: i64,
    /// When the relay last swept and moved the floor.
    swept_at: Option<String>,
    swept_age_seconds: Option<f64>,
    /// Transactions in progress at that sweep: their rows, at any `seq`, are read when
    /// they commit.
    in_progress: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PhaseJson {
    overdue: u64,
    oldest_deadline: Option<String>,
    oldest_age_seconds: Option<f64>,
    /// The booking the next claim takes first, and how late it is.
    next_claim: Option<NextClaimJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NextClaimJson {
    booking_id: String,
    deadline: String,
    lateness_seconds: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct OutboxJson {
    pending: u64,
    oldest_pending_at: Option<String>,
    oldest_pending_age_seconds: Option<f64>,
    failed: u64,
    /// Pending rows whose topic is missing or unusable (see their `last_error`).
    waiting_for_topic: u64,
    /// Of the pending rows, those committed below rows the relay already relayed: found
    /// late, or not swept yet (the relay's own state; 0 on the columns).
    late: u64,
    /// Per topic, the pending rows not due yet and when the first is due; empty when
    /// none waits.
    waiting: Vec<WaitingJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct OtherProducersJson {
    pending: u64,
    failed: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct WaitingJson {
    topic: String,
    waiting: u64,
    waiting_for_topic: u64,
    /// When the first back-off ends; null when the rows wait for the topic alone.
    next_due: Option<String>,
    /// Why the topic cannot take its rows, as the relay last found it; absent when it
    /// can (the rows back off, or an older relay marked them).
    #[serde(skip_serializing_if = "Option::is_none")]
    topic_wait: Option<TopicWaitJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TopicWaitJson {
    reason: String,
    since: String,
    checked_at: String,
}

fn json(b: &Backlog, defence: Defence) -> Result<String> {
    let phase = |phase: Phase| {
        let o = overdue(b)
            .iter()
            .find(|(p, _)| *p == phase)
            .map(|(_, o)| *o)
            .expect("every phase is read");
        PhaseJson {
            overdue: o.count,
            oldest_deadline: o.oldest_deadline.map(rfc3339),
            oldest_age_seconds: age(b, o.oldest_deadline),
            next_claim: next_claim(b, phase).map(|c| NextClaimJson {
                booking_id: c.booking_id.to_string(),
                deadline: rfc3339(c.deadline),
                lateness_seconds: render::seconds_since(b.as_of, c.deadline),
            }),
        }
    };
    let outbox = outbox(b);
    let json = Json {
        as_of: rfc3339(b.as_of),
        overdue_total: overdue_total(b),
        reserve: phase(Phase::Reserve),
        booking: phase(Phase::Booking),
        poison: b.poison.unwrap_or_default(),
        outbox: OutboxJson {
            pending: outbox.pending,
            oldest_pending_at: outbox.oldest_pending_at.map(rfc3339),
            oldest_pending_age_seconds: age(b, outbox.oldest_pending_at),
            failed: outbox.failed,
            waiting_for_topic: outbox.waiting_for_topic,
            late: outbox.late,
            waiting: b
                .waiting
                .as_deref()
                .unwrap_or_default()
                .iter()
                .map(|w| WaitingJson {
                    topic: w.topic.clone(),
                    waiting: w.waiting,
                    waiting_for_topic: w.waiting_for_topic,
                    next_due: w.next_due.map(rfc3339),
                    topic_wait: topic_wait(b, &w.topic).map(|t| TopicWaitJson {
                        reason: t.reason.clone(),
                        since: rfc3339(t.since),
                        checked_at: rfc3339(t.checked_at),
                    }),
                })
                .collect(),
        },
        outbox_other_producers: OtherProducersJson {
            pending: others(b).pending,
            failed: others(b).failed,
        },
        outbox_row_security: defence.as_str(),
        paused: b
            .pauses
            .iter()
            .map(|p| crate::preflight::Paused::of(p, b.as_of))
            .collect(),
        hygiene: b.hygiene.as_ref().map(|h| super::hygiene::json(h, b.as_of)),
        relay_floor: b.sweep.map(|s| RelayFloorJson {
            floor: s.floor,
            high: s.high,
            swept_at: s.swept_at.map(rfc3339),
            swept_age_seconds: age(b, s.swept_at),
            in_progress: s.in_progress,
        }),
    };
    render::json_line(&json)
}

/// The text exposition format: the families the push after a run uses, the same names
/// and help texts.
fn prometheus(b: &Backlog) -> String {
    let mut out = Exposition::default();
    gauges::backlog_gauges(&mut out, &super::backlog_figures::backlog(b));
    gauges::paused_gauges(&mut out, &super::backlog_figures::paused(b));
    out.per_phase(crate::obs::backlog_only::BACKLOG_LATENESS, |phase| {
        next_claim(b, phase).map_or(0.0, |c| render::seconds_since(b.as_of, c.deadline).max(0.0))
    });
    let others = others(b);
    out.labelled(
        crate::obs::backlog_only::OUTBOX_OTHER_PRODUCERS,
        &[
            (vec![("state", "pending")], others.pending as f64),
            (vec![("state", "failed")], others.failed as f64),
        ],
    );
    if let Some(h) = &b.hygiene {
        super::hygiene::prometheus(h, b.as_of, &mut out);
    }
    out.into_text()
}
