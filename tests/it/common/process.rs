//! The real binary as a process: a finished run and its result JSON, background runs
//! (piped or to files), signals, and waiting for a condition.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// A finished process: exit code and both streams.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn of(out: Output) -> Self {
        use std::os::unix::process::ExitStatusExt;
        let code = out
            .status
            .code()
            .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
        Run {
            code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn result(&self) -> CycleResult {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "stdout must be one JSON line: {:?}",
            self.stdout
        );
        CycleResult::parse(lines[0])
    }
}

/// The cycle result JSON, with its exact field names checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleResult {
    pub run_id: Uuid,
    pub as_of: DateTime<Utc>,
    pub reserve: i64,
    pub booking: i64,
    pub skipped: i64,
    pub poison: i64,
    pub duration_ms: i64,
}

impl CycleResult {
    pub fn parse(line: &str) -> Self {
        let v: Value = serde_json::from_str(line).expect("result is JSON");
        let obj = v.as_object().expect("result is an object");
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "AsOf",
                "BookingExpiredCount",
                "DurationMs",
                "PoisonCount",
                "ReserveExpiredCount",
                "RunId",
                "SkippedLockedCount"
            ]
        );
        let int = |k: &str| {
            obj[k]
                .as_i64()
                .unwrap_or_else(|| panic!("{k} is an integer"))
        };
        CycleResult {
            run_id: obj["RunId"].as_str().unwrap().parse().unwrap(),
            as_of: DateTime::parse_from_rfc3339(obj["AsOf"].as_str().unwrap())
                .unwrap()
                .with_timezone(&Utc),
            reserve: int("ReserveExpiredCount"),
            booking: int("BookingExpiredCount"),
            skipped: int("SkippedLockedCount"),
            poison: int("PoisonCount"),
            duration_ms: int("DurationMs"),
        }
    }

    /// (ReserveExpiredCount, BookingExpiredCount, SkippedLockedCount, PoisonCount)
    pub fn counts(&self) -> (i64, i64, i64, i64) {
        (self.reserve, self.booking, self.skipped, self.poison)
    }
}
/// Waits until `probe` is true, or panics after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut probe: impl FnMut() -> bool) {
    let start = Instant::now();
    while !probe() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the binary in the background with piped output.
pub fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the binary")
}

pub fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
/// The JSON objects of a JSON-lines output.
pub fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}
/// A background process whose output goes to files, so a chatty process never blocks
/// on a full pipe while the test waits for something else.
pub struct Background {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Background {
    pub fn start(mut cmd: Command) -> Self {
        let base = std::env::temp_dir().join(format!("be-out-{}", Uuid::new_v4().simple()));
        let stdout = base.with_extension("stdout");
        let stderr = base.with_extension("stderr");
        cmd.stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let child = cmd.spawn().expect("spawn the binary");
        Background {
            child,
            stdout,
            stderr,
        }
    }

    /// What the process wrote on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.stderr).unwrap_or_default()).into_owned()
    }

    /// Waits until stderr holds at least `n` lines containing `needle`, or panics after
    /// `limit` (or when the process ended first) with what it wrote.
    pub fn wait_for_lines(&mut self, needle: &str, n: usize, limit: Duration) {
        let start = Instant::now();
        loop {
            let err = self.stderr_so_far();
            if err.lines().filter(|l| l.contains(needle)).count() >= n {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the process ended ({status}) before {n} lines with {needle:?}:\n{err}");
            }
            assert!(
                start.elapsed() < limit,
                "timed out waiting for {n} lines with {needle:?}:\n{err}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn wait(mut self) -> Run {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().unwrap();
        let read = |p: &PathBuf| {
            let s = String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
            let _ = std::fs::remove_file(p);
            s
        };
        Run {
            code: status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            stdout: read(&self.stdout),
            stderr: read(&self.stderr),
        }
    }
}

/// A cycle's settings as `run-once` reads them from its command line: the database at
/// `url`, then `flags` (for tests that call the library's cycle in process).
pub fn run_once_config(url: &str, flags: &[&str]) -> booking_expire::config::RunOnceConfig {
    use booking_expire::cli::{Cli, Command};
    use clap::Parser;
    let mut args = vec!["booking-expire", "run-once", "--database-url", url];
    args.extend_from_slice(flags);
    match Cli::try_parse_from(args).unwrap().command {
        Command::RunOnce(args) => booking_expire::config::RunOnceConfig::from_args(&args).unwrap(),
        _ => unreachable!(),
    }
}
