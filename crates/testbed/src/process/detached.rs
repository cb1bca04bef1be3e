//! A process that is not our child, known by its PID: a detached server that an earlier
//! `testbed start` left running. Whether it is still the one that was started (its
//! command line holds the arguments we expect, so a recycled PID is never taken for
//! it), a signal, and a bounded wait for its end (gone, or a zombie its new parent has
//! not reaped yet: it cannot be waited for, not being ours).

use crate::error::{Error, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Signal, wait_until};

/// How long a process is given to go after a KILL.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// The PID a file holds (its first line), if it holds one.
pub fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` runs (not a zombie) with `args`, one after the other, in its command
/// line.
pub fn runs(pid: u32, args: &[&str]) -> bool {
    let Ok(line) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let words: Vec<&[u8]> = line.split(|b| *b == 0).collect();
    !gone(pid)
        && words
            .windows(args.len())
            .any(|w| w.iter().zip(args).all(|(a, b)| *a == b.as_bytes()))
}

/// Whether `pid` has exited: no such process, or a zombie.
pub fn gone(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // "PID (COMMAND) STATE …": the command may hold spaces and parentheses.
    stat.rsplit_once(") ")
        .is_none_or(|(_, rest)| rest.starts_with('Z'))
}

/// Sends `signal` to `pid` (the `kill` command); a process that has gone meanwhile is
/// no failure.
pub fn signal(pid: u32, signal: Signal) -> Result<()> {
    let status = Command::new("kill")
        .args(["-s", signal.name(), &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| Error::Tool(format!("kill: {e}")))?;
    if status.success() || gone(pid) {
        Ok(())
    } else {
        Err(Error::Tool(format!(
            "kill -s {} {pid}: {status}",
            signal.name()
        )))
    }
}

/// Stops `pid`: `first`, at most `grace` for it to go, then KILL. Whether it went
/// after `first` (a clean stop), or only after a KILL; an error if it survives that.
pub fn stop(pid: u32, first: Signal, grace: Duration, what: &str) -> Result<bool> {
    signal(pid, first)?;
    await_exit(pid, first, grace, what)
}

/// The rest of [`stop`], once `sent` has been sent (to several processes at once, say).
pub fn await_exit(pid: u32, sent: Signal, grace: Duration, what: &str) -> Result<bool> {
    if wait_until(grace, || gone(pid)) {
        return Ok(sent != Signal::Kill);
    }
    if sent != Signal::Kill {
        eprintln!(
            "{what} (pid {pid}) did not stop within {} s of SIG{}: killed",
            grace.as_secs(),
            sent.name()
        );
        signal(pid, Signal::Kill)?;
    }
    if wait_until(AFTER_KILL, || gone(pid)) {
        Ok(false)
    } else {
        Err(Error::Server(format!(
            "{what} (pid {pid}) survived SIGKILL"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_arguments_and_stopped_by_its_pid() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        // Until it has exec'd, its command line is this test's.
        assert!(wait_until(Duration::from_secs(5), || runs(
            pid,
            &["sleep", "30"]
        )));
        assert!(!runs(pid, &["sleep", "31"]));
        assert!(!gone(pid));
        // Ours, so a zombie until reaped: gone all the same.
        assert!(stop(pid, Signal::Term, Duration::from_secs(5), "sleep").unwrap());
        assert!(!runs(pid, &["sleep", "30"]));
        child.wait().unwrap();
        assert!(gone(pid));
        assert!(signal(pid, Signal::Term).is_ok());
    }

    #[test]
    fn a_pid_file_holds_a_number_or_nothing() {
        let dir = super::super::TempDir::new("pid").unwrap();
        let file = dir.path().join("pid");
        assert_eq!(read_pid(&file), None);
        std::fs::write(&file, "1234\n/var/lib/x\n").unwrap();
        assert_eq!(read_pid(&file), Some(1234));
        std::fs::write(&file, "x\n").unwrap();
        assert_eq!(read_pid(&file), None);
    }
}
