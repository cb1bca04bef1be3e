//! One batch of the relay's pipeline: enqueued at the broker after its topics are
//! checked, then settled: its delivery reports collected, the acknowledged rows marked
//! published, the others marked failed, backing off, or attempted (an outage).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use opentelemetry::trace::TraceContextExt;

use crate::store::Session;
use anyhow::Result;
use log::info;

use super::failures::{self, Marks, NotSent};
use super::marker::{HighMark, Marker};
use super::topics::TopicWaits;
use super::{RelayResult, message};
use crate::clock::Clock;
use crate::config::RelayConfig;
use crate::exit::{Failure, fail};
use crate::kafka::{Classify, Delivery, Enqueued, Fault, KafkaProducer, OutMessage, TopicCheck};
use crate::obs::trace::{self, Attr};
use crate::store::{self, Delivered, Fetch, OutboxRow, Receipt};

/// A batch enqueued at the broker, whose reports and marks are still to come.
pub(super) struct InFlight {
    /// The rows sent, in the order of their messages.
    sendable: Vec<OutboxRow>,
    /// How many rows of topics that are missing or not writable (a configuration
    /// fault) were held back: they wait, uncounted and unwritten (the topic's wait is
    /// one fact, [`TopicWaits`]).
    waiting: usize,
    /// Rows larger than the largest message, never loaded: failed when the batch
    /// settles.
    too_large: Vec<(OutboxRow, String)>,
    /// Rows of topics that cannot take them now, with why (`topic`, or `unsent` for
    /// the cluster's reason): on the relay's own state, exceptions when it settles.
    held: Vec<(OutboxRow, &'static str)>,
    /// Where the batch's mark moves the watermark (the relay's own state).
    high: Option<HighMark>,
    /// Set when a topic's check failed for the cluster's reason: its rows stay as they
    /// are and the run stops once this batch is settled.
    cluster: Option<anyhow::Error>,
    /// The keys of the rows not sent, kept out of the next fetch as the sent ones are.
    held_keys: Vec<String>,
    enqueued: Enqueued,
    sent_at: std::time::SystemTime,
}

impl InFlight {
    /// The keys of the rows in flight (sent or about to be marked).
    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.sendable
            .iter()
            .map(|r| r.key.as_str())
            .chain(self.held_keys.iter().map(String::as_str))
    }
}

/// Checks the batch's topics and enqueues the loaded rows of the usable ones. Rows of a
/// topic that cannot take them wait, unwritten: the topic joins `topics`, whose rows no
/// later fetch of the run takes; the other topics' rows go on. A row too large to send is failed unread; a row past the fetch's byte
/// budget is left for the next fetch. `Err` only when the brokers cannot be reached at
/// all.
#[allow(
    clippy::disallowed_methods,
    reason = "the send's wall-clock moment, which the send span and the acknowledgement's age are measured from"
)]
pub(super) fn enqueue(
    producer: &mut KafkaProducer,
    cfg: &RelayConfig,
    batch: Vec<OutboxRow>,
    high: Option<HighMark>,
    topics: &mut TopicWaits,
    row_failure: &mut Option<anyhow::Error>,
) -> Result<InFlight> {
    let limit = cfg.kafka.max_message_bytes;
    let mut too_large = Vec::new();
    let mut held_keys = Vec::new();
    let mut loaded = Vec::with_capacity(batch.len());
    for row in batch {
        match row.fetch {
            Fetch::Loaded => loaded.push(row),
            Fetch::Later => {}
            Fetch::TooLarge => {
                let key = row.key.clone();
                let size = row.size;
                too_large.push((
                    row,
                    format!(
                        "the message is too large: its payload and headers are {} bytes, \
                         the largest message is {limit} bytes (--max-message-bytes); \
                         it was never read",
                        size
                    ),
                ));
                held_keys.push(key);
            }
        }
    }
    let mut unusable: HashMap<String, (Failure, String)> = HashMap::new();
    for topic in loaded
        .iter()
        .map(|r| r.topic.as_str())
        .collect::<HashSet<_>>()
    {
        let check = producer.check_topic(topic, cfg.expected_partitions);
        if let TopicCheck::Unusable { kind, reason } = check.classified()? {
            unusable.insert(topic.to_owned(), (crate::kafka::failure(kind), reason));
        }
    }
    let (held, sendable): (Vec<OutboxRow>, Vec<OutboxRow>) = loaded
        .into_iter()
        .partition(|r| unusable.contains_key(r.topic.as_str()));
    let mut waiting = 0;
    let mut cluster = None;
    let mut config_topics = HashSet::new();
    for (topic, (failure, reason)) in &unusable {
        let rows: Vec<&OutboxRow> = held.iter().filter(|r| r.topic == *topic).collect();
        if *failure == Failure::Config {
            log::error!(Topic = topic.as_str(), Rows = rows.len(), Error = reason.as_str();
                        "item failed: the topic cannot take these rows; they wait uncounted, the other topics' rows go on");
            waiting += rows.len();
            config_topics.insert(topic.clone());
            topics.wait(topic, reason);
            row_failure.get_or_insert_with(|| fail(*failure, reason.clone()));
        } else {
            log::error!(Topic = topic.as_str(), Rows = rows.len(), Error = reason.as_str();
                        "the cluster cannot take these rows now; they stay pending, uncounted, and the run stops");
            cluster.get_or_insert_with(|| fail(Failure::Temporary, reason.clone()));
        }
    }
    held_keys.extend(held.iter().map(|r| r.key.clone()));
    let held = held
        .into_iter()
        .map(|r| {
            let why = if config_topics.contains(&r.topic) {
                "topic"
            } else {
                "unsent"
            };
            (r, why)
        })
        .collect();
    let messages: Vec<OutMessage> = sendable.iter().map(message).collect();
    let sent_at = std::time::SystemTime::now();
    let enqueued = producer.enqueue(&messages);
    Ok(InFlight {
        sendable,
        waiting,
        too_large,
        held,
        high,
        cluster,
        held_keys,
        enqueued,
        sent_at,
    })
}

/// What settling a batch needs.
pub(super) struct Settle<'a, 'm> {
    pub client: &'a mut Session,
    pub marker: &'a mut Marker<'m>,
    pub producer: &'a mut KafkaProducer,
    pub topics: &'a mut TopicWaits,
    pub cfg: &'a RelayConfig,
    pub clock: &'a dyn Clock,
    pub marks: Marks,
}

impl Settle<'_, '_> {
    /// Waits for the batch's delivery reports and marks its rows (the acknowledged
    /// ones through the mark session, the others here). Only a row's own fault counts
    /// against it: a cluster's fault or a fatal producer error leaves the rows as they
    /// are and returns the error that ends the run; a topic's fault makes them wait
    /// uncounted. `Err` when the database fails.
    pub(super) fn settle(
        self,
        batch: InFlight,
        result: &mut RelayResult,
        row_failure: &mut Option<anyhow::Error>,
    ) -> Result<Option<anyhow::Error>> {
        let Settle {
            client,
            marker,
            producer,
            topics,
            cfg,
            clock,
            marks,
        } = self;
        let InFlight {
            sendable,
            mut waiting,
            too_large,
            held,
            high,
            cluster,
            enqueued,
            held_keys: _,
            sent_at,
        } = batch;
        let span = trace::span(
            "relay batch",
            vec![Attr::new(
                "messaging.batch.message_count",
                (sendable.len() + waiting + too_large.len()) as i64,
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
        let mut not_sent = NotSent {
            permanent: too_large.iter().map(|(r, e)| (r, e.clone())).collect(),
            left: held.iter().map(|(r, why)| (r, *why)).collect(),
            ..NotSent::default()
        };
        let mut unsent = Vec::new();
        let mut fatal = None;
        for (row, delivery) in sendable.iter().zip(&deliveries) {
            match delivery {
                Delivery::Acked { partition, offset } => {
                    acked.push(Delivered {
                        receipt: Receipt {
                            seq: row.seq,
                            partition: *partition,
                            offset: *offset,
                        },
                        id: row.id,
                        excepted: row.extra.excepted,
                    });
                    published(row, *partition, *offset, now, result);
                }
                Delivery::Failed { fault, error } => match fault {
                    Fault::Message => not_sent.permanent.push((row, error.clone())),
                    Fault::Refused => not_sent.refused.push((row, error.clone())),
                    Fault::Topic => {
                        let reason =
                            format!("Kafka topic {} cannot take messages: {error}", row.topic);
                        row_failure.get_or_insert_with(|| fail(Failure::Config, reason.clone()));
                        // Its rows wait from now on, unwritten; the topic is asked again.
                        if !topics.waits_for(&row.topic) {
                            log::error!(Topic = row.topic.as_str(), Error = reason.as_str();
                                        "item failed: the topic cannot take these rows; they wait uncounted, the other topics' rows go on");
                        }
                        topics.wait(&row.topic, &reason);
                        producer.forget_topic(&row.topic);
                        not_sent.left.push((row, "topic"));
                        waiting += 1;
                    }
                    Fault::Cluster => unsent.push((row, error.as_str())),
                    Fault::Fatal => {
                        // librdkafka's own words (a refused producer id names the ACL)
                        // over the report's "Fatal error", whichever came first.
                        fatal.get_or_insert_with(|| {
                            producer.fatal_error().unwrap_or_else(|| error.clone())
                        });
                        unsent.push((row, error.as_str()));
                    }
                },
            }
        }
        let seqs = sendable.iter().map(|r| r.seq);
        let seq_span = (seqs.clone().min().unwrap_or(0), seqs.max().unwrap_or(0));
        let acked_count = acked.len();
        let keys = sendable.iter().map(|r| r.key.clone()).collect();
        marker.submit(keys, now, acked, seq_span, high)?;
        for (row, _) in &unsent {
            not_sent.left.push((row, "unsent"));
        }
        let gave_up = failures::record(client, marks, now, &not_sent, &cfg.outbox_types)?;
        let (permanent, refused) = (&not_sent.permanent, &not_sent.refused);
        for (row, error) in permanent {
            log::error!(MessageId:% = row.id, Error = error.as_str();
                        "item failed: the message can never be delivered, marked failed");
        }
        result.failed += permanent.len() as u64;
        span.set([
            Attr::new("Published", acked_count as i64),
            Attr::new("Failed", permanent.len() as i64),
            Attr::new("Refused", refused.len() as i64),
            Attr::new("Unsent", unsent.len() as i64),
        ]);

        for (row, error) in refused {
            log::error!(MessageId:% = row.id, Error = error.as_str();
                        "item failed: Kafka refused the message; it backs off");
        }
        if let Some((_, first_error)) = refused.first() {
            row_failure.get_or_insert_with(|| {
                fail(
                    Failure::Temporary,
                    format!(
                        "{} messages were refused by Kafka ({first_error}); they back off \
                         and are retried",
                        refused.len()
                    ),
                )
            });
        }
        for id in &gave_up {
            log::error!(MessageId:% = id, MaxFailures = store::MAX_FAILURES;
                        "item failed: too many failed attempts, marked failed");
        }
        result.failed += gave_up.len() as u64;
        result.retrying += (refused.len() - gave_up.len()) as u64;
        info!(Sent = sendable.len(), Published = acked_count, Failed = permanent.len() + gave_up.len(),
              BackingOff = refused.len() - gave_up.len(), Waiting = waiting,
              Unsent = unsent.len(); "batch relayed");

        // Not the rows' fault: they stay exactly as they were (no attempt, no failure
        // counted) and go first next run; no new batch starts in this one.
        if let Some(error) = fatal {
            log::error!(Error = error.as_str(), Unacknowledged = unsent.len();
                        "the Kafka producer cannot go on: the run ends, nothing unacknowledged is marked; the next run starts a new producer");
            return Ok(Some(fail(
                Failure::Temporary,
                format!(
                    "{error}: the run ends; the {} messages not acknowledged stay pending for \
                     the next run, which starts a new producer",
                    unsent.len()
                ),
            )));
        }
        if let Some((row, first_error)) = unsent.first() {
            return Ok(Some(fail(
                Failure::Temporary,
                format!(
                    "{} of {} messages were not acknowledged by Kafka at {} (topic {}: \
                     {first_error}): the cluster's fault, not the rows'; they stay pending, \
                     uncounted, for the next run",
                    unsent.len(),
                    sendable.len(),
                    cfg.kafka.brokers,
                    row.topic
                ),
            )));
        }
        Ok(cluster)
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
