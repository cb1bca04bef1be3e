//! A `--follow` relay whose database session drops (a server restart, a terminated
//! backend, a failover) opens a new one with a short back-off within its window, takes
//! the relay lock again, listens again, and goes on: rows committed meanwhile reach
//! Kafka within seconds instead of waiting for the next run.

use std::time::{Duration, Instant};

use crate::clock::Ambient;

use anyhow::Result;
use log::{info, warn};

use crate::config::RelayConfig;
use crate::exit::{Classified, Failure};
use crate::store::{self, Db};

/// The first pause before reopening; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Whether `e` says the session itself is gone (closed, I/O, the server shutting down
/// or terminating it: SQLSTATE 57P01..57P03, 57P05 idle_session_timeout, class 08), not that a statement failed.
pub(super) fn session_lost(e: &anyhow::Error) -> bool {
    crate::exit::store_error(e).is_some_and(store::StoreError::session_lost)
}

/// Lets go of the relay lock on the old main session when it is still open (it was the
/// mark session that dropped): the new session would otherwise find the lock held, by
/// this very relay, and end as if another had taken over.
pub(super) fn release(old: &mut Db) {
    if !old.client.is_closed() {
        let _ = crate::store::release_advisory_locks(&mut old.client);
    }
}

/// What came of reopening the session.
pub(super) enum Reopened {
    /// A new session, locked and listening: the relay goes on on it.
    Session(Box<Db>),
    /// Another relay took the lock meanwhile: this one ends, its work done by that one.
    TakenOver,
}

/// Reopens the relay's session after `cause`, trying with a growing pause while the
/// run's window (`started` + `--follow`) lasts. Fails with `cause` (75) when the window
/// ends first, or at once with an error retrying cannot mend (configuration, 78).
#[allow(
    clippy::disallowed_methods,
    reason = "the reconnect's real-time back-off, within the --follow window"
)]
pub(super) fn reopen(
    cfg: &RelayConfig,
    ambient: Ambient,
    started: Instant,
    cause: anyhow::Error,
) -> Result<Reopened> {
    let monotonic = ambient.monotonic;
    let dropped = monotonic.now();
    let run_for = cfg.run_for();
    let mut pause = FIRST_PAUSE;
    let mut last: Option<anyhow::Error> = None;
    loop {
        if let Some(signal) = ambient.shutdown.requested() {
            return Err(cause.context(Classified {
                failure: Failure::Interrupted(signal),
                message: format!("interrupted by signal {signal} while reconnecting"),
            }));
        }
        if monotonic.since(started).saturating_add(pause) >= run_for {
            let detail = last
                .map(|e| format!("; last attempt: {}", crate::exit::message(&e)))
                .unwrap_or_default();
            return Err(cause.context(Classified {
                failure: Failure::Temporary,
                message: format!(
                    "relay-outbox: the database session dropped and could not be reopened \
                     within the --follow window{detail}; the next run goes on"
                ),
            }));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
        match open(cfg) {
            Ok(Some(db)) => {
                warn!(Cause:% = format!("{cause:#}"),
                      ReconnectedAfterMs = monotonic.since(dropped).as_millis() as u64;
                      "the relay's database session dropped; reconnected, going on");
                return Ok(Reopened::Session(Box::new(db)));
            }
            Ok(None) => {
                info!(Cause:% = format!("{cause:#}");
                      "the relay's database session dropped and another relay took the outbox \
                       lock meanwhile; this one ends");
                return Ok(Reopened::TakenOver);
            }
            Err(e) if retryable(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
}

/// A new session as the relay's start makes it (writable, locked, listening); `None`
/// when another relay holds the lock.
fn open(cfg: &RelayConfig) -> Result<Option<Db>> {
    let mut db = store::connect(&cfg.db)?;
    db.require_writable(&cfg.db, "relay-outbox")?;
    if !store::try_relay_lock(&mut db.client)? {
        return Ok(None);
    }
    store::listen(&mut db.client)?;
    Ok(Some(db))
}

/// The server is still down or not yet writable (a failover under way): worth another
/// try within the window.
fn retryable(e: &anyhow::Error) -> bool {
    matches!(
        crate::exit::failure_of(e),
        Failure::Unavailable | Failure::Temporary
    )
}
