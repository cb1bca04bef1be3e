//! Prometheus (Debian's `prometheus`, or `PROMETHEUS_BIN`) with a configuration of
//! the caller's, its files (rules) beside it and its TSDB in its own directory; ready
//! once `/-/ready` answers 200.

use crate::error::{Error, Result};
use std::path::Path;
use std::time::Duration;

use super::{answers, on_path, start_on_free_ports, temp_dir, write};
use crate::process::{Owned, Spawn, TempDir};

/// A Prometheus of its own; killed when dropped, its directory removed.
#[derive(Debug)]
pub struct Prometheus {
    /// `127.0.0.1:PORT`: its HTTP API (`/api/v1/query`, `/api/v1/alerts`).
    pub addr: String,
    child: Owned,
    dir: TempDir,
}

impl Prometheus {
    /// Starts one on `prometheus.yml` = `config`, with `files` (name, text) beside it
    /// (a `rule_files:` entry names them relative to the configuration).
    pub fn start(config: &str, files: &[(&str, &str)]) -> Result<Prometheus> {
        let bin = match std::env::var_os("PROMETHEUS_BIN") {
            Some(bin) => bin.into(),
            None => on_path(&["prometheus"]).ok_or_else(|| {
                Error::Refused(
                    "no prometheus: install Debian's prometheus (scripts/test.sh does, as root)"
                        .to_owned(),
                )
            })?,
        };
        let dir = temp_dir("prometheus")?;
        for (name, text) in files {
            write(dir.path(), name, text)?;
        }
        let file = write(dir.path(), "prometheus.yml", config)?;
        let data = dir.path().join("data");
        let log = dir.path().join("prometheus.log");
        let (child, ports) = start_on_free_ports(
            "Prometheus",
            1,
            Duration::from_secs(30),
            Duration::from_millis(50),
            |ports| {
                Ok(Spawn::new("Prometheus", &bin)
                    .arg(format!("--config.file={}", file.display()))
                    .arg(format!("--storage.tsdb.path={}", data.display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{}", ports[0]))
                    .arg("--log.level=error")
                    .log(&log)
                    .grace(Duration::from_secs(10)))
            },
            |ports| answers(&format!("127.0.0.1:{}", ports[0]), "/-/ready"),
        )?;
        Ok(Prometheus {
            addr: format!("127.0.0.1:{}", ports[0]),
            child,
            dir,
        })
    }

    /// Its directory (`prometheus.yml`, the files, `data/`, `prometheus.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}
