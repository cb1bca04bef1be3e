//! The batch write: bookings, audit, timeline and outbox in one statement, without a
//! savepoint (`write_direct`, nearly always), or under savepoints that isolate the rows
//! the database refuses (`write_isolating`, with the bisection of `isolation`).

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use postgres::types::{Json, ToSql};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::isolation::{Isolated, Keep, Probe, isolate};
use super::statements::CycleStatements;
use crate::Conn;
use crate::domain::{AGGREGATE_TYPE, BatchWrite, EVENT_TYPE};
use crate::error::DbRejection;

/// Who the audit trail names as the actor of an expiry.
const ACTOR: &str = "system:booking-expiration";

/// One statement writes a whole batch, whatever its size. Every row is guarded on the
/// status and version it was claimed with, so a stale row is a no-op, never a
/// corruption; only rows the UPDATE really changed get audit, timeline and outbox rows.
/// The outbox rows come from their own arrays (`events`: one element per outbox row,
/// keyed by booking), so an expiry writes one row per configured contract version,
/// each with its own id, topic, payload and headers, in the same statement. An event
/// whose payload is the timeline's details (version 1's is) is sent as NULL and takes
/// them: each JSON document crosses the wire and is parsed once.
///
/// Each outbox row's `seq` is drawn after its transaction has an xid (the relay's
/// watermark relies on it, docs/design.md "The relay's state"): the rows come from the
/// bookings the UPDATE changed (which assigned the xid), and `pg_current_xact_id()`
/// in the insert's own WHERE says so outright, ahead of the `seq` default.
///
/// The parameters are numbered in the order they first appear; [`WriteParams`] names
/// each. `status_type` is the declared type of `crm.bookings.status` (from the catalog),
/// so the new status is cast to it: text, varchar and enums all work.
pub(super) fn write_sql(status_type: &str) -> String {
    format!(
        "\
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int8[], $5::jsonb[], $6::text[])
        AS t(id, from_status, to_status, expected_version, payload, timeline_kind)
), events AS (
    SELECT * FROM unnest($7::uuid[], $8::uuid[], $9::text[], $10::jsonb[], $11::jsonb[])
        WITH ORDINALITY AS e(booking_id, message_id, topic, payload, headers, ord)
), expired AS (
    UPDATE crm.bookings b
       SET status = CAST(i.to_status AS {status_type}), expired_at = $12, updated_at = $12,
           version = b.version + 1
      FROM input i
     WHERE b.id = i.id AND b.status::text = i.from_status AND b.version = i.expected_version
       AND b.expired_at IS NULL
    RETURNING b.id, b.tenant_id, b.deal_id, b.version, i.from_status, i.to_status,
              i.payload, i.timeline_kind
), audit AS (
    INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
    SELECT id, tenant_id, from_status, to_status, version, $13, $14, $12 FROM expired
), timeline AS (
    INSERT INTO crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
    SELECT deal_id, tenant_id, id, timeline_kind, $12, $14, payload FROM expired
), outbox AS (
    INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
    SELECT e.message_id, $15, x.id::text, $16, e.topic, coalesce(e.payload, x.payload), e.headers, $12
      FROM expired x JOIN events e ON e.booking_id = x.id
     WHERE pg_current_xact_id() IS NOT NULL
     ORDER BY e.ord
), released AS (
    DELETE FROM crm.booking_expiration_poison p USING expired e WHERE p.booking_id = e.id
)
SELECT id FROM expired"
    )
}

/// The parameters of [`write_sql`], one field per `$n`, in order.
struct WriteParams<'a> {
    // `input`: one element per expiry.
    /// `$1`
    booking_ids: Vec<Uuid>,
    /// `$2`
    from_statuses: Vec<&'a str>,
    /// `$3`
    to_statuses: Vec<&'a str>,
    /// `$4`
    expected_versions: Vec<i64>,
    /// `$5`: the timeline entry's details.
    details: Vec<Json<&'a RawValue>>,
    /// `$6`
    timeline_kinds: Vec<&'static str>,
    // `events`: one element per outbox row, (expiry, contract version).
    /// `$7`: the booking each outbox row belongs to.
    event_bookings: Vec<Uuid>,
    /// `$8`
    message_ids: Vec<Uuid>,
    /// `$9`
    topics: Vec<&'static str>,
    /// `$10`: NULL when the same document as the booking's details (see [`write_sql`]).
    payloads: Vec<Option<Json<&'a RawValue>>>,
    /// `$11`
    headers: Vec<Json<&'a RawValue>>,
    // One value for the batch.
    /// `$12`: `expired_at`, `updated_at`, the audit's, timeline's and outbox's moment.
    as_of: DateTime<Utc>,
    /// `$13`: the audit's actor.
    actor: &'static str,
    /// `$14`: the audit's run id, the timeline's correlation id.
    run_id: Uuid,
    /// `$15`: the outbox's `aggregatetype`.
    aggregate_type: &'static str,
    /// `$16`: the outbox's `type`.
    event_type: &'static str,
}

impl<'a> WriteParams<'a> {
    fn of(part: &[&'a BatchWrite], run_id: Uuid, as_of: DateTime<Utc>) -> Self {
        let events = || {
            part.iter()
                .flat_map(|w| w.events.iter().map(move |e| (w, e)))
        };
        WriteParams {
            booking_ids: part.iter().map(|w| w.expiry.booking_id).collect(),
            from_statuses: part.iter().map(|w| w.expiry.from.as_str()).collect(),
            to_statuses: part.iter().map(|w| w.expiry.to.as_str()).collect(),
            expected_versions: part.iter().map(|w| w.expiry.expected_version).collect(),
            details: part.iter().map(|w| Json(&*w.details)).collect(),
            timeline_kinds: part
                .iter()
                .map(|w| w.expiry.phase.timeline_kind())
                .collect(),
            event_bookings: events().map(|(w, _)| w.expiry.booking_id).collect(),
            message_ids: events().map(|(_, e)| e.message_id).collect(),
            topics: events().map(|(_, e)| e.topic).collect(),
            payloads: events()
                .map(|(w, e)| (e.payload.get() != w.details.get()).then_some(Json(&*e.payload)))
                .collect(),
            headers: events().map(|(_, e)| Json(&*e.headers)).collect(),
            as_of,
            actor: ACTOR,
            run_id,
            aggregate_type: AGGREGATE_TYPE,
            event_type: EVENT_TYPE,
        }
    }

    /// `$1`, `$2`, … `$16`.
    fn in_order(&self) -> [&(dyn ToSql + Sync); 16] {
        [
            &self.booking_ids,
            &self.from_statuses,
            &self.to_statuses,
            &self.expected_versions,
            &self.details,
            &self.timeline_kinds,
            &self.event_bookings,
            &self.message_ids,
            &self.topics,
            &self.payloads,
            &self.headers,
            &self.as_of,
            &self.actor,
            &self.run_id,
            &self.aggregate_type,
            &self.event_type,
        ]
    }
}

fn write_once(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    part: &[&BatchWrite],
) -> Result<Vec<Uuid>, postgres::Error> {
    let params = WriteParams::of(part, run_id, as_of);
    let rows = tx.query(&stmts.write, &params.in_order())?;
    Ok(rows.iter().map(|r| r.get("id")).collect())
}

/// What the batch write did.
#[derive(Debug, Default)]
pub struct WriteOutcome {
    /// Bookings expired (audit, timeline and outbox rows written with them).
    pub expired: Vec<Uuid>,
    /// Bookings whose write the database refused, isolated from the rest.
    pub rejected: Vec<(usize, DbRejection)>,
}

/// Writes the batch in one statement under one savepoint: the happy path costs a fixed
/// number of statements whatever the batch size. If the database refuses the batch
/// because of a row's data (a trigger, a constraint), the offending rows are found by
/// bisection with probes that are always rolled back, and the rest is written in one
/// more statement. Every savepoint is released: a probe's subtransaction ends when it
/// is rolled back, and at most a few committed subtransactions stay open until the
/// batch commits, whatever the number of poison rows (past 64 open subtransactions,
/// PostgreSQL's per-session cache overflows and every session's snapshots slow down).
/// Infrastructure errors (lost connection, timeouts, cancellation) are returned and
/// roll the whole batch back.
pub fn write_isolating<C: Conn>(
    tx: &mut C,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &[BatchWrite],
) -> Result<WriteOutcome> {
    let tx = tx.pg();
    let mut savepoints = Savepoints {
        tx,
        stmts,
        run_id,
        as_of,
        batch,
    };
    let Isolated { written, refused } = isolate(batch.len(), &mut savepoints)?;
    Ok(WriteOutcome {
        expired: written,
        rejected: refused,
    })
}

/// Writes the batch in one statement with no savepoint: what a batch costs when no row
/// is refused, which is nearly always. `Ok(Err(_))`: the database refused a row's data
/// and the transaction is aborted, so the caller rolls the batch back and redoes it with
/// [`write_isolating`], which finds the refused rows and writes the rest. Infrastructure
/// errors are returned as errors, as there.
pub fn write_direct(
    tx: &mut impl Conn,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &[BatchWrite],
) -> Result<std::result::Result<Vec<Uuid>, DbRejection>> {
    let tx = tx.pg();
    if batch.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let rows: Vec<&BatchWrite> = batch.iter().collect();
    match write_once(tx, stmts, run_id, as_of, &rows) {
        Ok(ids) => Ok(Ok(ids)),
        Err(e) if is_row_rejection(&e) => Ok(Err(rejection(&e))),
        Err(e) => Err(e.into()),
    }
}

/// The SQLSTATE and message of a row rejection.
fn rejection(e: &postgres::Error) -> DbRejection {
    DbRejection::of(e).expect("a row rejection is a database error")
}

/// A refusal caused by one row's data, not by the infrastructure.
fn is_row_rejection(e: &postgres::Error) -> bool {
    crate::sqlstate::class(e) == Some(crate::sqlstate::Class::RowRejection)
}

const SAVEPOINT: &str = "expire_write";

/// The isolation's probe: a sub-batch written under a savepoint, released in every
/// outcome (rolled back first unless kept).
struct Savepoints<'a, C: GenericClient> {
    tx: &'a mut C,
    stmts: &'a CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &'a [BatchWrite],
}

impl<C: GenericClient> Savepoints<'_, C> {
    fn undo(&mut self) -> Result<()> {
        self.tx.batch_execute(&format!(
            "ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}"
        ))?;
        Ok(())
    }
}

impl<C: GenericClient> Probe for Savepoints<'_, C> {
    type Written = Uuid;
    type Refusal = DbRejection;
    type Error = crate::error::StoreError;

    fn try_part(
        &mut self,
        part: &[usize],
        keep: Keep,
    ) -> Result<std::result::Result<Vec<Uuid>, DbRejection>> {
        self.tx.batch_execute(&format!("SAVEPOINT {SAVEPOINT}"))?;
        let rows: Vec<&BatchWrite> = part.iter().map(|&i| &self.batch[i]).collect();
        match write_once(self.tx, self.stmts, self.run_id, self.as_of, &rows) {
            Ok(ids) if keep == Keep::Yes => {
                self.tx
                    .batch_execute(&format!("RELEASE SAVEPOINT {SAVEPOINT}"))?;
                Ok(Ok(ids))
            }
            Ok(_) => {
                self.undo()?;
                Ok(Ok(Vec::new()))
            }
            Err(e) if is_row_rejection(&e) => {
                self.undo()?;
                Ok(Err(rejection(&e)))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_numbers_its_parameters_in_the_order_they_appear() {
        let sql = write_sql("text");
        assert_eq!(
            super::super::statements::parameters(&sql),
            (1..=16).collect::<Vec<_>>()
        );
        // One field of `WriteParams` per parameter.
        assert_eq!(
            WriteParams::of(&[], Uuid::nil(), DateTime::<Utc>::MIN_UTC)
                .in_order()
                .len(),
            16
        );
    }
}
