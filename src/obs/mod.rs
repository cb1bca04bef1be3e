//! Observability: log lines on stderr (text or JSON lines, each carrying the run id),
//! the metric families, and the Pushgateway client that pushes them.

mod log;
pub mod metrics;
pub mod pushgateway;

pub use self::log::init_logging;
