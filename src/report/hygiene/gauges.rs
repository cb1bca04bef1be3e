//! The upkeep figures as Prometheus gauges (families in `obs::backlog_only`).

use chrono::{DateTime, Utc};

use crate::obs::backlog_only as families;
use crate::obs::exposition::Exposition;
use crate::render;
use crate::store::Hygiene;

fn unix_seconds(at: Option<DateTime<Utc>>) -> f64 {
    at.map_or(0.0, |at| at.timestamp_micros() as f64 / 1e6)
}

/// The upkeep gauges (families in `obs::backlog_only`).
pub(crate) fn prometheus(h: &Hygiene, as_of: DateTime<Utc>, out: &mut Exposition) {
    let o = &h.outbox;
    out.gauge(families::OUTBOX_LIVE_TUPLES, o.live_tuples as f64);
    out.gauge(families::OUTBOX_DEAD_TUPLES, o.dead_tuples as f64);
    out.gauge(
        families::OUTBOX_AUTOVACUUM_ENABLED,
        if o.autovacuum_enabled { 1.0 } else { 0.0 },
    );
    out.gauge(
        families::OUTBOX_LAST_AUTOVACUUM,
        unix_seconds(o.last_autovacuum),
    );
    out.gauge(
        families::OUTBOX_LAST_AUTOANALYZE,
        unix_seconds(o.last_autoanalyze),
    );
    out.gauge(families::OUTBOX_TABLE_BYTES, o.table_bytes as f64);
    out.gauge(families::OUTBOX_INDEXES_BYTES, o.indexes_bytes as f64);
    let indexes: Vec<(Vec<(&str, &str)>, f64)> = h
        .partial_indexes
        .iter()
        .map(|i| {
            (
                vec![("table", i.table.as_str()), ("index", i.index.as_str())],
                i.bytes as f64,
            )
        })
        .collect();
    out.labelled(families::PARTIAL_INDEX_BYTES, &indexes);

    let x = &h.xmin_horizon;
    let kinds = ["session", "prepared", "slot", "hidden_session"];
    let totals = [
        x.sessions.total,
        x.prepared.total,
        x.slots.total,
        x.hidden_sessions.total,
    ];
    let per_kind = |values: [f64; 4]| -> Vec<(Vec<(&str, &str)>, f64)> {
        kinds
            .iter()
            .zip(values)
            .map(|(k, v)| (vec![("kind", *k)], v))
            .collect()
    };
    out.labelled(families::XMIN_HOLDERS, &per_kind(totals.map(|t| t as f64)));
    let age = |at: Option<DateTime<Utc>>| at.map_or(0.0, |at| render::seconds(as_of - at).max(0.0));
    let oldest_ages: Vec<(Vec<(&str, &str)>, f64)> = vec![
        (
            vec![("kind", "session")],
            age(x.sessions.shown.first().and_then(|s| s.transaction_start)),
        ),
        (
            vec![("kind", "prepared")],
            age(x.prepared.shown.first().map(|p| p.prepared_at)),
        ),
    ];
    out.labelled(families::XMIN_OLDEST_AGE, &oldest_ages);
    // Each list comes oldest first.
    out.labelled(
        families::XMIN_OLDEST_XID_AGE,
        &per_kind(
            [
                x.sessions.shown.first().and_then(|s| s.xid_age),
                x.prepared.shown.first().map(|p| p.xid_age),
                x.slots.shown.first().and_then(|s| s.xid_age),
                x.hidden_sessions.shown.first().and_then(|s| s.xid_age),
            ]
            .map(|a| a.map_or(0.0, f64::from)),
        ),
    );
}
