//! A phase whose batch failed, remembered across runs (`sql/012_phase_failures.sql`):
//! the next cycle takes that phase's first batch one booking per transaction.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use crate::Conn;
use crate::domain::Phase;

/// How a phase's batch failed in the cycle before.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseFailure {
    pub phase: Phase,
    /// Consecutive cycles it failed in.
    pub failures: i32,
    pub sqlstate: Option<String>,
    pub error: String,
}

/// The phases whose batch failed last cycle; `None` when this session cannot read them
/// (migration 12 not applied, or the role lacks the grant).
pub fn phase_failures(client: &mut impl Conn) -> Result<Option<Vec<PhaseFailure>>> {
    let client = client.pg();
    let readable: bool = client
        .query_one(
            // Each privilege on its own: a list is true when any one of them is held.
            // (CASE: the table's privileges are asked only when it exists.)
            "SELECT CASE WHEN to_regclass('crm.booking_expiration_phase_failure') IS NULL
                         THEN false
                         ELSE has_table_privilege('crm.booking_expiration_phase_failure', 'SELECT')
                          AND has_table_privilege('crm.booking_expiration_phase_failure', 'INSERT')
                          AND has_table_privilege('crm.booking_expiration_phase_failure', 'UPDATE')
                          AND has_table_privilege('crm.booking_expiration_phase_failure', 'DELETE')
                    END",
            &[],
        )
        .context("cannot look up crm.booking_expiration_phase_failure")?
        .get(0);
    if !readable {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT phase, failures, sqlstate, error FROM crm.booking_expiration_phase_failure",
            &[],
        )
        .context("cannot read crm.booking_expiration_phase_failure")?;
    Ok(Some(
        rows.iter()
            .filter_map(|r| {
                let phase = match r.get::<_, &str>("phase") {
                    "Reserve" => Phase::Reserve,
                    "Booking" => Phase::Booking,
                    _ => return None,
                };
                Some(PhaseFailure {
                    phase,
                    failures: r.get("failures"),
                    sqlstate: r.get("sqlstate"),
                    error: r.get("error"),
                })
            })
            .collect(),
    ))
}

/// Records that `phase`'s batch failed in run `run_id` at `at` (one more consecutive
/// failure when it failed last cycle too).
pub fn record_phase_failure(
    client: &mut impl Conn,
    phase: Phase,
    sqlstate: Option<&str>,
    error: &str,
    at: DateTime<Utc>,
    run_id: Uuid,
) -> Result<()> {
    let client = client.pg();
    client
        .execute(
            "INSERT INTO crm.booking_expiration_phase_failure AS f
                    (phase, failures, sqlstate, error, first_failed_at, last_failed_at, last_run_id)
             VALUES ($1, 1, $2, $3, $4, $4, $5)
             ON CONFLICT (phase) DO UPDATE
                SET failures = least(f.failures, 2147483646) + 1, sqlstate = excluded.sqlstate,
                    error = excluded.error, last_failed_at = excluded.last_failed_at,
                    last_run_id = excluded.last_run_id",
            &[&phase.as_str(), &sqlstate, &error, &at, &run_id],
        )
        .context("cannot record the phase's failure in crm.booking_expiration_phase_failure")?;
    Ok(())
}

/// Forgets `phase`'s failure: it ran clean.
pub fn clear_phase_failure(client: &mut impl Conn, phase: Phase) -> Result<()> {
    let client = client.pg();
    client
        .execute(
            "DELETE FROM crm.booking_expiration_phase_failure WHERE phase = $1",
            &[&phase.as_str()],
        )
        .context("cannot clear the phase's failure in crm.booking_expiration_phase_failure")?;
    Ok(())
}
