// Over 450 lines: one read of everything a booking touches, the judgment of every "why not" case, and its two renderings (text and JSON).
//! `explain BOOKING_ID`: the first question of every incident ("why didn't booking X
//! expire, why is its object still blocked, did its event go out?") in one read-only
//! command, instead of hand-written SQL over four tables and a Kafka consumer.

use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::Client;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use uuid::Uuid;

use crate::cli::{AsOf, ExplainArgs};
use crate::clock::{Clock, SystemClock};
use crate::config::{DbConfig, KafkaConfig};
use crate::domain::booking::{Rejection, Status};
use crate::domain::{self, BookingRow, rfc3339};
use crate::exit::{ClassifyExt, Failure, fail};
use crate::preflight::Paused;
use crate::report::format::{self, Table};
use crate::shutdown;
use crate::store::ops::{self, AuditEntry, OutboxEntry, PoisonEntry, RowLock, TimelineEntry};
use crate::store::{self, Need};

/// How long `--brokers` waits for one message to come back.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Explanation {
    /// The whole id, or the start typed when no booking's id starts with it.
    booking_id: String,
    as_of: String,
    found: bool,
    booking: Option<BookingJson>,
    next_cycle: NextCycle,
    quarantine: Option<QuarantineJson>,
    lock: Option<LockJson>,
    paused: Option<Paused>,
    audit: Vec<AuditJson>,
    timeline: Vec<TimelineJson>,
    outbox: Vec<OutboxJson>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct BookingJson {
    status: String,
    tenant_id: Uuid,
    deal_id: Uuid,
    property_object_id: Uuid,
    reserve_expires_at: Option<String>,
    booking_expires_at: Option<String>,
    expired_at: Option<String>,
    version: i64,
}

/// Would the next cycle (at AsOf) expire the booking, and every reason it would not.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct NextCycle {
    would_expire: bool,
    phase: Option<String>,
    reasons: Vec<Reason>,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct Reason {
    /// not_found, not_yet_due, terminal, guard_rejection, quarantined, locked, paused
    code: &'static str,
    /// For a guard rejection: the guard's own code (no_deadline, unknown_status, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    guard: Option<&'static str>,
    detail: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct QuarantineJson {
    phase: String,
    reason: String,
    error: String,
    sqlstate: Option<String>,
    attempts: i32,
    first_seen_at: String,
    last_seen_at: String,
    retry_at: String,
    /// The entry describes the booking as it is (same version and status).
    applies: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct LockJson {
    pid: i32,
    application: Option<String>,
    user: Option<String>,
    state: Option<String>,
    transaction_start: Option<String>,
    blocking_pids: Vec<i32>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct AuditJson {
    at: String,
    from: String,
    to: String,
    version: i64,
    actor: String,
    run_id: Option<Uuid>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct TimelineJson {
    occurred_at: String,
    kind: String,
    correlation_id: Option<Uuid>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct OutboxJson {
    id: Uuid,
    r#type: String,
    topic: String,
    state: &'static str,
    occurred_at: String,
    published_at: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
    attempts: i32,
    failures: i32,
    next_attempt_at: Option<String>,
    failed_at: Option<String>,
    last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    read_back: Option<ReadBack>,
}

/// The message found at a receipt's partition and offset.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct ReadBack {
    found: bool,
    /// The message there carries this row's id as `ce_id` and its key.
    matches: bool,
    ce_id: Option<String>,
    key: Option<String>,
    timestamp_ms: Option<i64>,
    error: Option<String>,
}

/// `explain BOOKING_ID`.
pub fn explain(args: &ExplainArgs) -> Result<()> {
    let cfg = DbConfig::from_args(&args.database)?;
    let kafka = match args.kafka.brokers.as_deref().map(str::trim) {
        Some(b) if !b.is_empty() => Some(KafkaConfig::from_args(&args.kafka, READ_BACK_TIMEOUT)?),
        _ => None,
    };
    let as_of = match args.as_of {
        AsOf::Now => SystemClock.now(),
        AsOf::At(at) => at,
    };
    let mut db = store::connect(&cfg)?;
    shutdown::on_signal(db.interrupter());
    store::check_schema(&mut db.client, Need::Explain)?;
    let resolved = super::ids::resolve(
        &mut db.client,
        store::ids::IdTable::Bookings,
        &args.booking_id,
        "BOOKING_ID",
    )?;
    let mut explanation = match resolved {
        Some(id) => read(&mut db.client, id, as_of)?,
        None => no_booking_starts_with(&args.booking_id.to_string(), as_of),
    };
    if let Some(kafka) = &kafka {
        for row in &mut explanation.outbox {
            if let (Some(partition), Some(offset)) = (row.partition, row.offset) {
                row.read_back = Some(read_back(kafka, row, partition, offset));
            }
        }
    }
    if args.json {
        format::print(&format!("{}\n", serde_json::to_string(&explanation)?))?;
    } else {
        format::print(&text(&explanation))?;
    }
    if explanation.found {
        Ok(())
    } else {
        Err(fail(
            Failure::Threshold,
            match resolved {
                Some(id) => format!("booking {id} does not exist"),
                None => format!("no booking's id starts with {}", args.booking_id),
            },
        ))
    }
}

/// What `explain` says of a start of an id that no booking's id has: as of an unknown
/// id, with nothing to read.
fn no_booking_starts_with(prefix: &str, as_of: DateTime<Utc>) -> Explanation {
    Explanation {
        booking_id: prefix.to_owned(),
        as_of: rfc3339(as_of),
        found: false,
        booking: None,
        next_cycle: NextCycle {
            would_expire: false,
            phase: None,
            reasons: vec![Reason {
                code: "not_found",
                guard: None,
                detail: format!("no booking in crm.bookings has an id starting with {prefix}"),
            }],
            notes: Vec::new(),
        },
        quarantine: None,
        lock: None,
        paused: None,
        audit: Vec::new(),
        timeline: Vec::new(),
        outbox: Vec::new(),
    }
}

fn read(client: &mut Client, id: Uuid, as_of: DateTime<Utc>) -> Result<Explanation> {
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
    let outbox = ops::outbox_of_booking(&mut tx, id)?;
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;

    let next_cycle = judge(
        booking.as_ref(),
        poison.as_ref(),
        lock.as_ref(),
        paused.as_ref(),
        as_of,
    );
    Ok(Explanation {
        booking_id: id.to_string(),
        as_of: rfc3339(as_of),
        found: booking.is_some(),
        booking: booking.as_ref().map(booking_json),
        next_cycle,
        quarantine: poison.as_ref().map(quarantine_json),
        lock: lock.as_ref().map(lock_json),
        paused,
        audit: audit.iter().map(audit_json).collect(),
        timeline: timeline.iter().map(timeline_json).collect(),
        outbox: outbox.iter().map(outbox_json).collect(),
    })
}

/// The cycle's own decision (the claim's predicate, the quarantine, SKIP LOCKED, the
/// domain guard, the pause switch) applied to one booking.
fn judge(
    booking: Option<&BookingRow>,
    poison: Option<&PoisonEntry>,
    lock: Option<&RowLock>,
    paused: Option<&Paused>,
    as_of: DateTime<Utc>,
) -> NextCycle {
    let mut reasons = Vec::new();
    let mut notes = Vec::new();
    let reason = |code, detail| Reason {
        code,
        guard: None,
        detail,
    };
    let Some(b) = booking else {
        return NextCycle {
            would_expire: false,
            phase: None,
            reasons: vec![reason(
                "not_found",
                "no booking with this id in crm.bookings".to_owned(),
            )],
            notes,
        };
    };
    let phase = b
        .status
        .parse::<Status>()
        .ok()
        .and_then(|s| s.active_phase());
    match domain::expire(b, as_of) {
        Ok(_) => {}
        Err(Rejection::Terminal(status)) => reasons.push(reason(
            "terminal",
            match b.expired_at {
                Some(at) => format!(
                    "status {status} is terminal and never expires (expired_at {})",
                    rfc3339(at)
                ),
                None => format!("status {status} is terminal and never expires"),
            },
        )),
        Err(Rejection::NotYetDue(deadline)) => reasons.push(reason(
            "not_yet_due",
            match deadline.until(as_of) {
                Some(before) => format!(
                    "the {} deadline {} is {} after {}: a cycle after it expires the booking",
                    phase.map_or("", |p| p.as_str()),
                    rfc3339(deadline),
                    format::duration(-before),
                    rfc3339(as_of)
                ),
                // `infinity`: never due, so never claimed.
                None => format!(
                    "the {} deadline is {deadline}: never due, the cycle never claims it \
                     until the deadline changes",
                    phase.map_or("", |p| p.as_str()),
                ),
            },
        )),
        Err(rejection) => {
            // Rows the claim's predicate leaves out are never claimed; the others are
            // claimed and refused by the guard, which quarantines them as poison.
            let claimed = !matches!(
                rejection,
                Rejection::UnknownStatus(_) | Rejection::NoDeadline(_)
            );
            reasons.push(Reason {
                code: "guard_rejection",
                guard: Some(rejection.code()),
                detail: if claimed {
                    format!(
                        "the domain guard refuses it ({}: {rejection}); each claim quarantines it \
                         again with back-off: repair the row",
                        rejection.code()
                    )
                } else {
                    format!(
                        "never claimed: {rejection} ({}); repair the row",
                        rejection.code()
                    )
                },
            });
        }
    }
    if let Some(p) = poison {
        match (p.matches_booking, p.retry_at > as_of.into()) {
            (true, true) => reasons.push(reason(
                "quarantined",
                format!(
                    "in quarantine until {} ({}: {}; {} attempts since {}); the cycle leaves it \
                     alone until then",
                    rfc3339(p.retry_at),
                    p.reason,
                    p.error,
                    p.attempts,
                    rfc3339(p.first_seen_at)
                ),
            )),
            (true, false) => notes.push(format!(
                "its quarantine ended at {}: the next cycle tries it again ({}: {}; {} attempts)",
                rfc3339(p.retry_at),
                p.reason,
                p.error,
                p.attempts
            )),
            (false, _) => notes.push(format!(
                "a quarantine entry from {} ({}: {}) no longer applies: the booking changed \
                 since, the next cycle judges it afresh and drops the entry",
                rfc3339(p.last_seen_at),
                p.reason,
                p.error
            )),
        }
    }
    if let Some(l) = lock {
        reasons.push(reason(
            "locked",
            format!(
                "its row is locked right now by PID {} ({}{}{}): the cycle skips locked rows \
                 (SKIP LOCKED) until that transaction ends{}",
                l.pid,
                l.application
                    .as_deref()
                    .filter(|a| !a.is_empty())
                    .map_or("no application name".to_owned(), |a| format!(
                        "application {a}"
                    )),
                l.user
                    .as_deref()
                    .map_or(String::new(), |u| format!(", user {u}")),
                l.xact_start.map_or(String::new(), |t| format!(
                    ", transaction open for {}",
                    format::duration(as_of - t)
                )),
                if l.blocking.is_empty() {
                    String::new()
                } else {
                    format!("; it blocks PIDs {:?}", l.blocking)
                }
            ),
        ));
    }
    if let Some(p) = paused {
        reasons.push(reason(
            "paused",
            format!(
                "run-once is paused since {} by {}: {}",
                p.since, p.by, p.reason
            ),
        ));
    }
    NextCycle {
        would_expire: reasons.is_empty(),
        phase: phase.map(|p| p.as_str().to_owned()),
        reasons,
        notes,
    }
}

fn booking_json(b: &BookingRow) -> BookingJson {
    BookingJson {
        status: b.status.clone(),
        tenant_id: b.tenant_id,
        deal_id: b.deal_id,
        property_object_id: b.property_object_id,
        reserve_expires_at: b.reserve_expires_at.map(rfc3339),
        booking_expires_at: b.booking_expires_at.map(rfc3339),
        expired_at: b.expired_at.map(rfc3339),
        version: b.version,
    }
}

fn quarantine_json(p: &PoisonEntry) -> QuarantineJson {
    QuarantineJson {
        phase: p.phase.clone(),
        reason: p.reason.clone(),
        error: p.error.clone(),
        sqlstate: p.sqlstate.clone(),
        attempts: p.attempts,
        first_seen_at: rfc3339(p.first_seen_at),
        last_seen_at: rfc3339(p.last_seen_at),
        retry_at: rfc3339(p.retry_at),
        applies: p.matches_booking,
    }
}

fn lock_json(l: &RowLock) -> LockJson {
    LockJson {
        pid: l.pid,
        application: l.application.clone(),
        user: l.user.clone(),
        state: l.state.clone(),
        transaction_start: l.xact_start.map(rfc3339),
        blocking_pids: l.blocking.clone(),
    }
}

fn audit_json(a: &AuditEntry) -> AuditJson {
    AuditJson {
        at: rfc3339(a.at),
        from: a.from_status.clone(),
        to: a.to_status.clone(),
        version: a.version,
        actor: a.actor.clone(),
        run_id: a.run_id,
    }
}

fn timeline_json(t: &TimelineEntry) -> TimelineJson {
    TimelineJson {
        occurred_at: rfc3339(t.occurred_at),
        kind: t.kind.clone(),
        correlation_id: t.correlation_id,
    }
}

fn outbox_json(o: &OutboxEntry) -> OutboxJson {
    OutboxJson {
        id: o.id,
        r#type: o.r#type.clone(),
        topic: o.topic.clone(),
        state: o.state(),
        occurred_at: rfc3339(o.occurred_at),
        published_at: o.published_at.map(rfc3339),
        partition: o.partition,
        offset: o.offset,
        attempts: o.attempts,
        failures: o.failures,
        next_attempt_at: o.next_attempt_at.map(rfc3339),
        failed_at: o.failed_at.map(rfc3339),
        last_error: o.last_error.clone(),
        read_back: None,
    }
}

/// Reads the message at the receipt's partition and offset: is it this row's event?
fn read_back(cfg: &KafkaConfig, row: &OutboxJson, partition: i32, offset: i64) -> ReadBack {
    let mut back = ReadBack {
        found: false,
        matches: false,
        ce_id: None,
        key: None,
        timestamp_ms: None,
        error: None,
    };
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", "booking-expire-explain")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("socket.connection.setup.timeout.ms", "5000");
    crate::kafka::security(&mut c, cfg);
    let consumer: BaseConsumer = match c.create() {
        Ok(consumer) => consumer,
        Err(e) => {
            back.error = Some(format!("cannot set up the Kafka consumer: {e}"));
            return back;
        }
    };
    let mut tpl = TopicPartitionList::new();
    if let Err(e) = tpl.add_partition_offset(&row.topic, partition, Offset::Offset(offset)) {
        back.error = Some(e.to_string());
        return back;
    }
    if let Err(e) = consumer.assign(&tpl) {
        back.error = Some(format!("cannot read {}[{partition}]: {e}", row.topic));
        return back;
    }
    let until = Instant::now() + READ_BACK_TIMEOUT;
    while Instant::now() < until {
        match consumer.poll(Duration::from_millis(250)) {
            None => continue,
            Some(Err(e)) => {
                back.error = Some(e.to_string());
                return back;
            }
            Some(Ok(msg)) => {
                if msg.offset() != offset {
                    back.error = Some(format!(
                        "offset {offset} is gone (the first message there is at {}): \
                         deleted by the topic's retention or compaction",
                        msg.offset()
                    ));
                    return back;
                }
                back.found = true;
                back.key = msg.key().map(|k| String::from_utf8_lossy(k).into_owned());
                back.timestamp_ms = msg.timestamp().to_millis();
                back.ce_id = msg.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == "ce_id")
                        .and_then(|h| h.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                });
                back.matches = back.ce_id.as_deref() == Some(row.id.to_string().as_str());
                return back;
            }
        }
    }
    back.error = Some(format!(
        "no message came back from {}[{partition}] offset {offset} within {}s",
        row.topic,
        READ_BACK_TIMEOUT.as_secs()
    ));
    back
}

/// The widest actor the audit table shows, cut with `…` beyond: with the RunId by its
/// first 8 characters (as `dry-run` shows ids; `--json` has it in full), an audit row
/// fits 120 columns.
const ACTOR_WIDTH: usize = 32;

/// The report for people: every line fits 120 columns; prose wraps, the audit's RunId
/// is shortened and a long actor cut.
fn text(e: &Explanation) -> String {
    let mut out = format!("booking {} at {}\n\n", e.booking_id, e.as_of);
    if let Some(b) = &e.booking {
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let mut t = Table::new(&["Field", "Value"]);
        for (k, v) in [
            ("status", b.status.clone()),
            ("version", b.version.to_string()),
            ("reserve_expires_at", dash(&b.reserve_expires_at)),
            ("booking_expires_at", dash(&b.booking_expires_at)),
            ("expired_at", dash(&b.expired_at)),
            ("tenant_id", b.tenant_id.to_string()),
            ("deal_id", b.deal_id.to_string()),
            ("property_object_id", b.property_object_id.to_string()),
        ] {
            t.row(vec![k.to_owned(), v]);
        }
        t.render(&mut out);
        out.push('\n');
    }
    let n = &e.next_cycle;
    if n.would_expire {
        out.push_str(&format!(
            "next cycle: WOULD EXPIRE it ({} phase)\n",
            n.phase.as_deref().unwrap_or("-")
        ));
    } else {
        out.push_str("next cycle: would NOT expire it, because\n");
        for r in &n.reasons {
            out.push_str(&format::wrap(
                &format!("- {}: {}", r.code, r.detail),
                "  ",
                "    ",
            ));
        }
    }
    for note in &n.notes {
        out.push_str(&format::wrap(&format!("note: {note}"), "  ", "    "));
    }
    if !e.audit.is_empty() {
        out.push_str("\naudit\n");
        let mut t = Table::new(&["At", "From", "To", "Version", "Actor", "RunId"]);
        for a in &e.audit {
            t.row(vec![
                a.at.clone(),
                a.from.clone(),
                a.to.clone(),
                a.version.to_string(),
                format::fit(&a.actor, ACTOR_WIDTH),
                a.run_id.map_or("-".to_owned(), format::short_id),
            ]);
        }
        t.render(&mut out);
    }
    if !e.timeline.is_empty() {
        out.push_str("\ndeal timeline\n");
        let mut t = Table::new(&["OccurredAt", "Kind", "CorrelationId"]);
        for x in &e.timeline {
            t.row(vec![
                x.occurred_at.clone(),
                x.kind.clone(),
                x.correlation_id.map_or("-".to_owned(), |r| r.to_string()),
            ]);
        }
        t.render(&mut out);
    }
    out.push_str("\noutbox\n");
    if e.outbox.is_empty() {
        out.push_str("  no outbox rows (none written, or purged after the retention)\n");
    }
    for o in &e.outbox {
        let state = match o.state {
            "published" => format!(
                "published at {} to {} partition {} offset {}",
                o.published_at.as_deref().unwrap_or("-"),
                o.topic,
                o.partition.map_or("?".to_owned(), |p| p.to_string()),
                o.offset.map_or("?".to_owned(), |p| p.to_string()),
            ),
            "failed" => format!(
                "FAILED at {} after {} attempts: {}",
                o.failed_at.as_deref().unwrap_or("-"),
                o.attempts,
                o.last_error.as_deref().unwrap_or("-")
            ),
            _ => format!(
                "pending for {} (attempts {}, failures {}{}{})",
                o.topic,
                o.attempts,
                o.failures,
                o.next_attempt_at
                    .as_deref()
                    .map_or(String::new(), |t| format!(", next attempt at {t}")),
                o.last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!(", last error: {e}")),
            ),
        };
        out.push_str(&format::wrap(
            &format!("{} {}: {state}", o.id, o.r#type),
            "  ",
            "    ",
        ));
        if let Some(b) = &o.read_back {
            let line = match (b.found, b.matches, &b.error) {
                (_, _, Some(err)) => format!("read back: {err}"),
                (true, true, _) => format!(
                    "read back: the message there has ce_id {} and key {}",
                    b.ce_id.as_deref().unwrap_or("-"),
                    b.key.as_deref().unwrap_or("-")
                ),
                _ => format!(
                    "read back: MISMATCH, the message there has ce_id {}",
                    b.ce_id.as_deref().unwrap_or("(none)")
                ),
            };
            out.push_str(&format::wrap(&line, "    ", "      "));
        }
    }
    out
}
