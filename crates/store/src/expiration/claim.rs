//! The claim: which bookings of a phase are overdue, the claim of a batch of them
//! (`FOR UPDATE SKIP LOCKED`, after the previous batch's key) with the count of rows it
//! skipped, and how many are left. The predicate and the columns are shared with the
//! reports (`dry-run`, `backlog`) and `explain`.

use crate::error::Result;
use chrono::{DateTime, Utc};
use postgres::GenericClient;
use uuid::Uuid;

use super::statements::CycleStatements;
use crate::Conn;
use crate::domain::{BookingRow, Phase, Timestamp};
use crate::timestamp::{self, PgTimestamp};

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
/// claim (the cycle) and the candidates' report use. `$1` = AsOf, `$2` = the limit.
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
pub(crate) fn left_sql(phase: Phase) -> String {
    format!(
        "SELECT count(*) AS left FROM (SELECT 1 FROM crm.bookings b WHERE {} LIMIT $2) x",
        overdue_predicate(phase),
    )
}

/// A booking read with [`BOOKING_COLUMNS`], by column name.
pub(crate) fn booking_row(row: &postgres::Row) -> BookingRow {
    BookingRow {
        id: row.get("id"),
        tenant_id: row.get("tenant_id"),
        deal_id: row.get("deal_id"),
        property_object_id: row.get("property_object_id"),
        status: row.get("status"),
        reserve_expires_at: timestamp::get_opt(row, "reserve_expires_at"),
        booking_expires_at: timestamp::get_opt(row, "booking_expires_at"),
        expired_at: timestamp::get_opt(row, "expired_at"),
        version: row.get("version"),
        version_max: row.get("version_max"),
    }
}

/// What a claim got: the rows, locked until the transaction ends, and how many
/// eligible rows around them another holder had locked (see `claim_counting_sql`).
#[derive(Debug, Default)]
pub struct Claim {
    pub rows: Vec<BookingRow>,
    pub skipped: u64,
}

/// A phase's position in its index, `(deadline, id)`: where the next batch of a cycle
/// starts (see `claim_sql`).
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
    tx: &mut impl Conn,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    limit: u32,
    after: Option<ClaimKey>,
) -> Result<Claim> {
    let tx = tx.pg();
    let (deadline, id) = (after.map(|k| PgTimestamp(k.0)), after.map(|k| k.1));
    let rows = tx.query(
        &stmts.claim[phase.slot()],
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
    client: &mut impl Conn,
    stmts: &CycleStatements,
    phase: Phase,
    as_of: DateTime<Utc>,
    cap: i64,
) -> Result<u64> {
    let client = client.pg();
    let statement = stmts.left[phase.slot()].get(client)?;
    let row = client.query_one(statement, &[&as_of, &cap])?;
    Ok(row.get::<_, i64>("left").max(0) as u64)
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
