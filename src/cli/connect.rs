//! The connection flags every command shares: PostgreSQL, Kafka, the metrics push and
//! the traces, each with its environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::values::{choice, duration_in, path, text, trimmed};

/// How to reach PostgreSQL: the connection alone, which `migrate` takes as it is (its
/// timeouts are the runner's own flags).
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// PostgreSQL connection URL or key=value string, e.g.
    /// postgres://user:secret@db:5432/crm?sslmode=verify-full. sslmode: disable, prefer
    /// (default), require, verify-ca, verify-full; sslrootcert=FILE adds a CA
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL", value_parser = text())]
    pub database_url: Option<String>,

    /// PEM file with the CA that signs the database server's certificate (overrides
    /// sslrootcert in the URL)
    #[arg(long, env = "PGSSLROOTCERT", value_name = "FILE", value_parser = path())]
    pub database_ca_file: Option<PathBuf>,

    /// Give up connecting to a host after this long, TLS and startup included (each
    /// host of a URL with several gets this long); a connect_timeout in the URL wins
    /// (1s..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_CONNECT_TIMEOUT", value_name = "DURATION",
          default_value = "5s", value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(60))))]
    pub connect_timeout: Duration,
}

/// How to reach PostgreSQL, and the session's timeouts.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Cancel any single statement running longer than this; the server also ends a
    /// transaction left idle for three times this long (100ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_STATEMENT_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = trimmed(duration_in(Duration::from_millis(100), Duration::from_secs(60))))]
    pub statement_timeout: Duration,

    /// Give up waiting for any lock after this long (10ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_LOCK_TIMEOUT", value_name = "DURATION",
          default_value = "3s", value_parser = trimmed(duration_in(Duration::from_millis(10), Duration::from_secs(60))))]
    pub lock_timeout: Duration,
}

/// Where to push the run's metrics, and how: the Pushgateway's URL, its CA, the push's
/// credentials (sent only over https, never logged).
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Prometheus Pushgateway to push this run's metrics to when it ends, success or
    /// failure (http://host:port[/path-prefix]; unset or empty = no push). A failed push
    /// is logged and never fails the run
    #[arg(long, env = "PUSHGATEWAY_URL", value_name = "URL", value_parser = text())]
    pub pushgateway_url: Option<String>,

    /// PEM file of the CA(s) that signed the Pushgateway's certificate, trusted besides
    /// the system's
    #[arg(long, env = "PUSHGATEWAY_CA_FILE", value_name = "FILE", value_parser = path())]
    pub pushgateway_ca_file: Option<PathBuf>,

    /// HTTP basic authentication of the push: the user name, with
    /// --pushgateway-password or --pushgateway-password-file (https only)
    #[arg(long, env = "PUSHGATEWAY_USERNAME", value_name = "USER", value_parser = text())]
    pub pushgateway_username: Option<String>,

    /// The basic authentication's password; prefer the environment variable or the file
    /// (never logged)
    #[arg(
        long,
        env = "PUSHGATEWAY_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD", value_parser = text())]
    pub pushgateway_password: Option<String>,

    /// A file holding the password, instead of --pushgateway-password (a trailing newline
    /// is not part of it)
    #[arg(long, env = "PUSHGATEWAY_PASSWORD_FILE", value_name = "FILE", value_parser = path())]
    pub pushgateway_password_file: Option<PathBuf>,

    /// A bearer token for the push, instead of basic authentication (https only, never
    /// logged)
    #[arg(
        long,
        env = "PUSHGATEWAY_BEARER_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN", value_parser = text())]
    pub pushgateway_bearer_token: Option<String>,

    /// A file holding the bearer token, instead of --pushgateway-bearer-token
    #[arg(long, env = "PUSHGATEWAY_BEARER_TOKEN_FILE", value_name = "FILE", value_parser = path())]
    pub pushgateway_bearer_token_file: Option<PathBuf>,
}

/// Where the run's traces go: OpenTelemetry's standard variables, each with a flag.
/// Tracing never changes a run's outcome: a value it cannot use is logged and tracing
/// stays off.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Turns tracing on: the OTLP/HTTP collector the spans are sent to (to its
    /// /v1/traces), e.g. http://otel-collector.monitoring:4318; unset or empty = no traces
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL", value_parser = text())]
    pub otlp_endpoint: Option<String>,

    /// The same for traces only, as the whole URL the spans are posted to; wins over
    /// --otlp-endpoint
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL", value_parser = text())]
    pub otlp_traces_endpoint: Option<String>,

    /// The OTLP protocol (default http/protobuf); grpc is not built in and turns tracing
    /// off with a warning
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_PROTOCOL",
        value_enum,
        value_name = "PROTOCOL", value_parser = choice::<OtlpProtocol>())]
    pub otlp_protocol: Option<OtlpProtocol>,

    /// The same for traces only; wins over --otlp-protocol
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        value_enum,
        value_name = "PROTOCOL", value_parser = choice::<OtlpProtocol>())]
    pub otlp_traces_protocol: Option<OtlpProtocol>,

    /// Headers sent with every export, key=value,... with percent-encoded values (e.g. a
    /// collector's authorization; never logged)
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_HEADERS",
        hide_env_values = true,
        value_name = "KEY=VALUE,...", value_parser = text())]
    pub otlp_headers: Option<String>,

    /// How long one export may take, in milliseconds (1..=600000; default 10000)
    #[arg(long, env = "OTEL_EXPORTER_OTLP_TIMEOUT", value_name = "MS",
          value_parser = trimmed(clap::value_parser!(u64).range(1..=600_000)))]
    pub otlp_timeout: Option<u64>,

    /// The traces' service name (default booking-expire)
    #[arg(long, env = "OTEL_SERVICE_NAME", value_name = "NAME", value_parser = text())]
    pub otel_service_name: Option<String>,

    /// The traces' resource attributes, key=value,... (a service.name here names the
    /// service too)
    #[arg(long, env = "OTEL_RESOURCE_ATTRIBUTES", value_name = "KEY=VALUE,...", value_parser = text())]
    pub otel_resource_attributes: Option<String>,

    /// true: no traces, whatever the endpoint says (true or false)
    #[arg(long, env = "OTEL_SDK_DISABLED", value_name = "BOOL", value_parser = trimmed(true_or_false))]
    pub otel_sdk_disabled: Option<bool>,
}

/// The OTLP protocols, as OpenTelemetry names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OtlpProtocol {
    #[value(name = "http/protobuf")]
    HttpProtobuf,
    #[value(name = "http/json")]
    HttpJson,
    #[value(name = "grpc")]
    Grpc,
}

/// `true` or `false`, in any case, as OpenTelemetry reads its booleans.
fn true_or_false(s: &str) -> Result<bool, String> {
    if s.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if s.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(format!("{s:?} is not allowed: use true or false"))
    }
}

/// How to reach Kafka.
#[derive(Debug, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated host:port
    #[arg(long, env = "KAFKA_BROKERS", value_name = "HOST:PORT,...", value_parser = text())]
    pub brokers: Option<String>,

    /// How to talk to the brokers
    #[arg(long, env = "KAFKA_SECURITY_PROTOCOL", value_enum, default_value_t = SecurityProtocol::Plaintext, value_parser = choice::<SecurityProtocol>())]
    pub kafka_security_protocol: SecurityProtocol,

    /// PEM file with the CA that signs the brokers' certificates (SSL, SASL_SSL)
    #[arg(long, env = "KAFKA_CA_FILE", value_name = "FILE", value_parser = path())]
    pub kafka_ca_file: Option<PathBuf>,

    /// SASL mechanism (SASL_SSL, SASL_PLAINTEXT)
    #[arg(long, env = "KAFKA_SASL_MECHANISM", value_enum, default_value_t = SaslMechanism::ScramSha512, value_parser = choice::<SaslMechanism>())]
    pub kafka_sasl_mechanism: SaslMechanism,

    /// SASL user name
    #[arg(long, env = "KAFKA_USERNAME", value_name = "USER", value_parser = text())]
    pub kafka_username: Option<String>,

    /// SASL password; prefer the environment variable (never logged)
    #[arg(
        long,
        env = "KAFKA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD", value_parser = text())]
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
