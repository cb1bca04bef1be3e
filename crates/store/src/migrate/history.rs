//! The history of what was applied: `crm.booking_expiration_migrations`, made by the
//! runner itself before anything else, one row per migration written after its last
//! statement; and each file's checksum (sha256 of its bytes, in hex).

use std::fmt::Write as _;

use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::{ClassifyExt, Fault};

pub const TABLE: &str = "crm.booking_expiration_migrations";

/// The sha256 of a file's bytes, 64 lower-case hex digits.
pub fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// One row of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: i32,
    pub name: String,
    pub checksum: String,
    pub applied_at: DateTime<Utc>,
    pub applied_by: String,
    pub release: String,
    pub duration_ms: i64,
    pub adopted: bool,
}

/// Makes the history table (and the schema) when missing. Run under the migrators'
/// lock: two sessions creating the same table at once collide in the catalog. Each is
/// made only when it is not there: `CREATE … IF NOT EXISTS` asks for the privilege to
/// create first, which a role that owns what is there may lack.
pub fn ensure(client: &mut Client) -> Result<()> {
    let row = client
        .query_one(
            "SELECT to_regnamespace('crm') IS NOT NULL,
                    to_regclass('crm.booking_expiration_migrations') IS NOT NULL",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?;
    let (schema, table): (bool, bool) = (row.get(0), row.get(1));
    if table {
        return Ok(());
    }
    if !schema {
        client
            .batch_execute("CREATE SCHEMA IF NOT EXISTS crm")
            .classify(Fault::Config, "cannot create the schema crm")?;
    }
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS crm.booking_expiration_migrations (
                 version     integer     PRIMARY KEY,
                 name        text        NOT NULL,
                 checksum    text        NOT NULL,
                 applied_at  timestamptz NOT NULL DEFAULT now(),
                 applied_by  text        NOT NULL DEFAULT session_user,
                 release     text        NOT NULL,
                 duration_ms bigint      NOT NULL,
                 adopted     boolean     NOT NULL DEFAULT false
             )",
        )
        .classify(
            Fault::Config,
            format!("cannot create the history table {TABLE}"),
        )?;
    Ok(())
}

/// Grants SELECT on the history to the read-only role when that role exists (it is
/// made by 007_roles.sql, after the table).
pub fn grant_readers(client: &mut Client) -> Result<()> {
    client
        .batch_execute(
            "DO $$
             BEGIN
                 IF EXISTS (SELECT FROM pg_catalog.pg_roles
                             WHERE rolname = 'crm_booking_expiration_readonly') THEN
                     GRANT SELECT ON crm.booking_expiration_migrations
                        TO crm_booking_expiration_readonly;
                 END IF;
             END
             $$",
        )
        .classify(
            Fault::Config,
            format!("cannot grant SELECT on {TABLE} to crm_booking_expiration_readonly"),
        )
}

/// The history, by version; `None` when the table does not exist (yet).
pub fn read(client: &mut Client) -> Result<Option<Vec<Applied>>> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('crm.booking_expiration_migrations') IS NOT NULL",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT version, name, checksum, applied_at, applied_by, release, duration_ms,
                    adopted
               FROM crm.booking_expiration_migrations
              ORDER BY version",
            &[],
        )
        .classify(Fault::Config, format!("cannot read the history {TABLE}"))?;
    Ok(Some(
        rows.iter()
            .map(|r| Applied {
                version: r.get(0),
                name: r.get(1),
                checksum: r.get(2),
                applied_at: r.get(3),
                applied_by: r.get(4),
                release: r.get(5),
                duration_ms: r.get(6),
                adopted: r.get(7),
            })
            .collect(),
    ))
}

/// Records a migration as applied (or adopted), in a transaction of its own.
pub fn record(
    client: &mut Client,
    version: i32,
    name: &str,
    checksum: &str,
    release: &str,
    duration_ms: i64,
    adopted: bool,
) -> Result<()> {
    client
        .execute(
            "INSERT INTO crm.booking_expiration_migrations
                    (version, name, checksum, release, duration_ms, adopted)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[&version, &name, &checksum, &release, &duration_ms, &adopted],
        )
        .classify(
            Fault::Temporary,
            format!("cannot record {name} in the history {TABLE}"),
        )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checksum_is_the_sha256_of_the_bytes_in_hex() {
        assert_eq!(
            checksum(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            checksum("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
