//! The expiration cycle's SQL: the claim per phase, the skipped-locked count, the
//! set-based batch write (bookings + audit + timeline + outbox in one statement) with
//! poison isolation by savepoints, and the quarantine of poison rows.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient, Statement, Transaction};
use uuid::Uuid;

use crate::domain::{AGGREGATE_TYPE, BookingRow, EVENT_TYPE, Expiry, Phase, TOPIC};

/// Who the audit trail names as the actor of an expiry.
const ACTOR: &str = "system:booking-expiration";

/// The overdue predicate of a phase, with `$1` = AsOf. The statuses are written as
/// literals (from the domain's list) so the planner can match them to the partial
/// indexes' predicates.
pub(crate) fn overdue_predicate(phase: Phase) -> String {
    let statuses: Vec<String> = phase
        .active_statuses()
        .iter()
        .map(|s| format!("'{s}'"))
        .collect();
    format!(
        "b.status IN ({}) AND b.{} < $1",
        statuses.join(", "),
        deadline_column(phase)
    )
}

pub(crate) fn deadline_column(phase: Phase) -> &'static str {
    match phase {
        Phase::Reserve => "reserve_expires_at",
        Phase::Booking => "booking_expires_at",
    }
}

/// Rows in quarantine are not claimed again before their `retry_at`.
const NOT_QUARANTINED: &str = "NOT EXISTS (SELECT 1 FROM crm.booking_expiration_poison p \
     WHERE p.booking_id = b.id AND p.retry_at > $1)";

pub(crate) const BOOKING_COLUMNS: &str = "b.id, b.tenant_id, b.deal_id, b.property_object_id, b.status, \
     b.reserve_expires_at, b.booking_expires_at, b.expired_at, b.version";

/// The candidates of a phase, oldest deadline first: the one predicate that both the
/// claim (`run-once`) and `dry-run` use. `$1` = AsOf, `$2` = the limit.
pub fn candidates_sql(phase: Phase) -> String {
    format!(
        "SELECT {BOOKING_COLUMNS} FROM crm.bookings b \
          WHERE {} AND {NOT_QUARANTINED} \
          ORDER BY b.{col}, b.id LIMIT $2",
        overdue_predicate(phase),
        col = deadline_column(phase),
    )
}

/// The claim: the candidates, locked until the transaction ends, skipping rows another
/// holder has locked.
pub fn claim_sql(phase: Phase) -> String {
    format!("{} FOR UPDATE OF b SKIP LOCKED", candidates_sql(phase))
}

/// Eligible rows at or before the last claimed key (or anywhere, when the claim did not
/// fill the batch) that the claim did not get: someone else holds them.
///
/// The bound is one row comparison, with "no bound" written as the largest key, rather
/// than `$3 IS NULL OR …`: the comparison is then an index condition also in the generic
/// plan a session switches to after five batches, so a drain reads only up to the
/// claimed key instead of the whole remaining backlog per batch.
pub fn skipped_sql(phase: Phase) -> String {
    format!(
        "SELECT count(*) FROM crm.bookings b \
          WHERE {} AND {NOT_QUARANTINED} AND b.id <> ALL($2::uuid[]) \
            AND (b.{col}, b.id) <= (coalesce($3::timestamptz, 'infinity'), \
                                    coalesce($4::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))",
        overdue_predicate(phase),
        col = deadline_column(phase),
    )
}

/// One statement writes a whole batch, whatever its size. Every row is guarded on the
/// status and version it was claimed with, so a stale row is a no-op, never a
/// corruption; only rows the UPDATE really changed get audit, timeline and outbox rows.
const WRITE_SQL: &str = "\
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int4[], $5::uuid[],
                         $6::jsonb[], $7::jsonb[], $8::text[])
        AS t(id, from_status, to_status, expected_version, message_id, payload, headers, timeline_kind)
), expired AS (
    UPDATE crm.bookings b
       SET status = i.to_status, expired_at = $9, updated_at = $9, version = b.version + 1
      FROM input i
     WHERE b.id = i.id AND b.status = i.from_status AND b.version = i.expected_version
       AND b.expired_at IS NULL
    RETURNING b.id, b.tenant_id, b.deal_id, b.version, i.from_status, i.to_status,
              i.message_id, i.payload, i.headers, i.timeline_kind
), audit AS (
    INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
    SELECT id, tenant_id, from_status, to_status, version, $11, $10, $9 FROM expired
), timeline AS (
    INSERT INTO crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
    SELECT deal_id, tenant_id, id, timeline_kind, $9, $10, payload FROM expired
), outbox AS (
    INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
    SELECT message_id, $12, id::text, $13, $14, payload, headers, $9 FROM expired
), released AS (
    DELETE FROM crm.booking_expiration_poison p USING expired e WHERE p.booking_id = e.id
)
SELECT id FROM expired";

/// Records poison rows; each repeat doubles the back-off (1 min, 2, 4, … capped at 1 h).
const QUARANTINE_SQL: &str = "\
INSERT INTO crm.booking_expiration_poison AS p
       (booking_id, tenant_id, phase, reason, error, sqlstate, attempts,
        first_seen_at, last_seen_at, retry_at, last_run_id)
SELECT t.id, t.tenant_id, t.phase, t.reason, t.error, t.sqlstate, 1,
       $7::timestamptz, $7::timestamptz, $7::timestamptz + interval '1 minute', $8
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[])
       AS t(id, tenant_id, phase, reason, error, sqlstate)
ON CONFLICT (booking_id) DO UPDATE
   SET phase = excluded.phase, reason = excluded.reason, error = excluded.error,
       sqlstate = excluded.sqlstate, attempts = p.attempts + 1,
       last_seen_at = excluded.last_seen_at,
       retry_at = excluded.last_seen_at
                  + least(interval '1 minute' * power(2, p.attempts), interval '1 hour'),
       last_run_id = excluded.last_run_id";

/// The cycle's statements, prepared once per session.
pub struct CycleStatements {
    claim: [Statement; 2],
    skipped: [Statement; 2],
    write: Statement,
    quarantine: Statement,
}

impl CycleStatements {
    pub fn prepare(client: &mut Client) -> Result<Self> {
        let mut prepare = |sql: &str| {
            client
                .prepare(sql)
                .context("cannot prepare the cycle's statements")
        };
        Ok(CycleStatements {
            claim: [
                prepare(&claim_sql(Phase::Reserve))?,
                prepare(&claim_sql(Phase::Booking))?,
            ],
            skipped: [
                prepare(&skipped_sql(Phase::Reserve))?,
                prepare(&skipped_sql(Phase::Booking))?,
            ],
            write: prepare(WRITE_SQL)?,
            quarantine: prepare(QUARANTINE_SQL)?,
        })
    }
}

fn index(phase: Phase) -> usize {
    match phase {
        Phase::Reserve => 0,
        Phase::Booking => 1,
    }
}

pub fn booking_row(row: &postgres::Row) -> BookingRow {
    BookingRow {
        id: row.get(0),
        tenant_id: row.get(1),
        deal_id: row.get(2),
        property_object_id: row.get(3),
        status: row.get(4),
        reserve_expires_at: row.get(5),
        booking_expires_at: row.get(6),
        expired_at: row.get(7),
        version: row.get(8),
    }
}

/// Claims up to `limit` overdue bookings of `phase`, locked until the transaction ends.
pub fn claim(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    limit: u32,
) -> Result<Vec<BookingRow>> {
    let rows = tx.query(&stmts.claim[index(phase)], &[&as_of, &i64::from(limit)])?;
    Ok(rows.iter().map(booking_row).collect())
}

/// How many eligible rows ahead of (or, for a short batch, anywhere around) the claimed
/// range another holder had locked.
pub fn count_skipped(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    claimed: &[BookingRow],
    batch_full: bool,
) -> Result<u64> {
    let ids: Vec<Uuid> = claimed.iter().map(|r| r.id).collect();
    let last = claimed
        .last()
        .filter(|_| batch_full)
        .map(|r| (r.deadline(phase), r.id));
    let (deadline, id) = match last {
        Some((deadline, id)) => (deadline, Some(id)),
        None => (None, None),
    };
    let row = tx.query_one(
        &stmts.skipped[index(phase)],
        &[&as_of, &ids, &deadline, &id],
    )?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

/// One booking to expire: the domain's decision plus the event it publishes.
#[derive(Debug, Clone)]
pub struct BatchWrite {
    pub expiry: Expiry,
    pub message_id: Uuid,
    pub payload: serde_json::Value,
    pub headers: serde_json::Value,
}

/// Why the database refused one booking's write.
#[derive(Debug, Clone, PartialEq)]
pub struct DbRejection {
    pub sqlstate: String,
    pub message: String,
}

/// A booking the cycle could not expire, for the quarantine.
#[derive(Debug, Clone)]
pub struct Poison {
    pub booking_id: Uuid,
    pub tenant_id: Uuid,
    pub phase: Phase,
    pub reason: &'static str,
    pub error: String,
    pub sqlstate: Option<String>,
}

/// What the batch write did.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Bookings expired (audit, timeline and outbox rows written with them).
    pub expired: Vec<Uuid>,
    /// Bookings whose write the database refused, isolated from the rest.
    pub rejected: Vec<(usize, DbRejection)>,
}

/// Writes the batch in one statement. If the database refuses it because of a row's
/// data (a trigger, a constraint), the batch is bisected under savepoints until the
/// offending rows are isolated, and the rest is written: the happy path costs a fixed
/// number of statements, a poison row O(log n) more. Infrastructure errors (lost
/// connection, timeouts, cancellation) are returned and roll the whole batch back.
pub fn write_isolating(
    tx: &mut Transaction<'_>,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &[BatchWrite],
) -> Result<WriteOutcome> {
    let mut outcome = WriteOutcome::default();
    write_part(tx, stmts, run_id, as_of, batch, 0, &mut outcome)?;
    Ok(outcome)
}

fn write_part(
    tx: &mut Transaction<'_>,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    part: &[BatchWrite],
    offset: usize,
    outcome: &mut WriteOutcome,
) -> Result<()> {
    if part.is_empty() {
        return Ok(());
    }
    let mut savepoint = tx.savepoint("expire_batch")?;
    match write_once(&mut savepoint, stmts, run_id, as_of, part) {
        Ok(ids) => {
            savepoint.commit()?;
            outcome.expired.extend(ids);
            Ok(())
        }
        Err(e) if is_row_rejection(&e) => {
            savepoint.rollback()?;
            if let [_] = part {
                let db = e
                    .as_db_error()
                    .expect("a row rejection is a database error");
                outcome.rejected.push((
                    offset,
                    DbRejection {
                        sqlstate: db.code().code().to_owned(),
                        message: db.message().to_owned(),
                    },
                ));
                return Ok(());
            }
            let (left, right) = part.split_at(part.len() / 2);
            write_part(tx, stmts, run_id, as_of, left, offset, outcome)?;
            write_part(
                tx,
                stmts,
                run_id,
                as_of,
                right,
                offset + left.len(),
                outcome,
            )
        }
        Err(e) => Err(e.into()),
    }
}

fn write_once(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    part: &[BatchWrite],
) -> Result<Vec<Uuid>, postgres::Error> {
    let ids: Vec<Uuid> = part.iter().map(|w| w.expiry.booking_id).collect();
    let from: Vec<&str> = part.iter().map(|w| w.expiry.from.as_str()).collect();
    let to: Vec<&str> = part.iter().map(|w| w.expiry.to.as_str()).collect();
    let versions: Vec<i32> = part.iter().map(|w| w.expiry.expected_version).collect();
    let message_ids: Vec<Uuid> = part.iter().map(|w| w.message_id).collect();
    let payloads: Vec<&serde_json::Value> = part.iter().map(|w| &w.payload).collect();
    let headers: Vec<&serde_json::Value> = part.iter().map(|w| &w.headers).collect();
    let kinds: Vec<&str> = part
        .iter()
        .map(|w| w.expiry.phase.timeline_kind())
        .collect();
    let rows = tx.query(
        &stmts.write,
        &[
            &ids,
            &from,
            &to,
            &versions,
            &message_ids,
            &payloads,
            &headers,
            &kinds,
            &as_of,
            &run_id,
            &ACTOR,
            &AGGREGATE_TYPE,
            &EVENT_TYPE,
            &TOPIC,
        ],
    )?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A refusal caused by one row's data, not by the infrastructure: data exceptions,
/// integrity constraints, errors raised by triggers, triggered-action failures.
fn is_row_rejection(e: &postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        matches!(
            &db.code().code()[..2],
            "22" | "23" | "P0" | "09" | "27" | "44"
        )
    })
}

/// Puts poison rows in quarantine (or extends their back-off), in one statement.
pub fn quarantine(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    poison: &[Poison],
) -> Result<()> {
    if poison.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = poison.iter().map(|p| p.booking_id).collect();
    let tenants: Vec<Uuid> = poison.iter().map(|p| p.tenant_id).collect();
    let phases: Vec<&str> = poison.iter().map(|p| p.phase.as_str()).collect();
    let reasons: Vec<&str> = poison.iter().map(|p| p.reason).collect();
    let errors: Vec<&str> = poison.iter().map(|p| p.error.as_str()).collect();
    let states: Vec<Option<&str>> = poison.iter().map(|p| p.sqlstate.as_deref()).collect();
    tx.execute(
        &stmts.quarantine,
        &[
            &ids, &tenants, &phases, &reasons, &errors, &states, &as_of, &run_id,
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_name_exactly_the_phase_statuses() {
        for phase in Phase::ALL {
            let predicate = overdue_predicate(phase);
            for status in phase.active_statuses() {
                assert!(predicate.contains(&format!("'{status}'")), "{predicate}");
            }
            assert!(predicate.contains(&format!("b.{} < $1", deadline_column(phase))));
        }
    }
}
