//! The two kinds of run that work on the database and can be paused, the expiration
//! cycle and the relay, and the key their pause switch is stored under.

/// A kind of run that works on the database and has a pause switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worker {
    /// The expiration cycle.
    Cycle,
    /// The outbox relay.
    Relay,
}

impl Worker {
    /// Its switch's key in `crm.booking_expiration_pause.command`: a stored value, as
    /// the table's check constraint (`sql/009_operations.sql`) spells it, the name of
    /// the command that runs it.
    pub fn pause_key(self) -> &'static str {
        match self {
            Worker::Cycle => "run-once",
            Worker::Relay => "relay-outbox",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_those_the_pause_table_allows() {
        assert_eq!(Worker::Cycle.pause_key(), "run-once");
        assert_eq!(Worker::Relay.pause_key(), "relay-outbox");
    }
}
