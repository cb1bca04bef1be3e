//! "Is the schema migrated?", answered from the catalog before any work, so a database
//! without it fails with 78 and a list of what is missing instead of a mid-cycle error.

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
    ],
);

impl Need {
    fn tables(self) -> &'static [(&'static str, &'static [&'static str])] {
        match self {
            Need::Cycle => &[BOOKINGS, OUTBOX, AUDIT, TIMELINE, POISON],
            Need::Relay => &[OUTBOX],
            Need::Report => &[BOOKINGS, POISON, OUTBOX],
        }
    }
}

/// Fails with "schema not migrated: …" naming every missing table and column. Reads
/// `pg_catalog`, which (unlike `information_schema`) lists columns whatever the role's
/// privileges are.
pub fn check_schema(client: &mut impl GenericClient, need: Need) -> Result<()> {
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
            (row.get(0), row.get(1), row.get(2));
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
