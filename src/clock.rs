//! The one source of the time the job decides with: AsOf of a cycle, the relay's
//! marks, back-offs and retention. Production passes [`SystemClock`]; a test passes a
//! [`ManualClock`] it moves itself, so a month of minute cycles runs without sleeping
//! (quinn-proto's core is driven the same way).
//!
//! Budgets (the cycle's deadline, timeouts) are real elapsed time and are measured
//! with `Instant`: they bound real resources, whatever moment the job works for. The
//! clock-skew guard compares the system clock with the database's, by design.

use std::sync::Mutex;

use chrono::{DateTime, TimeDelta, Utc};

/// Where the job reads "now" from.
pub trait Clock: Send + Sync {
    /// The current moment, UTC, at PostgreSQL's precision (microseconds).
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        to_micros(Utc::now())
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock(Mutex::new(to_micros(at)))
    }

    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = to_micros(at);
    }

    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now = to_micros(*now + by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Truncates to whole microseconds, PostgreSQL's `timestamptz` precision, so a moment
/// is stored exactly as it was decided on. The one place this is done.
pub fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}

/// A span in seconds with microsecond precision, for JSON and metrics. The one place
/// this is done.
pub fn seconds(d: TimeDelta) -> f64 {
    d.num_microseconds()
        .map_or(d.num_seconds() as f64, |us| us as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_keep_microseconds() {
        assert_eq!(seconds(TimeDelta::microseconds(7_200_000_123)), 7200.000123);
    }

    #[test]
    fn moments_are_cut_to_microseconds() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T12:00:00.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            to_micros(at).to_rfc3339(),
            "2026-11-30T12:00:00.123456+00:00"
        );
        assert_eq!(SystemClock.now().timestamp_subsec_nanos() % 1000, 0);
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let start = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(TimeDelta::minutes(1));
        assert_eq!(clock.now(), start + TimeDelta::minutes(1));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }
}
