//! The cycle's schedule, as pure functions of what happened so far and the time now:
//! which phase takes the next batch, how many bookings it claims, whether the budget
//! leaves time for it, and when a phase is done. No I/O, no clock of its own: the
//! caller passes `now` from the monotonic clock it was given.

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

use crate::domain::Phase;
use crate::exit::{Classified, Failure};
use crate::store::ClaimKey;

/// A phase between its batches in a cycle.
#[derive(Debug, Clone)]
pub(super) struct Turn {
    pub(super) phase: Phase,
    /// Batches taken so far.
    pub(super) taken: u32,
    /// Whether it still takes batches.
    pub(super) open: bool,
    /// The key its next batch starts after.
    pub(super) after: Option<ClaimKey>,
    /// Bookings still to take one per transaction: the phase's batch failed last
    /// cycle (see `upkeep::remember_failures`).
    pub(super) alone_left: u32,
    /// How its batch failed in this cycle, if it did.
    pub(super) failed: Option<PhaseFailed>,
}

/// How a phase's batch failed, as the next cycle is told.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PhaseFailed {
    pub(super) sqlstate: Option<String>,
    pub(super) error: String,
}

impl Turn {
    pub(super) fn new(phase: Phase) -> Self {
        Turn {
            phase,
            taken: 0,
            open: true,
            after: None,
            alone_left: 0,
            failed: None,
        }
    }

    /// Whether its next batch takes one booking in a transaction of its own.
    pub(super) fn is_alone(&self) -> bool {
        self.alone_left > 0
    }

    /// How many bookings its next batch claims: `size`, or 1 when alone.
    pub(super) fn limit(&self, size: u32) -> u32 {
        if self.is_alone() { 1 } else { size }
    }

    /// After a batch of this phase committed, having claimed `claimed` bookings up to
    /// `last`: a short batch means the phase's queue is drained (for us), and the
    /// phase stops at `max_batches`; taken alone, one booking a transaction until none
    /// is left or `alone_left` is spent.
    pub(super) fn batch_done(
        &mut self,
        claimed: usize,
        last: Option<ClaimKey>,
        size: u32,
        max_batches: u32,
    ) {
        self.after = last.or(self.after);
        if self.is_alone() {
            self.alone_left -= 1;
            if claimed == 0 {
                self.alone_left = 0;
                self.open = false;
            }
        } else {
            self.taken = self.taken.saturating_add(1);
            if claimed < size as usize || self.taken >= max_batches {
                self.open = false;
            }
        }
    }

    /// After a batch of this phase failed: the phase stops; `failed` (when the
    /// failure is the phase's to remember) is told to the next cycle.
    pub(super) fn batch_failed(&mut self, failed: Option<PhaseFailed>) {
        self.open = false;
        if failed.is_some() {
            self.failed = failed;
        }
    }
}

/// The turn that takes the next batch of the round under way: the first open one from
/// index `from` on. `None`: the round is over (a new one starts at 0 while any is open).
pub(super) fn next_in_round(turns: &[Turn], from: usize) -> Option<usize> {
    (from..turns.len()).find(|&i| turns[i].open)
}

/// Whether the first round found both phases with a backlog (both open, neither
/// taking bookings alone): the Booking phase then goes on on a second session.
pub(super) fn both_have_a_backlog(turns: &[Turn]) -> bool {
    turns.iter().all(|t| t.open && t.alone_left == 0)
}

/// The cycle's time budget for starting batches. `--deadline` is the hard end (a
/// statement still running then is cancelled and its batch rolls back, exit 75), so
/// the cycle stops taking new batches early enough for the batch it starts to finish
/// before it: no batch starts once the time left is less than twice the slowest batch
/// so far, nor less than a margin of a tenth of the deadline (at most 1 s) that covers
/// a first batch and the bookkeeping after the last.
#[derive(Debug, Clone)]
pub(super) struct Budget {
    pub(super) deadline: Duration,
    pub(super) started: Instant,
    pub(super) slowest: Duration,
}

impl Budget {
    pub(super) fn new(deadline: Duration, started: Instant) -> Self {
        Budget {
            deadline,
            started,
            slowest: Duration::ZERO,
        }
    }

    fn margin(&self) -> Duration {
        (self.deadline / 10).min(Duration::from_secs(1))
    }

    pub(super) fn elapsed(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.started)
    }

    pub(super) fn left(&self, now: Instant) -> Duration {
        self.deadline.saturating_sub(self.elapsed(now))
    }

    /// Whether a new batch may start at `now`.
    pub(super) fn allows_a_batch(&self, now: Instant) -> bool {
        self.left(now) >= self.margin().max(self.slowest.saturating_mul(2))
    }

    pub(super) fn batch_took(&mut self, took: Duration) {
        self.slowest = self.slowest.max(took);
    }

    /// The hard end; `None` when it lies past what an `Instant` can hold.
    pub(super) fn ends(&self) -> Option<Instant> {
        self.started.checked_add(self.deadline)
    }
}

/// Whether the hard end `ends` (see [`Budget::ends`]) has passed at `now`.
pub(super) fn passed(ends: Option<Instant>, now: Instant) -> bool {
    ends.is_some_and(|ends| now >= ends)
}

/// A failure of a batch cut short by the cycle's `deadline`, told as such.
pub(super) fn passed_mid_batch(e: anyhow::Error, deadline: Duration) -> anyhow::Error {
    e.context(Classified {
        failure: Failure::Temporary,
        message: format!(
            "the cycle deadline of {}ms passed mid-batch",
            deadline.as_millis()
        ),
    })
}

/// The latest moment, by the wall clock, a cycle that started at `as_of` with `left`
/// of its budget can end (what `pause --wait` is told); the latest moment there is
/// rather than an overflow.
pub(super) fn working_until(as_of: DateTime<Utc>, left: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(left)
        .ok()
        .and_then(|left| as_of.checked_add_signed(left))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What the cycle does at a batch boundary, before asking the pause switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gate {
    /// Start the batch.
    Go,
    /// A signal came: no batch starts.
    Interrupted(i32),
    /// The budget leaves no time for a batch.
    OutOfBudget,
}

/// The gate at a batch boundary at `now`: a signal first, then the budget.
pub(super) fn gate(signal: Option<i32>, budget: &Budget, now: Instant) -> Gate {
    match signal {
        Some(signal) => Gate::Interrupted(signal),
        None if !budget.allows_a_batch(now) => Gate::OutOfBudget,
        None => Gate::Go,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn turns() -> [Turn; 2] {
        Phase::ALL.map(Turn::new)
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the schedule's tests hand it instants"
    )]
    fn the_budget_spent_exactly_to_the_margin_still_allows_a_batch_and_a_moment_later_not() {
        let t0 = Instant::now();
        let budget = Budget::new(10 * S, t0);
        // The margin of a 10 s deadline is 1 s: 9 s in, exactly 1 s is left.
        assert!(budget.allows_a_batch(t0 + 9 * S));
        assert!(!budget.allows_a_batch(t0 + 9 * S + Duration::from_nanos(1)));
        assert_eq!(gate(None, &budget, t0 + 10 * S), Gate::OutOfBudget);
        assert_eq!(budget.left(t0 + 60 * S), Duration::ZERO);
        assert!(passed(budget.ends(), t0 + 10 * S));
        assert!(!passed(
            budget.ends(),
            t0 + 10 * S - Duration::from_nanos(1)
        ));
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the schedule's tests hand it instants"
    )]
    fn no_batch_starts_with_less_left_than_twice_the_slowest() {
        let t0 = Instant::now();
        let mut budget = Budget::new(10 * S, t0);
        budget.batch_took(2 * S);
        budget.batch_took(S / 2);
        assert_eq!(budget.slowest, 2 * S);
        assert!(budget.allows_a_batch(t0 + 6 * S));
        assert!(!budget.allows_a_batch(t0 + 6 * S + Duration::from_millis(1)));
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the schedule's tests hand it instants"
    )]
    fn a_signal_closes_the_gate_before_the_budget_is_asked() {
        let t0 = Instant::now();
        let budget = Budget::new(10 * S, t0);
        assert_eq!(gate(Some(15), &budget, t0), Gate::Interrupted(15));
        assert_eq!(gate(Some(2), &budget, t0 + 60 * S), Gate::Interrupted(2));
        assert_eq!(gate(None, &budget, t0), Gate::Go);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the schedule's tests hand it instants"
    )]
    fn huge_deadlines_and_batches_neither_overflow_nor_panic() {
        let t0 = Instant::now();
        let mut budget = Budget::new(Duration::MAX, t0);
        budget.batch_took(Duration::MAX);
        // Twice the slowest saturates instead of overflowing: all the time there is
        // allows it, a second less does not.
        assert!(budget.allows_a_batch(t0));
        assert!(!budget.allows_a_batch(t0 + S));
        assert_eq!(budget.ends(), None);
        assert!(!passed(budget.ends(), t0 + 3600 * S));
        let budget = Budget::new(Duration::MAX, t0);
        assert!(budget.allows_a_batch(t0 + 3600 * S));
        // Now before the start (another clock's instant): nothing elapsed.
        assert_eq!(Budget::new(S, t0 + S).left(t0), S);
        let as_of = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        assert_eq!(
            working_until(as_of, Duration::MAX),
            DateTime::<Utc>::MAX_UTC
        );
        assert_eq!(working_until(as_of, 60 * S), as_of + TimeDelta::minutes(1));
        let mut turn = Turn::new(Phase::Reserve);
        turn.taken = u32::MAX;
        turn.batch_done(10, None, 10, u32::MAX);
        assert!(!turn.open);
    }

    #[test]
    fn the_phases_take_turns_and_a_round_skips_the_closed() {
        let mut t = turns();
        assert_eq!(next_in_round(&t, 0), Some(0));
        assert_eq!(next_in_round(&t, 1), Some(1));
        assert_eq!(next_in_round(&t, 2), None);
        t[0].open = false;
        assert_eq!(next_in_round(&t, 0), Some(1));
        t[1].open = false;
        assert_eq!(next_in_round(&t, 0), None);
    }

    #[test]
    fn a_short_batch_closes_its_phase_and_the_other_goes_on() {
        let mut t = turns();
        // One phase empty: its first batch claims nothing.
        t[0].batch_done(0, None, 100, 10);
        t[1].batch_done(100, None, 100, 10);
        assert!(!t[0].open && t[1].open);
        assert!(!both_have_a_backlog(&t));
        assert_eq!(next_in_round(&t, 0), Some(1));
        let mut t = turns();
        t[0].batch_done(100, None, 100, 10);
        t[1].batch_done(100, None, 100, 10);
        assert!(both_have_a_backlog(&t));
    }

    #[test]
    fn a_phase_stops_at_max_batches() {
        let mut turn = Turn::new(Phase::Booking);
        for _ in 0..2 {
            turn.batch_done(5, None, 5, 3);
            assert!(turn.open);
        }
        turn.batch_done(5, None, 5, 3);
        assert!(!turn.open);
        assert_eq!(turn.taken, 3);
    }

    #[test]
    fn the_next_batch_starts_after_the_last_key_claimed() {
        let key: ClaimKey = (
            crate::domain::Timestamp::from_pg_micros(7),
            uuid::Uuid::nil(),
        );
        let mut turn = Turn::new(Phase::Reserve);
        turn.batch_done(5, Some(key), 5, 10);
        assert_eq!(turn.after, Some(key));
        turn.batch_done(5, None, 5, 10);
        assert_eq!(
            turn.after,
            Some(key),
            "a batch without a key keeps the one before"
        );
    }

    #[test]
    fn alone_the_phase_takes_one_booking_a_transaction_until_none_is_left() {
        let mut turn = Turn::new(Phase::Reserve);
        turn.alone_left = 3;
        assert_eq!(turn.limit(100), 1);
        turn.batch_done(1, None, 100, 1);
        turn.batch_done(1, None, 100, 1);
        assert!(turn.open, "max batches do not count alone");
        assert_eq!((turn.alone_left, turn.taken), (1, 0));
        turn.batch_done(1, None, 100, 1);
        assert!(turn.open && !turn.is_alone());
        assert_eq!(turn.limit(100), 100);
        let mut turn = Turn::new(Phase::Reserve);
        turn.alone_left = 3;
        turn.batch_done(0, None, 100, 1);
        assert!(!turn.open);
        assert_eq!(turn.alone_left, 0);
    }

    #[test]
    fn a_failed_batch_closes_its_phase_and_keeps_what_to_remember() {
        let mut turn = Turn::new(Phase::Booking);
        let failed = PhaseFailed {
            sqlstate: Some("23514".to_owned()),
            error: "check".to_owned(),
        };
        turn.batch_failed(Some(failed.clone()));
        assert!(!turn.open);
        turn.batch_failed(None);
        assert_eq!(turn.failed, Some(failed));
    }
}
