//! Brokers kept in a directory of the caller's, STATE_DIR (`testbed start kafka`, which
//! scripts/kafka-start.sh runs): one node, or a three-node cluster in `node1`…`node3`,
//! started detached (a session of their own, no death signal) so that they outlive
//! the command, and found again from their files by a later start (which prints the
//! addresses of those that run and starts the others again, with their data on their
//! ports) and by `testbed stop` (all of a cluster's nodes at once, or one node's
//! directory). A node's files: `server.properties`, `log4j2.properties`, `data/`,
//! `kafka.log` (`kafka.log.1` of the run before), `kafka.pid`, `kafka_brokers`,
//! `kafka_version`, `classpath`; with TLS `tls/server.pem`, `kafka_ssl_brokers`,
//! `kafka_sasl_ssl_brokers`, `kafka_sasl_user`, `kafka_sasl_password` (0600); a
//! cluster's node its `heap_opts`; a cluster's directory `cluster_nodes`,
//! `kafka_brokers` and `kafka_version`.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

use super::cli::Args;
use super::cluster::{Cluster, NODE_HEAP, NODES};
use super::config::{self, write, write_private};
use super::jars::Cds;
use super::node::{Jvm, Node, NotReady};
use super::{BROKER_HEAP, Kafka, seconds};
use crate::process::{self, Signal, TempDir, detached};

/// Whether `dir` holds a node or a cluster of this module's.
pub fn holds(dir: &Path) -> bool {
    dir.join("server.properties").is_file() || is_cluster(dir)
}

fn is_cluster(dir: &Path) -> bool {
    read(dir, "cluster_nodes").is_some()
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
    let state = canonical(state)?;
    let started = process::now();
    let single = state.join("server.properties").is_file();
    let brokers = if is_cluster(&state) || (args.nodes == NODES && !single) {
        start_cluster(&state, args)?
    } else {
        start_node(&state, args)?
    };
    eprintln!(
        "testbed: ready in {:.1} s: {brokers}",
        process::now().duration_since(started).as_secs_f64()
    );
    Ok(brokers)
}

/// One node: started afresh, or again with its data, or found running.
fn start_node(state: &Path, args: &Args) -> Result<String> {
    if let (Some(pid), Some(brokers)) = (running_pid(state), read(state, "kafka_brokers")) {
        eprintln!(
            "testbed: the broker in {} runs already (pid {pid})",
            state.display()
        );
        return Ok(brokers);
    }
    let fresh = !state.join("data/meta.properties").is_file();
    let kafka = args.kafka();
    let kafka = if fresh {
        kafka
    } else {
        first_version(state, args, kafka)?
    };
    let mut jvm = kafka.jvm(BROKER_HEAP)?;
    if let Some(heap) = read(state, "heap_opts") {
        // A cluster's node keeps the heap it was first started with.
        jvm.heap = heap;
    }
    if fresh {
        let started = kafka.start_in(TempDir::kept(state), jvm, true);
        let mut broker = started.inspect_err(|_| {
            // The next start is a fresh one again (its users written then), not a
            // start again of storage that never served.
            let _ = std::fs::remove_dir_all(state.join("data"));
        })?;
        broker.node.release()?;
        write(state, "kafka_brokers", &broker.brokers())?;
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
        return Ok(broker.brokers());
    }
    if let Some(port) = args.port {
        move_listener(state, port)?;
    }
    let mut node = Node::new(state, jvm)?;
    node.detach();
    eprintln!(
        "testbed: starting the broker in {} again on {} (controller 127.0.0.1:{})",
        state.display(),
        node.address(),
        node.controller_port
    );
    node.start()?;
    node.release()?;
    write(state, "kafka_brokers", &node.address())?;
    Ok(node.address())
}

/// The builder on the version of the first start: a broker's data is only read back by
/// the version that wrote it.
fn first_version(state: &Path, args: &Args, kafka: Kafka) -> Result<Kafka> {
    let Some(first) = read(state, "kafka_version") else {
        return Ok(kafka);
    };
    match &args.version {
        Some(asked) if *asked != first => Err(Error::Refused(format!(
            "--version (KAFKA_VERSION) {asked}, but the broker in {} was first started with \
             {first}; a start again keeps its version",
            state.display()
        ))),
        _ => Ok(kafka.version(&first)),
    }
}

/// A cluster: three fresh nodes, or those of its nodes that do not run started again,
/// launched together and waited for together (a node is ready only once a majority of
/// the quorum runs).
fn start_cluster(state: &Path, args: &Args) -> Result<String> {
    if args.tls.is_some() || args.authorizer {
        return Err(Error::Refused(
            "three nodes run PLAINTEXT only (no --tls / KAFKA_TLS_DIR, \
             no --authorizer / KAFKA_AUTHORIZER=1)"
                .into(),
        ));
    }
    if !is_cluster(state) {
        let jvm = args.kafka().jvm(NODE_HEAP)?;
        let mut cluster = Cluster::start_in(jvm, TempDir::kept(state), true)?;
        cluster.release()?;
        return Ok(cluster.brokers());
    }
    let kafka = first_version(state, args, args.kafka())?;
    let jvm = kafka.jvm(NODE_HEAP)?;
    let mut launched = Vec::new();
    for dir in cluster_nodes(state)? {
        if let Some(pid) = running_pid(&dir) {
            eprintln!("testbed: node {} runs already (pid {pid})", dir.display());
            continue;
        }
        let mut node = node_again(&dir, &jvm)?;
        eprintln!(
            "testbed: starting node {} on {} (controller 127.0.0.1:{})",
            dir.display(),
            node.address(),
            node.controller_port
        );
        let outcome = node.launch();
        launched.push(node);
        if let Err(e) = outcome {
            launched.iter_mut().for_each(Node::kill);
            return Err(e);
        }
    }
    let ready = launched
        .iter_mut()
        .try_for_each(|n| n.wait_ready().map_err(NotReady::into_error));
    if let Err(e) = ready {
        // None of them is left half-started.
        launched.iter_mut().for_each(Node::kill);
        return Err(e);
    }
    for node in &mut launched {
        node.release()?;
    }
    read(state, "kafka_brokers")
        .ok_or_else(|| Error::Refused(format!("{} has no kafka_brokers", state.display())))
}

/// A cluster's node, to be started again detached with the heap of its first start.
fn node_again(dir: &Path, jvm: &Jvm) -> Result<Node> {
    let mut jvm = jvm.clone();
    if let Some(heap) = read(dir, "heap_opts") {
        jvm.heap = heap;
    }
    let mut node = Node::new(dir, jvm)?;
    node.detach();
    Ok(node)
}

/// Stops the broker of `state`, or every node of the cluster it holds, all at once
/// (the last node left alone would wait for a quorum to shut down): SIGTERM, then KILL
/// after `KAFKA_STOP_TIMEOUT` (30 s); `kill`: KILL at once, a crash. The data stay, for
/// [`start`]; a JVM's archive is published after a clean stop only. A broker that does
/// not run is no failure.
pub fn stop(state: &Path, kill: bool) -> Result<()> {
    let state = canonical(state)?;
    let dirs = if is_cluster(&state) {
        cluster_nodes(&state)?
    } else {
        vec![state]
    };
    let grace = seconds("KAFKA_STOP_TIMEOUT", 30);
    let first = if kill { Signal::Kill } else { Signal::Term };
    let scripts = crate::scripts::scripts_dir();
    let mut signalled = Vec::new();
    for dir in dirs {
        match running_pid(&dir) {
            None => {
                eprintln!("testbed: no broker running for {}", dir.display());
                let _ = std::fs::remove_file(dir.join("kafka.pid"));
                Cds::settle_pending(&dir, &scripts, false);
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
                detached::signal(pid, first)?;
                signalled.push((dir, pid));
            }
        }
    }
    let mut failed = Vec::new();
    for (dir, pid) in signalled {
        let what = format!("the broker in {}", dir.display());
        match detached::await_exit(pid, first, grace, &what) {
            Ok(clean) => {
                let _ = std::fs::remove_file(dir.join("kafka.pid"));
                Cds::settle_pending(&dir, &scripts, clean);
            }
            Err(e) => failed.push(e),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        let failed: Vec<String> = failed.iter().map(Error::to_string).collect();
        Err(Error::Server(failed.join("\n")))
    }
}

/// The PID of the broker of `dir` if it runs: `kafka.pid`, whose command line must be
/// that broker's (a recycled PID is never taken for it).
fn running_pid(dir: &Path) -> Option<u32> {
    let pid = detached::read_pid(&dir.join("kafka.pid"))?;
    let properties = dir.join("server.properties");
    let properties = properties.to_str()?;
    detached::runs(pid, &["kafka.Kafka", properties]).then_some(pid)
}

/// The node directories `cluster_nodes` lists.
fn cluster_nodes(state: &Path) -> Result<Vec<PathBuf>> {
    let file = state.join("cluster_nodes");
    let text = std::fs::read_to_string(&file).map_err(Error::at(&file))?;
    Ok(text
        .lines()
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect())
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

fn canonical(dir: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(dir).map_err(Error::at(dir))
}

/// The first line of `dir/name`, if there is one.
fn read(dir: &Path, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    text.lines()
        .next()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}
