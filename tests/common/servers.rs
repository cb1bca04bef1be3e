//! Servers of a test's own: a PostgreSQL to restart, stop or configure at the server
//! level (pg_stat_statements preloaded), and a listener that never answers.

#![allow(unused_imports)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use postgres::{Client, NoTls};
use serde_json::Value;
use uuid::Uuid;

#[allow(unused_imports)]
use super::*;

/// A TCP listener on 127.0.0.1 that never accepts: the kernel completes the
/// handshake, then nothing ever answers (a hung server, a half-dead proxy).
pub fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A PostgreSQL server of the test's own (scripts/pg-start.sh in a temporary
/// directory), to restart or stop; its `postgres` database is migrated.
pub struct OwnPostgres {
    pub dir: PathBuf,
    pub url: String,
}

pub fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

impl OwnPostgres {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("be-pg-{}", Uuid::new_v4().simple()));
        let out = Command::new(scripts_dir().join("pg-start.sh"))
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-start.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        migrate_url(&url);
        OwnPostgres { dir, url }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the own server")
    }

    /// `pg_ctl restart -m fast`: every session is terminated, the server comes back on
    /// the same port.
    pub fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "restart"]);
    }

    pub fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "stop"]);
    }

    /// A hot standby streaming from this server (`pg_basebackup -R`), on a port of its
    /// own; it has every database of this one and follows it.
    pub fn standby(&self) -> OwnPostgres {
        let dir = std::env::temp_dir().join(format!("be-pg-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let bindir = std::fs::read_to_string(self.dir.join("pg_bindir")).unwrap();
        let bindir = PathBuf::from(bindir.trim());
        std::fs::write(dir.join("pg_bindir"), bindir.display().to_string()).unwrap();
        let as_owner = |program: &str| {
            let mut c = if is_root() {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(bindir.join(program));
                c
            } else {
                Command::new(bindir.join(program))
            };
            c.stdin(Stdio::null());
            c
        };
        if is_root() {
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(chown.success());
        }
        let data = dir.join("pgdata");
        let out = as_owner("pg_basebackup")
            .arg("-D")
            .arg(&data)
            .args(["-R", "-X", "stream", "-c", "fast", "-d", &self.url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_basebackup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The copy's own port and socket; read after the primary's settings it copied.
        let auto = data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).unwrap();
        conf.push_str(&format!(
            "port = {port}\nunix_socket_directories = '{}'\nhot_standby = on\n",
            dir.display()
        ));
        std::fs::write(&auto, conf).unwrap();
        std::fs::write(dir.join("port"), port.to_string()).unwrap();
        let out = as_owner("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("postgres.log"))
            .args(["-w", "start"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl start (standby): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = self
            .url
            .replace(&format!(":{}/", self.port()), &format!(":{port}/"));
        OwnPostgres { dir, url }
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        postgres::Config::from_str(&self.url).unwrap().get_ports()[0]
    }

    /// As pg-stop.sh does: the cluster's tools run as its owner when we are root.
    fn pg_ctl(&self, args: &[&str]) {
        let bindir = std::fs::read_to_string(self.dir.join("pg_bindir")).unwrap();
        let pg_ctl = PathBuf::from(bindir.trim()).join("pg_ctl");
        let data = self.dir.join("pgdata");
        let log = self.dir.join("postgres.log");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        // -l: the restarted server logs to the file, never to our pipes.
        let out = cmd
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = Command::new(scripts_dir().join("pg-stop.sh"))
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
