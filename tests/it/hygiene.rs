//! `backlog`'s upkeep report against a real PostgreSQL: the outbox's dead tuples with
//! autovacuum off for it, and each kind of holder of the xmin horizon — a session idle
//! in a transaction that holds an xid, a prepared transaction, a logical replication
//! slot nobody consumes — under the read-only role the command runs as in production
//! (which reads them through the narrow function of migration 11, never any query text),
//! and what a role without it is shown instead.

use crate::common;
use crate::postgres;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::*;
use postgres::{Client, NoTls};
use serde_json::{Value, json};

/// A LOGIN member of `crm_booking_expiration_readonly`, as a deployment grants the
/// group to the account `backlog` runs as; dropped when the test ends.
fn report_account(db: &TestDb) -> LoginRole {
    LoginRole::member_of(db, "report", "crm_booking_expiration_readonly")
}

/// `backlog` with `args` as the user of `url`; the one JSON object when `--json`.
fn backlog(db: &TestDb, url: &str, args: &[&str]) -> Run {
    let mut all = vec!["backlog"];
    all.extend_from_slice(args);
    let mut cmd = db.command(&all);
    cmd.env("DATABASE_URL", url);
    let run = Run::of(cmd.output().unwrap());
    assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
    run
}

fn backlog_json(db: &TestDb, url: &str, args: &[&str]) -> (DateTime<Utc>, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let run = backlog(db, url, &all);
    let report = json_lines(&run.stdout).remove(0);
    let as_of = report["AsOf"].as_str().unwrap().parse().unwrap();
    (as_of, report["Hygiene"].clone())
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn seconds_between(later: DateTime<Utc>, earlier: DateTime<Utc>) -> f64 {
    (later - earlier).num_microseconds().unwrap() as f64 / 1e6
}

/// The outbox's live and dead tuples as the statistics show them now.
fn tuples(c: &mut Client) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT n_live_tup, n_dead_tup FROM pg_stat_all_tables
              WHERE relid = 'crm.outbox'::regclass",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

/// Runs `sql` in a connection that ends right after: a session's statistics reach the
/// server by the time it has disconnected, never later (a session that stays may send
/// them after a VACUUM, which would then be counted on top of what VACUUM found).
fn in_a_session_of_its_own(db: &TestDb, sql: &str) {
    let mut c = db.client();
    c.batch_execute(sql).unwrap();
    c.close().unwrap();
}

/// The partial indexes of the bookings and the outbox with their sizes, as a superuser
/// reads them.
fn partial_indexes(c: &mut Client) -> Value {
    let rows = c
        .query(
            "SELECT 'crm.' || t.relname, c.relname::text, pg_relation_size(c.oid)
               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               JOIN pg_class t ON t.oid = i.indrelid
              WHERE t.relname IN ('bookings', 'outbox')
                AND t.relnamespace = 'crm'::regnamespace AND i.indpred IS NOT NULL
              ORDER BY t.relname, c.relname",
            &[],
        )
        .unwrap();
    rows.iter()
        .map(|r| {
            json!({"Table": r.get::<_, String>(0), "Index": r.get::<_, String>(1),
                   "Bytes": r.get::<_, i64>(2)})
        })
        .collect()
}

/// The value of a row of the upkeep table (label, two or more spaces, value).
fn upkeep_value<'t>(table: &'t str, label: &str) -> &'t str {
    table
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once("  ")?;
            (name == label).then(|| value.trim())
        })
        .unwrap_or_else(|| panic!("no {label:?} in\n{table}"))
}

/// `name{labels}` → value of the samples of a text exposition.
fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

#[test]
fn dead_tuples_stay_while_an_idle_transaction_holds_the_horizon_and_go_after_it_ends() {
    let db = TestDb::new();
    let mut c = db.client();
    let account = report_account(&db);
    let plain = ReadOnlyRole::new(&db);
    c.batch_execute("ALTER TABLE crm.outbox SET (autovacuum_enabled = off)")
        .unwrap();
    in_a_session_of_its_own(
        &db,
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                 occurred_at)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 't', 't', '{}', now()
           FROM generate_series(1, 100)",
    );

    // A session that took an xid and went idle inside its transaction.
    let mut holder = db.client();
    holder
        .batch_execute("SET application_name = 'hygiene-holder'")
        .unwrap();
    let mut tx = holder.transaction().unwrap();
    let xid: String = tx
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .unwrap()
        .get(0);
    let holder_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);

    // 30 rows marked published (never a HOT update: published_at is in the partial
    // indexes' predicates), 20 deleted: 50 dead row versions, 80 live rows.
    in_a_session_of_its_own(
        &db,
        "UPDATE crm.outbox SET published_at = now() WHERE seq <= 30;
         DELETE FROM crm.outbox WHERE seq > 80;",
    );
    wait_until(Duration::from_secs(30), "the writers' statistics", || {
        tuples(&mut c) == (80, 50)
    });
    // VACUUM cannot remove them: the holder's transaction is older.
    c.batch_execute("VACUUM crm.outbox").unwrap();
    let xact_start: DateTime<Utc> = c
        .query_one(
            "SELECT xact_start FROM pg_stat_activity WHERE pid = $1",
            &[&holder_pid],
        )
        .unwrap()
        .get(0);
    let user: String = c
        .query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    wait_until(Duration::from_secs(10), "one second of holding", || {
        Utc::now() - xact_start > chrono::TimeDelta::milliseconds(1_100)
    });
    let (table_bytes, indexes_bytes): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT pg_relation_size('crm.outbox'), pg_indexes_size('crm.outbox')",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };

    // The read-only role sees the holder through the function, and no session's query
    // text: it is no member of pg_read_all_stats.
    let mut ro = Client::connect(&account.url, NoTls).unwrap();
    let member: bool = ro
        .query_one(
            "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!member);
    let query: Option<String> = ro
        .query_one(
            "SELECT query FROM pg_stat_activity WHERE pid = $1",
            &[&holder_pid],
        )
        .unwrap()
        .get(0);
    assert_eq!(query.as_deref(), Some("<insufficient privilege>"));
    let seen = ro
        .query_one(
            "SELECT state, usename, application_name, xmin_age IS NOT NULL AS aged,
                    transaction_age > interval '1 second' AS old
               FROM crm.booking_expiration_xmin_holders() WHERE pid = $1",
            &[&holder_pid],
        )
        .unwrap();
    assert_eq!(seen.get::<_, &str>("state"), "idle in transaction");
    assert_eq!(seen.get::<_, &str>("usename"), user);
    assert_eq!(seen.get::<_, &str>("application_name"), "hygiene-holder");
    assert!(seen.get::<_, bool>("aged") && seen.get::<_, bool>("old"));
    let columns: Vec<String> = ro
        .query(
            "SELECT unnest(proargnames) FROM pg_proc
              WHERE oid = 'crm.booking_expiration_xmin_holders()'::regprocedure",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!columns.iter().any(|c| c.contains("query")), "{columns:?}");
    drop(ro);

    let (as_of, hygiene) = backlog_json(&db, &account.url, &["--xmin-horizon-age", "1s"]);
    let xid_age = hygiene["XminHorizon"]["Sessions"]["Shown"][0]["XidAge"]
        .as_i64()
        .unwrap();
    // The update and the delete came after the holder's xid.
    assert!(xid_age >= 2, "{hygiene}");
    // Its snapshot's xmin, if it keeps one while idle: at most its own xid (older when
    // another database's transaction was running as it took the snapshot).
    let xmin = hygiene["XminHorizon"]["Sessions"]["Shown"][0]["Xmin"].clone();
    assert!(
        xmin.is_null()
            || xmin.as_str().unwrap().parse::<u64>().unwrap() <= xid.parse::<u64>().unwrap(),
        "{xmin} against the xid {xid}"
    );
    assert_eq!(
        hygiene,
        json!({
            "Outbox": {
                "LiveTuples": 80,
                "DeadTuples": 50,
                "AutovacuumEnabled": false,
                "LastAutovacuum": null,
                "LastAutoanalyze": null,
                "TableBytes": table_bytes,
                "IndexesBytes": indexes_bytes,
            },
            "PartialIndexes": partial_indexes(&mut c),
            "XminHorizon": {
                "ThresholdSeconds": 1.0,
                "CanReadAllStats": true,
                "Sessions": {"Total": 1, "Shown": [{
                    "Pid": holder_pid,
                    "ApplicationName": "hygiene-holder",
                    "User": user,
                    "State": "idle in transaction",
                    "TransactionStart": rfc3339(xact_start),
                    "AgeSeconds": seconds_between(as_of, xact_start),
                    "Xid": xid,
                    "Xmin": xmin,
                    "XidAge": xid_age,
                }]},
                "HiddenSessions": {"Total": 0, "Shown": []},
                "PreparedTransactions": {"Total": 0, "Shown": []},
                "ReplicationSlots": {"Total": 0, "Shown": []},
            },
        })
    );
    // Among them the claim's and the relay's queue.
    let names: Vec<&str> = hygiene["PartialIndexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["Index"].as_str().unwrap())
        .collect();
    for index in [
        "ix_bookings_booking_expires_at",
        "ix_bookings_reserve_expires_at",
        "ix_outbox_failed",
        "ix_outbox_pending",
    ] {
        assert!(names.contains(&index), "{index} not in {names:?}");
    }

    // Below the default threshold (15 minutes) the session is not named.
    let (_, quiet) = backlog_json(&db, &account.url, &[]);
    assert_eq!(quiet["XminHorizon"]["ThresholdSeconds"], 900.0);
    assert_eq!(quiet["XminHorizon"]["Sessions"]["Total"], 0);

    // The table and the gauges say the same.
    let table = backlog(&db, &account.url, &["--xmin-horizon-age", "1s"]).stdout;
    for (label, value) in [
        ("outbox live rows", "80"),
        ("outbox dead rows", "50"),
        ("outbox autovacuum", "OFF"),
        ("outbox last autovacuum", "never"),
    ] {
        assert_eq!(upkeep_value(&table, label), value, "{label}:\n{table}");
    }
    let needle =
        "xmin horizon held back (VACUUM cannot remove dead rows newer than these; threshold 1s)";
    assert!(table.contains(needle), "{table}");
    let line = table
        .lines()
        .find(|l| l.starts_with("session "))
        .unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = line
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells[..3],
        [
            &format!("session pid {holder_pid}"),
            &format!("{user} hygiene-holder"),
            "idle in transaction",
        ],
        "{table}"
    );
    assert!(table.lines().all(|l| l.chars().count() <= 120), "{table}");
    let text = backlog(
        &db,
        &account.url,
        &["--format", "prometheus", "--xmin-horizon-age", "1s"],
    )
    .stdout;
    let s = samples(&text);
    assert_eq!(s["crm_booking_expiration_outbox_dead_tuples"], 50.0);
    assert_eq!(s["crm_booking_expiration_outbox_live_tuples"], 80.0);
    assert_eq!(s["crm_booking_expiration_outbox_autovacuum_enabled"], 0.0);
    assert_eq!(
        s["crm_booking_expiration_outbox_last_autovacuum_timestamp_seconds"],
        0.0
    );
    assert_eq!(
        s["crm_booking_expiration_outbox_table_bytes"],
        table_bytes as f64
    );
    assert_eq!(
        s["crm_booking_expiration_xmin_horizon_holders{kind=\"session\"}"],
        1.0
    );
    for kind in ["prepared", "slot", "hidden_session"] {
        let series = format!("crm_booking_expiration_xmin_horizon_holders{{kind=\"{kind}\"}}");
        assert_eq!(s[&series], 0.0, "{series}");
    }
    let age = s["crm_booking_expiration_xmin_horizon_oldest_age_seconds{kind=\"session\"}"];
    let since = seconds_between(Utc::now(), xact_start);
    assert!((1.1..=since).contains(&age), "{age} not in 1.1..={since}");
    assert!(s["crm_booking_expiration_xmin_horizon_oldest_xid_age{kind=\"session\"}"] >= 2.0);

    // A role that is no member of pg_read_all_stats sees the session without its state
    // and start: listed apart, by transaction ids, with what it lacks.
    let (_, hidden) = backlog_json(&db, &plain.url, &["--xmin-horizon-age", "1s"]);
    let horizon = &hidden["XminHorizon"];
    assert_eq!(horizon["CanReadAllStats"], false);
    assert_eq!(horizon["Sessions"]["Total"], 0);
    let shown = &horizon["HiddenSessions"]["Shown"][0];
    assert_eq!(horizon["HiddenSessions"]["Total"], 1, "{horizon}");
    assert_eq!(shown["Pid"], holder_pid);
    assert_eq!(shown["ApplicationName"], "hygiene-holder");
    assert_eq!(shown["Xid"], xid);
    for hidden_field in ["State", "TransactionStart", "AgeSeconds"] {
        assert_eq!(shown[hidden_field], Value::Null, "{hidden_field}: {shown}");
    }
    assert!(shown["XidAge"].as_i64().unwrap() >= 2, "{shown}");
    let table = backlog(&db, &plain.url, &["--xmin-horizon-age", "1s"]).stdout;
    let words = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(
            "use a member of crm_booking_expiration_readonly, with \
             sql/011_xmin_holders_function.sql applied by a superuser"
        ),
        "{table}"
    );

    // Once the transaction ends, VACUUM removes the dead rows and nothing is named.
    tx.commit().unwrap();
    c.batch_execute("VACUUM crm.outbox").unwrap();
    wait_until(Duration::from_secs(30), "the vacuum's statistics", || {
        tuples(&mut c) == (80, 0)
    });
    let (_, after) = backlog_json(&db, &account.url, &["--xmin-horizon-age", "1s"]);
    assert_eq!(after["Outbox"]["DeadTuples"], 0);
    assert_eq!(after["Outbox"]["LiveTuples"], 80);
    assert_eq!(after["XminHorizon"]["Sessions"]["Total"], 0);
    let table = backlog(&db, &account.url, &["--xmin-horizon-age", "1s"]).stdout;
    assert!(
        table.contains("xmin horizon: nothing holds it back longer than 1s"),
        "{table}"
    );
}

#[test]
fn a_prepared_transaction_and_an_unconsumed_logical_slot_are_named() {
    // Both need server settings of their own: max_prepared_transactions > 0 and
    // wal_level = logical, which take a restart.
    let pg = OwnPostgres::start();
    let mut admin = pg.client();
    for setting in ["max_prepared_transactions = 4", "wal_level = logical"] {
        admin
            .batch_execute(&format!("ALTER SYSTEM SET {setting}"))
            .unwrap();
    }
    drop(admin);
    pg.restart();
    let db = TestDb::new_on(&pg.url);
    let account = report_account(&db);
    let mut c = db.client();

    c.batch_execute("SELECT pg_create_logical_replication_slot('hygiene_slot', 'pgoutput')")
        .unwrap();
    // A two-phase commit left half done: prepared, never committed or rolled back.
    // (Not on the outbox: its insert trigger notifies, which PREPARE refuses.)
    seed(&mut c, &[Seed::reserved(3_600)]);
    let mut p = db.client();
    p.batch_execute(
        "BEGIN;
         UPDATE crm.bookings SET updated_at = now();
         PREPARE TRANSACTION 'hygiene-gid';",
    )
    .unwrap();
    let prepared = c
        .query_one(
            "SELECT prepared, owner::text, transaction::text FROM pg_prepared_xacts
              WHERE gid = 'hygiene-gid'",
            &[],
        )
        .unwrap();
    let (prepared_at, owner, xid): (DateTime<Utc>, String, String) =
        (prepared.get(0), prepared.get(1), prepared.get(2));
    let catalog_xmin: String = c
        .query_one(
            "SELECT catalog_xmin::text FROM pg_replication_slots WHERE slot_name = 'hygiene_slot'",
            &[],
        )
        .unwrap()
        .get(0);
    wait_until(Duration::from_secs(10), "one second of holding", || {
        Utc::now() - prepared_at > chrono::TimeDelta::milliseconds(1_100)
    });

    let (as_of, hygiene) = backlog_json(&db, &account.url, &["--xmin-horizon-age", "1s"]);
    let horizon = &hygiene["XminHorizon"];
    let prepared_age = horizon["PreparedTransactions"]["Shown"][0]["XidAge"]
        .as_i64()
        .unwrap();
    assert!(prepared_age >= 1, "{horizon}");
    assert_eq!(
        horizon["PreparedTransactions"],
        json!({"Total": 1, "Shown": [{
            "Gid": "hygiene-gid",
            "Owner": owner,
            "PreparedAt": rfc3339(prepared_at),
            "AgeSeconds": seconds_between(as_of, prepared_at),
            "Xid": xid,
            "XidAge": prepared_age,
        }]})
    );
    let slot = &horizon["ReplicationSlots"]["Shown"][0];
    assert_eq!(horizon["ReplicationSlots"]["Total"], 1, "{horizon}");
    assert_eq!(slot["Name"], "hygiene_slot");
    assert_eq!(slot["SlotType"], "logical");
    assert_eq!(slot["Database"], db.name.as_str());
    assert_eq!(slot["Xmin"], Value::Null);
    assert_eq!(slot["CatalogXmin"], catalog_xmin.as_str());
    // The prepared transaction took its xid after the slot was made (or the same one
    // the slot kept as the oldest it may need).
    assert!(slot["XidAge"].as_i64().unwrap() >= prepared_age, "{slot}");
    // The seed, the update and the prepare wrote WAL since the slot's restart point.
    assert!(slot["RetainedWalBytes"].as_i64().unwrap() > 0, "{slot}");
    assert_eq!(horizon["Sessions"]["Total"], 0, "{horizon}");

    // The table names both; a name longer than its column (28) is cut with "…".
    let who = format!("logical {}", db.name);
    let who = if who.chars().count() > 28 {
        format!("{}…", who.chars().take(27).collect::<String>())
    } else {
        who
    };
    let table = backlog(&db, &account.url, &["--xmin-horizon-age", "1s"]).stdout;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("prepared gid hygiene-gid  ")
                && l.contains(&format!("  {owner}  "))),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("slot hygiene_slot  ")
            && l.contains(&format!("  {who}  "))
            && l.contains("  inactive, ")
            && l.contains(" WAL  ")),
        "{table}"
    );

    // A slot keeps no time: it is named under the default threshold too; the prepared
    // transaction, a second old, is not.
    let (_, quiet) = backlog_json(&db, &account.url, &[]);
    assert_eq!(quiet["XminHorizon"]["PreparedTransactions"]["Total"], 0);
    assert_eq!(quiet["XminHorizon"]["ReplicationSlots"]["Total"], 1);

    // Resolved: the prepared transaction rolled back, the slot dropped.
    c.batch_execute("ROLLBACK PREPARED 'hygiene-gid'").unwrap();
    c.batch_execute("SELECT pg_drop_replication_slot('hygiene_slot')")
        .unwrap();
    let (_, after) = backlog_json(&db, &account.url, &["--xmin-horizon-age", "1s"]);
    assert_eq!(after["XminHorizon"]["PreparedTransactions"]["Total"], 0);
    assert_eq!(after["XminHorizon"]["ReplicationSlots"]["Total"], 0);
}
