//! Observability: log lines on stderr (text or JSON lines), each carrying the run id.

mod log;
pub mod metrics;

pub use self::log::{LogFormat, init_logging};
