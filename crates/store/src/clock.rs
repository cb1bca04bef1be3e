//! The database's clock, read against the system clock. The cycle takes AsOf from the
//! system clock while the CRM's managers and the deadlines follow the database's, so
//! a node whose clock runs ahead would expire bookings early: the cycle's preflight
//! measures the difference (`preflight::read_facts`) before it claims anything.

use std::time::Duration;

use chrono::TimeDelta;

/// The difference between the two clocks, as well as one round trip can tell it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSkew {
    /// System clock minus database clock, at the midpoint of the round trip: positive
    /// when the system clock is ahead.
    pub system_ahead_by: TimeDelta,
    /// How long the query took; the true difference lies within half of it of
    /// `system_ahead_by`.
    pub round_trip: Duration,
}

impl ClockSkew {
    /// The difference that is certain whatever the network delay: |skew| − round
    /// trip / 2, never negative.
    pub fn certain(&self) -> Duration {
        self.system_ahead_by
            .abs()
            .to_std()
            .unwrap_or(Duration::MAX)
            .saturating_sub(self.round_trip / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_trip_is_given_the_benefit_of_the_doubt() {
        let skew = |ms: i64, rtt_ms: u64| ClockSkew {
            system_ahead_by: TimeDelta::milliseconds(ms),
            round_trip: Duration::from_millis(rtt_ms),
        };
        assert_eq!(skew(3_000, 1_000).certain(), Duration::from_millis(2_500));
        assert_eq!(skew(-3_000, 1_000).certain(), Duration::from_millis(2_500));
        assert_eq!(skew(200, 1_000).certain(), Duration::ZERO);
    }
}
