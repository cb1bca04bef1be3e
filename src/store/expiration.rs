// Over 450 lines: the cycle's SQL and the savepoint bisection that isolates poison rows, which are read together.
//! The expiration cycle's SQL: the claim per phase, the skipped-locked count, the
//! set-based batch write (bookings + audit + timeline + outbox in one statement) with
//! poison isolation by savepoints, and the quarantine of poison rows.

use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::types::Json;
use postgres::{Client, GenericClient, Statement};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::domain::{AGGREGATE_TYPE, BookingRow, EVENT_TYPE, Phase, Timestamp};
pub use crate::domain::{BatchWrite, Poison};

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

/// Rows in quarantine are not claimed again before their `retry_at`, as long as the
/// booking is still the row that was quarantined: once its version or status moved (a
/// manager repaired, extended or cancelled it), the entry no longer applies and the
/// row is judged afresh on the next cycle.
const NOT_QUARANTINED: &str = "NOT EXISTS (SELECT 1 FROM crm.booking_expiration_poison p \
     WHERE p.booking_id = b.id AND p.retry_at > $1 \
       AND p.booking_version = b.version AND p.booking_status = b.status::text)";

/// The booking columns the job reads, in the types it reads them as: whatever the CRM
/// declared (`text`, `varchar` or an enum for the status; `smallint`, `integer` or
/// `bigint` for the version), the job sees text and a 64-bit integer, plus the largest
/// version the column can hold (so the guard refuses a row whose version cannot grow).
pub(crate) const BOOKING_COLUMNS: &str = "b.id, b.tenant_id, b.deal_id, b.property_object_id, \
     b.status::text AS status, b.reserve_expires_at, b.booking_expires_at, b.expired_at, \
     b.version::int8 AS version, \
     CASE pg_typeof(b.version) WHEN 'smallint'::regtype THEN 32767::int8 \
                               WHEN 'integer'::regtype THEN 2147483647::int8 \
                               ELSE 9223372036854775807::int8 END AS version_max";

/// The candidates of a phase, oldest deadline first: the one predicate that both the
/// claim (`run-once`) and `dry-run` use. `$1` = AsOf, `$2` = the limit.
pub fn candidates_sql(phase: Phase) -> String {
    candidates_where_sql(phase, "")
}

fn candidates_where_sql(phase: Phase, and: &str) -> String {
    format!(
        "SELECT {BOOKING_COLUMNS} FROM crm.bookings b \
          WHERE {} AND {NOT_QUARANTINED}{and} \
          ORDER BY b.{col}, b.id LIMIT $2",
        overdue_predicate(phase),
        col = deadline_column(phase),
    )
}

/// The phase's key `(deadline, id)` after the cycle's previous batch: `$3` = its
/// deadline, `$4` = its id, both NULL for a cycle's first batch (written as the
/// smallest key, so the bound stays an index condition in the generic plan, as the
/// skipped count's does). A drain's batch then starts reading the index where the
/// batch before it stopped, instead of at its head: the head holds one dead entry per
/// row expired since the last `VACUUM`, which every batch would otherwise walk again
/// (after an outage, hundreds of thousands). A row left behind the key (held by another session, or
/// changed back to overdue meanwhile) waits for the next cycle, which starts at the
/// head again.
fn after_bound(phase: Phase) -> String {
    format!(
        "(b.{col}, b.id) > (coalesce($3::timestamptz, '-infinity'::timestamptz), \
                            coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid))",
        col = deadline_column(phase),
    )
}

/// The claim: the candidates after the previous batch's key (see [`after_bound`]),
/// locked until the transaction ends, skipping rows another holder has locked.
/// `$1` = AsOf, `$2` = the limit, `$3`/`$4` = the previous batch's last key or NULL.
pub fn claim_sql(phase: Phase) -> String {
    format!(
        "{} FOR UPDATE OF b SKIP LOCKED",
        candidates_where_sql(phase, &format!(" AND {}", after_bound(phase)))
    )
}

/// The claim and the skipped-locked count in one statement (one round trip): the first
/// column, `skipped`, counts the eligible rows between the previous batch's key and the
/// last claimed key (or anywhere after the previous key, when the claim did not fill
/// the batch) that the claim did not get because someone else holds them, so a row
/// held through a whole drain is counted once per cycle, not once per batch; the other
/// columns are the claimed rows, in claim order. An empty claim still returns one row,
/// with the count and NULL booking columns.
///
/// The count runs after the claim (it reads the claimed CTE) and locks nothing. Its
/// bound is one row comparison, with "no bound" written as the largest key, rather than
/// `$3 IS NULL OR …`: the comparison is then an index condition also in the generic plan
/// a session switches to after five batches, so a drain reads only up to the claimed
/// key instead of the whole remaining backlog per batch. `$1` = AsOf, `$2` = the limit,
/// `$3`/`$4` = the previous batch's last key (see [`claim_sql`]).
pub fn claim_counting_sql(phase: Phase) -> String {
    format!(
        "WITH claimed AS MATERIALIZED ({claim}), \
              last AS MATERIALIZED ( \
                SELECT c.{col} AS deadline, c.id FROM claimed c \
                 WHERE (SELECT count(*) FROM claimed) = $2 \
                 ORDER BY c.{col} DESC, c.id DESC LIMIT 1), \
              skipped AS ( \
                SELECT count(*) AS skipped FROM crm.bookings b \
                 WHERE {predicate} AND {NOT_QUARANTINED} AND {after} \
                   AND b.id <> ALL(ARRAY(SELECT id FROM claimed)) \
                   AND (b.{col}, b.id) <= \
                       (coalesce((SELECT deadline FROM last), 'infinity'::timestamptz), \
                        coalesce((SELECT id FROM last), 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))) \
         SELECT s.skipped, c.* FROM skipped s LEFT JOIN claimed c ON true \
          ORDER BY c.{col}, c.id",
        claim = claim_sql(phase),
        predicate = overdue_predicate(phase),
        after = after_bound(phase),
        col = deadline_column(phase),
    )
}

/// How many overdue bookings of a phase are left, counted up to `$2` (so the count
/// stays cheap however large the backlog). `$1` = AsOf.
pub fn left_sql(phase: Phase) -> String {
    format!(
        "SELECT count(*) AS left FROM (SELECT 1 FROM crm.bookings b WHERE {} LIMIT $2) x",
        overdue_predicate(phase),
    )
}

/// One statement writes a whole batch, whatever its size. Every row is guarded on the
/// status and version it was claimed with, so a stale row is a no-op, never a
/// corruption; only rows the UPDATE really changed get audit, timeline and outbox rows.
/// The outbox rows come from their own arrays (`events`: one element per outbox row,
/// keyed by booking), so an expiry writes one row per configured contract version,
/// each with its own id, topic, payload and headers, in the same statement. An event
/// whose payload is the timeline's details (version 1's is) is sent as NULL and takes
/// them: each JSON document crosses the wire and is parsed once.
///
/// `status_type` is the declared type of `crm.bookings.status` (from the catalog), so
/// the new status is cast to it: text, varchar and enums all work.
fn write_sql(status_type: &str) -> String {
    format!(
        "\
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int8[], $6::jsonb[], $8::text[])
        AS t(id, from_status, to_status, expected_version, payload, timeline_kind)
), events AS (
    SELECT * FROM unnest($15::uuid[], $5::uuid[], $14::text[], $16::jsonb[], $7::jsonb[])
        WITH ORDINALITY AS e(booking_id, message_id, topic, payload, headers, ord)
), expired AS (
    UPDATE crm.bookings b
       SET status = CAST(i.to_status AS {status_type}), expired_at = $9, updated_at = $9,
           version = b.version + 1
      FROM input i
     WHERE b.id = i.id AND b.status::text = i.from_status AND b.version = i.expected_version
       AND b.expired_at IS NULL
    RETURNING b.id, b.tenant_id, b.deal_id, b.version, i.from_status, i.to_status,
              i.payload, i.timeline_kind
), audit AS (
    INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
    SELECT id, tenant_id, from_status, to_status, version, $11, $10, $9 FROM expired
), timeline AS (
    INSERT INTO crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
    SELECT deal_id, tenant_id, id, timeline_kind, $9, $10, payload FROM expired
), outbox AS (
    INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
    SELECT e.message_id, $12, x.id::text, $13, e.topic, coalesce(e.payload, x.payload), e.headers, $9
      FROM expired x JOIN events e ON e.booking_id = x.id ORDER BY e.ord
), released AS (
    DELETE FROM crm.booking_expiration_poison p USING expired e WHERE p.booking_id = e.id
)
SELECT id FROM expired"
    )
}

/// Records poison rows with the version and status they were seen with. A repeat on
/// the same version doubles the back-off (1 min, 2, 4, … capped at 1 h); a row seen
/// with another version is a new case and starts over. Neither the back-off nor the
/// attempt counter can overflow, however long a row stays bad: the exponent is capped
/// before the product is formed, and the counter saturates.
const QUARANTINE_SQL: &str = "\
INSERT INTO crm.booking_expiration_poison AS p
       (booking_id, tenant_id, phase, reason, error, sqlstate, attempts,
        first_seen_at, last_seen_at, retry_at, last_run_id, booking_version, booking_status)
SELECT t.id, t.tenant_id, t.phase, t.reason, t.error, t.sqlstate, 1,
       $7::timestamptz, $7::timestamptz, $7::timestamptz + interval '1 minute', $8,
       t.version, t.status
  FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[],
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
const RELEASE_STALE_SQL: &str = "\
DELETE FROM crm.booking_expiration_poison
 WHERE booking_id IN (
       SELECT p.booking_id FROM crm.booking_expiration_poison p
        WHERE NOT EXISTS (SELECT 1 FROM crm.bookings b
                           WHERE b.id = p.booking_id
                             AND b.version = p.booking_version
                             AND b.status::text = p.booking_status)
        LIMIT 1000)";

/// PostgreSQL runs no rule inside a data-modifying `WITH`: a rule on a table the
/// cycle's write touches (a conditional `DO INSTEAD` one refuses every `UPDATE …
/// RETURNING`, a `DO ALSO` one every data-modifying `WITH`) refuses the statement
/// itself, for every row (0A000). The operator's words for that, naming what PostgreSQL
/// refused and how to fix it; any other error is left as it is.
fn returning_refused(e: &postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    (db.code() == &postgres::error::SqlState::FEATURE_NOT_SUPPORTED).then(|| {
        format!(
            "cannot prepare the cycle's write: PostgreSQL says \"{}\": a rule on \
             crm.bookings, crm.booking_audit, crm.deal_timeline or crm.outbox rewrites the \
             write, which PostgreSQL cannot run under a rule; nothing was done. Ask the \
             database's owners to replace the rule by a trigger (a BEFORE UPDATE trigger \
             that drops an update has it quarantined as update_dropped; an AFTER trigger \
             can log changes); list the rules with \
             SELECT * FROM pg_rules WHERE schemaname = 'crm'",
            db.message()
        )
    })
}

/// The cycle's statements, prepared once per session.
pub struct CycleStatements {
    claim: [Statement; 2],
    left: [Statement; 2],
    write: Statement,
    quarantine: Statement,
    release_stale: Statement,
}

impl CycleStatements {
    pub fn prepare(client: &mut Client) -> Result<Self> {
        let status_type = super::schema::status_type(client)?;
        let mut prepare = |sql: &str| {
            client
                .prepare(sql)
                .map_err(|e| match returning_refused(&e) {
                    Some(refusal) => crate::exit::fail(crate::exit::Failure::Config, refusal),
                    None => anyhow::Error::new(e).context("cannot prepare the cycle's statements"),
                })
        };
        Ok(CycleStatements {
            claim: [
                prepare(&claim_counting_sql(Phase::Reserve))?,
                prepare(&claim_counting_sql(Phase::Booking))?,
            ],
            left: [
                prepare(&left_sql(Phase::Reserve))?,
                prepare(&left_sql(Phase::Booking))?,
            ],
            write: prepare(&write_sql(&status_type))?,
            quarantine: prepare(QUARANTINE_SQL)?,
            release_stale: prepare(RELEASE_STALE_SQL)?,
        })
    }
}

fn index(phase: Phase) -> usize {
    match phase {
        Phase::Reserve => 0,
        Phase::Booking => 1,
    }
}

/// A booking read with [`BOOKING_COLUMNS`], by column name.
pub fn booking_row(row: &postgres::Row) -> BookingRow {
    BookingRow {
        id: row.get("id"),
        tenant_id: row.get("tenant_id"),
        deal_id: row.get("deal_id"),
        property_object_id: row.get("property_object_id"),
        status: row.get("status"),
        reserve_expires_at: row.get("reserve_expires_at"),
        booking_expires_at: row.get("booking_expires_at"),
        expired_at: row.get("expired_at"),
        version: row.get("version"),
        version_max: row.get("version_max"),
    }
}

/// What a claim got: the rows, locked until the transaction ends, and how many
/// eligible rows around them another holder had locked (see [`claim_counting_sql`]).
#[derive(Debug, Default)]
pub struct Claim {
    pub rows: Vec<BookingRow>,
    pub skipped: u64,
}

/// A phase's position in its index, `(deadline, id)`: where the next batch of a cycle
/// starts (see [`claim_sql`]).
pub type ClaimKey = (Timestamp, Uuid);

impl Claim {
    /// The key of the last row claimed, in claim order.
    pub fn last_key(&self, phase: Phase) -> Option<ClaimKey> {
        let last = self.rows.last()?;
        Some((last.deadline(phase)?, last.id))
    }
}

/// Claims up to `limit` overdue bookings of `phase` after `after` (the previous batch's
/// last key; `None` from the head), locked until the transaction ends, and counts the
/// rows it skipped because someone else holds them, in one statement.
pub fn claim(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    limit: u32,
    after: Option<ClaimKey>,
) -> Result<Claim> {
    let (deadline, id) = (after.map(|k| k.0), after.map(|k| k.1));
    let rows = tx.query(
        &stmts.claim[index(phase)],
        &[&as_of, &i64::from(limit), &deadline, &id],
    )?;
    let skipped = rows
        .first()
        .map_or(0, |r| r.get::<_, i64>("skipped").max(0) as u64);
    Ok(Claim {
        rows: rows
            .iter()
            .filter(|r| r.get::<_, Option<Uuid>>("id").is_some())
            .map(booking_row)
            .collect(),
        skipped,
    })
}

/// Overdue bookings of `phase` at `as_of` (quarantined ones included), up to `cap`.
pub fn count_left(
    client: &mut impl GenericClient,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    cap: i64,
) -> Result<u64> {
    let row = client.query_one(&stmts.left[index(phase)], &[&as_of, &cap])?;
    Ok(row.get::<_, i64>("left").max(0) as u64)
}

/// Why the database refused one booking's write.
#[derive(Debug, Clone, PartialEq)]
pub struct DbRejection {
    pub sqlstate: String,
    pub message: String,
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
pub fn write_isolating<C: GenericClient>(
    tx: &mut C,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &[BatchWrite],
) -> Result<WriteOutcome> {
    let mut w = Writer {
        tx,
        stmts,
        run_id,
        as_of,
        batch,
    };
    let mut outcome = WriteOutcome::default();
    let all: Vec<usize> = (0..batch.len()).collect();
    if all.is_empty() {
        return Ok(outcome);
    }
    let first = match w.attempt(&all, Keep::Yes)? {
        Ok(ids) => {
            outcome.expired = ids;
            return Ok(outcome);
        }
        Err(rejection) => rejection,
    };
    w.find_rejected(&all, first, &mut outcome.rejected)?;
    let rejected: std::collections::HashSet<usize> =
        outcome.rejected.iter().map(|(i, _)| *i).collect();
    let rest: Vec<usize> = all.into_iter().filter(|i| !rejected.contains(i)).collect();
    w.write_committing(&rest, &mut outcome)?;
    outcome.rejected.sort_by_key(|(i, _)| *i);
    Ok(outcome)
}

/// Writes the batch in one statement with no savepoint: what a batch costs when no row
/// is refused, which is nearly always. `Ok(Err(_))`: the database refused a row's data
/// and the transaction is aborted, so the caller rolls the batch back and redoes it with
/// [`write_isolating`], which finds the refused rows and writes the rest. Infrastructure
/// errors are returned as errors, as there.
pub fn write_direct(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &[BatchWrite],
) -> Result<std::result::Result<Vec<Uuid>, DbRejection>> {
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
    let db = e
        .as_db_error()
        .expect("a row rejection is a database error");
    DbRejection {
        sqlstate: db.code().code().to_owned(),
        message: db.message().to_owned(),
    }
}

/// Whether a successful write is kept (the savepoint released) or only probed (rolled
/// back, then released).
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    Yes,
    No,
}

const SAVEPOINT: &str = "expire_write";

struct Writer<'a, C: GenericClient> {
    tx: &'a mut C,
    stmts: &'a CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    batch: &'a [BatchWrite],
}

impl<C: GenericClient> Writer<'_, C> {
    /// Writes the rows `part` (indexes into the batch) under a savepoint, released in
    /// every outcome. `Ok(Err(_))`: the database refused a row's data.
    fn attempt(
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

    fn undo(&mut self) -> Result<()> {
        self.tx.batch_execute(&format!(
            "ROLLBACK TO SAVEPOINT {SAVEPOINT}; RELEASE SAVEPOINT {SAVEPOINT}"
        ))?;
        Ok(())
    }

    /// `part` is known to be refused (with `rejection`): narrows it down by probing
    /// halves, and records each single row that is refused on its own.
    fn find_rejected(
        &mut self,
        part: &[usize],
        rejection: DbRejection,
        rejected: &mut Vec<(usize, DbRejection)>,
    ) -> Result<()> {
        if let [only] = part {
            rejected.push((*only, rejection));
            return Ok(());
        }
        let (left, right) = part.split_at(part.len() / 2);
        for half in [left, right] {
            if let Err(rejection) = self.attempt(half, Keep::No)? {
                self.find_rejected(half, rejection, rejected)?;
            }
        }
        // Both halves passed alone: rows refused only together, which
        // `write_committing` separates.
        Ok(())
    }

    /// Writes `part`, splitting it while the database refuses it: the rows found alone
    /// are gone already, so this normally takes one statement.
    fn write_committing(&mut self, part: &[usize], outcome: &mut WriteOutcome) -> Result<()> {
        if part.is_empty() {
            return Ok(());
        }
        match self.attempt(part, Keep::Yes)? {
            Ok(ids) => outcome.expired.extend(ids),
            Err(rejection) => {
                if let [only] = part {
                    outcome.rejected.push((*only, rejection));
                    return Ok(());
                }
                let (left, right) = part.split_at(part.len() / 2);
                self.write_committing(left, outcome)?;
                self.write_committing(right, outcome)?;
            }
        }
        Ok(())
    }
}

fn write_once(
    tx: &mut impl GenericClient,
    stmts: &CycleStatements,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    part: &[&BatchWrite],
) -> Result<Vec<Uuid>, postgres::Error> {
    let ids: Vec<Uuid> = part.iter().map(|w| w.expiry.booking_id).collect();
    let from: Vec<&str> = part.iter().map(|w| w.expiry.from.as_str()).collect();
    let to: Vec<&str> = part.iter().map(|w| w.expiry.to.as_str()).collect();
    let versions: Vec<i64> = part.iter().map(|w| w.expiry.expected_version).collect();
    let details: Vec<Json<&RawValue>> = part.iter().map(|w| Json(&*w.details)).collect();
    // The outbox rows, one per (expiry, contract version).
    let events = || {
        part.iter()
            .flat_map(|w| w.events.iter().map(move |e| (w, e)))
    };
    let event_bookings: Vec<Uuid> = events().map(|(w, _)| w.expiry.booking_id).collect();
    let message_ids: Vec<Uuid> = events().map(|(_, e)| e.message_id).collect();
    let topics: Vec<&str> = events().map(|(_, e)| e.topic).collect();
    // NULL: the same document as the booking's timeline details (see `write_sql`).
    let payloads: Vec<Option<Json<&RawValue>>> = events()
        .map(|(w, e)| (e.payload.get() != w.details.get()).then_some(Json(&*e.payload)))
        .collect();
    let headers: Vec<Json<&RawValue>> = events().map(|(_, e)| Json(&*e.headers)).collect();
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
            &details,
            &headers,
            &kinds,
            &as_of,
            &run_id,
            &ACTOR,
            &AGGREGATE_TYPE,
            &EVENT_TYPE,
            &topics,
            &event_bookings,
            &payloads,
        ],
    )?;
    Ok(rows.iter().map(|r| r.get("id")).collect())
}

/// A refusal caused by one row's data, not by the infrastructure.
fn is_row_rejection(e: &postgres::Error) -> bool {
    crate::sqlstate::class(e) == Some(crate::sqlstate::Class::RowRejection)
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
    let versions: Vec<i64> = poison.iter().map(|p| p.version).collect();
    let statuses: Vec<&str> = poison.iter().map(|p| p.status.as_str()).collect();
    tx.execute(
        &stmts.quarantine,
        &[
            &ids, &tenants, &phases, &reasons, &errors, &states, &as_of, &run_id, &versions,
            &statuses,
        ],
    )?;
    Ok(())
}

/// Removes quarantine entries that no longer describe their booking; returns how many.
pub fn release_stale_quarantine(
    client: &mut impl GenericClient,
    stmts: &CycleStatements,
) -> Result<u64> {
    Ok(client.execute(&stmts.release_stale, &[])?)
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
