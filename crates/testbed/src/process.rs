//! The owned child: a server spawned in the foreground as a child of this process, so
//! its PID stays reserved until we reap it and a signal can only reach it; spawned
//! through `setpriv --pdeathsig` (as another user too: `--reuid`/`--regid`, the death
//! signal survives the change) from one long-lived keeper thread, because a death
//! signal fires when the *thread* that forked exits and libtest's test threads end.
//! Dropped, it gets its stop signal, a bounded wait, then KILL (`stop`: that sequence,
//! written once for our children and for detached ones).
//!
//! A detached child ([`Spawn::detached`]: `setsid`, no death signal) outlives this
//! process instead, for `testbed start`: waited for while it starts, then released
//! ([`Owned::release`]) into a [`Detached`], which has no drop; `detached` finds,
//! signals and stops such a process later, by its PID.
//!
//! Also the temporary directory (`be-it-<kind>.XXXXXX` under TMPDIR: removed on drop,
//! kept and named when the thread is panicking) and the guard that removes a directory
//! once this process has exited, for the services that are never dropped.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub mod detached;
mod signal;
mod stop;
mod temp;
mod wait;
pub use detached::Detached;
pub use signal::Signal;
use stop::Stoppable;
pub use temp::{TempDir, at_exit, expecting_panic, failing, is_root, remove_at_exit};
pub use wait::wait_until;
pub(crate) use wait::{now, pause};

/// How long a stop waits for the child before it sends KILL, unless told otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// What to spawn, and how to stop it: kept by the [`Owned`] child, so that
/// [`Owned::restart`] starts the same command again.
#[derive(Clone, Debug)]
pub struct Spawn {
    what: String,
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    user: Option<String>,
    log: Option<PathBuf>,
    stop: Signal,
    death: Signal,
    grace: Duration,
    detached: bool,
}

impl Spawn {
    /// `program`, named `what` in messages; its stdout and stderr go to nowhere until
    /// [`Spawn::log`] names a file.
    pub fn new(what: impl Into<String>, program: impl AsRef<OsStr>) -> Self {
        Spawn {
            what: what.into(),
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            user: None,
            log: None,
            stop: Signal::Term,
            death: Signal::Kill,
            grace: DEFAULT_GRACE,
            detached: false,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Runs it as `user` (and that user's groups): for PostgreSQL, which refuses root.
    pub fn run_as(mut self, user: Option<&str>) -> Self {
        self.user = user.map(str::to_owned);
        self
    }

    /// Appends its stdout and stderr to `file` (created if missing).
    pub fn log(mut self, file: impl Into<PathBuf>) -> Self {
        self.log = Some(file.into());
        self
    }

    /// The signal a stop sends first (default TERM; PostgreSQL's fast shutdown: INT).
    pub fn stop_signal(mut self, signal: Signal) -> Self {
        self.stop = signal;
        self
    }

    /// The signal it gets when this process ends without stopping it (default KILL).
    pub fn death_signal(mut self, signal: Signal) -> Self {
        self.death = signal;
        self
    }

    /// How long a stop waits after the stop signal before it sends KILL.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// In a session of its own (`setsid`) and without a death signal: it outlives this
    /// process. It is our child until this process exits, so its start can be waited
    /// for; [`Owned::release`] then leaves it running, as a [`Detached`].
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        let mut line = self.program.to_string_lossy().into_owned();
        for arg in &self.args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }

    /// Starts it, from the keeper thread.
    pub fn spawn(self) -> io::Result<Owned> {
        let child = keep(self.command()?)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.command_line())))?;
        let mut owned = Owned {
            spawn: self,
            child,
            status: None,
        };
        // setpriv sets the death signal, then runs the program: once it has, the child
        // dies with us (killed before that, as setpriv changes user, it would not).
        let pid = owned.id();
        wait_until(Duration::from_secs(10), || {
            !fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"setpriv") || c.starts_with(b"setsid"))
                || owned.try_wait().is_ok_and(|s| s.is_some())
        });
        Ok(owned)
    }

    fn command(&self) -> io::Result<Command> {
        let mut cmd = if self.detached {
            // setsid runs the program in the same process (no fork: the child is not a
            // process group leader), so the PID we hold is the server's.
            let mut cmd = Command::new("setsid");
            cmd.arg("setpriv");
            cmd
        } else {
            Command::new("setpriv")
        };
        if let Some(user) = &self.user {
            // The user's own group, by number: a group of the user's name may not exist.
            let group = Command::new("id").args(["-g", user]).output()?;
            let group = String::from_utf8_lossy(&group.stdout).trim().to_owned();
            if group.is_empty() {
                return Err(io::Error::other(format!("no user {user} (id -g {user})")));
            }
            cmd.args(["--reuid", user, "--regid", &group, "--init-groups"]);
        }
        if !self.detached {
            cmd.args(["--pdeathsig", self.death.name()])
                // Its own process group: Ctrl-C of the terminal reaches the test
                // process, whose end (or its drop) stops this child.
                .process_group(0);
        }
        cmd.arg("--")
            .arg(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        match &self.log {
            Some(file) => {
                let out = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
                cmd.stderr(out.try_clone()?).stdout(out);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        Ok(cmd)
    }
}

type Job = (Command, Sender<io::Result<Child>>);

/// Spawns `cmd` on the keeper thread, which lives as long as the process: the death
/// signal of a child fires when the thread that forked it ends.
fn keep(cmd: Command) -> io::Result<Child> {
    static KEEPER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("testbed-keeper".into())
            .spawn(move || {
                for (mut cmd, reply) in queue {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the keeper thread");
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::channel();
    keeper
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| io::Error::other("the keeper thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the keeper thread is gone"))?
}

/// A child of ours: stopped (its stop signal, a bounded wait, KILL) when dropped,
/// always; [`Owned::release`] turns it into a [`Detached`], which no drop stops.
#[derive(Debug)]
pub struct Owned {
    spawn: Spawn,
    child: Child,
    status: Option<ExitStatus>,
}

impl Owned {
    /// Its PID: still its own until it is reaped (a wait that saw it exit).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// How it was spawned.
    pub fn spawned(&self) -> &Spawn {
        &self.spawn
    }

    /// Its exit status, if it has exited (reaped now).
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Waits at most `limit` for it to exit.
    pub fn wait_timeout(&mut self, limit: Duration) -> io::Result<Option<ExitStatus>> {
        let start = now();
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if now().duration_since(start) >= limit {
                return Ok(None);
            }
            pause(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (the `kill` command), unless it has exited and been reaped: the
    /// PID cannot have gone to another process.
    pub fn signal(&mut self, signal: Signal) -> io::Result<()> {
        if self.try_wait()?.is_some() {
            return Ok(());
        }
        if signal == Signal::Kill {
            return self.child.kill();
        }
        let status = Command::new("kill")
            .args(["-s", signal.name(), &self.id().to_string()])
            .stderr(Stdio::null())
            .status()?;
        // It may have exited between our look and the kill: then it is a zombie, and
        // `kill` succeeds; a failure here is a real one.
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "kill -s {} {} ({}): {status}",
                signal.name(),
                self.id(),
                self.spawn.what
            )))
        }
    }

    /// Stops it: its stop signal, at most its grace to exit, then KILL.
    pub fn stop(&mut self) -> crate::Result<ExitStatus> {
        let signal = self.spawn.stop;
        let grace = self.spawn.grace;
        self.stop_with(signal, grace)
    }

    /// Sends `signal`, waits at most `grace`, then KILLs it and waits (`stop`).
    pub fn stop_with(&mut self, signal: Signal, grace: Duration) -> crate::Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        stop::stop(self, signal, grace)?;
        let status = self.try_wait()?;
        Ok(status.expect("a stopped child is reaped"))
    }

    /// KILL, and the wait.
    pub fn kill(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.try_wait()? {
            return Ok(status);
        }
        self.child.kill()?;
        let status = self.child.wait()?;
        self.status = Some(status);
        Ok(status)
    }

    /// Stops it and starts the same command again.
    pub fn restart(&mut self) -> crate::Result<()> {
        self.stop()?;
        let next = self.spawn.clone().spawn()?;
        // The old one is reaped: dropping it does nothing.
        *self = next;
        Ok(())
    }

    /// Leaves it running, as it is, for good: for a detached child ([`Spawn::detached`])
    /// once it has started. This value is consumed without its drop (which would stop
    /// the child); the process is the [`Detached`] returned, which has no drop.
    pub fn release(self) -> Detached {
        let mut this = ManuallyDrop::new(self);
        // What it holds is moved out, so nothing leaks: its `Child` holds no descriptor
        // (the child's stdio went to the child, or to nowhere).
        let spawn = std::mem::replace(&mut this.spawn, Spawn::new("", ""));
        Detached::found(this.id(), spawn.what)
    }

    /// The last `lines` lines of its log, if it has one.
    pub fn log_tail(&self, lines: usize) -> String {
        self.spawn
            .log
            .as_deref()
            .map(|log| tail(log, lines))
            .unwrap_or_default()
    }

    /// A failure of this child, for a message: what, the command, and the log's last
    /// 40 lines.
    pub fn failure(&self, why: &str) -> String {
        failure(&self.spawn, why)
    }
}

impl Stoppable for Owned {
    fn name(&self) -> String {
        self.spawn.what.clone()
    }

    fn send(&mut self, signal: Signal) -> crate::Result<()> {
        Ok(self.signal(signal)?)
    }

    fn gone_within(&mut self, limit: Duration) -> crate::Result<bool> {
        Ok(self.wait_timeout(limit)?.is_some())
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("stopping {}: {e}", self.spawn.what);
        }
    }
}

/// `why` a start of `spawn` failed, with its command and the last 40 lines of its log.
pub fn failure(spawn: &Spawn, why: &str) -> String {
    let mut text = format!("{} {why}\n  command: {}", spawn.what, spawn.command_line());
    if let Some(log) = &spawn.log {
        text.push_str(&format!(
            "\n  last lines of {}:\n{}",
            log.display(),
            tail(log, 40)
        ));
    }
    text
}

/// The last `lines` lines of `file`, each indented; empty when it cannot be read.
pub fn tail(file: &Path, lines: usize) -> String {
    let text = fs::read(file).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..]
        .iter()
        .map(|l| format!("    {l}\n"))
        .collect()
}

#[cfg(test)]
mod tests;
