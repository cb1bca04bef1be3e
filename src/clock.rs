//! The one source of the time the job decides with: AsOf of a cycle, the relay's
//! marks, back-offs and retention. Production passes [`SystemClock`]; a test passes a
//! [`ManualClock`] it moves itself, so a month of minute cycles runs without sleeping
//! (quinn-proto's core is driven the same way).
//!
//! Budgets (the cycle's deadline, the relay's run and `--follow` window) are real
//! elapsed time: they bound real resources, whatever moment the job works for. They are
//! read from a [`Monotonic`] clock handed in the same way ([`SystemMonotonic`] in
//! production, `ManualMonotonic` in a test), so the scheduling that depends on them
//! is a function of its inputs. The clock-skew guard compares the system clock with the
//! database's, by design.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

/// Where the job reads "now" from.
pub trait Clock: Send + Sync {
    /// The current moment, UTC, at PostgreSQL's precision (microseconds).
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "the clock room: the one read of the system's clocks"
    )]
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

/// Where budgets read elapsed time from: an `Instant` that never goes back.
pub trait Monotonic: Send + Sync {
    fn now(&self) -> Instant;

    /// The time since `earlier` (zero if `earlier` is later).
    fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }
}

/// The system's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemMonotonic;

impl Monotonic for SystemMonotonic {
    #[allow(
        clippy::disallowed_methods,
        reason = "the clock room: the one read of the system's clocks"
    )]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A monotonic clock that only moves when told to: it starts at the `Instant` it was
/// made and advances by what it is given.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct ManualMonotonic(Mutex<Instant>);

#[cfg(test)]
impl Default for ManualMonotonic {
    #[allow(
        clippy::disallowed_methods,
        reason = "the clock room: the one read of the system's clocks"
    )]
    fn default() -> Self {
        ManualMonotonic(Mutex::new(Instant::now()))
    }
}

#[cfg(test)]
impl ManualMonotonic {
    pub(crate) fn advance(&self, by: Duration) {
        let mut now = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *now = now.checked_add(by).unwrap_or(*now);
    }
}

#[cfg(test)]
impl Monotonic for ManualMonotonic {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What drives a run from outside, handed down by its caller like AsOf: the wall clock
/// AsOf and the relay's moments are read from, the monotonic clock its budgets are
/// measured with, and the shutdown handle a signal reaches it through.
#[derive(Clone, Copy)]
pub struct Ambient<'a> {
    pub clock: &'a dyn Clock,
    pub monotonic: &'a dyn Monotonic,
    pub shutdown: &'a crate::shutdown::Shutdown,
}

impl<'a> Ambient<'a> {
    /// The system's clocks, and `shutdown`.
    pub fn system(shutdown: &'a crate::shutdown::Shutdown) -> Self {
        Ambient {
            clock: &SystemClock,
            monotonic: &SystemMonotonic,
            shutdown,
        }
    }
}

/// Truncates to whole microseconds, PostgreSQL's `timestamptz` precision, so a moment
/// is stored exactly as it was decided on. The one place this is done.
pub fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}

/// A span in seconds with microsecond precision, for JSON and metrics. The one place
/// this is done above the store (whose hygiene read binds its threshold so, on its own).
pub(crate) fn seconds(d: TimeDelta) -> f64 {
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

    #[test]
    fn a_manual_monotonic_clock_moves_only_when_told() {
        let clock = ManualMonotonic::default();
        let start = clock.now();
        assert_eq!(clock.since(start), Duration::ZERO);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.since(start), Duration::from_millis(1500));
        // Past what an Instant can hold, it stays where it was instead of overflowing.
        clock.advance(Duration::MAX);
        assert_eq!(clock.since(start), Duration::from_millis(1500));
        assert_eq!(
            SystemMonotonic.since(SystemMonotonic.now() + Duration::from_secs(9)),
            Duration::ZERO
        );
    }
}
