//! `backlog`: how far behind the job is. Per phase, the active bookings whose deadline
//! has passed and the oldest of them; the poison rows still waiting; the outbox's
//! pending rows, the oldest of them, and the rows the relay gave up on. A table, one
//! JSON object, or Prometheus gauges; `--fail-above N` turns it into a probe.

use crate::clock::Clock;
use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::Client;
use serde::Serialize;

use super::format::{self, Table};
use crate::cli::{BacklogArgs, ReportFormat};
use crate::config::DbConfig;
use crate::domain::{Phase, rfc3339};
use crate::exit::{ClassifyExt, Failure, fail};
use crate::shutdown;
use crate::store::{self, Need, OutboxLag, Overdue};

struct Backlog {
    as_of: DateTime<Utc>,
    overdue: Vec<(Phase, Overdue)>,
    poison: u64,
    outbox: OutboxLag,
    /// The pause switches that are on (`booking-expire pause`).
    pauses: Vec<store::ops::PauseRow>,
}

impl Backlog {
    fn overdue_total(&self) -> u64 {
        self.overdue.iter().map(|(_, o)| o.count).sum()
    }

    fn age(&self, oldest: Option<DateTime<Utc>>) -> Option<f64> {
        oldest.map(|at| format::seconds(self.as_of - at))
    }
}

/// `backlog`.
pub fn backlog(args: &BacklogArgs) -> Result<()> {
    let format = if args.json {
        ReportFormat::Json
    } else {
        args.format
    };
    let db_cfg = DbConfig::from_args(&args.database)?;
    let mut db = store::connect(&db_cfg)?;
    shutdown::on_signal(db.interrupter());
    store::check_schema(&mut db.client, Need::Report)?;
    // The cycle's clock: "overdue" here means what the next run-once would see as such.
    let as_of = crate::clock::SystemClock.now();
    let report = read(&mut db.client, as_of).map_err(|e| super::explain(e, "backlog"))?;

    format::print(&match format {
        ReportFormat::Table => table(&report),
        ReportFormat::Json => json(&report)?,
        ReportFormat::Prometheus => prometheus(&report),
    })?;
    let total = report.overdue_total();
    match args.fail_above {
        Some(limit) if total > limit => Err(fail(
            Failure::Threshold,
            format!("overdue bookings {total} exceed --fail-above {limit}"),
        )),
        _ => Ok(()),
    }
}

fn read(client: &mut Client, as_of: DateTime<Utc>) -> Result<Backlog> {
    let mut tx = store::begin_read_only(client)
        .classify(Failure::Temporary, "cannot begin a read-only transaction")?;
    let mut overdue = Vec::new();
    for phase in Phase::ALL {
        overdue.push((phase, store::overdue(&mut tx, phase, as_of)?));
    }
    let poison = store::poison_count(&mut tx)?;
    let outbox = store::outbox_lag(&mut tx)?;
    let pauses = store::ops::pauses(&mut tx)?;
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;
    Ok(Backlog {
        as_of,
        overdue,
        poison,
        outbox,
        pauses,
    })
}

fn table(b: &Backlog) -> String {
    let mut out = format!("backlog at {}\n\n", rfc3339(b.as_of));
    let mut t = Table::new(&["Backlog", "Count", "Oldest", "Age"]);
    let dash = || "-".to_owned();
    let oldest = |at: Option<DateTime<Utc>>| {
        at.map_or((dash(), dash()), |at| {
            (format::time(at), format::duration(b.as_of - at))
        })
    };
    for (phase, o) in &b.overdue {
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
        b.overdue_total().to_string(),
        dash(),
        dash(),
    ]);
    t.row(vec![
        "poison (active, isolated)".into(),
        b.poison.to_string(),
        dash(),
        dash(),
    ]);
    let (at, age) = oldest(b.outbox.oldest_pending_at);
    t.row(vec![
        "outbox pending".into(),
        b.outbox.pending.to_string(),
        at,
        age,
    ]);
    t.row(vec![
        "outbox failed".into(),
        b.outbox.failed.to_string(),
        dash(),
        dash(),
    ]);
    for p in &b.pauses {
        t.row(vec![
            format!("PAUSED {}", p.command),
            "-".into(),
            format::time(p.paused_at),
            format::duration(b.as_of - p.paused_at),
        ]);
    }
    t.render(&mut out);
    for p in &b.pauses {
        out.push_str(&format!(
            "\n{} is paused since {} by {}: {} (booking-expire resume {})",
            p.command,
            format::time(p.paused_at),
            p.paused_by,
            p.reason,
            p.command
        ));
    }
    if !b.pauses.is_empty() {
        out.push('\n');
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
    /// The pause switches that are on; empty when both commands run.
    paused: Vec<crate::ops::pause::Paused>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PhaseJson {
    overdue: u64,
    oldest_deadline: Option<String>,
    oldest_age_seconds: Option<f64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct OutboxJson {
    pending: u64,
    oldest_pending_at: Option<String>,
    oldest_pending_age_seconds: Option<f64>,
    failed: u64,
}

fn json(b: &Backlog) -> Result<String> {
    let phase = |phase: Phase| {
        let o = b
            .overdue
            .iter()
            .find(|(p, _)| *p == phase)
            .map(|(_, o)| *o)
            .expect("every phase is read");
        PhaseJson {
            overdue: o.count,
            oldest_deadline: o.oldest_deadline.map(rfc3339),
            oldest_age_seconds: b.age(o.oldest_deadline),
        }
    };
    let json = Json {
        as_of: rfc3339(b.as_of),
        overdue_total: b.overdue_total(),
        reserve: phase(Phase::Reserve),
        booking: phase(Phase::Booking),
        poison: b.poison,
        outbox: OutboxJson {
            pending: b.outbox.pending,
            oldest_pending_at: b.outbox.oldest_pending_at.map(rfc3339),
            oldest_pending_age_seconds: b.age(b.outbox.oldest_pending_at),
            failed: b.outbox.failed,
        },
        paused: b
            .pauses
            .iter()
            .map(|p| crate::ops::pause::Paused::of(p, b.as_of))
            .collect(),
    };
    Ok(format!("{}\n", serde_json::to_string(&json)?))
}

/// The text exposition format. Ages are 0 when there is nothing to be old, so an alert
/// on them never sees a missing series.
fn prometheus(b: &Backlog) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(Option<Phase>, String)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for (phase, value) in samples {
            match phase {
                Some(phase) => out.push_str(&format!("{name}{{phase=\"{phase}\"}} {value}\n")),
                None => out.push_str(&format!("{name} {value}\n")),
            }
        }
    };
    let per_phase = |value: &dyn Fn(&Overdue) -> String| -> Vec<(Option<Phase>, String)> {
        b.overdue
            .iter()
            .map(|(phase, o)| (Some(*phase), value(o)))
            .collect()
    };
    gauge(
        "crm_booking_expiration_backlog",
        "Active bookings whose deadline has passed, per phase (poison rows included).",
        &per_phase(&|o| o.count.to_string()),
    );
    gauge(
        "crm_booking_expiration_backlog_oldest_age_seconds",
        "Seconds since the oldest overdue active booking's deadline, per phase (0 when none).",
        &per_phase(&|o| b.age(o.oldest_deadline).unwrap_or(0.0).to_string()),
    );
    gauge(
        "crm_booking_expiration_poison",
        "Active bookings isolated as poison: the cycle could not expire them and retries with back-off.",
        &[(None, b.poison.to_string())],
    );
    gauge(
        "crm_booking_expiration_outbox_pending",
        "Outbox rows not yet published to Kafka.",
        &[(None, b.outbox.pending.to_string())],
    );
    gauge(
        "crm_booking_expiration_outbox_oldest_pending_age_seconds",
        "Seconds since the oldest pending outbox row was written (0 when none).",
        &[(
            None,
            b.age(b.outbox.oldest_pending_at).unwrap_or(0.0).to_string(),
        )],
    );
    gauge(
        "crm_booking_expiration_outbox_failed",
        "Outbox rows the relay gave up on (e.g. too large to send).",
        &[(None, b.outbox.failed.to_string())],
    );
    out.push_str(
        "# HELP crm_booking_expiration_paused_seconds Seconds the step has been paused \
         (booking-expire pause), 0 when it runs.\n\
         # TYPE crm_booking_expiration_paused_seconds gauge\n",
    );
    for step in ["run-once", "relay-outbox"] {
        let paused = b
            .pauses
            .iter()
            .find(|p| p.command == step)
            .map_or(0.0, |p| format::seconds(b.as_of - p.paused_at).max(0.0));
        out.push_str(&format!(
            "crm_booking_expiration_paused_seconds{{step=\"{step}\"}} {paused}\n"
        ));
    }
    out
}
