//! The commands that write, and so honour a pause switch: each one's name, the switch's,
//! and what the preflight checks of its schema.

use crate::domain::Worker;
use crate::store::SchemaNeed;

/// A command that writes, and so honours a pause switch; its name is the switch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    RunOnce,
    RelayOutbox,
}

impl Writer {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Writer::RunOnce => "run-once",
            Writer::RelayOutbox => "relay-outbox",
        }
    }

    /// Its pause switch and working lock in the store.
    pub(crate) fn worker(self) -> Worker {
        match self {
            Writer::RunOnce => Worker::Cycle,
            Writer::RelayOutbox => Worker::Relay,
        }
    }

    pub(super) fn need(self) -> SchemaNeed {
        match self {
            Writer::RunOnce => SchemaNeed::Cycle,
            Writer::RelayOutbox => SchemaNeed::Relay,
        }
    }
}
