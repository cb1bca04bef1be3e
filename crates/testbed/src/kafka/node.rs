//! One Kafka node (a combined broker and controller, `java … kafka.Kafka
//! server.properties`) as an owned child: launched with its AppCDS flags, ready once
//! its log says `Kafka Server started` and its PLAINTEXT port accepts a connection,
//! stopped (SIGTERM, its grace, KILL; the archive it wrote published only after a clean
//! exit), killed, frozen, and started again from its directory with its data on the
//! same ports. Detached ([`Node::detach`]), it is launched in a session of its own and,
//! once ready, released ([`Node::release`]) to outlive this process: its PID and the
//! archive its JVM is to write go to its STATE_DIR's state, for `testbed stop`.

use crate::error::{Error, Result};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::jars::{Cds, Jars};
use crate::process::{Detached, Owned, Signal, Spawn, now, pause};

/// The line a broker logs once it serves.
pub const READY_LINE: &str = "Kafka Server started";

/// How a node's JVM runs and how long it is waited for.
#[derive(Debug, Clone)]
pub struct Jvm {
    pub jars: Arc<Jars>,
    /// `KAFKA_HEAP_OPTS`: split on whitespace.
    pub heap: String,
    /// `KAFKA_JVM_OPTS`: split on whitespace.
    pub opts: String,
    pub start_timeout: Duration,
    pub stop_timeout: Duration,
}

/// Why a node did not get ready.
#[derive(Debug)]
pub enum NotReady {
    /// It exited; whether its log says a port was taken.
    Exited {
        port_taken: bool,
        why: String,
    },
    TimedOut(String),
}

impl NotReady {
    /// The error it is, for a start that gives up.
    pub fn into_error(self) -> Error {
        match self {
            NotReady::Exited { why, .. } | NotReady::TimedOut(why) => Error::Server(why),
        }
    }
}

/// A node's JVM left running ([`Node::release`]): the process, and the AppCDS archive
/// it is to write at exit (the file it writes, the name it is published under).
#[derive(Debug)]
pub struct Released {
    pub process: Detached,
    pub cds_pending: Option<(PathBuf, PathBuf)>,
}

/// A node in its directory (`server.properties`, `log4j2.properties`, `data/`,
/// `kafka.log` and the run before's `kafka.log.1`).
#[derive(Debug)]
pub struct Node {
    dir: PathBuf,
    jvm: Jvm,
    pub broker_port: u16,
    pub controller_port: u16,
    /// The SSL and SASL_SSL listeners' ports, with TLS.
    pub tls_ports: Option<(u16, u16)>,
    child: Option<Owned>,
    cds: Cds,
    /// How its JVM is launched: in a session of its own, without a death signal (to
    /// be released). Not whether a drop stops it: a drop always stops a child it holds.
    own_session: bool,
}

impl Node {
    /// The node whose configuration `dir` holds (written and formatted already).
    pub fn new(dir: &Path, jvm: Jvm) -> Result<Node> {
        let properties = dir.join("server.properties");
        let text = std::fs::read_to_string(&properties).map_err(Error::at(&properties))?;
        let (broker_port, controller_port, tls_ports) =
            super::config::ports_of(&text).ok_or_else(|| {
                Error::Refused(format!(
                    "no PLAINTEXT and CONTROLLER listener in {}",
                    properties.display()
                ))
            })?;
        Ok(Node {
            dir: dir.to_owned(),
            jvm,
            broker_port,
            controller_port,
            tls_ports,
            child: None,
            cds: Cds::default(),
            own_session: false,
        })
    }

    /// Launches it detached from now on: in a session of its own, without a death
    /// signal, so that it outlives this process once [`Node::release`]d.
    pub fn detach(&mut self) {
        self.own_session = true;
    }

    /// Leaves the JVM running for good: this node is consumed (its drop then has no
    /// child to stop), the JVM is the [`Released`] returned, with the archive it is to
    /// write at exit, which a stop publishes after a clean exit.
    pub fn release(mut self) -> Result<Released> {
        let child = self.child.take().ok_or_else(|| {
            Error::Server(format!("the node in {} is not running", self.dir.display()))
        })?;
        Ok(Released {
            process: child.release(),
            cds_pending: std::mem::take(&mut self.cds).pending,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `127.0.0.1:PORT` of its PLAINTEXT listener.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.broker_port)
    }

    /// Its JVM's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Owned::id)
    }

    /// Whether its JVM runs (started, not exited).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().is_ok_and(|s| s.is_none()))
    }

    /// Starts the JVM (its ports must be free), without waiting for it.
    pub fn launch(&mut self) -> Result<()> {
        if self.running() {
            return Err(Error::Server(format!(
                "the node in {} runs already",
                self.dir.display()
            )));
        }
        self.reap();
        let mut ports = vec![self.broker_port, self.controller_port];
        ports.extend(self.tls_ports.iter().flat_map(|(a, b)| [*a, *b]));
        if let Some(port) = ports.iter().find(|p| accepts(**p)) {
            return Err(Error::Server(format!(
                "port {port} on 127.0.0.1 is already in use"
            )));
        }
        let log = self.dir.join("kafka.log");
        // The run before's log stays for post-mortems; the ready check reads the new one.
        if std::fs::metadata(&log).is_ok_and(|m| m.len() > 0) {
            let _ = std::fs::rename(&log, self.dir.join("kafka.log.1"));
        }
        let jars = &self.jvm.jars;
        std::fs::write(self.dir.join("classpath"), format!("{}\n", jars.classpath))
            .map_err(Error::at(&self.dir))?;
        self.cds = jars.cds()?;
        let spawn = Spawn::new(format!("Kafka in {}", self.dir.display()), &jars.java)
            .args(self.jvm.heap.split_whitespace())
            // SerialGC and a C1-only JIT start faster and use less memory than the
            // defaults (G1, C2) on 2 cores; the broker never sees production load.
            .args(self.jvm.opts.split_whitespace())
            .args(&self.cds.flags)
            .args([
                "-XX:+ExitOnOutOfMemoryError",
                "-XX:-UsePerfData",
                "-Djava.awt.headless=true",
            ])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                self.dir.join("log4j2.properties").display()
            ))
            .args(["-cp", &jars.classpath, "kafka.Kafka"])
            .arg(self.dir.join("server.properties"))
            .current_dir(&self.dir)
            .log(&log)
            .grace(self.jvm.stop_timeout);
        let spawn = if self.own_session {
            spawn.detached()
        } else {
            spawn
        };
        let what = spawn.command_line();
        self.child = Some(
            spawn
                .spawn()
                .map_err(|e| Error::Server(format!("{what}: {e}")))?,
        );
        Ok(())
    }

    /// Waits until it serves, for at most its start timeout.
    pub fn wait_ready(&mut self) -> Result<(), NotReady> {
        let started = now();
        let log = self.dir.join("kafka.log");
        loop {
            let child = self.child.as_mut().expect("launched");
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(NotReady::Exited {
                    port_taken: text.contains("Address already in use"),
                    why: child.failure(&format!("exited during start-up ({status})")),
                });
            }
            let logged = std::fs::read_to_string(&log).is_ok_and(|t| t.contains(READY_LINE));
            if logged && accepts(self.broker_port) {
                return Ok(());
            }
            if now().duration_since(started) >= self.jvm.start_timeout {
                let why = child.failure(&format!(
                    "not ready after {} s (KAFKA_START_TIMEOUT)",
                    self.jvm.start_timeout.as_secs()
                ));
                // No half-started broker is left behind.
                self.kill();
                return Err(NotReady::TimedOut(why));
            }
            pause(Duration::from_millis(100));
        }
    }

    /// Launches it and waits until it serves; killed again if it does not.
    pub fn start(&mut self) -> Result<()> {
        self.launch()?;
        self.wait_ready().map_err(|e| {
            self.kill();
            e.into_error()
        })
    }

    /// A clean stop: SIGTERM, at most its stop timeout, then KILL. The archive its JVM
    /// wrote at exit is kept only after a clean exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let clean = match child.stop() {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    status.signal() != Some(9)
                }
                Err(_) => false,
            };
            self.jvm.jars.publish(&self.cds, clean);
            self.cds = Cds::default();
        }
    }

    /// SIGTERM only, for stopping several nodes at once ([`Node::stop`] waits after).
    pub fn terminate(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.signal(Signal::Term);
        }
    }

    /// SIGKILL, no goodbye (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            self.jvm.jars.publish(&self.cds, false);
            self.cds = Cds::default();
        }
    }

    /// Sends `signal` to the JVM while it runs (STOP and CONT: a frozen broker).
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        match self.child.as_mut() {
            Some(child) => child.signal(signal).map_err(Error::from),
            None => Err(Error::Server(format!(
                "the node in {} is not running",
                self.dir.display()
            ))),
        }
    }

    /// Forgets a JVM that exited by itself.
    fn reap(&mut self) {
        if self.child.is_some() && !self.running() {
            self.kill();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub use crate::ports::accepts;

/// Free ports for a node's listeners (`ports`): a server taking one first makes the
/// callers start again on others.
pub use crate::ports::free_ports;
