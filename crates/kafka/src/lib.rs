//! Kafka: the rdkafka producer (idempotent, acks=all, Java-compatible murmur2
//! partitioning, no topic auto-creation), the topic check, sending a batch while waiting
//! for every delivery report, and explain's read-back of a published event. Knows
//! nothing of the outbox, the database or the exit codes: its settings are its own
//! ([`KafkaConfig`]), its errors say what they mean for the run ([`Error`], [`Kind`]),
//! and a signal reaches its waits through a [`Stop`] the caller hands it.

mod error;
mod fault;
mod poller;
mod producer;
pub mod readback;
mod reports;
mod security;
mod settings;
mod topic;

pub use error::{Error, Kind, Stop};
pub use fault::{Delivery, Fault, fault_of};
pub use producer::{Enqueued, KafkaProducer, OutMessage};
pub use security::security;
pub use settings::{DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, KafkaSecurity, Password};
pub use topic::TopicCheck;
