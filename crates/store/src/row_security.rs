//! Whether the row security of a shared outbox binds this session's role
//! (`sql/015_outbox_row_security.sql`): the policies under which the job's roles reach
//! only the rows of the outbox types in `crm.booking_expiration_outbox_type`, in force
//! once the table's owner enabled row security on `crm.outbox`. Read from the catalog,
//! so that a database without migration 15 is no error (the defence is then off).

use crate::Conn;
use crate::error::{Context, Result};
use postgres::GenericClient;

/// The migration that makes the policies, named in the log lines.
pub const ROW_SECURITY_MIGRATION: &str = "sql/015_outbox_row_security.sql";

/// The restrictive policy of migration 15.
pub(crate) const OWN_TYPES_POLICY: &str = "booking_expiration_own_types";

/// What the catalog says about `crm.outbox`'s row security for the current role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowSecurity {
    /// The session's role (`current_user`).
    pub role: String,
    /// Row security is enabled on `crm.outbox` (`relrowsecurity`).
    pub enabled: bool,
    /// It applies to this role (`row_security_active`): false for the table's owner, a
    /// superuser and a BYPASSRLS role.
    pub binds_role: bool,
    /// Migration 15's restrictive policy exists and names this role or a role it is a
    /// member of (with the privileges of, as the policies judge it).
    pub policy_applies: bool,
    /// The types the policy lets the job's roles reach, in order; `None` when the table
    /// is missing (migration 15 not applied) or this role may not read it.
    pub types: Option<Vec<String>>,
}

impl RowSecurity {
    /// Whether the policies narrow this session to the types: enabled, binding this
    /// role, and naming it.
    pub fn narrows(&self) -> bool {
        self.enabled && self.binds_role && self.policy_applies
    }
}

const FACTS_SQL: &str = "\
SELECT current_user::text AS role_name,
       coalesce(c.relrowsecurity, false) AS enabled,
       CASE WHEN c.oid IS NULL THEN false ELSE row_security_active(c.oid) END AS binds_role,
       EXISTS (SELECT FROM pg_catalog.pg_policy p
                WHERE p.polrelid = c.oid AND p.polname = $1 AND NOT p.polpermissive
                  AND EXISTS (SELECT FROM unnest(p.polroles) AS r(oid)
                               WHERE r.oid = 0 OR pg_has_role(r.oid, 'USAGE'))) AS policy_applies,
       CASE WHEN to_regclass('crm.booking_expiration_outbox_type') IS NULL THEN false
            ELSE has_table_privilege('crm.booking_expiration_outbox_type', 'SELECT')
       END AS types_readable
  FROM (SELECT to_regclass('crm.outbox') AS oid) AS o
  LEFT JOIN pg_catalog.pg_class c ON c.oid = o.oid";

/// Reads the facts: one round trip, and one more for the types when they are readable.
pub fn row_security(client: &mut impl Conn) -> Result<RowSecurity> {
    let client = client.pg();
    let row = client
        .query_one(FACTS_SQL, &[&OWN_TYPES_POLICY])
        .context("cannot read the row security of crm.outbox")?;
    let types = if row.get::<_, bool>("types_readable") {
        let rows = client
            .query(
                "SELECT type FROM crm.booking_expiration_outbox_type ORDER BY type",
                &[],
            )
            .context("cannot read crm.booking_expiration_outbox_type")?;
        Some(rows.iter().map(|r| r.get(0)).collect())
    } else {
        None
    };
    Ok(RowSecurity {
        role: row.get("role_name"),
        enabled: row.get("enabled"),
        binds_role: row.get("binds_role"),
        policy_applies: row.get("policy_applies"),
        types,
    })
}

/// The statement that lists `types` for the job's roles, as the table's owner runs it.
pub fn outbox_type_listing(types: &[&str]) -> String {
    let values: Vec<String> = types
        .iter()
        .map(|t| format!("('{}')", t.replace('\'', "''")))
        .collect();
    format!(
        "INSERT INTO crm.booking_expiration_outbox_type (type) VALUES {}",
        values.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_quotes_each_type() {
        assert_eq!(
            outbox_type_listing(&["a", "it's"]),
            "INSERT INTO crm.booking_expiration_outbox_type (type) VALUES ('a'), ('it''s')"
        );
    }
}
