//! `testbed start` and `testbed stop`: servers that outlive the command, each kept in
//! a directory of the caller's, STATE_DIR, that holds its data, its log, its address
//! and its state (`state`: one file; `postgres::state_dir`, `kafka::state_dir`: the
//! rest; `kept`: the one shape of their starts). A start prints
//! the address, starting the server detached (a session of its own, no death signal)
//! and waiting until it accepts connections, or starting a stopped one again with its
//! data on its ports, or only finding a running one; a stop stops whatever STATE_DIR
//! holds (a PostgreSQL server, a broker, a cluster's node or a whole cluster), and
//! leaves the data for a start again. scripts/pg-start.sh, pg-stop.sh, kafka-start.sh
//! and kafka-stop.sh run these.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::kafka::{self, cli::Args};
use crate::postgres::state_dir::{self as postgres, Setup};

pub const USAGE: &str = "usage: testbed start postgres STATE_DIR [--tls DIR] [--standby-of STATE_DIR]
       testbed start kafka STATE_DIR [--nodes 1|3] [--version V] [--port P] [--tls DIR] [--authorizer] [--user NAME:PASSWORD]...
       testbed stop STATE_DIR [--kill]";

/// What to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Postgres { state: PathBuf, setup: Setup },
    Kafka { state: PathBuf, args: Box<Args> },
    Stop { state: PathBuf, kill: bool },
}

/// The arguments of `start` or `stop` (their first); the environment gives Kafka's
/// defaults as `testbed serve kafka` takes them.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Request> {
    let mut rest = args.iter().map(String::as_str);
    let verb = rest.next();
    let usage = |why: String| Error::Usage(format!("{why}\n{USAGE}"));
    match verb {
        Some("start") => {
            let service = rest.next();
            let state = match rest.next() {
                Some(dir) if !dir.starts_with('-') && !dir.is_empty() => PathBuf::from(dir),
                _ => {
                    return Err(usage(
                        "testbed start needs a service and a STATE_DIR".into(),
                    ));
                }
            };
            match service {
                Some("postgres") => {
                    let mut setup = Setup::default();
                    while let Some(flag) = rest.next() {
                        let mut dir = || {
                            rest.next()
                                .filter(|d| !d.is_empty())
                                .map(PathBuf::from)
                                .ok_or_else(|| usage(format!("{flag} needs a directory")))
                        };
                        match flag {
                            "--tls" => setup.tls = Some(dir()?),
                            "--standby-of" => setup.standby_of = Some(dir()?),
                            other => return Err(usage(format!("unknown argument {other:?}"))),
                        }
                    }
                    Ok(Request::Postgres { state, setup })
                }
                Some("kafka") => {
                    let flags: Vec<String> = rest.map(str::to_owned).collect();
                    let args = Args::parse(&flags, env)?;
                    Ok(Request::Kafka {
                        state,
                        args: Box::new(args),
                    })
                }
                Some(other) => Err(usage(format!(
                    "testbed start runs postgres or kafka, not {other:?}"
                ))),
                None => Err(usage("testbed start needs a service".into())),
            }
        }
        Some("stop") => {
            let state = match rest.next() {
                Some(dir) if !dir.starts_with('-') && !dir.is_empty() => PathBuf::from(dir),
                _ => return Err(usage("testbed stop needs a STATE_DIR".into())),
            };
            match (rest.next(), rest.next()) {
                (None, _) => Ok(Request::Stop { state, kill: false }),
                (Some("--kill"), None) => Ok(Request::Stop { state, kill: true }),
                (Some("--kill"), Some(other)) | (Some(other), _) => Err(usage(format!(
                    "testbed stop takes STATE_DIR and --kill only, not {other:?}"
                ))),
            }
        }
        _ => Err(Error::Usage(USAGE.into())),
    }
}

/// Does it: a start's address, to print.
pub fn run(what: Request) -> Result<Option<String>> {
    match what {
        Request::Postgres { state, setup } => postgres::start(&state, &setup).map(Some),
        Request::Kafka { state, args } => kafka::state_dir::start(&state, &args).map(Some),
        Request::Stop { state, kill } => stop(&state, kill).map(|()| None),
    }
}

/// Stops what `state` holds.
fn stop(state: &Path, kill: bool) -> Result<()> {
    if !state.exists() {
        eprintln!(
            "testbed: {} does not exist; nothing to stop",
            state.display()
        );
        Ok(())
    } else if postgres::holds(state) {
        postgres::stop(state, kill)
    } else if kafka::state_dir::holds(state) {
        kafka::state_dir::stop(state, kill)
    } else {
        eprintln!(
            "testbed: {} holds no server of testbed start; nothing to stop",
            state.display()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &str) -> Result<Request> {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        parse(&args, &|_| None)
    }

    #[test]
    fn a_start_names_the_service_and_its_state_dir() {
        assert_eq!(
            parse_line("start postgres /s --tls /c").unwrap(),
            Request::Postgres {
                state: "/s".into(),
                setup: Setup {
                    tls: Some("/c".into()),
                    standby_of: None
                }
            }
        );
        assert_eq!(
            parse_line("start postgres /s --standby-of /p").unwrap(),
            Request::Postgres {
                state: "/s".into(),
                setup: Setup {
                    tls: None,
                    standby_of: Some("/p".into())
                }
            }
        );
        let Ok(Request::Kafka { state, args }) = parse_line("start kafka /k --nodes 3") else {
            panic!("a kafka start")
        };
        assert_eq!((state, args.nodes), (PathBuf::from("/k"), 3));
        assert_eq!(
            parse_line("stop /s --kill").unwrap(),
            Request::Stop {
                state: "/s".into(),
                kill: true
            }
        );
    }

    #[test]
    fn what_is_not_allowed_is_refused_naming_it() {
        let refused = |line: &str, says: &str| {
            let e = parse_line(line).unwrap_err().to_string();
            assert!(e.contains(says), "{line}: {e}");
        };
        refused("start", "needs a service and a STATE_DIR");
        refused("start postgres", "needs a service and a STATE_DIR");
        refused("start postgres --tls /c", "needs a service and a STATE_DIR");
        refused("start mysql /s", "postgres or kafka, not \"mysql\"");
        refused("start postgres /s --tls", "--tls needs a directory");
        refused("start postgres /s --bogus", "unknown argument \"--bogus\"");
        refused("start kafka /k --nodes 2", "1 or 3");
        refused("stop", "needs a STATE_DIR");
        refused("stop /s --now", "not \"--now\"");
        refused("stop /s --kill x", "not \"x\"");
    }
}
