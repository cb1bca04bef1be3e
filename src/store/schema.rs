// Over 450 lines: most of it is the preflight's tables of the columns, types and privileges each subcommand needs.
//! "Is the schema migrated, and may this role do what the subcommand does?", answered
//! from the catalog before any work, so a database without the schema or a role without
//! the grants fails with 78 and a list of what is missing instead of a mid-cycle error.

use anyhow::Result;
use postgres::GenericClient;

use crate::exit::{ClassifyExt, Failure, fail};

/// What a subcommand needs of the schema.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// run-once: bookings, outbox, audit, timeline, poison.
    Cycle,
    /// relay-outbox: the outbox only.
    Relay,
    /// dry-run and backlog: bookings, poison, outbox.
    Report,
    /// explain: what the reports read, and the booking's audit and timeline rows.
    Explain,
    /// pause and resume: the pause switches and the operations trail.
    Operate,
    /// republish and retry-failed: the outbox and the operations trail.
    Requeue,
}

const BOOKINGS: (&str, &[&str]) = (
    "bookings",
    &[
        "id",
        "tenant_id",
        "deal_id",
        "property_object_id",
        "status",
        "reserve_expires_at",
        "booking_expires_at",
        "expired_at",
        "created_at",
        "updated_at",
        "version",
    ],
);
const OUTBOX: (&str, &[&str]) = (
    "outbox",
    &[
        "id",
        "aggregatetype",
        "aggregateid",
        "type",
        "topic",
        "payload",
        "headers",
        "occurred_at",
        "published_at",
        "attempts",
        "last_error",
        "seq",
        "failed_at",
        "next_attempt_at",
        "failures",
        "delivered_partition",
        "delivered_offset",
    ],
);
const PAUSE: (&str, &[&str]) = (
    "booking_expiration_pause",
    &["command", "paused_at", "paused_by", "reason"],
);
const OPERATIONS: (&str, &[&str]) = (
    "booking_expiration_operations",
    &[
        "at",
        "actor",
        "action",
        "target",
        "reason",
        "rows",
        "outbox_ids",
    ],
);
const AUDIT: (&str, &[&str]) = (
    "booking_audit",
    &[
        "booking_id",
        "tenant_id",
        "from_status",
        "to_status",
        "version",
        "actor",
        "run_id",
        "at",
    ],
);
const TIMELINE: (&str, &[&str]) = (
    "deal_timeline",
    &[
        "deal_id",
        "tenant_id",
        "booking_id",
        "kind",
        "occurred_at",
        "correlation_id",
        "details",
    ],
);
const POISON: (&str, &[&str]) = (
    "booking_expiration_poison",
    &[
        "booking_id",
        "tenant_id",
        "phase",
        "reason",
        "error",
        "sqlstate",
        "attempts",
        "first_seen_at",
        "last_seen_at",
        "retry_at",
        "last_run_id",
        "booking_version",
        "booking_status",
    ],
);

/// A privilege on a table of `crm`: on the whole table, or on the listed columns.
#[derive(Debug, Clone, Copy)]
struct Privilege {
    privilege: &'static str,
    table: &'static str,
    columns: &'static [&'static str],
}

const fn on(privilege: &'static str, table: &'static str) -> Privilege {
    Privilege {
        privilege,
        table,
        columns: &[],
    }
}

const fn on_columns(
    privilege: &'static str,
    table: &'static str,
    columns: &'static [&'static str],
) -> Privilege {
    Privilege {
        privilege,
        table,
        columns,
    }
}

/// The columns of a booking the claim and the reports read.
const BOOKING_READ: &[&str] = &[
    "id",
    "tenant_id",
    "deal_id",
    "property_object_id",
    "status",
    "reserve_expires_at",
    "booking_expires_at",
    "expired_at",
    "version",
];

/// What `run-once` does: claim (read and row-lock) and expire bookings, append audit,
/// timeline and outbox rows, keep the quarantine. As granted in `sql/007_roles.sql`.
const CYCLE_PRIVILEGES: &[Privilege] = &[
    on_columns("SELECT", "bookings", BOOKING_READ),
    on_columns(
        "UPDATE",
        "bookings",
        &["status", "expired_at", "updated_at", "version"],
    ),
    // The audit and timeline columns checked above are exactly those the cycle writes.
    on_columns("INSERT", "booking_audit", AUDIT.1),
    on_columns("INSERT", "deal_timeline", TIMELINE.1),
    on_columns(
        "INSERT",
        "outbox",
        &[
            "id",
            "aggregatetype",
            "aggregateid",
            "type",
            "topic",
            "payload",
            "headers",
            "occurred_at",
        ],
    ),
    on("SELECT", "booking_expiration_poison"),
    on("INSERT", "booking_expiration_poison"),
    on("UPDATE", "booking_expiration_poison"),
    on("DELETE", "booking_expiration_poison"),
    on("SELECT", "booking_expiration_pause"),
];

/// What `relay-outbox` does: read the outbox, mark rows, purge published ones.
const RELAY_PRIVILEGES: &[Privilege] = &[
    on("SELECT", "outbox"),
    on_columns(
        "UPDATE",
        "outbox",
        &[
            "published_at",
            "attempts",
            "last_error",
            "failed_at",
            "next_attempt_at",
            "failures",
            "delivered_partition",
            "delivered_offset",
        ],
    ),
    on("DELETE", "outbox"),
    on("SELECT", "booking_expiration_pause"),
];

/// What `dry-run` and `backlog` read.
const REPORT_PRIVILEGES: &[Privilege] = &[
    on_columns("SELECT", "bookings", BOOKING_READ),
    on("SELECT", "booking_expiration_poison"),
    on("SELECT", "outbox"),
];

/// What `explain` reads.
const EXPLAIN_PRIVILEGES: &[Privilege] = &[
    on_columns("SELECT", "bookings", BOOKING_READ),
    on("SELECT", "booking_expiration_poison"),
    on("SELECT", "outbox"),
    on("SELECT", "booking_audit"),
    on("SELECT", "deal_timeline"),
];

/// What `pause` and `resume` do.
const OPERATE_PRIVILEGES: &[Privilege] = &[
    on("SELECT", "booking_expiration_pause"),
    on("INSERT", "booking_expiration_pause"),
    on("DELETE", "booking_expiration_pause"),
    on("INSERT", "booking_expiration_operations"),
];

/// What `republish` and `retry-failed` do: re-queue outbox rows (never insert any).
const REQUEUE_PRIVILEGES: &[Privilege] = &[
    on("SELECT", "outbox"),
    on_columns(
        "UPDATE",
        "outbox",
        &[
            "published_at",
            "failed_at",
            "next_attempt_at",
            "failures",
            "last_error",
            "delivered_partition",
            "delivered_offset",
        ],
    ),
    on("INSERT", "booking_expiration_operations"),
];

impl Need {
    fn tables(self) -> &'static [(&'static str, &'static [&'static str])] {
        match self {
            Need::Cycle => &[BOOKINGS, OUTBOX, AUDIT, TIMELINE, POISON, PAUSE],
            Need::Relay => &[OUTBOX, PAUSE],
            Need::Report => &[BOOKINGS, POISON, OUTBOX],
            Need::Explain => &[BOOKINGS, POISON, OUTBOX, AUDIT, TIMELINE],
            Need::Operate => &[PAUSE, OPERATIONS],
            Need::Requeue => &[OUTBOX, OPERATIONS],
        }
    }

    fn privileges(self) -> &'static [Privilege] {
        match self {
            Need::Cycle => CYCLE_PRIVILEGES,
            Need::Relay => RELAY_PRIVILEGES,
            Need::Report => REPORT_PRIVILEGES,
            Need::Explain => EXPLAIN_PRIVILEGES,
            Need::Operate => OPERATE_PRIVILEGES,
            Need::Requeue => REQUEUE_PRIVILEGES,
        }
    }

    /// Who needs it, and the group role of `sql/007_roles.sql` that grants it.
    fn who(self) -> (&'static str, &'static str) {
        match self {
            Need::Cycle => ("run-once", "crm_booking_expiration_worker"),
            Need::Relay => ("relay-outbox", "crm_outbox_relay"),
            Need::Report => ("dry-run and backlog", "crm_booking_expiration_readonly"),
            Need::Explain => ("explain", "crm_booking_expiration_readonly"),
            Need::Operate => ("pause and resume", "crm_booking_expiration_operator"),
            Need::Requeue => (
                "republish and retry-failed",
                "crm_booking_expiration_operator",
            ),
        }
    }

    /// The migration that grants the group role what this subcommand needs.
    fn grants(self) -> &'static str {
        match self {
            Need::Cycle | Need::Relay | Need::Report => "sql/007_roles.sql",
            Need::Explain | Need::Operate | Need::Requeue => "sql/009_operations.sql",
        }
    }
}

/// Fails with "schema not migrated: …" naming every missing table and column, then with
/// "role … lacks privileges …" naming every missing grant. Reads `pg_catalog`, which
/// (unlike `information_schema`) lists columns whatever the role's privileges are.
pub fn check_schema(client: &mut impl GenericClient, need: Need) -> Result<()> {
    check_tables(client, need)?;
    check_not_null(client, need)?;
    check_types(client, need)?;
    check_privileges(client, need)
}

fn check_tables(client: &mut impl GenericClient, need: Need) -> Result<()> {
    let (mut tables, mut columns) = (Vec::new(), Vec::new());
    for (table, cols) in need.tables() {
        for col in *cols {
            tables.push(*table);
            columns.push(*col);
        }
    }
    let rows = client
        .query(
            "SELECT w.tbl, w.col, c.oid IS NOT NULL AS table_exists
               FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS w(tbl, col, n)
               LEFT JOIN pg_catalog.pg_namespace s ON s.nspname = 'crm'
               LEFT JOIN pg_catalog.pg_class c
                      ON c.relnamespace = s.oid AND c.relname = w.tbl AND c.relkind IN ('r', 'p')
               LEFT JOIN pg_catalog.pg_attribute a
                      ON a.attrelid = c.oid AND a.attname = w.col AND a.attnum > 0 AND NOT a.attisdropped
              WHERE a.attname IS NULL
              ORDER BY w.n",
            &[&tables, &columns],
        )
        .classify(Failure::Temporary, "cannot read the schema catalog")?;
    let mut missing: Vec<String> = Vec::new();
    for row in rows {
        let (table, column, table_exists): (String, String, bool) =
            (row.get("tbl"), row.get("col"), row.get("table_exists"));
        let what = if table_exists {
            format!("column crm.{table}.{column}")
        } else {
            format!("table crm.{table}")
        };
        if !missing.contains(&what) {
            missing.push(what);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(fail(
            Failure::Config,
            format!(
                "schema not migrated: missing {} (apply the files of sql/ in order)",
                missing.join(", ")
            ),
        ))
    }
}

/// Fails with "role … lacks privileges …" naming each privilege the subcommand needs and
/// the current role does not have (directly, through a group role, or as superuser).
fn check_privileges(client: &mut impl GenericClient, need: Need) -> Result<()> {
    let (mut privileges, mut tables, mut columns) = (Vec::new(), Vec::new(), Vec::new());
    for p in need.privileges() {
        if p.columns.is_empty() {
            privileges.push(p.privilege);
            tables.push(p.table);
            columns.push("");
        }
        for col in p.columns {
            privileges.push(p.privilege);
            tables.push(p.table);
            columns.push(*col);
        }
    }
    let rows = client
        .query(
            "SELECT w.priv, w.tbl, w.col, current_user::text AS role_name
               FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS w(priv, tbl, col, n)
              WHERE NOT CASE WHEN w.col = ''
                             THEN has_table_privilege(format('crm.%I', w.tbl), w.priv)
                             ELSE has_column_privilege(format('crm.%I', w.tbl), w.col, w.priv)
                        END
              ORDER BY w.n",
            &[&privileges, &tables, &columns],
        )
        .classify(Failure::Temporary, "cannot read the role's privileges")?;
    let Some(user) = rows.first().map(|r| r.get::<_, String>("role_name")) else {
        return Ok(());
    };
    let missing: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| (r.get("priv"), r.get("tbl"), r.get("col")))
        .collect();
    let (who, role) = need.who();
    Err(fail(
        Failure::Config,
        format!(
            "role {user} lacks privileges for {who}: {} \
             (GRANT {role} TO {user}; see {})",
            describe_missing(&missing),
            need.grants()
        ),
    ))
}

/// "UPDATE on crm.bookings (status, version), DELETE on crm.outbox", in the given order.
fn describe_missing(missing: &[(String, String, String)]) -> String {
    let mut parts: Vec<(String, Vec<&str>)> = Vec::new();
    for (privilege, table, column) in missing {
        let what = format!("{privilege} on crm.{table}");
        let columns = match parts.last_mut() {
            Some((last, columns)) if *last == what => columns,
            _ => {
                parts.push((what, Vec::new()));
                &mut parts.last_mut().expect("just pushed").1
            }
        };
        if !column.is_empty() {
            columns.push(column);
        }
    }
    parts
        .into_iter()
        .map(|(what, columns)| {
            if columns.is_empty() {
                what
            } else {
                format!("{what} ({})", columns.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of `crm.bookings` the job reads as never NULL: a schema that allows NULL
/// there would make a row unreadable mid-cycle, so it is refused up front.
const BOOKINGS_NOT_NULL: &[&str] = &[
    "id",
    "tenant_id",
    "deal_id",
    "property_object_id",
    "status",
    "version",
];

fn check_not_null(client: &mut impl GenericClient, need: Need) -> Result<()> {
    if matches!(need, Need::Relay | Need::Operate | Need::Requeue) {
        return Ok(());
    }
    let rows = client
        .query(
            "SELECT a.attname::text AS column_name FROM pg_catalog.pg_attribute a
               JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
               JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
              WHERE s.nspname = 'crm' AND c.relname = 'bookings'
                AND a.attname = ANY($1) AND NOT a.attnotnull
              ORDER BY a.attnum",
            &[&BOOKINGS_NOT_NULL],
        )
        .classify(Failure::Temporary, "cannot read the schema catalog")?;
    let nullable: Vec<String> = rows
        .iter()
        .map(|r| format!("crm.bookings.{}", r.get::<_, String>("column_name")))
        .collect();
    if nullable.is_empty() {
        return Ok(());
    }
    Err(fail(
        Failure::Config,
        format!(
            "schema not as expected: {} may hold NULL; the job needs NOT NULL there",
            nullable.join(", ")
        ),
    ))
}

/// The types the job can read each column of `crm.bookings` as, by the catalog's type
/// name (`pg_type.typname`); `enum` stands for any enum type.
const BOOKING_TYPES: &[(&str, &[&str], &str)] = &[
    ("id", &["uuid"], "uuid"),
    ("tenant_id", &["uuid"], "uuid"),
    ("deal_id", &["uuid"], "uuid"),
    ("property_object_id", &["uuid"], "uuid"),
    (
        "status",
        &["text", "varchar", "bpchar", "enum"],
        "text, varchar or an enum",
    ),
    (
        "reserve_expires_at",
        &["timestamptz"],
        "timestamptz (timestamp with time zone)",
    ),
    (
        "booking_expires_at",
        &["timestamptz"],
        "timestamptz (timestamp with time zone)",
    ),
    (
        "expired_at",
        &["timestamptz"],
        "timestamptz (timestamp with time zone)",
    ),
    (
        "updated_at",
        &["timestamptz", "timestamp"],
        "timestamptz or timestamp",
    ),
    (
        "version",
        &["int2", "int4", "int8"],
        "smallint, integer or bigint",
    ),
];

/// Refuses a `crm.bookings` whose columns have types the job cannot read or write,
/// naming each column, its type and what is expected: a CRM with another column type
/// fails here with 78 instead of mid-cycle.
fn check_types(client: &mut impl GenericClient, need: Need) -> Result<()> {
    if matches!(need, Need::Relay | Need::Operate | Need::Requeue) {
        return Ok(());
    }
    let rows = client
        .query(
            "SELECT a.attname::text AS column_name,
                    CASE WHEN t.typtype = 'e' THEN 'enum' ELSE t.typname::text END AS kind,
                    format_type(a.atttypid, a.atttypmod) AS declared
               FROM pg_catalog.pg_attribute a
               JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
               JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
               JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
              WHERE s.nspname = 'crm' AND c.relname = 'bookings'
                AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[],
        )
        .classify(Failure::Temporary, "cannot read the schema catalog")?;
    let mut wrong = Vec::new();
    for row in &rows {
        let column: String = row.get("column_name");
        let kind: String = row.get("kind");
        let declared: String = row.get("declared");
        if let Some((_, allowed, expected)) = BOOKING_TYPES.iter().find(|(c, _, _)| *c == column)
            && !allowed.contains(&kind.as_str())
        {
            wrong.push(format!(
                "crm.bookings.{column} is {declared}, expected {expected}"
            ));
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(fail(
        Failure::Config,
        format!(
            "schema not as expected: {} (the job cannot read or write these types)",
            wrong.join("; ")
        ),
    ))
}

/// The declared type of `crm.bookings.status`, as SQL can name it (quoted and
/// schema-qualified where needed): the cycle casts the new status to it.
pub fn status_type(client: &mut impl GenericClient) -> Result<String> {
    let row = client
        .query_one(
            "SELECT format_type(a.atttypid, NULL) AS declared
               FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = 'crm.bookings'::regclass AND a.attname = 'status'
                AND NOT a.attisdropped",
            &[],
        )
        .classify(
            Failure::Temporary,
            "cannot read the type of crm.bookings.status",
        )?;
    Ok(row.get("declared"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_privileges_are_grouped_by_table_in_order() {
        let row = |p: &str, t: &str, c: &str| (p.to_owned(), t.to_owned(), c.to_owned());
        assert_eq!(
            describe_missing(&[
                row("UPDATE", "bookings", "status"),
                row("UPDATE", "bookings", "version"),
                row("INSERT", "outbox", "id"),
                row("DELETE", "booking_expiration_poison", ""),
            ]),
            "UPDATE on crm.bookings (status, version), INSERT on crm.outbox (id), \
             DELETE on crm.booking_expiration_poison"
        );
    }

    #[test]
    fn every_privilege_names_a_table_the_subcommand_checks() {
        for need in [
            Need::Cycle,
            Need::Relay,
            Need::Report,
            Need::Explain,
            Need::Operate,
            Need::Requeue,
        ] {
            for p in need.privileges() {
                let (_, cols) = need
                    .tables()
                    .iter()
                    .find(|(t, _)| *t == p.table)
                    .unwrap_or_else(|| panic!("{need:?}: {} is not checked", p.table));
                for c in p.columns {
                    assert!(
                        cols.contains(c),
                        "{need:?}: crm.{}.{c} is not checked",
                        p.table
                    );
                }
            }
        }
    }
}
