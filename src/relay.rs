//! `relay-outbox`: one relay at a time moves pending outbox rows to Kafka, at least
//! once: send a batch (at most one message in flight per key), wait for every
//! delivery report, mark the acknowledged rows published in one statement. Rows that
//! can never be delivered are marked failed; transient failures stay pending and end
//! the run non-zero. Published rows older than the retention are purged.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use log::{info, warn};
use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use serde::Serialize;
use uuid::Uuid;

use crate::config::RelayConfig;
use crate::exit::{Failure, fail};
use crate::kafka::{Delivery, KafkaProducer, OutMessage};
use crate::shutdown;
use crate::store::{self, Need, OutboxRow};

/// The result of a relay run, printed as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RelayResult {
    pub run_id: Uuid,
    /// Rows acknowledged by Kafka and marked published.
    pub published: u64,
    /// Rows marked failed: they can never be delivered.
    pub failed: u64,
    /// Published rows deleted after the retention.
    pub purged: u64,
    /// True when another relay held the lock and this one did nothing.
    pub skipped: bool,
    pub duration_ms: u64,
}

/// Relays the outbox, counting into `result` as rows are marked, so what was published
/// is known also when the run fails.
pub fn relay_outbox(cfg: &RelayConfig, result: &mut RelayResult) -> Result<()> {
    let started = Instant::now();
    let mut db = store::connect(&cfg.db)?;
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

    let outcome = drain(&mut db.client, &mut producer, cfg, started, result)
        .and_then(|()| purge(&mut db.client, cfg, result));
    result.duration_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => {
            info!(published = result.published, failed = result.failed, purged = result.purged,
                  duration_ms = result.duration_ms; "relay completed");
            Ok(())
        }
        Err(e) => {
            warn!(published = result.published, failed = result.failed,
                  duration_ms = result.duration_ms;
                  "relay stopped early; rows marked before this point stay marked");
            Err(e)
        }
    }
}

fn drain(
    client: &mut Client,
    producer: &mut KafkaProducer,
    cfg: &RelayConfig,
    started: Instant,
    result: &mut RelayResult,
) -> Result<()> {
    let run_for = cfg.run_for();
    loop {
        interrupted()?;
        if started.elapsed() >= run_for {
            return Ok(());
        }
        let rows = store::pending(client, cfg.batch_size)?;
        if rows.is_empty() {
            if cfg.follow.is_zero() {
                return Ok(());
            }
            wait_for_outbox(client, run_for.saturating_sub(started.elapsed()))?;
            continue;
        }
        let batch = one_per_key(rows);
        for topic in batch
            .iter()
            .map(|r| r.topic.as_str())
            .collect::<HashSet<_>>()
        {
            producer.check_topic(topic, cfg.expected_partitions)?;
        }
        let messages: Vec<OutMessage> = batch.iter().map(message).collect();
        let deliveries = producer.send_batch(&messages);

        let mut acked = Vec::new();
        let mut failures = Vec::new();
        for (row, delivery) in batch.iter().zip(&deliveries) {
            match delivery {
                Delivery::Acked { partition, offset } => {
                    acked.push(row.id);
                    info!(booking_id = row.key.as_str(), message_id:% = row.id, topic = row.topic.as_str(),
                          partition = *partition, offset = *offset; "event published");
                }
                Delivery::Failed { permanent, error } => {
                    failures.push((row.id, error.clone(), *permanent));
                }
            }
        }
        result.published += store::mark_published(client, &acked)?;
        store::mark_attempts_failed(client, &failures)?;
        let permanent: Vec<_> = failures.iter().filter(|f| f.2).collect();
        for (id, error, _) in &permanent {
            log::error!(message_id:% = id, error = error.as_str();
                        "item failed: the message can never be delivered, marked failed");
        }
        result.failed += permanent.len() as u64;
        info!(sent = batch.len(), published = acked.len(), failed = permanent.len(); "batch relayed");

        let transient: Vec<_> = failures.iter().filter(|f| !f.2).collect();
        if let Some((_, first_error, _)) = transient.first() {
            // Keep per-key order: nothing more is sent this run; the next run retries
            // these rows first.
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
                    batch.len(),
                    cfg.kafka.brokers
                ),
            ));
        }
    }
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

/// At most one message in flight per key: the oldest pending row of each key goes in
/// this batch, later rows of the same key wait for the next one.
fn one_per_key(rows: Vec<OutboxRow>) -> Vec<OutboxRow> {
    let mut seen = HashSet::new();
    rows.into_iter()
        .filter(|r| seen.insert(r.key.clone()))
        .collect()
}

/// The Kafka message of an outbox row: key = aggregate id, value = payload, headers
/// as captured at write time, `ce_id` = the row id (the MessageId consumers dedupe on).
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
        payload: row.payload.clone().into_bytes(),
        headers,
    }
}

/// Deletes published rows older than the retention, in bounded batches.
fn purge(client: &mut Client, cfg: &RelayConfig, result: &mut RelayResult) -> Result<()> {
    loop {
        interrupted()?;
        let deleted = store::purge_published(client, cfg.retention, cfg.purge_batch_size)?;
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
            key: key.to_owned(),
            topic: "t".to_owned(),
            payload: "{}".to_owned(),
            headers: serde_json::json!({"ce_id": "someone else's", "traceparent": "00-x", "n": 1}),
        }
    }

    #[test]
    fn only_the_oldest_row_of_each_key_is_sent() {
        let batch = one_per_key(vec![
            row("a", 1),
            row("b", 2),
            row("a", 3),
            row("c", 4),
            row("b", 5),
        ]);
        let ids: Vec<u128> = batch.iter().map(|r| r.id.as_u128()).collect();
        assert_eq!(ids, [1, 2, 4]);
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
