//! "Is the schema migrated?", answered from the catalog before any work, so a database
//! without the schema fails as a configuration fault with a list of what is missing
//! ([`Lack`]) instead of a mid-cycle error: the tables and columns each need asks for,
//! the columns of `crm.bookings` read as never NULL, and the types the job can read
//! them as. What the role may do is [`super::privileges`]'s; both are read in one round
//! trip ([`super::preflight`]).

use std::fmt;

use postgres::SimpleQueryRow;

/// What a piece of work needs of the schema (the program knows which of its commands
/// does which). Later migrations' tables a database at the schema before may lack
/// (`booking_expiration_phase_failure` of 12, `booking_expiration_topic_wait` of 14)
/// are probed where used instead: a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaNeed {
    /// The expiration cycle: bookings, outbox, audit, timeline, poison.
    Cycle,
    /// The outbox relay: the outbox only.
    Relay,
    /// The reports of candidates and backlog: bookings, poison, outbox.
    Report,
    /// One booking's story: what the reports read, and its audit and timeline rows.
    Explain,
    /// The pause switches: the switches and the operations trail.
    Operate,
    /// Re-queueing outbox rows: the outbox and the operations trail.
    Requeue,
    /// The outbox's audit against its topics (without repairing): the outbox.
    Audit,
}

impl SchemaNeed {
    /// Every need, one per kind of command.
    pub const ALL: [SchemaNeed; 7] = [
        SchemaNeed::Cycle,
        SchemaNeed::Relay,
        SchemaNeed::Report,
        SchemaNeed::Explain,
        SchemaNeed::Operate,
        SchemaNeed::Requeue,
        SchemaNeed::Audit,
    ];
}

impl fmt::Display for SchemaNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchemaNeed::Cycle => "the expiration cycle",
            SchemaNeed::Relay => "the outbox relay",
            SchemaNeed::Report => "the reports",
            SchemaNeed::Explain => "a booking's story",
            SchemaNeed::Operate => "the pause switches",
            SchemaNeed::Requeue => "re-queueing outbox rows",
            SchemaNeed::Audit => "the outbox's audit",
        })
    }
}

/// What the schema, or a role's grants, lack of what a [`SchemaNeed`] asks for: the
/// finding of a preflight's schema or privilege check, as facts. Its `Display` says it
/// in the store's terms; the program says what to run about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lack {
    /// Tables and columns missing, in order ("table crm.bookings", "column
    /// crm.outbox.seq"): the schema is not migrated.
    Unmigrated { missing: Vec<String> },
    /// Columns of `crm.bookings` ("crm.bookings.status") that may hold NULL where the
    /// job reads them as never NULL.
    Nullable { columns: Vec<String> },
    /// Columns of `crm.bookings` of types the job cannot read or write, each with its
    /// type and what is expected ("crm.bookings.version is text, expected …").
    Types { wrong: Vec<String> },
    /// A group role of the job's that does not exist.
    NoRole { role: &'static str },
    /// The grants `user` lacks for `need` ("UPDATE on crm.bookings (status, version),
    /// DELETE on crm.outbox"); `need.group_role()` has them, `need.grants()` grants them.
    Privileges {
        user: String,
        need: SchemaNeed,
        missing: String,
    },
}

impl fmt::Display for Lack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lack::Unmigrated { missing } => {
                write!(f, "schema not migrated: missing {}", missing.join(", "))
            }
            Lack::Nullable { columns } => write!(
                f,
                "schema not as expected: {} may hold NULL; the job needs NOT NULL there",
                columns.join(", ")
            ),
            Lack::Types { wrong } => write!(
                f,
                "schema not as expected: {} (the job cannot read or write these types)",
                wrong.join("; ")
            ),
            Lack::NoRole { role } => write!(f, "role {role} does not exist"),
            Lack::Privileges {
                user,
                need,
                missing,
            } => write!(
                f,
                "role {user} lacks privileges for {need}: {missing} (GRANT {} TO {user}; see {})",
                need.group_role(),
                need.grants()
            ),
        }
    }
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
pub(super) const AUDIT: (&str, &[&str]) = (
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
pub(super) const TIMELINE: (&str, &[&str]) = (
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

/// The columns of a booking the claim and the reports read.
pub(super) const BOOKING_READ: &[&str] = &[
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

impl SchemaNeed {
    pub(super) fn tables(self) -> &'static [(&'static str, &'static [&'static str])] {
        match self {
            SchemaNeed::Cycle => &[BOOKINGS, OUTBOX, AUDIT, TIMELINE, POISON, PAUSE],
            SchemaNeed::Relay => &[OUTBOX, PAUSE],
            SchemaNeed::Report => &[BOOKINGS, POISON, OUTBOX],
            SchemaNeed::Explain => &[BOOKINGS, POISON, OUTBOX, AUDIT, TIMELINE],
            SchemaNeed::Operate => &[PAUSE, OPERATIONS],
            SchemaNeed::Requeue => &[OUTBOX, OPERATIONS],
            SchemaNeed::Audit => &[OUTBOX],
        }
    }

    /// The group role of `sql/007_roles.sql` (or `009_operations.sql`) that has what
    /// this need asks for.
    pub fn group_role(self) -> &'static str {
        match self {
            SchemaNeed::Cycle => "crm_booking_expiration_worker",
            SchemaNeed::Relay => "crm_outbox_relay",
            SchemaNeed::Report | SchemaNeed::Explain | SchemaNeed::Audit => {
                "crm_booking_expiration_readonly"
            }
            SchemaNeed::Operate | SchemaNeed::Requeue => "crm_booking_expiration_operator",
        }
    }

    /// The migration that grants the group role what this need asks for.
    pub fn grants(self) -> &'static str {
        match self {
            SchemaNeed::Cycle | SchemaNeed::Relay | SchemaNeed::Report | SchemaNeed::Audit => {
                "sql/007_roles.sql"
            }
            SchemaNeed::Explain | SchemaNeed::Operate | SchemaNeed::Requeue => {
                "sql/009_operations.sql"
            }
        }
    }

    /// Whether the work reads `crm.bookings` (and so needs its columns' nullability and
    /// types checked).
    fn reads_bookings(self) -> bool {
        !matches!(
            self,
            SchemaNeed::Relay | SchemaNeed::Operate | SchemaNeed::Requeue | SchemaNeed::Audit
        )
    }
}

/// A text literal of SQL (the tables' and columns' names are the job's own constants).
pub(super) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A `text[]` literal of SQL.
pub(super) fn text_array<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(literal).collect();
    format!("ARRAY[{}]::text[]", items.join(", "))
}

/// The statements of the schema check for `need`, for one simple-query batch: the
/// missing tables and columns, then (when it reads bookings) the nullable columns, then
/// the columns' types. Reads `pg_catalog`, which (unlike `information_schema`) lists
/// columns whatever the role's privileges are.
pub(super) fn statements(need: SchemaNeed) -> Vec<String> {
    let (mut tables, mut columns) = (Vec::new(), Vec::new());
    for (table, cols) in need.tables() {
        for col in *cols {
            tables.push(*table);
            columns.push(*col);
        }
    }
    // Each table and column is looked up by the catalogs' own indexes (a lateral
    // subquery with LIMIT is always a parameterised scan): a join let the planner hash
    // the whole of pg_attribute, a few milliseconds on a small database and growing
    // with every table a host's other applications have, every minute.
    let mut out = vec![format!(
        "SELECT w.tbl, w.col, (c.oid IS NOT NULL)::text AS table_exists
           FROM unnest({}, {}) WITH ORDINALITY AS w(tbl, col, n)
           LEFT JOIN LATERAL (
                SELECT c.oid FROM pg_catalog.pg_class c
                 WHERE c.relname = w.tbl::name AND c.relnamespace = to_regnamespace('crm')
                   AND c.relkind IN ('r', 'p')
                 LIMIT 1) c ON true
           LEFT JOIN LATERAL (
                SELECT a.attname FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attname = w.col::name
                   AND a.attnum > 0 AND NOT a.attisdropped
                 LIMIT 1) a ON true
          WHERE a.attname IS NULL
          ORDER BY w.n",
        text_array(tables),
        text_array(columns),
    )];
    if need.reads_bookings() {
        out.push(format!(
            "SELECT a.attname::text AS column_name FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = to_regclass('crm.bookings')
                AND a.attname::text = ANY({}) AND NOT a.attnotnull
              ORDER BY a.attnum",
            text_array(BOOKINGS_NOT_NULL.iter().copied()),
        ));
        out.push(
            "SELECT a.attname::text AS column_name,
                    CASE WHEN t.typtype = 'e' THEN 'enum' ELSE t.typname::text END AS kind,
                    format_type(a.atttypid, a.atttypmod) AS declared
               FROM pg_catalog.pg_attribute a
               JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
              WHERE a.attrelid = to_regclass('crm.bookings')
                AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum"
                .to_owned(),
        );
    }
    out
}

/// Judges the answers to [`statements`] (one row set each, in order): the first
/// [`Lack`] found, every missing table and column ([`Lack::Unmigrated`]), then the
/// nullable columns, then the wrong types.
pub(super) fn judge(need: SchemaNeed, answers: &[Vec<SimpleQueryRow>]) -> Result<(), Lack> {
    let mut answers = answers.iter();
    judge_tables(answers.next().map_or(&[], Vec::as_slice))?;
    if need.reads_bookings() {
        judge_not_null(answers.next().map_or(&[], Vec::as_slice))?;
        judge_types(answers.next().map_or(&[], Vec::as_slice))?;
    }
    Ok(())
}

fn judge_tables(rows: &[SimpleQueryRow]) -> Result<(), Lack> {
    let mut missing: Vec<String> = Vec::new();
    for row in rows {
        let (table, column) = (row.get("tbl").unwrap_or(""), row.get("col").unwrap_or(""));
        let what = if row.get("table_exists") == Some("true") {
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
        Err(Lack::Unmigrated { missing })
    }
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

fn judge_not_null(rows: &[SimpleQueryRow]) -> Result<(), Lack> {
    let columns: Vec<String> = rows
        .iter()
        .map(|r| format!("crm.bookings.{}", r.get("column_name").unwrap_or("")))
        .collect();
    if columns.is_empty() {
        return Ok(());
    }
    Err(Lack::Nullable { columns })
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
/// fails here, before any work, instead of mid-cycle.
fn judge_types(rows: &[SimpleQueryRow]) -> Result<(), Lack> {
    let mut wrong = Vec::new();
    for row in rows {
        let column = row.get("column_name").unwrap_or("");
        let kind = row.get("kind").unwrap_or("");
        let declared = row.get("declared").unwrap_or("");
        if let Some((_, allowed, expected)) = BOOKING_TYPES.iter().find(|(c, _, _)| *c == column)
            && !allowed.contains(&kind)
        {
            wrong.push(format!(
                "crm.bookings.{column} is {declared}, expected {expected}"
            ));
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Lack::Types { wrong })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_as_sql_literals() {
        assert_eq!(text_array(["a", "it's"]), "ARRAY['a', 'it''s']::text[]");
    }
}
