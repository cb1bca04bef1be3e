//! The gauges of a run and of a backlog read: which family gets which figure. The
//! push after `run-once` and `relay-outbox` (`cycle_metrics`, `relay_metrics`) and
//! `backlog --format prometheus` (`backlog_gauges`, `paused_gauges`) share them, so
//! a name means one thing wherever it is read.

use chrono::{DateTime, Utc};

use super::exposition::Exposition;
use super::figures::{
    BacklogFigures, CycleFigures, PausedFor, RelayFigures, RunEnd, TopicWaitingFigures,
};
use super::metrics::*;
use crate::domain::Phase;

fn unix_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_micros() as f64 / 1e6
}

/// The backlog gauges of the figures read: the same for the push after a run and for
/// `backlog --format prometheus`. Ages are 0 when there is nothing to be old, so an
/// alert on them never sees a missing series.
pub(crate) fn backlog_gauges(out: &mut Exposition, b: &BacklogFigures) {
    if let Some(overdue) = &b.overdue {
        let of = |phase: Phase| {
            overdue
                .iter()
                .find(|(p, _)| *p == phase)
                .map(|(_, o)| *o)
                .unwrap_or_default()
        };
        out.per_phase(BACKLOG, |p| of(p).count as f64);
        out.per_phase(BACKLOG_OLDEST_AGE, |p| of(p).oldest_age_seconds);
    }
    if let Some(poison) = b.poison {
        out.gauge(POISON, poison as f64);
    }
    if let Some(outbox) = &b.outbox {
        out.gauge(OUTBOX_PENDING, outbox.pending as f64);
        out.gauge(OUTBOX_OLDEST_AGE, outbox.oldest_pending_age_seconds);
        out.gauge(OUTBOX_FAILED, outbox.failed as f64);
        out.gauge(OUTBOX_WAITING_FOR_TOPIC, outbox.waiting_for_topic as f64);
        out.gauge(OUTBOX_LATE, outbox.late as f64);
    }
    if let Some(waiting) = &b.waiting {
        let per_topic = |value: &dyn Fn(&TopicWaitingFigures) -> f64| {
            waiting
                .iter()
                .map(|w| (vec![("topic", w.topic.as_str())], value(w)))
                .collect::<Vec<_>>()
        };
        out.labelled(OUTBOX_WAITING, &per_topic(&|w| w.waiting as f64));
        let due: Vec<_> = waiting
            .iter()
            .filter_map(|w| {
                let due = w.next_due_unix_seconds?;
                Some((vec![("topic", w.topic.as_str())], due))
            })
            .collect();
        out.labelled(OUTBOX_NEXT_DUE, &due);
    }
    if let Some(sweep) = &b.sweep {
        out.gauge(RELAY_FLOOR_AGE, sweep.floor_age_seconds);
        out.gauge(RELAY_SWEEP_IN_PROGRESS, sweep.in_progress as f64);
    }
}

/// How long each step has been paused (0 when it runs), for `backlog`: the push of a
/// run reports its own step's pause without a label, the grouping key names the step.
pub(crate) fn paused_gauges(out: &mut Exposition, paused: &PausedFor) {
    out.labelled(
        PAUSED,
        &[
            (vec![("step", "run-once")], paused.run_once),
            (vec![("step", "relay-outbox")], paused.relay_outbox),
        ],
    );
}

/// The gauges of a `run-once` run.
pub(crate) fn cycle_metrics(cycle: &CycleFigures, run: &RunEnd) -> String {
    let mut out = Exposition::default();
    out.per_phase(ITEMS, |phase| cycle.expired(phase) as f64);
    out.gauge(SKIP_LOCKED, cycle.skipped_locked as f64);
    out.gauge(POISON_ISOLATED, cycle.poison as f64);
    out.gauge(ERRORS, if run.failed { 1.0 } else { 0.0 });
    out.histogram(
        CYCLE_DURATION,
        CYCLE_DURATION_BUCKETS,
        &[run.duration.as_secs_f64()],
    );
    out.histogram_per_phase(LATENESS, |phase| cycle.lateness.of(phase).clone());
    out.gauge(PAUSED, cycle.paused_seconds);
    if !run.failed {
        out.gauge(LAST_SUCCESS, unix_seconds(run.now));
    }
    if let Some(b) = &run.backlog {
        backlog_gauges(&mut out, b);
    }
    out.into_text()
}

/// The gauges of a `relay-outbox` run. A relay that found another one holding the
/// lock did not relay anything: it is not a success to report, or a relay hung while
/// holding the lock would look healthy.
pub(crate) fn relay_metrics(relay: &RelayFigures, run: &RunEnd) -> String {
    let mut out = Exposition::default();
    out.gauge(RELAY_PUBLISHED, relay.published as f64);
    out.gauge(RELAY_FAILED, relay.failed as f64);
    out.gauge(RELAY_PURGED, relay.purged as f64);
    out.gauge(RELAY_LATE, relay.late as f64);
    out.gauge(RELAY_LATE_BELOW_FLOOR, relay.late_below_floor as f64);
    out.gauge(RELAY_SKIPPED, if relay.skipped { 1.0 } else { 0.0 });
    out.gauge(ERRORS, if run.failed { 1.0 } else { 0.0 });
    out.gauge(RELAY_DURATION, run.duration.as_secs_f64());
    let publications: Vec<(Vec<(&str, &str)>, f64)> = relay
        .publications
        .iter()
        .map(|p| {
            (
                vec![("topic", p.topic.as_str()), ("phase", p.phase.as_str())],
                p.rows as f64,
            )
        })
        .collect();
    if !publications.is_empty() {
        out.labelled(RELAY_PUBLICATIONS, &publications);
    }
    out.register(RELAY_ACK_AGE, relay.ack_ages.histogram().clone());
    out.gauge(PAUSED, relay.paused_seconds);
    if !run.failed && !relay.skipped {
        out.gauge(LAST_SUCCESS, unix_seconds(run.now));
    }
    if let Some(b) = &run.backlog {
        backlog_gauges(&mut out, b);
    }
    out.into_text()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::obs::figures::{OverdueFigures, SweepFigures};

    fn cycle() -> CycleFigures {
        CycleFigures {
            reserve_expired: 6,
            booking_expired: 2,
            skipped_locked: 1,
            poison: 3,
            ..CycleFigures::default()
        }
    }

    fn ended(failed: bool, millis: u64, now: DateTime<Utc>) -> RunEnd {
        RunEnd {
            failed,
            duration: Duration::from_millis(millis),
            backlog: None,
            now,
        }
    }

    #[test]
    fn a_failed_cycle_pushes_errors_and_no_last_success() {
        let now = DateTime::from_timestamp(1_800_000_000, 250_000_000).unwrap();
        let ok = cycle_metrics(&cycle(), &ended(false, 1500, now));
        assert!(ok.contains("\ncrm_booking_expiration_items{phase=\"Reserve\"} 6\n"));
        assert!(ok.contains("\ncrm_booking_expiration_items{phase=\"Booking\"} 2\n"));
        assert!(ok.contains("\ncrm_booking_expiration_errors 0\n"));
        assert!(ok.contains(
            "\ncrm_booking_expiration_cycle_duration_seconds_bucket{le=\"1\"} 0\n\
             crm_booking_expiration_cycle_duration_seconds_bucket{le=\"2.5\"} 1\n"
        ));
        assert!(
            ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_bucket{le=\"+Inf\"} 1\n")
        );
        assert!(ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_sum 1.5\n"));
        assert!(ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_count 1\n"));
        assert!(
            ok.contains("\ncrm_booking_expiration_last_success_timestamp_seconds 1800000000.25\n")
        );
        let failed = cycle_metrics(&cycle(), &ended(true, 1500, now));
        assert!(failed.contains("\ncrm_booking_expiration_errors 1\n"));
        assert!(!failed.contains("last_success"));
        // Each family once, every sample line after its HELP and TYPE.
        for text in [ok, failed] {
            let mut seen = std::collections::HashSet::new();
            let mut current = "";
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("# HELP ") {
                    current = rest.split(' ').next().unwrap();
                    assert!(seen.insert(current), "{current} twice");
                } else if !line.starts_with("# TYPE ") {
                    assert!(line.starts_with(current), "{line} outside its family");
                }
            }
        }
    }

    #[test]
    fn the_lateness_histogram_has_one_series_set_per_phase() {
        let c = cycle();
        c.lateness.observe(Phase::Reserve, 30.5);
        c.lateness.observe(Phase::Reserve, 90.0);
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let text = cycle_metrics(&c, &ended(false, 5, now));
        let lateness: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("crm_booking_expiration_lateness_seconds"))
            .filter(|l| {
                !l.contains("_bucket") || l.contains("le=\"85\"") || l.contains("le=\"120\"")
            })
            .collect();
        assert_eq!(
            lateness,
            [
                "crm_booking_expiration_lateness_seconds_bucket{phase=\"Reserve\",le=\"85\"} 1",
                "crm_booking_expiration_lateness_seconds_bucket{phase=\"Reserve\",le=\"120\"} 2",
                "crm_booking_expiration_lateness_seconds_sum{phase=\"Reserve\"} 120.5",
                "crm_booking_expiration_lateness_seconds_count{phase=\"Reserve\"} 2",
                "crm_booking_expiration_lateness_seconds_bucket{phase=\"Booking\",le=\"85\"} 0",
                "crm_booking_expiration_lateness_seconds_bucket{phase=\"Booking\",le=\"120\"} 0",
                "crm_booking_expiration_lateness_seconds_sum{phase=\"Booking\"} 0.0",
                "crm_booking_expiration_lateness_seconds_count{phase=\"Booking\"} 0",
            ]
        );
        let les = text
            .lines()
            .filter(|l| {
                l.starts_with("crm_booking_expiration_lateness_seconds_bucket{phase=\"Booking\"")
            })
            .count();
        assert_eq!(les, crate::obs::lateness::LATENESS_BUCKETS.len() + 1);
        assert!(text.contains("# TYPE crm_booking_expiration_lateness_seconds histogram\n"));
    }

    #[test]
    fn a_relay_that_found_the_lock_taken_reports_no_success() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let skipped = RelayFigures {
            skipped: true,
            ..RelayFigures::default()
        };
        let text = relay_metrics(&skipped, &ended(false, 5, now));
        assert!(text.contains("\ncrm_booking_expiration_relay_skipped 1\n"));
        assert!(!text.contains("last_success"));
        let done = RelayFigures {
            published: 7,
            ..RelayFigures::default()
        };
        let text = relay_metrics(&done, &ended(false, 5, now));
        assert!(text.contains("\ncrm_booking_expiration_relay_published 7\n"));
        assert!(
            text.contains("\ncrm_booking_expiration_last_success_timestamp_seconds 1800000000\n")
        );
    }

    #[test]
    fn the_backlog_figures_become_gauges_with_every_phase_and_each_topic() {
        let figures = BacklogFigures {
            overdue: Some(vec![(
                Phase::Booking,
                OverdueFigures {
                    count: 4,
                    oldest_age_seconds: 90.5,
                },
            )]),
            poison: Some(2),
            outbox: None,
            waiting: Some(vec![TopicWaitingFigures {
                topic: "t".to_owned(),
                waiting: 3,
                next_due_unix_seconds: Some(1_800_000_000.0),
            }]),
            sweep: Some(SweepFigures {
                floor_age_seconds: 2.5,
                in_progress: 1,
            }),
        };
        let mut out = Exposition::default();
        backlog_gauges(&mut out, &figures);
        paused_gauges(
            &mut out,
            &PausedFor {
                run_once: 0.0,
                relay_outbox: 12.0,
            },
        );
        let text = out.into_text();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "crm_booking_expiration_backlog{phase=\"Reserve\"} 0",
                "crm_booking_expiration_backlog{phase=\"Booking\"} 4",
                "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Reserve\"} 0",
                "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Booking\"} 90.5",
                "crm_booking_expiration_poison 2",
                "crm_booking_expiration_outbox_waiting{topic=\"t\"} 3",
                "crm_booking_expiration_outbox_next_due_timestamp_seconds{topic=\"t\"} 1800000000",
                "crm_booking_expiration_relay_floor_age_seconds 2.5",
                "crm_booking_expiration_relay_sweep_in_progress 1",
                "crm_booking_expiration_paused_seconds{step=\"run-once\"} 0",
                "crm_booking_expiration_paused_seconds{step=\"relay-outbox\"} 12",
            ]
        );
    }
}
