//! Moments, durations and ids as the reports and commands show them.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::domain::Timestamp;

/// The widest [`time`] of a PostgreSQL timestamp (microseconds), years 1–9999.
pub(crate) const TIME_WIDTH: usize = "2026-11-29T18:00:00.000000Z".len();

/// The width of a UUID as it is printed (hyphenated).
pub(crate) const UUID_WIDTH: usize = uuid::fmt::Hyphenated::LENGTH;

/// The width of an id as a table shows it by default ([`short_id`]).
pub(crate) const SHORT_ID_WIDTH: usize = 8;

/// The first eight characters of an id, as `git log --oneline` shortens hashes: enough
/// to tell rows apart on screen and to find the row (`id::text LIKE 'b1000004%'`).
pub(crate) fn short_id(id: uuid::Uuid) -> String {
    let mut s = id.to_string();
    s.truncate(SHORT_ID_WIDTH);
    s
}

/// A moment for people: UTC, fractions of a second only when there are any; a stored
/// moment that is not finite as PostgreSQL writes it (`infinity`, `-infinity`).
pub(crate) fn time(at: impl Into<Timestamp>) -> String {
    let at = at.into();
    at.finite().map_or_else(
        || at.to_string(),
        |at| at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
    )
}

/// The width of [`time_s`], years 1–9999.
pub(crate) const TIME_S_WIDTH: usize = "2026-11-29T18:00:00Z".len();

/// A moment at whole seconds (the fraction cut, not rounded), UTC: what a table's
/// default layout shows; `--wide` and JSON keep [`time`] / microseconds.
pub(crate) fn time_s(at: impl Into<Timestamp>) -> String {
    let at = at.into();
    at.finite().map_or_else(
        || at.to_string(),
        |at| at.to_rfc3339_opts(SecondsFormat::Secs, true),
    )
}

/// How long `as_of` is after the stored moment `at`, for people: [`duration`], or
/// `infinite` after `-infinity` (`-infinite` before `infinity`).
pub(crate) fn since(as_of: DateTime<Utc>, at: Timestamp) -> String {
    match at.until(as_of) {
        Some(d) => duration(d),
        None if at == Timestamp::NEG_INFINITY => "infinite".to_owned(),
        None => "-infinite".to_owned(),
    }
}

/// [`since`] in seconds: `±∞` for the infinities (JSON shows them as `null`).
pub(crate) fn seconds_since(as_of: DateTime<Utc>, at: Timestamp) -> f64 {
    at.seconds_until(as_of)
}

/// A duration for people: `2d 3h 0m 5s`, `4m 10s`, `45s`, `250ms`.
pub(crate) use crate::store::duration::show_elapsed as duration;

pub(crate) use crate::clock::seconds;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_times_cut_the_fraction() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T19:17:30.999999Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(time_s(at), "2026-11-30T19:17:30Z");
        assert_eq!(time_s(at).len(), TIME_S_WIDTH);
        assert_eq!(time(at), "2026-11-30T19:17:30.999999Z");
    }
}
