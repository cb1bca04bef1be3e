//! The temporary directory of a server (`be-it-<kind>.XXXXXX` under TMPDIR, kept on
//! panic; or a detached server's directory, never removed) and the guards that act
//! once this process has exited (a shell holding a pipe only this process holds).

use std::cell::Cell;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::panic::{self, UnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Whether this thread runs a panic it expects ([`expecting_panic`]).
    static EXPECTED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, catching its panic, as `catch_unwind` does, for a test that makes a run
/// fail on purpose: the servers dropped while it unwinds are removed as after a
/// pass, not kept as a failed test's (each run of such a test would leave its
/// directories for good).
pub fn expecting_panic<R>(f: impl FnOnce() -> R + UnwindSafe) -> std::thread::Result<R> {
    EXPECTED.with(|e| e.set(true));
    let outcome = panic::catch_unwind(f);
    EXPECTED.with(|e| e.set(false));
    outcome
}

/// Whether the thread unwinds from a panic nobody expected: a failed test.
pub fn failing() -> bool {
    std::thread::panicking() && !EXPECTED.with(Cell::get)
}

/// A temporary directory `be-it-<kind>.XXXXXX` under TMPDIR (mode 0755, so a server run
/// as another user reaches it): removed on drop, kept and named on stderr when the
/// thread is panicking.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    /// Whether a guard removes it at exit instead of the drop.
    left: AtomicBool,
}

impl TempDir {
    pub fn new(kind: &str) -> io::Result<Self> {
        Self::new_in(&std::env::temp_dir(), kind)
    }

    /// `be-it-<kind>.XXXXXX` under `base`.
    pub fn new_in(base: &Path, kind: &str) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        for _ in 0..100 {
            let suffix = crate::random::hex::<3>();
            let path = base.join(format!("be-it-{kind}.{suffix}"));
            match fs::create_dir(&path) {
                Ok(()) => {
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
                    return Ok(TempDir {
                        path,
                        left: AtomicBool::new(false),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
                }
            }
        }
        Err(io::Error::other("no free name for a temporary directory"))
    }

    /// A directory of the caller's (a detached server's STATE_DIR) in the place of a
    /// temporary one: never removed.
    pub fn kept(path: &Path) -> Self {
        TempDir {
            path: path.to_owned(),
            left: AtomicBool::new(true),
        }
    }

    /// Keeps the directory for good (it outlives this process): its path.
    pub fn keep(self) -> PathBuf {
        self.left.store(true, Ordering::SeqCst);
        self.path.clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory to a guard that removes it once this process has exited
    /// ([`remove_at_exit`]): for a service that lives as long as the process.
    pub fn remove_at_exit(self) -> PathBuf {
        self.remove_at_exit_too();
        self.path.clone()
    }

    /// As [`TempDir::remove_at_exit`], for a directory whose owner is kept: its drop
    /// then leaves it to the guard.
    pub fn remove_at_exit_too(&self) {
        if !self.left.swap(true, Ordering::SeqCst) {
            remove_at_exit(&self.path);
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.left.load(Ordering::SeqCst) {
            return;
        }
        if failing() {
            eprintln!(
                "kept the directory of a server of the failed test: {}",
                self.path.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// The write ends of the guards' stdin, held until the process exits.
static GUARDS: Mutex<Vec<ChildStdin>> = Mutex::new(Vec::new());

/// Runs the shell `script` (with `args` as `$1`…) once this process has exited,
/// however it ends: a shell in a process group of its own waits for its stdin, a pipe
/// only this process holds, to close.
pub fn at_exit(script: &str, args: &[&OsStr]) -> io::Result<()> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("cat >/dev/null; {script}"))
        .arg("sh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let mut pipe = child.stdin.take().expect("piped stdin");
    pipe.flush()?;
    GUARDS.lock().unwrap_or_else(|e| e.into_inner()).push(pipe);
    Ok(())
}

/// Removes `dir` once this process has exited; the servers in it die with the process
/// (their death signal), so the removal is tried again while their last writes land
/// (for at most 30 s).
pub fn remove_at_exit(dir: &Path) {
    let script = r#"i=0; while ! rm -rf -- "$1" 2>/dev/null && [ "$i" -lt 300 ]; do i=$((i + 1)); sleep 0.1; done"#;
    if let Err(e) = at_exit(script, &[dir.as_os_str()]) {
        eprintln!("no guard removes {} at exit: {e}", dir.display());
    }
}

/// Whether this process runs as root (PostgreSQL then runs as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
