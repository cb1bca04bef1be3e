//! Observability: log lines on stderr (text or JSON lines, each carrying the run id),
//! the metric families with the figures their gauges show and their text encoding, the
//! Pushgateway client that pushes them (over the HTTP client of `push_client`), and
//! traces over OTLP (`trace`). It receives plain figures (`figures`), never the
//! cycle's, the relay's or the store's own types.

pub mod ack_age;
pub mod backlog_only;
pub mod exposition;
pub mod fields;
pub mod figures;
pub mod gauges;
pub mod lateness;
mod log;
pub mod metrics;
pub mod push_client;
pub mod pushgateway;
pub mod trace;

pub use self::log::init_logging;
