//! The producer's context: delivery reports collected by the message's number (served
//! on the producer's own poll thread, [`super::poller`]), a waiter woken when the last
//! report it awaits comes in, and the broker errors librdkafka reports on the side.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;

use super::fault::{Delivery, failed};

/// Collects delivery reports by the message's number, and the broker
/// errors librdkafka reports on the side (a failed TLS handshake, refused credentials),
/// which say why a broker cannot be reached.
pub(super) struct Reports {
    arrived: Mutex<Arrived>,
    /// Notified when the last report a waiter awaits comes in, when any report comes
    /// in while a waiter waits for a place in a full queue, and on every error event
    /// (a fatal error ends a wait).
    wake: Condvar,
    pub(super) broker_errors: Mutex<BrokerErrors>,
    /// Events served so far (delivery reports and errors): tells a poll that served one
    /// from a poll that found the queue empty.
    pub(super) served: AtomicUsize,
    /// The producer's largest message (`message.max.bytes`), for the reason a too
    /// large message gives.
    pub(super) max_message_bytes: usize,
}

/// The reports that came in, and what the one waiter (the relay's thread) waits for.
#[derive(Default)]
pub(super) struct Arrived {
    /// By the message's number among all the producer enqueued (several batches may
    /// be in flight); each is taken out when its batch is collected.
    pub(super) deliveries: HashMap<usize, Delivery>,
    /// The numbers of the messages whose reports are awaited (empty: none is).
    awaited: Range<usize>,
    /// How many of the awaited reports have not come in yet: the waiter is woken when
    /// this reaches zero, not by each report of its batch.
    pub(super) missing: usize,
    /// A waiter waits for any report (a place in a full queue).
    any: bool,
}

impl Arrived {
    /// Awaits the reports of messages `awaited` except those for which `expected`
    /// says none will come (refused at once); returns how many are still missing.
    pub(super) fn await_range(
        &mut self,
        awaited: Range<usize>,
        expected: impl Fn(usize) -> bool,
    ) -> usize {
        self.missing = awaited
            .clone()
            .filter(|&n| expected(n) && !self.deliveries.contains_key(&n))
            .count();
        self.awaited = awaited;
        self.missing
    }

    /// Awaits nothing any more.
    pub(super) fn await_none(&mut self) {
        self.awaited = 0..0;
        self.missing = 0;
    }
}

impl Reports {
    pub(super) fn new(max_message_bytes: usize) -> Self {
        Reports {
            arrived: Mutex::default(),
            wake: Condvar::new(),
            broker_errors: Mutex::default(),
            served: AtomicUsize::new(0),
            max_message_bytes,
        }
    }

    pub(super) fn arrived(&self) -> MutexGuard<'_, Arrived> {
        self.arrived.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits at most `timeout` to be woken (see [`Reports::wake`]); the caller
    /// checks what it waits for again.
    pub(super) fn wait<'a>(
        &self,
        arrived: MutexGuard<'a, Arrived>,
        timeout: Duration,
    ) -> MutexGuard<'a, Arrived> {
        self.wake
            .wait_timeout(arrived, timeout)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Waits at most `timeout` for any delivery report (or error event).
    pub(super) fn wait_any(&self, timeout: Duration) {
        let mut arrived = self.arrived();
        arrived.any = true;
        let mut arrived = self.wait(arrived, timeout);
        arrived.any = false;
    }
}

/// The broker errors of one connection attempt (since the last [`BrokerErrors::take`]):
/// the first refusal (a failed TLS handshake, refused credentials) and the last error.
/// The refusal decides the attempt's class whatever came after it: under load, the
/// connection that carried a refusal is often cut, or the next one times out, and the
/// error that comes last is then a transport failure that says nothing of the settings.
#[derive(Debug, Clone, Default)]
pub(super) struct BrokerErrors {
    pub(super) refusal: Option<BrokerError>,
    pub(super) last: Option<BrokerError>,
}

impl BrokerErrors {
    /// Takes in one more error.
    pub(super) fn push(&mut self, error: BrokerError) {
        if self.refusal.is_none() && error.is_configuration() {
            self.refusal = Some(error.clone());
        }
        self.last = Some(error);
    }

    /// Whether a refusal was seen: retrying with the same settings cannot help.
    pub(super) fn refused(&self) -> bool {
        self.refusal.is_some()
    }

    /// The error that explains the attempt: its refusal if there was one, else the
    /// last error; the record starts again empty.
    pub(super) fn take(&mut self) -> Option<BrokerError> {
        let errors = std::mem::take(self);
        errors.refusal.or(errors.last)
    }
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
    /// Remembers the failures that explain an unreachable broker; librdkafka's own log
    /// line has already said it once (the default would log every repeat).
    fn error(&self, error: KafkaError, reason: &str) {
        self.served.fetch_add(1, Ordering::Relaxed);
        // A waiter asks again whether the producer hit a fatal error (taken between
        // its check and its wait, the lock makes sure the wake-up is not lost).
        drop(self.arrived());
        self.wake.notify_all();
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::Fatal) {
            // Read from the producer itself where it matters (`fatal_error`).
            return;
        }
        if code == Some(RDKafkaErrorCode::AllBrokersDown) {
            // A summary of the failures that explain it.
            return;
        }
        self.broker_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(BrokerError {
                code,
                reason: reason.to_owned(),
            });
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
        let mut arrived = self.arrived();
        arrived.deliveries.insert(index, delivery);
        let last = arrived.awaited.contains(&index) && {
            arrived.missing = arrived.missing.saturating_sub(1);
            arrived.missing == 0
        };
        if last || arrived.any {
            self.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: RDKafkaErrorCode, reason: &str) -> BrokerError {
        BrokerError {
            code: Some(code),
            reason: reason.to_owned(),
        }
    }

    /// What a loaded host showed: the refusal, then the next connection cut while it
    /// authenticated. The refusal decides, in whichever order the rest came.
    #[test]
    fn a_refusal_decides_whatever_error_comes_after_it() {
        let refusal = error(
            RDKafkaErrorCode::Authentication,
            "SASL authentication error: Authentication failed during authentication due to \
             invalid credentials with SASL mechanism SCRAM-SHA-512",
        );
        let cut = error(
            RDKafkaErrorCode::BrokerTransportFailure,
            "SASL authentication error: SaslAuthenticateRequest failed: Local: Broker \
             transport failure",
        );
        let down = error(
            RDKafkaErrorCode::BrokerTransportFailure,
            "Connection refused",
        );
        for order in [
            vec![refusal.clone(), cut.clone()],
            vec![down.clone(), refusal.clone(), cut.clone(), down.clone()],
            vec![refusal.clone()],
        ] {
            let mut errors = BrokerErrors::default();
            for e in order {
                errors.push(e);
            }
            assert!(errors.refused());
            let decided = errors.take().unwrap();
            assert_eq!(decided.code, Some(RDKafkaErrorCode::Authentication));
            assert_eq!(decided.reason, refusal.reason);
            // The next attempt starts with nothing seen.
            assert!(!errors.refused() && errors.take().is_none());
        }
    }

    /// The first refusal is the one named (a TLS failure and then refused credentials
    /// from another broker: the first is what the operator mends first).
    #[test]
    fn the_first_refusal_is_kept_and_without_one_the_last_error_explains() {
        let mut errors = BrokerErrors::default();
        errors.push(error(RDKafkaErrorCode::BrokerTransportFailure, "cut"));
        errors.push(error(RDKafkaErrorCode::BrokerTransportFailure, "refused"));
        assert!(!errors.refused());
        assert_eq!(errors.clone().take().unwrap().reason, "refused");
        errors.push(error(RDKafkaErrorCode::SSL, "certificate verify failed"));
        errors.push(error(RDKafkaErrorCode::Authentication, "bad password"));
        assert_eq!(errors.take().unwrap().reason, "certificate verify failed");
    }
}
