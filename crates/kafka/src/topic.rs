//! The topic check: whether a topic can take the relay's messages, asked of the
//! brokers' metadata, with the operator-facing reason when it cannot or when the
//! brokers cannot be reached.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::Producer;

use super::producer::KafkaProducer;
use super::reports::BrokerError;
use crate::error::{Error, Kind};
use crate::settings::KafkaSecurity;

/// Whether a topic can take the relay's messages.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicCheck {
    Usable,
    /// Missing, not writable by this client, or with another partition count: its rows
    /// wait (and the run reports its `kind`), the other topics' rows go on.
    Unusable {
        kind: Kind,
        reason: String,
    },
}

impl KafkaProducer {
    /// Whether `topic` can take this relay's messages: it exists, this client may write
    /// to it, and it has the expected partition count (another count would move keys
    /// to other partitions). Answers fast rather than waiting out librdkafka's metadata
    /// timeout. `Err` only when the brokers themselves cannot be reached: then nothing
    /// is wrong with any row.
    pub fn check_topic(
        &mut self,
        topic: &str,
        expected_partitions: usize,
    ) -> Result<TopicCheck, Error> {
        if self.checked.contains_key(topic) {
            return Ok(TopicCheck::Usable);
        }
        let timeout = self.message_timeout.min(Duration::from_secs(5));
        let metadata = self.fetch_metadata(topic, timeout)?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(missing_topic(topic));
        };
        if let Some(err) = t.error() {
            let code = RDKafkaErrorCode::from(err);
            return Ok(match code {
                RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic => {
                    missing_topic(topic)
                }
                RDKafkaErrorCode::TopicAuthorizationFailed => TopicCheck::Unusable {
                    kind: Kind::Config,
                    reason: format!("not authorized to write to Kafka topic {topic}"),
                },
                other => TopicCheck::Unusable {
                    kind: Kind::Temporary,
                    reason: format!("Kafka reports topic {topic} unusable: {other}"),
                },
            });
        }
        let partitions = t.partitions().len();
        if partitions != expected_partitions {
            return Ok(TopicCheck::Unusable {
                kind: Kind::Config,
                reason: format!(
                    "Kafka topic {topic} has {partitions} partitions, expected {expected_partitions}: \
                     keys would map to other partitions (set --expected-partitions if the change is intended)"
                ),
            });
        }
        self.checked.insert(topic.to_owned(), partitions);
        Ok(TopicCheck::Usable)
    }

    /// Forgets that `topic` was found usable this run (a delivery report said it cannot
    /// take messages any more): the next check asks the brokers again.
    pub fn forget_topic(&mut self, topic: &str) {
        self.checked.remove(topic);
    }

    /// The topic's metadata, asked for in short slices up to `timeout`: a failed TLS
    /// handshake or refused credentials end the wait at once (retrying the same
    /// settings cannot help), anything else is retried until `timeout`.
    #[allow(
        clippy::disallowed_methods,
        reason = "librdkafka's metadata requests wait in real time, up to the check's timeout"
    )]
    fn fetch_metadata(&self, topic: &str, timeout: Duration) -> Result<Metadata, Error> {
        let until = std::time::Instant::now() + timeout;
        loop {
            let slice = until
                .saturating_duration_since(std::time::Instant::now())
                .min(Duration::from_millis(500));
            match self.producer.client().fetch_metadata(Some(topic), slice) {
                Ok(metadata) => return Ok(metadata),
                Err(e) => {
                    // Broker errors arrive as events on the main queue, which the poll
                    // thread serves; those already queued are served here too.
                    self.producer.poll(Duration::ZERO);
                    let configuration = self
                        .producer
                        .context()
                        .broker_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_ref()
                        .is_some_and(BrokerError::is_configuration);
                    if configuration || std::time::Instant::now() >= until {
                        return Err(self.unreachable(&e, timeout));
                    }
                    // A signal ends the wait within a slice.
                    if let Some(signal) = self.stop.requested() {
                        return Err(Error::new(
                            Kind::Interrupted(signal),
                            format!(
                                "interrupted by signal {signal} while asking Kafka about topic {topic}"
                            ),
                        ));
                    }
                }
            }
        }
    }

    /// Why the brokers could not be reached, from the broker errors librdkafka
    /// reported meanwhile: a failed TLS handshake or refused credentials are
    /// configuration (78), anything else means Kafka is unavailable (69).
    fn unreachable(&self, e: &KafkaError, timeout: Duration) -> Error {
        // Broker errors arrive as events on the main queue: served here and on the
        // poll thread, for 100 ms, so that the last one is in.
        self.producer.poll(Duration::from_millis(100));
        let broker_error = self
            .producer
            .context()
            .broker_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let brokers = &self.brokers;
        match (broker_error, &self.security) {
            (Some(b), security) if b.code == Some(RDKafkaErrorCode::SSL) => {
                let trusted = match security {
                    KafkaSecurity::Ssl {
                        ca_file: Some(ca), ..
                    }
                    | KafkaSecurity::Sasl {
                        ca_file: Some(ca), ..
                    } => format!("the CA in {}", ca.display()),
                    _ => "the system's trusted CAs".to_owned(),
                };
                Error::new(
                    Kind::Config,
                    format!(
                        "TLS handshake with Kafka at {brokers} failed (the brokers' certificates \
                         must be signed by {trusted} and name the broker's host; \
                         --kafka-ca-file / KAFKA_CA_FILE): {}",
                        b.reason
                    ),
                )
            }
            (
                Some(b),
                KafkaSecurity::Sasl {
                    mechanism,
                    username,
                    ..
                },
            ) if b.code == Some(RDKafkaErrorCode::Authentication) => Error::new(
                Kind::Config,
                format!(
                    "Kafka authentication failed at {brokers}: the brokers refused SASL user \
                     {username:?} ({mechanism}; check KAFKA_USERNAME and KAFKA_PASSWORD): {}",
                    b.reason
                ),
            ),
            (Some(b), _) => Error::new(
                if b.is_configuration() {
                    Kind::Config
                } else {
                    Kind::Unavailable
                },
                format!(
                    "cannot reach Kafka at {brokers} within {}s: {e} (last broker error: {})",
                    timeout.as_secs(),
                    b.reason
                ),
            ),
            (None, _) => Error::new(
                Kind::Unavailable,
                format!(
                    "cannot reach Kafka at {brokers} within {}s: {e}",
                    timeout.as_secs()
                ),
            ),
        }
    }
}

fn missing_topic(topic: &str) -> TopicCheck {
    TopicCheck::Unusable {
        kind: Kind::Config,
        reason: format!(
            "Kafka topic {topic} does not exist (topic auto-creation is off: create it, \
             e.g. with 6 partitions)"
        ),
    }
}
