// Over 450 lines: one cycle read top to bottom: the clock guard, the phases taking turns within the budget, and each batch's claim, decision, write, quarantine and commit.
//! `run-once`: one expiration cycle. AsOf is read once; the phases take batches in
//! turn while rows remain, up to `max_batches` each and while the deadline leaves time
//! for one more, each batch in its own short transaction: claim → domain decision →
//! one set-based write → quarantine the poison → commit.

use std::time::Instant;

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::{error, info, warn};
use postgres::Client;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Clock, seconds};
use crate::config::RunOnceConfig;
use crate::domain::{self, Phase, rfc3339};
use crate::exit::{Classified, ClassifyExt, Failure, fail};
use crate::obs::lateness::Lateness;
use crate::obs::trace::{self, Attr};
use crate::ops::pause::{PauseWatch, Paused};
use crate::shutdown;
use crate::store::{self, ClaimKey, CycleStatements, Db, Need, Poison};

/// The result of a cycle, printed as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CycleResult {
    pub run_id: Uuid,
    pub as_of: String,
    pub reserve_expired_count: u64,
    pub booking_expired_count: u64,
    pub skipped_locked_count: u64,
    pub poison_count: u64,
    pub duration_ms: u64,
    /// Set when `run-once` is paused (`booking-expire pause run-once`): at the start
    /// (nothing ran), or while it worked (the counts are what committed before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::ops::pause::Paused>,
    /// How late the committed expiries were, per phase (for the metrics push).
    #[serde(skip)]
    pub lateness: Lateness,
}

/// What one batch did.
#[derive(Debug, Default)]
struct BatchOutcome {
    claimed: usize,
    /// The key of the last row claimed: where the phase's next batch starts.
    last: Option<ClaimKey>,
    expired: u64,
    skipped: u64,
    poison: u64,
    /// Seconds from deadline to AsOf of each committed expiry (at most the batch size).
    lateness: Vec<f64>,
}

/// Runs one cycle of run `result.run_id`, counting into `result` as batches commit, so
/// what committed is known also when the cycle fails (as `Read::read_to_end` keeps what
/// it read). On a signal it stops before the next batch (the batch in flight commits or
/// rolls back whole) and fails with `Interrupted`, after logging what it did. On an
/// infrastructure error the batch in flight rolls back.
pub fn run_once(cfg: &RunOnceConfig, clock: &dyn Clock, result: &mut CycleResult) -> Result<()> {
    let started = Instant::now();
    let as_of = clock.now();
    let span = trace::span(
        "run-once cycle",
        vec![
            Attr::new("RunId", result.run_id.to_string()),
            Attr::new("AsOf", rfc3339(as_of)),
        ],
    );
    let outcome = cycle_at(cfg, as_of, started, result);
    span.set([
        Attr::new("ReserveExpiredCount", result.reserve_expired_count as i64),
        Attr::new("BookingExpiredCount", result.booking_expired_count as i64),
        Attr::new("SkippedLockedCount", result.skipped_locked_count as i64),
        Attr::new("PoisonCount", result.poison_count as i64),
        Attr::new("DurationMs", result.duration_ms as i64),
    ]);
    span.outcome(&outcome);
    outcome
}

fn cycle_at(
    cfg: &RunOnceConfig,
    as_of: DateTime<Utc>,
    started: Instant,
    result: &mut CycleResult,
) -> Result<()> {
    info!(RunId:% = result.run_id, AsOf:% = rfc3339(as_of), BatchSize = cfg.batch.size,
          MaxBatches = cfg.batch.max_batches, Topics = cfg.topics.to_flag().as_str();
          "cycle started");

    let mut db = store::connect(&cfg.db)?;
    if let Some(paused) =
        crate::ops::pause::honour(&mut db.client, crate::config::Pausable::RunOnce, as_of)?
    {
        result.as_of = rfc3339(as_of);
        result.paused = Some(paused);
        result.duration_ms = started.elapsed().as_millis() as u64;
        return Ok(());
    }
    db.require_writable(&cfg.db, "run-once")?;
    crate::ops::pooler::require_session(&cfg.db, &mut db.client, "run-once", true)?;
    // For `pause --wait`: this cycle works until its deadline at the latest.
    let ends = as_of + cfg.deadline.saturating_sub(started.elapsed());
    crate::ops::pause::announce_working(&mut db.client, crate::config::Pausable::RunOnce, ends)?;
    shutdown::on_signal(db.interrupter());
    check_clock(&mut db.client, cfg.max_clock_skew)?;
    store::check_schema(&mut db.client, Need::Cycle)?;
    let stmts = CycleStatements::prepare(&mut db.client)?;
    run_cycle(&mut db, &stmts, cfg, as_of, started, result)
}

/// The cycle proper at `as_of`, on a session that is open, checked (clock, schema) and
/// has the cycle's statements prepared: `run_once` makes one per run, a long-lived
/// caller (the long-horizon simulation) keeps one across cycles. `started` is when the
/// cycle's time budget began.
pub fn run_cycle(
    db: &mut Db,
    stmts: &CycleStatements,
    cfg: &RunOnceConfig,
    as_of: DateTime<Utc>,
    started: Instant,
    result: &mut CycleResult,
) -> Result<()> {
    let run_id = result.run_id;
    result.as_of = rfc3339(as_of);
    // The hard end of the budget: a statement still running at the deadline is
    // cancelled and its batch rolls back, so a cycle never outlives its minute.
    let deadline = shutdown::Deadline::start(
        cfg.deadline.saturating_sub(started.elapsed()),
        db.interrupter(),
    );
    let outcome = run_phases(db, stmts, cfg, run_id, as_of, started, result).map_err(|e| {
        if deadline.fired() {
            passed_mid_batch(e, cfg)
        } else {
            e
        }
    });
    drop(deadline);
    result.duration_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(()) => {
            info!(ReserveExpiredCount = result.reserve_expired_count,
                  BookingExpiredCount = result.booking_expired_count,
                  SkippedLockedCount = result.skipped_locked_count,
                  PoisonCount = result.poison_count,
                  DurationMs = result.duration_ms;
                  "cycle completed");
            Ok(())
        }
        Err(e) => {
            // What committed before the failure stays committed: say so, then fail.
            warn!(ReserveExpiredCount = result.reserve_expired_count,
                  BookingExpiredCount = result.booking_expired_count,
                  PoisonCount = result.poison_count,
                  DurationMs = result.duration_ms;
                  "cycle stopped early; batches committed before this point stay committed");
            Err(e)
        }
    }
}

/// The clock guard: AsOf comes from this node's clock, so a node whose clock is wrong
/// must not expire anything (bookings would expire early, or late).
fn check_clock(client: &mut Client, max: std::time::Duration) -> Result<()> {
    let skew = store::measure_clock_skew(client)
        .classify(Failure::Temporary, "cannot read the database clock")?;
    info!(SystemAheadMs = skew.system_ahead_by.num_milliseconds(),
          RoundTripMs = skew.round_trip.as_millis() as u64,
          MaxClockSkewMs = max.as_millis() as u64; "clock skew measured");
    if skew.certain() <= max {
        return Ok(());
    }
    let measured = skew.system_ahead_by.abs().to_std().unwrap_or_default();
    let direction = if skew.system_ahead_by > chrono::TimeDelta::zero() {
        "ahead"
    } else {
        "behind"
    };
    Err(fail(
        Failure::Config,
        format!(
            "system clock and database clock differ by {:.1}s (the system clock is {direction}, \
             allowed {}): refusing to expire bookings; fix the node's time sync",
            measured.as_secs_f64(),
            crate::duration::show_duration(max),
        ),
    ))
}

/// Both phases, batch by batch in turn (Reserve, Booking, Reserve, …), each until its
/// queue is empty for us or it took `max_batches`, while the cycle's budget allows a
/// new batch (see [`Budget`]). Taking turns keeps a backlog of one phase from holding
/// back the other's expiries when a catch-up needs several cycles. When the first turn
/// finds both phases with a backlog (both batches full: after an outage), the Booking
/// phase goes on on a second session of its own, side by side with the Reserve phase
/// on this one ([`side_by_side`]): the two use both the database's and the client's
/// time, which one session alternates between. A normal minute never opens it.
///
/// A phase that fails does not stop the other: its batch rolled back, the error is
/// kept, the other phase goes on, and the cycle then fails with the first error (a
/// poison row in one phase must never hold back the other's expiries). A signal or a
/// lost connection stop everything. Running out of budget with rows left is a normal
/// end: the rest waits for the next cycle, and how much is left is logged.
fn run_phases(
    db: &mut Db,
    stmts: &CycleStatements,
    cfg: &RunOnceConfig,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    started: Instant,
    result: &mut CycleResult,
) -> Result<()> {
    let mut budget = Budget::new(cfg.deadline, started);
    let mut turns = Phase::ALL.map(Turn::new);
    let mut drained = Drained::default();
    let failed_before = read_failures(&mut db.client, cfg, &mut turns);
    let s = Session {
        stmts,
        cfg,
        run_id,
        as_of,
        pause: PauseWatch::new(&mut db.client, crate::config::Pausable::RunOnce)?,
    };
    // The batches' transactions form a chain (see `run_batch`): the first is begun
    // here, each batch ends its own with `COMMIT AND CHAIN` (or `ROLLBACK AND CHAIN`),
    // and the empty one left after the last batch is ended below.
    begin_chain(&mut db.client)?;
    s.drain(
        &mut db.client,
        &mut budget,
        &mut turns,
        result,
        &mut drained,
        true,
    );
    if !drained.stopped
        && drained.first_error.is_none()
        && turns.iter().all(|t| t.open && t.alone == 0)
    {
        side_by_side(
            db,
            &s,
            started,
            &mut budget,
            &mut turns,
            result,
            &mut drained,
        );
    }
    // What is still open takes turns on this session: after a normal first turn, or
    // when the second session could not be opened or failed.
    if !drained.stopped {
        s.drain(
            &mut db.client,
            &mut budget,
            &mut turns,
            result,
            &mut drained,
            false,
        );
    }
    let client = &mut db.client;
    // Ends the empty transaction the last batch chained (nothing in it: no statement
    // ran since). A lost connection shows in `is_closed` below.
    if !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK");
    }
    if drained.out_of_budget && drained.first_error.is_none() {
        let unfinished: Vec<Phase> = turns.iter().filter(|t| t.open).map(|t| t.phase).collect();
        report_left(client, stmts, cfg, &budget, as_of, &unfinished);
    }
    let mut first_error = drained.first_error;
    if let Some(paused) = drained.paused {
        let done = format!(
            "no batch started after it; the {} bookings expired before stay expired",
            result.reserve_expired_count + result.booking_expired_count
        );
        crate::ops::pause::stopped_mid_run(crate::config::Pausable::RunOnce, &paused, &done);
        result.paused = Some(paused);
    }
    if !client.is_closed() {
        // A batch that failed before the pause is remembered all the same: the next
        // cycle isolates it row by row.
        if let Some(before) = &failed_before {
            remember_failures(client, before, &turns, as_of, run_id);
        }
    }
    if result.paused.is_none() && !client.is_closed() {
        release_stale_quarantine(client, stmts, as_of, &budget, &mut first_error);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Every batch's transaction checks each constraint at the statement that breaks it,
/// also those the CRM declared `DEFERRABLE INITIALLY DEFERRED`: a refused row then
/// fails its write, where the batch can isolate and quarantine it, not the COMMIT,
/// where the whole batch would roll back. The setting lasts one transaction, so every
/// begin and chain of a batch's transaction sets it (in the same round trip).
const IMMEDIATE: &str = "SET CONSTRAINTS ALL IMMEDIATE";

/// Begins the first transaction of a session's chain of batches.
fn begin_chain(client: &mut Client) -> Result<()> {
    client
        .batch_execute(&format!("BEGIN; {IMMEDIATE}"))
        .map_err(|e| {
            anyhow::Error::new(e).context(Classified {
                failure: Failure::Temporary,
                message: "cannot begin the first batch's transaction".to_owned(),
            })
        })
}

/// A phase between its batches in a cycle.
#[derive(Debug, Clone)]
struct Turn {
    phase: Phase,
    /// Batches taken so far.
    taken: u32,
    /// Whether it still takes batches.
    open: bool,
    /// The key its next batch starts after.
    after: Option<ClaimKey>,
    /// Bookings still to take one per transaction: the phase's batch failed last
    /// cycle (see [`remember_failures`]).
    alone: u32,
    /// How its batch failed in this cycle, if it did.
    failed: Option<PhaseFailed>,
}

impl Turn {
    fn new(phase: Phase) -> Self {
        Turn {
            phase,
            taken: 0,
            open: true,
            after: None,
            alone: 0,
            failed: None,
        }
    }
}

/// How a phase's batch failed, as the next cycle is told.
#[derive(Debug, Clone)]
struct PhaseFailed {
    sqlstate: Option<String>,
    error: String,
}

/// How the phases' batches ended so far.
#[derive(Default)]
struct Drained {
    first_error: Option<anyhow::Error>,
    /// The budget allowed no further batch while a phase was still open.
    out_of_budget: bool,
    /// Nothing more may run: a signal, a lost connection, the budget spent, or a pause.
    stopped: bool,
    /// `run-once` was paused while the cycle worked.
    paused: Option<Paused>,
}

/// What the batches of a cycle share, whichever session runs them.
struct Session<'a> {
    stmts: &'a CycleStatements,
    cfg: &'a RunOnceConfig,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    pause: PauseWatch,
}

impl Session<'_> {
    /// The open `turns`, batch by batch in turn on `client` (inside its chain of
    /// transactions), until none is open, or after one round when `one_round`.
    fn drain(
        &self,
        client: &mut Client,
        budget: &mut Budget,
        turns: &mut [Turn],
        result: &mut CycleResult,
        drained: &mut Drained,
        one_round: bool,
    ) {
        while turns.iter().any(|t| t.open) {
            for turn in turns.iter_mut().filter(|t| t.open) {
                if let Some(signal) = shutdown::requested() {
                    drained.first_error.get_or_insert(fail(
                        Failure::Interrupted(signal),
                        format!("interrupted by signal {signal}; no new batch started"),
                    ));
                    drained.stopped = true;
                    return;
                }
                if !budget.allows_a_batch() {
                    drained.out_of_budget = true;
                    drained.stopped = true;
                    return;
                }
                // A pause stops the cycle at this batch boundary.
                match self.pause.check(client) {
                    Ok(None) => {}
                    Ok(Some(paused)) => {
                        drained.paused = Some(paused);
                        drained.stopped = true;
                        return;
                    }
                    Err(e) => {
                        drained.first_error.get_or_insert(e);
                        drained.stopped = true;
                        return;
                    }
                }
                let phase = turn.phase;
                let batch_started = Instant::now();
                let alone = turn.alone > 0;
                let batch = Batch {
                    stmts: self.stmts,
                    cfg: self.cfg,
                    phase,
                    run_id: self.run_id,
                    as_of: self.as_of,
                    after: turn.after,
                    limit: if alone { 1 } else { self.cfg.batch.size },
                    alone,
                    ends: budget.started + budget.deadline,
                };
                match run_one(client, &batch, result) {
                    Ok((claimed, last)) => {
                        budget.batch_took(batch_started.elapsed());
                        turn.after = last.or(turn.after);
                        if alone {
                            // One booking per transaction; none left: drained.
                            turn.alone -= 1;
                            if claimed == 0 {
                                turn.alone = 0;
                                turn.open = false;
                            }
                        } else {
                            turn.taken += 1;
                            // A short batch means the phase's queue is drained (for us).
                            if claimed < self.cfg.batch.size as usize
                                || turn.taken >= self.cfg.batch.max_batches
                            {
                                turn.open = false;
                            }
                        }
                    }
                    Err(e) => {
                        turn.open = false;
                        let fatal = shutdown::requested().is_some() || client.is_closed();
                        // Remembered for the next cycle, whatever the error, unless the
                        // batch was stopped from here (a signal, the deadline) or the
                        // session is gone.
                        if !fatal && !budget.left().is_zero() {
                            turn.failed = Some(PhaseFailed {
                                sqlstate: crate::sqlstate::code_in(&e).map(|c| c.code().to_owned()),
                                error: format!("{e:#}"),
                            });
                        }
                        error!(Phase:% = phase, Error:% = format!("{e:#}");
                               "phase failed; its batch rolled back");
                        drained.first_error.get_or_insert(e);
                        if fatal {
                            drained.stopped = true;
                            return;
                        }
                    }
                }
            }
            if one_round {
                return;
            }
        }
    }
}

/// The Booking phase on a second session, side by side with the Reserve phase on
/// `db`, each with the same deadline; both sessions' statements are cancelled on a
/// signal. If the second session cannot be opened (a connection limit, the database
/// going away), the Booking phase is left open and goes on taking turns on `db`
/// afterwards: a slower catch-up, never a failed cycle. What either did is counted
/// into `result` and `drained`; a failure of either is the cycle's.
fn side_by_side(
    db: &mut Db,
    s: &Session,
    started: Instant,
    budget: &mut Budget,
    turns: &mut [Turn; 2],
    result: &mut CycleResult,
    drained: &mut Drained,
) {
    let [reserve, booking] = turns;
    info!(Phase:% = booking.phase, ElapsedMs = started.elapsed().as_millis() as u64;
          "both phases have a backlog: the Booking phase goes on on a second session");
    let cfg = s.cfg;
    let mut other_budget = budget.clone();
    let mut other = CycleResult {
        run_id: s.run_id,
        lateness: result.lateness.clone(),
        ..CycleResult::default()
    };
    let interrupt_first = db.interrupter();
    let carried = trace::carry();
    let other_drained = std::thread::scope(|scope| {
        let second = scope.spawn(|| {
            let _span = carried.enter();
            let mut drained = Drained::default();
            let opened = store::connect_another(&cfg.db).and_then(|mut db2| {
                let stmts = CycleStatements::prepare(&mut db2.client)?;
                begin_chain(&mut db2.client)?;
                Ok((db2, stmts))
            });
            let (mut db2, stmts) = match opened {
                Ok(opened) => opened,
                Err(e) => {
                    warn!(Error:% = format!("{e:#}");
                          "cannot open a second session; the phases go on taking turns on one");
                    return None;
                }
            };
            let interrupt_second = db2.interrupter();
            shutdown::on_signal(move || {
                interrupt_first();
                interrupt_second();
            });
            let deadline = shutdown::Deadline::start(
                cfg.deadline.saturating_sub(started.elapsed()),
                db2.interrupter(),
            );
            let other_session = Session {
                stmts: &stmts,
                ..*s
            };
            other_session.drain(
                &mut db2.client,
                &mut other_budget,
                std::slice::from_mut(booking),
                &mut other,
                &mut drained,
                false,
            );
            if !db2.client.is_closed() {
                let _ = db2.client.batch_execute("ROLLBACK");
            }
            if deadline.fired() {
                drained.first_error = drained.first_error.map(|e| passed_mid_batch(e, cfg));
            }
            Some(drained)
        });
        s.drain(
            &mut db.client,
            budget,
            std::slice::from_mut(reserve),
            result,
            drained,
            false,
        );
        match second.join() {
            Ok(d) => d,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    // The second session is closed: a signal now only needs to reach this one.
    shutdown::on_signal(db.interrupter());
    let Some(other_drained) = other_drained else {
        return;
    };
    result.booking_expired_count += other.booking_expired_count;
    result.reserve_expired_count += other.reserve_expired_count;
    result.skipped_locked_count += other.skipped_locked_count;
    result.poison_count += other.poison_count;
    budget.slowest = budget.slowest.max(other_budget.slowest);
    if let Some(e) = other_drained.first_error {
        drained.first_error.get_or_insert(e);
    }
    drained.out_of_budget |= other_drained.out_of_budget;
    drained.stopped |= other_drained.stopped;
    if drained.paused.is_none() {
        drained.paused = other_drained.paused;
    }
}

/// A failure of a batch cut short by the cycle's deadline, told as such.
fn passed_mid_batch(e: anyhow::Error, cfg: &RunOnceConfig) -> anyhow::Error {
    e.context(Classified {
        failure: Failure::Temporary,
        message: format!(
            "the cycle deadline of {}ms passed mid-batch",
            cfg.deadline.as_millis()
        ),
    })
}

/// The cycle's time budget for starting batches. `--deadline` is the hard end (a
/// statement still running then is cancelled and its batch rolls back, exit 75), so
/// the cycle stops taking new batches early enough for the batch it starts to finish
/// before it: no batch starts once the time left is less than twice the slowest batch
/// so far, nor less than a margin of a tenth of the deadline (at most 1 s) that covers
/// a first batch and the bookkeeping after the last.
#[derive(Debug, Clone)]
struct Budget {
    deadline: std::time::Duration,
    started: Instant,
    slowest: std::time::Duration,
}

impl Budget {
    fn new(deadline: std::time::Duration, started: Instant) -> Self {
        Budget {
            deadline,
            started,
            slowest: std::time::Duration::ZERO,
        }
    }

    fn margin(&self) -> std::time::Duration {
        (self.deadline / 10).min(std::time::Duration::from_secs(1))
    }

    fn left(&self) -> std::time::Duration {
        self.deadline.saturating_sub(self.started.elapsed())
    }

    /// Whether a new batch may start now.
    fn allows_a_batch(&self) -> bool {
        self.left() >= self.margin().max(self.slowest * 2)
    }

    fn batch_took(&mut self, took: std::time::Duration) {
        self.slowest = self.slowest.max(took);
    }
}

/// The most overdue rows a cycle counts per phase when it stops with work left: the
/// count stays cheap (well within the margin) however large the backlog.
const LEFT_COUNT_CAP: i64 = 1_000_000;

/// Logs how many overdue bookings the cycle leaves for the next one (a normal end after
/// an outage: exit 0). The count is bounded, and a failed count is only a warning.
fn report_left(
    client: &mut Client,
    stmts: &CycleStatements,
    cfg: &RunOnceConfig,
    budget: &Budget,
    as_of: DateTime<Utc>,
    unfinished: &[Phase],
) {
    // A finished phase has none left; a count that failed (the deadline can cancel it
    // on a loaded database) is shown as unknown, not as none.
    let mut left = [Some(0), Some(0)];
    for &phase in unfinished {
        match store::count_left(client, stmts, phase, as_of, LEFT_COUNT_CAP) {
            Ok(n) => left[phase_slot(phase)] = Some(n),
            Err(e) => {
                left[phase_slot(phase)] = None;
                warn!(Phase:% = phase, Error:% = format!("{e:#}");
                      "cannot count the overdue bookings left");
            }
        }
    }
    let shown = |n: Option<u64>| match n {
        Some(n) if n >= LEFT_COUNT_CAP as u64 => format!("{LEFT_COUNT_CAP}+"),
        Some(n) => n.to_string(),
        None => "unknown".to_owned(),
    };
    warn!(ReserveLeft = shown(left[0]).as_str(), BookingLeft = shown(left[1]).as_str(),
          DeadlineMs = cfg.deadline.as_millis() as u64,
          SlowestBatchMs = budget.slowest.as_millis() as u64,
          ElapsedMs = budget.started.elapsed().as_millis() as u64;
          "cycle budget spent with overdue bookings left; the next cycle goes on with them");
}

fn phase_slot(phase: Phase) -> usize {
    match phase {
        Phase::Reserve => 0,
        Phase::Booking => 1,
    }
}

/// What a batch of a phase in a cycle is given: the session's statements, the
/// settings, the phase, the run and its moment, and the key the phase's previous batch
/// in this cycle ended at.
struct Batch<'a> {
    stmts: &'a CycleStatements,
    cfg: &'a RunOnceConfig,
    phase: Phase,
    run_id: Uuid,
    as_of: DateTime<Utc>,
    after: Option<ClaimKey>,
    /// How many bookings it claims: the batch size, or 1 when `alone`.
    limit: u32,
    /// One booking in its own transaction: a failure of any kind, at any statement or
    /// at COMMIT, quarantines the booking (see [`quarantine_alone`]).
    alone: bool,
    /// The cycle's hard end: a statement cancelled after it was cancelled by the cycle.
    ends: Instant,
}

/// What a batch's attempt left to know when it failed.
#[derive(Default)]
struct Attempt {
    /// The first booking it claimed.
    row: Option<domain::BookingRow>,
    /// The failure was the COMMIT's.
    at_commit: bool,
}

/// One batch, counted into `result`; returns how many rows it claimed and the key of
/// the last one.
fn run_one(
    client: &mut Client,
    b: &Batch,
    result: &mut CycleResult,
) -> Result<(usize, Option<ClaimKey>)> {
    let phase = b.phase;
    let span = trace::span("expire batch", vec![Attr::new("Phase", phase.to_string())]);
    let mut attempt = Attempt::default();
    let batch = match run_batch(client, b, Isolation::OnRefusal, &mut attempt) {
        Ok(Some(batch)) => Ok(batch),
        Ok(None) => {
            info!(Phase:% = phase;
                  "the database refused a row of the batch; rolled back, redone with isolation");
            run_batch(client, b, Isolation::Savepoints, &mut attempt).map(|b| {
                b.expect("a batch written with savepoints is never sent back for isolation")
            })
        }
        Err(e) => Err(e),
    };
    let batch = match batch {
        Ok(batch) => batch,
        Err(e) => match (b.alone, attempt.row.take(), alone_refusal(client, b, &e)) {
            (true, Some(row), Some(refusal)) => {
                quarantine_alone(client, b, &row, refusal, attempt.at_commit)
                    .inspect_err(|e| span.fail(e))?
            }
            _ => {
                span.fail(&e);
                return Err(e);
            }
        },
    };
    span.set([
        Attr::new("Claimed", batch.claimed as i64),
        Attr::new("Expired", batch.expired as i64),
        Attr::new("Poison", batch.poison as i64),
        Attr::new("SkippedLocked", batch.skipped as i64),
    ]);
    drop(span);
    for seconds in &batch.lateness {
        result.lateness.observe(phase, *seconds);
    }
    match phase {
        Phase::Reserve => result.reserve_expired_count += batch.expired,
        Phase::Booking => result.booking_expired_count += batch.expired,
    }
    result.skipped_locked_count += batch.skipped;
    result.poison_count += batch.poison;
    Ok((batch.claimed, batch.last))
}

/// Drops quarantine entries whose booking changed since (repaired, extended, cancelled,
/// deleted): they no longer describe the row, and a changed row is judged afresh.
/// Bounded per cycle; a failure here is reported like a phase's, after the phases ran.
fn release_stale_quarantine(
    client: &mut Client,
    stmts: &CycleStatements,
    as_of: DateTime<Utc>,
    budget: &Budget,
    first_error: &mut Option<anyhow::Error>,
) {
    if shutdown::requested().is_some() || !budget.allows_a_batch() {
        return;
    }
    match store::release_stale_quarantine(client, stmts) {
        Ok(0) => {}
        Ok(released) => {
            info!(Released = released, AsOf:% = rfc3339(as_of);
                  "quarantine entries released: their bookings changed since");
        }
        Err(e) => {
            let e = e.context("releasing stale quarantine entries failed");
            error!(Error:% = format!("{e:#}"); "quarantine upkeep failed");
            first_error.get_or_insert(e);
        }
    }
}

/// How a batch's write meets a row the database refuses (a trigger, a constraint).
#[derive(Clone, Copy, PartialEq)]
enum Isolation {
    /// One write statement, no savepoint; a refusal rolls the whole batch back and the
    /// caller redoes it with [`Isolation::Savepoints`]. The happy path: begin, claim,
    /// write, commit.
    OnRefusal,
    /// The write under savepoints, the refused rows isolated and quarantined, the rest
    /// written ([`store::write_isolating`]).
    Savepoints,
}

/// One batch in its own transaction, which the caller has begun (the first with
/// `BEGIN`, every later one chained by the batch before): the batch ends it with
/// `COMMIT AND CHAIN`, which commits and begins the next batch's transaction in the
/// same round trip, or on any failure with `ROLLBACK AND CHAIN`. The chained
/// transaction holds no snapshot, lock or transaction id until its first statement.
/// `Ok(None)`: with [`Isolation::OnRefusal`], the database refused a row; the batch
/// rolled back and nothing of it counts.
fn run_batch(
    client: &mut Client,
    b: &Batch,
    isolation: Isolation,
    attempt: &mut Attempt,
) -> Result<Option<BatchOutcome>> {
    let phase = b.phase;
    let outcome = batch_in_transaction(client, b, isolation, attempt);
    let end = match &outcome {
        Ok(Some(_)) => "COMMIT AND CHAIN",
        Ok(None) | Err(_) => "ROLLBACK AND CHAIN",
    };
    let ended = end_and_chain(client, end);
    let staged = outcome?;
    attempt.at_commit = staged.is_some() && ended.is_err();
    let what = if staged.is_some() {
        "commit failed"
    } else {
        "rollback failed"
    };
    ended.classify(
        Failure::Temporary,
        format!("{phase} batch: {what}; the batch rolled back"),
    )?;
    // Committed: only now are its expiries and quarantined rows logged and counted.
    Ok(staged.map(|s| s.report(phase)))
}

/// A batch written in its transaction, not yet committed: what to report once it is.
#[derive(Default)]
struct Staged {
    claimed: usize,
    last: Option<ClaimKey>,
    skipped: u64,
    writes: Vec<domain::BatchWrite>,
    /// Rows the guard refused (quarantined with the batch).
    refused: Vec<Poison>,
    /// Rows whose update the database dropped without an error (quarantined too).
    dropped: Vec<Poison>,
    written: store::WriteOutcome,
    traced: bool,
}

impl Staged {
    /// Logs each committed expiry and quarantined row, and counts them.
    fn report(self, phase: Phase) -> BatchOutcome {
        for p in &self.refused {
            error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
                   Error = p.error.as_str(); "item failed: the guard refused the row, quarantined");
            item_failed(p.booking_id, p.tenant_id, &p.error);
        }
        for (index, rejection) in &self.written.rejected {
            let w = &self.writes[*index];
            error!(BookingId:% = w.expiry.booking_id, TenantId:% = w.expiry.tenant_id, Phase:% = phase,
                   SqlState = rejection.sqlstate.as_str(), Error = rejection.message.as_str(); "item failed: the database rejected the write, quarantined");
            item_failed(w.expiry.booking_id, w.expiry.tenant_id, &rejection.message);
        }
        for p in &self.dropped {
            error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
                   Error = p.error.as_str(); "item failed: the database dropped the update, quarantined");
            item_failed(p.booking_id, p.tenant_id, &p.error);
        }
        let expired: std::collections::HashSet<Uuid> =
            self.written.expired.iter().copied().collect();
        let mut lateness = Vec::with_capacity(expired.len());
        for w in self
            .writes
            .iter()
            .filter(|w| expired.contains(&w.expiry.booking_id))
        {
            // A `-infinity` deadline has no lateness to observe.
            if let Some(late) = w.expiry.deadline.until(w.expiry.expired_at) {
                lateness.push(seconds(late));
            }
            // One message id per published contract version, comma-separated.
            let message_ids = w
                .events
                .iter()
                .map(|e| e.message_id.to_string())
                .collect::<Vec<_>>()
                .join(",");
            info!(BookingId:% = w.expiry.booking_id, DealId:% = w.expiry.deal_id, Phase:% = phase,
                  TenantId:% = w.expiry.tenant_id, MessageId = message_ids.as_str(); "booking expired");
            // With tracing off there is no span to carry the event: skip building it.
            if !self.traced {
                continue;
            }
            trace::event(
                "booking expired",
                vec![
                    Attr::new("BookingId", w.expiry.booking_id.to_string()),
                    Attr::new("TenantId", w.expiry.tenant_id.to_string()),
                    Attr::new("DealId", w.expiry.deal_id.to_string()),
                    Attr::new("MessageId", message_ids),
                ],
            );
        }
        BatchOutcome {
            claimed: self.claimed,
            last: self.last,
            expired: self.written.expired.len() as u64,
            skipped: self.skipped,
            poison: (self.refused.len() + self.dropped.len() + self.written.rejected.len()) as u64,
            lateness,
        }
    }
}

/// The batch's statements, in the transaction `run_batch` ends. Nothing is logged or
/// counted here: the transaction may still fail to commit.
fn batch_in_transaction(
    client: &mut Client,
    b: &Batch,
    isolation: Isolation,
    attempt: &mut Attempt,
) -> Result<Option<Staged>> {
    let &Batch {
        stmts,
        cfg,
        phase,
        run_id,
        as_of,
        after,
        limit,
        ..
    } = b;
    let context = |what: &str| format!("{phase} batch: {what}; the batch rolled back");
    let tx = client;
    let claim = store::claim(tx, stmts, phase, as_of, limit, after)
        .map_err(|e| e.context(context("claim failed")))?;
    attempt.row = claim.rows.first().cloned();
    let last = claim.last_key(phase);
    let store::Claim {
        rows: claimed,
        skipped,
    } = claim;
    info!(Phase:% = phase, Count = claimed.len(), SkippedLocked = skipped; "batch selected");
    if claimed.is_empty() {
        // Nothing written: the commit that ends the transaction releases nothing.
        return Ok(Some(Staged {
            skipped,
            ..Staged::default()
        }));
    }

    let versions = cfg.topics.versions();
    let (mut writes, refused) =
        domain::decide(&claimed, phase, as_of, run_id, versions, &mut Uuid::now_v7);
    // While tracing is on, each event's parent is the batch that wrote it.
    let traceparent = trace::current_traceparent();
    if let Some(traceparent) = &traceparent {
        for e in writes.iter_mut().flat_map(|w| &mut w.events) {
            e.headers = domain::with_header(&e.headers, "traceparent", traceparent);
        }
    }
    let written = match isolation {
        Isolation::OnRefusal => {
            match store::write_direct(tx, stmts, run_id, as_of, &writes)
                .map_err(|e| e.context(context("write failed")))?
            {
                Ok(expired) => store::WriteOutcome {
                    expired,
                    rejected: Vec::new(),
                },
                // The transaction is aborted: `run_batch` rolls it back.
                Err(_) => return Ok(None),
            }
        }
        Isolation::Savepoints => store::write_isolating(tx, stmts, run_id, as_of, &writes)
            .map_err(|e| e.context(context("write failed")))?,
    };
    // Rows the write changed nothing for although the claim holds their lock: a BEFORE
    // UPDATE trigger returned NULL, or a rule rewrote the update. Refused like any
    // other, so that they are named, quarantined and shown by `explain`, not claimed
    // again every minute.
    let dropped = dropped_updates(&writes, &written, phase);
    // The guard's refusals and the database's, quarantined in this transaction; they
    // are logged once it commits (`Staged::report`).
    let mut poison = refused.clone();
    poison.extend(dropped.iter().cloned());
    for (index, rejection) in &written.rejected {
        let w = &writes[*index];
        poison.push(Poison {
            booking_id: w.expiry.booking_id,
            tenant_id: w.expiry.tenant_id,
            version: w.expiry.expected_version,
            status: w.expiry.from.as_str().to_owned(),
            phase,
            reason: "database",
            error: rejection.message.clone(),
            sqlstate: Some(rejection.sqlstate.clone()),
        });
    }
    store::quarantine(tx, stmts, run_id, as_of, &poison)
        .map_err(|e| e.context(context("quarantine failed")))?;
    Ok(Some(Staged {
        claimed: claimed.len(),
        last,
        skipped,
        writes,
        refused,
        dropped,
        written,
        traced: traceparent.is_some(),
    }))
}

/// The poison entries of the rows of `writes` that the write neither expired nor saw
/// refused: the database dropped their update without an error.
fn dropped_updates(
    writes: &[domain::BatchWrite],
    written: &store::WriteOutcome,
    phase: Phase,
) -> Vec<Poison> {
    let done: std::collections::HashSet<Uuid> = written
        .expired
        .iter()
        .copied()
        .chain(
            written
                .rejected
                .iter()
                .map(|(i, _)| writes[*i].expiry.booking_id),
        )
        .collect();
    writes
        .iter()
        .filter(|w| !done.contains(&w.expiry.booking_id))
        .map(|w| Poison {
            booking_id: w.expiry.booking_id,
            tenant_id: w.expiry.tenant_id,
            version: w.expiry.expected_version,
            status: w.expiry.from.as_str().to_owned(),
            phase,
            reason: UPDATE_DROPPED,
            error: "the database changed nothing for the expiry's UPDATE of this locked row \
                    and raised no error: a BEFORE UPDATE trigger on crm.bookings returned NULL \
                    for it, or a rule rewrote the update; nothing was written or sent for it. \
                    Ask the owners of crm.bookings to let the job's update through"
                .to_owned(),
            sqlstate: None,
        })
        .collect()
}

/// The quarantine reason of an update the database dropped without an error.
pub const UPDATE_DROPPED: &str = "update_dropped";

/// Ends a batch's transaction with `end` (`COMMIT AND CHAIN` or `ROLLBACK AND CHAIN`)
/// and sets the chained one's constraints immediate, in one round trip.
fn end_and_chain(client: &mut Client, end: &str) -> Result<(), postgres::Error> {
    let ended = client.batch_execute(&format!("{end}; {IMMEDIATE}"));
    if ended.is_err() && !client.is_closed() {
        // Whatever state the failure left the session in, the next batch must find a
        // transaction of its own open, never run its claim and write in autocommit.
        let _ = client.batch_execute(&format!("ROLLBACK; BEGIN; {IMMEDIATE}"));
    }
    ended
}

/// Why the one booking of a batch taken `alone` failed, when the failure is the
/// booking's to carry: a server error while the session is open, no signal came and
/// the cycle's deadline has not passed (a statement the cycle cancelled says nothing
/// about the row). Anything else is the phase's failure.
fn alone_refusal(client: &Client, b: &Batch, e: &anyhow::Error) -> Option<store::DbRejection> {
    if client.is_closed() || shutdown::requested().is_some() || Instant::now() >= b.ends {
        return None;
    }
    let db = e
        .chain()
        .find_map(|c| c.downcast_ref::<postgres::Error>())?
        .as_db_error()?;
    Some(store::DbRejection {
        sqlstate: db.code().code().to_owned(),
        message: db.message().to_owned(),
    })
}

/// Quarantines the booking `row` whose own transaction failed with `refusal` (the
/// failed transaction rolled back; a new one is open), in a transaction of its own, and
/// tells it like any other refused row.
fn quarantine_alone(
    client: &mut Client,
    b: &Batch,
    row: &domain::BookingRow,
    refusal: store::DbRejection,
    at_commit: bool,
) -> Result<BatchOutcome> {
    let phase = b.phase;
    let error = if at_commit {
        format!("at COMMIT: {}", refusal.message)
    } else {
        refusal.message.clone()
    };
    let poison = Poison {
        booking_id: row.id,
        tenant_id: row.tenant_id,
        version: row.version,
        status: row.status.clone(),
        phase,
        reason: "database",
        error,
        sqlstate: Some(refusal.sqlstate.clone()),
    };
    let written = store::quarantine(
        client,
        b.stmts,
        b.run_id,
        b.as_of,
        std::slice::from_ref(&poison),
    );
    let end = if written.is_ok() {
        "COMMIT AND CHAIN"
    } else {
        "ROLLBACK AND CHAIN"
    };
    let ended = end_and_chain(client, end);
    written.map_err(|e| e.context(format!("{phase} batch: quarantine failed; rolled back")))?;
    ended.classify(
        Failure::Temporary,
        format!("{phase} batch: the quarantine's commit failed; rolled back"),
    )?;
    error!(BookingId:% = poison.booking_id, TenantId:% = poison.tenant_id, Phase:% = phase,
           SqlState = refusal.sqlstate.as_str(), Error = poison.error.as_str();
           "item failed: the booking's write fails on its own, quarantined");
    item_failed(poison.booking_id, poison.tenant_id, &poison.error);
    Ok(BatchOutcome {
        claimed: 1,
        last: row.deadline(phase).map(|d| (d, row.id)),
        poison: 1,
        ..BatchOutcome::default()
    })
}

/// Reads which phases' batch failed last cycle and has each take its first batch one
/// booking per transaction; `None` when the record cannot be read (migration 12 not
/// applied, no grant: the phases run as they would without it, and it is logged).
fn read_failures(
    client: &mut Client,
    cfg: &RunOnceConfig,
    turns: &mut [Turn; 2],
) -> Option<Vec<store::PhaseFailure>> {
    let failures = match store::phase_failures(client) {
        Ok(Some(failures)) => failures,
        Ok(None) => {
            warn!(
                "crm.booking_expiration_phase_failure is missing or not granted (apply \
                   sql/012_phase_failures.sql): a batch that fails every cycle is not \
                   isolated booking by booking"
            );
            return None;
        }
        Err(e) => {
            warn!(Error:% = format!("{e:#}"); "cannot read the phases' failures of last cycle");
            return None;
        }
    };
    for f in &failures {
        let turn = &mut turns[phase_slot(f.phase)];
        turn.alone = cfg.batch.size;
        warn!(Phase:% = f.phase, Failures = f.failures,
              SqlState = f.sqlstate.as_deref().unwrap_or("-"), Error = f.error.as_str();
              "the phase's batch failed last cycle: its first batch goes one booking per \
               transaction, a booking that fails on its own is quarantined");
    }
    Some(failures)
}

/// Records, for the next cycle, each phase whose batch failed in this one, and forgets
/// the failure of a phase that ran its bookings one by one without failing. Two rows
/// at most; a failure to record is logged (the next cycle then runs in batches).
fn remember_failures(
    client: &mut Client,
    before: &[store::PhaseFailure],
    turns: &[Turn; 2],
    as_of: DateTime<Utc>,
    run_id: Uuid,
) {
    for turn in turns {
        let had = before.iter().any(|f| f.phase == turn.phase);
        let done = match &turn.failed {
            Some(f) => store::record_phase_failure(
                client,
                turn.phase,
                f.sqlstate.as_deref(),
                &f.error,
                as_of,
                run_id,
            ),
            None if had && turn.alone == 0 => store::clear_phase_failure(client, turn.phase),
            None => continue,
        };
        if let Err(e) = done {
            warn!(Phase:% = turn.phase, Error:% = format!("{e:#}");
                  "cannot record the phase's failure for the next cycle");
        }
    }
}

/// A per-item event on the batch's span: the row is poison.
fn item_failed(booking_id: Uuid, tenant_id: Uuid, error: &str) {
    trace::event(
        "item failed",
        vec![
            Attr::new("BookingId", booking_id.to_string()),
            Attr::new("TenantId", tenant_id.to_string()),
            Attr::new("Error", error.to_owned()),
        ],
    );
}
