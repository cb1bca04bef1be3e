//! Refusals before any change: what the pending files need of the role that runs them,
//! read from the catalog before the runner makes or records anything (the history
//! table included), so that a role that cannot finish never starts: the ownership of
//! `crm.bookings` and `crm.outbox` (index builds, triggers, policies and storage
//! parameters need it), the right to create in schema `crm`, and `CREATEROLE` where a
//! pending file creates one of the job's roles that is missing. `--dry-run` reports the
//! same.

use crate::error::Result;
use postgres::Client;

use crate::error::{Context, Fault};

/// The job's roles the files create when they are missing, and the file that does.
const ROLES: [(&str, i32); 4] = [
    ("crm_booking_expiration_worker", 7),
    ("crm_outbox_relay", 7),
    ("crm_booking_expiration_readonly", 7),
    ("crm_booking_expiration_operator", 9),
];

const READ: &str = "cannot read the catalog for the privileges the migrations need";

/// What the role lacks to run the files `runs` (their versions), one phrase each; empty
/// when it may run them all.
pub(super) fn missing(client: &mut Client, runs: &[i32]) -> Result<Vec<String>> {
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let me = client
        .query_one(
            "SELECT current_user::text, r.rolsuper, r.rolcreaterole,
                    CASE WHEN to_regnamespace('crm') IS NULL
                         THEN has_database_privilege(current_database(), 'CREATE')
                         ELSE has_schema_privilege('crm', 'CREATE') END
               FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
            &[],
        )
        .classify(Fault::Temporary, READ)?;
    let (who, superuser, createrole, create): (String, bool, bool, bool) =
        (me.get(0), me.get(1), me.get(2), me.get(3));
    if superuser {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let owners = client
        .query(
            "SELECT c.relname::text, pg_get_userbyid(c.relowner)::text,
                    pg_has_role(current_user, c.relowner, 'USAGE')
               FROM pg_catalog.pg_class c
              WHERE c.oid IN (to_regclass('crm.bookings'), to_regclass('crm.outbox'))
              ORDER BY c.relname",
            &[],
        )
        .classify(Fault::Temporary, READ)?;
    for row in &owners {
        let (table, owner, acts_as_owner): (String, String, bool) =
            (row.get(0), row.get(1), row.get(2));
        if !acts_as_owner {
            out.push(format!(
                "it does not own crm.{table} (its owner is {owner}: run migrate as {owner}, or \
                 as a member of it that inherits its privileges)"
            ));
        }
    }
    if !create {
        out.push(
            "it may not create in schema crm (GRANT CREATE ON SCHEMA crm TO it, or run \
             migrate as the schema's owner)"
                .to_owned(),
        );
    }
    if !createrole {
        let names: Vec<&str> = ROLES
            .iter()
            .filter(|(_, v)| runs.contains(v))
            .map(|(r, _)| *r)
            .collect();
        if !names.is_empty() {
            let absent: Vec<String> = client
                .query(
                    "SELECT r FROM unnest($1::text[]) r
                      WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r)
                      ORDER BY r",
                    &[&names],
                )
                .classify(Fault::Temporary, READ)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if !absent.is_empty() {
                out.push(format!(
                    "the roles {} do not exist and it may not create roles (no CREATEROLE): a \
                     DBA creates them first (CREATE ROLE … NOLOGIN) or grants it CREATEROLE",
                    absent.join(", ")
                ));
            }
        }
    }
    Ok(out
        .into_iter()
        .map(|what| format!("role {who}: {what}"))
        .collect())
}
