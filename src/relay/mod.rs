//! `relay-outbox`: one relay at a time moves pending outbox rows to Kafka, at least
//! once, through a pipeline two batches deep: while one batch waits for its delivery
//! reports the next is fetched and enqueued (at most one message in flight per key and
//! topic; a key with a row in flight is left out of the next fetch), and the
//! acknowledged rows of each batch are marked published in one statement once all its
//! reports are in. Rows that can never be delivered are marked failed; transient
//! failures stay pending and end the run non-zero. Published rows older than the
//! retention are purged.

mod failures;
mod marker;
mod order;
mod outgoing;
mod pipeline;
mod queue;
mod reconnect;
mod run;
mod settle;
mod topics;
mod upkeep;

use std::time::Duration;

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, TimeDelta, Utc};
use log::{info, warn};

use crate::clock::Ambient;
use crate::config::RelayConfig;
use crate::exit::Failure;
use crate::kafka::{Classify, KafkaProducer};
use crate::obs::trace::{self, Attr};
use crate::preflight::{self, Checks, Preflight, Writer};
use crate::store;

use marker::Marker;
use outgoing::message;
pub use run::RelayResult;
use run::Run;
use topics::TopicWaits;

/// The latest moment, by the wall clock, a run at `now` with `left` to go can end; the
/// latest moment there is rather than an overflow.
fn working_until(now: DateTime<Utc>, left: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(left)
        .ok()
        .and_then(|left| now.checked_add_signed(left))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Relays the outbox, counting into `result` as rows are marked, so what was published
/// is known also when the run fails. A failure of some rows' own (an unusable topic, a
/// message refused while others went through) does not stop the others: those rows
/// back off, the run goes on, and then fails with that failure.
pub fn relay_outbox(cfg: &RelayConfig, ambient: Ambient, result: &mut RelayResult) -> Result<()> {
    let span = trace::span(
        "relay-outbox",
        vec![Attr::new("RunId", result.run_id.to_string())],
    );
    let outcome = relay(cfg, ambient, result);
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

fn relay(cfg: &RelayConfig, ambient: Ambient, result: &mut RelayResult) -> Result<()> {
    let (clock, monotonic) = (ambient.clock, ambient.monotonic);
    let started = monotonic.now();
    let mut db = store::connect(&cfg.db)?;
    let checks = Checks {
        writer: Writer::RelayOutbox,
        max_clock_skew: None,
        one_session_is_enough: false,
    };
    let pause =
        match preflight::check(&mut db, &cfg.db, checks, clock.now()).map_err(marker::needs_two)? {
            Preflight::Paused(paused) => {
                result.paused = Some(paused);
                result.duration_ms = monotonic.since(started).as_millis() as u64;
                return Ok(());
            }
            Preflight::Ready { pause } => pause,
        };
    preflight::check_row_security(
        &mut db.client,
        Writer::RelayOutbox.as_str(),
        &cfg.outbox_types,
    )?;
    if !store::try_relay_lock(&mut db.client)? {
        info!("another relay holds the outbox lock; this one has nothing to do");
        result.skipped = true;
        result.duration_ms = monotonic.since(started).as_millis() as u64;
        return Ok(());
    }
    result.relayed = true;
    // For `pause --wait`: the last batch starts within the run, its reports within the
    // message timeout after it.
    let ends = working_until(
        clock.now(),
        cfg.run_for().saturating_add(cfg.kafka.message_timeout),
    );
    preflight::announce_working(&mut db.client, Writer::RelayOutbox, ends)?;
    // On SIGTERM the batches in flight still get their delivery reports and marks
    // (so nothing is sent twice needlessly); then no new batch starts.
    ambient.shutdown.on_signal(|| {});
    if !cfg.follow.is_zero() {
        store::listen(&mut db.client)?;
    }
    let mut producer = KafkaProducer::new(&cfg.kafka)
        .classified()?
        .watching(ambient.shutdown);
    info!(Brokers = cfg.kafka.brokers.as_str(), BatchSize = cfg.batch_size,
          FollowMs = cfg.follow.as_millis() as u64,
          OutboxTypes = cfg.outbox_types.to_flag().as_str(); "relay started");
    let run = Run {
        cfg,
        ambient,
        started,
        pause,
    };
    // The topics a run before found unable to take their rows: asked about once now;
    // the rows of those that still cannot are left out of every fetch, unwritten.
    let mut topics = TopicWaits::load(&mut db.client)?;
    topics.recheck(
        &mut producer,
        cfg.expected_partitions,
        monotonic.now(),
        true,
    )?;
    topics.sync(&mut db.client, clock.now())?;

    // The purge runs also after a row's own failure: it concerns other rows; not once
    // paused: a paused relay does nothing more.
    // A --follow relay whose session drops reopens it and goes on within its window.
    let drained = loop {
        match drain(&mut db.client, &mut producer, &mut topics, &run, result) {
            Err(e) if !cfg.follow.is_zero() && reconnect::session_lost(&e) => {
                reconnect::release(&mut db);
                match reconnect::reopen(cfg, ambient, started, e) {
                    Ok(reconnect::Reopened::Session(new)) => db = *new,
                    Ok(reconnect::Reopened::TakenOver) => break Ok(None),
                    Err(e) => break Err(e),
                }
            }
            other => break other,
        }
    };
    let mut outcome = drained.and_then(|row_failure| {
        if result.paused.is_none() {
            upkeep::purge(&mut db.client, &run, result)?;
        }
        row_failure.map_or(Ok(()), Err)
    });
    if result.paused.is_none() {
        let counted = upkeep::count_waiting(&mut db.client, clock, cfg, &topics, result);
        // Rows still waiting for a topic end the run as their topic's check first did
        // (78, naming it); a topic no row waits for any more is forgotten.
        let waiting = topics.after_count(counted.as_deref());
        if let Err(e) = topics.sync(&mut db.client, clock.now()) {
            warn!(Error:% = format!("{e:#}"); "cannot record the topics rows wait for");
        }
        outcome = match (outcome, waiting) {
            (Ok(()), Some(e)) => Err(e),
            (outcome, _) => outcome,
        };
    }
    result.duration_ms = monotonic.since(started).as_millis() as u64;
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

fn drain(
    client: &mut Session,
    producer: &mut KafkaProducer,
    topics: &mut TopicWaits,
    run: &Run,
    result: &mut RelayResult,
) -> Result<Option<anyhow::Error>> {
    let mut queue = queue::Queue::open(
        client,
        run.cfg,
        run.ambient.clock.now(),
        run.ambient.monotonic.now(),
        result,
    )?;
    let mut marker = Marker::new(run.cfg, queue.marks());
    let outcome = pipeline::pipeline(
        client,
        &mut queue,
        &mut marker,
        producer,
        topics,
        run,
        result,
    );
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

/// A mark refused because the server turned read-only mid-run (SQLSTATE 25006, a
/// failover under way): the run stopped at once; say so in one line, and where to point.
fn turned_read_only(e: anyhow::Error) -> anyhow::Error {
    let sqlstate = crate::exit::store_error(&e).and_then(store::StoreError::sqlstate);
    if sqlstate != Some(store::sqlstate::READ_ONLY_SQL_TRANSACTION) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_window_ends_at_the_latest_moment_instead_of_overflowing() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(working_until(now, Duration::MAX), DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            working_until(now, Duration::from_secs(90)),
            now + TimeDelta::seconds(90)
        );
    }
}
