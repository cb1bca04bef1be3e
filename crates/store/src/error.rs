//! The store's errors in its own terms: one enum, [`StoreError`], at every boundary of
//! the crate. What a failure means for whoever called it ([`Fault`]: unreachable, worth
//! a retry, or the deployment), the message to show, and what a PostgreSQL error below
//! it says (its SQLSTATE, a lost session, a row's refusal), read here so that nothing
//! above names the driver's types. The kinds the program words itself (what the schema
//! lacks, the migrators' lock, a stopped migration, a server that cannot write, a
//! connection that got no answer, a
//! migration whose check fails, a refused adoption) carry their facts, never a command
//! or a flag of the program's: their own messages say it in plain words. What a [`Fault`] means for the process is the program's.

use std::fmt;
use std::time::Duration;

use super::schema::Lack;
use super::sqlstate::{self, Class, class};

/// A store call's result: its value or a [`StoreError`].
pub(crate) type Result<T, E = StoreError> = std::result::Result<T, E>;

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

/// An error of the store. Its message is its `Display`, each layer's own; the layer
/// below is its `source`, so `{:#}` shows the whole chain as one line, whoever formats
/// it: "what it did: what failed: the server's words".
#[derive(Debug)]
pub enum StoreError {
    /// A PostgreSQL error as the driver returned it: its fault is its SQLSTATE's class.
    Database(postgres::Error),
    /// A failure the store judged itself: what it stands for, and its message.
    Failed { fault: Fault, message: String },
    /// What the store was doing when the error below happened; `fault`, when given,
    /// stands for the whole, whatever the cause.
    Context {
        context: String,
        fault: Option<Fault>,
        source: Box<StoreError>,
    },
    /// An error from outside the database (a thread that cannot start, a CA that does
    /// not parse): no fault of the deployment's or the moment's the store can name.
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The schema, or the role's grants, lack what the work asks for (a configuration
    /// fault): the preflight's finding.
    Lacks(Lack),
    /// Every migration is recorded, but the schema lacks what the work of some need
    /// asks for: a recorded file's objects were changed since it ran (a configuration
    /// fault). Each lack once, in the needs' order.
    RecordedButLacking(Vec<Lack>),
    /// Another migrator (`holder`, its PID when it could be read) held the migrators'
    /// lock for longer than `wait`; nothing was done (a temporary fault).
    MigratorsLockBusy { holder: Option<i32>, wait: Duration },
    /// A migration's statement gave up waiting for its lock, every try; nothing after
    /// it ran (a temporary fault).
    StatementLockGivenUp(Box<LockGivenUp>),
    /// A signal stopped a migration run while it waited for the lock or between
    /// statements; what committed stays (a temporary fault).
    MigrationStopped,
    /// The session, or every server of the URL, cannot write where the work writes;
    /// nothing was done (a temporary fault: a failover in progress ends with a writable
    /// primary).
    NotWritable(NotWritable),
    /// No answer from PostgreSQL within `limit` (the connect timeout, for each host of
    /// the URL); `cannot` says where it tried (unavailable).
    ConnectTimedOut { cannot: String, limit: Duration },
    /// Migration `file` ran, but what it is for does not hold (`what`); it is recorded
    /// as partial and nothing after it ran; `fix` is what a superuser must do (a
    /// configuration fault).
    MigrationCheckFailed {
        file: &'static str,
        what: String,
        fix: String,
    },
    /// Baseline files that can be neither adopted nor run (`refused`), and the files
    /// that would then run again and why (`reruns`); nothing was done (a configuration
    /// fault).
    AdoptionRefused {
        refused: Vec<String>,
        reruns: Vec<String>,
    },
}

/// A migration's statement that gave up waiting for its lock: `statement` ("k/n") of
/// `file`, its `first_line`, the `lock` it waited for, `lock_timeout` each try, in
/// `attempts` tries over `retry_for`.
#[derive(Debug)]
pub struct LockGivenUp {
    pub file: &'static str,
    pub statement: String,
    pub first_line: String,
    pub lock_timeout: Duration,
    pub attempts: u32,
    pub retry_for: Duration,
    pub lock: String,
}

/// Servers that cannot write: `found` says which and why (the command that writes, as
/// the caller named it, and "the server at db:5432 is a standby…"); `listed` when the
/// URL already lists several servers with `target_session_attrs=read-write`, none of
/// them writable.
#[derive(Debug)]
pub struct NotWritable {
    pub found: String,
    pub listed: bool,
}

impl NotWritable {
    /// What else than pointing the URL at the primary would do.
    pub fn otherwise(&self) -> &'static str {
        if self.listed {
            "or add it to the URL's hosts \
             (postgres://USER@primary:5432,standby:5432/DB?target_session_attrs=read-write)"
        } else {
            "or list every server with target_session_attrs=read-write \
             (postgres://USER@primary:5432,standby:5432/DB?target_session_attrs=read-write) so \
             that the primary is picked"
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The driver's error and an outside one speak for themselves (their own
            // sources follow as this one's).
            StoreError::Database(e) => write!(f, "{e}")?,
            StoreError::Other(e) => write!(f, "{e}")?,
            StoreError::Failed { message, .. } => f.write_str(message)?,
            StoreError::Context { context, .. } => f.write_str(context)?,
            StoreError::Lacks(lack) => write!(f, "{lack}")?,
            StoreError::RecordedButLacking(lacks) => write!(
                f,
                "every migration is recorded, but the schema lacks what the work needs: {}",
                lacks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )?,
            StoreError::MigratorsLockBusy { holder, wait } => write!(
                f,
                "another migrator ({}) held the migrators' advisory lock for longer than \
                 {}; nothing was done",
                holder.map_or("PID unknown".to_owned(), |p| format!("PID {p}")),
                crate::duration::show_duration(*wait)
            )?,
            StoreError::StatementLockGivenUp(given_up) => {
                let LockGivenUp {
                    file,
                    statement,
                    first_line,
                    lock_timeout,
                    attempts,
                    retry_for,
                    lock,
                } = given_up.as_ref();
                write!(
                    f,
                    "migration {file} statement {statement} ({first_line}) could not get its \
                     lock within {} in {attempts} tries over {}: it waited for {lock}; nothing \
                     after it ran, the next run tries again",
                    crate::duration::show_duration(*lock_timeout),
                    crate::duration::show_duration(*retry_for)
                )?
            }
            StoreError::MigrationStopped => f.write_str(
                "stopped by a signal; what committed stays, the next run goes on from there",
            )?,
            StoreError::NotWritable(w) => write!(
                f,
                "{}; nothing was done: point the database URL at the primary, {}",
                w.found,
                w.otherwise()
            )?,
            StoreError::ConnectTimedOut { cannot, limit } => {
                write!(f, "{cannot}: no answer within {}ms", limit.as_millis())?
            }
            StoreError::MigrationCheckFailed { file, what, fix } => write!(
                f,
                "migration {file} ran but did not do what it is for: {what}; it is recorded as \
                 not done (partial), nothing after it ran. {fix}; then run the migrations again"
            )?,
            StoreError::AdoptionRefused { refused, reruns } => {
                write!(
                    f,
                    "cannot adopt what the old script made, nor run the files again: {}; \
                     nothing was done (not even the history table). Put each back as its file \
                     in sql/ makes it (docs/guides/upgrading.md, \"Adoption\"), then run the \
                     migrations again",
                    refused.join("; ")
                )?;
                if !reruns.is_empty() {
                    write!(
                        f,
                        ", which then also runs again what differs in a way running puts back: {}",
                        reruns.join("; ")
                    )?;
                }
            }
        }
        if f.alternate() {
            let mut below = std::error::Error::source(self);
            while let Some(e) = below {
                write!(f, ": {e}")?;
                below = e.source();
            }
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Database(e) => e.source(),
            StoreError::Other(e) => e.source(),
            StoreError::Context { source, .. } => Some(source.as_ref()),
            StoreError::Failed { .. }
            | StoreError::Lacks(_)
            | StoreError::RecordedButLacking(_)
            | StoreError::MigratorsLockBusy { .. }
            | StoreError::StatementLockGivenUp(_)
            | StoreError::MigrationStopped
            | StoreError::NotWritable(_)
            | StoreError::ConnectTimedOut { .. }
            | StoreError::MigrationCheckFailed { .. }
            | StoreError::AdoptionRefused { .. } => None,
        }
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        StoreError::Database(e)
    }
}

impl StoreError {
    /// This error, with `context` said of it.
    pub fn context(self, context: impl Into<String>) -> StoreError {
        StoreError::Context {
            context: context.into(),
            fault: None,
            source: Box::new(self),
        }
    }

    /// What the error stands for: the outermost explicit fault, else the fault of the
    /// PostgreSQL error below it; `None` when neither says (a bug, or an error from
    /// outside the database).
    pub fn fault(&self) -> Option<Fault> {
        match self {
            StoreError::Database(e) => Some(fault_of(e)),
            StoreError::Failed { fault, .. } => Some(*fault),
            StoreError::Context {
                fault: Some(fault), ..
            } => Some(*fault),
            StoreError::Context { source, .. } => source.fault(),
            StoreError::Other(_) => None,
            StoreError::Lacks(_)
            | StoreError::RecordedButLacking(_)
            | StoreError::MigrationCheckFailed { .. }
            | StoreError::AdoptionRefused { .. } => Some(Fault::Config),
            StoreError::ConnectTimedOut { .. } => Some(Fault::Unavailable),
            StoreError::MigratorsLockBusy { .. }
            | StoreError::StatementLockGivenUp(_)
            | StoreError::MigrationStopped
            | StoreError::NotWritable(_) => Some(Fault::Temporary),
        }
    }

    /// The PostgreSQL error at the root of this one, if any.
    fn database(&self) -> Option<&postgres::Error> {
        match self {
            StoreError::Database(e) => Some(e),
            StoreError::Context { source, .. } => source.database(),
            _ => None,
        }
    }

    /// The SQLSTATE of the PostgreSQL error below, when the server sent one (the
    /// program compares it with the constants of [`crate::sqlstate`]).
    pub fn sqlstate(&self) -> Option<&str> {
        self.database().and_then(sqlstate::code)
    }

    /// The server's refusal (its SQLSTATE and message) of the PostgreSQL error below,
    /// when the server sent one.
    pub fn refusal(&self) -> Option<DbRejection> {
        DbRejection::of(self.database()?)
    }

    /// Whether the session itself is gone (closed, I/O, the server shutting down or
    /// terminating it: SQLSTATE 57P01..57P03, 57P05 idle_session_timeout, class 08), not
    /// that a statement failed.
    pub fn session_lost(&self) -> bool {
        let Some(pe) = self.database() else {
            return false;
        };
        if pe.is_closed() {
            return true;
        }
        match sqlstate::code(pe) {
            Some(code) => sqlstate::session_ended(code),
            None => std::iter::successors(
                std::error::Error::source(pe),
                |s: &&(dyn std::error::Error + 'static)| s.source(),
            )
            .any(|s| s.is::<std::io::Error>()),
        }
    }

    /// Whether a connection was refused for too many connections (SQLSTATE 53300: the
    /// role's `CONNECTION LIMIT`, the database's, or `max_connections`).
    pub fn too_many_connections(&self) -> bool {
        self.database().is_some_and(sqlstate::too_many_connections)
    }
}

/// Errors from outside the database the store passes on: a thread that cannot start,
/// a CA certificate that does not parse, an id that is no uuid.
macro_rules! other_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Other(Box::new(e))
            }
        }
    )*};
}

other_errors!(std::io::Error, native_tls::Error, uuid::Error);

/// A new error of the given kind.
pub(crate) fn fail(fault: Fault, message: impl Into<String>) -> StoreError {
    StoreError::Failed {
        fault,
        message: message.into(),
    }
}

/// What the store says of an error it passes on: `context` (what it was doing), or
/// `classify` (a message that also fixes the fault, whatever the cause below it).
pub(crate) trait Context<T> {
    fn context(self, context: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, context: impl FnOnce() -> S) -> Result<T>;
    fn classify(self, fault: Fault, message: impl Into<String>) -> Result<T>;
}

impl<T, E> Context<T> for std::result::Result<T, E>
where
    E: Into<StoreError>,
{
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| e.into().context(context))
    }

    fn with_context<S: Into<String>>(self, context: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| e.into().context(context()))
    }

    fn classify(self, fault: Fault, message: impl Into<String>) -> Result<T> {
        self.map_err(|e| StoreError::Context {
            context: message.into(),
            fault: Some(fault),
            source: Box::new(e.into()),
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
            sqlstate: sqlstate::code_of(e).to_owned(),
            message: db.message().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outermost_fault_wins_and_the_chain_keeps_each_message() {
        let below: Result<()> = Err(fail(Fault::Unavailable, "io"));
        let e = below.classify(Fault::Config, "store").unwrap_err();
        assert_eq!(e.fault(), Some(Fault::Config));
        assert_eq!(e.to_string(), "store");
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("io"));
        let e = e.context("what it did");
        assert_eq!(e.fault(), Some(Fault::Config));
        assert_eq!(format!("{e}"), "what it did");
        assert_eq!(format!("{e:#}"), "what it did: store: io");
        let other = StoreError::Other("a thread".into()).context("cannot start");
        assert_eq!(format!("{other:#}"), "cannot start: a thread");
        assert_eq!(other.fault(), None);
        assert_eq!(other.sqlstate(), None);
        assert!(!other.session_lost());
    }

    #[test]
    fn the_findings_the_program_words_say_their_facts_in_plain_words() {
        let timed_out = StoreError::ConnectTimedOut {
            cannot: "cannot connect to PostgreSQL at db:5432".to_owned(),
            limit: Duration::from_secs(2),
        };
        assert_eq!(
            timed_out.to_string(),
            "cannot connect to PostgreSQL at db:5432: no answer within 2000ms"
        );
        assert_eq!(timed_out.fault(), Some(Fault::Unavailable));
        let refused = StoreError::AdoptionRefused {
            refused: vec!["a".to_owned()],
            reruns: vec![],
        };
        assert!(
            refused
                .to_string()
                .ends_with("then run the migrations again")
        );
        assert_eq!(refused.fault(), Some(Fault::Config));
    }
}
