//! Apache Kafka (KRaft) for the tests, the demo and the bench: a builder ([`Kafka`])
//! for one combined broker and controller ([`Broker`]), with TLS listeners (SSL, and
//! SASL_SSL with SCRAM-SHA-512 users) and KRaft's StandardAuthorizer on request, or a
//! three-node cluster ([`Cluster`]: a static quorum, replication factor 3,
//! min.insync.replicas 2). Each node is an owned child in a temporary directory,
//! stopped when dropped; a node stopped or killed starts again on the same ports with
//! its data. The environment the scripts read sets the defaults: `KAFKA_VERSION` (a
//! version a pom of `scripts/kafka/` pins), `KAFKA_HEAP_OPTS`, `KAFKA_JVM_OPTS`,
//! `KAFKA_CDS`, `KAFKA_START_TIMEOUT`, `KAFKA_STOP_TIMEOUT`.

pub mod cli;
mod cluster;
pub mod config;
pub mod jars;
pub mod node;
pub mod state_dir;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use cluster::Cluster;
use config::{NodeConfig, write_node};
use jars::Jars;
use node::{Jvm, Node, NotReady};

use crate::process::{Signal, TempDir};

/// A single broker's heap unless `KAFKA_HEAP_OPTS` says otherwise.
const BROKER_HEAP: &str = "-Xmx512m -Xms256m";

/// How a broker or a cluster is to be started.
#[derive(Debug, Clone)]
pub struct Kafka {
    version: String,
    port: Option<u16>,
    tls: Option<PathBuf>,
    users: Vec<(String, String)>,
    authorizer: bool,
    heap: Option<String>,
    opts: String,
    start_timeout: Duration,
    stop_timeout: Duration,
    scripts: PathBuf,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn seconds(name: &str, default: u64) -> Duration {
    Duration::from_secs(env(name).and_then(|v| v.parse().ok()).unwrap_or(default))
}

impl Default for Kafka {
    fn default() -> Self {
        Self::new()
    }
}

impl Kafka {
    /// A single PLAINTEXT node, with the environment's defaults.
    pub fn new() -> Self {
        Kafka {
            version: env("KAFKA_VERSION").unwrap_or_default(),
            port: None,
            tls: None,
            users: Vec::new(),
            authorizer: false,
            heap: env("KAFKA_HEAP_OPTS"),
            opts: env("KAFKA_JVM_OPTS")
                .unwrap_or_else(|| "-XX:+UseSerialGC -XX:TieredStopAtLevel=1".into()),
            start_timeout: seconds("KAFKA_START_TIMEOUT", 90),
            stop_timeout: seconds("KAFKA_STOP_TIMEOUT", 30),
            scripts: crate::scripts::scripts_dir(),
        }
    }

    /// The Kafka version (a pom of `scripts/kafka/` pins it; empty: the default).
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.to_owned();
        self
    }

    /// The PLAINTEXT listener on this port instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// SSL and SASL_SSL listeners besides PLAINTEXT, with the key and certificate of
    /// `dir` (`server.crt`: PEM, a chain allowed; `server.key`: PEM, PKCS#8,
    /// unencrypted). Without a [`Kafka::user`], one user `relay` with a random password.
    pub fn tls(mut self, dir: &Path) -> Self {
        self.tls = Some(dir.to_owned());
        self
    }

    /// A SCRAM-SHA-512 user of the SASL_SSL listener (letters, digits, `-` and `_`);
    /// the first is [`Broker::user`].
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.users.push((name.to_owned(), password.to_owned()));
        self
    }

    /// KRaft's StandardAuthorizer: a principal may do only what an ACL allows it. The
    /// PLAINTEXT listener's User:ANONYMOUS is a super user (the broker, its controller
    /// and the admin work talk over it).
    pub fn authorizer(mut self, on: bool) -> Self {
        self.authorizer = on;
        self
    }

    /// The JVM's heap options instead of `KAFKA_HEAP_OPTS` (default `-Xmx512m
    /// -Xms256m`; a cluster's node `-Xmx256m -Xms64m`).
    pub fn heap(mut self, heap: &str) -> Self {
        self.heap = Some(heap.to_owned());
        self
    }

    /// How long a start waits for a node (default `KAFKA_START_TIMEOUT`, 90 s).
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.start_timeout = limit;
        self
    }

    fn jvm(&self, heap: &str) -> Result<Jvm> {
        Ok(Jvm {
            jars: Arc::new(Jars::resolve(&self.scripts, &self.version)?),
            heap: self.heap.clone().unwrap_or_else(|| heap.to_owned()),
            opts: self.opts.clone(),
            start_timeout: self.start_timeout,
            stop_timeout: self.stop_timeout,
        })
    }

    /// Starts one node in a new temporary directory and waits until it serves. A port
    /// taken between its choice and the broker's bind is chosen again (3 attempts).
    pub fn start(&self) -> Result<Broker> {
        let jvm = self.jvm(BROKER_HEAP)?;
        let dir = TempDir::new("kafka")?;
        self.start_in(dir, jvm, false)
    }

    /// Starts one node in `dir` (detached: left running once it serves, see
    /// `state_dir`), as [`Kafka::start`].
    fn start_in(&self, dir: TempDir, jvm: Jvm, detached: bool) -> Result<Broker> {
        let mut users = self.users.clone();
        if self.tls.is_some() && users.is_empty() {
            users.push(("relay".into(), config::random_password()));
        }
        if let Some((bad, _)) = users
            .iter()
            .find(|(n, p)| !config::plain_word(n) || !config::plain_word(p))
        {
            return Err(Error::Server(format!(
                "SCRAM user {bad:?}: names and passwords are letters, digits, - and _ only"
            )));
        }
        if let Some(certs) = &self.tls {
            copy_keystore(certs, dir.path())?;
        }
        let mut last = String::new();
        for _ in 0..3 {
            let tls = usize::from(self.tls.is_some()) * 2;
            let ports = node::free_ports(2 + tls)?;
            let mut node = NodeConfig::single(self.port.unwrap_or(ports[0]), ports[1]);
            node.tls_ports = self.tls.as_ref().map(|_| (ports[2], ports[3]));
            node.authorizer = self.authorizer;
            write_node(dir.path(), &node)?;
            let _ = std::fs::remove_dir_all(dir.path().join("data"));
            let id = config::cluster_id(crate::random::bytes16);
            let scram = config::scram_args(&users);
            jvm.jars
                .format(&dir.path().join("server.properties"), &id, true, &scram)?;
            let mut running = Node::new(dir.path(), jvm.clone())?;
            if detached {
                running.detach();
            }
            running.launch()?;
            match running.wait_ready() {
                Ok(()) => {
                    let version = jvm.jars.version.clone();
                    return Ok(Broker {
                        node: running,
                        users,
                        version,
                        dir,
                    });
                }
                Err(NotReady::Exited {
                    port_taken: true,
                    why,
                }) if self.port.is_none() => {
                    running.kill();
                    last = why;
                }
                Err(e) => return Err(e.into_error()),
            }
        }
        Err(Error::Server(format!(
            "the broker could not bind its ports in 3 attempts: {last}"
        )))
    }

    /// Starts a three-node cluster in a new temporary directory (`node1`…`node3`) and
    /// waits until every node serves. PLAINTEXT only.
    pub fn start_cluster(&self) -> Result<Cluster> {
        if self.tls.is_some() || self.authorizer {
            return Err(Error::Refused(
                "a cluster runs PLAINTEXT only (no TLS, no authorizer)".into(),
            ));
        }
        let dir = TempDir::new("kafka3")?;
        Cluster::start_in(self.jvm(cluster::NODE_HEAP)?, dir, false)
    }
}

/// Writes `server.properties` and `log4j2.properties` of `node` into `dir`.
/// The key and the certificate of `certs` as one PEM keystore, `dir/tls/server.pem`
/// (mode 0600), so a restart needs nothing else.
fn copy_keystore(certs: &Path, dir: &Path) -> Result<()> {
    let read = |name: &str| {
        std::fs::read(certs.join(name)).map_err(Error::doing(format!(
            "the TLS directory {} has no readable {name}",
            certs.display()
        )))
    };
    let mut pem = read("server.key")?;
    pem.extend(read("server.crt")?);
    let tls = dir.join("tls");
    std::fs::create_dir_all(&tls).map_err(Error::at(&tls))?;
    config::write_private(&tls.join("server.pem"), &pem)
}

/// One broker of its own (a combined broker and controller), in a temporary directory:
/// stopped (SIGTERM, then KILL after `KAFKA_STOP_TIMEOUT`) and removed when dropped.
#[derive(Debug)]
pub struct Broker {
    node: Node,
    users: Vec<(String, String)>,
    version: String,
    dir: TempDir,
}

impl Broker {
    /// `127.0.0.1:PORT` of the PLAINTEXT listener.
    pub fn brokers(&self) -> String {
        self.node.address()
    }

    /// `127.0.0.1:PORT` of the SSL listener, with TLS.
    pub fn ssl(&self) -> Option<String> {
        self.node.tls_ports.map(|(p, _)| format!("127.0.0.1:{p}"))
    }

    /// `127.0.0.1:PORT` of the SASL_SSL listener, with TLS.
    pub fn sasl_ssl(&self) -> Option<String> {
        self.node.tls_ports.map(|(_, p)| format!("127.0.0.1:{p}"))
    }

    /// The SCRAM users (name, password), the first one first.
    pub fn users(&self) -> &[(String, String)] {
        &self.users
    }

    /// The Kafka version it runs.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Its directory (`server.properties`, `kafka.log`, `data/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its JVM's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// A clean stop (SIGTERM); its data stays for [`Broker::restart`].
    pub fn stop(&mut self) {
        self.node.stop();
    }

    /// SIGKILL, no goodbye; its data stays for [`Broker::restart`].
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Starts it again (after a stop or a kill) on the same ports with its data.
    pub fn restart(&mut self) -> Result<()> {
        self.node.start()
    }

    /// Sends `signal` to the broker (STOP and CONT: a frozen broker).
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        self.node.signal(signal)
    }

    /// Leaves the directory to a guard that removes it once this process has exited:
    /// for the broker of the whole run, never dropped.
    pub fn keep_until_exit(self) -> &'static Broker {
        crate::process::remove_at_exit(self.dir.path());
        Box::leak(Box::new(self))
    }
}
