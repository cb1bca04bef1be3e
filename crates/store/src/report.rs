//! The operator reports' SQL (`dry-run`, `backlog`). Everything here runs in a READ ONLY
//! transaction and is a plain SELECT: no `FOR UPDATE`/`FOR SHARE`, so a report never
//! takes a row lock and never waits on one, and it works under a read-only role.
//!
//! `dry-run` reads its candidates with the cycle's own [`candidates_sql`], the very
//! predicate the claim wraps in `FOR UPDATE SKIP LOCKED`; the backlog counts use the
//! phase's overdue predicate, which the partial indexes serve.

use crate::error::{Context, Result, StoreError};
use chrono::{DateTime, Utc};
use postgres::types::ToSql;
use postgres::{GenericClient, IsolationLevel, Row, Transaction};

use super::expiration::{
    BOOKING_COLUMNS, booking_row, candidates_sql, deadline_column, overdue_predicate,
};
use super::timestamp;
use crate::domain::{BookingRow, OutboxTypes, Phase, Timestamp};
use crate::{Conn, Session, Tx};

/// A READ ONLY, REPEATABLE READ transaction: every query of a report sees one snapshot,
/// and the server refuses any write in it.
pub fn begin_read_only(client: &mut Session) -> Result<Tx<'_>> {
    let client = client.pg();
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?;
    Ok(Tx::new(tx))
}

/// Rows a streaming report reads per round trip: enough to amortise the round trip,
/// few enough that a chunk and what is decided from it stay small.
pub const CHUNK_ROWS: i32 = 1000;

/// Runs `sql` through a portal of the report's transaction and hands its rows to `each`
/// `chunk` at a time, each chunk dropped before the next is read, so memory does not grow
/// with the result. `each` returns `false` to stop early (the reader went away); its
/// error (the caller's own type) comes back as it is.
fn in_chunks<E>(
    tx: &mut Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    chunk: i32,
    mut each: impl FnMut(&[Row]) -> Result<bool, E>,
) -> Result<(), ChunkError<E>> {
    let portal = tx.bind(sql, params).map_err(ChunkError::Sql)?;
    loop {
        let rows = tx.query_portal(&portal, chunk).map_err(ChunkError::Sql)?;
        let last = rows.len() < chunk as usize;
        if !rows.is_empty() && !each(&rows).map_err(ChunkError::Each)? {
            return Ok(());
        }
        if last {
            return Ok(());
        }
    }
}

/// Why [`in_chunks`] stopped: its query (which gets the caller's context), or the
/// caller's own handler (which already has it).
enum ChunkError<E> {
    Sql(postgres::Error),
    Each(E),
}

impl<E: From<StoreError>> ChunkError<E> {
    fn context(self, what: impl FnOnce() -> String) -> E {
        match self {
            ChunkError::Sql(e) => StoreError::from(e).context(what()).into(),
            ChunkError::Each(e) => e,
        }
    }
}

/// The candidates of `phase` at `as_of`, oldest deadline first, exactly as the claim of
/// the cycle selects them (the same SQL, without the lock); `None` = no limit. They
/// come `chunk` rows at a time (see [`in_chunks`]), in claim order.
pub fn candidates_in_chunks<E: From<StoreError>>(
    tx: &mut Tx<'_>,
    phase: Phase,
    as_of: DateTime<Utc>,
    limit: Option<i64>,
    chunk: i32,
    mut each: impl FnMut(Vec<BookingRow>) -> Result<bool, E>,
) -> Result<(), E> {
    let tx = tx.pg();
    in_chunks(
        tx,
        &candidates_sql(phase),
        &[&as_of, &limit],
        chunk,
        |rows| each(rows.iter().map(booking_row).collect()),
    )
    .map_err(|e| e.context(|| format!("cannot read the {phase} candidates")))
}

/// How many candidates `phase` has at `as_of` in all (the candidate query, unlimited).
pub fn count_candidates(client: &mut impl Conn, phase: Phase, as_of: DateTime<Utc>) -> Result<u64> {
    let client = client.pg();
    let sql = format!(
        "SELECT count(*) AS candidates FROM ({}) c",
        candidates_sql(phase)
    );
    let row = client
        .query_one(&sql, &[&as_of, &None::<i64>])
        .with_context(|| format!("cannot count the {phase} candidates"))?;
    Ok(row.get::<_, i64>("candidates").max(0) as u64)
}

/// An overdue active booking the cycle leaves alone until `retry_at`: poison in
/// quarantine.
#[derive(Debug, Clone)]
pub struct Quarantined {
    pub booking: BookingRow,
    pub reason: String,
    pub error: String,
    pub attempts: i32,
    pub retry_at: Timestamp,
}

/// Overdue bookings of `phase` at `as_of` that the candidate predicate leaves out
/// because they are quarantined (`retry_at > as_of`), oldest deadline first, and how
/// many there are in all. `$1` = AsOf, `$2` = the limit (NULL = none).
pub fn quarantined_sql(phase: Phase) -> String {
    format!(
        "SELECT {BOOKING_COLUMNS}, p.reason, p.error, p.attempts, p.retry_at, \
                count(*) OVER () AS total \
           FROM crm.bookings b JOIN crm.booking_expiration_poison p ON p.booking_id = b.id \
          WHERE {} AND p.retry_at > $1 \
            AND p.booking_version = b.version AND p.booking_status = b.status::text \
          ORDER BY b.{col}, b.id LIMIT $2",
        overdue_predicate(phase),
        col = deadline_column(phase),
    )
}

/// The quarantined bookings of `quarantined_sql`, `chunk` rows at a time (see
/// [`in_chunks`]), each chunk with the total there is; returns the total (0 = none).
pub fn quarantined_in_chunks<E: From<StoreError>>(
    tx: &mut Tx<'_>,
    phase: Phase,
    as_of: DateTime<Utc>,
    limit: Option<i64>,
    chunk: i32,
    mut each: impl FnMut(Vec<Quarantined>) -> Result<bool, E>,
) -> Result<u64, E> {
    let tx = tx.pg();
    let mut total = 0;
    in_chunks(
        tx,
        &quarantined_sql(phase),
        &[&as_of, &limit],
        chunk,
        |rows| {
            total = rows[0].get::<_, i64>("total").max(0) as u64;
            each(
                rows.iter()
                    .map(|r| Quarantined {
                        booking: booking_row(r),
                        reason: r.get("reason"),
                        error: r.get("error"),
                        attempts: r.get("attempts"),
                        retry_at: timestamp::get(r, "retry_at"),
                    })
                    .collect(),
            )
        },
    )
    .map_err(|e| e.context(|| format!("cannot read the quarantined {phase} bookings")))?;
    Ok(total)
}

/// Overdue active bookings of a phase and the oldest deadline among them. `$1` = the
/// moment. Served by the phase's partial index (an index-only scan when the visibility
/// map allows), whatever the number of historical rows.
pub fn overdue_sql(phase: Phase) -> String {
    format!(
        "SELECT count(*) AS overdue, min(b.{col}) AS oldest_deadline FROM crm.bookings b WHERE {}",
        overdue_predicate(phase),
        col = deadline_column(phase),
    )
}

/// Poison rows whose booking is still active and unchanged since it was quarantined:
/// isolated by the cycle, still waiting.
/// The join goes through the bookings' primary key, one probe per poison row.
pub fn poison_sql() -> String {
    let active: Vec<String> = Phase::ALL
        .iter()
        .flat_map(|p| p.active_statuses())
        .map(|s| format!("'{s}'"))
        .collect();
    format!(
        "SELECT count(*) AS poison FROM crm.booking_expiration_poison p \
           JOIN crm.bookings b ON b.id = p.booking_id \
          WHERE b.status IN ({}) \
            AND p.booking_version = b.version AND p.booking_status = b.status::text",
        active.join(", ")
    )
}

/// The overdue active bookings of one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overdue {
    pub count: u64,
    pub oldest_deadline: Option<Timestamp>,
}

pub(crate) fn overdue(
    client: &mut impl Conn,
    phase: Phase,
    as_of: DateTime<Utc>,
) -> Result<Overdue> {
    let client = client.pg();
    let row = client
        .query_one(&overdue_sql(phase), &[&as_of])
        .with_context(|| format!("cannot count the overdue {phase} bookings"))?;
    Ok(Overdue {
        count: row.get::<_, i64>("overdue").max(0) as u64,
        oldest_deadline: timestamp::get_opt(&row, "oldest_deadline"),
    })
}

pub(crate) fn poison_count(client: &mut impl Conn) -> Result<u64> {
    let client = client.pg();
    let row = client
        .query_one(&poison_sql(), &[])
        .context("cannot count the poison rows")?;
    Ok(row.get::<_, i64>("poison").max(0) as u64)
}

/// Which backlog figures to read: all of them (the `backlog` report), the bookings'
/// (after the cycle: the worker's role may not read the outbox), the outbox's (after
/// `relay-outbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BacklogScope {
    All,
    Bookings,
    Outbox,
}

/// How far behind the job is at `as_of`; a figure not read is `None`.
#[derive(Debug, Clone)]
pub struct Backlog {
    pub as_of: DateTime<Utc>,
    /// Per phase, in [`Phase::ALL`] order.
    pub overdue: Option<Vec<(Phase, Overdue)>>,
    pub poison: Option<u64>,
    pub outbox: Option<super::OutboxLag>,
    /// The outbox rows not due yet, per topic (read with `outbox`).
    pub waiting: Option<Vec<super::TopicWaiting>>,
    /// The topics that cannot take their rows, as the relay last found them (read with
    /// `outbox`); `None` also when they cannot be read (migration 14 not applied, or
    /// not granted): then only the rows the release before marked count as waiting for
    /// their topic.
    pub topic_waits: Option<Vec<super::TopicWait>>,
    /// Other producers' rows of the outbox (read for the `backlog` report only).
    pub others: Option<super::OtherRows>,
    /// The pause switches that are on (read for the `backlog` report only).
    pub pauses: Vec<super::ops::PauseRow>,
    /// Per phase, in [`Phase::ALL`] order, the booking the next cycle would claim first
    /// and so how late it already is (read for the `backlog` report only).
    pub next_claims: Option<Vec<(Phase, Option<NextClaim>)>>,
    /// The database's upkeep (read for the `backlog` report only).
    pub hygiene: Option<super::hygiene::Hygiene>,
    /// The relay's sweep (read with `outbox`; `None` also before migration 17 or the
    /// relay's first run).
    pub sweep: Option<super::SweepState>,
}

/// The overdue booking a phase's next claim takes first: the oldest deadline among
/// those not in quarantine. Its lateness (AsOf − deadline) is what the lateness
/// objective (expired within a minute and a cycle of its deadline) is about; a
/// quarantined booking is late on purpose and counted as poison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NextClaim {
    pub booking_id: uuid::Uuid,
    pub deadline: Timestamp,
}

/// The first booking the claim of `phase` would take at `as_of`: the claim's own
/// query ([`candidates_sql`], without the lock) limited to one row. It walks the
/// phase's partial index from the oldest deadline and stops at the first row not in
/// quarantine.
pub(crate) fn next_claim(
    client: &mut impl Conn,
    phase: Phase,
    as_of: DateTime<Utc>,
) -> Result<Option<NextClaim>> {
    let client = client.pg();
    let row = client
        .query_opt(&candidates_sql(phase), &[&as_of, &Some(1_i64)])
        .with_context(|| format!("cannot read the oldest {phase} candidate"))?;
    Ok(row.map(|r| {
        let b = booking_row(&r);
        NextClaim {
            booking_id: b.id,
            deadline: b
                .deadline(phase)
                .expect("the overdue predicate compares the deadline, so it is set"),
        }
    }))
}

/// The one read of the backlog figures, in one READ ONLY snapshot: for the `backlog`
/// report and for the metrics pushed after a run.
/// The outbox's figures count the rows of `types` only.
pub fn read_backlog(
    client: &mut Session,
    as_of: DateTime<Utc>,
    scope: BacklogScope,
    types: &OutboxTypes,
) -> Result<Backlog> {
    read_report(client, as_of, scope, types, None)
}

/// [`read_backlog`], and with `hygiene = Some(threshold)` (the `backlog` report) also
/// the next claims and the database's upkeep, naming what holds the xmin horizon back
/// longer than `threshold`, and the other producers' rows of the outbox apart; all in
/// the one snapshot.
pub fn read_report(
    client: &mut Session,
    as_of: DateTime<Utc>,
    scope: BacklogScope,
    types: &OutboxTypes,
    hygiene: Option<chrono::TimeDelta>,
) -> Result<Backlog> {
    use crate::error::{Context, Fault};
    let mut tx = begin_read_only(client)
        .classify(Fault::Temporary, "cannot begin a read-only transaction")?;
    let mut backlog = Backlog {
        as_of,
        overdue: None,
        poison: None,
        outbox: None,
        waiting: None,
        topic_waits: None,
        others: None,
        pauses: Vec::new(),
        next_claims: None,
        hygiene: None,
        sweep: None,
    };
    if scope == BacklogScope::All {
        backlog.pauses = super::ops::pauses(&mut tx)?;
    }
    if scope != BacklogScope::Outbox {
        let mut overdue = Vec::new();
        for phase in Phase::ALL {
            overdue.push((phase, self::overdue(&mut tx, phase, as_of)?));
        }
        backlog.overdue = Some(overdue);
        backlog.poison = Some(poison_count(&mut tx)?);
        if hygiene.is_some() {
            let mut claims = Vec::new();
            for phase in Phase::ALL {
                claims.push((phase, next_claim(&mut tx, phase, as_of)?));
            }
            backlog.next_claims = Some(claims);
        }
    }
    if scope != BacklogScope::Bookings {
        backlog.topic_waits = super::topic_waits(&mut tx, false)?;
        let topics: Vec<&str> = backlog
            .topic_waits
            .iter()
            .flatten()
            .map(|w| w.topic.as_str())
            .collect();
        backlog.outbox = Some(super::outbox_lag::outbox_lag(&mut tx, types, &topics)?);
        backlog.waiting = Some(super::waiting(&mut tx, as_of, types, &topics)?);
        backlog.sweep = super::sweep::sweep_state(&mut tx, types)?;
    }
    if hygiene.is_some() && scope == BacklogScope::All {
        backlog.others = Some(super::outbox_lag::other_rows(&mut tx, types)?);
    }
    if let Some(threshold) = hygiene {
        backlog.hygiene = Some(super::hygiene::hygiene(&mut tx, as_of, threshold)?);
    }
    tx.commit()
        .classify(Fault::Temporary, "cannot end the read-only transaction")?;
    Ok(backlog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_queries_never_lock() {
        for phase in Phase::ALL {
            for sql in [
                quarantined_sql(phase),
                overdue_sql(phase),
                candidates_sql(phase),
            ] {
                assert!(!sql.contains(" FOR "), "{sql}");
            }
        }
        assert!(!poison_sql().contains(" FOR "));
    }

    #[test]
    fn the_poison_count_names_every_active_status() {
        for phase in Phase::ALL {
            for status in phase.active_statuses() {
                assert!(poison_sql().contains(&format!("'{status}'")), "{status}");
            }
        }
    }
}
