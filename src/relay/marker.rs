//! The relay's marks on a session of their own: the acknowledged rows of a batch are
//! marked published by a thread while the relay fetches and enqueues the next batch on
//! its main session, so the database's two statements per batch overlap the relay's
//! own work. A batch's keys stay in flight (out of the next fetch) until its mark has
//! committed; at most a few batches wait for their marks. The same session reads the
//! next batch ahead when the relay asks ([`Marker::read_ahead`]): the read's wait then
//! overlaps the relay's settling of the batch before.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::thread::JoinHandle;

use anyhow::{Result, anyhow};
use chrono::{DateTime, Utc};

use super::RelayResult;
use super::failures::Marks;
use super::queue::{Read, ReadAt, ReadStatements};
use crate::config::{DbConfig, RelayConfig};
use crate::domain::OutboxTypes;
use crate::store::{self, Delivered, Receipt};

/// Where a batch's mark moves the watermark (the relay's own state): its `high`, and
/// the snapshot of the fetch that read it, the sweep's top once marked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HighMark {
    pub high: i64,
    pub snapshot: Option<String>,
}

impl HighMark {
    /// The mark of a fetch on the relay's own state (`high` is `None` on the columns').
    pub(super) fn of(high: Option<i64>, snapshot: Option<String>) -> Option<Self> {
        high.map(|high| HighMark { high, snapshot })
    }
}

/// What the mark session is asked to do, in order.
enum Job {
    Mark(MarkJob),
    /// The next batch's read, ahead ([`Marker::read_ahead`]).
    Read(ReadAt),
}

struct MarkJob {
    now: DateTime<Utc>,
    acked: Vec<Delivered>,
    seqs: (i64, i64),
    /// The watermark after this batch (the relay's own state).
    high: Option<HighMark>,
}

/// The mark session's thread: its jobs in, its marks and reads out.
struct MarkThread {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Result<u64>>,
    reads: mpsc::Receiver<Result<Read>>,
    thread: JoinHandle<()>,
}

/// Marks submitted and not yet confirmed, with the keys they keep in flight.
pub(super) struct Marker<'a> {
    db: &'a DbConfig,
    cfg: &'a RelayConfig,
    marks: Marks,
    /// Started on the first mark: a run with nothing to publish opens no second session.
    worker: Option<MarkThread>,
    waiting: VecDeque<Vec<String>>,
    /// A read ahead was asked for and its result not taken yet.
    reading: bool,
    /// A read ahead failed: the run reads on its main session from then on.
    reads_off: bool,
    /// A batch could not be handed over: the session's thread had ended.
    ended: bool,
}

impl<'a> Marker<'a> {
    pub(super) fn new(cfg: &'a RelayConfig, marks: Marks) -> Self {
        Marker {
            db: &cfg.db,
            cfg,
            marks,
            worker: None,
            waiting: VecDeque::new(),
            reading: false,
            reads_off: false,
            ended: false,
        }
    }

    /// Batches whose marks are not confirmed yet.
    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &str> {
        self.waiting.iter().flatten().map(String::as_str)
    }

    /// Opens the mark session unless it is open: before the first batch is sent, so
    /// that no row goes out that could not then be marked (a read-only server fails here).
    pub(super) fn ready(&mut self) -> Result<()> {
        if self.worker.is_none() {
            self.worker = Some(start(self.db, self.cfg, self.marks)?);
        }
        Ok(())
    }

    /// Hands the acknowledged rows of a batch (`keys`: every key it sent) to the mark
    /// session. `seqs` spans the `seq` of the rows in `acked`.
    pub(super) fn submit(
        &mut self,
        keys: Vec<String>,
        now: DateTime<Utc>,
        acked: Vec<Delivered>,
        seqs: (i64, i64),
        high: Option<HighMark>,
    ) -> Result<()> {
        self.ready()?;
        let worker = self.worker.as_ref().expect("started above");
        let job = Job::Mark(MarkJob {
            now,
            acked,
            seqs,
            high,
        });
        if worker.jobs.send(job).is_err() {
            // The session's thread ended after a mark failed; that mark's error waits
            // among the marks' results, and the next collect returns it, so the run
            // ends with the database's own error. These rows go again next run.
            self.ended = true;
            return Ok(());
        }
        self.waiting.push_back(keys);
        Ok(())
    }

    /// Asks the mark session to read the next batch (the relay's own state and the rows
    /// above `at.high`) while the relay goes on; [`Marker::take_ahead`] takes it. Not
    /// when the session is not open, a read is already asked for, or one failed.
    pub(super) fn read_ahead(&mut self, at: ReadAt) {
        if self.reading || self.reads_off {
            return;
        }
        if let Some(worker) = &self.worker {
            self.reading = worker.jobs.send(Job::Read(at)).is_ok();
        }
    }

    /// The read asked for ahead, once it is done (waiting for it), or none. A read
    /// that failed is logged and none is asked for again: the relay reads on its main
    /// session, where a failure takes its usual course.
    pub(super) fn take_ahead(&mut self) -> Option<Read> {
        if !std::mem::take(&mut self.reading) {
            return None;
        }
        // The session ended (a mark failed, which the marks report): no read.
        let Ok(read) = self.worker.as_ref()?.reads.recv() else {
            self.reads_off = true;
            return None;
        };
        match read {
            Ok(read) => Some(read),
            Err(e) => {
                log::warn!(Error = format!("{e:#}").as_str();
                           "the relay's read ahead on its mark session failed: it reads on its main session from now on");
                self.reads_off = true;
                None
            }
        }
    }

    /// Counts the marks confirmed so far, without waiting.
    pub(super) fn collect_ready(&mut self, result: &mut RelayResult) -> Result<()> {
        while let Some(worker) = &self.worker
            && !self.waiting.is_empty()
        {
            match worker.done.try_recv() {
                Ok(marked) => self.confirmed(marked?, result),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(anyhow!("the relay's mark session ended"));
                }
            }
        }
        if self.ended && self.waiting.is_empty() {
            return Err(anyhow!("the relay's mark session ended"));
        }
        Ok(())
    }

    /// Waits for the oldest mark.
    pub(super) fn collect_one(&mut self, result: &mut RelayResult) -> Result<()> {
        if let Some(worker) = &self.worker
            && !self.waiting.is_empty()
        {
            let marked = worker
                .done
                .recv()
                .map_err(|_| anyhow!("the relay's mark session ended"))?;
            self.confirmed(marked?, result);
        }
        Ok(())
    }

    /// Waits for every mark, then closes the mark session.
    pub(super) fn finish(&mut self, result: &mut RelayResult) -> Result<()> {
        let mut outcome = Ok(());
        while !self.waiting.is_empty() {
            outcome = self.collect_one(result);
            if outcome.is_err() {
                break;
            }
        }
        if let Some(worker) = self.worker.take() {
            drop(worker.jobs);
            let _ = worker.thread.join();
        }
        outcome
    }

    fn confirmed(&mut self, marked: u64, result: &mut RelayResult) {
        self.waiting.pop_front();
        result.published += marked;
    }
}

/// The relay's connections: its main session (the relay lock, LISTEN, fetches) and the
/// mark session. A refusal for too many connections says so.
const CONNECTIONS_HELP: &str = "relay-outbox needs 2 database connections at once: \
     the main session holds the relay lock, listens and fetches, a second marks acknowledged \
     rows while the next batch is sent";

/// Adds, to a connection refused for too many connections, how many the relay needs.
pub(super) fn needs_two(e: anyhow::Error) -> anyhow::Error {
    if !crate::exit::store_error(&e).is_some_and(store::StoreError::too_many_connections) {
        return e;
    }
    let failure = crate::exit::failure_of(&e);
    e.context(crate::exit::Classified {
        failure,
        message: format!(
            "{CONNECTIONS_HELP}, and the server refused the second (too many connections): \
             allow the role 2 or more (ALTER ROLE … CONNECTION LIMIT 2) or raise max_connections"
        ),
    })
}

fn start(db: &DbConfig, cfg: &RelayConfig, marks: Marks) -> Result<MarkThread> {
    let cfg = cfg.clone();
    let types: OutboxTypes = cfg.outbox_types.clone();
    let mut session = store::connect_another(db).map_err(|e| needs_two(e.into()))?;
    session.require_writable(db, "relay-outbox")?;
    let mark = store::prepare_mark_published(&mut session.client)?;
    let receipts = match marks {
        Marks::Own { .. } => Some(store::prepare_mark_receipts(&mut session.client)?),
        Marks::Columns => None,
    };
    let legacy = matches!(marks, Marks::Own { legacy: true });
    let (jobs, inbox) = mpsc::channel::<Job>();
    let (outbox, done) = mpsc::channel();
    let (read_out, reads) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("relay-marks".to_owned())
        .spawn(move || {
            // Prepared on the first read ahead: a run that never reads ahead prepares none.
            let mut read_stmts: Option<ReadStatements> = None;
            for job in inbox {
                let job = match job {
                    Job::Mark(job) => job,
                    Job::Read(at) => {
                        let read = match &read_stmts {
                            Some(stmts) => Ok(stmts),
                            None => ReadStatements::prepare(&mut session.client)
                                .map(|stmts| &*read_stmts.insert(stmts)),
                        }
                        .and_then(|stmts| Read::above(&mut session.client, stmts, &cfg, at));
                        // The relay may have ended meanwhile: nobody takes it then.
                        let _ = read_out.send(read);
                        continue;
                    }
                };
                let marked = match (&receipts, job.high) {
                    (Some(receipts), Some(high)) => store::mark_receipts(
                        &mut session.client,
                        receipts,
                        job.now,
                        &job.acked,
                        store::NewHigh {
                            seq: high.high,
                            snapshot: high.snapshot.as_deref(),
                        },
                        &types,
                        legacy.then_some((&mark, job.seqs)),
                    ),
                    _ => {
                        let acked: Vec<Receipt> = job.acked.iter().map(|d| d.receipt).collect();
                        store::mark_published(
                            &mut session.client,
                            &mark,
                            job.now,
                            &acked,
                            job.seqs,
                            &types,
                        )
                    }
                }
                .map_err(anyhow::Error::from);
                let failed = marked.is_err();
                if outbox.send(marked).is_err() || failed {
                    return;
                }
            }
        })?;
    Ok(MarkThread {
        jobs,
        done,
        reads,
        thread,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relay_config() -> RelayConfig {
        RelayConfig::from_flags(&[
            "--database-url",
            "postgres://r@db/crm",
            "--brokers",
            "kafka:9092",
        ])
    }

    /// A mark session's thread whose first mark failed: it sends the failure back and
    /// ends, as the real one does.
    fn failed_once() -> MarkThread {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let (_read_out, reads) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _first = inbox.recv();
            let _ = outbox.send(Err(anyhow!("db error: the server closed the connection")));
        });
        MarkThread {
            jobs,
            done,
            reads,
            thread,
        }
    }

    /// A batch handed over after the thread ended (its mark failed meanwhile) is not an
    /// error of its own: the next collect returns the failed mark's error, so the run
    /// ends with the database's words and exit code, not "the mark session ended".
    #[test]
    fn a_batch_handed_over_after_a_failed_mark_ends_the_run_with_that_marks_error() {
        let cfg = relay_config();
        let mut marker = Marker::new(&cfg, Marks::Columns);
        marker.worker = Some(failed_once());
        let now = DateTime::UNIX_EPOCH;
        marker
            .submit(vec!["a".into()], now, Vec::new(), (1, 1), None)
            .unwrap();
        // Until the thread has answered and ended (it does at once).
        while !marker.worker.as_ref().unwrap().thread.is_finished() {
            std::thread::yield_now();
        }
        marker
            .submit(vec!["b".into()], now, Vec::new(), (2, 2), None)
            .expect("handed over to an ended thread: no error of its own");
        assert_eq!(marker.len(), 1, "only the first batch waits for a mark");
        let mut result = RelayResult::default();
        let e = marker.collect_ready(&mut result).unwrap_err();
        assert_eq!(e.to_string(), "db error: the server closed the connection");
        // Nothing waits any more, and the session is known to be gone.
        let e = marker.collect_ready(&mut result).unwrap_err();
        assert_eq!(e.to_string(), "the relay's mark session ended");
        assert_eq!(result.published, 0);
    }
}
