//! Observability: log lines on stderr (text or JSON lines), each carrying the run id;
//! metrics pushed to a Pushgateway; traces over OTLP (`trace`).

mod log;
pub mod metrics;
pub mod push_client;
pub mod trace;

pub use self::log::{LogFormat, init_logging};
