//! Adoption of a database migrated by the old script (every file of `sql/` replayed
//! by `psql`, no history): per baseline file, a catalog probe says whether what that
//! file made in release 0.1.0 is there. A file whose objects are all there is recorded
//! as applied (adopted) without running; one whose objects are missing runs.

use anyhow::Result;
use postgres::Client;

use crate::error::{ClassifyExt, Fault};

/// The probe of baseline file `version`: one boolean SQL expression, true when what
/// 0.1.0's file made is all there. `CASE` keeps a privilege function from being asked
/// about a table that does not exist.
fn probe(version: i32) -> Option<&'static str> {
    Some(match version {
        1 => {
            "to_regclass('crm.bookings') IS NOT NULL
             AND valid_index('crm', 'ix_bookings_reserve_expires_at')
             AND valid_index('crm', 'ix_bookings_booking_expires_at')"
        }
        2 => {
            "has_column('crm.outbox', 'seq') AND has_column('crm.outbox', 'failed_at')
             AND valid_index('crm', 'ux_outbox_seq') AND valid_index('crm', 'ix_outbox_pending')
             AND valid_index('crm', 'ix_outbox_published_at')"
        }
        3 => {
            "to_regclass('crm.booking_audit') IS NOT NULL
             AND to_regclass('crm.deal_timeline') IS NOT NULL
             AND valid_index('crm', 'ix_booking_audit_booking_id')
             AND valid_index('crm', 'ix_deal_timeline_deal_id')"
        }
        4 => "to_regclass('crm.booking_expiration_poison') IS NOT NULL",
        5 => "valid_index('crm', 'ix_outbox_failed')",
        6 => {
            "to_regprocedure('crm.outbox_notify()') IS NOT NULL
             AND EXISTS (SELECT FROM pg_catalog.pg_trigger
                          WHERE tgname = 'outbox_notify'
                            AND tgrelid = to_regclass('crm.outbox'))"
        }
        7 => {
            "(SELECT count(*) = 3 FROM pg_catalog.pg_roles
               WHERE rolname IN ('crm_booking_expiration_worker', 'crm_outbox_relay',
                                 'crm_booking_expiration_readonly'))
             AND CASE WHEN to_regclass('crm.outbox') IS NOT NULL
                       AND to_regclass('crm.bookings') IS NOT NULL
                       AND (SELECT count(*) = 3 FROM pg_catalog.pg_roles
                             WHERE rolname IN ('crm_booking_expiration_worker',
                                               'crm_outbox_relay',
                                               'crm_booking_expiration_readonly'))
                  THEN has_schema_privilege('crm_booking_expiration_worker', 'crm', 'USAGE')
                   AND has_table_privilege('crm_outbox_relay', 'crm.outbox', 'DELETE')
                   AND has_table_privilege('crm_booking_expiration_readonly', 'crm.bookings', 'SELECT')
                  ELSE false END"
        }
        8 => {
            "has_column('crm.booking_expiration_poison', 'booking_version')
             AND has_column('crm.booking_expiration_poison', 'booking_status')
             AND has_column('crm.outbox', 'next_attempt_at')
             AND has_column('crm.outbox', 'failures')
             AND valid_index('crm', 'ix_outbox_backing_off')"
        }
        9 => {
            "to_regclass('crm.booking_expiration_pause') IS NOT NULL
             AND to_regclass('crm.booking_expiration_operations') IS NOT NULL
             AND has_column('crm.outbox', 'delivered_partition')
             AND has_column('crm.outbox', 'delivered_offset')
             AND valid_index('crm', 'ix_booking_expiration_operations_at')
             AND valid_index('crm', 'ix_outbox_aggregateid')
             AND EXISTS (SELECT FROM pg_catalog.pg_roles
                          WHERE rolname = 'crm_booking_expiration_operator')"
        }
        // 010 makes nothing: the old script applied it right after 009.
        10 => "true",
        11 => "to_regprocedure('crm.booking_expiration_xmin_holders()') IS NOT NULL",
        12 => "to_regclass('crm.booking_expiration_phase_failure') IS NOT NULL",
        _ => return None,
    })
}

/// The helpers the probes read with, as SQL that expands them (no function is made in
/// the database: the probes change nothing).
fn expand(probe: &str) -> String {
    let mut sql = probe.to_owned();
    for helper in ["valid_index(", "has_column("] {
        while let Some(at) = sql.find(helper) {
            let close = at + sql[at..].find(')').unwrap_or(sql.len() - at - 1);
            let args: Vec<String> = sql[at + helper.len()..close]
                .split(',')
                .map(|a| a.trim().to_owned())
                .collect();
            let (first, second) = (&args[0], args.get(1).map_or("''", String::as_str));
            let read = if helper == "valid_index(" {
                format!(
                    "EXISTS (SELECT FROM pg_catalog.pg_index i
                               JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
                               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                              WHERE n.nspname = {first} AND c.relname = {second} AND i.indisvalid)"
                )
            } else {
                format!(
                    "EXISTS (SELECT FROM pg_catalog.pg_attribute
                              WHERE attrelid = to_regclass({first}) AND attname = {second}
                                AND NOT attisdropped)"
                )
            };
            sql.replace_range(at..=close, &read);
        }
    }
    sql
}

/// Whether what baseline file `version` made is all there; `None` for a file after
/// the baseline (never adopted).
pub fn present(client: &mut Client, version: i32) -> Result<Option<bool>> {
    let Some(probe) = probe(version) else {
        return Ok(None);
    };
    let sql = format!("SELECT ({})", expand(probe));
    let row = client
        .query_one(&sql, &[])
        .classify(Fault::Temporary, "cannot read the catalog for adoption")?;
    Ok(Some(row.get(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_baseline_file_has_a_probe_and_later_ones_none() {
        for v in 1..=super::super::embedded::BASELINE {
            assert!(probe(v).is_some(), "{v}");
        }
        assert!(probe(super::super::embedded::BASELINE + 1).is_none());
    }

    #[test]
    fn the_helpers_expand_into_catalog_reads() {
        let sql = expand("valid_index('crm', 'ix_a') AND has_column('crm.t', 'c')");
        assert!(sql.contains("c.relname = 'ix_a' AND i.indisvalid"), "{sql}");
        assert!(
            sql.contains("to_regclass('crm.t') AND attname = 'c'"),
            "{sql}"
        );
        assert!(
            !sql.contains("valid_index") && !sql.contains("has_column("),
            "{sql}"
        );
        for v in 1..=12 {
            let sql = expand(probe(v).unwrap());
            assert!(
                !sql.contains("valid_index") && !sql.contains("has_column("),
                "{v}: {sql}"
            );
        }
    }
}
