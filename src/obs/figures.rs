//! The figures a metrics push or `backlog --format prometheus` shows: plain numbers,
//! built by the caller (`app` from a run's result, `report` from a backlog read), so
//! `obs` knows nothing of the cycle, the relay or the store. Ages and times are the
//! seconds the gauges show; the histograms are `obs`'s own leaves (`Lateness`,
//! `AckAges`), which the cycle and the relay count into as they work.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ack_age::AckAges;
use super::lateness::Lateness;
use crate::domain::Phase;

/// How a run ended, for the gauges of either step.
#[derive(Debug, Clone)]
pub(crate) struct RunEnd {
    /// True when the run failed (it exits non-zero).
    pub failed: bool,
    pub duration: Duration,
    /// The backlog read after the run; `None` when it could not be read.
    pub backlog: Option<BacklogFigures>,
    /// When the run ended.
    pub now: DateTime<Utc>,
}

/// What a `run-once` run did.
#[derive(Debug, Clone, Default)]
pub(crate) struct CycleFigures {
    pub reserve_expired: u64,
    pub booking_expired: u64,
    pub skipped_locked: u64,
    pub poison: u64,
    /// How late the committed expiries were, per phase.
    pub lateness: Lateness,
    /// Seconds the step has been paused; 0 when it runs.
    pub paused_seconds: f64,
}

impl CycleFigures {
    /// The bookings expired in `phase`.
    pub(crate) fn expired(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Reserve => self.reserve_expired,
            Phase::Booking => self.booking_expired,
        }
    }
}

/// What a `relay-outbox` run did.
#[derive(Debug, Clone, Default)]
pub(crate) struct RelayFigures {
    pub published: u64,
    /// Rows marked failed (never to be delivered).
    pub failed: u64,
    pub purged: u64,
    /// Rows found late (committed at or below `high`, unsettled), and of them below
    /// the floor.
    pub late: u64,
    pub late_below_floor: u64,
    /// True when another relay held the lock and this one did nothing.
    pub skipped: bool,
    /// Rows published per topic and Phase of the event, in the order to print.
    pub publications: Vec<Publications>,
    /// Seconds from each published row's write to Kafka's acknowledgement.
    pub ack_ages: AckAges,
    /// Seconds the step has been paused; 0 when it runs.
    pub paused_seconds: f64,
}

/// Rows published to one topic for one Phase of the event ("none" when it has none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Publications {
    pub topic: String,
    pub phase: String,
    pub rows: u64,
}

/// The backlog read from the database: each part is `None` when it was not read (a
/// run reads the figures its role may read).
#[derive(Debug, Clone, Default)]
pub(crate) struct BacklogFigures {
    /// Per phase, in [`Phase::ALL`] order.
    pub overdue: Option<Vec<(Phase, OverdueFigures)>>,
    pub poison: Option<u64>,
    pub outbox: Option<OutboxFigures>,
    /// The outbox rows not due yet, per topic.
    pub waiting: Option<Vec<TopicWaitingFigures>>,
    /// The relay's sweep, once it swept.
    pub sweep: Option<SweepFigures>,
}

/// The relay's sweep: seconds since it last moved the floor (a relay that does not
/// sweep holds it), and the transactions in progress then.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SweepFigures {
    pub floor_age_seconds: f64,
    pub in_progress: u64,
}

/// The active bookings of a phase whose deadline has passed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OverdueFigures {
    pub count: u64,
    /// Seconds since the oldest one's deadline (0 when none, `+Inf` for `-infinity`).
    pub oldest_age_seconds: f64,
}

/// The outbox's lag.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct OutboxFigures {
    pub pending: u64,
    /// Seconds since the oldest pending row was written (0 when none).
    pub oldest_pending_age_seconds: f64,
    pub failed: u64,
    pub waiting_for_topic: u64,
    /// Of the pending rows, those committed below rows already relayed.
    pub late: u64,
}

/// The outbox rows of one topic not due yet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopicWaitingFigures {
    pub topic: String,
    pub waiting: u64,
    /// Unix time when the first of them is due (`+Inf` for `infinity`); `None` when they
    /// wait for their topic alone (no series).
    pub next_due_unix_seconds: Option<f64>,
}

/// How long each step has been paused, in seconds (0 when it runs), for `backlog`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PausedFor {
    pub run_once: f64,
    pub relay_outbox: f64,
}
