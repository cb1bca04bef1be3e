//! The one shape of a start of a server kept in a STATE_DIR, which PostgreSQL's and
//! Kafka's (`postgres::state_dir`, `kafka::state_dir`) fill in: what STATE_DIR holds
//! is found first, then the server is started afresh, started again with its data on
//! the ports of its first start, or only found running; the start prints how long it
//! took and returns the address. A stop's shape is as plain: nothing there is no
//! failure.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::process;

/// What a start finds in a STATE_DIR.
pub enum Found<S> {
    /// Nothing of this service yet: a first start.
    Fresh,
    /// A server that does not run (or not wholly: a cluster's nodes), with its data.
    Stopped(S),
    /// A server that runs.
    Running(S),
}

/// A started or found server: its address, and its log for the message.
pub struct Ready {
    pub address: String,
    pub log: Option<PathBuf>,
}

/// A service that keeps its servers in STATE_DIRs.
pub trait Kept {
    /// What it is kept as.
    type Server;
    /// What `state` holds.
    fn find(&self, state: &Path) -> Result<Found<Self::Server>>;
    /// A first start, detached.
    fn first(&self, state: &Path) -> Result<Ready>;
    /// A start again of a server that was stopped, on its ports, with its data.
    fn again(&self, state: &Path, server: Self::Server) -> Result<Ready>;
    /// A server that runs already: found, said so.
    fn running(&self, state: &Path, server: Self::Server) -> Result<Ready>;
}

/// Starts what `state` (an existing directory) holds, or is to hold, by `kept`'s
/// steps: the address, to print.
pub fn start(state: &Path, kept: &impl Kept) -> Result<String> {
    let state = canonical(state)?;
    let started = process::now();
    let ready = match kept.find(&state)? {
        Found::Fresh => kept.first(&state)?,
        Found::Stopped(server) => kept.again(&state, server)?,
        Found::Running(server) => kept.running(&state, server)?,
    };
    let log = ready
        .log
        .map(|log| format!(" (log {})", log.display()))
        .unwrap_or_default();
    eprintln!(
        "testbed: ready in {:.1} s: {}{log}",
        process::now().duration_since(started).as_secs_f64(),
        ready.address,
    );
    Ok(ready.address)
}

/// `dir`, its links resolved (a detached server's files name it so).
pub fn canonical(dir: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(dir).map_err(Error::at(dir))
}
