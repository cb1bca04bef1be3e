//! Observability: log lines on stderr (text or JSON lines, each carrying the run id),
//! the metric families with the figures their gauges show and their text encoding, the
//! Pushgateway client that pushes them (over the HTTP client of `push_client`), and
//! traces over OTLP (`trace`). It receives plain figures (`figures`), never the
//! cycle's, the relay's or the store's own types.

pub(crate) mod ack_age;
pub mod backlog_only;
pub(crate) mod exposition;
pub(crate) mod fields;
pub(crate) mod figures;
pub(crate) mod gauges;
pub(crate) mod lateness;
mod log;
pub(crate) mod metrics;
pub(crate) mod push_client;
pub(crate) mod pushgateway;
pub(crate) mod trace;

pub(crate) use self::log::init_logging;
