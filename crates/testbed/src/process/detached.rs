//! A process that is not our child, known by its PID: a detached server that an earlier
//! `testbed start` left running ([`super::Owned::release`] makes one). Whether it is
//! still the one that was started (its command line holds the arguments we expect, so
//! a recycled PID is never taken for it), a signal, and a stop bounded as every stop is
//! (`stop`): its end is seen as gone, or a zombie its new parent has not reaped yet (it
//! cannot be waited for, not being ours). No drop stops it: it outlives this process.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::signal::Signal;
use super::stop::{self, Stoppable};
use super::wait::wait_until;
use crate::error::{Error, Result};

/// A detached process: its PID and what it is, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    pid: u32,
    what: String,
}

impl Detached {
    /// The process `pid`, `what` in messages (a PID read back from a STATE_DIR).
    pub fn found(pid: u32, what: impl Into<String>) -> Self {
        Detached {
            pid,
            what: what.into(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether it runs (not a zombie) with `args`, one after the other, in its command
    /// line.
    pub fn runs(&self, args: &[&str]) -> bool {
        let Ok(line) = std::fs::read(format!("/proc/{}/cmdline", self.pid)) else {
            return false;
        };
        let words: Vec<&[u8]> = line.split(|b| *b == 0).collect();
        !self.gone()
            && words
                .windows(args.len())
                .any(|w| w.iter().zip(args).all(|(a, b)| *a == b.as_bytes()))
    }

    /// Whether it has exited: no such process, or a zombie.
    pub fn gone(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return true;
        };
        // "PID (COMMAND) STATE …": the command may hold spaces and parentheses.
        stat.rsplit_once(") ")
            .is_none_or(|(_, rest)| rest.starts_with('Z'))
    }

    /// Sends `signal` (the `kill` command); a process that has gone meanwhile is no
    /// failure.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self.pid;
        let status = Command::new("kill")
            .args(["-s", signal.name(), &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .map_err(|e| Error::Tool(format!("kill: {e}")))?;
        if status.success() || self.gone() {
            Ok(())
        } else {
            Err(Error::Tool(format!(
                "kill -s {} {pid}: {status}",
                signal.name()
            )))
        }
    }

    /// Stops it: `first`, at most `grace`, then KILL. Whether it went after `first`.
    pub fn stop(&mut self, first: Signal, grace: Duration) -> Result<bool> {
        stop::stop(self, first, grace)
    }

    /// The rest of [`Detached::stop`], once `sent` has been sent.
    pub fn await_exit(&mut self, sent: Signal, grace: Duration) -> Result<bool> {
        stop::await_exit(self, sent, grace)
    }
}

impl Stoppable for Detached {
    fn name(&self) -> String {
        format!("{} (pid {})", self.what, self.pid)
    }

    fn send(&mut self, signal: Signal) -> Result<()> {
        self.signal(signal)
    }

    fn gone_within(&mut self, limit: Duration) -> Result<bool> {
        Ok(wait_until(limit, || self.gone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_arguments_and_stopped_by_its_pid() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let mut sleep = Detached::found(child.id(), "sleep");
        // Until it has exec'd, its command line is this test's.
        assert!(wait_until(Duration::from_secs(5), || sleep.runs(&["sleep", "30"])));
        assert!(!sleep.runs(&["sleep", "31"]));
        assert!(!sleep.gone());
        // Ours, so a zombie until reaped: gone all the same.
        assert!(sleep.stop(Signal::Term, Duration::from_secs(5)).unwrap());
        assert!(!sleep.runs(&["sleep", "30"]));
        child.wait().unwrap();
        assert!(sleep.gone());
        assert!(sleep.signal(Signal::Term).is_ok());
    }
}
