// Over 450 lines: three renderings (table, JSON, gauges) of the upkeep figures, each field spelled out, and a unit test of the table with its fixture.
//! The upkeep part of `backlog`: the outbox's dead tuples, autovacuum's last visits,
//! the sizes of the outbox and of the partial indexes, and what holds the xmin horizon
//! back, as a table, as JSON and as Prometheus gauges. The runbook of each finding is
//! in `docs/runbooks/database-hygiene.md`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::rfc3339;
use crate::obs::backlog_only as families;
use crate::obs::metrics::Exposition;
use crate::render::{self, Table};
use crate::store::{
    Hygiene, IndexSize, Listed, PreparedHolder, SessionHolder, SlotHolder, TableHealth,
};

/// A size as people read it: bytes, KiB, MiB, GiB, TiB (one decimal above bytes).
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn when(at: Option<DateTime<Utc>>, as_of: DateTime<Utc>) -> String {
    at.map_or("never".to_owned(), |at| {
        format!(
            "{} ({} ago)",
            render::time(at),
            render::duration(as_of - at)
        )
    })
}

fn opt(v: &Option<impl ToString>) -> String {
    v.as_ref().map_or("-".to_owned(), ToString::to_string)
}

fn more<T>(l: &Listed<T>, what: &str, out: &mut String) {
    let hidden = l.total.saturating_sub(l.shown.len() as u64);
    if hidden > 0 {
        out.push_str(&format!("… and {hidden} more {what}\n"));
    }
}

/// The table: the outbox's upkeep, the partial indexes, then what holds the horizon.
pub fn table(h: &Hygiene, as_of: DateTime<Utc>, out: &mut String) {
    let o = &h.outbox;
    out.push('\n');
    let mut t = Table::new(&["Upkeep", "Value"]);
    t.row(vec!["outbox live rows".into(), o.live_tuples.to_string()]);
    t.row(vec!["outbox dead rows".into(), o.dead_tuples.to_string()]);
    t.row(vec![
        "outbox autovacuum".into(),
        if o.autovacuum_enabled { "on" } else { "OFF" }.into(),
    ]);
    t.row(vec![
        "outbox last autovacuum".into(),
        when(o.last_autovacuum, as_of),
    ]);
    t.row(vec![
        "outbox last autoanalyze".into(),
        when(o.last_autoanalyze, as_of),
    ]);
    t.row(vec!["outbox table size".into(), bytes(o.table_bytes)]);
    t.row(vec!["outbox indexes size".into(), bytes(o.indexes_bytes)]);
    for i in &h.partial_indexes {
        t.row(vec![
            format!("index {}.{}", i.table, i.index),
            bytes(i.bytes),
        ]);
    }
    t.render(out);

    let x = &h.xmin_horizon;
    let threshold = render::duration(x.threshold);
    let named = x.sessions.total + x.hidden_sessions.total + x.prepared.total + x.slots.total;
    if named == 0 {
        out.push_str(&format!(
            "\nxmin horizon: nothing holds it back longer than {threshold}\n"
        ));
        return;
    }
    out.push_str(&format!(
        "\nxmin horizon held back (VACUUM cannot remove dead rows newer than these; \
         threshold {threshold})\n\n"
    ));
    // Fits 120 columns: names a user chose (application, gid, slot) are cut to their
    // column, and the age stands for the start (the JSON keeps the start itself).
    let mut t = Table::new(&["Holder", "Who", "State", "Age", "Xid age"]);
    for s in &x.sessions.shown {
        t.row(session_row(s, as_of));
    }
    for s in &x.hidden_sessions.shown {
        t.row(session_row(s, as_of));
    }
    for p in &x.prepared.shown {
        t.row(vec![
            render::fit(&format!("prepared gid {}", p.gid), HOLDER_WIDTH),
            render::fit(&p.owner, WHO_WIDTH),
            "prepared".into(),
            render::duration(as_of - p.prepared_at),
            p.xid_age.to_string(),
        ]);
    }
    for s in &x.slots.shown {
        let wal = s
            .retained_wal_bytes
            .map_or(String::new(), |b| format!(", {} WAL", bytes(b)));
        t.row(vec![
            render::fit(&format!("slot {}", s.name), HOLDER_WIDTH),
            render::fit(&format!("{} {}", s.slot_type, opt(&s.database)), WHO_WIDTH),
            format!("inactive{wal}"),
            "-".into(),
            opt(&s.xid_age),
        ]);
    }
    t.render(out);
    more(&x.sessions, "sessions", out);
    more(&x.hidden_sessions, "sessions of unknown age", out);
    more(&x.prepared, "prepared transactions", out);
    more(&x.slots, "replication slots", out);
    if x.hidden_sessions.total > 0 {
        out.push_str(&render::wrap(
            "sessions of unknown age: this role may not see other roles' session state \
             and start (use a member of crm_booking_expiration_readonly, with \
             sql/011_xmin_holders_function.sql applied by a superuser); their xid age is how \
             many transactions old their snapshot is",
            "",
            "  ",
        ));
    }
}

/// Widths of the xmin holders' free-text columns. With the longest state
/// ("idle in transaction (aborted)", 29), an age of years ("365d 23h 59m 59s", 16) and
/// a 10-digit xid age, a row is at most 28 + 28 + 29 + 16 + 10 + 4 × 2 = 119 columns.
const HOLDER_WIDTH: usize = 28;
const WHO_WIDTH: usize = 28;

fn session_row(s: &SessionHolder, as_of: DateTime<Utc>) -> Vec<String> {
    let who = match &s.user {
        Some(user) => format!("{user} {}", s.application_name),
        None => s.application_name.clone(),
    };
    vec![
        format!("session pid {}", s.pid),
        render::fit(&who, WHO_WIDTH),
        s.state.clone().unwrap_or_else(|| "(hidden)".into()),
        s.transaction_start
            .map_or("(hidden)".into(), |at| render::duration(as_of - at)),
        opt(&s.xid_age),
    ]
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Json {
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

fn list<T, J>(l: &Listed<T>, f: impl Fn(&T) -> J) -> ListJson<J> {
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

pub fn json(h: &Hygiene, as_of: DateTime<Utc>) -> Json {
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

fn unix_seconds(at: Option<DateTime<Utc>>) -> f64 {
    at.map_or(0.0, |at| at.timestamp_micros() as f64 / 1e6)
}

/// The upkeep gauges (families in `obs::metrics`).
pub fn prometheus(h: &Hygiene, as_of: DateTime<Utc>, out: &mut Exposition) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn hygiene(sessions: u64) -> Hygiene {
        let session = |pid: i32| SessionHolder {
            pid,
            application_name: "etl".into(),
            user: Some("loader".into()),
            state: Some("idle in transaction".into()),
            transaction_start: Some(at("2030-01-01T11:00:00Z")),
            xid: Some("900".into()),
            xmin: Some("900".into()),
            xid_age: Some(4_000),
        };
        Hygiene {
            outbox: TableHealth {
                live_tuples: 70_000,
                dead_tuples: 14_000,
                last_autovacuum: Some(at("2030-01-01T11:30:00Z")),
                last_autoanalyze: None,
                autovacuum_enabled: true,
                table_bytes: 50 * 1024 * 1024,
                indexes_bytes: 8192,
            },
            partial_indexes: vec![],
            xmin_horizon: crate::store::XminHorizon {
                threshold: TimeDelta::minutes(15),
                can_read_all_stats: true,
                sessions: Listed {
                    shown: (1..=sessions.min(5) as i32).map(session).collect(),
                    total: sessions,
                },
                hidden_sessions: Listed {
                    shown: vec![],
                    total: 0,
                },
                prepared: Listed {
                    shown: vec![],
                    total: 0,
                },
                slots: Listed {
                    shown: vec![SlotHolder {
                        name: "cdc".into(),
                        slot_type: "logical".into(),
                        database: Some("crm".into()),
                        xmin: None,
                        catalog_xmin: Some("800".into()),
                        xid_age: Some(4_100),
                        retained_wal_bytes: Some(3 * 1024 * 1024),
                    }],
                    total: 1,
                },
            },
        }
    }

    #[test]
    fn the_table_lists_five_holders_of_a_kind_and_counts_the_rest() {
        let mut out = String::new();
        table(&hygiene(7), at("2030-01-01T12:00:00Z"), &mut out);
        assert!(out.contains("outbox last autovacuum   2030-01-01T11:30:00Z (30m 0s ago)\n"));
        assert!(out.contains("outbox table size        50.0 MiB\n"), "{out}");
        assert_eq!(out.matches("\nsession ").count(), 5, "{out}");
        assert!(out.contains("… and 2 more sessions\n"), "{out}");
        assert!(
            out.contains("session pid 1  loader etl   idle in transaction    1h 0m 0s  4000\n"),
            "{out}"
        );
        assert!(
            out.contains("slot cdc       logical crm  inactive, 3.0 MiB WAL  -         4100\n"),
            "{out}"
        );
        let mut quiet = String::new();
        let mut none = hygiene(0);
        none.xmin_horizon.slots = Listed {
            shown: vec![],
            total: 0,
        };
        table(&none, at("2030-01-01T12:00:00Z"), &mut quiet);
        assert!(quiet.ends_with("\nxmin horizon: nothing holds it back longer than 15m 0s\n"));
    }

    #[test]
    fn the_holders_fit_120_columns_with_the_longest_names_states_and_ages() {
        let mut h = hygiene(1);
        let long = "x".repeat(200);
        let s = &mut h.xmin_horizon.sessions.shown[0];
        s.pid = i32::MAX;
        s.application_name = long.clone();
        s.user = Some("y".repeat(63));
        s.state = Some("idle in transaction (aborted)".into());
        s.transaction_start = Some(at("2029-01-01T00:00:01Z"));
        s.xid_age = Some(i32::MAX);
        h.xmin_horizon.prepared = Listed {
            shown: vec![crate::store::PreparedHolder {
                gid: long.clone(),
                owner: "z".repeat(63),
                prepared_at: at("2029-01-01T00:00:01Z"),
                xid: "1".into(),
                xid_age: i32::MAX,
            }],
            total: 1,
        };
        let slot = &mut h.xmin_horizon.slots.shown[0];
        slot.name = long;
        slot.database = Some("d".repeat(63));
        slot.retained_wal_bytes = Some(i64::MAX);
        let mut out = String::new();
        table(&h, at("2030-01-01T12:00:00Z"), &mut out);
        let rows: Vec<&str> = out
            .lines()
            .filter(|l| {
                l.starts_with("session ") || l.starts_with("prepared ") || l.starts_with("slot ")
            })
            .collect();
        assert_eq!(rows.len(), 3, "{out}");
        for line in out.lines() {
            assert!(
                line.chars().count() <= 120,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert_eq!(
            rows,
            [
                "session pid 2147483647        yyyyyyyyyyyyyyyyyyyyyyyyyyy…  \
                 idle in transaction (aborted)  365d 11h 59m 59s  2147483647",
                "prepared gid xxxxxxxxxxxxxx…  zzzzzzzzzzzzzzzzzzzzzzzzzzz…  \
                 prepared                       365d 11h 59m 59s  2147483647",
                "slot xxxxxxxxxxxxxxxxxxxxxx…  logical ddddddddddddddddddd…  \
                 inactive, 8388608.0 TiB WAL    -                 4100",
            ],
            "{out}"
        );
    }

    #[test]
    fn the_note_on_sessions_of_unknown_age_wraps_to_120_columns() {
        let mut h = hygiene(1);
        h.xmin_horizon.hidden_sessions = Listed {
            shown: vec![SessionHolder {
                pid: 7,
                application_name: "etl".into(),
                user: None,
                state: None,
                transaction_start: None,
                xid: None,
                xmin: None,
                xid_age: Some(12),
            }],
            total: 1,
        };
        let mut out = String::new();
        table(&h, at("2030-01-01T12:00:00Z"), &mut out);
        let note: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("sessions of unknown age: "))
            .collect();
        assert_eq!(note.len(), 3, "{out}");
        assert!(note.iter().all(|l| l.chars().count() <= 120), "{out}");
        assert!(note[1..].iter().all(|l| l.starts_with("  ")), "{out}");
        assert_eq!(
            note.join(" ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            "sessions of unknown age: this role may not see other roles' session state and \
             start (use a member of crm_booking_expiration_readonly, with \
             sql/011_xmin_holders_function.sql applied by a superuser); their xid age is how \
             many transactions old their snapshot is"
        );
    }

    #[test]
    fn sizes_read_like_an_operator_writes_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(8192), "8.0 KiB");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
        assert_eq!(bytes(5 * 1024_i64.pow(5)), "5120.0 TiB");
    }
}
