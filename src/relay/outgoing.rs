//! An outbox row as the Kafka message it becomes, and the rows of a fetch that go in
//! one batch.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::domain::json;
use crate::kafka::OutMessage;
use crate::store::OutboxRow;

/// At most one message in flight per key and topic: the oldest pending row of each key
/// on each topic goes in this batch, later rows of the same key and topic wait for the
/// next one. Order is per topic (a partition belongs to one topic), so the rows of one
/// expiry on two contract versions' topics go together.
pub(super) fn one_per_key(rows: Vec<OutboxRow>) -> Vec<OutboxRow> {
    let mut seen = HashSet::new();
    rows.into_iter()
        .filter(|r| seen.insert((r.topic.clone(), r.key.clone())))
        .collect()
}

/// The Kafka message of an outbox row: key = aggregate id, value = payload (in the
/// contract's field order), headers as captured at write time, `ce_id` = the row id
/// (the MessageId consumers dedupe on).
pub(super) fn message(row: &OutboxRow) -> OutMessage<'_> {
    // Read in place: a header is copied once, by the producer.
    let mut headers: Vec<(Cow<str>, Cow<str>)> = json::object_fields(&row.headers)
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| name != "ce_id")
        .map(|(name, value)| (name, json::as_text(value)))
        .collect();
    // By name; of a name given twice, the last.
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    headers.dedup_by(|later, earlier| {
        let same = later.0 == earlier.0;
        if same {
            std::mem::swap(later, earlier);
        }
        same
    });
    headers.push((Cow::Borrowed("ce_id"), Cow::Owned(row.id.to_string())));
    OutMessage {
        topic: &row.topic,
        key: &row.key,
        payload: crate::domain::payload_in_contract_order(&row.payload).into_bytes(),
        headers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn row(key: &str, n: u128) -> OutboxRow {
        OutboxRow {
            id: Uuid::from_u128(n),
            seq: n as i64,
            key: key.to_owned(),
            topic: "t".to_owned(),
            payload: "{}".to_owned(),
            headers: r#"{"n": 1, "ce_id": "someone else's", "traceparent": "00-x"}"#.to_owned(),
            occurred_at: chrono::DateTime::UNIX_EPOCH,
            size: 2,
            fetch: crate::store::Fetch::Loaded,
            extra: Default::default(),
        }
    }

    #[test]
    fn only_the_oldest_row_of_each_key_on_each_topic_is_sent() {
        let on_v2 = OutboxRow {
            topic: "t.v2".to_owned(),
            ..row("a", 6)
        };
        let batch = one_per_key(vec![
            row("a", 1),
            row("b", 2),
            row("a", 3),
            row("c", 4),
            row("b", 5),
            on_v2,
        ]);
        let ids: Vec<u128> = batch.iter().map(|r| r.id.as_u128()).collect();
        assert_eq!(ids, [1, 2, 4, 6]);
    }

    #[test]
    fn ce_id_is_always_the_row_id() {
        let row = row("k", 7);
        let m = message(&row);
        let ce_ids: Vec<&str> = m
            .headers
            .iter()
            .filter(|(k, _)| k == "ce_id")
            .map(|(_, v)| v.as_ref())
            .collect();
        assert_eq!(ce_ids, [Uuid::from_u128(7).to_string()]);
        let names: Vec<&str> = m.headers.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(names, ["n", "traceparent", "ce_id"]);
        assert_eq!(m.headers[0].1, "1");
        assert_eq!(m.headers[1].1, "00-x");
        assert_eq!(m.key, "k");
    }
}
