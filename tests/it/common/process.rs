//! The real binary as a process: a finished run made of its output (`Run`, with its
//! result JSON, is `run`'s), background runs (piped or to files), signals, and waiting
//! for a condition. Wherever the binary runs, the failure hook is installed first.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use super::run::Run;

/// A finished run of the binary (the struct is `run`'s), made where it ran: the hook
/// of a failing test's first screen installed first.
impl Run {
    pub fn of(out: Output) -> Self {
        use std::os::unix::process::ExitStatusExt;
        super::failure::install();
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
}

/// Waits until `probe` is true, or panics after `limit` naming what it waited for.
/// `limit` only stops a test that is really stuck: give it a minute or more.
pub fn wait_until(limit: Duration, what: &str, mut probe: impl FnMut() -> bool) {
    wait_for(limit, what, || probe().then_some(()), String::new);
}

/// Waits until `probe` returns `Some`, and returns it; after `limit`, panics with what
/// it waited for and what `seen` says was there instead.
pub fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Option<T>,
    mut seen: impl FnMut() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() >= deadline {
            let seen = seen();
            panic!(
                "timed out after {limit:?} waiting for {what}{}{seen}",
                if seen.is_empty() { "" } else { "; seen: " }
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes `cmd`'s process die with the thread that spawns it: `PR_SET_PDEATHSIG` sends
/// it SIGKILL when that thread ends, which also happens when the whole test process is
/// killed (SIGKILL included, where no destructor runs). The binary itself is the child
/// (not a wrapper that watches a pipe), so its PID, its signals and its exit status stay
/// the test's to use. Every test runs on a thread of its own and spawns its children
/// from it; a child that must outlive the spawning thread must not go through this.
pub fn owned(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    unsafe extern "C" {
        fn prctl(option: i32, ...) -> i32;
        fn getppid() -> i32;
    }
    const PR_SET_PDEATHSIG: i32 = 1;
    const SIGKILL: u64 = 9;
    let parent = std::process::id() as i32;
    // SAFETY: between fork and exec only prctl and getppid run: async-signal-safe, no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl took effect: no signal will come.
            if getppid() != parent {
                const ESRCH: i32 = 3;
                return Err(std::io::Error::from_raw_os_error(ESRCH));
            }
            Ok(())
        })
    }
}

/// How long a wait on a process's exit may last before the test counts it as stuck.
const STUCK: Duration = Duration::from_secs(600);

/// Starts the binary in the background with piped output, as the test's own child
/// ([`owned`], and killed and reaped on drop).
pub fn spawn(mut cmd: Command) -> OwnedChild {
    super::failure::install();
    let child = owned(&mut cmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the binary");
    OwnedChild(Some(child))
}

/// A [`Child`] that is killed and reaped when dropped, unless waited for.
pub struct OwnedChild(Option<Child>);

impl OwnedChild {
    /// [`Child::wait_with_output`]: the exit and both streams.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0
            .take()
            .expect("not yet waited for")
            .wait_with_output()
    }
}

impl std::ops::Deref for OwnedChild {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("not yet waited for")
    }
}

impl std::ops::DerefMut for OwnedChild {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("not yet waited for")
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            // Not reaped yet, so the PID is still this child's.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
/// on a full pipe while the test waits for something else. It is the test's own: killed
/// and reaped when dropped (a failing test included), and killed with the test process
/// ([`owned`]). A failing test keeps its output files and names them.
pub struct Background {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Background {
    pub fn start(mut cmd: Command) -> Self {
        super::failure::install();
        let base = std::env::temp_dir().join(format!("be-out-{}", Uuid::new_v4().simple()));
        let stdout = base.with_extension("stdout");
        let stderr = base.with_extension("stderr");
        owned(&mut cmd)
            .stdout(std::fs::File::create(&stdout).unwrap())
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
        self.wait_for_log(&format!("{n} lines with {needle:?}"), limit, |err| {
            err.lines().filter(|l| l.contains(needle)).count() >= n
        });
    }

    /// Waits until what stderr holds so far satisfies `done`, or panics after `limit`
    /// (or when the process ended first) naming `what` and quoting what it wrote.
    pub fn wait_for_log(
        &mut self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&str) -> bool,
    ) {
        let deadline = Instant::now() + limit;
        loop {
            let err = self.stderr_so_far();
            if done(&err) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // It may have written the line just before it exited.
                let err = self.stderr_so_far();
                if done(&err) {
                    return;
                }
                panic!("the process ended ({status}) before {what}; its stderr:\n{err}");
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; its stderr:\n{err}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit, at most `limit`: a process still running then is
    /// stuck, and the test fails with what it wrote (it is killed on drop).
    pub fn wait_within(mut self, limit: Duration) -> Run {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for the process to exit; its stderr:\n{}",
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.reap()
    }

    /// Waits for the process to exit, at most ten minutes (no test's process runs that
    /// long unless it is stuck).
    pub fn wait(self) -> Run {
        self.wait_within(STUCK)
    }

    fn reap(mut self) -> Run {
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

impl Drop for Background {
    fn drop(&mut self) {
        // Child::kill signals only a child not yet reaped (std keeps the status once
        // waited for), so the PID is still this child's: no kill of a reused PID.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() && self.stderr.exists() {
            eprintln!(
                "kept the output of a process of the failed test: {} and {}",
                self.stdout.display(),
                self.stderr.display()
            );
        } else {
            let _ = std::fs::remove_file(&self.stdout);
            let _ = std::fs::remove_file(&self.stderr);
        }
    }
}

/// A cycle's settings as `run-once` reads them from its command line: the database at
/// `url`, then `flags` (for tests that call the library's cycle in process).
pub fn run_once_config(
    url: &str,
    flags: &[&str],
) -> booking_expire::testing::config::RunOnceConfig {
    use booking_expire::testing::cli::{Cli, Command};
    use clap::Parser;
    let mut args = vec!["booking-expire", "run-once", "--database-url", url];
    args.extend_from_slice(flags);
    match Cli::try_parse_from(args).unwrap().command {
        Command::RunOnce(args) => {
            booking_expire::testing::config::RunOnceConfig::from_args(&args).unwrap()
        }
        _ => unreachable!(),
    }
}
