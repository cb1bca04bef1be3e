//! Kafka: the rdkafka producer (idempotent, acks=all, Java-compatible murmur2
//! partitioning, no topic auto-creation), the topic check, sending a batch while waiting
//! for every delivery report, explain's read-back of a published event, and audit's
//! read of a topic. Knows nothing of the outbox, the database or the exit codes: its
//! settings are its own ([`KafkaConfig`]), its errors say what they mean for the run
//! ([`Error`], [`Kind`]), and a signal reaches its waits through a [`Stop`] the caller
//! hands it.
//!
//! With the `driver` feature, `driver` re-exports rdkafka: the integration tests' own
//! consumer and topic admin, never the program's. Only the application's
//! `[dev-dependencies]` enable it, so no build of the binary sees it, and the
//! architecture rules refuse a use of it in the program's code.

// No unsafe code in the program: the compiler holds it. Only a unit test calls
// librdkafka's own test hook for a fatal error (producer.rs), which has no safe binding.
#![cfg_attr(not(test), forbid(unsafe_code))]

/// The Kafka client crate, for the integration tests' own consumer and topic admin
/// only (the `driver` feature; the crate's doc says why).
#[cfg(feature = "driver")]
pub mod driver {
    pub use rdkafka;
}

mod error;
mod fault;
mod poller;
mod producer;
pub mod readback;
mod reports;
pub mod scan;
mod security;
mod settings;
mod topic;

pub use error::{Error, Kind, Stop};
pub use fault::{Delivery, Fault, fault_of};
pub use producer::{Enqueued, KafkaProducer, OutMessage};
pub use security::security;
pub use settings::{DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, KafkaSecurity, Password};
pub use topic::TopicCheck;
