//! One batch of the relay's pipeline: enqueued at the broker after its topics are
//! checked, then settled: its delivery reports collected, the acknowledged rows marked
//! published, the others marked failed, backing off, or attempted (an outage).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use opentelemetry::trace::TraceContextExt;

use anyhow::Result;
use log::info;
use postgres::Client;
use uuid::Uuid;

use super::marker::Marker;
use super::{RelayResult, message};
use crate::clock::Clock;
use crate::config::RelayConfig;
use crate::exit::{Failure, fail};
use crate::kafka::{Delivery, Enqueued, KafkaProducer, OutMessage, TopicCheck};
use crate::obs::trace::{self, Attr};
use crate::store::{self, OutboxRow, Receipt};

/// A batch enqueued at the broker, whose reports and marks are still to come.
pub(super) struct InFlight {
    /// The rows sent, in the order of their messages.
    sendable: Vec<OutboxRow>,
    /// Rows of topics that cannot take them: they back off when the batch settles.
    retry: Vec<(Uuid, String)>,
    /// The keys of those rows, kept out of the next fetch as the sent ones are.
    held_keys: Vec<String>,
    enqueued: Enqueued,
    sent_at: std::time::SystemTime,
}

impl InFlight {
    /// The keys of the rows in flight (sent or about to back off).
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.sendable
            .iter()
            .map(|r| r.key.as_str())
            .chain(self.held_keys.iter().map(String::as_str))
    }
}

/// Checks the batch's topics and enqueues the rows of the usable ones. Rows of a topic
/// that cannot take them wait (they back off when the batch settles); the other topics'
/// rows go on. `Err` only when the brokers cannot be reached at all.
pub(super) fn enqueue(
    producer: &mut KafkaProducer,
    cfg: &RelayConfig,
    batch: Vec<OutboxRow>,
    row_failure: &mut Option<anyhow::Error>,
) -> Result<InFlight> {
    let mut unusable: HashMap<String, (Failure, String)> = HashMap::new();
    for topic in batch
        .iter()
        .map(|r| r.topic.as_str())
        .collect::<HashSet<_>>()
    {
        if let TopicCheck::Unusable { failure, reason } =
            producer.check_topic(topic, cfg.expected_partitions)?
        {
            unusable.insert(topic.to_owned(), (failure, reason));
        }
    }
    let (held, sendable): (Vec<OutboxRow>, Vec<OutboxRow>) = batch
        .into_iter()
        .partition(|r| unusable.contains_key(r.topic.as_str()));
    let mut retry: Vec<(Uuid, String)> = Vec::new();
    for (topic, (failure, reason)) in &unusable {
        let waiting: Vec<&OutboxRow> = held.iter().filter(|r| r.topic == *topic).collect();
        log::error!(Topic = topic.as_str(), Rows = waiting.len(), Error = reason.as_str();
                    "item failed: the topic cannot take these rows; they back off, the other topics' rows go on");
        retry.extend(waiting.iter().map(|r| (r.id, reason.clone())));
        row_failure.get_or_insert_with(|| fail(*failure, reason.clone()));
    }
    let held_keys = held.into_iter().map(|r| r.key).collect();
    let messages: Vec<OutMessage> = sendable.iter().map(message).collect();
    let sent_at = std::time::SystemTime::now();
    let enqueued = producer.enqueue(&messages);
    Ok(InFlight {
        sendable,
        retry,
        held_keys,
        enqueued,
        sent_at,
    })
}

/// What settling a batch needs.
pub(super) struct Settle<'a, 'm> {
    pub client: &'a mut Client,
    pub marker: &'a mut Marker<'m>,
    pub producer: &'a KafkaProducer,
    pub cfg: &'a RelayConfig,
    pub clock: &'a dyn Clock,
}

impl Settle<'_, '_> {
    /// Waits for the batch's delivery reports and marks its rows (the acknowledged
    /// ones through the mark session, the others here). Returns the error
    /// that ends the run when the brokers are gone (`brokers_down`: already known so);
    /// `Err` when the database fails.
    pub(super) fn settle(
        self,
        batch: InFlight,
        brokers_down: bool,
        result: &mut RelayResult,
        row_failure: &mut Option<anyhow::Error>,
    ) -> Result<Option<anyhow::Error>> {
        let Settle {
            client,
            marker,
            producer,
            cfg,
            clock,
        } = self;
        let InFlight {
            sendable,
            mut retry,
            enqueued,
            held_keys: _,
            sent_at,
        } = batch;
        let span = trace::span(
            "relay batch",
            vec![Attr::new(
                "messaging.batch.message_count",
                (sendable.len() + retry.len()) as i64,
            )],
        );
        let deliveries = producer.wait(enqueued);
        // The producer spans, when traces are exported (the batch's span records).
        if opentelemetry::Context::current().span().is_recording() {
            for (row, delivery) in sendable.iter().zip(&deliveries) {
                send_span(row, delivery, sent_at);
            }
        }
        // Every delivery report is in: this is when the broker acknowledged.
        let now = clock.now();
        let mut acked = Vec::new();
        let mut permanent = Vec::new();
        let mut transient = Vec::new();
        for (row, delivery) in sendable.iter().zip(&deliveries) {
            match delivery {
                Delivery::Acked { partition, offset } => {
                    acked.push(Receipt {
                        seq: row.seq,
                        partition: *partition,
                        offset: *offset,
                    });
                    published(row, *partition, *offset, now, result);
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
        let acked_count = acked.len();
        let keys = sendable.iter().map(|r| r.key.clone()).collect();
        marker.submit(keys, now, acked, seq_span)?;
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
        let outage = transient.first().is_some_and(|(id, _)| {
            brokers_down || {
                let topic = sendable
                    .iter()
                    .find(|r| r.id == *id)
                    .map_or("", |r| r.topic.as_str());
                !producer.brokers_answer(topic)
            }
        });
        span.set([
            Attr::new("Published", acked_count as i64),
            Attr::new("Failed", permanent.len() as i64),
            Attr::new("Transient", transient.len() as i64),
        ]);
        if outage {
            store::mark_attempted(client, &transient)?;
            store::mark_retry(client, now, &retry)?;
            let (_, first_error) = &transient[0];
            let failure = if acked_count == 0 {
                Failure::Unavailable
            } else {
                Failure::Temporary
            };
            return Ok(Some(fail(
                failure,
                format!(
                    "{} of {} messages were not acknowledged by Kafka at {} ({first_error}); \
                     they stay pending for the next run",
                    transient.len(),
                    sendable.len(),
                    cfg.kafka.brokers
                ),
            )));
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
        info!(sent = sendable.len(), published = acked_count, failed = permanent.len() + gave_up.len(),
              backing_off = retry.len() - gave_up.len(); "batch relayed");
        Ok(None)
    }
}

/// The payload's fields of the publication line (any may be missing: other writers).
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Published<'a> {
    #[serde(borrow, default)]
    deal_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    property_object_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    phase: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    expired_at: Option<Cow<'a, str>>,
}

fn text<'a>(field: &'a Option<Cow<'_, str>>) -> &'a str {
    field.as_deref().unwrap_or("")
}

/// The publication line consumers' teams search for (the event's identity and where
/// it went), and the run's counts by topic and Phase and its ack ages.
fn published(
    row: &OutboxRow,
    partition: i32,
    offset: i64,
    now: chrono::DateTime<chrono::Utc>,
    result: &mut RelayResult,
) {
    // Only the fields the line names, read without building the whole document.
    let fields: Published = serde_json::from_str(&row.payload).unwrap_or_else(|_| {
        // A field of another type (another writer's payload): the string fields only.
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or_default();
        let owned = |name: &str| {
            let text = payload.get(name).and_then(|v| v.as_str())?;
            Some(Cow::Owned(text.to_owned()))
        };
        Published {
            deal_id: owned("DealId"),
            property_object_id: owned("PropertyObjectId"),
            phase: owned("Phase"),
            expired_at: owned("ExpiredAt"),
        }
    });
    info!(BookingId = row.key.as_str(), DealId = text(&fields.deal_id),
          PropertyObjectId = text(&fields.property_object_id), Phase = text(&fields.phase),
          ExpiredAt = text(&fields.expired_at), MessageId:% = row.id,
          Topic = row.topic.as_str(), Partition = partition, Offset = offset;
          "event published");
    let phase = match text(&fields.phase) {
        "" => "none",
        phase => phase,
    };
    let key = (row.topic.clone(), phase.to_owned());
    *result.publications.entry(key).or_default() += 1;
    let age = (now - row.occurred_at).num_milliseconds().max(0) as f64 / 1e3;
    result.ack_ages.observe(age);
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
    let links = crate::domain::json::object_fields(&row.headers)
        .unwrap_or_default()
        .iter()
        .rfind(|(name, _)| name == "traceparent")
        .and_then(|(_, value)| trace::parse_traceparent(&crate::domain::json::as_text(value)))
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
