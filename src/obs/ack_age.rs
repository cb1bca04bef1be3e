//! How long each published event waited: seconds from its write (the cycle's commit) to
//! Kafka's acknowledgement, counted into fixed buckets as the relay marks rows, so the
//! memory a run needs for it stays the same however long a `--follow` run publishes.
//! A leaf: `relay.rs` observes, `obs::gauges` pushes it as
//! `crm_booking_expiration_relay_ack_age_seconds`.

use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds of the ack age buckets, around the delivery objective of one minute.
pub(crate) const RELAY_ACK_AGE_BUCKETS: &[f64] =
    &[0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// A relay run's ack ages, counted into `RELAY_ACK_AGE_BUCKETS` as rows are marked: the
/// memory stays the same however long a `--follow` run publishes.
#[derive(Debug, Clone)]
pub struct AckAges(Histogram);

impl Default for AckAges {
    fn default() -> Self {
        AckAges(Histogram::new(RELAY_ACK_AGE_BUCKETS.iter().copied()))
    }
}

impl AckAges {
    pub fn observe(&self, seconds: f64) {
        self.0.observe(seconds);
    }

    /// The counts (a handle on the same histogram).
    pub fn histogram(&self) -> &Histogram {
        &self.0
    }
}
