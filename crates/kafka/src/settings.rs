//! How to reach Kafka: the brokers, the security protocol and SASL credentials (a
//! [`Password`] that never shows), the producer's message timeout and size limit. The
//! application's configuration builds them from its flags; this crate only reads them.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How the relay authenticates and encrypts towards Kafka.
#[derive(Debug, Clone)]
pub enum KafkaSecurity {
    Plaintext,
    Ssl {
        ca_file: Option<PathBuf>,
    },
    Sasl {
        tls: bool,
        ca_file: Option<PathBuf>,
        mechanism: &'static str,
        username: String,
        password: Password,
    },
}

#[derive(Debug, Clone)]
pub struct KafkaConfig {
    pub brokers: String,
    pub security: KafkaSecurity,
    pub message_timeout: Duration,
    /// The largest message the producer sends (librdkafka's `message.max.bytes`); the
    /// relay fails a larger row without reading it.
    pub max_message_bytes: usize,
}

/// librdkafka's own default for `message.max.bytes`, just under the brokers' default
/// `message.max.bytes` (1,048,588).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1_000_000;

/// The SASL password: `Debug` and `Display` print `***`; [`Password::expose`] hands it
/// to librdkafka alone.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(value: impl Into<String>) -> Self {
        Password(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_prints() {
        let security = KafkaSecurity::Sasl {
            tls: true,
            ca_file: None,
            mechanism: "PLAIN",
            username: "relay".to_owned(),
            password: Password::new("hunter2"),
        };
        let shown = format!("{security:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("\"***\""),
            "{shown}"
        );
        assert_eq!(Password::new("hunter2").to_string(), "***");
    }
}
