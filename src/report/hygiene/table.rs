//! The upkeep figures as a table: the outbox's upkeep, the partial indexes, then what
//! holds the xmin horizon back.

use chrono::{DateTime, Utc};

use crate::render::{self, Table};
use crate::store::{FirstOf, Hygiene, SessionHolder};

/// A size as people read it: bytes, KiB, MiB, GiB, TiB (one decimal above bytes).
pub(super) fn bytes(n: i64) -> String {
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

fn more<T>(l: &FirstOf<T>, what: &str, out: &mut String) {
    let hidden = l.total.saturating_sub(l.shown.len() as u64);
    if hidden > 0 {
        out.push_str(&format!("… and {hidden} more {what}\n"));
    }
}

/// The table: the outbox's upkeep, the partial indexes, then what holds the horizon.
pub(crate) fn table(h: &Hygiene, as_of: DateTime<Utc>, out: &mut String) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    use crate::store::{SlotHolder, TableHealth};

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
                sessions: FirstOf {
                    shown: (1..=sessions.min(5) as i32).map(session).collect(),
                    total: sessions,
                },
                hidden_sessions: FirstOf {
                    shown: vec![],
                    total: 0,
                },
                prepared: FirstOf {
                    shown: vec![],
                    total: 0,
                },
                slots: FirstOf {
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
        none.xmin_horizon.slots = FirstOf {
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
        h.xmin_horizon.prepared = FirstOf {
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
        h.xmin_horizon.hidden_sessions = FirstOf {
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
