//! Who holds a table lock that made a report give up (`--lock-timeout`): read from
//! `pg_locks` and `pg_stat_activity` on a session of its own, which needs no privilege
//! (other users' query texts stay hidden and are never read).

use crate::Session;
use crate::error::{Context, Result};

/// A session holding a lock on a table of the `crm` schema that blocks readers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLockHolder {
    pub pid: i32,
    pub user: Option<String>,
    pub application: Option<String>,
    pub mode: String,
    pub table: String,
    /// Seconds its transaction has been open, when the server shows it.
    pub transaction_secs: Option<i64>,
}

/// How many holders a message names at most.
const SHOWN: i64 = 3;

/// The sessions holding `ACCESS EXCLUSIVE` (the one lock a plain SELECT waits for) on a
/// table of `crm` in this database, longest-held first, at most `SHOWN`.
pub fn table_lock_holders(client: &mut Session) -> Result<Vec<TableLockHolder>> {
    let client = client.pg();
    let rows = client
        .query(
            "SELECT l.pid, a.usename::text, a.application_name, l.mode,
                    format('%I.%I', n.nspname, c.relname),
                    extract(epoch FROM now() - a.xact_start)::int8
               FROM pg_locks l
               JOIN pg_class c ON c.oid = l.relation
               JOIN pg_namespace n ON n.oid = c.relnamespace
               LEFT JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.granted AND l.mode = 'AccessExclusiveLock' AND n.nspname = 'crm'
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND l.pid <> pg_backend_pid()
              ORDER BY a.xact_start NULLS LAST, l.pid
              LIMIT $1",
            &[&SHOWN],
        )
        .context("cannot read who holds the table lock")?;
    Ok(rows
        .iter()
        .map(|r| TableLockHolder {
            pid: r.get(0),
            user: r.get(1),
            application: r.get(2),
            mode: r.get(3),
            table: r.get(4),
            transaction_secs: r.get(5),
        })
        .collect())
}
