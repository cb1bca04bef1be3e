//! The connection flags every command shares: PostgreSQL, Kafka, the metrics push and
//! the traces, each with its environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::values::duration_in;

/// How to reach PostgreSQL.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL or key=value string, e.g.
    /// postgres://user:secret@db:5432/crm?sslmode=verify-full. sslmode: disable, prefer
    /// (default), require, verify-ca, verify-full; sslrootcert=FILE adds a CA
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// PEM file with the CA that signs the database server's certificate (overrides
    /// sslrootcert in the URL)
    #[arg(long, env = "PGSSLROOTCERT", value_name = "FILE")]
    pub database_ca_file: Option<PathBuf>,

    /// Give up connecting to a host after this long, TLS and startup included (each
    /// host of a URL with several gets this long); a connect_timeout in the URL wins
    /// (1s..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_CONNECT_TIMEOUT", value_name = "DURATION",
          default_value = "5s", value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(60)))]
    pub connect_timeout: Duration,

    /// Cancel any single statement running longer than this; the server also ends a
    /// transaction left idle for three times this long (100ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_STATEMENT_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = duration_in(Duration::from_millis(100), Duration::from_secs(60)))]
    pub statement_timeout: Duration,

    /// Give up waiting for any lock after this long (10ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_LOCK_TIMEOUT", value_name = "DURATION",
          default_value = "3s", value_parser = duration_in(Duration::from_millis(10), Duration::from_secs(60)))]
    pub lock_timeout: Duration,
}

/// Where to push the run's metrics.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Prometheus Pushgateway to push this run's metrics to when it ends, success or
    /// failure (http://host:port[/path-prefix]; unset or empty = no push). A failed push
    /// is logged and never fails the run
    #[arg(long, env = "PUSHGATEWAY_URL", value_name = "URL")]
    pub pushgateway_url: Option<String>,
}

/// How to reach Kafka.
#[derive(Debug, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated host:port
    #[arg(long, env = "KAFKA_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,

    /// How to talk to the brokers
    #[arg(long, env = "KAFKA_SECURITY_PROTOCOL", value_enum, default_value_t = SecurityProtocol::Plaintext)]
    pub kafka_security_protocol: SecurityProtocol,

    /// PEM file with the CA that signs the brokers' certificates (SSL, SASL_SSL)
    #[arg(long, env = "KAFKA_CA_FILE", value_name = "FILE")]
    pub kafka_ca_file: Option<PathBuf>,

    /// SASL mechanism (SASL_SSL, SASL_PLAINTEXT)
    #[arg(long, env = "KAFKA_SASL_MECHANISM", value_enum, default_value_t = SaslMechanism::ScramSha512)]
    pub kafka_sasl_mechanism: SaslMechanism,

    /// SASL user name
    #[arg(long, env = "KAFKA_USERNAME", value_name = "USER")]
    pub kafka_username: Option<String>,

    /// SASL password; prefer the environment variable (never logged)
    #[arg(
        long,
        env = "KAFKA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub kafka_password: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityProtocol {
    #[value(name = "plaintext", alias = "PLAINTEXT")]
    Plaintext,
    #[value(name = "ssl", alias = "SSL")]
    Ssl,
    #[value(name = "sasl_ssl", alias = "SASL_SSL")]
    SaslSsl,
    #[value(name = "sasl_plaintext", alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "PLAIN")]
    Plain,
}
