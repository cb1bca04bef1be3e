//! Value parsers of the command line: moments (`--as-of`), ids and their starts,
//! bounded durations, non-empty text, the outbox's types; and [`trimmed`], the one
//! rule for whitespace around every value, which each of them is wrapped in.

use std::ffi::OsStr;
use std::time::Duration;

use clap::builder::TypedValueParser;

use crate::domain::{AsOf, OutboxTypes};
use crate::store::duration::{parse_duration, show_duration};

const AS_OF_EXPECTED: &str = "expected RFC 3339 with an offset, e.g. 2026-11-29T18:00:00Z \
                              or 2026-11-29T21:00:00+03:00, or now";

/// The one rule for every value, from a flag or from the environment, secrets
/// included: leading and trailing whitespace (spaces, tabs, newlines, as a Secret
/// written from a file often ends) is not part of it. `parser` reads the value
/// without it; a value that is not UTF-8 is handed on as it is, for `parser` to refuse.
pub(super) fn trimmed<P: TypedValueParser>(parser: P) -> Trimmed<P> {
    Trimmed(parser)
}

/// A value parser that reads its value without the whitespace around it: [`trimmed`].
#[derive(Debug, Clone)]
pub(super) struct Trimmed<P>(P);

impl<P: TypedValueParser> TypedValueParser for Trimmed<P> {
    type Value = P::Value;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Self::Value, clap::Error> {
        match value.to_str() {
            Some(text) => self.0.parse_ref(cmd, arg, OsStr::new(text.trim())),
            None => self.0.parse_ref(cmd, arg, value),
        }
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        self.0.possible_values()
    }
}

/// Text, trimmed: the parser of every text flag.
pub(super) fn text() -> Trimmed<clap::builder::StringValueParser> {
    trimmed(clap::builder::StringValueParser::new())
}

/// A path, trimmed: the parser of every file flag.
pub(super) fn path() -> Trimmed<clap::builder::PathBufValueParser> {
    trimmed(clap::builder::PathBufValueParser::new())
}

/// One of `E`'s values, trimmed.
pub(super) fn choice<E: clap::ValueEnum + Clone + Send + Sync + 'static>()
-> Trimmed<clap::builder::EnumValueParser<E>> {
    trimmed(clap::builder::EnumValueParser::new())
}

/// Parses `--as-of`: `now`, or RFC 3339 with an explicit offset (a time without one
/// is ambiguous, so it is refused rather than guessed as UTC or local time).
pub fn parse_as_of(s: &str) -> Result<AsOf, String> {
    use chrono::format::ParseErrorKind;
    use chrono::{DateTime, NaiveDateTime, Utc};
    if s == "now" {
        return Ok(AsOf::Now);
    }
    match DateTime::parse_from_rfc3339(s) {
        Ok(at) => {
            let at = at.with_timezone(&Utc);
            // PostgreSQL keeps microseconds; deciding on more would let the domain and
            // the query disagree about a deadline within the same microsecond.
            Ok(AsOf::At(crate::clock::to_micros(at)))
        }
        Err(e) => {
            let no_offset = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .any(|f| NaiveDateTime::parse_from_str(s, f).is_ok());
            let detail = if s.is_empty() {
                "it is empty; "
            } else if no_offset {
                "it has no UTC offset; "
            } else if matches!(
                e.kind(),
                ParseErrorKind::OutOfRange | ParseErrorKind::Impossible
            ) {
                "not a real date and time (a field is out of range); "
            } else {
                ""
            };
            Err(format!("{detail}{AS_OF_EXPECTED}"))
        }
    }
}

/// An id as typed: a whole UUID, or the start of one (at least [`IdArg::MIN_PREFIX`]
/// hex characters, hyphens ignored), which the database resolves if it is unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdArg {
    Full(uuid::Uuid),
    /// Lowercase hex digits, `MIN_PREFIX..32` of them.
    Prefix(String),
}

impl IdArg {
    /// The shortest prefix taken: what the 120-column tables show of an id.
    pub const MIN_PREFIX: usize = 8;
}

impl std::fmt::Display for IdArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdArg::Full(id) => write!(f, "{id}"),
            IdArg::Prefix(hex) => f.write_str(hex),
        }
    }
}

pub(super) fn parse_id(s: &str) -> Result<IdArg, String> {
    let s = s.trim();
    if let Ok(id) = uuid::Uuid::parse_str(s) {
        return Ok(IdArg::Full(id));
    }
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() >= IdArg::MIN_PREFIX
        && hex.len() < 32
        && hex.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Ok(IdArg::Prefix(hex.to_ascii_lowercase()));
    }
    Err(format!(
        "{s:?} is not a UUID, nor the start of one of at least {} hex characters (e.g. \
         0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70, or 0190a6f0 when no other id starts so)",
        IdArg::MIN_PREFIX
    ))
}

/// Parses `--outbox-types`: the outbox event types the job owns (see
/// [`OutboxTypes::parse`]).
pub(super) fn parse_outbox_types(s: &str) -> Result<OutboxTypes, String> {
    OutboxTypes::parse(s)
}

pub(super) fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

/// A clap value parser for a duration such as `250ms`, `5s` or `2m`, within bounds.
pub(super) fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let d = parse_duration(s)?;
        if d < min || d > max {
            return Err(format!(
                "{s} is out of range: allowed {} to {}",
                show_duration(min),
                show_duration(max)
            ));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_a_uuid_or_a_start_of_at_least_8_hex_characters() {
        let full = "0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70";
        assert_eq!(parse_id(full), Ok(IdArg::Full(full.parse().unwrap())));
        assert_eq!(parse_id(" BB7F5AE6 "), Ok(IdArg::Prefix("bb7f5ae6".into())));
        assert_eq!(
            parse_id("0190a6f0-58c1"),
            Ok(IdArg::Prefix("0190a6f058c1".into()))
        );
        for bad in [
            "bb7f5ae",
            "bb7f5aeg",
            "",
            "0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70ff",
        ] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_out_of_range_are_refused_with_the_range() {
        let parse = duration_in(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(
            parse("61s"),
            Err("61s is out of range: allowed 1s to 1m".to_owned())
        );
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
    }
}
