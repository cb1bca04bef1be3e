//! Brokers kept in a directory of the caller's, STATE_DIR (`testbed start kafka`, which
//! scripts/kafka-start.sh runs): one node, or a three-node cluster in `node1`…`node3`,
//! started detached (a session of their own, no death signal) so that they outlive
//! the command, and found again from their state by a later start (which prints the
//! addresses of those that run and starts the others again, with their data on their
//! ports: `kept`'s shape) and by `testbed stop` (all of a cluster's nodes at
//! once, or one node's directory). A node's files: `server.properties`,
//! `log4j2.properties`, `data/`, `kafka.log` (`kafka.log.1` of the run before),
//! `classpath`, `kafka_brokers`; with TLS `tls/server.pem`, `kafka_ssl_brokers`,
//! `kafka_sasl_ssl_brokers`, `kafka_sasl_user`, `kafka_sasl_password` (0600); a
//! cluster's directory `kafka_brokers`; and each its state, `testbed.json`
//! (`state_file`: a node's PID, version, heap and pending archive; a cluster's
//! nodes).

use std::path::Path;

use super::cli::Args;
use super::cluster::{Cluster, NODE_HEAP, NODES};
use super::config::{self, write, write_private};
use super::jars::Cds;
use super::node::{Jvm, Node, NotReady, Released};
use super::{BROKER_HEAP, Kafka, seconds};
use crate::error::{Error, Result};
use crate::kept::{self, Found, Kept, Ready, canonical};
use crate::process::{Detached, Signal, TempDir};
use crate::state_file::{self as state, ClusterState, Held, NodeState};

/// Whether `dir` holds a node or a cluster of this module's.
pub fn holds(dir: &Path) -> bool {
    dir.join("server.properties").is_file()
        || matches!(state::held(dir), Ok(Some(Held::KafkaCluster(_))))
}

/// Starts what `args` asks for in `state` (an existing directory) detached, or again
/// what it holds, and waits until it serves: the PLAINTEXT addresses, comma-separated.
pub fn start(state: &Path, args: &Args) -> Result<String> {
    if !state.is_dir() {
        return Err(Error::Refused(format!(
            "STATE_DIR {} is not a directory (create it first, e.g. with mktemp -d)",
            state.display()
        )));
    }
    if args.state.is_some() {
        return Err(Error::Refused(
            "--state is serve's: a start writes its files into STATE_DIR".into(),
        ));
    }
    let single = state.join("server.properties").is_file();
    let cluster = matches!(state::held(state)?, Some(Held::KafkaCluster(_)));
    if cluster || (args.nodes == NODES && !single) {
        kept::start(state, &ClusterStart(args))
    } else {
        kept::start(state, &NodeStart(args))
    }
}

/// One node: started afresh, or again with its data, or found running.
struct NodeStart<'a>(&'a Args);

impl Kept for NodeStart<'_> {
    /// Its state (none for data from before the state file).
    type Server = Option<NodeState>;

    fn find(&self, state: &Path) -> Result<Found<Option<NodeState>>> {
        let kept = node_state(state)?;
        if let Some(node) = &kept
            && running_pid(state, node).is_some()
        {
            return Ok(Found::Running(kept));
        }
        if state.join("data/meta.properties").is_file() {
            Ok(Found::Stopped(kept))
        } else {
            Ok(Found::Fresh)
        }
    }

    fn first(&self, state: &Path) -> Result<Ready> {
        let kafka = self.0.kafka();
        let jvm = kafka.jvm(BROKER_HEAP)?;
        let started = kafka.start_in(TempDir::kept(state), jvm, true);
        let broker = started.inspect_err(|_| {
            // The next start is a fresh one again (its users written then), not a
            // start again of storage that never served.
            let _ = std::fs::remove_dir_all(state.join("data"));
        })?;
        let brokers = broker.brokers();
        if let (Some(ssl), Some(sasl)) = (broker.ssl(), broker.sasl_ssl()) {
            let (user, password) = &broker.users()[0];
            write(state, "kafka_ssl_brokers", &ssl)?;
            write(state, "kafka_sasl_ssl_brokers", &sasl)?;
            write(state, "kafka_sasl_user", user)?;
            write_private(
                &state.join("kafka_sasl_password"),
                format!("{password}\n").as_bytes(),
            )?;
        }
        let version = broker.version.clone();
        let released = broker.node.release()?;
        kept_node(state, &brokers, version, None, released)?;
        Ok(ready(brokers))
    }

    fn again(&self, state: &Path, kept: Option<NodeState>) -> Result<Ready> {
        let args = self.0;
        let kafka = first_version(state, args, kept.as_ref(), args.kafka())?;
        let mut jvm = kafka.jvm(BROKER_HEAP)?;
        let heap = kept.as_ref().and_then(|k| k.heap.clone());
        if let Some(heap) = &heap {
            // A cluster's node keeps the heap it was first started with.
            jvm.heap = heap.clone();
        }
        settle_unpublished(state, kept.as_ref(), &jvm);
        if let Some(port) = args.port {
            move_listener(state, port)?;
        }
        let mut node = Node::new(state, jvm.clone())?;
        node.detach();
        eprintln!(
            "testbed: starting the broker in {} again on {} (controller 127.0.0.1:{})",
            state.display(),
            node.address(),
            node.controller_port
        );
        node.start()?;
        let address = node.address();
        let released = node.release()?;
        kept_node(state, &address, jvm.jars.version.clone(), heap, released)?;
        Ok(ready(address))
    }

    fn running(&self, state: &Path, kept: Option<NodeState>) -> Result<Ready> {
        let kept = kept.expect("a running node has a state");
        if let Some(pid) = running_pid(state, &kept) {
            eprintln!(
                "testbed: the broker in {} runs already (pid {pid})",
                state.display()
            );
        }
        Ok(ready(kept.brokers))
    }
}

/// A cluster: three fresh nodes, or those of its nodes that do not run started again,
/// launched together and waited for together (a node is ready only once a majority of
/// the quorum runs).
struct ClusterStart<'a>(&'a Args);

impl Kept for ClusterStart<'_> {
    type Server = ClusterState;

    fn find(&self, state: &Path) -> Result<Found<ClusterState>> {
        let args = self.0;
        if args.tls.is_some() || args.authorizer {
            return Err(Error::Refused(
                "three nodes run PLAINTEXT only (no --tls / KAFKA_TLS_DIR, \
                 no --authorizer / KAFKA_AUTHORIZER=1)"
                    .into(),
            ));
        }
        let Some(Held::KafkaCluster(cluster)) = state::held(state)? else {
            return Ok(Found::Fresh);
        };
        let mut all_run = true;
        for dir in &cluster.nodes {
            all_run &= node_state(dir)?.is_some_and(|n| running_pid(dir, &n).is_some());
        }
        Ok(if all_run {
            Found::Running(cluster)
        } else {
            Found::Stopped(cluster)
        })
    }

    fn first(&self, state: &Path) -> Result<Ready> {
        let jvm = self.0.kafka().jvm(NODE_HEAP)?;
        let cluster =
            Cluster::start_in(jvm.clone(), TempDir::kept(state), true).inspect_err(|_| {
                // The next start is a fresh one again, not a start again of nodes
                // that never served.
                for i in 1..=NODES {
                    let _ = std::fs::remove_dir_all(state.join(format!("node{i}")));
                }
            })?;
        let brokers = cluster.brokers();
        let version = jvm.jars.version.clone();
        let mut nodes = Vec::new();
        for (dir, address, released) in cluster.release()? {
            let heap = Some(jvm.heap.clone());
            kept_node(&dir, &address, version.clone(), heap, released)?;
            nodes.push(dir);
        }
        write(state, "kafka_brokers", &brokers)?;
        state::write(
            state,
            &Held::KafkaCluster(ClusterState {
                nodes,
                brokers: brokers.clone(),
                version,
            }),
        )?;
        Ok(ready(brokers))
    }

    fn again(&self, state: &Path, cluster: ClusterState) -> Result<Ready> {
        let args = self.0;
        let first = NodeState {
            brokers: String::new(),
            version: cluster.version.clone(),
            heap: None,
            pid: None,
            cds_pending: None,
        };
        let kafka = first_version(state, args, Some(&first), args.kafka())?;
        let jvm = kafka.jvm(NODE_HEAP)?;
        let mut launched = Vec::new();
        for dir in &cluster.nodes {
            let kept = node_state(dir)?;
            if let Some(pid) = kept.as_ref().and_then(|n| running_pid(dir, n)) {
                eprintln!("testbed: node {} runs already (pid {pid})", dir.display());
                continue;
            }
            let mut node_jvm = jvm.clone();
            if let Some(heap) = kept.as_ref().and_then(|k| k.heap.clone()) {
                node_jvm.heap = heap;
            }
            settle_unpublished(dir, kept.as_ref(), &node_jvm);
            let mut node = Node::new(dir, node_jvm)?;
            node.detach();
            eprintln!(
                "testbed: starting node {} on {} (controller 127.0.0.1:{})",
                dir.display(),
                node.address(),
                node.controller_port
            );
            let outcome = node.launch();
            launched.push((node, kept));
            if let Err(e) = outcome {
                launched.iter_mut().for_each(|(n, _)| n.kill());
                return Err(e);
            }
        }
        let ready_all = launched
            .iter_mut()
            .try_for_each(|(n, _)| n.wait_ready().map_err(NotReady::into_error));
        if let Err(e) = ready_all {
            // None of them is left half-started.
            launched.iter_mut().for_each(|(n, _)| n.kill());
            return Err(e);
        }
        for (node, kept) in launched {
            let (dir, address) = (node.dir().to_owned(), node.address());
            let heap = kept.and_then(|k| k.heap);
            let released = node.release()?;
            kept_node(&dir, &address, cluster.version.clone(), heap, released)?;
        }
        Ok(ready(cluster.brokers))
    }

    fn running(&self, _state: &Path, cluster: ClusterState) -> Result<Ready> {
        for dir in &cluster.nodes {
            if let Some(pid) = node_state(dir)?.and_then(|n| running_pid(dir, &n)) {
                eprintln!("testbed: node {} runs already (pid {pid})", dir.display());
            }
        }
        Ok(ready(cluster.brokers))
    }
}

fn ready(address: String) -> Ready {
    Ready { address, log: None }
}

/// Writes the state of a node whose JVM now runs detached, and its address for the
/// user.
fn kept_node(
    dir: &Path,
    brokers: &str,
    version: String,
    heap: Option<String>,
    released: Released,
) -> Result<()> {
    write(dir, "kafka_brokers", brokers)?;
    state::write(
        dir,
        &Held::KafkaNode(NodeState {
            brokers: brokers.to_owned(),
            version,
            heap,
            pid: Some(released.process.pid()),
            cds_pending: released.cds_pending,
        }),
    )
}

/// The state of the node of `dir`, if it has one.
fn node_state(dir: &Path) -> Result<Option<NodeState>> {
    match state::held(dir)? {
        Some(Held::KafkaNode(node)) => Ok(Some(node)),
        None => Ok(None),
        Some(other) => Err(Error::Refused(format!(
            "{} holds no Kafka node but {other:?}",
            dir.display()
        ))),
    }
}

/// An archive an earlier detached JVM of the node was to write, never published (a
/// crash, a failed start): dropped, and forgotten by its state.
fn settle_unpublished(dir: &Path, kept: Option<&NodeState>, jvm: &Jvm) {
    if let Some(node) = kept
        && node.cds_pending.is_some()
    {
        Cds::settle_pending(node.cds_pending.clone(), jvm.jars.scripts(), false);
        let node = NodeState {
            cds_pending: None,
            ..node.clone()
        };
        if let Err(e) = state::write(dir, &Held::KafkaNode(node)) {
            eprintln!("testbed: warning: {e}");
        }
    }
}

/// The builder on the version of the first start: a broker's data is only read back by
/// the version that wrote it.
fn first_version(
    state: &Path,
    args: &Args,
    kept: Option<&NodeState>,
    kafka: Kafka,
) -> Result<Kafka> {
    let Some(first) = kept.map(|k| &k.version).filter(|v| !v.is_empty()) else {
        return Ok(kafka);
    };
    match &args.version {
        Some(asked) if asked != first => Err(Error::Refused(format!(
            "--version (KAFKA_VERSION) {asked}, but the broker in {} was first started with \
             {first}; a start again keeps its version",
            state.display()
        ))),
        _ => Ok(kafka.version(first)),
    }
}

/// Stops the broker of `state`, or every node of the cluster it holds, all at once
/// (the last node left alone would wait for a quorum to shut down): SIGTERM, then KILL
/// after `KAFKA_STOP_TIMEOUT` (30 s); `kill`: KILL at once, a crash. The data stay, for
/// [`start`]; a JVM's archive is published after a clean stop only. A broker that does
/// not run is no failure.
pub fn stop(state: &Path, kill: bool) -> Result<()> {
    let state = canonical(state)?;
    let dirs = match state::held(&state)? {
        Some(Held::KafkaCluster(cluster)) => cluster.nodes,
        _ => vec![state],
    };
    let grace = seconds("KAFKA_STOP_TIMEOUT", 30);
    let first = if kill { Signal::Kill } else { Signal::Term };
    let scripts = crate::scripts::scripts_dir();
    let mut signalled = Vec::new();
    for dir in dirs {
        let kept = node_state(&dir)?;
        match kept.as_ref().and_then(|n| running_pid(&dir, n)) {
            None => {
                eprintln!("testbed: no broker running for {}", dir.display());
                stopped(&dir, kept, &scripts, false)?;
            }
            Some(pid) => {
                let how = if kill {
                    "SIGKILL".to_owned()
                } else {
                    format!("SIGTERM, KILL after {} s", grace.as_secs())
                };
                eprintln!(
                    "testbed: stopping the broker in {} (pid {pid}, {how})",
                    dir.display()
                );
                let jvm = Detached::found(pid, format!("the broker in {}", dir.display()));
                jvm.signal(first)?;
                signalled.push((dir, kept, jvm));
            }
        }
    }
    let mut failed = Vec::new();
    for (dir, kept, mut jvm) in signalled {
        match jvm.await_exit(first, grace) {
            Ok(clean) => stopped(&dir, kept, &scripts, clean)?,
            Err(e) => failed.push(e.to_string()),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Error::Server(failed.join("\n")))
    }
}

/// A node's JVM gone: the archive it was to write settled (published after a clean
/// exit), its PID forgotten.
fn stopped(dir: &Path, kept: Option<NodeState>, scripts: &Path, clean: bool) -> Result<()> {
    let Some(node) = kept else { return Ok(()) };
    Cds::settle_pending(node.cds_pending.clone(), scripts, clean);
    state::write(
        dir,
        &Held::KafkaNode(NodeState {
            pid: None,
            cds_pending: None,
            ..node
        }),
    )
}

/// The PID of the broker of `dir` if it runs: its state's, whose command line must be
/// that broker's (a recycled PID is never taken for it).
fn running_pid(dir: &Path, kept: &NodeState) -> Option<u32> {
    let jvm = Detached::found(kept.pid?, "");
    let properties = dir.join("server.properties");
    let properties = properties.to_str()?;
    jvm.runs(&["kafka.Kafka", properties]).then_some(jvm.pid())
}

/// Moves the PLAINTEXT listener of a node's `server.properties` to `port` (the
/// controller's port stays: it is in the metadata log).
fn move_listener(state: &Path, port: u16) -> Result<()> {
    let file = state.join("server.properties");
    let text = std::fs::read_to_string(&file).map_err(Error::at(&file))?;
    let (old, _, _) = config::ports_of(&text).ok_or_else(|| {
        Error::Refused(format!(
            "no PLAINTEXT and CONTROLLER listener in {}",
            file.display()
        ))
    })?;
    if old == port {
        return Ok(());
    }
    eprintln!("testbed: moving the broker listener from port {old} to {port}");
    let text = text.replace(
        &format!("PLAINTEXT://127.0.0.1:{old}"),
        &format!("PLAINTEXT://127.0.0.1:{port}"),
    );
    std::fs::write(&file, text).map_err(Error::at(&file))
}
