//! `relay-outbox`: one relay at a time moves pending outbox rows to Kafka, at least
//! once, through a pipeline two batches deep: while one batch waits for its delivery
//! reports the next is fetched and enqueued (at most one message in flight per key and
//! topic; a key with a row in flight is left out of the next fetch), and the
//! acknowledged rows of each batch are marked published in one statement once all its
//! reports are in. Rows that can never be delivered are marked failed; transient
//! failures stay pending and end the run non-zero. Published rows older than the
//! retention are purged.

mod marker;
mod reconnect;
mod settle;

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::Result;
use log::{info, warn};
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::RelayConfig;
use crate::domain::json;
use crate::exit::{Failure, fail};
use crate::kafka::{KafkaProducer, OutMessage};
use crate::obs::trace::{self, Attr};
use crate::shutdown;
use crate::store::{self, Need, OutboxRow};

use marker::Marker;
use settle::InFlight;

/// The result of a relay run, printed as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RelayResult {
    pub run_id: Uuid,
    /// Rows acknowledged by Kafka and marked published.
    pub published: u64,
    /// Rows marked failed: they can never be delivered, or failed too often.
    pub failed: u64,
    /// Rows whose own send failed this run: they back off and are retried.
    pub retrying: u64,
    /// Published rows deleted after the retention.
    pub purged: u64,
    /// True when another relay held the lock and this one did nothing.
    pub skipped: bool,
    pub duration_ms: u64,
    /// Pending rows not due yet when the run ended: backing off after a refused send,
    /// or waiting for their topic (`WaitingForTopic` of them).
    pub waiting: u64,
    pub waiting_for_topic: u64,
    /// When the first of the waiting rows is due (RFC 3339); absent when none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due: Option<String>,
    /// Why the run stopped early (a signal, the cluster, a configuration fault): it
    /// still reports what it did up to then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// True once this run holds the relay's lock: from then on it reports its result
    /// also when it stops early.
    #[serde(skip)]
    pub relayed: bool,
    /// Set when `relay-outbox` is paused (`booking-expire pause relay-outbox`), at the
    /// start or while it worked (the counts are what it did before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::ops::pause::Paused>,
    /// Rows published, per (topic, Phase of the event; "none" when it has none): for
    /// the metrics push, not printed.
    #[serde(skip)]
    pub publications: std::collections::BTreeMap<(String, String), u64>,
    /// Seconds from each published row's write to Kafka's acknowledgement, in buckets.
    #[serde(skip)]
    pub ack_ages: crate::obs::ack_age::AckAges,
}

/// Relays the outbox, counting into `result` as rows are marked, so what was published
/// is known also when the run fails. A failure of some rows' own (an unusable topic, a
/// message refused while others went through) does not stop the others: those rows
/// back off, the run goes on, and then fails with that failure.
pub fn relay_outbox(cfg: &RelayConfig, clock: &dyn Clock, result: &mut RelayResult) -> Result<()> {
    let span = trace::span(
        "relay-outbox",
        vec![Attr::new("RunId", result.run_id.to_string())],
    );
    let outcome = relay(cfg, clock, result);
    span.set([
        Attr::new("Published", result.published as i64),
        Attr::new("Failed", result.failed as i64),
        Attr::new("Retrying", result.retrying as i64),
        Attr::new("Purged", result.purged as i64),
        Attr::new("Skipped", result.skipped),
        Attr::new("DurationMs", result.duration_ms as i64),
    ]);
    span.outcome(&outcome);
    outcome
}

fn relay(cfg: &RelayConfig, clock: &dyn Clock, result: &mut RelayResult) -> Result<()> {
    let started = Instant::now();
    let mut db = store::connect(&cfg.db)?;
    if let Some(paused) = crate::ops::pause::honour(
        &mut db.client,
        crate::config::Pausable::RelayOutbox,
        clock.now(),
    )? {
        result.paused = Some(paused);
        result.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(());
    }
    db.require_writable(&cfg.db, "relay-outbox")?;
    crate::ops::pooler::require_session(&cfg.db, &mut db.client, "relay-outbox", false)
        .map_err(marker::needs_two)?;
    store::check_schema(&mut db.client, Need::Relay)?;
    if !store::try_relay_lock(&mut db.client)? {
        info!("another relay holds the outbox lock; this one has nothing to do");
        result.skipped = true;
        result.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(());
    }
    result.relayed = true;
    // For `pause --wait`: the last batch starts within the run, its reports within the
    // message timeout after it.
    let ends = clock.now() + cfg.run_for() + cfg.kafka.message_timeout;
    crate::ops::pause::announce_working(
        &mut db.client,
        crate::config::Pausable::RelayOutbox,
        ends,
    )?;
    // On SIGTERM the batches in flight still get their delivery reports and marks
    // (so nothing is sent twice needlessly); then no new batch starts.
    shutdown::on_signal(|| {});
    if !cfg.follow.is_zero() {
        store::listen(&mut db.client)?;
    }
    let mut producer = KafkaProducer::new(&cfg.kafka)?;
    info!(Brokers = cfg.kafka.brokers.as_str(), BatchSize = cfg.batch_size,
          FollowMs = cfg.follow.as_millis() as u64; "relay started");

    // The purge runs also after a row's own failure: it concerns other rows; not once
    // paused: a paused relay does nothing more.
    // A --follow relay whose session drops reopens it and goes on within its window.
    let drained = loop {
        match drain(&mut db.client, &mut producer, cfg, clock, started, result) {
            Err(e) if !cfg.follow.is_zero() && reconnect::session_lost(&e) => {
                reconnect::release(&mut db);
                match reconnect::reopen(cfg, started, e) {
                    Ok(reconnect::Reopened::Session(new)) => db = *new,
                    Ok(reconnect::Reopened::TakenOver) => break Ok(None),
                    Err(e) => break Err(e),
                }
            }
            other => break other,
        }
    };
    let outcome = drained.and_then(|row_failure| {
        if result.paused.is_none() {
            purge(&mut db.client, cfg, clock, result)?;
        }
        row_failure.map_or(Ok(()), Err)
    });
    if result.paused.is_none() {
        count_waiting(&mut db.client, clock, result);
    }
    result.duration_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => {
            info!(Published = result.published, Failed = result.failed,
                  Retrying = result.retrying, Purged = result.purged,
                  Waiting = result.waiting, WaitingForTopic = result.waiting_for_topic,
                  NextDue = result.next_due.as_deref().unwrap_or("-"),
                  DurationMs = result.duration_ms; "relay completed");
            Ok(())
        }
        Err(e) => {
            warn!(Published = result.published, Failed = result.failed,
                  Retrying = result.retrying, DurationMs = result.duration_ms;
                  "relay stopped early; rows marked before this point stay marked");
            Err(turned_read_only(e))
        }
    }
}

/// Batches enqueued at the broker at once. While the oldest waits for its delivery
/// reports, the next is fetched and enqueued; the oldest is then marked on the mark
/// session while the relay goes on.
const ENQUEUED_BATCHES: usize = 2;
/// Batches in flight in all: enqueued, or acknowledged and waiting for their mark. Their
/// keys stay out of the next fetch; they bound what is in flight to 3 × --batch-size
/// rows (and their payloads).
const IN_FLIGHT_BATCHES: usize = 3;

fn drain(
    client: &mut Client,
    producer: &mut KafkaProducer,
    cfg: &RelayConfig,
    clock: &dyn Clock,
    started: Instant,
    result: &mut RelayResult,
) -> Result<Option<anyhow::Error>> {
    let mut marker = Marker::new(&cfg.db);
    let outcome = pipeline(client, &mut marker, producer, cfg, clock, started, result);
    // Every acknowledged row gets its mark, also when the run ends early.
    let marked = marker.finish(result);
    match (outcome, marked) {
        (Err(e), Err(m)) => {
            warn!(Error:% = m; "the marks of the last batches failed too");
            Err(e)
        }
        (Err(e), Ok(())) | (Ok(_), Err(e)) => Err(e),
        (Ok(row_failure), Ok(())) => Ok(row_failure),
    }
}

fn pipeline(
    client: &mut Client,
    marker: &mut Marker,
    producer: &mut KafkaProducer,
    cfg: &RelayConfig,
    clock: &dyn Clock,
    started: Instant,
    result: &mut RelayResult,
) -> Result<Option<anyhow::Error>> {
    let run_for = cfg.run_for();
    // The first failure of a row's own (an unusable topic, a message the broker refused
    // while taking others): the run goes on with the other rows, and ends with it.
    let mut row_failure: Option<anyhow::Error> = None;
    // Set when no new batch may start (a signal, the brokers gone): the batches in
    // flight still get their reports and marks, then the run ends with it.
    let mut stop: Option<anyhow::Error> = None;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let pause = crate::ops::pause::PauseWatch::new(client, crate::config::Pausable::RelayOutbox)?;
    let fetch = store::prepare_pending(client)?;
    loop {
        marker.collect_ready(result)?;
        while stop.is_none()
            && result.paused.is_none()
            && in_flight.len() < ENQUEUED_BATCHES
            && in_flight.len() + marker.len() < IN_FLIGHT_BATCHES
        {
            if let Err(e) = interrupted() {
                stop = Some(e);
                break;
            }
            if started.elapsed() >= run_for {
                break;
            }
            // A mark that failed meanwhile (the server turned read-only, the session
            // dropped) ends the run before anything more is sent.
            marker.collect_ready(result)?;
            // A key with a row in flight has no newer row sent before that one is
            // acknowledged and marked: its keys stay out of this fetch.
            let keys: Vec<&str> = in_flight
                .iter()
                .flat_map(InFlight::keys)
                .chain(marker.keys())
                .collect();
            let rows = store::pending(
                client,
                &fetch,
                clock.now(),
                cfg.batch_size,
                &keys,
                cfg.kafka.max_message_bytes,
            )?;
            // Asked after the fetch: a row sent was fetched before the pause committed.
            if let Some(paused) = pause.check(client)? {
                let done = format!(
                    "the fetched batch is not sent; {} batches sent before get their reports and marks",
                    in_flight.len() + marker.len()
                );
                crate::ops::pause::stopped_mid_run(
                    crate::config::Pausable::RelayOutbox,
                    &paused,
                    &done,
                );
                result.paused = Some(paused);
                break;
            }
            if rows.is_empty() {
                break;
            }
            // The session that will mark these rows is open and can write before any
            // of them is sent.
            marker.ready()?;
            match settle::enqueue(producer, cfg, one_per_key(rows), &mut row_failure) {
                Ok(batch) => in_flight.push_back(batch),
                Err(e) => stop = Some(e),
            }
        }
        let Some(batch) = in_flight.pop_front() else {
            if marker.len() > 0 {
                // The keys of a batch being marked may have newer rows: fetch again
                // once its mark is in.
                marker.collect_one(result)?;
                continue;
            }
            if let Some(e) = stop {
                return Err(e);
            }
            if cfg.follow.is_zero() || started.elapsed() >= run_for || result.paused.is_some() {
                break;
            }
            wait_for_outbox(client, run_for.saturating_sub(started.elapsed()))?;
            continue;
        };
        let ctx = settle::Settle {
            client: &mut *client,
            marker: &mut *marker,
            producer,
            cfg,
            clock,
        };
        if let Some(e) = ctx.settle(batch, result, &mut row_failure)? {
            stop.get_or_insert(e);
        }
    }
    Ok(row_failure)
}

/// A mark refused because the server turned read-only mid-run (SQLSTATE 25006, a
/// failover under way): the run stopped at once; say so in one line, and where to point.
fn turned_read_only(e: anyhow::Error) -> anyhow::Error {
    if crate::sqlstate::code_in(&e) != Some(postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) {
        return e;
    }
    e.context(crate::exit::Classified {
        failure: Failure::Temporary,
        message:
            "relay-outbox: the server turned read-only while relaying (SQLSTATE 25006): the run \
             stopped, nothing more was sent, and the rows acknowledged but not marked go again \
             next run; point --database-url / DATABASE_URL at the primary, or list every server \
             with target_session_attrs=read-write"
                .to_owned(),
    })
}

fn interrupted() -> Result<()> {
    match shutdown::requested() {
        Some(signal) => Err(fail(
            Failure::Interrupted(signal),
            format!("interrupted by signal {signal}; no new batch started"),
        )),
        None => Ok(()),
    }
}

/// Waits until an outbox insert commits (NOTIFY), `limit` passes, or a signal comes.
fn wait_for_outbox(client: &mut Client, limit: Duration) -> Result<()> {
    let until = Instant::now() + limit;
    let mut notifications = client.notifications();
    while Instant::now() < until && shutdown::requested().is_none() {
        let slice = until
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(250));
        if notifications.timeout_iter(slice).next()?.is_some() {
            // Several commits may have notified: one drain serves them all.
            while notifications.iter().next()?.is_some() {}
            return Ok(());
        }
    }
    Ok(())
}

/// At most one message in flight per key and topic: the oldest pending row of each key
/// on each topic goes in this batch, later rows of the same key and topic wait for the
/// next one. Order is per topic (a partition belongs to one topic), so the rows of one
/// expiry on two contract versions' topics go together.
fn one_per_key(rows: Vec<OutboxRow>) -> Vec<OutboxRow> {
    let mut seen = HashSet::new();
    rows.into_iter()
        .filter(|r| seen.insert((r.topic.clone(), r.key.clone())))
        .collect()
}

/// The Kafka message of an outbox row: key = aggregate id, value = payload (in the
/// contract's field order), headers as captured at write time, `ce_id` = the row id
/// (the MessageId consumers dedupe on).
fn message(row: &OutboxRow) -> OutMessage<'_> {
    // Read in place: a header is copied once, by the producer.
    let mut headers: Vec<(Cow<str>, Cow<str>)> = json::object_fields(&row.headers)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| name != "ce_id")
        .map(|(name, value)| (name, json::as_text(value)))
        .collect();
    // By name; of a name given twice, the last.
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    headers.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
    headers.push((Cow::Borrowed("ce_id"), Cow::Owned(row.id.to_string())));
    OutMessage {
        topic: &row.topic,
        key: &row.key,
        payload: crate::domain::payload_in_contract_order(&row.payload).into_bytes(),
        headers,
    }
}

/// Counts the rows that wait into `result` (one read of the few rows with a back-off),
/// and says so in one line when they are why nothing was published. A failed read
/// leaves the counts at 0: it is a report, not the run's work.
fn count_waiting(client: &mut Client, clock: &dyn Clock, result: &mut RelayResult) {
    let per_topic = match store::waiting(client, clock.now()) {
        Ok(w) => w,
        Err(e) => {
            warn!(Error:% = format!("{e:#}"); "cannot count the outbox rows that wait");
            return;
        }
    };
    let (waiting, for_topic, next_due) = store::waiting_total(&per_topic);
    result.waiting = waiting;
    result.waiting_for_topic = for_topic;
    result.next_due = next_due.map(crate::domain::rfc3339);
    if let (0, Some(due)) = (result.published, &result.next_due) {
        info!(Waiting = waiting, WaitingForTopic = for_topic, NextDue = due.as_str();
              "nothing published: {waiting} rows are waiting ({for_topic} of them for their \
               topic, the others out a back-off), the next is due at {due}");
    }
}

/// How long the purge may start new batches: it is one step of the relay's time budget
/// (cronjob.yaml), so a large backlog of old rows is deleted over several runs.
const PURGE_FOR: Duration = Duration::from_secs(1);

/// Deletes published rows older than the retention, in bounded batches, for at most
/// [`PURGE_FOR`] plus the batch in flight then; the rest goes next run.
fn purge(
    client: &mut Client,
    cfg: &RelayConfig,
    clock: &dyn Clock,
    result: &mut RelayResult,
) -> Result<()> {
    let now = clock.now();
    let until = Instant::now() + PURGE_FOR;
    loop {
        interrupted()?;
        if Instant::now() >= until {
            info!(Purged = result.purged, PurgeForMs = PURGE_FOR.as_millis() as u64;
                  "purge time spent; older published rows are purged next run");
            return Ok(());
        }
        let deleted = store::purge_published(client, now, cfg.retention, cfg.purge_batch_size)?;
        result.purged += deleted;
        if deleted < u64::from(cfg.purge_batch_size) {
            if result.purged > 0 {
                info!(Purged = result.purged, RetentionSeconds = cfg.retention.as_secs();
                      "published rows past the retention purged");
            }
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, n: u128) -> OutboxRow {
        OutboxRow {
            id: Uuid::from_u128(n),
            seq: n as i64,
            key: key.to_owned(),
            topic: "t".to_owned(),
            payload: "{}".to_owned(),
            headers: r#"{"n": 1, "ce_id": "someone else's", "traceparent": "00-x"}"#.to_owned(),
            occurred_at: chrono::DateTime::UNIX_EPOCH,
            size: 2,
            fetch: crate::store::Fetch::Loaded,
        }
    }

    #[test]
    fn only_the_oldest_row_of_each_key_on_each_topic_is_sent() {
        let on_v2 = OutboxRow {
            topic: "t.v2".to_owned(),
            ..row("a", 6)
        };
        let batch = one_per_key(vec![
            row("a", 1),
            row("b", 2),
            row("a", 3),
            row("c", 4),
            row("b", 5),
            on_v2,
        ]);
        let ids: Vec<u128> = batch.iter().map(|r| r.id.as_u128()).collect();
        assert_eq!(ids, [1, 2, 4, 6]);
    }

    #[test]
    fn ce_id_is_always_the_row_id() {
        let row = row("k", 7);
        let m = message(&row);
        let ce_ids: Vec<&str> = m
            .headers
            .iter()
            .filter(|(k, _)| k == "ce_id")
            .map(|(_, v)| v.as_ref())
            .collect();
        assert_eq!(ce_ids, [Uuid::from_u128(7).to_string()]);
        let names: Vec<&str> = m.headers.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(names, ["n", "traceparent", "ce_id"]);
        assert_eq!(m.headers[0].1, "1");
        assert_eq!(m.headers[1].1, "00-x");
        assert_eq!(m.key, "k");
    }
}
