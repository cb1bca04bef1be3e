//! PostgreSQL servers for the tests, as scripts/pg-start.sh and pg-stop.sh made them,
//! but as owned children: `postgres -D DATA` in the foreground, in a temporary
//! directory of its own (`be-it-postgres.XXXXXX`: the data, `postgres.log`, the socket),
//! run as `postgres` when we are root. [`Postgres`] is the builder (plain, TLS, a
//! streaming standby with its replication slot); a [`Server`] stops (fast shutdown)
//! when dropped, drops a standby's slot on its primary, and restarts on its port.
//! `state_dir` keeps one detached in a directory of the caller's instead, for
//! `testbed start postgres` (scripts/pg-start.sh).

mod binaries;
mod cluster;
mod conf;
mod os_user;
mod pgbouncer;
pub mod state_dir;

use crate::error::{Error, Result};
pub use binaries::{Flavor, bindir};
pub use pgbouncer::PgBouncer;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::process::{self, Owned, Signal, TempDir};
use os_user::ensure_os_user;

/// The OS user PostgreSQL runs as when we are root (it refuses root).
pub const OS_USER_WHEN_ROOT: &str = "postgres";
/// sun_path is 108 bytes and "/.s.PGSQL.65535" takes 15 of them; stay well below.
const MAX_SOCKET_DIR_LEN: usize = 80;
const PORT_ATTEMPTS: usize = 5;

fn seconds_from_env(name: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(default),
    )
}

/// A server to start: plain by default.
#[derive(Default)]
pub struct Postgres<'a> {
    tls: Option<PathBuf>,
    standby_of: Option<&'a Server>,
}

impl<'a> Postgres<'a> {
    pub fn new() -> Self {
        Postgres::default()
    }

    /// `ssl = on` with `dir`'s server.crt and server.key; TCP clients only over TLS.
    pub fn tls(mut self, dir: impl Into<PathBuf>) -> Self {
        self.tls = Some(dir.into());
        self
    }

    /// A hot standby streaming from `primary` through a physical replication slot of
    /// its own (dropped when the standby stops): `pg_basebackup -R -C -S`.
    pub fn standby_of(mut self, primary: &'a Server) -> Self {
        self.standby_of = Some(primary);
        self
    }

    /// Starts it and waits until it accepts TCP connections (`PG_START_TIMEOUT`, 60 s).
    pub fn start(self) -> Result<Server> {
        let (bindir, run_as) = binaries_and_user(self.tls.is_some())?;
        let dir = TempDir::new("postgres")?;
        let socket = socket_dir_for(dir.path())?;
        let socket_dir = socket
            .as_ref()
            .map_or_else(|| dir.path().join("sock"), |s| s.path().to_owned());
        let mut instance = Instance::in_dir(dir.path(), socket_dir, bindir, run_as);
        instance.tls = self.tls.is_some();
        // Owned from here: a start that fails stops what it started and drops the slot
        // a standby's base backup made.
        let mut server = Server {
            instance,
            child: Mutex::new(None),
            dir,
            _socket: socket,
        };
        server.instance.prepare_dirs()?;
        match self.standby_of {
            Some(primary) => server.instance.clone_cluster(primary)?,
            None => server.instance.init_cluster(self.tls.as_deref())?,
        }
        let child = server.instance.start_on_free_port(false)?;
        *server.child() = Some(child);
        Ok(server)
    }
}

/// The binaries a start runs and the OS user it runs them as (`postgres` when we are
/// root, created if missing); TLS is refused with the embedded flavour's.
fn binaries_and_user(tls: bool) -> Result<(PathBuf, Option<String>)> {
    let bindir = bindir()?;
    if tls && Flavor::from_env()? == Flavor::Embedded {
        return Err(Error::Refused(
            "TLS needs a server built with OpenSSL, and PG_FLAVOR=embedded's is \
                    not; use PG_FLAVOR=system for TLS"
                .into(),
        ));
    }
    let run_as = process::is_root().then(|| OS_USER_WHEN_ROOT.to_owned());
    if let Some(user) = &run_as {
        ensure_os_user(user)?;
    }
    Ok((bindir, run_as))
}

/// A socket directory of its own under /tmp when `dir/sock` would be too long a unix
/// socket path; `None`: `dir/sock`.
fn socket_dir_for(dir: &Path) -> Result<Option<TempDir>> {
    if dir.join("sock").as_os_str().len() > MAX_SOCKET_DIR_LEN {
        TempDir::new_in(Path::new("/tmp"), "pgsock")
            .map(Some)
            .map_err(Error::from)
    } else {
        Ok(None)
    }
}

/// How a spawn of the server ended: ready (the child, ours until released), or out
/// because another process took its port first (why).
enum Started {
    Ready(Box<Owned>),
    PortTaken(String),
}

/// A standby's slot on its primary: its name, the primary's port and data directory.
struct Slot {
    name: String,
    primary_port: u16,
    primary_data: PathBuf,
}

/// A server's files, binaries, OS user and port, wherever its process is: our child
/// (a [`Server`]'s) or a detached one (`state_dir`'s). No drop: what stops the process
/// is the [`Server`] that owns it.
pub struct Instance {
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    socket_dir: PathBuf,
    bindir: PathBuf,
    run_as: Option<String>,
    port: u16,
    tls: bool,
    slot: Option<Slot>,
}

/// A running server of the tests, our child: fast shutdown when dropped (a standby's
/// slot dropped on its primary), always. What it is reads through [`Instance`].
pub struct Server {
    instance: Instance,
    child: Mutex<Option<Owned>>,
    dir: TempDir,
    _socket: Option<TempDir>,
}

impl std::ops::Deref for Server {
    type Target = Instance;

    fn deref(&self) -> &Instance {
        &self.instance
    }
}

impl Instance {
    /// A server in `dir` (its data in `pgdata`, its log `postgres.log`), its socket in
    /// `socket_dir`, not started.
    fn in_dir(dir: &Path, socket_dir: PathBuf, bindir: PathBuf, run_as: Option<String>) -> Self {
        Instance {
            dir: dir.to_owned(),
            data: dir.join("pgdata"),
            log: dir.join("postgres.log"),
            socket_dir,
            bindir,
            run_as,
            port: 0,
            tls: false,
            slot: None,
        }
    }

    /// Its directory and its socket's, made the server user's.
    fn prepare_dirs(&self) -> Result<()> {
        fs::create_dir_all(&self.socket_dir).map_err(Error::at(&self.socket_dir))?;
        self.give(&self.dir)?;
        self.give(&self.socket_dir)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its directory (the data in `pgdata`, the log `postgres.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// Whether it serves TCP clients over TLS only.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// `pg_ctl promote -w`: a standby becomes a primary that takes writes.
    pub fn promote(&self) -> Result<()> {
        let out = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "promote"])
            .output();
        checked("pg_ctl promote", out).map(drop)
    }

    /// `sql` through psql (over TCP, as superuser), its unaligned output.
    pub fn psql(&self, sql: &str) -> Result<String> {
        let out = Command::new(binaries::tool(&self.bindir, "psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(self.conninfo())
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output();
        checked("psql", out).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    }

    /// A libpq connection string of its postgres database (TLS when it wants TLS).
    fn conninfo(&self) -> String {
        let ssl = if self.tls { " sslmode=require" } else { "" };
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres{ssl}",
            self.port
        )
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        process::tail(&self.log, lines)
    }

    /// A command of the server's binaries, run as its OS user.
    fn tool(&self, name: &str) -> Command {
        let program = binaries::tool(&self.bindir, name);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.current_dir(&self.dir).stdin(Stdio::null());
        cmd
    }

    /// Makes `path` the server user's.
    fn give(&self, path: &Path) -> Result<()> {
        let Some(user) = &self.run_as else {
            return Ok(());
        };
        let out = Command::new("chown").args(["-R", user]).arg(path).output();
        checked("chown", out).map(drop)
    }

    /// Writes `text` to `path` inside the data directory, as the server's file.
    fn write(&self, path: &Path, text: &[u8], mode: u32) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::write(path, text).map_err(Error::at(path))?;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(Error::at(path))?;
        self.give(path)
    }
}

impl Server {
    fn child(&self) -> MutexGuard<'_, Option<Owned>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fast shutdown (SIGINT; `PG_STOP_TIMEOUT`, 60 s, then KILL), as `pg_ctl stop -m
    /// fast`; a standby's slot is dropped on its primary.
    pub fn stop(&self) -> Result<()> {
        if let Some(mut child) = self.child().take() {
            child.stop()?;
        }
        self.drop_slot();
        Ok(())
    }

    /// Immediate shutdown (SIGQUIT), as in a crash: nothing is flushed.
    pub fn stop_immediately(&self) -> Result<()> {
        if let Some(mut child) = self.child().take() {
            child.stop_with(Signal::Quit, seconds_from_env("PG_STOP_TIMEOUT", 60))?;
        }
        Ok(())
    }

    /// Fast shutdown, then a start on the same port.
    pub fn restart(&self) -> Result<()> {
        if let Some(mut child) = self.child().take() {
            child.stop()?;
        }
        match self.spawn_and_wait(false)? {
            Started::Ready(child) => {
                *self.child() = Some(*child);
                Ok(())
            }
            Started::PortTaken(taken) => Err(Error::Server(format!(
                "port {} was taken meanwhile:\n{taken}",
                self.port
            ))),
        }
    }

    /// Leaves the server to this process's end (its death signal stops it; a guard
    /// removes its directories): for the server a whole test run shares.
    pub fn keep_until_exit(self) -> &'static Server {
        self.dir.remove_at_exit_too();
        if let Some(socket) = &self._socket {
            socket.remove_at_exit_too();
        }
        Box::leak(Box::new(self))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("stopping PostgreSQL in {}: {e}", self.dir.path().display());
        }
        // A failing test keeps the server's log (not its data) for inspection.
        if process::failing() {
            let _ = fs::remove_dir_all(&self.data);
        }
    }
}

/// A free port of 127.0.0.1 (`ports`; another server may take it before ours binds it:
/// the callers retry).
pub use crate::ports::free_port;

fn checked(what: &str, out: std::io::Result<Output>) -> Result<Output> {
    let out = out.map_err(|e| Error::Tool(format!("{what}: {e} (is it installed?)")))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::Tool(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}
