//! The metric families, in one place: the names and help texts of the gauges
//! `run-once` and `relay-outbox` push when they end (`obs::pushgateway` sends them) and
//! of the gauges `backlog --format prometheus` prints, under the very same names and
//! help texts. Their values are set in `gauges.rs`, encoded in `exposition.rs`; the
//! families `backlog` alone prints are in `backlog_only.rs`.
//!
//! Gauges, since each value describes the last run (so the names carry no `_total`):
//! items per phase, skipped, poison, errors (1 = the run failed), duration; histograms
//! of the run's own observations (the cycle's duration, each expiry's lateness per
//! phase, each published event's commit → ack age), which the next run's push
//! replaces, so they are never counters to `rate()` over; and, read
//! after the run in a short read-only transaction (`store::read_backlog`), the backlog
//! figures: `run-once` the overdue backlog and the quarantined poison, `relay-outbox`
//! the outbox lag, each from the tables its least-privilege role may read (the worker
//! may insert into the outbox, not read it).

/// A metric family: its name and help text. Families pushed by both steps use one
/// constant, so the Pushgateway sees one help text per name.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
}

const fn family(name: &'static str, help: &'static str) -> Family {
    Family { name, help }
}

// Of a `run-once` run.
pub(crate) const ITEMS: Family = family(
    "crm_booking_expiration_items",
    "Bookings the last run-once expired, per phase.",
);
pub(crate) const SKIP_LOCKED: Family = family(
    "crm_booking_expiration_skip_locked",
    "Overdue bookings the last run-once skipped because another session held them locked.",
);
pub(crate) const POISON_ISOLATED: Family = family(
    "crm_booking_expiration_poison_isolated",
    "Bookings the last run-once isolated as poison (refused by the guard or the database).",
);
pub(crate) const CYCLE_DURATION: Family = family(
    "crm_booking_expiration_cycle_duration_seconds",
    "How long the last run-once took, in seconds: a histogram of one observation per run \
     (sum_over_time of the buckets gives the distribution across runs).",
);

/// Upper bounds of the cycle duration buckets (a cycle takes ~50 ms; its deadline is
/// under a minute).
pub(crate) const CYCLE_DURATION_BUCKETS: &[f64] =
    &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

pub(crate) const LATENESS: Family = family(
    "crm_booking_expiration_lateness_seconds",
    "Seconds from a booking's deadline to its expiry (expired_at - deadline), per phase, \
     for each booking the last run-once expired (the objective: within 85 s, 60 s + the \
     cycle's budget; sum_over_time of the buckets gives the distribution across runs).",
);

pub(crate) const RELAY_PUBLICATIONS: Family = family(
    "crm_booking_expiration_relay_publications",
    "Outbox rows the last relay-outbox published, per topic and Phase of the event.",
);

pub(crate) const RELAY_ACK_AGE: Family = family(
    "crm_booking_expiration_relay_ack_age_seconds",
    "Seconds from an event's write (the cycle's commit) to Kafka's acknowledgement, \
     for each event the last relay-outbox published.",
);

// Of a `relay-outbox` run.
pub(crate) const RELAY_PUBLISHED: Family = family(
    "crm_booking_expiration_relay_published",
    "Outbox rows the last relay-outbox published to Kafka.",
);
pub(crate) const RELAY_FAILED: Family = family(
    "crm_booking_expiration_relay_failed",
    "Outbox rows the last relay-outbox marked failed (they can never be delivered).",
);
pub(crate) const RELAY_PURGED: Family = family(
    "crm_booking_expiration_relay_purged",
    "Published outbox rows the last relay-outbox deleted after the retention.",
);
pub(crate) const RELAY_LATE: Family = family(
    "crm_booking_expiration_relay_late",
    "Outbox rows the last relay-outbox found late: committed at or below rows it had \
     already relayed, unsettled; they go as exceptions.",
);
pub(crate) const RELAY_LATE_BELOW_FLOOR: Family = family(
    "crm_booking_expiration_relay_late_below_floor",
    "Of the late rows, those found below the floor (by their inserting transaction, or \
     by the purge): a sequence's cache, a seq drawn before its transaction's id, a \
     prepared or long transaction.",
);
pub(crate) const RELAY_SKIPPED: Family = family(
    "crm_booking_expiration_relay_skipped",
    "1 when the last relay-outbox did nothing because another relay held the outbox lock.",
);
pub(crate) const RELAY_DURATION: Family = family(
    "crm_booking_expiration_relay_duration_seconds",
    "How long the last relay-outbox took, in seconds.",
);

// Of either step (told apart by the `step` label).
pub(crate) const ERRORS: Family = family(
    "crm_booking_expiration_errors",
    "1 when the last run failed (exited non-zero), else 0.",
);
pub(crate) const PAUSED: Family = family(
    "crm_booking_expiration_paused_seconds",
    "Seconds the step has been paused (booking-expire pause), 0 when it runs.",
);
pub(crate) const LAST_SUCCESS: Family = family(
    "crm_booking_expiration_last_success_timestamp_seconds",
    "Unix time at which the last successful run ended (pushed only on success).",
);

// Read from the database after the run: the names and help texts of
// `backlog --format prometheus`.
pub(crate) const BACKLOG: Family = family(
    "crm_booking_expiration_backlog",
    "Active bookings whose deadline has passed, per phase (poison rows included).",
);
pub(crate) const BACKLOG_OLDEST_AGE: Family = family(
    "crm_booking_expiration_backlog_oldest_age_seconds",
    "Seconds since the oldest overdue active booking's deadline, per phase (0 when none).",
);
pub(crate) const POISON: Family = family(
    "crm_booking_expiration_poison",
    "Active bookings isolated as poison: the cycle could not expire them and retries with back-off.",
);
pub(crate) const OUTBOX_PENDING: Family = family(
    "crm_booking_expiration_outbox_pending",
    "Outbox rows not yet published to Kafka.",
);
pub(crate) const OUTBOX_OLDEST_AGE: Family = family(
    "crm_booking_expiration_outbox_oldest_pending_age_seconds",
    "Seconds since the oldest pending outbox row was written (0 when none).",
);
pub(crate) const OUTBOX_FAILED: Family = family(
    "crm_booking_expiration_outbox_failed",
    "Outbox rows the relay gave up on (e.g. too large to send).",
);
pub(crate) const OUTBOX_WAITING_FOR_TOPIC: Family = family(
    "crm_booking_expiration_outbox_waiting_for_topic",
    "Pending outbox rows waiting for a missing or unusable Kafka topic (a configuration fault; backlog names the topic and why).",
);
pub(crate) const OUTBOX_LATE: Family = family(
    "crm_booking_expiration_outbox_late",
    "Pending outbox rows committed below rows the relay already relayed (a sequence's \
     cache, a seq drawn before its transaction's id, a prepared or long transaction): \
     found and not sent yet, or not swept yet. They go within a sweep (3 s under \
     --follow) and a batch; one that stays is a relay that does not run.",
);
pub(crate) const RELAY_FLOOR_AGE: Family = family(
    "crm_booking_expiration_relay_floor_age_seconds",
    "Seconds since the relay last swept and moved its floor (every 3 s under --follow, \
     at each run's start and end): a floor held back is a relay that does not run.",
);
pub(crate) const RELAY_SWEEP_IN_PROGRESS: Family = family(
    "crm_booking_expiration_relay_sweep_in_progress",
    "Transactions in progress at the relay's last sweep: any of them may still commit \
     outbox rows below the floor, which the next sweep finds.",
);
pub(crate) const OUTBOX_WAITING: Family = family(
    "crm_booking_expiration_outbox_waiting",
    "Pending outbox rows not due yet (backing off after a refused send, or waiting for their topic), per topic; no series when none waits.",
);
pub(crate) const OUTBOX_NEXT_DUE: Family = family(
    "crm_booking_expiration_outbox_next_due_timestamp_seconds",
    "Unix time when the first waiting outbox row of the topic is due, per topic; no series when none waits.",
);
