//! Logs go to stderr; stdout is for data only. `LOG_FORMAT=json` gives one JSON object
//! per line. Every line carries the run id, and while tracing is on the trace id (and
//! the current span's id, when there is one). Fields come from the `log` crate's
//! key-values (`info!(phase = "Reserve"; "batch selected")`).

use std::io::Write;

use chrono::{SecondsFormat, Utc};
use log::kv::{Key, Value, VisitSource};
use serde_json::{Map, Value as Json};
use uuid::Uuid;

use crate::cli::LogFormat;

/// Installs the logger. `RUST_LOG` may change the filter; by default `filter`
/// (`cli::Cli::default_log_filter`).
pub fn init_logging(format: LogFormat, filter: &str, run_id: Uuid) {
    let env = env_logger::Env::default()
        .filter_or("RUST_LOG", filter)
        .write_style_or("LOG_STYLE", "never");
    let mut builder = env_logger::Builder::from_env(env);
    builder.target(env_logger::Target::Stderr);
    match format {
        LogFormat::Json => builder.format(move |buf, record| {
            let mut line = Map::new();
            line.insert("ts".into(), now().into());
            line.insert("level".into(), record.level().as_str().into());
            line.insert("run_id".into(), run_id.to_string().into());
            line.insert("msg".into(), record.args().to_string().into());
            if let Some((trace_id, span_id)) = super::trace::log_ids() {
                line.insert("trace_id".into(), trace_id.into());
                if let Some(span_id) = span_id {
                    line.insert("span_id".into(), span_id.into());
                }
            }
            let mut fields = JsonFields(&mut line);
            let _ = record.key_values().visit(&mut fields);
            serde_json::to_writer(&mut *buf, &Json::Object(line))?;
            writeln!(buf)
        }),
        LogFormat::Text => builder.format(move |buf, record| {
            write!(
                buf,
                "{} {:<5} run_id={} {}",
                now(),
                record.level(),
                run_id,
                record.args()
            )?;
            let _ = record.key_values().visit(&mut TextFields(&mut *buf));
            if let Some((trace_id, span_id)) = super::trace::log_ids() {
                write!(buf, " trace_id={trace_id}")?;
                if let Some(span_id) = span_id {
                    write!(buf, " span_id={span_id}")?;
                }
            }
            writeln!(buf)
        }),
    };
    // A second init (tests calling into the library twice) is harmless.
    let _ = builder.try_init();
}

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

struct JsonFields<'a>(&'a mut Map<String, Json>);

impl<'kvs> VisitSource<'kvs> for JsonFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        let json = if let Some(v) = value.to_i64() {
            Json::from(v)
        } else if let Some(v) = value.to_u64() {
            Json::from(v)
        } else if let Some(v) = value.to_f64() {
            Json::from(v)
        } else if let Some(v) = value.to_bool() {
            Json::from(v)
        } else {
            Json::from(value.to_string())
        };
        self.0.insert(key.as_str().to_owned(), json);
        Ok(())
    }
}

/// Writes each field into the line as it comes (a relay logs a line per event: no
/// string of its own per field).
struct TextFields<'a>(&'a mut env_logger::fmt::Formatter);

impl<'kvs> VisitSource<'kvs> for TextFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        let owned;
        let text = match value.to_borrowed_str() {
            Some(text) => text,
            None => {
                owned = value.to_string();
                owned.as_str()
            }
        };
        // Quote values a reader could otherwise split wrongly.
        let written = if text.is_empty() || text.contains(|c: char| c.is_whitespace() || c == '"') {
            write!(self.0, " {key}={text:?}")
        } else {
            write!(self.0, " {key}={text}")
        };
        written.map_err(|_| log::kv::Error::msg("the log line could not be written"))
    }
}
