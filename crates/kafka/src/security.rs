//! librdkafka's security settings (TLS, SASL) for any client of the configured
//! brokers.

use rdkafka::config::ClientConfig;

use crate::settings::{KafkaConfig, KafkaSecurity};

/// librdkafka's security settings for a client of `cfg`: the relay's producer, and
/// any client that reads back what it sent.
pub fn security(c: &mut ClientConfig, cfg: &KafkaConfig) {
    match &cfg.security {
        KafkaSecurity::Plaintext => {
            c.set("security.protocol", "plaintext");
        }
        KafkaSecurity::Ssl { ca_file } => {
            c.set("security.protocol", "ssl");
            if let Some(ca) = ca_file {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
        KafkaSecurity::Sasl {
            tls,
            ca_file,
            mechanism,
            username,
            password,
        } => {
            c.set(
                "security.protocol",
                if *tls { "sasl_ssl" } else { "sasl_plaintext" },
            )
            .set("sasl.mechanism", *mechanism)
            .set("sasl.username", username)
            .set("sasl.password", password.expose());
            if let Some(ca) = ca_file {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
    }
}
