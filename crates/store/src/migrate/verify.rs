//! What the job needs, checked once every file is recorded: the tables and columns
//! (with their types and nullability) each subcommand's preflight asks for, and the
//! grants of the job's group roles, read as `run-once` and the others read them. A
//! recorded file whose objects a DBA changed since (a column dropped, a grant revoked)
//! would otherwise have `run-once` say "schema not migrated … run migrate" and
//! `migrate` say "nothing to do", each pointing at the other: `migrate` names every
//! difference instead and ends with 78.

use crate::error::Result;
use postgres::{Client, SimpleQueryMessage, SimpleQueryRow};

use crate::error::{Context, Fault};
use crate::schema::{self, SchemaNeed};

/// Every subcommand's needs.
const NEEDS: [SchemaNeed; 6] = [
    SchemaNeed::Cycle,
    SchemaNeed::Relay,
    SchemaNeed::Report,
    SchemaNeed::Explain,
    SchemaNeed::Operate,
    SchemaNeed::Requeue,
];

/// What the schema lacks of what the job needs, one phrase each (the preflights' own
/// words); empty when every subcommand would pass its schema and grant checks.
pub fn missing(client: &mut Client) -> Result<Vec<String>> {
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
    let mut out: Vec<String> = Vec::new();
    let mut add = |what: String| {
        let what = what
            .replace(" (run `booking-expire migrate`)", "")
            .split(" (GRANT ")
            .next()
            .unwrap_or_default()
            .to_owned();
        if !out.contains(&what) {
            out.push(what);
        }
    };
    for need in NEEDS {
        let statements = schema::statements(need);
        let answers = run(client, &statements)
            .classify(Fault::Temporary, "cannot read the schema catalog")?;
        if let Err(e) = schema::judge(need, &answers) {
            add(e.to_string());
            continue;
        }
        let role = need.who().1;
        if !roles.iter().any(|r| r == role) {
            add(format!("role {role} does not exist"));
            continue;
        }
        let statement = crate::privileges::statement_as(need, Some(role));
        let answers = run(client, &[statement])
            .classify(Fault::Temporary, "cannot read the job's roles' grants")?;
        if let Err(e) =
            crate::privileges::judge(need, answers.first().map_or(&[][..], Vec::as_slice))
        {
            add(e.to_string());
        }
    }
    Ok(out)
}

/// Where the schema differs from a fresh database's in a way `migrate` leaves as it is,
/// one warning each: reaching the fresh schema would need a rewrite under an ACCESS
/// EXCLUSIVE lock, which is the DBA's to schedule.
pub fn divergences(client: &mut Client) -> Result<Vec<String>> {
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
