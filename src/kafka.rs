//! Kafka: the rdkafka producer (idempotent, acks=all, Java-compatible murmur2
//! partitioning, no topic auto-creation), the topic check, sending a batch while waiting
//! for every delivery report, and explain's read-back of a published event. Knows
//! nothing of the outbox.

mod fault;
mod poller;
mod producer;
pub mod readback;
mod reports;
mod security;
mod topic;

pub use fault::{Delivery, Fault, fault_of};
pub use producer::{Enqueued, KafkaProducer, OutMessage};
pub use security::security;
pub use topic::TopicCheck;
