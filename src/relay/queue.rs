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
use super::outgoing::one_per_key;
use crate::config::RelayConfig;
use crate::store::{self, Exception, Fetch, NewException, OutboxRow};

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

/// Whether an exception may go now: not failed, its back-off over, its topic usable.
fn is_due(e: &Exception, now: DateTime<Utc>, waiting: &HashSet<&str>) -> bool {
    !e.failed && e.next_attempt_at.is_none_or(|at| at <= now) && !waiting.contains(e.topic.as_str())
}

/// The exceptions one read sends, and the keys the others hold.
#[derive(Debug, PartialEq)]
struct Due {
    /// The exceptions to send now, by `seq`: at most a batch of them.
    due: Vec<i64>,
    /// Per key and topic, the lowest `seq` of an exception still to be settled and not
    /// sent by this read: a later row of the key waits behind it (per-key order). That
    /// is one backing off, in flight or on a waiting topic, and also one due that the
    /// batch had no room for: a new row of its key must not overtake it.
    blocking: HashMap<(String, String), i64>,
}

impl Due {
    /// `exceptions` in `seq` order; `limit`: the batch size.
    fn of(
        exceptions: &[Exception],
        now: DateTime<Utc>,
        waiting: &HashSet<&str>,
        in_flight: &HashSet<&str>,
        limit: usize,
    ) -> Self {
        let live = || exceptions.iter().filter(|e| !e.failed);
        let may_go = |e: &Exception| is_due(e, now, waiting) && !in_flight.contains(e.key.as_str());
        let mut blocking = HashMap::new();
        for e in live().filter(|e| !may_go(e)) {
            hold(&mut blocking, (e.topic.clone(), e.key.clone()), e.seq);
        }
        let mut due = Vec::new();
        for e in live().filter(|e| may_go(e)) {
            let pair = (e.topic.clone(), e.key.clone());
            if blocking.get(&pair).is_some_and(|&at| at < e.seq) {
                continue;
            }
            if due.len() < limit {
                due.push(e.seq);
            } else {
                hold(&mut blocking, pair, e.seq);
            }
        }
        Due { due, blocking }
    }
}

/// Holds a key (per topic) behind `seq`, unless a lower `seq` holds it already.
fn hold(blocking: &mut HashMap<(String, String), i64>, pair: (String, String), seq: i64) {
    let at = blocking.entry(pair).or_insert(seq);
    *at = (*at).min(seq);
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

/// A fetch told apart: the rows to send, the new rows held (with why), the exceptions
/// the release before delivered meanwhile, and the `high` the new rows reach.
struct Sorted {
    take: Vec<OutboxRow>,
    hold: Vec<(OutboxRow, &'static str)>,
    settled: Vec<i64>,
    high: Option<i64>,
}

impl Sorted {
    fn of(
        rows: Vec<OutboxRow>,
        mut blocking: HashMap<(String, String), i64>,
        now: DateTime<Utc>,
        waiting: &HashSet<&str>,
        in_flight: &HashSet<&str>,
        legacy_marks: bool,
    ) -> Self {
        let mut sorted = Sorted {
            take: Vec::new(),
            hold: Vec::new(),
            settled: Vec::new(),
            high: None,
        };
        let mut taken: HashSet<(String, String)> = HashSet::new();
        let mut cut = false;
        for row in rows {
            let pair = (row.topic.clone(), row.key.clone());
            let behind = in_flight.contains(row.key.as_str())
                || taken.contains(&pair)
                || blocking.get(&pair).is_some_and(|&at| at < row.seq);
            if row.extra.excepted {
                if legacy_marks && row.extra.legacy_published {
                    sorted.settled.push(row.seq);
                } else if row.fetch == Fetch::Later || behind {
                    hold(&mut blocking, pair, row.seq);
                } else {
                    taken.insert(pair);
                    sorted.take.push(row);
                }
                continue;
            }
            // A new row: past the fetch's byte budget, it and every later one wait for
            // the next fetch (the watermark stops below it).
            if cut || row.fetch == Fetch::Later {
                cut = true;
                continue;
            }
            sorted.high = Some(row.seq);
            let legacy_back_off = row.extra.next_attempt_at.is_some_and(|at| at > now)
                && !row
                    .extra
                    .last_error
                    .as_deref()
                    .is_some_and(|e| e.starts_with(store::WAITING_FOR_TOPIC));
            let reason = if waiting.contains(row.topic.as_str()) {
                Some("topic")
            } else if legacy_back_off {
                Some("legacy")
            } else if behind {
                Some("behind")
            } else {
                None
            };
            match reason {
                Some(reason) => {
                    hold(&mut blocking, pair, row.seq);
                    sorted.hold.push((row, reason));
                }
                None => {
                    taken.insert(pair);
                    sorted.take.push(row);
                }
            }
        }
        sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn exception(seq: i64, key: &str) -> Exception {
        Exception {
            seq,
            key: key.to_owned(),
            topic: "t".to_owned(),
            attempts: 0,
            failures: 0,
            next_attempt_at: None,
            failed: false,
        }
    }

    fn row(seq: i64, key: &str, excepted: bool) -> OutboxRow {
        OutboxRow {
            id: Uuid::from_u128(seq as u128),
            seq,
            key: key.to_owned(),
            topic: "t".to_owned(),
            payload: "{}".to_owned(),
            headers: "{}".to_owned(),
            occurred_at: DateTime::UNIX_EPOCH,
            size: 4,
            fetch: Fetch::Loaded,
            extra: store::RowExtra {
                excepted,
                ..Default::default()
            },
        }
    }

    fn pair(key: &str) -> (String, String) {
        ("t".to_owned(), key.to_owned())
    }

    #[test]
    fn a_due_exception_the_batch_has_no_room_for_holds_its_key() {
        // Six exceptions due (a topic came back), batches of three: a, b and c go; d, e
        // and f wait for the next batch, and the new rows of d and f wait behind them.
        let exceptions: Vec<Exception> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .zip(1..)
            .map(|(key, seq)| exception(seq, key))
            .collect();
        let none = HashSet::new();
        let now = DateTime::UNIX_EPOCH;
        let read = Due::of(&exceptions, now, &none, &none, 3);
        assert_eq!(read.due, [1, 2, 3]);
        assert_eq!(
            read.blocking,
            HashMap::from([(pair("d"), 4), (pair("e"), 5), (pair("f"), 6)])
        );
        let fetched = vec![
            row(1, "a", true),
            row(2, "b", true),
            row(3, "c", true),
            row(7, "d", false),
            row(8, "g", false),
            row(9, "f", false),
        ];
        let sorted = Sorted::of(fetched, read.blocking, now, &none, &none, false);
        let taken: Vec<i64> = sorted.take.iter().map(|r| r.seq).collect();
        let held: Vec<(i64, &str)> = sorted.hold.iter().map(|(r, why)| (r.seq, *why)).collect();
        assert_eq!(taken, [1, 2, 3, 8]);
        assert_eq!(held, [(7, "behind"), (9, "behind")]);
        assert_eq!(sorted.high, Some(9));
    }

    #[test]
    fn exceptions_backing_off_or_in_flight_hold_their_keys_and_the_rest_go() {
        let now = DateTime::UNIX_EPOCH;
        let later = now + chrono::Duration::seconds(5);
        let exceptions = vec![
            Exception {
                next_attempt_at: Some(later),
                ..exception(1, "a")
            },
            exception(2, "b"),
            exception(3, "a"),
            Exception {
                failed: true,
                ..exception(4, "c")
            },
            exception(5, "c"),
            exception(6, "d"),
            Exception {
                topic: "waits".to_owned(),
                ..exception(7, "e")
            },
        ];
        let in_flight = HashSet::from(["b"]);
        let waiting = HashSet::from(["waits"]);
        let read = Due::of(&exceptions, now, &waiting, &in_flight, 10);
        // a's second waits behind its first (backing off), b is in flight, c's failed
        // row holds nothing, e's topic waits.
        assert_eq!(read.due, [5, 6]);
        assert_eq!(
            read.blocking,
            HashMap::from([
                (pair("a"), 1),
                (pair("b"), 2),
                (("waits".to_owned(), "e".to_owned()), 7)
            ])
        );
    }

    /// A small deterministic generator (xorshift64*): the cases below replay by seed.
    struct Draw(u64);

    impl Draw {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    /// Random exceptions (some failed, backing off, on a waiting topic or of a key in
    /// flight), a batch limit, and new rows above them: whatever the read sends keeps
    /// per-key order. No row goes while an older unsettled row of its key (per topic)
    /// stays behind, none of a key in flight or a waiting topic, at most one per key.
    #[test]
    fn a_read_never_sends_a_row_before_an_older_row_of_its_key() {
        let now = DateTime::UNIX_EPOCH;
        let keys = ["a", "b", "c", "d"];
        let topics = ["t", "u"];
        for seed in 1..=20_000u64 {
            let mut d = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let mut seqs: Vec<i64> = (1..=20).collect();
            let mut exceptions: Vec<Exception> = (0..d.below(9))
                .map(|_| {
                    let seq = seqs.remove(d.below(seqs.len() as u64) as usize);
                    Exception {
                        topic: topics[d.below(2) as usize].to_owned(),
                        failed: d.below(10) == 0,
                        next_attempt_at: (d.below(5) == 0)
                            .then(|| now + chrono::Duration::seconds(1)),
                        ..exception(seq, keys[d.below(4) as usize])
                    }
                })
                .collect();
            exceptions.sort_by_key(|e| e.seq);
            let in_flight: HashSet<&str> = keys.into_iter().filter(|_| d.below(4) == 0).collect();
            let waiting: HashSet<&str> = (d.below(4) == 0).then_some("u").into_iter().collect();
            let limit = 1 + d.below(4) as usize;
            let read = Due::of(&exceptions, now, &waiting, &in_flight, limit);
            assert!(read.due.len() <= limit, "seed {seed}");
            // What the fetch returns: the due exceptions' rows, and new rows above them.
            let mut fetched: Vec<OutboxRow> = read
                .due
                .iter()
                .map(|&seq| {
                    let e = exceptions.iter().find(|e| e.seq == seq).unwrap();
                    OutboxRow {
                        topic: e.topic.clone(),
                        ..row(seq, &e.key, true)
                    }
                })
                .collect();
            fetched.extend((21..21 + d.below(6) as i64).map(|seq| OutboxRow {
                topic: topics[d.below(2) as usize].to_owned(),
                ..row(seq, keys[d.below(4) as usize], false)
            }));
            fetched.sort_by_key(|r| r.seq);
            let sorted = Sorted::of(fetched, read.blocking, now, &waiting, &in_flight, false);
            let mut sent: HashSet<(&str, &str)> = HashSet::new();
            for r in &sorted.take {
                let pair = (r.topic.as_str(), r.key.as_str());
                assert!(
                    sent.insert(pair),
                    "seed {seed}: two rows of {pair:?} in one batch"
                );
                assert!(
                    !in_flight.contains(pair.1),
                    "seed {seed}: {pair:?} is in flight"
                );
                assert!(!waiting.contains(pair.0), "seed {seed}: {} waits", pair.0);
                let older = exceptions.iter().find(|e| {
                    !e.failed
                        && (e.topic.as_str(), e.key.as_str()) == pair
                        && e.seq < r.seq
                        && !sorted.take.iter().any(|t| t.seq == e.seq)
                });
                assert!(
                    older.is_none(),
                    "seed {seed}: row {} of {pair:?} goes before {older:?} (limit {limit}, \
                     in flight {in_flight:?}, waiting {waiting:?}, exceptions {exceptions:?})",
                    r.seq
                );
            }
        }
    }
}
