//! What `audit` found, as it reports it: the report's data (each topic's partitions
//! read, the rows missing from their topic, the messages with no row, the repair) and
//! its text for people (the JSON is the data serialised).

use serde::Serialize;
use uuid::Uuid;

use crate::render::{self as format, Table};

/// The command's name in messages and in the operations trail.
pub(super) const COMMAND: &str = "audit";

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Report {
    pub(super) since: String,
    pub(super) until: String,
    /// Messages older than this whose row is gone count as purged.
    pub(super) purge_cutoff: String,
    pub(super) topics: Vec<TopicRead>,
    /// `COPY` statements that loaded the messages, of at most `chunk_rows` each.
    pub(super) chunks: u64,
    pub(super) chunk_rows: u32,
    /// The job's outbox rows of the window on the topics.
    pub(super) rows: u64,
    /// The window's messages on the topics (those read with a timestamp in it).
    pub(super) messages: u64,
    pub(super) missing: Missing,
    pub(super) no_row: NoRows,
    pub(super) repair: Option<Repair>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct TopicRead {
    pub(super) topic: String,
    /// Whether the brokers know the topic.
    pub(super) exists: bool,
    pub(super) partitions: Vec<PartitionRead>,
    /// Messages read from it (also those outside the window).
    pub(super) messages_read: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct PartitionRead {
    pub(super) partition: i32,
    /// The first offset the partition holds, and its high watermark at the start.
    pub(super) low: i64,
    pub(super) high: i64,
    /// The lowest offset a receipt of the window names, if any.
    pub(super) receipt_from: Option<i64>,
    /// The first offset at or after --since by time.
    pub(super) time_from: i64,
    /// Where the read began: the lower of the two, within `low..=high`.
    pub(super) read_from: i64,
    /// Messages read from it (also those outside the window).
    pub(super) messages_read: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Missing {
    pub(super) count: u64,
    pub(super) published: u64,
    pub(super) failed: u64,
    pub(super) pending: u64,
    /// The first rows, in write order.
    pub(super) rows: Vec<MissingJson>,
    pub(super) not_shown: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct MissingJson {
    pub(super) id: Uuid,
    pub(super) aggregate_id: String,
    pub(super) topic: String,
    pub(super) occurred_at: String,
    /// `published` (its receipt says where), `failed` or `pending`.
    pub(super) state: String,
    pub(super) at: Option<String>,
    pub(super) partition: Option<i32>,
    pub(super) offset: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct NoRows {
    /// Messages with no row that nothing explains.
    pub(super) count: u64,
    /// Messages whose row was purged after the retention (or whose receipt is left).
    pub(super) purged: u64,
    /// The first messages: those nothing explains first.
    pub(super) messages: Vec<NoRowJson>,
    pub(super) not_shown: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct NoRowJson {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) ce_id: Option<String>,
    pub(super) timestamp: Option<String>,
    /// `no row`, or `no row (purged?)`.
    pub(super) finding: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct Repair {
    /// Missing rows re-queued (published or failed ones).
    pub(super) requeued: u64,
    /// Missing rows left to the relay (pending ones).
    pub(super) left_pending: u64,
    pub(super) operation_id: Option<i64>,
    pub(super) actor: String,
    pub(super) reason: String,
}

pub(super) fn text(r: &Report) -> String {
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
