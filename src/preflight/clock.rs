//! The clock guard: AsOf comes from this node's clock, so a node whose clock is wrong
//! must not expire anything (bookings would expire early, or late).

use std::time::Duration;

use anyhow::Result;
use log::info;

use crate::exit::{Failure, fail};
use crate::store::ClockSkew;

/// Fails with 78 when the system clock and the database's differ by more than `max`,
/// whatever the round trip's delay.
pub(super) fn check(skew: &ClockSkew, max: Duration) -> Result<()> {
    info!(SystemAheadMs = skew.system_ahead_by.num_milliseconds(),
          RoundTripMs = skew.round_trip.as_millis() as u64,
          MaxClockSkewMs = max.as_millis() as u64; "clock skew measured");
    if skew.certain() <= max {
        return Ok(());
    }
    let measured = skew.system_ahead_by.abs().to_std().unwrap_or_default();
    let direction = if skew.system_ahead_by > chrono::TimeDelta::zero() {
        "ahead"
    } else {
        "behind"
    };
    Err(fail(
        Failure::Config,
        format!(
            "system clock and database clock differ by {:.1}s (the system clock is {direction}, \
             allowed {}): refusing to expire bookings; fix the node's time sync",
            measured.as_secs_f64(),
            crate::store::duration::show_duration(max),
        ),
    ))
}
