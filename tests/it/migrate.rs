//! `booking-expire migrate` against a real PostgreSQL: two migrators at once leave one
//! history; a database migrated the old way (0.1.0's files replayed, no history) is
//! adopted and nothing runs again; an edited shipped file is refused naming it; status
//! and --dry-run change nothing; an INVALID index is dropped and built again; a
//! statement that cannot get its lock gives it up, so that the CRM's writes never
//! queue behind it, and is tried again until the lock is free.
//!
//! 0.1.0's files are copied in `fixtures/sql-0.1.0/` (from commit df0f67f), so the
//! old way stays the old way whatever sql/ becomes.
//!
//! Here: the helpers the files below share; `locks_and_retries` holds two migrators at
//! once and the lock a statement gives up and waits for again, `indexes` the INVALID
//! indexes of a failed build, `adoption` the databases migrated the old way, and
//! `recorded` the databases with a history (an edited file, status and --dry-run, what
//! changed since a file ran).

use crate::common;
use crate::postgres;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use booking_expire_store::migrate::{MIGRATIONS, Policy, checksum};
use booking_expire_store::testing::migrate::{BASELINE, run_one};
use common::*;
use postgres::Client;
use serde_json::Value;

mod adoption;
mod indexes;
mod locks_and_retries;
mod recorded;

/// The result line of a `migrate` that exited 0.
fn result_of(run: &Run) -> Value {
    assert_eq!(run.code, 0, "migrate failed:\n{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {:?}", run.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

fn all_files() -> Vec<String> {
    MIGRATIONS.iter().map(|m| m.file.to_owned()).collect()
}

/// The history: (version, name, checksum, adopted, duration_ms).
fn history(c: &mut Client) -> Vec<(i32, String, String, bool, i64)> {
    c.query(
        "SELECT version, name, checksum, adopted, duration_ms
           FROM crm.booking_expiration_migrations ORDER BY version",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// 0.1.0's files up to `last`, applied as the old harness and script did: each file
/// whole, one `batch_execute`. The guard it returns keeps the other tests' old ways
/// waiting while the caller holds it: 0.1.0's 010 grants the read-only role
/// `pg_read_all_stats` (a cluster-wide membership, which its 011 revokes), and a
/// `migrate` adopting 011 meanwhile would find the membership there and run 011.
fn migrate_the_old_way(c: &mut Client, last: i32) -> std::sync::MutexGuard<'static, ()> {
    // The files create the job's group roles, which are the cluster's, in DO blocks
    // that look first: two databases migrated at once race there ("role … does not
    // exist"), as two old scripts would. So the roles are made first, by the suite's
    // template (migrated once per run), and one database is migrated at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    drop(TestDb::new());
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = crate::common::repo().join("tests/it/fixtures/sql-0.1.0");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 12);
    for file in files.iter().take(last as usize) {
        let sql = std::fs::read_to_string(file).unwrap();
        // The roles and their grants are cluster-wide: another database migrating at the
        // same moment may collide with this one (a deadlock, a catalog tuple updated
        // concurrently); the files are idempotent, so the file is applied again, as the
        // old script's operator did.
        let mut tries = 0;
        while let Err(e) = c.batch_execute(&sql) {
            tries += 1;
            let transient = e
                .code()
                .is_some_and(|code| ["40P01", "40001", "XX000"].contains(&code.code()));
            assert!(transient && tries < 5, "{}: {e:?}", file.display());
            eprintln!("{}: applied again after {e:?}", file.display());
        }
    }
    one
}

/// (valid, oid) of the index `crm.name`.
fn index(c: &mut Client, name: &str) -> Option<(bool, u32)> {
    c.query_opt(
        "SELECT i.indisvalid, i.indexrelid FROM pg_index i
          WHERE i.indexrelid = to_regclass($1)",
        &[&format!("crm.{name}")],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

/// Whether the runner's history table exists.
fn has_history(c: &mut Client) -> bool {
    c.query_one(
        "SELECT to_regclass('crm.booking_expiration_migrations') IS NOT NULL",
        &[],
    )
    .unwrap()
    .get(0)
}

/// The lines of `stderr` logged at WARN.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(" WARN ")).collect()
}
