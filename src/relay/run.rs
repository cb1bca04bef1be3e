//! A relay run: the result it reports ([`RelayResult`]) and what its steps see of it
//! ([`Run`]), apart from the steps that fill them.

use std::time::{Duration, Instant};

use serde::Serialize;
use uuid::Uuid;

use crate::clock::Ambient;
use crate::config::RelayConfig;
use crate::preflight::{PauseWatch, Paused};

/// The result of a relay run, printed as one JSON line on stdout.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RelayResult {
    pub run_id: Uuid,
    /// Rows acknowledged by Kafka and marked published.
    pub published: u64,
    /// Rows marked failed: they can never be delivered, or failed too often.
    pub failed: u64,
    /// Rows whose own send failed this run: they back off and are retried.
    pub retrying: u64,
    /// Published rows deleted after the retention.
    pub purged: u64,
    /// True when another relay held the lock and this one did nothing.
    pub skipped: bool,
    pub duration_ms: u64,
    /// Pending rows not due yet when the run ended: backing off after a refused send,
    /// or waiting for their topic (`WaitingForTopic` of them).
    pub waiting: u64,
    pub waiting_for_topic: u64,
    /// When the first of the waiting rows is due (RFC 3339); absent when none waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_due: Option<String>,
    /// Why the run stopped early (a signal, the cluster, a configuration fault): it
    /// still reports what it did up to then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// True once this run holds the relay's lock: from then on it reports its result
    /// also when it stops early.
    #[serde(skip)]
    pub relayed: bool,
    /// Set when `relay-outbox` is paused (`booking-expire pause relay-outbox`), at the
    /// start or while it worked (the counts are what it did before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Paused>,
    /// Rows published, per (topic, Phase of the event; "none" when it has none): for
    /// the metrics push, not printed.
    #[serde(skip)]
    pub publications: std::collections::BTreeMap<(String, String), u64>,
    /// Seconds from each published row's write to Kafka's acknowledgement, in buckets.
    #[serde(skip)]
    pub ack_ages: crate::obs::ack_age::AckAges,
    /// Rows the sweeps found late (committed at or below `high` unsettled): for the
    /// metrics push, not printed.
    #[serde(skip)]
    pub late: u64,
    /// Of those, the rows found below the floor (by their transaction, or by the
    /// purge): for the metrics push, not printed.
    #[serde(skip)]
    pub late_below_floor: u64,
}

/// A relay run as its steps see it: the settings, what drives it (clocks, shutdown),
/// when it began, and the pause switch it watches.
#[derive(Clone, Copy)]
pub(super) struct Run<'a> {
    pub(super) cfg: &'a RelayConfig,
    pub(super) ambient: Ambient<'a>,
    pub(super) started: Instant,
    pub(super) pause: PauseWatch,
}

impl Run<'_> {
    /// How long the run has worked, by its monotonic clock.
    pub(super) fn elapsed(&self) -> Duration {
        self.ambient.monotonic.since(self.started)
    }

    /// What is left of the run's window (`--follow`, or none): zero once it is spent.
    pub(super) fn left(&self) -> Duration {
        self.cfg.run_for().saturating_sub(self.elapsed())
    }
}
