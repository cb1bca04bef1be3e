// Over 450 lines: the producer's settings, each with the reason it is set, the topic check with its operator-facing errors, and the batch send with its delivery-report bookkeeping.
//! The rdkafka producer: configuration (idempotent, acks=all, Java-compatible murmur2
//! partitioning, no topic auto-creation), the topic check, and sending a batch while
//! waiting for every delivery report. Knows nothing of the outbox.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

use crate::config::{KafkaConfig, KafkaSecurity};
use crate::exit::{Failure, fail};

/// One message to send.
#[derive(Debug, Clone)]
pub struct OutMessage<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub payload: Vec<u8>,
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// Whether a topic can take the relay's messages.
#[derive(Debug, Clone, PartialEq)]
pub enum TopicCheck {
    Usable,
    /// Missing, not writable by this client, or with another partition count: its rows
    /// wait (and the run reports `failure`), the other topics' rows go on.
    Unusable {
        failure: Failure,
        reason: String,
    },
}

/// What the broker said about one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// Acknowledged by every in-sync replica (acks=all).
    Acked { partition: i32, offset: i64 },
    /// Not delivered, for a reason of `fault`'s class.
    Failed { fault: Fault, error: String },
}

/// Whose fault a failed delivery is: only the message's own counts against its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The message's own and lasting (too large, an invalid record or header): retrying
    /// cannot help, the row fails at once.
    Message,
    /// Refused for a reason nothing else classifies: counted against the row, which
    /// backs off (and is given up after a capped number of failures).
    Refused,
    /// Its topic or partition is missing, unknown or not writable: a configuration
    /// fault; the row waits uncounted until the topic is fixed.
    Topic,
    /// The cluster's (timed out, not enough replicas, leaders moving, transport,
    /// throttling, brokers down): no row's fault; the run stops, the rows stay as they
    /// are.
    Cluster,
    /// The producer hit a fatal error and can send nothing more: the run stops, the
    /// rows stay as they are, the next run's new producer sends them.
    Fatal,
}

/// The class of a delivery error's code. An unknown code is the message's refusal
/// (counted, capped): a lasting problem of one row never stops the whole relay.
pub fn fault_of(code: Option<RDKafkaErrorCode>) -> Fault {
    use RDKafkaErrorCode as C;
    let Some(code) = code else {
        return Fault::Refused;
    };
    match code {
        C::MessageSizeTooLarge
        | C::InvalidMessageSize
        | C::InvalidMessage
        | C::InvalidRecord
        | C::BadMessage
        | C::InvalidArgument
        | C::InvalidType
        | C::KeySerialization
        | C::ValueSerialization
        | C::InvalidTimestamp
        | C::UnsupportedForMessageFormat
        | C::PolicyViolation => Fault::Message,
        C::UnknownTopicOrPartition
        | C::UnknownTopic
        | C::UnknownPartition
        | C::UnknownTopicId
        | C::InvalidTopic
        | C::TopicAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::InvalidRequiredAcks => Fault::Topic,
        C::Fatal
        | C::OutOfOrderSequenceNumber
        | C::InvalidProducerEpoch
        | C::UnknownProducerId
        | C::ProducerFenced
        | C::Fenced
        | C::GaplessGuarantee
        | C::InvalidProducerIdMapping => Fault::Fatal,
        C::MessageTimedOut
        | C::NotEnoughReplicas
        | C::NotEnoughReplicasAfterAppend
        | C::ISRInsufficient
        | C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::PreferredLeaderNotAvailable
        | C::EligibleLeadersNotAvailable
        | C::FencedLeaderEpoch
        | C::UnknownLeaderEpoch
        | C::ReplicaNotAvailable
        | C::BrokerNotAvailable
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::NetworkException
        | C::BrokerTransportFailure
        | C::Resolve
        | C::AllBrokersDown
        | C::ThrottlingQuotaExceeded
        | C::KafkaStorageError
        | C::NotController
        | C::QueueFull
        | C::PurgeQueue
        | C::PurgeInflight
        | C::BrokerDestroy
        | C::DestroyBroker
        | C::Retry
        | C::DuplicateSequenceNumber
        | C::SSL
        | C::Authentication
        | C::SaslAuthenticationFailed
        | C::RebootstrapRequired => Fault::Cluster,
        _ => Fault::Refused,
    }
}

/// Collects delivery reports by the message's number, and the broker
/// errors librdkafka reports on the side (a failed TLS handshake, refused credentials),
/// which say why a broker cannot be reached.
#[derive(Default)]
struct Reports {
    /// By the message's number among all the producer enqueued (several batches may
    /// be in flight); each is taken out when its batch is collected.
    deliveries: Mutex<HashMap<usize, Delivery>>,
    broker_error: Mutex<Option<BrokerError>>,
    /// Events served so far (delivery reports and errors): tells a poll that served one
    /// from a poll that found the queue empty.
    served: AtomicUsize,
    /// The producer's largest message (`message.max.bytes`), for the reason a too
    /// large message gives.
    max_message_bytes: usize,
}

/// An error librdkafka reported about a broker connection.
#[derive(Debug, Clone)]
struct BrokerError {
    code: Option<RDKafkaErrorCode>,
    reason: String,
}

impl BrokerError {
    /// A TLS or authentication failure: retrying with the same settings cannot help.
    fn is_configuration(&self) -> bool {
        matches!(
            self.code,
            Some(RDKafkaErrorCode::SSL | RDKafkaErrorCode::Authentication)
        )
    }
}

impl ClientContext for Reports {
    /// Remembers the failure that explains an unreachable broker; librdkafka's own log
    /// line has already said it once (the default would log every repeat).
    fn error(&self, error: KafkaError, reason: &str) {
        self.served.fetch_add(1, Ordering::Relaxed);
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::Fatal) {
            // Read from the producer itself where it matters (`fatal_error`).
            return;
        }
        if code == Some(RDKafkaErrorCode::AllBrokersDown) {
            // A summary of the failures that explain it.
            return;
        }
        let new = BrokerError {
            code,
            reason: reason.to_owned(),
        };
        let mut last = self.broker_error.lock().unwrap_or_else(|e| e.into_inner());
        if !last.as_ref().is_some_and(BrokerError::is_configuration) || new.is_configuration() {
            *last = Some(new);
        }
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        self.served.fetch_add(1, Ordering::Relaxed);
        let delivery = match result {
            Ok(msg) => Delivery::Acked {
                partition: msg.partition(),
                offset: msg.offset(),
            },
            Err((e, msg)) => failed(e, msg.payload_len() + msg.key_len(), self.max_message_bytes),
        };
        self.deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(index, delivery);
    }
}

/// A failed delivery of a message of `size` bytes (key and value), classified; a too
/// large one says how large against which limit.
fn failed(e: &KafkaError, size: usize, limit: usize) -> Delivery {
    let code = e.rdkafka_error_code();
    let error = match code {
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize) => {
            format!(
                "{e}: the message is {size} bytes with its key, the producer's limit is {limit} \
                 bytes (--max-message-bytes; the topic's max.message.bytes may be lower)"
            )
        }
        _ => e.to_string(),
    };
    Delivery::Failed {
        fault: fault_of(code),
        error,
    }
}

pub struct KafkaProducer {
    producer: BaseProducer<Reports>,
    brokers: String,
    security: KafkaSecurity,
    message_timeout: Duration,
    /// Topics already checked this run, with their partition counts.
    checked: HashMap<String, usize>,
    /// The number the next enqueued message gets (its delivery report's key).
    next_message: usize,
    max_message_bytes: usize,
    /// What a signal reaches the producer's waits through (see [`Self::watching`]).
    shutdown: crate::shutdown::Shutdown,
}

impl KafkaProducer {
    pub fn new(cfg: &KafkaConfig) -> Result<Self> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &cfg.brokers)
            .set("client.id", "booking-expire-relay")
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Java's default partitioner for keyed messages: consumers and other
            // producers agree on which partition a BookingId lives in.
            .set("partitioner", "murmur2_random")
            .set(
                "message.timeout.ms",
                cfg.message_timeout.as_millis().to_string(),
            )
            .set("allow.auto.create.topics", "false")
            // The relay enqueues a whole batch at once and then waits for its reports:
            // lingering would only delay every batch (and every event in --follow).
            .set("linger.ms", "0")
            // The relay never fetches a row larger than this (it fails it unread), and
            // librdkafka refuses a larger message at once rather than at the broker.
            .set("message.max.bytes", cfg.max_message_bytes.to_string())
            .set("socket.connection.setup.timeout.ms", "5000")
            .set("reconnect.backoff.max.ms", "1000");
        security(&mut c, cfg);
        let producer: BaseProducer<Reports> = c
            .create_with_context(Reports {
                max_message_bytes: cfg.max_message_bytes,
                ..Reports::default()
            })
            .map_err(|e| {
                fail(
                    Failure::Config,
                    format!("cannot set up the Kafka producer: {e}"),
                )
            })?;
        Ok(KafkaProducer {
            producer,
            brokers: cfg.brokers.clone(),
            security: cfg.security.clone(),
            message_timeout: cfg.message_timeout,
            checked: HashMap::new(),
            next_message: 0,
            max_message_bytes: cfg.max_message_bytes,
            shutdown: crate::shutdown::Shutdown::new(),
        })
    }

    /// The producer whose waits end early on a signal `shutdown` receives.
    pub fn watching(self, shutdown: &crate::shutdown::Shutdown) -> Self {
        KafkaProducer {
            shutdown: shutdown.clone(),
            ..self
        }
    }

    /// Whether `topic` can take this relay's messages: it exists, this client may write
    /// to it, and it has the expected partition count (another count would move keys
    /// to other partitions). Answers fast rather than waiting out librdkafka's metadata
    /// timeout. `Err` only when the brokers themselves cannot be reached: then nothing
    /// is wrong with any row.
    pub fn check_topic(&mut self, topic: &str, expected_partitions: usize) -> Result<TopicCheck> {
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
                    failure: Failure::Config,
                    reason: format!("not authorized to write to Kafka topic {topic}"),
                },
                other => TopicCheck::Unusable {
                    failure: Failure::Temporary,
                    reason: format!("Kafka reports topic {topic} unusable: {other}"),
                },
            });
        }
        let partitions = t.partitions().len();
        if partitions != expected_partitions {
            return Ok(TopicCheck::Unusable {
                failure: Failure::Config,
                reason: format!(
                    "Kafka topic {topic} has {partitions} partitions, expected {expected_partitions}: \
                     keys would map to other partitions (set --expected-partitions if the change is intended)"
                ),
            });
        }
        self.checked.insert(topic.to_owned(), partitions);
        Ok(TopicCheck::Usable)
    }

    /// The topic's metadata, asked for in short slices up to `timeout`: a failed TLS
    /// handshake or refused credentials end the wait at once (retrying the same
    /// settings cannot help), anything else is retried until `timeout`.
    fn fetch_metadata(&self, topic: &str, timeout: Duration) -> Result<Metadata> {
        let until = std::time::Instant::now() + timeout;
        loop {
            let slice = until
                .saturating_duration_since(std::time::Instant::now())
                .min(Duration::from_millis(500));
            match self.producer.client().fetch_metadata(Some(topic), slice) {
                Ok(metadata) => return Ok(metadata),
                Err(e) => {
                    // Broker errors arrive as events on the main queue: serve them.
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
                    if let Some(signal) = self.shutdown.requested() {
                        return Err(fail(
                            Failure::Interrupted(signal),
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
    fn unreachable(&self, e: &KafkaError, timeout: Duration) -> anyhow::Error {
        // Broker errors arrive as events on the main queue: serve them.
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
                fail(
                    Failure::Config,
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
            ) if b.code == Some(RDKafkaErrorCode::Authentication) => fail(
                Failure::Config,
                format!(
                    "Kafka authentication failed at {brokers}: the brokers refused SASL user \
                     {username:?} ({mechanism}; check KAFKA_USERNAME and KAFKA_PASSWORD): {}",
                    b.reason
                ),
            ),
            (Some(b), _) => fail(
                if b.is_configuration() {
                    Failure::Config
                } else {
                    Failure::Unavailable
                },
                format!(
                    "cannot reach Kafka at {brokers} within {}s: {e} (last broker error: {})",
                    timeout.as_secs(),
                    b.reason
                ),
            ),
            (None, _) => fail(
                Failure::Unavailable,
                format!(
                    "cannot reach Kafka at {brokers} within {}s: {e}",
                    timeout.as_secs()
                ),
            ),
        }
    }

    /// Enqueues the batch and returns at once: its delivery reports arrive while the
    /// caller does other work (fetches the next batch, marks the previous one), and
    /// [`KafkaProducer::wait`] collects them. Messages of several batches may be in
    /// flight together; the caller keeps them to distinct keys.
    pub fn enqueue(&mut self, messages: &[OutMessage]) -> Enqueued {
        let first = self.next_message;
        self.next_message += messages.len();
        let mut refused: Vec<(usize, Delivery)> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let mut headers = OwnedHeaders::new_with_capacity(m.headers.len());
            for (k, v) in &m.headers {
                headers = headers.insert(Header {
                    key: k.as_ref(),
                    value: Some(v.as_bytes()),
                });
            }
            let mut record = BaseRecord::with_opaque_to(m.topic, first + i)
                .key(m.key.as_bytes())
                .payload(&m.payload)
                .headers(headers);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // The local queue is full: serve delivery reports, then retry.
                        self.producer.poll(Duration::from_millis(50));
                        record = back;
                    }
                    Err((e, _)) => {
                        let size = m.payload.len() + m.key.len();
                        refused.push((i, failed(&e, size, self.max_message_bytes)));
                        break;
                    }
                }
            }
        }
        // Every enqueued message gets a report within message.timeout.ms; the margin
        // covers the broker's answer to the last retry.
        Enqueued {
            first,
            count: messages.len(),
            refused,
            until: Instant::now() + self.message_timeout + Duration::from_secs(2),
        }
    }

    /// Waits for every delivery report of an enqueued batch (serving the reports of
    /// later batches on the way). Returns one `Delivery` per message, in order. Not
    /// `flush()`: that waits for every batch in flight, and rdkafka's
    /// `BaseProducer::flush` polls in 100 ms slices that only end when the slice does.
    pub fn wait(&self, batch: Enqueued) -> Vec<Delivery> {
        let Enqueued {
            first,
            count,
            refused,
            mut until,
        } = batch;
        // Reports of earlier batches that came after their batch was collected (past
        // its timeout) belong to nobody: dropped, so that nothing accumulates.
        self.producer
            .context()
            .deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&n, _| n >= first);
        let mut out: Vec<Option<Delivery>> = vec![None; count];
        for (i, delivery) in refused {
            out[i] = Some(delivery);
        }
        let mut missing = out.iter().filter(|d| d.is_none()).count();
        let take = |out: &mut Vec<Option<Delivery>>, missing: &mut usize| {
            let mut reports = self
                .producer
                .context()
                .deliveries
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            for (i, slot) in out.iter_mut().enumerate() {
                if slot.is_none()
                    && let Some(d) = reports.remove(&(first + i))
                {
                    *slot = Some(d);
                    *missing -= 1;
                }
            }
        };
        take(&mut out, &mut missing);
        let mut fatal = None;
        while missing > 0 {
            if let Some(error) = self.fatal_error() {
                // No report still missing will say more than this.
                fatal = Some(error);
                break;
            }
            // One event per call (a delivery report event covers a message set).
            let served = self.producer.context().served.load(Ordering::Relaxed);
            self.producer.poll(Duration::ZERO);
            if self.producer.context().served.load(Ordering::Relaxed) != served {
                take(&mut out, &mut missing);
                continue;
            }
            // None was waiting. Reports already queued are served above even past the
            // deadline: the relay may come to collect a batch late, busy with an earlier
            // one, and the reports that came in time are not lost for that.
            if Instant::now() >= until {
                break;
            }
            // After a signal the run ends within a second: what is not acknowledged
            // by then stays pending, as in an outage.
            if self.shutdown.requested().is_some() {
                until = until.min(Instant::now() + Duration::from_secs(1));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let missing = match fatal {
            Some(error) => Delivery::Failed {
                fault: Fault::Fatal,
                error,
            },
            None => Delivery::Failed {
                fault: Fault::Cluster,
                error: "no delivery report before the timeout".to_owned(),
            },
        };
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| missing.clone()))
            .collect()
    }

    /// librdkafka's fatal error, once it has raised one: the producer can send nothing
    /// more, and the run must end with a new producer for the next.
    pub fn fatal_error(&self) -> Option<String> {
        let (code, reason) = self.producer.client().fatal_error()?;
        Some(format!(
            "the Kafka producer hit a fatal error ({code}: {reason}); it can send nothing more"
        ))
    }
}

/// A batch enqueued by [`KafkaProducer::enqueue`], whose reports are still to collect.
#[derive(Debug)]
pub struct Enqueued {
    /// The number of its first message among all this producer enqueued.
    first: usize,
    count: usize,
    /// Messages the producer refused at once, by index in the batch.
    refused: Vec<(usize, Delivery)>,
    /// When a report still missing will not come any more.
    until: Instant,
}

fn missing_topic(topic: &str) -> TopicCheck {
    TopicCheck::Unusable {
        failure: Failure::Config,
        reason: format!(
            "Kafka topic {topic} does not exist (topic auto-creation is off: create it, \
             e.g. with 6 partitions)"
        ),
    }
}

/// librdkafka's security settings for a client of `cfg`: the relay's producer, and
/// any client that reads back what it sent.
pub fn security(c: &mut ClientConfig, cfg: &KafkaConfig) {
    match &cfg.security {
        KafkaSecurity::Plaintext => {
            c.set("security.protocol", "plaintext");
        }
        KafkaSecurity::Ssl { ca_file } => {
            c.set("security.protocol", "ssl");
            if let Some(ca) = ca_file {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
        KafkaSecurity::Sasl {
            tls,
            ca_file,
            mechanism,
            username,
            password,
        } => {
            c.set(
                "security.protocol",
                if *tls { "sasl_ssl" } else { "sasl_plaintext" },
            )
            .set("sasl.mechanism", *mechanism)
            .set("sasl.username", username)
            .set("sasl.password", password.expose());
            if let Some(ca) = ca_file {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_MAX_MESSAGE_BYTES;

    #[test]
    fn only_a_messages_own_errors_count_against_it() {
        use RDKafkaErrorCode as C;
        for code in [C::MessageSizeTooLarge, C::InvalidRecord, C::InvalidMessage] {
            assert_eq!(fault_of(Some(code)), Fault::Message, "{code:?}");
        }
        for code in [
            C::MessageTimedOut,
            C::NotEnoughReplicas,
            C::NotEnoughReplicasAfterAppend,
            C::LeaderNotAvailable,
            C::NotLeaderForPartition,
            C::RequestTimedOut,
            C::BrokerTransportFailure,
            C::ThrottlingQuotaExceeded,
            C::AllBrokersDown,
        ] {
            assert_eq!(fault_of(Some(code)), Fault::Cluster, "{code:?}");
        }
        for code in [
            C::UnknownTopicOrPartition,
            C::UnknownTopic,
            C::UnknownPartition,
            C::TopicAuthorizationFailed,
        ] {
            assert_eq!(fault_of(Some(code)), Fault::Topic, "{code:?}");
        }
        for code in [C::Fatal, C::OutOfOrderSequenceNumber, C::ProducerFenced] {
            assert_eq!(fault_of(Some(code)), Fault::Fatal, "{code:?}");
        }
        assert_eq!(fault_of(Some(C::UnsupportedVersion)), Fault::Refused);
    }

    /// A real broker cannot be made to raise a fatal idempotence error on demand:
    /// librdkafka's own test hook raises one, as a sequence gap across a leader change
    /// would, while a message waits in the producer's queue.
    #[test]
    fn a_fatal_producer_error_ends_the_wait_at_once_with_nothing_acknowledged() {
        let mut producer = KafkaProducer::new(&KafkaConfig {
            // Nothing listens there: the message stays queued.
            brokers: "127.0.0.1:1".to_owned(),
            security: KafkaSecurity::Plaintext,
            message_timeout: Duration::from_secs(60),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        })
        .unwrap();
        let messages = [OutMessage {
            topic: "t",
            key: "k",
            payload: b"{}".to_vec(),
            headers: Vec::new(),
        }];
        let batch = producer.enqueue(&messages);
        assert_eq!(producer.fatal_error(), None);
        let reason = std::ffi::CString::new("a sequence gap, raised for the test").unwrap();
        let raised = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.producer.client().native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        assert_eq!(
            raised,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
        );
        // Without the check, a report missing for 60 s would be counted as a timeout.
        let deliveries = producer.wait(batch);
        assert_eq!(deliveries.len(), 1);
        let Delivery::Failed { fault, error } = &deliveries[0] else {
            panic!("{deliveries:?}");
        };
        assert_eq!(*fault, Fault::Fatal, "{error}");
        assert!(error.contains("fatal error"), "{error}");
        assert!(producer.fatal_error().unwrap().contains("sequence gap"));
    }
}
