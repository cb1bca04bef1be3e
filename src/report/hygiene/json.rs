//! The upkeep figures as JSON (`backlog --format json`'s `Hygiene`).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::rfc3339;
use crate::render;
use crate::store::{
    FirstOf, Hygiene, IndexSize, PreparedHolder, SessionHolder, SlotHolder, TableHealth,
};

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Json {
    outbox: OutboxJson,
    partial_indexes: Vec<IndexJson>,
    xmin_horizon: HorizonJson,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct OutboxJson {
    live_tuples: i64,
    dead_tuples: i64,
    autovacuum_enabled: bool,
    last_autovacuum: Option<String>,
    last_autoanalyze: Option<String>,
    table_bytes: i64,
    indexes_bytes: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct IndexJson {
    table: String,
    index: String,
    bytes: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct HorizonJson {
    threshold_seconds: f64,
    can_read_all_stats: bool,
    sessions: ListJson<SessionJson>,
    hidden_sessions: ListJson<SessionJson>,
    prepared_transactions: ListJson<PreparedJson>,
    replication_slots: ListJson<SlotJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ListJson<T> {
    total: u64,
    shown: Vec<T>,
}

fn list<T, J>(l: &FirstOf<T>, f: impl Fn(&T) -> J) -> ListJson<J> {
    ListJson {
        total: l.total,
        shown: l.shown.iter().map(f).collect(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SessionJson {
    pid: i32,
    application_name: String,
    user: Option<String>,
    state: Option<String>,
    transaction_start: Option<String>,
    age_seconds: Option<f64>,
    xid: Option<String>,
    xmin: Option<String>,
    xid_age: Option<i32>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PreparedJson {
    gid: String,
    owner: String,
    prepared_at: String,
    age_seconds: f64,
    xid: String,
    xid_age: i32,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SlotJson {
    name: String,
    slot_type: String,
    database: Option<String>,
    xmin: Option<String>,
    catalog_xmin: Option<String>,
    xid_age: Option<i32>,
    retained_wal_bytes: Option<i64>,
}

pub(crate) fn json(h: &Hygiene, as_of: DateTime<Utc>) -> Json {
    let TableHealth {
        live_tuples,
        dead_tuples,
        last_autovacuum,
        last_autoanalyze,
        autovacuum_enabled,
        table_bytes,
        indexes_bytes,
    } = h.outbox.clone();
    let x = &h.xmin_horizon;
    let session = |s: &SessionHolder| SessionJson {
        pid: s.pid,
        application_name: s.application_name.clone(),
        user: s.user.clone(),
        state: s.state.clone(),
        transaction_start: s.transaction_start.map(rfc3339),
        age_seconds: s.transaction_start.map(|at| render::seconds(as_of - at)),
        xid: s.xid.clone(),
        xmin: s.xmin.clone(),
        xid_age: s.xid_age,
    };
    Json {
        outbox: OutboxJson {
            live_tuples,
            dead_tuples,
            autovacuum_enabled,
            last_autovacuum: last_autovacuum.map(rfc3339),
            last_autoanalyze: last_autoanalyze.map(rfc3339),
            table_bytes,
            indexes_bytes,
        },
        partial_indexes: h
            .partial_indexes
            .iter()
            .map(
                |IndexSize {
                     table,
                     index,
                     bytes,
                 }| IndexJson {
                    table: table.clone(),
                    index: index.clone(),
                    bytes: *bytes,
                },
            )
            .collect(),
        xmin_horizon: HorizonJson {
            threshold_seconds: render::seconds(x.threshold),
            can_read_all_stats: x.can_read_all_stats,
            sessions: list(&x.sessions, session),
            hidden_sessions: list(&x.hidden_sessions, session),
            prepared_transactions: list(&x.prepared, |p: &PreparedHolder| PreparedJson {
                gid: p.gid.clone(),
                owner: p.owner.clone(),
                prepared_at: rfc3339(p.prepared_at),
                age_seconds: render::seconds(as_of - p.prepared_at),
                xid: p.xid.clone(),
                xid_age: p.xid_age,
            }),
            replication_slots: list(&x.slots, |s: &SlotHolder| SlotJson {
                name: s.name.clone(),
                slot_type: s.slot_type.clone(),
                database: s.database.clone(),
                xmin: s.xmin.clone(),
                catalog_xmin: s.catalog_xmin.clone(),
                xid_age: s.xid_age,
                retained_wal_bytes: s.retained_wal_bytes,
            }),
        },
    }
}
