//! Opening a session: TLS per `sslmode`, timeouts, and a clear classification of why a
//! connection failed (unreachable: [`Fault::Unavailable`]; refused credentials or TLS:
//! [`Fault::Config`]).

use crate::error::Result;
use postgres::Client;

use super::session::Session;
use super::tls::{LazyTls, tls_connector};
use crate::error::{Context, Fault, NotWritable, StoreError, fail};
use crate::settings::{DbConfig, SslMode};

/// An open session and what is needed to interrupt its statement in flight.
pub struct Db {
    pub client: Session,
    pub tls: LazyTls,
    /// Whether the session may write, as read when it was opened.
    pub writable: Writable,
}

/// What the server said about writing when the session was opened (read in the same
/// round trip as the session settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writable {
    /// `transaction_read_only`: on for a standby, and for a primary made read-only
    /// (`default_transaction_read_only`, as a demoted primary is during a failover).
    pub read_only: bool,
    /// `pg_is_in_recovery()`: the server is a standby (or still recovering).
    pub in_recovery: bool,
    /// The server's address and port as the session sees them; `None` over a unix socket.
    pub server: Option<String>,
}

impl Db {
    /// A closure that cancels the statement in flight on this session, if any.
    pub fn interrupter(&self) -> impl Fn() + Send + 'static {
        let token = self.client.pg_ref().cancel_token();
        let tls = self.tls.clone();
        move || {
            if let Err(e) = token.cancel_query(tls.clone()) {
                log::warn!(Error:% = e; "could not send the cancel request");
            }
        }
    }

    /// Fails (a temporary fault) with one line when this session cannot write: `command`
    /// writes, and must not start work (or send a row it could not then mark) on a
    /// standby or a read-only primary. The next run, pointed at the primary, retries.
    pub fn require_writable(&self, cfg: &DbConfig, command: &str) -> Result<()> {
        let w = &self.writable;
        if !w.read_only && !w.in_recovery {
            return Ok(());
        }
        let server = match &w.server {
            Some(server) => format!("the server at {server}"),
            None => format!("the server of {}", targets(cfg).join(", ")),
        };
        let what = if w.in_recovery {
            "is a standby in recovery (pg_is_in_recovery() is true)"
        } else {
            "is read-only (transaction_read_only is on: default_transaction_read_only set \
             on the server, database or role, as on a demoted primary during a failover)"
        };
        Err(StoreError::NotWritable(NotWritable {
            found: format!("{command} writes, but {server} {what}"),
            listed: false,
        }))
    }
}

/// The session settings the job relies on, set on every session it opens, and whether
/// the session can write, in one round trip. Limits: a statement or a lock wait never
/// eats the whole cycle, a transaction left idle by a stuck client never keeps rows
/// locked for long; `idle_session_timeout` (PostgreSQL 14+) is off, since a `--follow`
/// relay idles between notifications; times are read and written in UTC; read
/// committed whatever the database's default, since the claim's SKIP LOCKED and the
/// guarded write are built for it (under serializable a manager's edit of another
/// booking failed whole batches with 40001). Any other
/// setting the role or database sets is left as it is (docs/reference/database.md).
fn session_setup(cfg: &DbConfig) -> String {
    format!(
        "SET statement_timeout = {}; SET lock_timeout = {}; \
         SET idle_in_transaction_session_timeout = {}; SET TIME ZONE 'UTC'; \
         SET default_transaction_isolation = 'read committed'; \
         SELECT CASE WHEN current_setting('server_version_num')::int >= 140000 \
                     THEN set_config('idle_session_timeout', '0', false) END, \
                current_setting('transaction_read_only') AS read_only, \
                pg_is_in_recovery()::text AS in_recovery, \
                host(inet_server_addr()) AS addr, inet_server_port()::text AS port",
        cfg.statement_timeout.as_millis(),
        cfg.lock_timeout.as_millis(),
        (cfg.statement_timeout * 3).as_millis(),
    )
}

/// A command's first session. A refusal for too many connections (53300) is tried
/// again for a moment: a role or server at its connection limit frees the slot of a
/// session that just ended a little after its client left (the run before, a report
/// an operator just ran).
pub fn connect(cfg: &DbConfig) -> Result<Db> {
    open(cfg, FULL_SLOTS_PATIENCE)
}

/// A further session beside the first (the pooler check, the side-by-side catch-up,
/// the relay's marks): refused at once for too many connections, so that the caller
/// can make do with one session or say how many it needs.
pub fn connect_another(cfg: &DbConfig) -> Result<Db> {
    open(cfg, std::time::Duration::ZERO)
}

/// How many times a session's setup is tried when a timeout of the role's cancels it.
const SETUP_ATTEMPTS: u32 = 3;

/// How long `connect` tries again while the connection slots are full.
const FULL_SLOTS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

fn open(cfg: &DbConfig, patience: std::time::Duration) -> Result<Db> {
    let (client, tls) = handshake(cfg, patience)?;
    set_up(cfg, client, tls)
}

/// A further session like [`connect_another`]'s whose connection (the server's new
/// backend, authentication) is made on a thread of its own beside the caller's work,
/// and whose first statement, the session setup, is sent only by [`Opening::finish`].
/// Behind a transaction pooler no server session is tied to a client before its first
/// statement, so the caller still decides when this session first takes one.
pub struct Opening(std::sync::mpsc::Receiver<Result<(Client, LazyTls)>>);

/// Starts opening a further session from `cfg` (see [`Opening`]).
pub fn open_another(cfg: &DbConfig) -> Opening {
    let (done, opened) = std::sync::mpsc::channel();
    let cfg = cfg.clone();
    let spawned = std::thread::Builder::new()
        .name("open-another".into())
        .spawn({
            let done = done.clone();
            move || {
                let _ = done.send(handshake(&cfg, std::time::Duration::ZERO));
            }
        });
    if let Err(e) = spawned {
        let _ = done.send(
            Err::<(Client, LazyTls), _>(e)
                .classify(Fault::Temporary, "cannot start the connecting thread"),
        );
    }
    Opening(opened)
}

impl Opening {
    /// The session, once its connection is made, with its setup run now.
    pub fn finish(self, cfg: &DbConfig) -> Result<Db> {
        let (client, tls) = self.0.recv().map_err(|_| {
            fail(
                Fault::Temporary,
                "the connecting thread ended without a word",
            )
        })??;
        set_up(cfg, client, tls)
    }
}

/// A connection from `cfg`, tried again while the server's connection slots are full
/// for up to `patience`; no statement sent yet.
#[allow(
    clippy::disallowed_methods,
    reason = "a short real-time back-off while the server's connection slots are full"
)]
fn handshake(cfg: &DbConfig, patience: std::time::Duration) -> Result<(Client, LazyTls)> {
    let tls = tls_connector(cfg)?;
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(25);
    let client = loop {
        match connect_within(cfg, tls.clone()) {
            Err(e) if e.too_many_connections() && started.elapsed() + pause <= patience => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(400));
            }
            other => break other?,
        }
    };
    Ok((client, tls))
}

/// Runs the session setup (timeouts, application name, what the server is) on a new
/// connection.
fn set_up(cfg: &DbConfig, mut client: Client, tls: LazyTls) -> Result<Db> {
    // The setup itself runs under the role's or database's own timeouts until its
    // first SET: with one of a few milliseconds, a timer firing between two of its
    // statements cancels it (57014, "due to user request"). It is all SETs and reads,
    // rolled back whole on an error: tried again, a few times.
    let mut attempts = 0;
    let replies = loop {
        attempts += 1;
        match client.simple_query(&session_setup(cfg)) {
            Err(e) if attempts < SETUP_ATTEMPTS && crate::sqlstate::query_canceled(&e) => {}
            other => {
                break other.classify(Fault::Temporary, "cannot set the session's timeouts")?;
            }
        }
    };
    let writable = replies
        .iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(Writable {
                read_only: row.get("read_only") == Some("on"),
                in_recovery: row.get("in_recovery") == Some("true"),
                server: row.get("addr").map(|addr| {
                    let port = row.get("port").unwrap_or("5432");
                    if addr.contains(':') {
                        format!("[{addr}]:{port}")
                    } else {
                        format!("{addr}:{port}")
                    }
                }),
            }),
            _ => None,
        })
        .ok_or_else(|| {
            fail(
                Fault::Temporary,
                "cannot set the session's timeouts: the server returned no row",
            )
        })?;
    Ok(Db {
        client: Session::new(client),
        tls,
        writable,
    })
}

/// Why a connection could not be opened. A refused login or an unknown database is
/// configuration, another server error means it is unavailable. Without a
/// server error, the type of the cause decides: an I/O error or a closed connection is
/// the network (unavailable); a failed TLS handshake, a server without TLS under a
/// verifying `sslmode`, or a missing password is configuration. The password is never part
/// of the message.
fn connect_failure(cfg: &DbConfig, e: postgres::Error) -> StoreError {
    let context = cannot_connect(cfg);
    if refused_for_read_only(&e) {
        return StoreError::NotWritable(NotWritable {
            found: format!(
                "{context}: none of them accepts writes (target_session_attrs=read-write, and \
                 each is a standby or read-only, as servers are during a failover)"
            ),
            listed: true,
        });
    }
    if let Some(class) = crate::sqlstate::class(&e) {
        let failure = match class {
            crate::sqlstate::Class::Deployment => Fault::Config,
            _ => Fault::Unavailable,
        };
        return Err::<(), _>(e).classify(failure, context).unwrap_err();
    }
    let io = has_io_error(&e);
    if let Some(tls) = find_in_chain::<native_tls::Error>(&e).filter(|_| !io) {
        // One flat line: native-tls repeats the OpenSSL error in its sources.
        return fail(
            Fault::Config,
            format!(
                "{context}: TLS handshake failed ({}): {tls}",
                tls_expectation(cfg)
            ),
        );
    }
    let failure = if io || e.is_closed() {
        Fault::Unavailable
    } else {
        Fault::Config
    };
    Err::<(), _>(e).classify(failure, context).unwrap_err()
}

/// Whether the driver refused the last server it tried because, asked for
/// `target_session_attrs=read-write`, the server said `transaction_read_only` is on.
/// Only the last server's error is returned: the others were read-only or unreachable.
fn refused_for_read_only(e: &postgres::Error) -> bool {
    find_in_chain::<std::io::Error>(e).is_some_and(|io| {
        io.kind() == std::io::ErrorKind::PermissionDenied
            && io.to_string() == "database does not allow writes"
    })
}

/// "cannot connect to PostgreSQL at db:5432" (each host tried, with its port; a unix
/// socket by its directory). Never the user or the password.
fn cannot_connect(cfg: &DbConfig) -> String {
    format!(
        "cannot connect to PostgreSQL at {}",
        targets(cfg).join(", ")
    )
}

/// Each host of the URL with its port; a unix socket by its path.
fn targets(cfg: &DbConfig) -> Vec<String> {
    let ports = cfg.conninfo.0.get_ports();
    cfg.conninfo
        .0
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            // libpq: one port for every host, or one per host; 5432 when none.
            let port = match ports {
                [] => 5432,
                [one] => *one,
                many => many.get(i).copied().unwrap_or(5432),
            };
            match host {
                postgres::config::Host::Tcp(name) if name.contains(':') => {
                    format!("[{name}]:{port}")
                }
                postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                postgres::config::Host::Unix(dir) => {
                    format!("{}/.s.PGSQL.{port}", dir.display())
                }
            }
        })
        .collect()
}

/// What the TLS handshake required of the server's certificate, for the error message.
fn tls_expectation(cfg: &DbConfig) -> String {
    let trusted = match &cfg.root_cert {
        Some((path, _)) => format!("the CA in {}", path.display()),
        None => "the system's trusted CAs".to_owned(),
    };
    let hosts: Vec<String> = cfg
        .conninfo
        .0
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    match cfg.ssl_mode {
        SslMode::VerifyFull => format!(
            "sslmode=verify-full: the server certificate must be signed by {trusted} \
             and name the host {}",
            hosts.join(" or ")
        ),
        SslMode::VerifyCa => {
            format!("sslmode=verify-ca: the server certificate must be signed by {trusted}")
        }
        mode if cfg.root_cert.is_some() => format!(
            "sslmode={}: with a CA given, the server certificate must be signed by {trusted}",
            mode_name(mode)
        ),
        mode => format!(
            "sslmode={}: the server certificate is not verified",
            mode_name(mode)
        ),
    }
}

fn mode_name(mode: SslMode) -> &'static str {
    match mode {
        SslMode::Disable => "disable",
        SslMode::Prefer => "prefer",
        SslMode::Require => "require",
        SslMode::VerifyCa => "verify-ca",
        SslMode::VerifyFull => "verify-full",
    }
}

fn find_in_chain<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(e), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

fn has_io_error(e: &(dyn std::error::Error + 'static)) -> bool {
    find_in_chain::<std::io::Error>(e).is_some()
}

/// The connect timeout bounds the whole attempt, startup and TLS exchange included:
/// tokio-postgres applies it to the TCP connect only, so a server that accepts and
/// then never answers would otherwise hang the run past every deadline.
fn connect_within(cfg: &DbConfig, tls: LazyTls) -> Result<Client> {
    let hosts = cfg.conninfo.0.get_hosts().len().max(1) as u32;
    let limit = cfg
        .conninfo
        .0
        .get_connect_timeout()
        .copied()
        .unwrap_or(std::time::Duration::from_secs(5))
        * hosts;
    let (done, result) = std::sync::mpsc::channel();
    let pg = cfg.conninfo.0.clone();
    std::thread::Builder::new()
        .name("connect".into())
        .spawn(move || {
            let _ = done.send(pg.connect(tls));
        })
        .classify(Fault::Temporary, "cannot start the connecting thread")?;
    match result.recv_timeout(limit) {
        Ok(connected) => connected.map_err(|e| connect_failure(cfg, e)),
        Err(_) => Err(StoreError::ConnectTimedOut {
            cannot: cannot_connect(cfg),
            limit,
        }),
    }
}
