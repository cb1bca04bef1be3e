//! How a server comes up, as scripts/pg-start.sh did it: initdb (or pg_basebackup -R
//! for a standby, through a replication slot of its own), the throwaway settings, the
//! TLS files, `postgres` spawned on a free port (an owned child, or a detached one to be
//! released) and waited for with pg_isready; and the standby's slot dropped on its
//! primary when it stops.

use crate::error::{Error, Result};
use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{
    Instance, PORT_ATTEMPTS, Slot, Started, binaries, checked, conf, free_port, seconds_from_env,
};
use crate::process::{self, Owned, Signal, Spawn};

/// The statement that drops a standby's slot (psql -v slot=NAME).
const DROP_SLOT: &str = include_str!("../../sql/drop_standby_slot.sql");
/// The statement that makes it again (psql -v slot=NAME).
pub(super) const MAKE_SLOT: &str = include_str!("../../sql/make_standby_slot.sql");

impl Instance {
    pub(super) fn init_cluster(&self, tls: Option<&Path>) -> Result<()> {
        // C.UTF-8 gives UTF-8 character semantics without generated locales.
        let locales = Command::new("locale").arg("-a").output();
        let utf8 = locales.is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.eq_ignore_ascii_case("c.utf8") || l.eq_ignore_ascii_case("c.utf-8"))
        });
        let locale = if utf8 {
            "--locale=C.UTF-8"
        } else {
            "--no-locale"
        };
        let out = self
            .tool("initdb")
            .arg("-D")
            .arg(&self.data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                locale,
                "--no-sync",
            ])
            .output();
        checked("initdb", out)?;
        let conf = self.data.join("postgresql.conf");
        let mut text = fs::read(&conf)?;
        text.extend_from_slice(b"\ninclude 'throwaway.conf'\n");
        self.write(&conf, &text, 0o600)?;
        if let Some(certs) = tls {
            let read = |name: &str| {
                fs::read(certs.join(name)).map_err(Error::doing(format!(
                    "the TLS directory {} has no readable {name}",
                    certs.display()
                )))
            };
            self.write(&self.data.join("server.crt"), &read("server.crt")?, 0o644)?;
            self.write(&self.data.join("server.key"), &read("server.key")?, 0o600)?;
            self.write(
                &self.data.join("pg_hba.conf"),
                conf::TLS_HBA.as_bytes(),
                0o600,
            )?;
        }
        Ok(())
    }

    pub(super) fn clone_cluster(&mut self, primary: &Instance) -> Result<()> {
        if primary.bindir != self.bindir {
            return Err(Error::Server(format!(
                "the primary runs other binaries ({}) than {}",
                primary.bindir.display(),
                self.bindir.display()
            )));
        }
        let name = self
            .dir
            .file_name()
            .map(OsStr::to_string_lossy)
            .unwrap_or_default()
            .into_owned();
        let slot = conf::slot_name(&name, std::process::id());
        self.tls = primary.tls;
        let out = self
            .tool("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
            ])
            .arg(&self.data)
            .args([
                "-R",
                "-C",
                "-S",
                &slot,
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ])
            .output();
        checked("pg_basebackup", out)?;
        self.slot = Some(Slot {
            name: slot,
            primary_port: primary.port,
            primary_data: primary.data.clone(),
        });
        Ok(())
    }

    /// Starts `postgres` on a port the kernel picked free, again on another one (up to
    /// 5 times) when another process took it first: the child (`detached`: spawned in a
    /// session of its own, to be released).
    pub(super) fn start_on_free_port(&mut self, detached: bool) -> Result<Owned> {
        let mut taken = Vec::new();
        for _ in 0..PORT_ATTEMPTS {
            self.port = free_port()?;
            let conf = conf::throwaway_conf(self.port, &self.socket_dir, self.tls);
            self.write(&self.data.join("throwaway.conf"), conf.as_bytes(), 0o600)?;
            match self.spawn_and_wait(detached)? {
                Started::Ready(child) => return Ok(*child),
                Started::PortTaken(why) => taken.push(why),
            }
        }
        Err(Error::Server(format!(
            "no usable port after {PORT_ATTEMPTS} attempts: {taken:?}"
        )))
    }

    /// Spawns the server (`detached`: in a session of its own, without a death signal)
    /// and waits for it.
    pub(super) fn spawn_and_wait(&self, detached: bool) -> Result<Started> {
        let before = fs::metadata(&self.log).map_or(0, |m| m.len()) as usize;
        let spawn = Spawn::new("PostgreSQL", self.bindir.join("postgres"))
            .arg("-D")
            .arg(&self.data)
            .run_as(self.run_as.as_deref())
            .current_dir(&self.dir)
            .log(&self.log)
            .stop_signal(Signal::Int)
            .death_signal(Signal::Int)
            .grace(seconds_from_env("PG_STOP_TIMEOUT", 60));
        let spawn = if detached { spawn.detached() } else { spawn };
        let mut child = spawn.spawn()?;
        let limit = seconds_from_env("PG_START_TIMEOUT", 60);
        let isready = binaries::tool(&self.bindir, "pg_isready");
        let mut exited = None;
        let ready = process::wait_until(limit, || {
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some(status);
                return true;
            }
            Command::new(&isready)
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .args(["-U", "postgres", "-d", "postgres", "-t", "2"])
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if let Some(status) = exited {
            let log = fs::read(&self.log).unwrap_or_default();
            let since = String::from_utf8_lossy(&log[before.min(log.len())..]).into_owned();
            if conf::port_taken(&since) {
                return Ok(Started::PortTaken(format!("port {}: {status}", self.port)));
            }
            return Err(Error::Server(
                child.failure(&format!("exited before it was ready ({status})")),
            ));
        }
        if !ready {
            let why = child.failure(&format!(
                "did not accept connections on port {} within {} s",
                self.port,
                limit.as_secs()
            ));
            let _ = child.kill();
            return Err(Error::Server(why));
        }
        Ok(Started::Ready(Box::new(child)))
    }

    /// A standby's slot, dropped on its primary once the standby's WAL sender has gone
    /// (a slot in use cannot be dropped); a primary that is gone took it with it.
    pub(super) fn drop_slot(&self) {
        let Some(slot) = &self.slot else { return };
        if !slot.primary_data.join("postmaster.pid").exists() {
            return;
        }
        let gone = process::wait_until(Duration::from_secs(5), || {
            self.on_primary(slot, DROP_SLOT).as_deref() == Some("gone")
        });
        if !gone && slot.primary_data.join("postmaster.pid").exists() {
            eprintln!(
                "could not drop replication slot {} on 127.0.0.1:{}",
                slot.name, slot.primary_port
            );
        }
    }

    /// `sql` (a file of crates/testbed/sql whose `:'slot'` is the slot's name) run
    /// through psql on the primary of `slot`: its output, or `None` if it failed.
    pub(super) fn on_primary(&self, slot: &Slot, sql: &str) -> Option<String> {
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres{}",
            slot.primary_port,
            if self.tls { " sslmode=require" } else { "" }
        );
        let psql = binaries::tool(&self.bindir, "psql");
        let mut child = Command::new(&psql)
            .args(["-X", "-q", "-A", "-t", "-d", &conninfo, "-v"])
            .arg(format!("slot={}", slot.name))
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        use std::io::Write;
        let fed = child
            .stdin
            .take()
            .is_some_and(|mut i| i.write_all(sql.as_bytes()).is_ok());
        let out = child.wait_with_output().ok()?;
        (fed && out.status.success())
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}
