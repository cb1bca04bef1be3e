//! The testbed's one error type: what went wrong, by kind, each with the message the
//! scripts and the tests read (the `testbed` binary prints it after `testbed: `).

use std::fmt::Display;
use std::io;
use std::path::Path;

/// Why a service could not be set up, started, found or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command line or an environment variable the testbed refuses.
    #[error("{0}")]
    Usage(String),
    /// A file or a directory that could not be read, written or made: its path (or
    /// what was done to it), and the system's word.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The system's own error, whose message names what failed.
    #[error(transparent)]
    Os(#[from] io::Error),
    /// A tool the testbed runs (initdb, psql, pg_ctl, openssl, kill, the Kafka scripts)
    /// that could not run or failed: its status and output.
    #[error("{0}")]
    Tool(String),
    /// A server that did not start or did not stop: its command and its log's tail.
    #[error("{0}")]
    Server(String),
    /// A set-up or a STATE_DIR the testbed does not serve: what is wrong with it.
    #[error("{0}")]
    Refused(String),
}

/// The testbed's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failure of the file or directory `path`, for `map_err`.
    pub fn at(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::Io {
            what: path.display().to_string(),
            source,
        }
    }

    /// A failure of `what` was done, for `map_err`.
    pub fn doing(what: impl Display) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io {
            what: what.to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_s_error_names_it_first() {
        let e = Error::at(Path::new("/x/y"))(io::Error::other("gone"));
        assert_eq!(e.to_string(), "/x/y: gone");
        let e = Error::doing("cannot create /x")(io::Error::other("no"));
        assert_eq!(e.to_string(), "cannot create /x: no");
        assert_eq!(Error::Refused("no".into()).to_string(), "no");
    }
}
