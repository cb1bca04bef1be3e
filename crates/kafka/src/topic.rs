//! The topic check: whether a topic can take the relay's messages, asked of the
//! brokers' metadata, with the operator-facing reason when it cannot or when the
//! brokers cannot be reached.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::Producer;

use super::producer::KafkaProducer;
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
    /// to other partitions). Answers within the message timeout (the cronjob's 5 s),
    /// at once when a broker refuses the TLS handshake or the credentials. `Err` only
    /// when the brokers themselves cannot be reached: then nothing is wrong with any
    /// row.
    pub fn check_topic(
        &mut self,
        topic: &str,
        expected_partitions: usize,
    ) -> Result<TopicCheck, Error> {
        if self.checked.contains_key(topic) {
            return Ok(TopicCheck::Usable);
        }
        // The whole message timeout, as for a message: on a loaded host a TLS handshake
        // and a SASL exchange take seconds, and a budget cut short there ends the check
        // before the broker's refusal is read (exit 69 instead of 78).
        let timeout = self.message_timeout;
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
    /// handshake or refused credentials seen at any point of the wait end it at once
    /// (retrying the same settings cannot help), anything else is retried until
    /// `timeout`.
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
                        .broker_errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .refused();
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
    /// reported meanwhile: a failed TLS handshake or refused credentials seen at any
    /// point are configuration (78), whatever error came after them (a connection cut
    /// while it authenticated, a timeout); anything else means Kafka is unavailable
    /// (69).
    fn unreachable(&self, e: &KafkaError, timeout: Duration) -> Error {
        // Broker errors arrive as events on the main queue: served here and on the
        // poll thread, for 100 ms, so that the last one is in.
        self.producer.poll(Duration::from_millis(100));
        let broker_error = self
            .producer
            .context()
            .broker_errors
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

#[cfg(test)]
mod tests {
    use rdkafka::ClientContext;

    use super::*;
    use crate::settings::{DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, Password};

    /// A SASL_SSL producer of brokers nobody serves (a port nothing listens on): its
    /// own connection attempts fail with transport errors meanwhile.
    fn sasl_producer() -> KafkaProducer {
        KafkaProducer::new(&KafkaConfig {
            brokers: "127.0.0.1:1".to_owned(),
            security: KafkaSecurity::Sasl {
                tls: true,
                ca_file: None,
                mechanism: "SCRAM-SHA-512",
                username: "relay".to_owned(),
                password: Password::new("wrong"),
            },
            message_timeout: Duration::from_secs(5),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        })
        .unwrap()
    }

    fn report(producer: &KafkaProducer, code: RDKafkaErrorCode, reason: &str) {
        producer
            .producer
            .context()
            .error(KafkaError::Global(code), reason);
    }

    /// The case a loaded host met: the broker refused the password, then the next
    /// connection was cut while it authenticated, and the check ran out. The refusal
    /// decides: 78 (configuration), not 69 (unavailable).
    #[test]
    fn a_refusal_followed_by_a_transport_error_is_a_configuration_error() {
        let producer = sasl_producer();
        report(
            &producer,
            RDKafkaErrorCode::Authentication,
            "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error: Authentication \
             failed during authentication due to invalid credentials with SASL mechanism \
             SCRAM-SHA-512",
        );
        report(
            &producer,
            RDKafkaErrorCode::BrokerTransportFailure,
            "sasl_ssl://127.0.0.1:1/bootstrap: SASL authentication error: \
             SaslAuthenticateRequest failed: Local: Broker transport failure",
        );
        let timed_out = KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut);
        let error = producer.unreachable(&timed_out, Duration::from_secs(5));
        assert_eq!(error.kind, Kind::Config, "{error}");
        assert!(
            error.message.starts_with(
                "Kafka authentication failed at 127.0.0.1:1: the brokers refused SASL user \
                 \"relay\" (SCRAM-SHA-512; check KAFKA_USERNAME and KAFKA_PASSWORD): "
            ) && error.message.contains("invalid credentials"),
            "{error}"
        );
        assert!(!error.message.contains("wrong"), "{error}");
    }

    /// Without a refusal, a connection cut while it authenticated says nothing of the
    /// credentials: the brokers are unavailable (69), and the message names the error.
    #[test]
    fn a_transport_error_alone_is_unavailability() {
        let producer = sasl_producer();
        report(
            &producer,
            RDKafkaErrorCode::BrokerTransportFailure,
            "SASL authentication error: SaslAuthenticateRequest failed: Local: Broker \
             transport failure",
        );
        let timed_out = KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut);
        let error = producer.unreachable(&timed_out, Duration::from_secs(5));
        assert_eq!(error.kind, Kind::Unavailable, "{error}");
        assert!(
            error
                .message
                .starts_with("cannot reach Kafka at 127.0.0.1:1 within 5s: "),
            "{error}"
        );
    }
}
