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
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::config::{AUDIT_KAFKA_TIMEOUT, AuditConfig, AuditFormat};
use crate::domain::AsOf;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::kafka::Classify;
use crate::kafka::scan::{Seen, TopicScan};
use crate::render::{self as format, Table};
use crate::shutdown::Shutdown;
use crate::store::ops::{self, AuditWindow, Operation, SeenMessage};
use crate::store::{self, SchemaNeed};

/// The missing rows and the messages with no row the report lists (each); the rest are
/// counted.
const SHOWN: i64 = 1_000;
/// Rows re-queued per statement.
const BATCH: i64 = 1_000;
/// The command's name in messages and in the operations trail.
const COMMAND: &str = "audit";

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Report {
    since: String,
    until: String,
    /// Messages older than this whose row is gone count as purged.
    purge_cutoff: String,
    topics: Vec<TopicRead>,
    /// `COPY` statements that loaded the messages, of at most `chunk_rows` each.
    chunks: u64,
    chunk_rows: u32,
    /// The job's outbox rows of the window on the topics.
    rows: u64,
    /// The window's messages on the topics (those read with a timestamp in it).
    messages: u64,
    missing: Missing,
    no_row: NoRows,
    repair: Option<Repair>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TopicRead {
    topic: String,
    /// Whether the brokers know the topic.
    exists: bool,
    partitions: Vec<PartitionRead>,
    /// Messages read from it (also those outside the window).
    messages_read: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PartitionRead {
    partition: i32,
    /// The first offset the partition holds, and its high watermark at the start.
    low: i64,
    high: i64,
    /// The lowest offset a receipt of the window names, if any.
    receipt_from: Option<i64>,
    /// The first offset at or after --since by time.
    time_from: i64,
    /// Where the read began: the lower of the two, within `low..=high`.
    read_from: i64,
    /// Messages read from it (also those outside the window).
    messages_read: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Missing {
    count: u64,
    published: u64,
    failed: u64,
    pending: u64,
    /// The first rows, in write order.
    rows: Vec<MissingJson>,
    not_shown: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct MissingJson {
    id: Uuid,
    aggregate_id: String,
    topic: String,
    occurred_at: String,
    /// `published` (its receipt says where), `failed` or `pending`.
    state: String,
    at: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NoRows {
    /// Messages with no row that nothing explains.
    count: u64,
    /// Messages whose row was purged after the retention (or whose receipt is left).
    purged: u64,
    /// The first messages: those nothing explains first.
    messages: Vec<NoRowJson>,
    not_shown: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct NoRowJson {
    topic: String,
    partition: i32,
    offset: i64,
    ce_id: Option<String>,
    timestamp: Option<String>,
    /// `no row`, or `no row (purged?)`.
    finding: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Repair {
    /// Missing rows re-queued (published or failed ones).
    requeued: u64,
    /// Missing rows left to the relay (pending ones).
    left_pending: u64,
    operation_id: Option<i64>,
    actor: String,
    reason: String,
}

fn usage(message: String) -> anyhow::Error {
    fail(Failure::Usage, message)
}

fn ms_time(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms).map(format::time)
}

/// `audit`.
pub fn audit(cfg: &AuditConfig, shutdown: &Shutdown) -> Result<()> {
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

/// `--repair`: the missing rows that were published or failed re-queued, in one
/// transaction with their entry in the operations trail, as republish does it.
fn repair(
    db: &mut store::Db,
    cfg: &AuditConfig,
    actor: &crate::config::Actor,
    counts: &ops::AuditCounts,
    described: &str,
    now: DateTime<Utc>,
) -> Result<Repair> {
    let to_take = counts.missing_published + counts.missing_failed;
    if to_take > u64::from(cfg.max_rows) {
        return Err(usage(format!(
            "{COMMAND} --repair: {to_take} rows to re-queue, more than --max-rows {}; \
             narrow the window or raise --max-rows (nothing was changed)",
            cfg.max_rows
        )));
    }
    let mut tx = db
        .client
        .transaction()
        .classify(Failure::Temporary, "cannot begin a transaction")?;
    let who = super::actor(&mut tx, actor)?;
    let mut ids: Vec<Uuid> = Vec::new();
    let mut requeued = 0;
    let mut after = i64::MIN;
    loop {
        let batch = ops::missing_to_requeue(&mut tx, after, BATCH)?;
        let Some((last, _)) = batch.last() else {
            break;
        };
        after = *last;
        let batch_ids: Vec<Uuid> = batch.iter().map(|(_, id)| *id).collect();
        requeued += ops::requeue(&mut tx, &batch_ids, &cfg.outbox_types)?;
        ids.extend(batch_ids);
    }
    let mut operation_id = None;
    if !ids.is_empty() {
        operation_id = Some(ops::record(
            &mut tx,
            &Operation {
                at: now,
                actor: &who,
                action: "audit --repair",
                target: described,
                reason: &actor.reason,
                outbox_ids: &ids,
            },
        )?);
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot commit the re-queue")?;
    if requeued > 0 {
        info!(Command = COMMAND, Requeued = requeued, Actor = who.as_str(),
              Reason = actor.reason.as_str(); "outbox rows re-queued");
    }
    Ok(Repair {
        requeued,
        left_pending: counts.missing_pending,
        operation_id,
        actor: who,
        reason: actor.reason.clone(),
    })
}

fn text(r: &Report) -> String {
    let mut out = String::new();
    let topics: Vec<&str> = r.topics.iter().map(|t| t.topic.as_str()).collect();
    out.push_str(&format::wrap(
        &format!(
            "audit: {} outbox rows and {} messages on {} from {} until {}",
            r.rows,
            r.messages,
            topics.join(", "),
            r.since,
            r.until
        ),
        "",
        "  ",
    ));
    let mut t = Table::new(&[
        "Topic",
        "Partition",
        "Low",
        "High",
        "Receipts from",
        "Read from",
        "Read",
    ]);
    for topic in &r.topics {
        if !topic.exists {
            t.row(vec![
                topic.topic.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "0".into(),
            ]);
            t.note("  the brokers do not know this topic".into());
            continue;
        }
        for p in &topic.partitions {
            t.row(vec![
                topic.topic.clone(),
                p.partition.to_string(),
                p.low.to_string(),
                p.high.to_string(),
                p.receipt_from.map_or("-".into(), |o| o.to_string()),
                p.read_from.to_string(),
                p.messages_read.to_string(),
            ]);
        }
    }
    t.render(&mut out);
    let m = &r.missing;
    out.push_str(&format!(
        "missing from their topic: {} outbox rows (published {}, failed {}, pending {})\n",
        m.count, m.published, m.failed, m.pending
    ));
    if !m.rows.is_empty() {
        let mut t = Table::new(&["Id", "Booking", "Topic", "Was", "Partition", "Offset"]);
        for row in &m.rows {
            t.row(vec![
                row.id.to_string(),
                row.aggregate_id
                    .chars()
                    .take(format::SHORT_ID_WIDTH)
                    .collect(),
                row.topic.clone(),
                row.state.clone(),
                row.partition.map_or("-".into(), |p| p.to_string()),
                row.offset.map_or("-".into(), |o| o.to_string()),
            ]);
        }
        t.render(&mut out);
    }
    if m.not_shown > 0 {
        out.push_str(&format!("… and {} more rows\n", m.not_shown));
    }
    let n = &r.no_row;
    out.push_str(&format!(
        "messages with no outbox row: {} (and {} whose row was purged?)\n",
        n.count, n.purged
    ));
    if !n.messages.is_empty() {
        let mut t = Table::new(&["Topic", "Partition", "Offset", "ce_id", "Sent", "Finding"]);
        for msg in &n.messages {
            t.row(vec![
                msg.topic.clone(),
                msg.partition.to_string(),
                msg.offset.to_string(),
                msg.ce_id.clone().unwrap_or_else(|| "-".into()),
                msg.timestamp.clone().unwrap_or_else(|| "-".into()),
                msg.finding.to_owned(),
            ]);
        }
        t.render(&mut out);
    }
    if n.not_shown > 0 {
        out.push_str(&format!("… and {} more messages\n", n.not_shown));
    }
    match &r.repair {
        None if m.count > 0 => {
            out.push_str("--repair re-queues the published and failed ones with the same ce_id\n")
        }
        None => {}
        Some(rep) => {
            let what = match rep.operation_id {
                Some(id) => format!(
                    "re-queued {} rows: the next relay-outbox run sends them again with the \
                     same ce_id; recorded as operation {id} by {}: {}",
                    rep.requeued, rep.actor, rep.reason
                ),
                None => "nothing to re-queue; nothing was changed".to_owned(),
            };
            out.push_str(&format::wrap(&what, "", "  "));
            if rep.left_pending > 0 {
                out.push_str(&format!(
                    "left to the relay: {} pending rows\n",
                    rep.left_pending
                ));
            }
        }
    }
    if m.count == 0 && n.count == 0 {
        out.push_str("nothing is missing\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_each_finding() {
        let id: Uuid = "01a22e27-eb27-753a-823b-74b8c190ac35".parse().unwrap();
        let report = Report {
            since: "2026-11-30T00:00:00Z".into(),
            until: "2026-11-30T01:00:00Z".into(),
            purge_cutoff: "2026-11-23T01:00:00Z".into(),
            topics: vec![TopicRead {
                topic: "pin.crm.booking-expired.v1".into(),
                exists: true,
                partitions: vec![PartitionRead {
                    partition: 0,
                    low: 0,
                    high: 7,
                    receipt_from: Some(3),
                    time_from: 5,
                    read_from: 3,
                    messages_read: 4,
                }],
                messages_read: 4,
            }],
            chunks: 1,
            chunk_rows: 10_000,
            rows: 4,
            messages: 4,
            missing: Missing {
                count: 1,
                published: 1,
                failed: 0,
                pending: 0,
                rows: vec![MissingJson {
                    id,
                    aggregate_id: "b1000001-0000-4000-8000-000000000000".into(),
                    topic: "pin.crm.booking-expired.v1".into(),
                    occurred_at: "2026-11-30T00:10:00Z".into(),
                    state: "published".into(),
                    at: Some("2026-11-30T00:10:01Z".into()),
                    partition: Some(0),
                    offset: Some(2),
                }],
                not_shown: 0,
            },
            no_row: NoRows {
                count: 1,
                purged: 0,
                messages: vec![NoRowJson {
                    topic: "pin.crm.booking-expired.v1".into(),
                    partition: 0,
                    offset: 6,
                    ce_id: Some(id.to_string()),
                    timestamp: Some("2026-11-30T00:20:00Z".into()),
                    finding: "no row",
                }],
                not_shown: 0,
            },
            repair: None,
        };
        assert_eq!(
            text(&report),
            "audit: 4 outbox rows and 4 messages on pin.crm.booking-expired.v1 from \
             2026-11-30T00:00:00Z until 2026-11-30T01:00:00Z\n\
             Topic                       Partition  Low  High  Receipts from  Read from  Read\n\
             pin.crm.booking-expired.v1  0          0    7     3              3          4\n\
             missing from their topic: 1 outbox rows (published 1, failed 0, pending 0)\n\
             Id                                    Booking   Topic                       Was        \
             Partition  Offset\n\
             01a22e27-eb27-753a-823b-74b8c190ac35  b1000001  pin.crm.booking-expired.v1  published  \
             0          2\n\
             messages with no outbox row: 1 (and 0 whose row was purged?)\n\
             Topic                       Partition  Offset  ce_id                                 \
             Sent                  Finding\n\
             pin.crm.booking-expired.v1  0          6       01a22e27-eb27-753a-823b-74b8c190ac35  \
             2026-11-30T00:20:00Z  no row\n\
             --repair re-queues the published and failed ones with the same ce_id\n"
        );
    }
}
