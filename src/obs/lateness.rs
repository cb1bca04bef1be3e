//! How late a run's expiries were: `expired_at − deadline` in seconds, per phase,
//! counted into fixed buckets as the batches commit, so the memory a run needs for it
//! stays the same whatever it expires. `cycle.rs` observes, `obs::gauges` pushes it as
//! `crm_booking_expiration_lateness_seconds`.
//!
//! The objective: a deadline `t` expires by `t + 60 s + the cycle's budget (25 s)`:
//! the CronJob starts a cycle every minute, and a cycle may take up to `--deadline`.
//! So 85 s is a bucket bound (the alert's threshold falls on it and
//! `histogram_quantile` interpolates nothing across it), the minute is cut finely
//! below it, and the coarse bounds above it say by how much an outage missed it.

use prometheus_client::metrics::histogram::Histogram;

use crate::domain::Phase;

/// Upper bounds of the lateness buckets, in seconds (`+Inf` is added).
pub(crate) const LATENESS_BUCKETS: &[f64] = &[
    1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 70.0, 85.0, 120.0, 300.0, 900.0, 3600.0,
];

/// One histogram per phase, in `Phase::ALL` order.
#[derive(Debug, Clone)]
pub struct Lateness {
    reserve: Histogram,
    booking: Histogram,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            reserve: Histogram::new(LATENESS_BUCKETS.iter().copied()),
            booking: Histogram::new(LATENESS_BUCKETS.iter().copied()),
        }
    }
}

impl Lateness {
    /// Counts one expiry of `phase` that happened `seconds` after its deadline.
    pub fn observe(&self, phase: Phase, seconds: f64) {
        self.of(phase).observe(seconds);
    }

    /// The histogram of `phase` (a handle on the same counts).
    pub fn of(&self, phase: Phase) -> &Histogram {
        match phase {
            Phase::Reserve => &self.reserve,
            Phase::Booking => &self.booking,
        }
    }
}
