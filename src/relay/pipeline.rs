//! The relay's pipeline, two batches deep: while one batch waits for its delivery
//! reports the next is fetched and enqueued (at most one message in flight per key and
//! topic; a key with a row in flight is left out of the next fetch); each batch is
//! settled (marked) once all its reports are in. A pause or a signal stops new batches
//! at a boundary; the batches in flight still get their reports and marks.

use std::collections::VecDeque;
use std::time::Duration;

use crate::store::Session;
use anyhow::Result;

use super::marker::{HighMark, Marker};
use super::queue::Queue;
use super::settle::{self, InFlight};
use super::topics::TopicWaits;
use super::{RelayResult, Run};
use crate::exit::{Failure, fail};
use crate::kafka::KafkaProducer;
use crate::preflight::{self, Writer};

/// Batches enqueued at the broker at once. While the oldest waits for its delivery
/// reports, the next is fetched and enqueued; the oldest is then marked on the mark
/// session while the relay goes on.
const ENQUEUED_BATCHES: usize = 2;
/// Batches in flight in all: enqueued, or acknowledged and waiting for their mark. Their
/// keys stay out of the next fetch; they bound what is in flight to 3 × --batch-size
/// rows (and their payloads).
const IN_FLIGHT_BATCHES: usize = 3;

pub(super) fn pipeline(
    client: &mut Session,
    queue: &mut Queue,
    marker: &mut Marker,
    producer: &mut KafkaProducer,
    topics: &mut TopicWaits,
    run: &Run,
    result: &mut RelayResult,
) -> Result<Option<anyhow::Error>> {
    let (cfg, clock) = (run.cfg, run.ambient.clock);
    let marks = queue.marks();
    // The first failure of a row's own (an unusable topic, a message the broker refused
    // while taking others): the run goes on with the other rows, and ends with it.
    let mut row_failure: Option<anyhow::Error> = None;
    // Set when no new batch may start (a signal, the brokers gone): the batches in
    // flight still get their reports and marks, then the run ends with it.
    let mut stop: Option<anyhow::Error> = None;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    loop {
        marker.collect_ready(result)?;
        while stop.is_none()
            && result.paused.is_none()
            && in_flight.len() < ENQUEUED_BATCHES
            && in_flight.len() + marker.len() < IN_FLIGHT_BATCHES
        {
            if let Err(e) = interrupted(run) {
                stop = Some(e);
                break;
            }
            if run.left().is_zero() {
                break;
            }
            // A mark that failed meanwhile (the server turned read-only, the session
            // dropped) ends the run before anything more is sent.
            marker.collect_ready(result)?;
            // Following, the waiting topics are asked about again about once a second,
            // also while rows keep coming.
            let now = run.ambient.monotonic.now();
            if !cfg.follow.is_zero() && topics.recheck_due(now) {
                topics.recheck(producer, cfg.expected_partitions, now, false)?;
            }
            topics.sync(client, clock.now())?;
            // Following, the rows committed below those relayed are looked for every
            // few seconds (a run without --follow did so at its start).
            if !cfg.follow.is_zero() {
                let idle = in_flight.is_empty() && marker.len() == 0;
                queue.check_gap_if_due(client, cfg, clock.now(), now, idle, result)?;
            }
            // The read asked for ahead, if any (the fetch below uses it if it holds).
            let ahead = marker.take_ahead();
            // A key with a row in flight has no newer row sent before that one is
            // acknowledged and marked: its keys stay out of this fetch.
            let keys: Vec<&str> = in_flight
                .iter()
                .flat_map(InFlight::keys)
                .chain(marker.keys())
                .collect();
            let fetched = queue.next(client, cfg, clock.now(), &keys, &topics.excluded(), ahead)?;
            // Asked after the fetch: a row sent was fetched before the pause committed.
            if let Some(paused) = run.pause.check(client, clock.now())? {
                let done = format!(
                    "the fetched batch is not sent; {} batches sent before get their reports and marks",
                    in_flight.len() + marker.len()
                );
                preflight::stopped_mid_run(Writer::RelayOutbox, &paused, &done);
                result.paused = Some(paused);
                break;
            }
            if !fetched.progressed {
                break;
            }
            // The session that will mark these rows is open and can write before any
            // of them is sent.
            marker.ready()?;
            let more = fetched.more;
            match settle::enqueue(
                producer,
                cfg,
                fetched.rows,
                HighMark::of(fetched.high, fetched.snapshot),
                topics,
                &mut row_failure,
            ) {
                Ok(batch) => in_flight.push_back(batch),
                Err(e) => stop = Some(e),
            }
            // More rows are there: the mark session reads the next batch while this
            // one's reports come in and the one before is settled, with every key in
            // flight now (a superset of those when it is used).
            if more && stop.is_none() {
                let keys: Vec<&str> = in_flight
                    .iter()
                    .flat_map(InFlight::keys)
                    .chain(marker.keys())
                    .collect();
                if let Some(at) = queue.read_at(clock.now(), &keys, &topics.excluded()) {
                    marker.read_ahead(at);
                }
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
            if cfg.follow.is_zero() || run.left().is_zero() || result.paused.is_some() {
                break;
            }
            wait_for_outbox(client, run, &mut |client| {
                // Rows committed below those relayed, every few seconds: found, they
                // end the wait.
                // Nothing in flight while it waits: the sweep reads up to its own snapshot.
                if queue.check_gap_if_due(
                    client,
                    cfg,
                    clock.now(),
                    run.ambient.monotonic.now(),
                    true,
                    result,
                )? {
                    return Ok(true);
                }
                // The waiting topics, about once a second: one that came free ends the
                // wait, its rows go at once.
                let now = run.ambient.monotonic.now();
                if !topics.recheck_due(now) {
                    return Ok(false);
                }
                topics.recheck(producer, cfg.expected_partitions, now, false)
            })?;
            continue;
        };
        let ctx = settle::Settle {
            client: &mut *client,
            marker: &mut *marker,
            producer: &mut *producer,
            topics: &mut *topics,
            cfg,
            clock,
            marks,
        };
        if let Some(e) = ctx.settle(batch, result, &mut row_failure)? {
            // A batch that failed after the stop was decided (a signal a moment after
            // its send) is named with it, whichever came first: its class stays the
            // first's, and the operator reads what was left unacknowledged either way.
            stop = Some(match stop.take() {
                None => e,
                Some(first) => first.context(crate::exit::message(&e)),
            });
        }
    }
    Ok(row_failure)
}

/// Fails with `Interrupted` once a signal came: no new batch starts.
pub(super) fn interrupted(run: &Run) -> Result<()> {
    match run.ambient.shutdown.requested() {
        Some(signal) => Err(fail(
            Failure::Interrupted(signal),
            format!("interrupted by signal {signal}; no new batch started"),
        )),
        None => Ok(()),
    }
}

/// Waits until an outbox insert commits (NOTIFY), `came_free` says a topic rows waited
/// for can take them now (asked between slices), the run's window ends, or a signal
/// comes.
fn wait_for_outbox(
    client: &mut Session,
    run: &Run,
    came_free: &mut dyn FnMut(&mut Session) -> Result<bool>,
) -> Result<()> {
    while !run.left().is_zero() && run.ambient.shutdown.requested().is_none() {
        if came_free(client)? {
            return Ok(());
        }
        let slice = run.left().min(Duration::from_millis(250));
        if client.wait_for_notification(slice)? {
            return Ok(());
        }
    }
    Ok(())
}
