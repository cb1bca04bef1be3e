//! PgBouncer in front of a server (Debian's `pgbouncer`), in a pool mode, on a port
//! picked free (again on another when it was taken), as an owned child; run as the
//! server's OS user when we are root (it refuses root).

use crate::error::{Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{OS_USER_WHEN_ROOT, conf, free_port};
use crate::process::{self, Owned, Spawn, TempDir};

/// Where Debian installs it; else it is looked up on PATH.
const DEBIAN_PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A running PgBouncer: stopped (SIGTERM) when dropped.
pub struct PgBouncer {
    port: u16,
    _child: Owned,
    dir: TempDir,
}

impl PgBouncer {
    /// The program: Debian's, else `pgbouncer` on PATH.
    pub fn program() -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.join("pgbouncer"));
        std::iter::once(PathBuf::from(DEBIAN_PGBOUNCER))
            .chain(on_path)
            .find(|p| p.is_file())
    }

    /// PgBouncer in `pool_mode` in front of the server on 127.0.0.1:`server_port`,
    /// trusting `user` (no password).
    pub fn start(server_port: u16, user: &str, pool_mode: &str) -> Result<Self> {
        let program = Self::program().ok_or_else(|| {
            Error::Refused(
                "pgbouncer is missing: install Debian's pgbouncer package (scripts/test.sh does)"
                    .to_owned(),
            )
        })?;
        let dir = TempDir::new("pgbouncer")?;
        let auth = dir.path().join("userlist.txt");
        let log = dir.path().join("pgbouncer.log");
        let ini = dir.path().join("pgbouncer.ini");
        fs::write(&auth, format!("\"{user}\" \"\"\n"))?;
        let run_as = process::is_root().then_some(OS_USER_WHEN_ROOT);
        let mut exits = Vec::new();
        for _ in 0..5 {
            let port = free_port()?;
            let text = conf::pgbouncer_ini(server_port, port, pool_mode, &auth, &log);
            fs::write(&ini, text)?;
            if let Some(user) = run_as {
                let _ = std::process::Command::new("chown")
                    .args(["-R", user])
                    .arg(dir.path())
                    .status();
            }
            let mut child = Spawn::new("PgBouncer", &program)
                .arg(&ini)
                .run_as(run_as)
                .current_dir(dir.path())
                .spawn()
                .map_err(|e| {
                    Error::Tool(format!(
                        "{e} (is it installed? Debian's pgbouncer; scripts/test.sh installs it)"
                    ))
                })?;
            let mut exited = None;
            let ready = process::wait_until(Duration::from_secs(60), || {
                if let Ok(Some(status)) = child.try_wait() {
                    exited = Some(status);
                    return true;
                }
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            match exited {
                Some(status) => exits.push(format!("port {port}: {status}")),
                None if ready => {
                    return Ok(PgBouncer {
                        port,
                        _child: child,
                        dir,
                    });
                }
                None => {
                    return Err(Error::Server(format!(
                        "PgBouncer did not listen on port {port} within 60 s; its log:\n{}",
                        process::tail(&log, 40)
                    )));
                }
            }
        }
        Err(Error::Server(format!(
            "PgBouncer exited before it was ready, 5 times: {exits:?}; its log:\n{}",
            process::tail(&log, 40)
        )))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory (pgbouncer.ini, userlist.txt, pgbouncer.log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
