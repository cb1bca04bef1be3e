//! The producer: its settings, each with the reason it is set, and a batch enqueued at
//! once and then waited for: its delivery reports are served on the producer's own poll
//! thread as they come, and the wait ends the moment the last one is in.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::fault::{Delivery, Fault, failed};
use super::poller::Poller;
use super::reports::Reports;
use super::security;
use crate::error::{Error, Kind, Never, Stop};
use crate::settings::{KafkaConfig, KafkaSecurity};

/// How often a wait for delivery reports asks whether a signal came, at the least.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// One message to send.
#[derive(Debug, Clone)]
pub struct OutMessage<'a> {
    pub topic: &'a str,
    pub key: &'a str,
    pub payload: Vec<u8>,
    pub headers: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

pub struct KafkaProducer {
    /// Shared with the poll thread, which destroys it when stopped (`_poller`, dropped
    /// after this handle).
    pub(super) producer: Arc<BaseProducer<Reports>>,
    pub(super) brokers: String,
    pub(super) security: KafkaSecurity,
    pub(super) message_timeout: Duration,
    /// Topics already checked this run, with their partition counts.
    pub(super) checked: HashMap<String, usize>,
    /// The number the next enqueued message gets (its delivery report's key).
    next_message: usize,
    max_message_bytes: usize,
    /// What a signal reaches the producer's waits through (see [`Self::watching`]).
    pub(super) stop: Arc<dyn Stop>,
    /// Serves delivery reports and errors as they come; held for its drop, which stops
    /// the thread.
    _poller: Poller,
}

impl KafkaProducer {
    pub fn new(cfg: &KafkaConfig) -> Result<Self, Error> {
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
            // The relay enqueues a whole batch at once, in about a millisecond: 5 ms of
            // lingering lets each partition's share of it leave in one request (librdkafka
            // sends one partition per request), where without it the first messages leave
            // one or a few at a time; fewer requests cost the broker less CPU, and the
            // 5 ms is a batch's alone (the next one is fetched meanwhile).
            .set("linger.ms", "5")
            // The relay never fetches a row larger than this (it fails it unread), and
            // librdkafka refuses a larger message at once rather than at the broker.
            .set("message.max.bytes", cfg.max_message_bytes.to_string())
            // A connection not set up (TCP, TLS, SASL) within the message timeout, and
            // at least 5 s, is given up: within the Job (the cronjob's 5 s), and never
            // shorter than the topic check's wait, so that a slow handshake on a loaded
            // host reaches the broker's verdict on the credentials.
            .set(
                "socket.connection.setup.timeout.ms",
                cfg.message_timeout
                    .max(Duration::from_secs(5))
                    .as_millis()
                    .to_string(),
            )
            .set("reconnect.backoff.max.ms", "1000");
        security(&mut c, cfg);
        let producer: BaseProducer<Reports> = c
            .create_with_context(Reports::new(cfg.max_message_bytes))
            .map_err(|e| {
                Error::new(
                    Kind::Config,
                    format!("cannot set up the Kafka producer: {e}"),
                )
            })?;
        let producer = Arc::new(producer);
        let poller = Poller::start(Arc::clone(&producer))?;
        Ok(KafkaProducer {
            producer,
            brokers: cfg.brokers.clone(),
            security: cfg.security.clone(),
            message_timeout: cfg.message_timeout,
            checked: HashMap::new(),
            next_message: 0,
            max_message_bytes: cfg.max_message_bytes,
            stop: Arc::new(Never),
            _poller: poller,
        })
    }

    /// The producer whose waits end early on a signal `stop` tells of.
    pub fn watching<S: Stop + Clone + 'static>(self, stop: &S) -> Self {
        KafkaProducer {
            stop: Arc::new(stop.clone()),
            ..self
        }
    }

    /// Enqueues the batch and returns at once: its delivery reports arrive while the
    /// caller does other work (fetches the next batch, marks the previous one), and
    /// [`KafkaProducer::wait`] collects them. Messages of several batches may be in
    /// flight together; the caller keeps them to distinct keys.
    #[allow(
        clippy::disallowed_methods,
        reason = "delivery reports come in real time, within librdkafka's message timeout; the 1 ms wait is its poll"
    )]
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
                        // The local queue is full: a delivery report frees a place.
                        self.producer.context().wait_any(Duration::from_millis(50));
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

    /// Waits for every delivery report of an enqueued batch (the poll thread serves
    /// those of every batch as they come). Returns one `Delivery` per message, in
    /// order, the moment the last one is in. Not `flush()`: that waits for every batch
    /// in flight, and rdkafka's `BaseProducer::flush` polls in 100 ms slices that only
    /// end when the slice does.
    #[allow(
        clippy::disallowed_methods,
        reason = "delivery reports come in real time, within librdkafka's message timeout: the wait's deadline is a real instant"
    )]
    pub fn wait(&self, batch: Enqueued) -> Vec<Delivery> {
        let Enqueued {
            first,
            count,
            refused,
            mut until,
        } = batch;
        let mut out: Vec<Option<Delivery>> = vec![None; count];
        for (i, delivery) in refused {
            out[i] = Some(delivery);
        }
        let reports = self.producer.context();
        let mut arrived = reports.arrived();
        // Reports of earlier batches that came after their batch was collected (past
        // its timeout) belong to nobody: dropped, so that nothing accumulates.
        arrived.deliveries.retain(|&n, _| n >= first);
        arrived.await_range(first..first + count, |n| out[n - first].is_none());
        let mut fatal = None;
        let mut drained = false;
        while arrived.missing > 0 {
            if let Some(error) = self.fatal_error() {
                // No report still missing will say more than this.
                fatal = Some(error);
                break;
            }
            // After a signal the run ends within a second: what is not acknowledged
            // by then stays pending, as in an outage.
            let now = Instant::now();
            if self.stop.requested().is_some() {
                until = until.min(now + Duration::from_secs(1));
            }
            if now < until {
                arrived = reports.wait(arrived, (until - now).min(SIGNAL_CHECK));
                continue;
            }
            // Past the deadline, the reports librdkafka already has are still taken:
            // the relay may come to collect a batch late, busy with an earlier one,
            // and the reports that came in time are not lost for that.
            if drained {
                break;
            }
            drop(arrived);
            self.serve_queued();
            arrived = reports.arrived();
            drained = true;
        }
        arrived.await_none();
        for (i, slot) in out.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = arrived.deliveries.remove(&(first + i));
            }
        }
        drop(arrived);
        // A fatal error purges the producer's queue: the purged messages' reports
        // (PurgeQueue, PurgeInflight) may all come in before the loop above looks at
        // the producer, and they say only "purged". So a fatal error raised by now
        // explains every message the cluster did not take, reported or not.
        let fatal = fatal.or_else(|| self.fatal_error());
        let missing = match &fatal {
            Some(error) => Delivery::Failed {
                fault: Fault::Fatal,
                error: error.clone(),
            },
            None => Delivery::Failed {
                fault: Fault::Cluster,
                error: "no delivery report before the timeout".to_owned(),
            },
        };
        out.into_iter()
            .map(|r| match r {
                Some(Delivery::Failed {
                    fault: Fault::Cluster,
                    ..
                }) if fatal.is_some() => missing.clone(),
                Some(delivery) => delivery,
                None => missing.clone(),
            })
            .collect()
    }

    /// Serves the events already queued on this thread, beside the poll thread, until
    /// a poll finds none: one event per call (a delivery report event covers a
    /// message set).
    fn serve_queued(&self) {
        let served = &self.producer.context().served;
        loop {
            let before = served.load(Ordering::Relaxed);
            self.producer.poll(Duration::ZERO);
            if served.load(Ordering::Relaxed) == before {
                return;
            }
        }
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

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "a wait on a real producer is timed on the real clock"
)]
mod tests {
    use super::*;
    use crate::settings::DEFAULT_MAX_MESSAGE_BYTES;

    /// A producer of brokers nobody serves (a port nothing listens on).
    fn unreachable(message_timeout: Duration) -> KafkaProducer {
        KafkaProducer::new(&KafkaConfig {
            brokers: "127.0.0.1:1".to_owned(),
            security: KafkaSecurity::Plaintext,
            message_timeout,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        })
        .unwrap()
    }

    fn one_message() -> [OutMessage<'static>; 1] {
        [OutMessage {
            topic: "t",
            key: "k",
            payload: b"{}".to_vec(),
            headers: Vec::new(),
        }]
    }

    /// The wait ends when the batch's last report comes in, not at its deadline: here
    /// the report of a message that timed out (nothing listens), taken from the poll
    /// thread while the wait's deadline is still far.
    #[test]
    fn the_wait_ends_when_the_last_report_comes_in() {
        let mut producer = unreachable(Duration::from_secs(1));
        let mut batch = producer.enqueue(&one_message());
        let deadline = Duration::from_secs(60);
        batch.until = Instant::now() + deadline;
        let started = Instant::now();
        let deliveries = producer.wait(batch);
        assert!(started.elapsed() < deadline / 2, "{:?}", started.elapsed());
        let [Delivery::Failed { fault, error }] = &deliveries[..] else {
            panic!("{deliveries:?}");
        };
        assert_eq!(*fault, Fault::Cluster, "{error}");
        assert!(error.contains("timed out"), "{error}");
    }

    /// A real broker cannot be made to raise a fatal idempotence error on demand:
    /// librdkafka's own test hook raises one, as a sequence gap across a leader change
    /// would, while a message waits in the producer's queue.
    #[test]
    fn a_fatal_producer_error_ends_the_wait_at_once_with_nothing_acknowledged() {
        // Nothing listens there: the message stays queued.
        let mut producer = unreachable(Duration::from_secs(60));
        let batch = producer.enqueue(&one_message());
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
