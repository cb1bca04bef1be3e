//! The figures of a backlog read, as its gauges show them (`obs::figures`): for
//! `backlog --format prometheus` and for the push after a run (`app`), so both read
//! the same ages from the same rows.

use chrono::DateTime;

use crate::clock::seconds;
use crate::domain::Timestamp;
use crate::obs::figures::{
    BacklogFigures, OutboxFigures, OverdueFigures, PausedFor, SweepFigures, TopicWaitingFigures,
};
use crate::store::Backlog;

/// The gauges' figures of `b`: ages at its `as_of`, 0 when there is nothing to be old
/// (a `-infinity` oldest deadline is infinitely old: `+Inf`).
pub(crate) fn backlog(b: &Backlog) -> BacklogFigures {
    let age =
        |oldest: Option<Timestamp>| oldest.map_or(0.0, |at| at.seconds_until(b.as_of).max(0.0));
    BacklogFigures {
        overdue: b.overdue.as_ref().map(|overdue| {
            overdue
                .iter()
                .map(|(phase, o)| {
                    let figures = OverdueFigures {
                        count: o.count,
                        oldest_age_seconds: age(o.oldest_deadline),
                    };
                    (*phase, figures)
                })
                .collect()
        }),
        poison: b.poison,
        outbox: b.outbox.map(|o| OutboxFigures {
            pending: o.pending,
            oldest_pending_age_seconds: age(o.oldest_pending_at),
            failed: o.failed,
            waiting_for_topic: o.waiting_for_topic,
            late: o.late,
        }),
        waiting: b.waiting.as_ref().map(|waiting| {
            waiting
                .iter()
                .map(|w| TopicWaitingFigures {
                    topic: w.topic.clone(),
                    waiting: w.waiting,
                    // Seconds since the Unix epoch; `infinity` is `+Inf`; none when the
                    // rows wait for their topic alone.
                    next_due_unix_seconds: w
                        .next_due
                        .map(|due| -due.seconds_until(DateTime::UNIX_EPOCH)),
                })
                .collect()
        }),
        // Read with the outbox; 0 before the relay's first sweep, so that an alert on
        // them never sees a missing series.
        sweep: b.outbox.map(|_| {
            b.sweep
                .map_or_else(SweepFigures::default, |s| SweepFigures {
                    floor_age_seconds: age(s.swept_at),
                    in_progress: s.in_progress,
                })
        }),
    }
}

/// How long each step has been paused at `b`'s `as_of` (0 when it runs).
pub(crate) fn paused(b: &Backlog) -> PausedFor {
    let paused_for = |step: &str| {
        b.pauses
            .iter()
            .find(|p| p.command == step)
            .map_or(0.0, |p| seconds(b.as_of - p.paused_at).max(0.0))
    };
    PausedFor {
        run_once: paused_for("run-once"),
        relay_outbox: paused_for("relay-outbox"),
    }
}
