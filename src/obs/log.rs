//! Logs go to stderr; stdout is for data only. `LOG_FORMAT=json` gives one JSON object
//! per line. Every line carries the run id, and while tracing is on the trace id (and
//! the current span's id, when there is one). Fields come from the `log` crate's
//! key-values (`info!(Phase = "Reserve"; "batch selected")`).

use std::borrow::Cow;
use std::io::Write;

use chrono::SecondsFormat;
use log::kv::{Key, Value, VisitSource};
use uuid::Uuid;

use super::fields::{ENVELOPE, LEVEL, MSG, RUN_ID, SPAN_ID, TRACE_ID, TS};
use crate::clock::{Clock, SystemClock};
use crate::config::LogFormat;
use crate::render::{escape_lines, is_control, json_safe};

/// Installs the logger. `RUST_LOG` may change the filter; by default `filter`
/// (`cli::Cli::default_log_filter`).
pub(crate) fn init_logging(format: LogFormat, filter: &str, run_id: Uuid) {
    let env = env_logger::Env::default()
        .filter_or("RUST_LOG", filter)
        .write_style_or("LOG_STYLE", "never");
    let mut builder = env_logger::Builder::from_env(env);
    builder.target(env_logger::Target::Stderr);
    let run_text = run_id.to_string();
    match format {
        LogFormat::Json => builder.format(move |buf, record| {
            // Written field by field, in a fixed order (the line's own keys, then the
            // record's fields as given): a cycle logs a line per expiry, and a map per
            // line cost as much as the rest of the line's work.
            let mut line = JsonLine::start(&mut *buf);
            line.text(TS, &now())?;
            line.text(LEVEL, record.level().as_str())?;
            match record.args().as_str() {
                Some(msg) => line.text(MSG, msg)?,
                None => line.text(MSG, &record.args().to_string())?,
            }
            line.text(RUN_ID, &run_text)?;
            if let Some((trace_id, span_id)) = super::trace::log_ids() {
                line.text(TRACE_ID, &trace_id)?;
                if let Some(span_id) = span_id {
                    line.text(SPAN_ID, &span_id)?;
                }
            }
            let _ = record.key_values().visit(&mut line);
            line.end()
        }),
        LogFormat::Text => builder.format(move |buf, record| {
            // The message may quote a server's text: its control characters escaped.
            let msg = match record.args().as_str() {
                Some(msg) => Cow::Borrowed(msg),
                None => Cow::Owned(record.args().to_string()),
            };
            write!(
                buf,
                "{} {:<5} {RUN_ID}={} {}",
                now(),
                record.level(),
                run_id,
                escape_lines(&msg)
            )?;
            let _ = record.key_values().visit(&mut TextFields(&mut *buf));
            if let Some((trace_id, span_id)) = super::trace::log_ids() {
                write!(buf, " {TRACE_ID}={trace_id}")?;
                if let Some(span_id) = span_id {
                    write!(buf, " {SPAN_ID}={span_id}")?;
                }
            }
            writeln!(buf)
        }),
    };
    // A second init (tests calling into the library twice) is harmless.
    let _ = builder.try_init();
}

fn now() -> String {
    SystemClock
        .now()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// One JSON object, written into the log line key by key.
struct JsonLine<'a> {
    out: &'a mut env_logger::fmt::Formatter,
    first: bool,
}

impl<'a> JsonLine<'a> {
    fn start(out: &'a mut env_logger::fmt::Formatter) -> Self {
        JsonLine { out, first: true }
    }

    fn key(&mut self, key: &str) -> std::io::Result<()> {
        self.out.write_all(if self.first { b"{" } else { b"," })?;
        self.first = false;
        serde_json::to_writer(&mut *self.out, key)?;
        self.out.write_all(b":")
    }

    fn text(&mut self, key: &str, value: &str) -> std::io::Result<()> {
        self.key(key)?;
        self.string(value)
    }

    /// A JSON string, safe on a terminal (`render::json_safe`: serde_json leaves DEL, C1
    /// and the bidirectional controls as they are).
    fn string(&mut self, value: &str) -> std::io::Result<()> {
        if value.chars().any(is_control) {
            let json = json_safe(serde_json::to_string(value)?);
            self.out.write_all(json.as_bytes())
        } else {
            Ok(serde_json::to_writer(&mut *self.out, value)?)
        }
    }

    fn end(self) -> std::io::Result<()> {
        if self.first {
            self.out.write_all(b"{")?;
        }
        self.out.write_all(b"}\n")
    }

    /// A field's value: a number or a boolean as such, anything else as a string.
    fn value(&mut self, value: &Value) -> std::io::Result<()> {
        if let Some(v) = value.to_i64() {
            write!(self.out, "{v}")
        } else if let Some(v) = value.to_u64() {
            write!(self.out, "{v}")
        } else if let Some(v) = value.to_f64() {
            match serde_json::Number::from_f64(v) {
                Some(n) => write!(self.out, "{n}"),
                None => self.out.write_all(b"null"),
            }
        } else if let Some(v) = value.to_bool() {
            write!(self.out, "{v}")
        } else if let Some(text) = value.to_borrowed_str() {
            self.string(text)
        } else {
            self.string(&value.to_string())
        }
    }
}

impl<'kvs> VisitSource<'kvs> for JsonLine<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        if ENVELOPE.contains(&key.as_str()) {
            return Ok(());
        }
        self.key(key.as_str())
            .and_then(|()| self.value(&value))
            .map_err(|_| log::kv::Error::msg("the log line could not be written"))
    }
}

/// Writes each field into the line as it comes (a relay logs a line per event: no
/// string of its own per field).
struct TextFields<'a>(&'a mut env_logger::fmt::Formatter);

impl<'kvs> VisitSource<'kvs> for TextFields<'_> {
    fn visit_pair(&mut self, key: Key<'kvs>, value: Value<'kvs>) -> Result<(), log::kv::Error> {
        if ENVELOPE.contains(&key.as_str()) {
            return Ok(());
        }
        let owned;
        let text = match value.to_borrowed_str() {
            Some(text) => text,
            None => {
                owned = value.to_string();
                owned.as_str()
            }
        };
        // Quote values a reader could otherwise split wrongly, and those with control
        // characters (`Debug` writes them as escapes, as `render::escape` does).
        let written = if text.is_empty()
            || text.contains(|c: char| c.is_whitespace() || c == '"' || is_control(c))
        {
            write!(self.0, " {key}={text:?}")
        } else {
            write!(self.0, " {key}={text}")
        };
        written.map_err(|_| log::kv::Error::msg("the log line could not be written"))
    }
}
