//! Reading a topic's messages from given offsets up to the high watermarks of the
//! moment the read began (`audit`): each message's partition, offset, `ce_id` header
//! and timestamp, one at a time, so that a caller holds no more of the topic than it
//! chooses to. A consumer of its own, assigned to the partitions (no group membership,
//! nothing committed), set up as explain's read-back sets up its own (`readback`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Error, Kind, Stop};
use crate::settings::KafkaConfig;

/// One partition of the topic as the read found it when it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRange {
    pub partition: i32,
    /// The first offset the partition still holds (the log start).
    pub low: i64,
    /// The high watermark at the start: the read stops before it.
    pub high: i64,
    /// The first offset whose timestamp is at or after the time asked for
    /// (`offsets_for_times`); `high` when none is.
    pub from_time: i64,
}

/// One message of the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub partition: i32,
    pub offset: i64,
    pub ce_id: Option<String>,
    /// The message's timestamp (milliseconds since the Unix epoch), if it has one.
    pub timestamp_ms: Option<i64>,
}

/// A read of one topic: [`TopicScan::open`] finds its partitions, [`TopicScan::start`]
/// assigns them from the offsets chosen, [`TopicScan::next_message`] hands out one
/// message at a time until every partition reached its high watermark of the start.
pub struct TopicScan<'a> {
    consumer: BaseConsumer,
    topic: String,
    partitions: Vec<PartitionRange>,
    /// Per partition still to read: the offset the read stops before.
    ends: BTreeMap<i32, i64>,
    /// The longest wait for the next message while partitions are left.
    timeout: Duration,
    stop: &'a dyn Stop,
}

fn unavailable(topic: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        Kind::Unavailable,
        format!("cannot read Kafka topic {topic}: {what}: {e}"),
    )
}

impl<'a> TopicScan<'a> {
    /// Opens a read of `topic`: its partitions, their watermarks and the first offset of
    /// each at or after `since_ms`. `Ok(None)` when the brokers do not know the topic.
    /// Each request to the brokers waits at most `timeout`.
    #[allow(
        clippy::disallowed_methods,
        reason = "the read's requests to the brokers are bounded in real time"
    )]
    pub fn open(
        cfg: &KafkaConfig,
        topic: &str,
        since_ms: i64,
        timeout: Duration,
        stop: &'a dyn Stop,
    ) -> Result<Option<Self>, Error> {
        let consumer = crate::readback::consumer(
            cfg,
            "booking-expire-audit",
            &[
                ("enable.partition.eof", "true"),
                ("auto.offset.reset", "earliest"),
                // An audit never creates the topic it asks about.
                ("allow.auto.create.topics", "false"),
                // What librdkafka fetches ahead per partition: bounded well below its
                // default (64 MiB), as the read hands out one message at a time.
                ("queued.max.messages.kbytes", "8192"),
            ],
        )?;
        let metadata = consumer
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| unavailable(topic, "its metadata", e))?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        if let Some(err) = t.error() {
            return match RDKafkaErrorCode::from(err) {
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
                    Ok(None)
                }
                RDKafkaErrorCode::TopicAuthorizationFailed => Err(Error::new(
                    Kind::Config,
                    format!("not authorized to read Kafka topic {topic}"),
                )),
                other => Err(unavailable(topic, "its metadata", other)),
            };
        }
        let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        ids.sort_unstable();
        let mut times = TopicPartitionList::new();
        for p in &ids {
            times
                .add_partition_offset(topic, *p, Offset::Offset(since_ms))
                .map_err(|e| unavailable(topic, "the offsets by time", e))?;
        }
        let by_time = consumer
            .offsets_for_times(times, timeout)
            .map_err(|e| unavailable(topic, "the offsets by time", e))?;
        let mut partitions = Vec::with_capacity(ids.len());
        for p in ids {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, timeout)
                .map_err(|e| unavailable(topic, &format!("the watermarks of partition {p}"), e))?;
            let from_time = match by_time.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o.clamp(low, high),
                _ => high,
            };
            partitions.push(PartitionRange {
                partition: p,
                low,
                high,
                from_time,
            });
        }
        Ok(Some(TopicScan {
            consumer,
            topic: topic.to_owned(),
            partitions,
            ends: BTreeMap::new(),
            timeout,
            stop,
        }))
    }

    /// The topic's partitions as the read found them.
    pub fn partitions(&self) -> &[PartitionRange] {
        &self.partitions
    }

    /// Starts the read: each partition from its offset in `starts` (clamped to what it
    /// holds; a partition not named is not read) up to its high watermark of the start.
    pub fn start(&mut self, starts: &BTreeMap<i32, i64>) -> Result<(), Error> {
        let mut tpl = TopicPartitionList::new();
        for p in &self.partitions {
            let Some(start) = starts.get(&p.partition) else {
                continue;
            };
            let start = (*start).clamp(p.low, p.high);
            if start < p.high {
                tpl.add_partition_offset(&self.topic, p.partition, Offset::Offset(start))
                    .map_err(|e| unavailable(&self.topic, "the assignment", e))?;
                self.ends.insert(p.partition, p.high);
            }
        }
        if !self.ends.is_empty() {
            self.consumer
                .assign(&tpl)
                .map_err(|e| unavailable(&self.topic, "the assignment", e))?;
        }
        Ok(())
    }

    /// The next message, or `None` once every partition reached its end.
    #[allow(
        clippy::disallowed_methods,
        reason = "the read polls the consumer in real time, up to its timeout"
    )]
    pub fn next_message(&mut self) -> Result<Option<Seen>, Error> {
        let mut waited_since = Instant::now();
        while !self.ends.is_empty() {
            if let Some(signal) = self.stop.requested() {
                return Err(Error::new(
                    Kind::Interrupted(signal),
                    format!("the read of Kafka topic {} was interrupted", self.topic),
                ));
            }
            if waited_since.elapsed() > self.timeout {
                let left: Vec<String> = self.ends.keys().map(i32::to_string).collect();
                return Err(Error::new(
                    Kind::Unavailable,
                    format!(
                        "no message came from Kafka topic {} partitions {} for {}s before \
                         their high watermarks of the start",
                        self.topic,
                        left.join(","),
                        self.timeout.as_secs()
                    ),
                ));
            }
            match self.consumer.poll(Duration::from_millis(250)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    self.ends.remove(&p);
                    waited_since = Instant::now();
                }
                Some(Err(e)) => return Err(unavailable(&self.topic, "a message", e)),
                Some(Ok(msg)) => {
                    waited_since = Instant::now();
                    let (p, offset) = (msg.partition(), msg.offset());
                    let Some(end) = self.ends.get(&p).copied() else {
                        continue;
                    };
                    if offset + 1 >= end {
                        self.ends.remove(&p);
                    }
                    if offset >= end {
                        continue;
                    }
                    return Ok(Some(Seen {
                        partition: p,
                        offset,
                        ce_id: crate::readback::ce_id_of(&msg),
                        timestamp_ms: msg.timestamp().to_millis(),
                    }));
                }
            }
        }
        Ok(None)
    }
}
