//! Stop, grace, KILL, written once: a stop signal, at most a grace period for the
//! process to go, then SIGKILL and a bounded wait for it, for our own child
//! ([`super::Owned`]) and for a detached server known by its PID
//! ([`super::detached::Detached`]) alike.

use std::time::Duration;

use super::signal::Signal;
use crate::error::{Error, Result};

/// How long a process is given to go after a KILL.
pub const AFTER_KILL: Duration = Duration::from_secs(10);

/// What a stop needs of a process.
pub trait Stoppable {
    /// It, for messages (what, and a PID that is not ours).
    fn name(&self) -> String;
    /// Sends `signal`; a process that has gone is no failure.
    fn send(&mut self, signal: Signal) -> Result<()>;
    /// Whether it has gone within `limit`.
    fn gone_within(&mut self, limit: Duration) -> Result<bool>;
}

/// Stops `process`: `first`, at most `grace` for it to go, then KILL. Whether it went
/// after `first` (a clean stop) rather than after a KILL; an error if it survives that.
pub fn stop(process: &mut impl Stoppable, first: Signal, grace: Duration) -> Result<bool> {
    process.send(first)?;
    await_exit(process, first, grace)
}

/// The rest of [`stop`], once `sent` has been sent (to several processes at once, say).
pub fn await_exit(process: &mut impl Stoppable, sent: Signal, grace: Duration) -> Result<bool> {
    if process.gone_within(grace)? {
        return Ok(sent != Signal::Kill);
    }
    if sent != Signal::Kill {
        eprintln!(
            "{} did not stop within {} s of SIG{}: killed",
            process.name(),
            grace.as_secs(),
            sent.name()
        );
        process.send(Signal::Kill)?;
    }
    if process.gone_within(AFTER_KILL)? {
        Ok(false)
    } else {
        Err(Error::Server(format!(
            "{} survived SIGKILL",
            process.name()
        )))
    }
}
