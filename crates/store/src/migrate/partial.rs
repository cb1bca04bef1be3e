//! Files begun and not finished: `crm.booking_expiration_migration_partial`, made by the
//! runner beside the history, one row per file between its first statement and its
//! history row (which statements ran, when, by whom, by which release, and why it
//! stopped when it did not simply end), so that `migrate status` shows it and the next
//! run goes on after the last statement that committed. A row goes with the file's
//! history row, in one transaction: the table holds at most one row per file.

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::Client;

use crate::error::{Context, Fault};

pub(super) const TABLE: &str = "crm.booking_expiration_migration_partial";

/// One file begun and not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub version: i32,
    pub name: String,
    pub checksum: String,
    /// How many of its statements committed, in order.
    pub done: i32,
    pub statements: i32,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    pub release: String,
    /// Why it is not done when all its statements ran (its purpose's check failed);
    /// empty otherwise.
    pub reason: String,
}

/// Makes the table when missing (under the migrators' lock, after the history).
pub(super) fn ensure(client: &mut Client) -> Result<()> {
    let there: bool = client
        .query_one(
            "SELECT to_regclass('crm.booking_expiration_migration_partial') IS NOT NULL",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?
        .get(0);
    if there {
        return Ok(());
    }
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS crm.booking_expiration_migration_partial (
                 version    integer     PRIMARY KEY,
                 name       text        NOT NULL,
                 checksum   text        NOT NULL,
                 done       integer     NOT NULL,
                 statements integer     NOT NULL,
                 updated_at timestamptz NOT NULL DEFAULT now(),
                 updated_by text        NOT NULL DEFAULT session_user,
                 release    text        NOT NULL,
                 reason     text        NOT NULL DEFAULT ''
             )",
        )
        .classify(Fault::Config, format!("cannot create the table {TABLE}"))
}

/// The files begun and not finished, by version; none when the table does not exist.
pub(super) fn read(client: &mut Client) -> Result<Vec<Partial>> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('crm.booking_expiration_migration_partial') IS NOT NULL",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?
        .get(0);
    if !exists {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            "SELECT version, name, checksum, done, statements, updated_at, updated_by, release,
                    reason
               FROM crm.booking_expiration_migration_partial ORDER BY version",
            &[],
        )
        .classify(Fault::Config, format!("cannot read {TABLE}"))?;
    Ok(rows
        .iter()
        .map(|r| Partial {
            version: r.get(0),
            name: r.get(1),
            checksum: r.get(2),
            done: r.get(3),
            statements: r.get(4),
            updated_at: r.get(5),
            updated_by: r.get(6),
            release: r.get(7),
            reason: r.get(8),
        })
        .collect())
}

/// Records that `done` of the `statements` of file `version` committed (and why it
/// stopped, `reason`, when that is not the end of a run).
#[allow(clippy::too_many_arguments, reason = "one row's columns")]
pub(super) fn mark(
    client: &mut Client,
    version: i32,
    name: &str,
    checksum: &str,
    done: i32,
    statements: i32,
    release: &str,
    reason: &str,
) -> Result<()> {
    client
        .execute(
            "INSERT INTO crm.booking_expiration_migration_partial
                    (version, name, checksum, done, statements, release, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (version) DO UPDATE
                SET name = excluded.name, checksum = excluded.checksum, done = excluded.done,
                    statements = excluded.statements, updated_at = now(),
                    updated_by = session_user, release = excluded.release,
                    reason = excluded.reason",
            &[
                &version,
                &name,
                &checksum,
                &done,
                &statements,
                &release,
                &reason,
            ],
        )
        .classify(
            Fault::Temporary,
            format!("cannot record {name} as partly applied in {TABLE}"),
        )?;
    Ok(())
}
