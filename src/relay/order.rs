//! The per-key order rule of one read: which exceptions go now and which keys the
//! others hold ([`Due`]), and a fetch told apart into the rows to send and the rows held
//! behind an older row of their key, their topic or a back-off ([`Sorted`]). Pure: the
//! queue ([`super::queue`]) reads the database and writes the held rows.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::store::{self, Exception, Fetch, OutboxRow};

/// Whether an exception may go now: not failed, its back-off over, its topic usable.
fn is_due(e: &Exception, now: DateTime<Utc>, waiting: &HashSet<&str>) -> bool {
    !e.failed && e.next_attempt_at.is_none_or(|at| at <= now) && !waiting.contains(e.topic.as_str())
}

/// The exceptions one read sends, and the keys the others hold.
#[derive(Debug, PartialEq)]
pub(super) struct Due {
    /// The exceptions to send now, by `seq`: at most a batch of them.
    pub(super) due: Vec<i64>,
    /// Per key and topic, the lowest `seq` of an exception still to be settled and not
    /// sent by this read: a later row of the key waits behind it (per-key order). That
    /// is one backing off, in flight or on a waiting topic, and also one due that the
    /// batch had no room for: a new row of its key must not overtake it.
    pub(super) blocking: HashMap<(String, String), i64>,
}

impl Due {
    /// `exceptions` in `seq` order; `limit`: the batch size.
    pub(super) fn of(
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

/// A fetch told apart: the rows to send, the new rows held (with why), the exceptions
/// the release before delivered meanwhile, and the `high` the new rows reach.
pub(super) struct Sorted {
    pub(super) take: Vec<OutboxRow>,
    pub(super) hold: Vec<(OutboxRow, &'static str)>,
    pub(super) settled: Vec<i64>,
    pub(super) high: Option<i64>,
}

impl Sorted {
    pub(super) fn of(
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
