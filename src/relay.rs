// Over 450 lines: the relay's one loop (fetch, topic check, send, mark, back-off, purge) read as one, and its unit tests.
//! `relay-outbox`: one relay at a time moves pending outbox rows to Kafka, at least
//! once: send a batch (at most one message in flight per key), wait for every
//! delivery report, mark the acknowledged rows published in one statement. Rows that
//! can never be delivered are marked failed; transient failures stay pending and end
//! the run non-zero. Published rows older than the retention are purged.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use log::{info, warn};
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::RelayConfig;
use crate::exit::{Failure, fail};
use crate::kafka::{Delivery, KafkaProducer, OutMessage, TopicCheck};
use crate::obs::trace::{self, Attr};
use crate::shutdown;
use crate::store::{self, Need, OutboxRow};

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
    /// Set when `relay-outbox` is paused (`booking-expire pause relay-outbox`).
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
        crate::cli::Pausable::RelayOutbox,
        clock.now(),
    )? {
        result.paused = Some(paused);
        result.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(());
    }
    crate::ops::pooler::require_session(&cfg.db, &mut db.client, "relay-outbox")?;
    store::check_schema(&mut db.client, Need::Relay)?;
    if !store::try_relay_lock(&mut db.client)? {
        info!("another relay holds the outbox lock; this one has nothing to do");
        result.skipped = true;
        result.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(());
    }
    // On SIGTERM the batch in flight still gets its delivery reports and its marks
    // (so nothing is sent twice needlessly); then no new batch starts.
    shutdown::on_signal(|| {});
    if !cfg.follow.is_zero() {
        store::listen(&mut db.client)?;
    }
    let mut producer = KafkaProducer::new(&cfg.kafka)?;
    info!(brokers = cfg.kafka.brokers.as_str(), batch_size = cfg.batch_size,
          follow_ms = cfg.follow.as_millis() as u64; "relay started");

    // The purge runs also after a row's own failure: it concerns other rows.
    let outcome =
        drain(&mut db.client, &mut producer, cfg, clock, started, result).and_then(|row_failure| {
            purge(&mut db.client, cfg, clock, result)?;
            row_failure.map_or(Ok(()), Err)
        });
    result.duration_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => {
            info!(published = result.published, failed = result.failed,
                  retrying = result.retrying, purged = result.purged,
                  duration_ms = result.duration_ms; "relay completed");
            Ok(())
        }
        Err(e) => {
            warn!(published = result.published, failed = result.failed,
                  retrying = result.retrying, duration_ms = result.duration_ms;
                  "relay stopped early; rows marked before this point stay marked");
            Err(e)
        }
    }
}

fn drain(
    client: &mut Client,
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
    loop {
        interrupted()?;
        if started.elapsed() >= run_for {
            break;
        }
        let now = clock.now();
        let rows = store::pending(client, now, cfg.batch_size)?;
        if rows.is_empty() {
            if cfg.follow.is_zero() {
                break;
            }
            wait_for_outbox(client, run_for.saturating_sub(started.elapsed()))?;
            continue;
        }
        let batch = one_per_key(rows);
        let span = trace::span(
            "relay batch",
            vec![Attr::new(
                "messaging.batch.message_count",
                batch.len() as i64,
            )],
        );

        // Rows of a topic that cannot take them wait; the other topics' rows go on.
        let mut unusable: HashMap<&str, (Failure, String)> = HashMap::new();
        for topic in batch
            .iter()
            .map(|r| r.topic.as_str())
            .collect::<HashSet<_>>()
        {
            if let TopicCheck::Unusable { failure, reason } =
                producer.check_topic(topic, cfg.expected_partitions)?
            {
                unusable.insert(topic, (failure, reason));
            }
        }
        let (held, sendable): (Vec<&OutboxRow>, Vec<&OutboxRow>) = batch
            .iter()
            .partition(|r| unusable.contains_key(r.topic.as_str()));
        let mut retry: Vec<(Uuid, String)> = Vec::new();
        for (topic, (failure, reason)) in &unusable {
            let waiting: Vec<&&OutboxRow> = held.iter().filter(|r| r.topic == *topic).collect();
            log::error!(Topic = topic, Rows = waiting.len(), Error = reason.as_str();
                        "item failed: the topic cannot take these rows; they back off, the other topics' rows go on");
            retry.extend(waiting.iter().map(|r| (r.id, reason.clone())));
            row_failure.get_or_insert_with(|| fail(*failure, reason.clone()));
        }

        let messages: Vec<OutMessage> = sendable.iter().map(|r| message(r)).collect();
        let sent_at = std::time::SystemTime::now();
        let deliveries = producer.send_batch(&messages);
        for (row, delivery) in sendable.iter().zip(&deliveries) {
            send_span(row, delivery, sent_at);
        }
        // Every delivery report is in: this is when the broker acknowledged.
        let now = clock.now();
        let mut acked = Vec::new();
        let mut permanent = Vec::new();
        let mut transient = Vec::new();
        for (row, delivery) in sendable.iter().zip(&deliveries) {
            match delivery {
                Delivery::Acked { partition, offset } => {
                    acked.push((row.id, *partition, *offset));
                    // The publication line consumers' teams search for: the event's
                    // identity and where it went.
                    let payload: serde_json::Value =
                        serde_json::from_str(&row.payload).unwrap_or_default();
                    let field =
                        |name: &str| payload.get(name).and_then(|v| v.as_str()).unwrap_or("");
                    info!(BookingId = row.key.as_str(), DealId = field("DealId"),
                          PropertyObjectId = field("PropertyObjectId"), Phase = field("Phase"),
                          ExpiredAt = field("ExpiredAt"), MessageId:% = row.id,
                          Topic = row.topic.as_str(), Partition = *partition, Offset = *offset;
                          "event published");
                    let phase = match field("Phase") {
                        "" => "none",
                        phase => phase,
                    };
                    *result
                        .publications
                        .entry((row.topic.clone(), phase.to_owned()))
                        .or_default() += 1;
                    let age = (now - row.occurred_at).num_milliseconds().max(0) as f64 / 1e3;
                    result.ack_ages.observe(age);
                }
                Delivery::Failed {
                    permanent: true,
                    error,
                } => permanent.push((row.id, error.clone())),
                Delivery::Failed {
                    permanent: false,
                    error,
                } => transient.push((row.id, error.clone())),
            }
        }
        let seqs = sendable.iter().map(|r| r.seq);
        let seq_span = (seqs.clone().min().unwrap_or(0), seqs.max().unwrap_or(0));
        result.published += store::mark_published(client, now, &acked, seq_span)?;
        store::mark_failed(client, now, &permanent)?;
        for (id, error) in &permanent {
            log::error!(MessageId:% = id, Error = error.as_str();
                        "item failed: the message can never be delivered, marked failed");
        }
        result.failed += permanent.len() as u64;

        // Transient refusals while the brokers do not answer are an outage: nothing is
        // wrong with the rows, they go first next run and count no failure. While the
        // brokers answer, the refusals are the rows' own (their partition, their topic's
        // settings): they back off.
        let brokers_down = transient.first().is_some_and(|(id, _)| {
            let topic = sendable
                .iter()
                .find(|r| r.id == *id)
                .map_or("", |r| r.topic.as_str());
            !producer.brokers_answer(topic)
        });
        span.set([
            Attr::new("Published", acked.len() as i64),
            Attr::new("Failed", permanent.len() as i64),
            Attr::new("Transient", transient.len() as i64),
        ]);
        if brokers_down {
            store::mark_attempted(client, &transient)?;
            store::mark_retry(client, now, &retry)?;
            let (_, first_error) = &transient[0];
            let failure = if acked.is_empty() {
                Failure::Unavailable
            } else {
                Failure::Temporary
            };
            return Err(fail(
                failure,
                format!(
                    "{} of {} messages were not acknowledged by Kafka at {} ({first_error}); \
                     they stay pending for the next run",
                    transient.len(),
                    sendable.len(),
                    cfg.kafka.brokers
                ),
            ));
        }
        for (id, error) in &transient {
            log::error!(MessageId:% = id, Error = error.as_str();
                        "item failed: Kafka refused the message while its brokers answer; it backs off");
        }
        if let Some((_, first_error)) = transient.first() {
            row_failure.get_or_insert_with(|| {
                fail(
                    Failure::Temporary,
                    format!(
                        "{} messages were refused by Kafka while its brokers answer \
                         ({first_error}); they back off and are retried",
                        transient.len()
                    ),
                )
            });
        }
        retry.extend(transient);
        let gave_up = store::mark_retry(client, now, &retry)?;
        for id in &gave_up {
            log::error!(MessageId:% = id, MaxFailures = store::MAX_FAILURES;
                        "item failed: too many failed attempts, marked failed");
        }
        result.failed += gave_up.len() as u64;
        result.retrying += (retry.len() - gave_up.len()) as u64;
        info!(sent = sendable.len(), published = acked.len(), failed = permanent.len() + gave_up.len(),
              backing_off = retry.len() - gave_up.len(); "batch relayed");
    }
    Ok(row_failure)
}

/// The producer span of one message, per the OpenTelemetry messaging conventions
/// (`send <topic>`), linked to the span that wrote the event (its `traceparent`).
fn send_span(row: &OutboxRow, delivery: &Delivery, sent_at: std::time::SystemTime) {
    let mut attributes = vec![
        Attr::new("messaging.system", "kafka"),
        Attr::new("messaging.operation.type", "send"),
        Attr::new("messaging.operation.name", "send"),
        Attr::new("messaging.destination.name", row.topic.clone()),
        Attr::new("messaging.message.id", row.id.to_string()),
        Attr::new("messaging.kafka.message.key", row.key.clone()),
        Attr::new("BookingId", row.key.clone()),
    ];
    let error = match delivery {
        Delivery::Acked { partition, offset } => {
            attributes.push(Attr::new(
                "messaging.destination.partition.id",
                partition.to_string(),
            ));
            attributes.push(Attr::new("messaging.kafka.offset", *offset));
            None
        }
        Delivery::Failed { error, .. } => {
            attributes.push(Attr::new("error.type", "delivery_failed"));
            Some(error.as_str())
        }
    };
    let links = row
        .headers
        .get("traceparent")
        .and_then(|v| v.as_str())
        .and_then(trace::parse_traceparent)
        .into_iter()
        .collect();
    trace::record_child(
        format!("send {}", row.topic),
        opentelemetry::trace::SpanKind::Producer,
        sent_at,
        attributes,
        links,
        error,
    );
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
fn message(row: &OutboxRow) -> OutMessage {
    let mut headers: Vec<(String, String)> = match &row.headers {
        serde_json::Value::Object(map) => map
            .iter()
            .filter(|(k, _)| k.as_str() != "ce_id")
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect(),
        _ => Vec::new(),
    };
    headers.push(("ce_id".to_owned(), row.id.to_string()));
    OutMessage {
        topic: row.topic.clone(),
        key: row.key.clone(),
        payload: crate::domain::payload_in_contract_order(&row.payload).into_bytes(),
        headers,
    }
}

/// Deletes published rows older than the retention, in bounded batches.
fn purge(
    client: &mut Client,
    cfg: &RelayConfig,
    clock: &dyn Clock,
    result: &mut RelayResult,
) -> Result<()> {
    let now = clock.now();
    loop {
        interrupted()?;
        let deleted = store::purge_published(client, now, cfg.retention, cfg.purge_batch_size)?;
        result.purged += deleted;
        if deleted < u64::from(cfg.purge_batch_size) {
            if result.purged > 0 {
                info!(purged = result.purged, retention_s = cfg.retention.as_secs();
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
            headers: serde_json::json!({"ce_id": "someone else's", "traceparent": "00-x", "n": 1}),
            occurred_at: chrono::DateTime::UNIX_EPOCH,
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
        let m = message(&row("k", 7));
        let ce_ids: Vec<&str> = m
            .headers
            .iter()
            .filter(|(k, _)| k == "ce_id")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(ce_ids, [Uuid::from_u128(7).to_string()]);
        assert!(
            m.headers
                .contains(&("traceparent".to_owned(), "00-x".to_owned()))
        );
        assert!(m.headers.contains(&("n".to_owned(), "1".to_owned())));
        assert_eq!(m.key, "k");
    }
}
