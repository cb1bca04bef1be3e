//! `audit --since T`: did every outbox row of a window reach its topic, and does every
//! message of the window on the topics have a row? The topics are read from where the
//! window's receipts say its messages begin (or by time), up to the high watermarks of
//! the start; their `ce_id`s go into a temporary table chunk by chunk and the outbox is
//! compared with them in SQL (`store::ops::audit`), so neither side is ever held in
//! memory. `--repair` re-queues the missing rows through republish's own code
//! (`store::ops::requeue`) and the operations trail.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, TimeDelta, Utc};
use log::info;

use crate::clock::{Clock, SystemClock};
use crate::config::{AUDIT_KAFKA_TIMEOUT, AuditConfig, AuditFormat};
use crate::domain::AsOf;
use crate::exit::{Failure, fail};
use crate::kafka::Classify;
use crate::kafka::scan::{Seen, TopicScan};
use crate::render as format;
use crate::shutdown::Shutdown;
use crate::store::ops::{self, AuditWindow, SeenMessage};
use crate::store::{self, SchemaNeed};

/// The missing rows and the messages with no row the report lists (each); the rest are
/// counted.
const SHOWN: i64 = 1_000;

mod repair;
mod report;

use repair::repair;
use report::*;

fn usage(message: String) -> anyhow::Error {
    fail(Failure::Usage, message)
}

fn ms_time(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms).map(format::time)
}

/// `audit`.
pub(crate) fn audit(cfg: &AuditConfig, shutdown: &Shutdown) -> Result<()> {
    let now = SystemClock.now();
    let at = |t: AsOf| match t {
        AsOf::Now => now,
        AsOf::At(at) => at,
    };
    let (since, until) = (at(cfg.since), at(cfg.until));
    if since > now {
        return Err(usage(format!(
            "{COMMAND}: --since {} is in the future (now is {}): the window must have begun",
            format::time(since),
            format::time(now)
        )));
    }
    if since >= until {
        return Err(usage(format!(
            "{COMMAND}: --since {} is not before --until {}",
            format::time(since),
            format::time(until)
        )));
    }
    let purge_cutoff = now - TimeDelta::from_std(cfg.retention).unwrap_or(TimeDelta::MAX);
    let types = &cfg.outbox_types;

    let mut db = store::connect(&cfg.db)?;
    shutdown.on_signal(db.interrupter());
    // The temporary tables: a primary, and a session of the command's own. A login
    // read-only by default (the operators' read-only login) may still audit: its
    // privileges bound what it writes; --repair needs a session that writes.
    if cfg.repair.is_none() && db.writable.read_only && !db.writable.in_recovery {
        ops::allow_temp_tables(&mut db.client)?;
    } else {
        db.require_writable(&cfg.db, COMMAND)?;
    }
    crate::preflight::require_own_session(&mut db, &cfg.db, COMMAND)?;
    // --repair re-queues as republish does, with its grants.
    let need = if cfg.repair.is_some() {
        SchemaNeed::Requeue
    } else {
        SchemaNeed::Audit
    };
    store::check_schema(&mut db.client, need)?;
    crate::preflight::check_row_security(&mut db.client, COMMAND, types)?;
    let window = AuditWindow {
        since,
        until,
        topics: &cfg.topics,
        types,
    };
    let mut receipts: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (topic, partition, first) in ops::receipt_starts(&mut db.client, &window)? {
        receipts.insert((topic, partition), first);
    }
    ops::begin_seen(&mut db.client)?;

    let mut topics = Vec::with_capacity(cfg.topics.len());
    let mut chunks = 0u64;
    // Grows to --chunk-rows only if the topic holds that many.
    let mut chunk: Vec<SeenMessage> = Vec::with_capacity((cfg.chunk_rows as usize).min(10_000));
    for topic in &cfg.topics {
        let Some(mut scan) = TopicScan::open(
            &cfg.kafka,
            topic,
            since.timestamp_millis(),
            AUDIT_KAFKA_TIMEOUT,
            shutdown,
        )
        .classified()?
        else {
            topics.push(TopicRead {
                topic: topic.clone(),
                exists: false,
                partitions: Vec::new(),
                messages_read: 0,
            });
            continue;
        };
        let partitions: Vec<PartitionRead> = scan
            .partitions()
            .iter()
            .map(|p| {
                let receipt_from = receipts.get(&(topic.clone(), p.partition)).copied();
                PartitionRead {
                    partition: p.partition,
                    low: p.low,
                    high: p.high,
                    receipt_from,
                    time_from: p.from_time,
                    read_from: receipt_from
                        .map_or(p.from_time, |r| r.min(p.from_time))
                        .clamp(p.low, p.high),
                    messages_read: 0,
                }
            })
            .collect();
        let starts = partitions
            .iter()
            .map(|p| (p.partition, p.read_from))
            .collect();
        scan.start(&starts).classified()?;
        let mut read = 0u64;
        let mut read_per_partition: BTreeMap<i32, u64> = BTreeMap::new();
        while let Some(Seen {
            partition,
            offset,
            ce_id,
            timestamp_ms,
        }) = scan.next_message().classified()?
        {
            read += 1;
            *read_per_partition.entry(partition).or_default() += 1;
            chunk.push(SeenMessage {
                partition,
                offset,
                ce_id,
                timestamp_ms,
            });
            if chunk.len() >= cfg.chunk_rows as usize {
                ops::copy_seen(&mut db.client, topic, &chunk)?;
                chunks += 1;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            ops::copy_seen(&mut db.client, topic, &chunk)?;
            chunks += 1;
            chunk.clear();
        }
        info!(Topic = topic.as_str(), Rows = read; "audit: topic read");
        let partitions = partitions
            .into_iter()
            .map(|p| PartitionRead {
                messages_read: read_per_partition.get(&p.partition).copied().unwrap_or(0),
                ..p
            })
            .collect();
        topics.push(TopicRead {
            topic: topic.clone(),
            exists: true,
            partitions,
            messages_read: read,
        });
    }

    let counts = ops::compare(&mut db.client, &window, purge_cutoff)?;
    let missing_count = counts.missing_published + counts.missing_failed + counts.missing_pending;
    let missing_rows = ops::missing(&mut db.client, SHOWN)?;
    let no_rows = ops::no_row(&mut db.client, SHOWN)?;
    let described = format!(
        "missing from {} in the window from {} until {}",
        cfg.topics.join(","),
        format::time(since),
        format::time(until)
    );
    let repair = match &cfg.repair {
        None => None,
        Some(actor) => Some(repair(&mut db, cfg, actor, &counts, &described, now)?),
    };

    let report = Report {
        since: format::time(since),
        until: format::time(until),
        purge_cutoff: format::time(purge_cutoff),
        topics,
        chunks,
        chunk_rows: cfg.chunk_rows,
        rows: counts.rows,
        messages: counts.messages,
        missing: Missing {
            count: missing_count,
            published: counts.missing_published,
            failed: counts.missing_failed,
            pending: counts.missing_pending,
            not_shown: missing_count.saturating_sub(missing_rows.len() as u64),
            rows: missing_rows
                .iter()
                .map(|r| MissingJson {
                    id: r.id,
                    aggregate_id: r.aggregateid.clone(),
                    topic: r.topic.clone(),
                    occurred_at: format::time(r.occurred_at),
                    state: r.state.clone(),
                    at: r.at.map(format::time),
                    partition: r.partition,
                    offset: r.offset,
                })
                .collect(),
        },
        no_row: NoRows {
            count: counts.no_row,
            purged: counts.no_row_purged,
            not_shown: (counts.no_row + counts.no_row_purged).saturating_sub(no_rows.len() as u64),
            messages: no_rows
                .iter()
                .map(|m| NoRowJson {
                    topic: m.topic.clone(),
                    partition: m.partition,
                    offset: m.offset,
                    ce_id: m.ce_id.clone(),
                    timestamp: m.timestamp_ms.and_then(ms_time),
                    finding: if m.purged {
                        "no row (purged?)"
                    } else {
                        "no row"
                    },
                })
                .collect(),
        },
        repair,
    };
    match cfg.format {
        AuditFormat::Json => format::print_json(&report)?,
        AuditFormat::Table => format::print(&text(&report))?,
    }
    if missing_count > 0 || counts.no_row > 0 {
        return Err(fail(
            Failure::Missing,
            format!(
                "{COMMAND}: {missing_count} outbox rows missing from their topic, {} messages \
                 with no outbox row",
                counts.no_row
            ),
        ));
    }
    Ok(())
}
