//! What goes wrong in this crate, said as what it means for the run, and how a signal
//! reaches its waits. The crate knows no exit codes: the application maps a [`Kind`]
//! to its own (its `kafka` adapter).

use std::fmt;

/// What a failure means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The settings are wrong (brokers refuse the TLS handshake or the credentials, a
    /// topic is missing or has another partition count): retrying will not help.
    Config,
    /// The brokers cannot be reached.
    Unavailable,
    /// Transient: the next run may succeed.
    Temporary,
    /// A signal (its number) ended a wait.
    Interrupted(i32),
    /// Nothing the operator can fix (a thread that cannot start).
    Internal,
}

/// An error of this crate: its [`Kind`] and the message for the operator.
///
/// Deliberately no `std::error::Error`: `?` cannot turn it into an unclassified
/// `anyhow::Error`, so every caller goes through the application's mapping of its
/// kind to an exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
}

impl Error {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whether a signal asked the run to stop: the producer's waits ask it and end early.
/// The application's shutdown handle answers it.
pub trait Stop: Send + Sync {
    /// The signal received, if any (2 = SIGINT, 15 = SIGTERM).
    fn requested(&self) -> Option<i32>;
}

/// No signal ever: a producer nobody is watching.
pub(crate) struct Never;

impl Stop for Never {
    fn requested(&self) -> Option<i32> {
        None
    }
}
