//! "May this role do what the work asks?", answered from the catalog before any work,
//! so a role without the grants fails as a configuration fault naming every missing
//! grant and the group role of `sql/` that gives it ([`Lack::Privileges`]), instead of
//! a mid-cycle error.

use postgres::SimpleQueryRow;

use super::schema::{AUDIT, BOOKING_READ, Lack, SchemaNeed, TIMELINE, text_array};

/// A privilege on a table of `crm`: on the whole table, or on the listed columns.
#[derive(Debug, Clone, Copy)]
pub(super) struct Privilege {
    pub(super) privilege: &'static str,
    pub(super) table: &'static str,
    pub(super) columns: &'static [&'static str],
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

impl SchemaNeed {
    /// The grants the need asks for, each on a table [`SchemaNeed::tables`] checks.
    pub(super) fn privileges(self) -> &'static [Privilege] {
        match self {
            SchemaNeed::Cycle => CYCLE,
            SchemaNeed::Relay => RELAY,
            SchemaNeed::Report => REPORT,
            SchemaNeed::Explain => EXPLAIN,
            SchemaNeed::Operate => OPERATE,
            SchemaNeed::Requeue => REQUEUE,
            SchemaNeed::Audit => AUDIT_READ,
        }
    }
}

/// What the expiration cycle does: claim (read and row-lock) and expire bookings, append
/// audit, timeline and outbox rows, keep the quarantine. As granted in
/// `sql/007_roles.sql`.
pub(super) const CYCLE: &[Privilege] = &[
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

/// What the outbox relay does: read the outbox, mark rows, purge published ones.
pub(super) const RELAY: &[Privilege] = &[
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

/// What the reports of candidates and backlog read.
pub(super) const REPORT: &[Privilege] = &[
    on_columns("SELECT", "bookings", BOOKING_READ),
    on("SELECT", "booking_expiration_poison"),
    on("SELECT", "outbox"),
];

/// What the outbox's audit reads (the relay's own tables, where it may, are probed as
/// re-queueing probes them).
pub(super) const AUDIT_READ: &[Privilege] = &[on("SELECT", "outbox")];

/// What a booking's story reads.
pub(super) const EXPLAIN: &[Privilege] = &[
    on_columns("SELECT", "bookings", BOOKING_READ),
    on("SELECT", "booking_expiration_poison"),
    on("SELECT", "outbox"),
    on("SELECT", "booking_audit"),
    on("SELECT", "deal_timeline"),
];

/// What setting and clearing the pause switches do.
pub(super) const OPERATE: &[Privilege] = &[
    on("SELECT", "booking_expiration_pause"),
    on("INSERT", "booking_expiration_pause"),
    on("DELETE", "booking_expiration_pause"),
    on("INSERT", "booking_expiration_operations"),
];

/// What re-queueing does: re-queue outbox rows (never insert any).
pub(super) const REQUEUE: &[Privilege] = &[
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

/// The statement listing each privilege `need` asks for that the current role lacks
/// (directly, through a group role, or as superuser). A table or column that does not
/// exist is skipped, never an error: the schema check, judged first, names it.
pub(super) fn statement(need: SchemaNeed) -> String {
    statement_as(need, None)
}

/// [`statement`] for the role `role` (it must exist) instead of the current one.
pub(super) fn statement_as(need: SchemaNeed, role: Option<&str>) -> String {
    let (who, of) = match role {
        Some(role) => (
            super::schema::literal(role),
            format!("{}, ", super::schema::literal(role)),
        ),
        None => ("current_user::text".to_owned(), String::new()),
    };
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
    // A lateral subquery with LIMIT looks each column up by pg_attribute's index; a
    // subplan let the planner hash the whole catalog (see schema::statements).
    format!(
        "SELECT w.priv, w.tbl, w.col, {who} AS role_name
           FROM unnest({}, {}, {}) WITH ORDINALITY AS w(priv, tbl, col, n)
          CROSS JOIN LATERAL (SELECT to_regclass(format('crm.%I', w.tbl)) AS rel) r
           LEFT JOIN LATERAL (
                SELECT true AS present FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = r.rel AND a.attname = w.col::name
                   AND a.attnum > 0 AND NOT a.attisdropped
                 LIMIT 1) a ON true
          WHERE NOT CASE WHEN r.rel IS NULL THEN true
                         WHEN w.col = '' THEN has_table_privilege({of}r.rel, w.priv)
                         WHEN a.present IS NULL THEN true
                         ELSE has_column_privilege({of}r.rel, w.col, w.priv)
                    END
          ORDER BY w.n",
        text_array(privileges),
        text_array(tables),
        text_array(columns),
    )
}

/// Fails with [`Lack::Privileges`] ("role … lacks privileges …") naming each privilege
/// [`statement`] found missing.
pub(super) fn judge(need: SchemaNeed, rows: &[SimpleQueryRow]) -> Result<(), Lack> {
    let Some(user) = rows.first().and_then(|r| r.get("role_name")) else {
        return Ok(());
    };
    let missing: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let get = |c: &str| r.get(c).unwrap_or("").to_owned();
            (get("priv"), get("tbl"), get("col"))
        })
        .collect();
    Err(Lack::Privileges {
        user: user.to_owned(),
        need,
        missing: describe_missing(&missing),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_privilege_names_a_table_the_subcommand_checks() {
        for need in SchemaNeed::ALL {
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
}
