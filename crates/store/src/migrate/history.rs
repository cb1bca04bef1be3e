//! The history of what was applied: `crm.booking_expiration_migrations`, made by the
//! runner itself before anything else, one row per migration written after its last
//! statement, with the oldest release that works on the schema it leaves
//! (`works_from`); and each file's checksum (sha256 of its text with its line endings
//! made LF, in hex: a CRLF checkout checks the same; a row holding the checksum of the
//! raw bytes, as runs before wrote, stays accepted).

use std::fmt::Write as _;

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::Client;
use sha2::{Digest, Sha256};

use crate::error::{Context, Fault};

pub(super) const TABLE: &str = "crm.booking_expiration_migrations";

/// The sha256 of a file's text with every CRLF made LF, 64 lower-case hex digits: the
/// line endings of a checkout are no part of a migration.
pub fn checksum(sql: &str) -> String {
    if sql.contains("\r\n") {
        return hex(&sql.replace("\r\n", "\n"));
    }
    hex(sql)
}

/// Whether a history row's `recorded` checksum is that of `sql`: its normalised one, or
/// the sha256 of its raw bytes as an LF or a CRLF checkout held them (what the runner
/// recorded before line endings were normalised).
pub(super) fn accepts(recorded: &str, sql: &str) -> bool {
    if recorded == checksum(sql) || recorded == hex(sql) {
        return true;
    }
    let lf = sql.replace("\r\n", "\n");
    recorded == hex(&lf.replace('\n', "\r\n"))
}

/// The sha256 of `text`'s bytes in hex.
fn hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
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
    /// The oldest release that works on the schema the file leaves; empty in rows
    /// written before the runner recorded it.
    pub works_from: String,
}

/// Makes the history table (and the schema) when missing. Run under the migrators'
/// lock: two sessions creating the same table at once collide in the catalog. Each is
/// made only when it is not there: `CREATE … IF NOT EXISTS` asks for the privilege to
/// create first, which a role that owns what is there may lack.
pub(super) fn ensure(client: &mut Client) -> Result<()> {
    let row = client
        .query_one(
            "SELECT to_regnamespace('crm') IS NOT NULL,
                    to_regclass('crm.booking_expiration_migrations') IS NOT NULL",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?;
    let (schema, table): (bool, bool) = (row.get(0), row.get(1));
    if table {
        return add_works_from(client);
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
                 adopted     boolean     NOT NULL DEFAULT false,
                 works_from  text
             )",
        )
        .classify(
            Fault::Config,
            format!("cannot create the history table {TABLE}"),
        )?;
    Ok(())
}

/// Gives the runner's tables (the history, the partial files) to the owner of
/// `crm.outbox` when another role made them (a member of that owner's role): the owner
/// of the tables they describe can always read and write them. A failure is a warning:
/// the run goes on, the DBA can fix the owner later.
pub(super) fn own_like_the_tables(client: &mut Client) {
    let given = client.batch_execute(
        "DO $$
         DECLARE
             owner oid := (SELECT relowner FROM pg_catalog.pg_class
                            WHERE oid = to_regclass('crm.outbox'));
             t text;
         BEGIN
             IF owner IS NULL THEN
                 RETURN;
             END IF;
             FOREACH t IN ARRAY ARRAY['crm.booking_expiration_migrations',
                                      'crm.booking_expiration_migration_partial'] LOOP
                 IF (SELECT relowner FROM pg_catalog.pg_class WHERE oid = to_regclass(t))
                    <> owner THEN
                     EXECUTE format('ALTER TABLE %s OWNER TO %I', t, pg_get_userbyid(owner));
                 END IF;
             END LOOP;
         END
         $$",
    );
    if let Err(e) = given {
        log::warn!(
            "migrate: cannot give the history {TABLE} to the owner of crm.outbox ({e}); \
                    run ALTER TABLE {TABLE} OWNER TO that owner"
        );
    }
}

/// Adds `works_from` to a history made before the runner recorded it: a column
/// without a default, so no rewrite, under a short lock timeout (the table is the
/// runner's own; the commands' preflight reads it).
fn add_works_from(client: &mut Client) -> Result<()> {
    let has: bool = client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                             WHERE attrelid = 'crm.booking_expiration_migrations'::regclass
                               AND attname = 'works_from' AND NOT attisdropped)",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the catalog")?
        .get(0);
    if has {
        return Ok(());
    }
    client
        .batch_execute(
            "SET lock_timeout = '5s';
             ALTER TABLE crm.booking_expiration_migrations ADD COLUMN IF NOT EXISTS works_from text;
             RESET lock_timeout",
        )
        .classify(
            Fault::Temporary,
            format!("cannot add the column works_from to the history {TABLE}"),
        )
}

/// The job's roles, which read the history (the commands' preflight reads the releases
/// the schema needs from it).
const READERS: [&str; 4] = [
    "crm_booking_expiration_worker",
    "crm_outbox_relay",
    "crm_booking_expiration_readonly",
    "crm_booking_expiration_operator",
];

/// Grants SELECT on the history to each of the job's roles that exists (they are made
/// by 007_roles.sql and 009_operations.sql, after the table).
pub(super) fn grant_readers(client: &mut Client) -> Result<()> {
    let roles = READERS
        .iter()
        .map(|r| format!("'{r}'"))
        .collect::<Vec<_>>()
        .join(", ");
    client
        .batch_execute(&format!(
            "DO $$
             DECLARE
                 r text;
             BEGIN
                 FOR r IN SELECT rolname FROM pg_catalog.pg_roles
                           WHERE rolname IN ({roles}) ORDER BY rolname LOOP
                     EXECUTE format('GRANT SELECT ON crm.booking_expiration_migrations TO %I', r);
                 END LOOP;
             END
             $$"
        ))
        .classify(
            Fault::Config,
            format!("cannot grant SELECT on {TABLE} to the job's roles"),
        )
}

/// The history, by version; `None` when the table does not exist (yet).
pub(super) fn read(client: &mut Client) -> Result<Option<Vec<Applied>>> {
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
                    adopted, coalesce(to_jsonb(m) ->> 'works_from', '')
               FROM crm.booking_expiration_migrations m
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
                works_from: r.get(8),
            })
            .collect(),
    ))
}

/// Records a migration as applied (or adopted), its partial row gone with it, in a
/// transaction of its own.
#[allow(clippy::too_many_arguments, reason = "one row's columns")]
pub(super) fn record(
    client: &mut Client,
    version: i32,
    name: &str,
    checksum: &str,
    release: &str,
    duration_ms: i64,
    adopted: bool,
    works_from: &str,
) -> Result<()> {
    // The file's partial row goes in the same transaction: never both, never neither.
    let mut tx = client
        .transaction()
        .classify(Fault::Temporary, format!("cannot record {name}"))?;
    tx.execute(
        "DELETE FROM crm.booking_expiration_migration_partial WHERE version = $1",
        &[&version],
    )
    .classify(
        Fault::Temporary,
        format!("cannot record {name} as done in {}", super::partial::TABLE),
    )?;
    tx.execute(
        "INSERT INTO crm.booking_expiration_migrations
                    (version, name, checksum, release, duration_ms, adopted, works_from)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &version,
            &name,
            &checksum,
            &release,
            &duration_ms,
            &adopted,
            &works_from,
        ],
    )
    .classify(
        Fault::Temporary,
        format!("cannot record {name} in the history {TABLE}"),
    )?;
    tx.commit()
        .classify(Fault::Temporary, format!("cannot record {name}"))
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

    #[test]
    fn a_crlf_copy_of_every_shipped_file_checks_the_same_and_raw_byte_rows_stay_accepted() {
        for m in super::super::embedded::MIGRATIONS {
            assert!(!m.sql.contains('\r'), "{}: CRLF in a shipped file", m.file);
            let crlf = m.sql.replace('\n', "\r\n");
            assert_eq!(checksum(&crlf), checksum(m.sql), "{}", m.file);
            assert!(accepts(&checksum(m.sql), &crlf), "{}", m.file);
            // A row recorded from the CRLF copy's raw bytes before the normalisation,
            // read by a binary of the LF file, and the other way round.
            assert!(accepts(&hex(&crlf), &crlf), "{}", m.file);
            assert!(accepts(&hex(&crlf), m.sql), "{}", m.file);
            assert!(accepts(&hex(m.sql), &crlf), "{}", m.file);
            assert!(!accepts(&checksum("SELECT 1"), m.sql), "{}", m.file);
        }
    }
}
