//! A three-node KRaft cluster as production runs one: three combined nodes (one JVM
//! each, in `node1`…`node3` of a temporary directory), each a broker and a voter of a
//! static three-voter quorum, with replication factor 3 and min.insync.replicas 2 for
//! every topic. A node is stopped, killed, frozen and started again on its own, with
//! its data on the same ports.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

use super::config::write_node;
use super::config::{self, NodeConfig};
use super::node::{self, Jvm, Node, NotReady, Released};
use crate::process::{Signal, TempDir};

/// How many nodes a cluster has.
pub const NODES: u32 = 3;

/// A node's heap unless `KAFKA_HEAP_OPTS` says otherwise (three JVMs on two cores).
pub const NODE_HEAP: &str = "-Xmx256m -Xms64m";

/// A cluster of its own; every node is stopped when dropped (all at once: the last
/// node left alone would wait for a quorum to shut down) and the directory removed.
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<Node>,
    dir: TempDir,
}

impl Cluster {
    /// Writes and formats the three nodes in `dir` (`node1`…`node3`), launches them
    /// (detached: see `state_dir`) and waits for them. A
    /// port taken between its choice and a node's bind (another process's connection
    /// may take it) makes every node again on new ports (3 attempts).
    pub(super) fn start_in(jvm: Jvm, dir: TempDir, detached: bool) -> Result<Cluster> {
        let mut last = String::new();
        for _ in 0..3 {
            let mut nodes = Self::make_nodes(&jvm, dir.path(), detached)?;
            match Self::launch_together(&mut nodes) {
                Ok(()) => return Ok(Cluster { nodes, dir }),
                Err(e) => {
                    // No half-started cluster is left behind.
                    nodes.iter_mut().for_each(Node::kill);
                    match e {
                        NotReady::Exited {
                            port_taken: true,
                            why,
                        } => last = why,
                        e => return Err(e.into_error()),
                    }
                }
            }
            for i in 1..=NODES {
                let home = dir.path().join(format!("node{i}"));
                std::fs::remove_dir_all(&home).map_err(Error::at(&home))?;
            }
        }
        Err(Error::Server(format!(
            "the cluster's nodes could not bind their ports in 3 attempts: {last}"
        )))
    }

    /// A node is ready only once a majority of the quorum runs: launched together,
    /// waited for together.
    fn launch_together(nodes: &mut [Node]) -> Result<(), NotReady> {
        for node in nodes.iter_mut() {
            node.launch().map_err(|why| NotReady::Exited {
                port_taken: false,
                why: why.to_string(),
            })?;
        }
        nodes.iter_mut().try_for_each(Node::wait_ready)
    }

    /// The three nodes in `dir`, on ports chosen now, written and formatted.
    fn make_nodes(jvm: &Jvm, dir: &Path, detached: bool) -> Result<Vec<Node>> {
        let ports = node::free_ports(2 * NODES as usize)?;
        let voters: Vec<String> = (1..=NODES)
            .map(|i| format!("{i}@127.0.0.1:{}", ports[2 * i as usize - 1]))
            .collect();
        let id = config::cluster_id(crate::random::bytes16);
        let mut nodes = Vec::new();
        for i in 1..=NODES {
            let home = dir.join(format!("node{i}"));
            std::fs::create_dir_all(&home).map_err(Error::at(&home))?;
            let node = NodeConfig {
                id: i,
                voters: Some(voters.join(",")),
                replication: NODES,
                min_insync: 2,
                ..NodeConfig::single(ports[2 * i as usize - 2], ports[2 * i as usize - 1])
            };
            write_node(&home, &node)?;
            // A static quorum: no --standalone; the nodes share the cluster's id.
            jvm.jars
                .format(&home.join("server.properties"), &id, false, &[])?;
            let mut node = Node::new(&home, jvm.clone())?;
            if detached {
                node.detach();
            }
            nodes.push(node);
        }
        Ok(nodes)
    }

    /// The three PLAINTEXT addresses, comma-separated.
    pub fn brokers(&self) -> String {
        let all: Vec<String> = self.nodes.iter().map(Node::address).collect();
        all.join(",")
    }

    /// Its directory (`node1`…`node3`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn node(&mut self, id: u32) -> &mut Node {
        assert!(
            (1..=NODES).contains(&id),
            "node ids are 1..={NODES}, not {id}"
        );
        &mut self.nodes[id as usize - 1]
    }

    /// The directory of node `id` (1..=3, its node.id).
    pub fn node_dir(&self, id: u32) -> &Path {
        self.nodes[id as usize - 1].dir()
    }

    /// A clean stop (SIGTERM) of node `id`.
    pub fn stop(&mut self, id: u32) {
        self.node(id).stop();
    }

    /// SIGKILL of node `id`.
    pub fn kill(&mut self, id: u32) {
        self.node(id).kill();
    }

    /// Starts node `id` again with its data, and waits until it serves.
    pub fn restart(&mut self, id: u32) -> Result<()> {
        self.node(id).start()
    }

    /// Starts the nodes `ids` again with their data, launched together and waited for
    /// together (as the cluster's first start), so their JVMs start side by side.
    pub fn restart_together(&mut self, ids: &[u32]) -> Result<()> {
        let started = ids
            .iter()
            .try_for_each(|&id| self.node(id).launch())
            .and_then(|()| {
                ids.iter()
                    .try_for_each(|&id| self.node(id).wait_ready().map_err(NotReady::into_error))
            });
        if started.is_err() {
            // None of them is left half-started.
            for &id in ids {
                self.node(id).kill();
            }
        }
        started
    }

    /// Sends `signal` to node `id` (STOP and CONT: a frozen node).
    pub fn signal(&mut self, id: u32, signal: Signal) -> Result<()> {
        self.node(id).signal(signal)
    }

    /// Stops every node, all at once.
    pub fn stop_all(&mut self) {
        for node in &mut self.nodes {
            node.terminate();
        }
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Leaves every node running for good (detached ones): the cluster is consumed
    /// (its drop then has no node to stop), each node's JVM returned with its
    /// directory and address.
    pub(super) fn release(mut self) -> Result<Vec<(PathBuf, String, Released)>> {
        std::mem::take(&mut self.nodes)
            .into_iter()
            .map(|n| {
                let (dir, address) = (n.dir().to_owned(), n.address());
                n.release().map(|released| (dir, address, released))
            })
            .collect()
    }

    /// Kills every node.
    pub fn kill_all(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}
