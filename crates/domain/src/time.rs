//! A moment as PostgreSQL's `timestamptz` holds it: microseconds since 2000-01-01 UTC,
//! with `-infinity` and `infinity` at the ends. The CRM's database may hold any such
//! value in a column the job reads (`infinity` as "no deadline", a year beyond what
//! `chrono` can hold, 262143 to 294276), so the job reads every stored moment as this
//! type: it compares as PostgreSQL does, whatever the value, and is shown as
//! PostgreSQL's own words for the infinities and an expanded ISO 8601 year past 9999.

use std::fmt;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
const MICROS_PER_DAY: i128 = 86_400_000_000;

/// A stored `timestamptz`, ordered as PostgreSQL orders them (`-infinity` first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const INFINITY: Timestamp = Timestamp(i64::MAX);
    pub const NEG_INFINITY: Timestamp = Timestamp(i64::MIN);

    /// From PostgreSQL's binary value (microseconds since 2000-01-01 UTC).
    pub fn from_pg_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// PostgreSQL's binary value.
    pub fn pg_micros(self) -> i64 {
        self.0
    }

    pub fn is_infinite(self) -> bool {
        self == Self::INFINITY || self == Self::NEG_INFINITY
    }

    /// The moment as `chrono` holds it: `None` for the infinities and for years past
    /// `chrono`'s range.
    pub fn finite(self) -> Option<DateTime<Utc>> {
        if self.is_infinite() {
            return None;
        }
        DateTime::from_timestamp_micros(self.0.checked_add(PG_EPOCH_UNIX_MICROS)?)
    }

    /// `later − self`: `None` when `self` is infinite.
    pub fn until(self, later: DateTime<Utc>) -> Option<TimeDelta> {
        if self.is_infinite() {
            return None;
        }
        Timestamp::from(later)
            .0
            .checked_sub(self.0)
            .map(TimeDelta::microseconds)
    }

    /// `later − self` in seconds; `+∞` for `-infinity`, `−∞` for `infinity`.
    pub fn seconds_until(self, later: DateTime<Utc>) -> f64 {
        match self {
            Self::NEG_INFINITY => f64::INFINITY,
            Self::INFINITY => f64::NEG_INFINITY,
            _ => (i128::from(Timestamp::from(later).0) - i128::from(self.0)) as f64 / 1e6,
        }
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(at: DateTime<Utc>) -> Self {
        // chrono's range (±262143 years) lies within PostgreSQL's microseconds.
        Timestamp(at.timestamp_micros() - PG_EPOCH_UNIX_MICROS)
    }
}

/// RFC 3339 in UTC with microseconds (`2026-11-29T18:00:00.000000Z`); `infinity` and
/// `-infinity` as PostgreSQL writes them; a year past chrono's range with its sign
/// (`+290000-01-01T00:00:00.000000Z`, ISO 8601's expanded form).
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::INFINITY => f.write_str("infinity"),
            Self::NEG_INFINITY => f.write_str("-infinity"),
            _ => match self.finite() {
                Some(at) => f.write_str(&at.to_rfc3339_opts(SecondsFormat::Micros, true)),
                None => f.write_str(&expanded(self.0)),
            },
        }
    }
}

/// The civil date and time of `pg_micros`, any i64 (days to date after H. Hinnant's
/// `civil_from_days`).
fn expanded(pg_micros: i64) -> String {
    let micros = i128::from(pg_micros) + i128::from(PG_EPOCH_UNIX_MICROS);
    let days = micros.div_euclid(MICROS_PER_DAY);
    let of_day = micros.rem_euclid(MICROS_PER_DAY);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    let secs = of_day / 1_000_000;
    format!(
        "{year:+}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        of_day % 1_000_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn finite_moments_round_trip_and_show_as_rfc3339() {
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap();
        let t = Timestamp::from(at);
        assert_eq!(t.finite(), Some(at));
        assert_eq!(t.to_string(), "2026-11-29T18:00:00.000000Z");
        assert_eq!(
            Timestamp::from_pg_micros(0).to_string(),
            "2000-01-01T00:00:00.000000Z"
        );
        assert_eq!(
            t.until(at + TimeDelta::seconds(90)),
            Some(TimeDelta::seconds(90))
        );
        assert_eq!(t.seconds_until(at - TimeDelta::seconds(2)), -2.0);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "tests of the infinities against the current moment"
    )]
    fn the_infinities_order_and_show_as_postgresql_does() {
        let now = Timestamp::from(Utc::now());
        assert!(Timestamp::NEG_INFINITY < now && now < Timestamp::INFINITY);
        assert_eq!(Timestamp::INFINITY.to_string(), "infinity");
        assert_eq!(Timestamp::NEG_INFINITY.to_string(), "-infinity");
        assert_eq!(Timestamp::INFINITY.finite(), None);
        assert_eq!(Timestamp::NEG_INFINITY.until(Utc::now()), None);
        assert_eq!(
            Timestamp::NEG_INFINITY.seconds_until(Utc::now()),
            f64::INFINITY
        );
        assert_eq!(
            Timestamp::INFINITY.seconds_until(Utc::now()),
            f64::NEG_INFINITY
        );
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "tests of the infinities against the current moment"
    )]
    fn years_past_chronos_range_keep_their_value() {
        // 288000 years after 2000 are 720 Gregorian cycles of 146097 days.
        let far = Timestamp::from_pg_micros(720 * 146_097 * 86_400 * 1_000_000);
        assert_eq!(far.finite(), None);
        assert_eq!(far.to_string(), "+290000-01-01T00:00:00.000000Z");
        assert!(far > Timestamp::from(Utc::now()) && far < Timestamp::INFINITY);
        let now = Utc::now();
        assert!(far.until(now).unwrap() < TimeDelta::zero());
        assert_eq!(
            expanded(Timestamp::from(Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap()).0),
            "+1999-12-31T23:59:59.000000Z"
        );
    }
}
