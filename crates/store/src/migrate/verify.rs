//! What the job needs, checked once every file is recorded: the tables and columns
//! (with their types and nullability) each need's preflight asks for, and the grants of
//! the job's group roles, read as the preflights read them. A recorded file whose
//! objects a DBA changed since (a column dropped, a grant revoked) would otherwise have
//! the cycle's preflight say "schema not migrated" and the runner say "nothing to do",
//! each pointing at the other: the runner names every difference instead, a
//! configuration fault.

use crate::error::Result;
use postgres::{Client, SimpleQueryMessage, SimpleQueryRow};

use crate::error::{Context, Fault};
use crate::schema::{self, Lack, SchemaNeed};

/// What the schema lacks of what the job needs (the preflights' own findings), each once;
/// empty when every need's preflight would pass its schema and grant checks.
pub(super) fn missing(client: &mut Client) -> Result<Vec<Lack>> {
    let roles: Vec<String> = client
        .query(
            "SELECT rolname::text FROM pg_catalog.pg_roles
              WHERE rolname IN ('crm_booking_expiration_worker', 'crm_outbox_relay',
                                'crm_booking_expiration_readonly',
                                'crm_booking_expiration_operator')",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the job's roles")?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out: Vec<Lack> = Vec::new();
    let mut add = |lack: Lack| {
        if !out.contains(&lack) {
            out.push(lack);
        }
    };
    for need in SchemaNeed::ALL {
        let statements = schema::statements(need);
        let answers = run(client, &statements)
            .classify(Fault::Temporary, "cannot read the schema catalog")?;
        if let Err(lack) = schema::judge(need, &answers) {
            add(lack);
            continue;
        }
        let role = need.group_role();
        if !roles.iter().any(|r| r == role) {
            add(Lack::NoRole { role });
            continue;
        }
        let statement = crate::privileges::statement_as(need, Some(role));
        let answers = run(client, &[statement])
            .classify(Fault::Temporary, "cannot read the job's roles' grants")?;
        if let Err(lack) =
            crate::privileges::judge(need, answers.first().map_or(&[][..], Vec::as_slice))
        {
            add(lack);
        }
    }
    Ok(out)
}

/// Where the schema differs from a fresh database's in a way `migrate` leaves as it is,
/// one warning each: reaching the fresh schema would need a rewrite under an ACCESS
/// EXCLUSIVE lock, which is the DBA's to schedule.
pub(super) fn divergences(client: &mut Client) -> Result<Vec<String>> {
    let audit_version: Option<String> = client
        .query_opt(
            "SELECT format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
              WHERE attrelid = to_regclass('crm.booking_audit') AND attname = 'version'
                AND NOT attisdropped",
            &[],
        )
        .classify(Fault::Temporary, "cannot read the schema catalog")?
        .map(|r| r.get(0));
    Ok(audit_version
        .filter(|t| t == "integer")
        .map(|_| {
            "crm.booking_audit.version is integer where a fresh database has bigint (0.1.0's \
             003 made it integer and its 008 changed it; a database its script took through \
             007 only keeps it): the job works while booking versions stay below 2147483648; \
             changing it rewrites the table under an ACCESS EXCLUSIVE lock, so migrate leaves \
             it to a quiet moment of the DBA's: ALTER TABLE crm.booking_audit ALTER COLUMN \
             version TYPE bigint (docs/guides/upgrading.md, \"A column of another type\")"
                .to_owned()
        })
        .into_iter()
        .collect())
}

/// Runs `statements` as one simple-query batch; the rows of each, in order.
fn run(
    client: &mut Client,
    statements: &[String],
) -> Result<Vec<Vec<SimpleQueryRow>>, postgres::Error> {
    let mut answers = Vec::with_capacity(statements.len());
    let mut rows = Vec::new();
    for m in client.simple_query(&statements.join(";\n"))? {
        match m {
            SimpleQueryMessage::Row(row) => rows.push(row),
            SimpleQueryMessage::CommandComplete(_) => answers.push(std::mem::take(&mut rows)),
            _ => {}
        }
    }
    Ok(answers)
}
