//! The one state file of a STATE_DIR, `testbed.json`: what `testbed start` leaves there
//! for a later start or stop (a server's port, binaries and sockets, a broker's PID and
//! version, a cluster's nodes), written and read back with serde by these two functions
//! only. The files the scripts document for their users (`database_url`,
//! `kafka_brokers`, …) are written beside it, and never read back.

use std::fs;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The state file's name in its STATE_DIR.
pub const FILE: &str = "testbed.json";

/// What a STATE_DIR holds, by service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "service", rename_all = "snake_case")]
pub enum Held {
    Postgres(PgState),
    KafkaNode(NodeState),
    KafkaCluster(ClusterState),
}

/// A PostgreSQL server's (its port is its `pgdata/throwaway.conf`'s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgState {
    /// The port of its last start, for the reader (the server reads its configuration).
    pub port: Option<u16>,
    /// The binaries it runs.
    pub bindir: PathBuf,
    /// Its unix socket's directory.
    pub socket_dir: PathBuf,
    /// A short socket directory of its own (STATE_DIR was too long a socket path),
    /// which a stop removes.
    pub tmp_socket_dir: Option<PathBuf>,
    /// A standby's slot on its primary, and the primary's STATE_DIR.
    pub standby: Option<Standby>,
}

/// A standby's replication slot and the STATE_DIR of its primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standby {
    pub slot: String,
    pub primary_dir: PathBuf,
}

/// A Kafka node's: one broker, or one node of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// Its PLAINTEXT address.
    pub brokers: String,
    /// The Kafka version of its first start (its data are read back by that version).
    pub version: String,
    /// A cluster's node: the heap of its first start.
    pub heap: Option<String>,
    /// Its JVM's PID while it runs (a stop clears it).
    pub pid: Option<u32>,
    /// The AppCDS archive its JVM is to write at exit (the file it writes, the name it
    /// is published under), which a stop publishes after a clean exit.
    pub cds_pending: Option<(PathBuf, PathBuf)>,
}

/// A three-node cluster's: its nodes' directories (each with a state of its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub nodes: Vec<PathBuf>,
    /// The PLAINTEXT addresses, comma-separated.
    pub brokers: String,
    pub version: String,
}

/// What `dir` holds; `None` when it holds nothing of `testbed start`'s.
pub fn held(dir: &Path) -> Result<Option<Held>> {
    read(dir)
}

/// The state `dir` holds; `None` when it holds none.
fn read<T: DeserializeOwned>(dir: &Path) -> Result<Option<T>> {
    let file = dir.join(FILE);
    let text = match fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::at(&file)(e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Refused(format!("{}: {e}", file.display())))
}

/// Writes what `dir` holds into its state file, whole or not at all (a new file renamed
/// over the old one).
pub fn write(dir: &Path, state: &Held) -> Result<()> {
    write_any(dir, state)
}

fn write_any<T: Serialize>(dir: &Path, state: &T) -> Result<()> {
    let file = dir.join(FILE);
    let next = dir.join(format!("{FILE}.new"));
    let mut text = serde_json::to_string_pretty(state)
        .map_err(|e| Error::Refused(format!("{}: {e}", file.display())))?;
    text.push('\n');
    fs::write(&next, text).map_err(Error::at(&next))?;
    fs::rename(&next, &file).map_err(Error::at(&file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, Serialize)]
    struct Kept {
        port: u16,
        slot: Option<String>,
    }

    #[test]
    fn a_state_is_read_back_as_it_was_written_and_none_is_none() {
        let dir = crate::process::TempDir::new("state").unwrap();
        assert_eq!(read::<Kept>(dir.path()).unwrap(), None);
        let kept = Kept {
            port: 5432,
            slot: Some("s".into()),
        };
        write_any(dir.path(), &kept).unwrap();
        assert_eq!(read::<Kept>(dir.path()).unwrap(), Some(kept));
        fs::write(dir.path().join(FILE), "{").unwrap();
        let e = read::<Kept>(dir.path()).unwrap_err().to_string();
        assert!(e.contains(FILE), "{e}");
    }
}
