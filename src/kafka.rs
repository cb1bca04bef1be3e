//! The rdkafka producer: configuration (idempotent, acks=all, Java-compatible murmur2
//! partitioning, no topic auto-creation), the topic check, and sending a batch while
//! waiting for every delivery report. Knows nothing of the outbox.

mod fault;
mod producer;
mod reports;
mod security;
mod topic;

pub use fault::{Delivery, Fault, fault_of};
pub use producer::{Enqueued, KafkaProducer, OutMessage};
pub use security::security;
pub use topic::TopicCheck;
