//! Exit codes, sysexits-style, and the one function that maps an error to one.

use std::fmt;
use std::process::ExitCode;

/// What went wrong, in the terms an operator or a CronJob acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A check asked for on the command line did not hold (`backlog --fail-above`) (1).
    Threshold,
    /// Bad command line (64).
    Usage,
    /// A dependency (PostgreSQL, Kafka) cannot be reached (69).
    Unavailable,
    /// A transient failure; the batch was rolled back and the next run retries (75).
    Temporary,
    /// Configuration or schema is wrong; retrying will not help (78).
    Config,
    /// Stopped by a signal after the in-flight batch finished or rolled back
    /// (128 + signal: 130 for SIGINT, 143 for SIGTERM).
    Interrupted(i32),
    /// A bug: an error nothing classified, or a panic (70).
    Internal,
}

impl Failure {
    pub fn code(self) -> u8 {
        match self {
            Failure::Threshold => 1,
            Failure::Usage => 64,
            Failure::Unavailable => 69,
            Failure::Temporary => 75,
            Failure::Config => 78,
            Failure::Interrupted(signal) => (128 + signal).clamp(0, 255) as u8,
            Failure::Internal => 70,
        }
    }
}

/// The exit-code table, shown in `--help` and mirrored in the README.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success (also when poison rows were isolated and quarantined)
  1    backlog --fail-above: the overdue count is above the threshold
  64   usage: a flag or environment variable has a bad value
  69   unavailable: PostgreSQL or Kafka cannot be reached
  70   internal error (a bug; please report it)
  75   temporary failure: the batch was rolled back, the next run retries
  78   configuration: bad URL, credentials, TLS, schema or privileges, clock skew
  130  interrupted by SIGINT after the in-flight batch committed or rolled back
  143  terminated by SIGTERM after the in-flight batch committed or rolled back";

/// An error message tagged with the failure it stands for; found again by
/// [`exit_code`] anywhere in an `anyhow` context chain.
#[derive(Debug)]
pub struct Classified {
    pub failure: Failure,
    pub message: String,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Classified {}

/// A new error of the given kind.
pub fn fail(failure: Failure, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Classified {
        failure,
        message: message.into(),
    })
}

/// Adds a message that also fixes the exit code, whatever the cause below it.
pub trait ClassifyExt<T> {
    fn classify(self, failure: Failure, message: impl Into<String>) -> anyhow::Result<T>;
}

impl<T, E> ClassifyExt<T> for Result<T, E>
where
    E: Into<anyhow::Error>,
{
    fn classify(self, failure: Failure, message: impl Into<String>) -> anyhow::Result<T> {
        self.map_err(|e| {
            e.into().context(Classified {
                failure,
                message: message.into(),
            })
        })
    }
}

/// The exit code for an error: after a signal, whatever the work failed with (our own
/// cancel request, most likely) it is an interruption; otherwise the outermost explicit
/// classification wins, then the kind of a PostgreSQL error, else 70 (a bug).
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    let code = if let Some(signal) = crate::shutdown::requested() {
        Failure::Interrupted(signal).code()
    } else if let Some(c) = err.downcast_ref::<Classified>() {
        c.failure.code()
    } else if let Some(e) = err.downcast_ref::<postgres::Error>() {
        database_failure(e).code()
    } else {
        Failure::Internal.code()
    };
    ExitCode::from(code)
}

/// How a PostgreSQL error met during work (not while connecting) is to be treated,
/// by SQLSTATE class, never by message text.
pub fn database_failure(e: &postgres::Error) -> Failure {
    let Some(db) = e.as_db_error() else {
        // I/O, a closed connection, a timeout on the socket: worth a retry.
        return Failure::Temporary;
    };
    let code = db.code().code();
    match &code[..2] {
        // invalid authorization, invalid catalog name, syntax error or access rule
        // violation (missing table/column, insufficient privilege), feature not
        // supported: the deployment is wrong, a retry will not help.
        "28" | "3D" | "42" | "0A" => Failure::Config,
        _ => Failure::Temporary,
    }
}

/// Makes any panic, on any thread, print one line on stderr (a JSON line when `json`)
/// and end the process with 70, as `--help` documents, instead of Rust's default 101
/// and backtrace hint. An open transaction rolls back when the connection drops.
pub fn install_panic_hook(json: bool) {
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = format!("internal error (a bug; please report it): {what}{at}");
        if json {
            log::error!(error:% = message; "failed");
        } else {
            eprintln!("booking-expire: error: {message}");
        }
        std::process::exit(i32::from(Failure::Internal.code()));
    }));
}
