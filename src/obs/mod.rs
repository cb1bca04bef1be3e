//! Observability: log lines on stderr (text or JSON lines, each carrying the run id),
//! the metric families, the Pushgateway client that pushes them (over the HTTP client
//! of `push_client`), and traces over OTLP (`trace`).

pub mod ack_age;
pub mod backlog_only;
pub mod lateness;
mod log;
pub mod metrics;
pub mod push_client;
pub mod pushgateway;
pub mod trace;

pub use self::log::init_logging;
