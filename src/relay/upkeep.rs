//! The relay's upkeep after its batches: the purge of published rows past the
//! retention, and the count of the rows that wait (backing off, or for their topic);
//! both of the relay's outbox types only.

use std::time::Duration;

use crate::store::Session;
use anyhow::Result;
use log::{info, warn};

use super::pipeline::interrupted;
use super::topics::TopicWaits;
use super::{RelayResult, Run};
use crate::clock::Clock;
use crate::config::RelayConfig;
use crate::store;

/// Counts the rows that wait into `result` (one read of the few rows with a back-off,
/// and of the pending rows of the topics in `topics`), and says so in one line when they
/// are why nothing was published. A failed read leaves the counts at 0 and returns
/// `None`: it is a report, not the run's work.
pub(super) fn count_waiting(
    client: &mut Session,
    clock: &dyn Clock,
    cfg: &RelayConfig,
    topics: &TopicWaits,
    result: &mut RelayResult,
) -> Option<Vec<store::TopicWaiting>> {
    let per_topic = match store::waiting(client, clock.now(), &cfg.outbox_types, &topics.excluded())
    {
        Ok(w) => w,
        Err(e) => {
            warn!(Error:% = format!("{e:#}"); "cannot count the outbox rows that wait");
            return None;
        }
    };
    let (waiting, for_topic, next_due) = store::waiting_total(&per_topic);
    result.waiting = waiting;
    result.waiting_for_topic = for_topic;
    result.next_due = next_due.map(crate::domain::rfc3339);
    match (result.published, &result.next_due) {
        (0, Some(due)) => {
            info!(Waiting = waiting, WaitingForTopic = for_topic, NextDue = due.as_str();
                  "nothing published: {waiting} rows are waiting ({for_topic} of them for their \
                   topic, the others out a back-off), the next is due at {due}");
        }
        (0, None) if waiting > 0 => {
            info!(Waiting = waiting, WaitingForTopic = for_topic;
                  "nothing published: {waiting} rows are waiting for their topic; they go once \
                   it can take them");
        }
        _ => {}
    }
    Some(per_topic)
}

/// How long the purge may start new batches: it is one step of the relay's time budget
/// (cronjob.yaml), so a large backlog of old rows is deleted over several runs.
const PURGE_FOR: Duration = Duration::from_secs(1);

/// Deletes published rows older than the retention, in bounded batches, for at most
/// [`PURGE_FOR`] plus the batch in flight then; the rest goes next run.
pub(super) fn purge(client: &mut Session, run: &Run, result: &mut RelayResult) -> Result<()> {
    let (cfg, monotonic) = (run.cfg, run.ambient.monotonic);
    let now = run.ambient.clock.now();
    let began = monotonic.now();
    // On the relay's own state: by `seq` range below the floor (the rows the release
    // before published go by its columns' index after).
    if store::relay_state_usable(client, true)? {
        store::load_watermark(client, &cfg.outbox_types, cfg.legacy_marks, now)?;
        // The run's end, every mark in: the sweep reads up to its own snapshot, and the
        // floor comes up to the run's `high`, so that a purge a retention on reaches
        // what this run relayed.
        let checked = store::sweep(
            client,
            &cfg.outbox_types,
            cfg.legacy_marks,
            now,
            store::SweepTop::Now,
            store::SeqWindow::Skip,
        )?;
        super::queue::log_gap(&checked, result);
        let floor = checked.watermark.floor;
        loop {
            interrupted(run)?;
            if monotonic.since(began) >= PURGE_FOR {
                info!(Purged = result.purged, PurgeForMs = PURGE_FOR.as_millis() as u64;
                      "purge time spent; older published rows are purged next run");
                return Ok(());
            }
            let purged = store::purge_range(
                client,
                now,
                cfg.retention,
                cfg.purge_batch_size,
                floor,
                &cfg.outbox_types,
                cfg.legacy_marks,
            )?;
            result.purged += purged.deleted;
            if purged.late > 0 {
                result.late += purged.late;
                result.late_below_floor += purged.late;
                warn!(Rows = purged.late, Floor = floor;
                      "undelivered rows found below the floor by the purge: kept, and sent next run");
            }
            if purged.receipts < u64::from(cfg.purge_batch_size) {
                break;
            }
        }
    }
    loop {
        interrupted(run)?;
        if monotonic.since(began) >= PURGE_FOR {
            info!(Purged = result.purged, PurgeForMs = PURGE_FOR.as_millis() as u64;
                  "purge time spent; older published rows are purged next run");
            return Ok(());
        }
        let deleted = store::purge_published(
            client,
            now,
            cfg.retention,
            cfg.purge_batch_size,
            &cfg.outbox_types,
        )?;
        result.purged += deleted;
        if deleted < u64::from(cfg.purge_batch_size) {
            if result.purged > 0 {
                info!(Purged = result.purged, RetentionSeconds = cfg.retention.as_secs();
                      "published rows past the retention purged");
            }
            return Ok(());
        }
    }
}
