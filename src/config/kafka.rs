//! How to reach Kafka, from the flags: the brokers checked, the security protocol and
//! SASL credentials, the producer's message timeout. The settings are the Kafka
//! crate's own types ([`KafkaConfig`], [`KafkaSecurity`]): it reads them, this builds
//! them.

use std::time::Duration;

use anyhow::Result;

use crate::cli::{KafkaArgs, SaslMechanism, SecurityProtocol};
use crate::exit::{Failure, fail};
use crate::kafka::{DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, KafkaSecurity, Password};

/// The Kafka settings of `args`, with the producer's `message_timeout`; a refusal is
/// configuration (78) and names the flag and its variable.
pub(super) fn from_args(args: &KafkaArgs, message_timeout: Duration) -> Result<KafkaConfig> {
    let brokers = args
        .brokers
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            fail(
                Failure::Config,
                "no Kafka brokers: set --brokers or KAFKA_BROKERS (e.g. kafka-0:9092,kafka-1:9092)",
            )
        })?;
    for broker in brokers.split(',') {
        let valid = broker.trim().rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !valid {
            return Err(fail(
                Failure::Config,
                format!(
                    "invalid --brokers / KAFKA_BROKERS entry {broker:?}: expected host:port, comma-separated"
                ),
            ));
        }
    }
    let ca_file = match &args.kafka_ca_file {
        None => None,
        Some(path) => {
            std::fs::metadata(path).map_err(|e| {
                fail(
                    Failure::Config,
                    format!(
                        "cannot read the Kafka CA file {} (--kafka-ca-file / KAFKA_CA_FILE): {e}",
                        path.display()
                    ),
                )
            })?;
            Some(path.clone())
        }
    };
    let sasl = |tls: bool| -> Result<KafkaSecurity> {
        let username = args.kafka_username.clone().filter(|u| !u.is_empty());
        let password = args.kafka_password.clone().filter(|p| !p.is_empty());
        let (Some(username), Some(password)) = (username, password) else {
            return Err(fail(
                Failure::Config,
                "SASL needs a user name and a password: set --kafka-username / KAFKA_USERNAME \
                 and KAFKA_PASSWORD",
            ));
        };
        Ok(KafkaSecurity::Sasl {
            tls,
            ca_file: ca_file.clone(),
            mechanism: match args.kafka_sasl_mechanism {
                SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
                SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
                SaslMechanism::Plain => "PLAIN",
            },
            username,
            password: Password::new(password),
        })
    };
    let security = match args.kafka_security_protocol {
        SecurityProtocol::Plaintext => KafkaSecurity::Plaintext,
        SecurityProtocol::Ssl => KafkaSecurity::Ssl {
            ca_file: ca_file.clone(),
        },
        SecurityProtocol::SaslSsl => sasl(true)?,
        SecurityProtocol::SaslPlaintext => sasl(false)?,
    };
    Ok(KafkaConfig {
        brokers: brokers.to_owned(),
        security,
        message_timeout,
        max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
    })
}
