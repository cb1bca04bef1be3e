//! The quarantine of poison rows: a row the guard or the database refused is recorded
//! with the version and status it was seen with, and not claimed again before its
//! back-off ends; entries that no longer describe their booking are released.

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use super::Poison;
use super::statements::CycleStatements;
use crate::Conn;

/// Records poison rows with the version and status they were seen with. A repeat on
/// the same version doubles the back-off (1 min, 2, 4, … capped at 1 h); a row seen
/// with another version is a new case and starts over. Neither the back-off nor the
/// attempt counter can overflow, however long a row stays bad: the exponent is capped
/// before the product is formed, and the counter saturates. `$1` = AsOf, `$2` = the run
/// id; `$3`…`$10`: one array per column of `t`, one element per row.
pub(super) const QUARANTINE_SQL: &str = "\
INSERT INTO crm.booking_expiration_poison AS p
       (booking_id, tenant_id, phase, reason, error, sqlstate, attempts,
        first_seen_at, last_seen_at, retry_at, last_run_id, booking_version, booking_status)
SELECT t.id, t.tenant_id, t.phase, t.reason, t.error, t.sqlstate, 1,
       $1::timestamptz, $1::timestamptz, $1::timestamptz + interval '1 minute', $2,
       t.version, t.status
  FROM unnest($3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::text[],
              $9::int8[], $10::text[])
       AS t(id, tenant_id, phase, reason, error, sqlstate, version, status)
ON CONFLICT (booking_id) DO UPDATE
   SET phase = excluded.phase, reason = excluded.reason, error = excluded.error,
       sqlstate = excluded.sqlstate,
       attempts = CASE WHEN p.booking_version IS NOT DISTINCT FROM excluded.booking_version
                        AND p.booking_status IS NOT DISTINCT FROM excluded.booking_status
                       THEN least(p.attempts, 2147483646) + 1
                       ELSE 1 END,
       first_seen_at = CASE WHEN p.booking_version IS NOT DISTINCT FROM excluded.booking_version
                             AND p.booking_status IS NOT DISTINCT FROM excluded.booking_status
                            THEN p.first_seen_at
                            ELSE excluded.first_seen_at END,
       last_seen_at = excluded.last_seen_at,
       retry_at = excluded.last_seen_at
                  + CASE WHEN p.booking_version IS NOT DISTINCT FROM excluded.booking_version
                          AND p.booking_status IS NOT DISTINCT FROM excluded.booking_status
                         THEN least(interval '1 minute' * power(2, least(p.attempts, 6)),
                                    interval '1 hour')
                         ELSE interval '1 minute' END,
       last_run_id = excluded.last_run_id,
       booking_version = excluded.booking_version,
       booking_status = excluded.booking_status";

/// Quarantine entries whose booking is gone or no longer the row that was quarantined
/// (another version or status), at most 1,000 a cycle: an entry outlives its booking's
/// change by one cycle at most, and the table holds only rows that are still bad.
pub(super) const RELEASE_STALE_SQL: &str = "\
DELETE FROM crm.booking_expiration_poison
 WHERE booking_id IN (
       SELECT p.booking_id FROM crm.booking_expiration_poison p
        WHERE NOT EXISTS (SELECT 1 FROM crm.bookings b
                           WHERE b.id = p.booking_id
                             AND b.version = p.booking_version
                             AND b.status::text = p.booking_status)
        LIMIT 1000)";

/// Puts poison rows in quarantine (or extends their back-off), in one statement.
pub fn quarantine(
    tx: &mut impl Conn,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    poison: &[Poison],
) -> Result<()> {
    let tx = tx.pg();
    if poison.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = poison.iter().map(|p| p.booking_id).collect();
    let tenants: Vec<Uuid> = poison.iter().map(|p| p.tenant_id).collect();
    let phases: Vec<&str> = poison.iter().map(|p| p.phase.as_str()).collect();
    let reasons: Vec<&str> = poison.iter().map(|p| p.reason).collect();
    let errors: Vec<&str> = poison.iter().map(|p| p.error.as_str()).collect();
    let states: Vec<Option<&str>> = poison.iter().map(|p| p.sqlstate.as_deref()).collect();
    let versions: Vec<i64> = poison.iter().map(|p| p.version).collect();
    let statuses: Vec<&str> = poison.iter().map(|p| p.status.as_str()).collect();
    let statement = stmts.quarantine.get(tx)?;
    tx.execute(
        statement,
        &[
            &as_of, &run_id, &ids, &tenants, &phases, &reasons, &errors, &states, &versions,
            &statuses,
        ],
    )?;
    Ok(())
}

/// Removes quarantine entries that no longer describe their booking; returns how many.
pub fn release_stale_quarantine(client: &mut impl Conn, stmts: &CycleStatements) -> Result<u64> {
    let client = client.pg();
    Ok(client.execute(&stmts.release_stale, &[])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quarantine_numbers_its_parameters_in_the_order_they_appear() {
        assert_eq!(
            super::super::statements::parameters(QUARANTINE_SQL),
            (1..=10).collect::<Vec<_>>()
        );
        assert!(super::super::statements::parameters(RELEASE_STALE_SQL).is_empty());
    }
}
