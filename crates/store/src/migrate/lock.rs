//! The migrators' lock: a session advisory lock taken by polling
//! `pg_try_advisory_lock` every 500 ms, each try a statement of its own outside any
//! transaction. Never a blocking `pg_advisory_lock`: a waiter blocked inside a
//! statement holds a snapshot, and the holder's concurrent index build waits for
//! every older snapshot to go, so the two would wait for each other.

use std::time::{Duration, Instant};

use crate::error::Result;
use log::info;
use postgres::Client;

use crate::error::{Context, Fault, StoreError};

/// The advisory lock key of the migrators (ASCII "bkexmigr").
pub const MIGRATE_LOCK: i64 = 0x626b_6578_6d69_6772;

/// How often the lock is tried while another migrator holds it.
const POLL: Duration = Duration::from_millis(500);

/// How often the wait is logged again while it lasts.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Takes the migrators' lock, waiting at most `wait` for another migrator to let it
/// go (then [`StoreError::MigratorsLockBusy`]). The wait is logged with the holder's PID.
#[allow(
    clippy::disallowed_methods,
    reason = "the migrators' lock is polled in real time, every POLL, bounded by its wait"
)]
pub(crate) fn take(client: &mut Client, wait: Duration, stopped: &dyn Fn() -> bool) -> Result<()> {
    let started = Instant::now();
    let mut logged: Option<(Instant, Option<i32>)> = None;
    loop {
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&MIGRATE_LOCK])
            .classify(Fault::Temporary, "cannot take the migrators' advisory lock")?
            .get(0);
        if locked {
            if logged.is_some() {
                info!(ElapsedMs = started.elapsed().as_millis() as u64;
                      "migrate: took the migrators' lock");
            }
            return Ok(());
        }
        let holder = holder(client)?;
        if started.elapsed() >= wait {
            return Err(StoreError::MigratorsLockBusy { holder, wait });
        }
        let again = logged.is_none_or(|(at, pid)| at.elapsed() >= LOG_EVERY || pid != holder);
        if again {
            info!(Pid = holder.unwrap_or_default(), ElapsedMs = started.elapsed().as_millis() as u64;
                  "migrate: another migrator holds the migrators' lock; waiting for it");
            logged = Some((Instant::now(), holder));
        }
        if stopped() {
            return Err(super::stopped::stopped_error());
        }
        std::thread::sleep(POLL);
    }
}

/// The PID of the session holding the migrators' lock in this database, if any.
fn holder(client: &mut Client) -> Result<Option<i32>> {
    let row = client
        .query_opt(
            "SELECT pid FROM pg_catalog.pg_locks
              WHERE locktype = 'advisory' AND granted AND objsubid = 1
                AND classid = ($1::int8 >> 32)::oid AND objid = ($1::int8 & 4294967295)::oid
                AND database = (SELECT oid FROM pg_catalog.pg_database
                                 WHERE datname = current_database())
              LIMIT 1",
            &[&MIGRATE_LOCK],
        )
        .classify(
            Fault::Temporary,
            "cannot read who holds the migrators' lock",
        )?;
    Ok(row.map(|r| r.get(0)))
}

/// Lets the lock go (it goes with the session anyway).
pub(crate) fn release(client: &mut Client) {
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK]);
}
