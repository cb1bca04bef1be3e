//! Whose fault a failed delivery is: the classes of librdkafka's error codes, and
//! what a failed delivery says (a too large message: its size against the limit).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

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

/// A failed delivery of a message of `size` bytes (key and value), classified; a too
/// large one says how large against which limit.
pub(super) fn failed(e: &KafkaError, size: usize, limit: usize) -> Delivery {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
