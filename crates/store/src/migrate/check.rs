//! What a file is for, checked after it ran (or before it is adopted): the end state
//! its purpose needs, read from the catalog, since a shipped file cannot be edited (its
//! checksum) and the server's wording of a failure differs between majors (from
//! PostgreSQL 16 a REVOKE by a role with ADMIN that is not the grantor is a WARNING, the
//! membership staying). A file whose check fails is not done: the run ends (a
//! configuration fault) saying what the DBA must run, and the file stays partial for
//! the next run.

use crate::error::Result;
use postgres::Client;

use crate::error::{Context, Fault};

/// One file's check.
struct Check {
    version: i32,
    /// A boolean SQL expression, true when the file's purpose holds.
    holds: &'static str,
    /// What is wrong when it does not, for the error and the partial row.
    what: &'static str,
    short: &'static str,
    /// What the DBA runs.
    fix: &'static str,
}

/// The checks, by file.
const CHECKS: &[Check] = &[Check {
    version: 11,
    holds: "CASE WHEN to_regrole('crm_booking_expiration_readonly') IS NULL THEN true
                 ELSE NOT pg_has_role('crm_booking_expiration_readonly', 'pg_read_all_stats',
                                      'MEMBER') END",
    what: "the read-only role crm_booking_expiration_readonly is still a member of \
           pg_read_all_stats, so it can read the SQL text of every session of the cluster \
           (pg_stat_activity); revoking it needs a superuser or a role with ADMIN OPTION on \
           pg_read_all_stats",
    short: "crm_booking_expiration_readonly is still a member of pg_read_all_stats",
    fix: "Run as a superuser: REVOKE pg_read_all_stats FROM crm_booking_expiration_readonly",
}];

/// A check that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Failed {
    pub what: String,
    pub short: String,
    pub fix: String,
}

/// The failure of file `version`'s check, if it has one and it fails now.
pub(super) fn failure(client: &mut Client, version: i32) -> Result<Option<Failed>> {
    let Some(check) = CHECKS.iter().find(|c| c.version == version) else {
        return Ok(None);
    };
    let (holds, who): (bool, String) = {
        let row = client
            .query_one(
                &format!("SELECT ({}), current_user::text", check.holds),
                &[],
            )
            .classify(
                Fault::Temporary,
                "cannot read the catalog for a migration's check",
            )?;
        (row.get(0), row.get(1))
    };
    Ok((!holds).then(|| Failed {
        what: format!("{} (migrate ran as {who})", check.what),
        short: check.short.to_owned(),
        fix: check.fix.to_owned(),
    }))
}
