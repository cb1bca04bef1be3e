//! The producer's context: delivery reports collected by the message's number, and
//! the broker errors librdkafka reports on the side.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;

use super::fault::{Delivery, failed};

/// Collects delivery reports by the message's number, and the broker
/// errors librdkafka reports on the side (a failed TLS handshake, refused credentials),
/// which say why a broker cannot be reached.
#[derive(Default)]
pub(super) struct Reports {
    /// By the message's number among all the producer enqueued (several batches may
    /// be in flight); each is taken out when its batch is collected.
    pub(super) deliveries: Mutex<HashMap<usize, Delivery>>,
    pub(super) broker_error: Mutex<Option<BrokerError>>,
    /// Events served so far (delivery reports and errors): tells a poll that served one
    /// from a poll that found the queue empty.
    pub(super) served: AtomicUsize,
    /// The producer's largest message (`message.max.bytes`), for the reason a too
    /// large message gives.
    pub(super) max_message_bytes: usize,
}

/// An error librdkafka reported about a broker connection.
#[derive(Debug, Clone)]
pub(super) struct BrokerError {
    pub(super) code: Option<RDKafkaErrorCode>,
    pub(super) reason: String,
}

impl BrokerError {
    /// A TLS or authentication failure: retrying with the same settings cannot help.
    pub(super) fn is_configuration(&self) -> bool {
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
