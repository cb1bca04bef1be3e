//! The store's errors in its own terms: what a failure means for whoever called it
//! ([`Fault`]: unreachable, worth a retry, or the deployment), with the message to
//! show; and what a PostgreSQL error in an error chain says (its SQLSTATE, a lost
//! session, a row's refusal), read here so that nothing above names the driver's
//! types. The program turns a [`Fault`] into its exit code (`exit.rs`).

use std::fmt;

use super::sqlstate::{Class, class};

/// What a failed store call means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// PostgreSQL cannot be reached.
    Unavailable,
    /// A transient failure: nothing was done that the next run does not redo.
    Temporary,
    /// The configuration, the schema or the privileges are wrong; a retry will not help.
    Config,
}

/// An error message tagged with the [`Fault`] it stands for; found again anywhere in
/// an `anyhow` context chain.
#[derive(Debug)]
pub struct StoreError {
    pub fault: Fault,
    pub message: String,
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StoreError {}

/// A new error of the given kind.
pub fn fail(fault: Fault, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(StoreError {
        fault,
        message: message.into(),
    })
}

/// Adds a message that also fixes the fault, whatever the cause below it.
pub trait ClassifyExt<T> {
    fn classify(self, fault: Fault, message: impl Into<String>) -> anyhow::Result<T>;
}

impl<T, E> ClassifyExt<T> for Result<T, E>
where
    E: Into<anyhow::Error>,
{
    fn classify(self, fault: Fault, message: impl Into<String>) -> anyhow::Result<T> {
        self.map_err(|e| {
            e.into().context(StoreError {
                fault,
                message: message.into(),
            })
        })
    }
}

/// How a PostgreSQL error met during work (not while connecting) is to be treated.
pub(crate) fn fault_of(e: &postgres::Error) -> Fault {
    match class(e) {
        // The deployment is wrong (missing table/column, insufficient privilege, a
        // feature the server lacks): a retry will not help.
        Some(Class::Deployment | Class::Unsupported) => Fault::Config,
        // I/O, a closed connection, a timeout on the socket, a lock or statement
        // timeout: worth a retry.
        _ => Fault::Temporary,
    }
}

/// The fault of the PostgreSQL error an error stands for, when it is one (the error
/// itself or its root: what `anyhow` finds by type).
pub fn fault_of_any(err: &anyhow::Error) -> Option<Fault> {
    err.downcast_ref::<postgres::Error>().map(fault_of)
}

fn first_database_error(e: &anyhow::Error) -> Option<&postgres::Error> {
    e.chain().find_map(|c| c.downcast_ref::<postgres::Error>())
}

/// The SQLSTATE of the first PostgreSQL error in an `anyhow` chain.
pub fn code_in(e: &anyhow::Error) -> Option<&str> {
    first_database_error(e).and_then(super::sqlstate::code)
}

/// Why the database refused one booking's write: the server's SQLSTATE and message.
#[derive(Debug, Clone, PartialEq)]
pub struct DbRejection {
    pub sqlstate: String,
    pub message: String,
}

impl DbRejection {
    /// The server's refusal a PostgreSQL error carries, when the server sent one.
    pub(crate) fn of(e: &postgres::Error) -> Option<DbRejection> {
        let db = e.as_db_error()?;
        Some(DbRejection {
            sqlstate: super::sqlstate::code_of(e).to_owned(),
            message: db.message().to_owned(),
        })
    }
}

/// The server's refusal (its SQLSTATE and message) of the first PostgreSQL error in an
/// `anyhow` chain, when the server sent one.
pub fn refusal_in(e: &anyhow::Error) -> Option<DbRejection> {
    DbRejection::of(first_database_error(e)?)
}

/// Whether `e` says the session itself is gone (closed, I/O, the server shutting down
/// or terminating it: SQLSTATE 57P01..57P03, 57P05 idle_session_timeout, class 08), not
/// that a statement failed.
pub fn session_lost(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<postgres::Error>())
        .any(|pe| {
            if pe.is_closed() {
                return true;
            }
            match super::sqlstate::code(pe) {
                Some(code) => super::sqlstate::session_ended(code),
                None => std::iter::successors(
                    std::error::Error::source(pe),
                    |s: &&(dyn std::error::Error + 'static)| s.source(),
                )
                .any(|s| s.is::<std::io::Error>()),
            }
        })
}
