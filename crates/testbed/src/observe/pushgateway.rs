//! The Prometheus Pushgateway (Debian's `prometheus-pushgateway`, or `PUSHGATEWAY_BIN`),
//! in memory only, optionally behind its own `--web.config.file` (TLS, basic
//! authentication). Ready once it logged that it serves (`TLS is enabled.` or
//! `disabled.`, written after its listener is bound) and its port accepts.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{on_path, start_on_free_ports, temp_dir};
use crate::ports::accepts;
use crate::process::{Owned, Spawn, TempDir};

/// A Pushgateway of its own; killed when dropped (it keeps nothing).
#[derive(Debug)]
pub struct Pushgateway {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub port: u16,
    child: Owned,
    dir: TempDir,
}

/// The binary: `PUSHGATEWAY_BIN`, else `prometheus-pushgateway` or `pushgateway` on
/// PATH.
pub fn binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("PUSHGATEWAY_BIN") {
        return Ok(bin.into());
    }
    on_path(&["prometheus-pushgateway", "pushgateway"]).ok_or_else(|| {
        Error::Refused(
            "no Pushgateway: install Debian's prometheus-pushgateway (scripts/test.sh does, as \
         root) or set PUSHGATEWAY_BIN"
                .to_owned(),
        )
    })
}

impl Pushgateway {
    /// One on plain HTTP.
    pub fn start() -> Result<Pushgateway> {
        Self::start_with(None)
    }

    /// One whose web configuration is the file `web_config` (`tls_server_config`,
    /// `basic_auth_users`), or plain HTTP without.
    pub fn start_with(web_config: Option<&Path>) -> Result<Pushgateway> {
        let bin = binary()?;
        let dir = temp_dir("pushgateway")?;
        let log = dir.path().join("pushgateway.log");
        let (child, ports) = start_on_free_ports(
            "the Pushgateway",
            1,
            Duration::from_secs(30),
            Duration::from_millis(50),
            |ports| {
                let _ = std::fs::remove_file(&log);
                let mut spawn = Spawn::new("the Pushgateway", &bin)
                    .arg(format!("--web.listen-address=127.0.0.1:{}", ports[0]))
                    // In memory only: Debian's default persists to /var/lib/prometheus.
                    .arg("--persistence.file=")
                    .arg("--log.level=info")
                    .log(&log)
                    .grace(Duration::from_secs(5));
                if let Some(file) = web_config {
                    spawn = spawn.arg(format!("--web.config.file={}", file.display()));
                }
                Ok(spawn)
            },
            |ports| {
                std::fs::read_to_string(&log).is_ok_and(|t| t.contains("msg=\"TLS is "))
                    && accepts(ports[0])
            },
        )?;
        Ok(Pushgateway {
            addr: format!("127.0.0.1:{}", ports[0]),
            port: ports[0],
            child,
            dir,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Its directory (`pushgateway.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Pushgateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}
