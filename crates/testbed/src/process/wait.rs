//! The bounded waits for a child or a server: a poll until something is so, for at
//! most a limit, and the clock and pause it runs on.

use std::time::{Duration, Instant};

/// Waits until `done` says yes, asking every 20 ms for at most `limit`: whether it did.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = now();
    loop {
        if done() {
            return true;
        }
        if now().duration_since(start) >= limit {
            return false;
        }
        pause(Duration::from_millis(20));
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "the bound of a wait for a child or a server, not a decision of the program"
)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

#[allow(
    clippy::disallowed_methods,
    reason = "the poll of a wait for a child or a server: the event has no other signal"
)]
pub(crate) fn pause(step: Duration) {
    std::thread::sleep(step);
}
