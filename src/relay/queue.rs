//! Where the relay's batches come from. On a database with migration 16 (the relay's
//! own state) the queue is the watermark: one range of `seq` above `high` and the due
//! exceptions; the rows that cannot go now (an older row of their key in flight or
//! backing off, a topic that cannot take them, a back-off the release before set)
//! become exceptions, told apart here from the exceptions read once per batch, never
//! by a look-up per row. Without migration 16 it is the release before's queue, the
//! pending rows by `crm.outbox`'s columns.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::store::{Prepared, Session};
use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;

use super::RelayResult;
use super::failures::{self, Marks};
use super::order::{Due, Sorted};
use super::outgoing::one_per_key;
use crate::config::RelayConfig;
use crate::store::{self, Fetch, NewException, OutboxRow};

/// How often a `--follow` relay sweeps the rows committed since its last sweep (the
/// rows committed below newer ones it relayed go within about this long).
pub(super) const GAP_CHECK_EVERY: Duration = Duration::from_secs(3);

/// The relay's own state for its run.
pub(super) struct Own {
    reads: ReadStatements,
    /// The highest `seq` dealt with by this run's fetches (in flight included).
    high: i64,
    pub(super) floor: i64,
    pub(super) legacy_marks: bool,
    checked: Instant,
}

/// The queue of a run.
pub(super) enum Queue {
    /// The release before's queue: no migration 16.
    Columns(Prepared),
    Own(Own),
}

/// One fetch: the rows to send (at most one per key and topic), and the `high` the
/// batch's mark moves the watermark to (`None` for the columns' queue), with the fetch's
/// snapshot.
pub(super) struct Fetched {
    pub rows: Vec<OutboxRow>,
    pub high: Option<i64>,
    pub snapshot: Option<String>,
    /// Rows were dealt with (sent or held): fetch again even when none is sent.
    pub progressed: bool,
    /// The fetch was cut by its limit or its byte budget: more rows are likely there,
    /// and the next read may start at once ([`ReadAt`]).
    pub more: bool,
}

/// The statements of a read above the watermark, prepared on the session that reads
/// (the main session, or the mark session reading ahead).
pub(super) struct ReadStatements {
    fetch: Prepared,
    /// The exceptions and the receipts above `high`, read before every fetch.
    settling: Prepared,
}

impl ReadStatements {
    pub(super) fn prepare(client: &mut Session) -> Result<Self> {
        Ok(ReadStatements {
            fetch: store::prepare_pending_above(client)?,
            settling: store::prepare_settling(client)?,
        })
    }
}

/// What a read above the watermark is asked with: the `high` it reads above, the
/// moment its back-offs are judged at, the keys with a row in flight and the topics
/// that cannot take their rows. A read made ahead (on the mark session, while the
/// relay settles a batch) is used only if `high` and the waiting topics are still
/// these; its keys in flight are a superset of those when it is used (keys only
/// leave), so a row it holds behind one of them waits one batch more, never goes
/// before an older row of its key.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ReadAt {
    pub high: i64,
    pub now: DateTime<Utc>,
    pub in_flight: HashSet<String>,
    pub waiting: HashSet<String>,
}

/// One read above the watermark: the state it read (the exceptions and the receipts
/// above `high`) and the rows it fetched, with its snapshot.
pub(super) struct Read {
    at: ReadAt,
    /// The keys (per topic) the exceptions not sent by this read hold ([`Due`]).
    blocking: HashMap<(String, String), i64>,
    delivered_above: Vec<i64>,
    rows: Vec<OutboxRow>,
    snapshot: Option<String>,
}

impl Read {
    /// Reads the relay's state and then the rows above `at.high`, two statements on
    /// `client`: all a batch needs of the database before it is sorted and sent.
    pub(super) fn above(
        client: &mut Session,
        stmts: &ReadStatements,
        cfg: &RelayConfig,
        at: ReadAt,
    ) -> Result<Self> {
        let store::Settling {
            exceptions,
            delivered_above,
            fetch_upto,
        } = store::settling(client, &stmts.settling, &cfg.outbox_types, at.high)?;
        let (waiting, in_flight) = (borrowed(&at.waiting), borrowed(&at.in_flight));
        // Never a new row: the exceptions (theirs is another path), and the rows above
        // `high` an exception's delivery already has a receipt for.
        let skip: Vec<i64> = exceptions
            .iter()
            .map(|e| e.seq)
            .chain(delivered_above.iter().copied())
            .collect();
        let Due { due, blocking } = Due::of(
            &exceptions,
            at.now,
            &waiting,
            &in_flight,
            cfg.batch_size as usize,
        );
        let store::FetchedAbove { rows, snapshot } = store::pending_above(
            client,
            &stmts.fetch,
            at.now,
            cfg.batch_size,
            store::FetchAbove {
                high: at.high,
                upto: fetch_upto,
                skip: &skip,
                due: &due,
            },
            cfg.kafka.max_message_bytes,
            &cfg.outbox_types,
        )?;
        Ok(Read {
            at,
            blocking,
            delivered_above,
            rows,
            snapshot,
        })
    }
}

fn borrowed(set: &HashSet<String>) -> HashSet<&str> {
    set.iter().map(String::as_str).collect()
}

impl Queue {
    /// The run's queue: its own state when migrations 16 and 17 are there, after a first
    /// sweep; the columns' queue (with a warning) when they are not.
    /// `at` = the run's monotonic now: the gap check's pace is kept on it, so a step of
    /// the wall clock neither hurries nor delays it.
    pub(super) fn open(
        client: &mut Session,
        cfg: &RelayConfig,
        now: DateTime<Utc>,
        at: Instant,
        result: &mut RelayResult,
    ) -> Result<Self> {
        if !store::relay_state_usable(client, true)? {
            log::warn!(Migration = store::SWEEP_MIGRATION;
                       "the relay's own tables (migrations 16 and 17) are missing or not writable by this role (run `booking-expire migrate`): it marks crm.outbox's columns as the release before did");
            return Ok(Queue::Columns(store::prepare_pending(client)?));
        }
        let legacy_marks = cfg.legacy_marks;
        if !store::inserted_xid_defaulted(client)? {
            log::warn!(Migration = store::SWEEP_MIGRATION;
                       "crm.outbox.inserted_xid does not default to pg_current_xact_id() any more: rows written since that commit below rows already relayed are found only above the floor; restore it with ALTER TABLE crm.outbox ALTER COLUMN inserted_xid SET DEFAULT pg_current_xact_id()");
        }
        store::load_watermark(client, &cfg.outbox_types, legacy_marks, now)?;
        // Nothing is in flight yet: the sweep reads up to its own snapshot.
        let checked = store::sweep(
            client,
            &cfg.outbox_types,
            legacy_marks,
            now,
            store::SweepTop::Now,
            store::SeqWindow::Read,
        )?;
        log_gap(&checked, result);
        Ok(Queue::Own(Own {
            reads: ReadStatements::prepare(client)?,
            high: checked.watermark.high,
            floor: checked.watermark.floor,
            legacy_marks,
            checked: at,
        }))
    }

    /// Where the rows' marks go.
    pub(super) fn marks(&self) -> Marks {
        match self {
            Queue::Own(own) => Marks::Own {
                legacy: own.legacy_marks,
            },
            Queue::Columns(_) => Marks::Columns,
        }
    }

    /// The sweep when it is due (every [`GAP_CHECK_EVERY`]); true when it found rows to
    /// send. `idle`: no batch is fetched and not yet marked (the sweep then reads up to
    /// its own snapshot, else up to the last mark's fetch).
    pub(super) fn check_gap_if_due(
        &mut self,
        client: &mut Session,
        cfg: &RelayConfig,
        now: DateTime<Utc>,
        at: Instant,
        idle: bool,
        result: &mut RelayResult,
    ) -> Result<bool> {
        let Queue::Own(own) = self else {
            return Ok(false);
        };
        if at.saturating_duration_since(own.checked) < GAP_CHECK_EVERY {
            return Ok(false);
        }
        let top = if idle {
            store::SweepTop::Now
        } else {
            store::SweepTop::LastMark
        };
        let checked = store::sweep(
            client,
            &cfg.outbox_types,
            own.legacy_marks,
            now,
            top,
            store::SeqWindow::Skip,
        )?;
        own.checked = at;
        own.floor = checked.watermark.floor;
        log_gap(&checked, result);
        Ok(checked.late > 0)
    }

    /// What the next read would be asked with now (the relay's own state only): for a
    /// read ahead.
    pub(super) fn read_at(
        &self,
        now: DateTime<Utc>,
        in_flight: &[&str],
        waiting: &[&str],
    ) -> Option<ReadAt> {
        match self {
            Queue::Own(own) => Some(ReadAt {
                high: own.high,
                now,
                in_flight: in_flight.iter().map(|k| (*k).to_owned()).collect(),
                waiting: waiting.iter().map(|t| (*t).to_owned()).collect(),
            }),
            Queue::Columns(_) => None,
        }
    }

    /// The next batch. `in_flight` = the keys with a row in flight, `waiting` = the
    /// topics that cannot take their rows; `ahead` = a read made ahead, used when it
    /// still holds ([`ReadAt`]).
    pub(super) fn next(
        &mut self,
        client: &mut Session,
        cfg: &RelayConfig,
        now: DateTime<Utc>,
        in_flight: &[&str],
        waiting: &[&str],
        ahead: Option<Read>,
    ) -> Result<Fetched> {
        match self {
            Queue::Columns(fetch) => {
                let rows = store::pending(
                    client,
                    &*fetch,
                    now,
                    cfg.batch_size,
                    store::LeftOut {
                        keys: in_flight,
                        topics: waiting,
                    },
                    cfg.kafka.max_message_bytes,
                    &cfg.outbox_types,
                )?;
                let progressed = !rows.is_empty();
                Ok(Fetched {
                    rows: one_per_key(rows),
                    high: None,
                    snapshot: None,
                    progressed,
                    more: false,
                })
            }
            Queue::Own(own) => {
                let waiting_now: HashSet<&str> = waiting.iter().copied().collect();
                let current = |read: &Read| {
                    read.at.high == own.high && borrowed(&read.at.waiting) == waiting_now
                };
                let read = match ahead.filter(current) {
                    Some(read) => read,
                    None => {
                        let at = ReadAt {
                            high: own.high,
                            now,
                            in_flight: in_flight.iter().map(|k| (*k).to_owned()).collect(),
                            waiting: waiting.iter().map(|t| (*t).to_owned()).collect(),
                        };
                        Read::above(client, &own.reads, cfg, at)?
                    }
                };
                own.next(client, cfg, read)
            }
        }
    }
}

/// Says what a sweep found, and counts it into `result`.
pub(super) fn log_gap(checked: &store::GapCheck, result: &mut RelayResult) {
    result.late += checked.late;
    result.late_below_floor += checked.below_floor;
    if checked.below_floor > 0 {
        log::warn!(Rows = checked.below_floor, Floor = checked.watermark.floor, High = checked.watermark.high;
                   "rows committed below the floor found by their transaction (a sequence's cache, a seq drawn before its transaction's id, a prepared or long transaction): they go now, late");
    }
    if checked.late > 0 {
        info!(Rows = checked.late, Floor = checked.watermark.floor, High = checked.watermark.high;
              "rows committed below rows already relayed (or re-queued by the release before) found: they go now");
    }
}

impl Own {
    /// Sorts a read into the batch to send and the rows held (written as exceptions),
    /// and moves the run's `high` past what it dealt with.
    fn next(&mut self, client: &mut Session, cfg: &RelayConfig, read: Read) -> Result<Fetched> {
        let Read {
            at,
            blocking,
            delivered_above,
            rows,
            snapshot,
        } = read;
        let now = at.now;
        let (waiting, in_flight) = (borrowed(&at.waiting), borrowed(&at.in_flight));
        // A fetch its limit or its byte budget did not cut saw every new row above
        // `high`: the watermark passes the delivered rows above them too (else a
        // delivered row stays above `high`, unpurged, until a newer row comes), in a
        // batch of its own when there is no row to send.
        let new_rows = rows.iter().filter(|r| !r.extra.excepted);
        let cut = new_rows.clone().count() >= cfg.batch_size as usize
            || new_rows.clone().any(|r| r.fetch == Fetch::Later);
        let passed = delivered_above.into_iter().max().filter(|_| !cut);
        let sorted = Sorted::of(rows, blocking, now, &waiting, &in_flight, self.legacy_marks);
        let passed = passed.filter(|&seq| seq > sorted.high.unwrap_or(self.high).max(self.high));
        if let Some(seq) = passed {
            self.high = seq;
        }
        let progressed = !sorted.take.is_empty()
            || !sorted.hold.is_empty()
            || !sorted.settled.is_empty()
            || passed.is_some();
        let holds: Vec<NewException> = sorted
            .hold
            .iter()
            .map(|(row, reason)| held(row, reason))
            .collect();
        store::put_exceptions(client, &holds, now)?;
        store::drop_exceptions(client, &sorted.settled)?;
        if let Some(high) = sorted.high {
            self.high = self.high.max(high);
        }
        Ok(Fetched {
            rows: sorted.take,
            high: Some(self.high),
            snapshot,
            progressed,
            more: cut,
        })
    }
}

/// Why a new row is held, and the back-off the release before gave it.
fn held<'a>(row: &'a OutboxRow, reason: &'static str) -> NewException<'a> {
    let back_off = reason == "legacy";
    NewException {
        next_attempt_at: row.extra.next_attempt_at.filter(|_| back_off),
        last_error: row.extra.last_error.as_deref().filter(|_| back_off),
        ..failures::exception(row, reason)
    }
}
