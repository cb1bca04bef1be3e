//! Reading one message back: what is at a delivery receipt's partition and offset, and
//! is it the outbox row's event (`explain --brokers`)? A consumer of its own, assigned
//! to the one partition (no group membership, nothing committed).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::settings::KafkaConfig;
use crate::{Error, Kind};

/// The message found at a receipt's partition and offset.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ReadBack {
    pub found: bool,
    /// The message there carries the expected id as `ce_id`.
    pub matches: bool,
    pub ce_id: Option<String>,
    pub key: Option<String>,
    pub timestamp_ms: Option<i64>,
    pub error: Option<String>,
}

impl ReadBack {
    fn failed(error: String) -> Self {
        ReadBack {
            found: false,
            matches: false,
            ce_id: None,
            key: None,
            timestamp_ms: None,
            error: Some(error),
        }
    }
}

/// A message's `ce_id` header, as text (invalid UTF-8 replaced), if it has one.
pub(crate) fn ce_id_of(msg: &impl Message) -> Option<String> {
    msg.headers().and_then(|h| {
        h.iter()
            .find(|h| h.key == "ce_id")
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

/// A consumer of its own for reading partitions it is assigned (no group membership,
/// nothing committed), with `extra` settings: explain's read-back and audit's scan
/// (`scan`).
pub(crate) fn consumer(
    cfg: &KafkaConfig,
    group: &str,
    extra: &[(&str, &str)],
) -> Result<BaseConsumer, Error> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("socket.connection.setup.timeout.ms", "5000");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    crate::security(&mut c, cfg);
    c.create().map_err(|e| {
        Error::new(
            Kind::Config,
            format!("cannot set up the Kafka consumer: {e}"),
        )
    })
}

/// Reads the message at `topic[partition]` `offset`, waiting up to `timeout` for it:
/// found, and whether its `ce_id` header is `ce_id`; or why it could not be read.
#[allow(
    clippy::disallowed_methods,
    reason = "the read-back polls the consumer in real time, up to its timeout"
)]
pub fn read_back(
    cfg: &KafkaConfig,
    topic: &str,
    partition: i32,
    offset: i64,
    ce_id: &str,
    timeout: Duration,
) -> ReadBack {
    let consumer = match consumer(cfg, "booking-expire-explain", &[]) {
        Ok(consumer) => consumer,
        Err(e) => return ReadBack::failed(e.message),
    };
    let mut tpl = TopicPartitionList::new();
    if let Err(e) = tpl.add_partition_offset(topic, partition, Offset::Offset(offset)) {
        return ReadBack::failed(e.to_string());
    }
    if let Err(e) = consumer.assign(&tpl) {
        return ReadBack::failed(format!("cannot read {topic}[{partition}]: {e}"));
    }
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        match consumer.poll(Duration::from_millis(250)) {
            None => continue,
            Some(Err(e)) => return ReadBack::failed(e.to_string()),
            Some(Ok(msg)) => {
                if msg.offset() != offset {
                    return ReadBack::failed(format!(
                        "offset {offset} is gone (the first message there is at {}): \
                         deleted by the topic's retention or compaction",
                        msg.offset()
                    ));
                }
                let found_id = ce_id_of(&msg);
                return ReadBack {
                    found: true,
                    matches: found_id.as_deref() == Some(ce_id),
                    ce_id: found_id,
                    key: msg.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    timestamp_ms: msg.timestamp().to_millis(),
                    error: None,
                };
            }
        }
    }
    ReadBack::failed(format!(
        "no message came back from {topic}[{partition}] offset {offset} within {}s",
        timeout.as_secs()
    ))
}
