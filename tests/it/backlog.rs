//! `backlog` against a real PostgreSQL: exact counts on a seeded mix, its three output
//! formats, `--fail-above`, its query plans with much history, and both reports under
//! a read-only role.

use crate::common;
use crate::postgres;

use std::collections::BTreeMap;

use booking_expire_domain::Phase;
use booking_expire_store::testing::{
    OUTBOX_FAILED_SQL, OUTBOX_OTHERS_SQL, OUTBOX_PENDING_SQL, OUTBOX_WAITING_FOR_TOPIC_SQL,
    candidates_sql, overdue_sql, poison_sql, quarantined_sql,
};
use chrono::{DateTime, Utc};
use common::*;
use postgres::error::SqlState;
use serde_json::{Value, json};

/// What the mix holds, as the database stored it.
struct Mix {
    oldest_reserve: DateTime<Utc>,
    oldest_booking: DateTime<Utc>,
    oldest_pending: DateTime<Utc>,
    /// The oldest overdue Reserve booking is healthy: the next claim takes it first.
    oldest_reserve_id: uuid::Uuid,
    /// The oldest overdue Booking booking is in quarantine: the next claim takes the
    /// second oldest, this one.
    next_booking_id: uuid::Uuid,
    next_booking: DateTime<Utc>,
}

/// Overdue, future, terminal and poison bookings; pending, published and failed
/// outbox rows.
fn seed_mix(c: &mut postgres::Client) -> Mix {
    let oldest_reserve = Seed::reserved(-7_200);
    let mut guard_poison = Seed::booked(-900);
    guard_poison.expired_at_set = true;
    let db_poison = Seed::reserved(-100);
    let next_booking = Seed::booked(-600);
    let cancelled_after_poison = Seed::new("Cancelled", Some(-5_000), None);
    seed(
        c,
        &[
            // Overdue Reserve: 3 healthy + 1 quarantined.
            oldest_reserve.clone(),
            Seed::new("AwaitingPayment", Some(-60), None),
            Seed::reserved(-30),
            db_poison.clone(),
            // Overdue Booking: 2 healthy + 1 quarantined.
            next_booking.clone(),
            Seed::booked(-120),
            guard_poison.clone(),
            // Not due.
            Seed::reserved(3_600),
            Seed::new("AwaitingPayment", Some(600), None),
            // Booked: its reserve deadline passed long ago, its booking one has not.
            Seed::booked(60),
            Seed::new("Booked", None, Some(7_200)),
            // Terminal, with deadlines long past.
            Seed::new("ReserveExpired", Some(-3_600), None),
            Seed::new("BookingExpired", Some(-9_000), Some(-3_600)),
            Seed::new("Completed", Some(-9_000), Some(-3_600)),
            cancelled_after_poison.clone(),
        ],
    );
    put_in_quarantine(
        c,
        &guard_poison,
        "Booking",
        "expired_at_already_set",
        3,
        600,
    );
    put_in_quarantine(c, &db_poison, "Reserve", "database", 1, 60);
    // A poison row whose booking a manager cancelled meanwhile: no longer waiting.
    put_in_quarantine(c, &cancelled_after_poison, "Reserve", "database", 1, 60);
    let pending = insert_outbox_rows(c, OutboxState::Pending, &[600, 300, 10]);
    insert_outbox_rows(c, OutboxState::Published, &[4_000, 3_000, 2_000, 1_000]);
    insert_outbox_rows(c, OutboxState::Failed, &[5_000, 50]);
    let time = |c: &mut postgres::Client, sql: &str, id: uuid::Uuid| -> DateTime<Utc> {
        c.query_one(sql, &[&id]).unwrap().get(0)
    };
    Mix {
        oldest_reserve: time(
            c,
            "SELECT reserve_expires_at FROM crm.bookings WHERE id = $1",
            oldest_reserve.id,
        ),
        oldest_booking: time(
            c,
            "SELECT booking_expires_at FROM crm.bookings WHERE id = $1",
            guard_poison.id,
        ),
        oldest_pending: time(
            c,
            "SELECT occurred_at FROM crm.outbox WHERE id = $1",
            pending[0],
        ),
        oldest_reserve_id: oldest_reserve.id,
        next_booking_id: next_booking.id,
        next_booking: time(
            c,
            "SELECT booking_expires_at FROM crm.bookings WHERE id = $1",
            next_booking.id,
        ),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn seconds_between(later: DateTime<Utc>, earlier: DateTime<Utc>) -> f64 {
    (later - earlier).num_microseconds().unwrap() as f64 / 1e6
}

fn backlog_json(db: &TestDb, extra: &[&str]) -> Value {
    let mut args = vec!["backlog", "--json"];
    args.extend_from_slice(extra);
    let run = db.run(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut lines = json_lines(&run.stdout);
    assert_eq!(lines.len(), 1, "one JSON object: {}", run.stdout);
    lines.remove(0)
}

/// The report without its upkeep part (tests/it/hygiene.rs checks that).
fn without_hygiene(mut report: Value) -> Value {
    let hygiene = report.as_object_mut().unwrap().remove("Hygiene");
    assert!(hygiene.is_some_and(|h| h.is_object()), "{report}");
    report
}

#[test]
fn counts_are_exact_on_a_seeded_mix() {
    let db = TestDb::new();
    let mut c = db.client();
    let mix = seed_mix(&mut c);
    let before = checksum(&mut c);

    let report = without_hygiene(backlog_json(&db, &[]));
    let as_of: DateTime<Utc> = report["AsOf"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        report,
        json!({
            "AsOf": rfc3339(as_of),
            "OverdueTotal": 7,
            "Reserve": {
                "Overdue": 4,
                "OldestDeadline": rfc3339(mix.oldest_reserve),
                "OldestAgeSeconds": seconds_between(as_of, mix.oldest_reserve),
                "NextClaim": {
                    "BookingId": mix.oldest_reserve_id.to_string(),
                    "Deadline": rfc3339(mix.oldest_reserve),
                    "LatenessSeconds": seconds_between(as_of, mix.oldest_reserve),
                },
            },
            "Booking": {
                "Overdue": 3,
                "OldestDeadline": rfc3339(mix.oldest_booking),
                "OldestAgeSeconds": seconds_between(as_of, mix.oldest_booking),
                "NextClaim": {
                    "BookingId": mix.next_booking_id.to_string(),
                    "Deadline": rfc3339(mix.next_booking),
                    "LatenessSeconds": seconds_between(as_of, mix.next_booking),
                },
            },
            "Poison": 2,
            "Outbox": {
                "Pending": 3,
                "OldestPendingAt": rfc3339(mix.oldest_pending),
                "OldestPendingAgeSeconds": seconds_between(as_of, mix.oldest_pending),
                "Failed": 2,
                "WaitingForTopic": 0,
                "Late": 0,
                "Waiting": [],
            },
            "OutboxOtherProducers": {"Pending": 0, "Failed": 0},
            "OutboxRowSecurity": "off",
            "Paused": [],
            "RelayFloor": null,
        })
    );
    // `--format json` is the same report.
    let run = db.run(&["backlog", "--format", "json"]);
    assert_eq!(json_lines(&run.stdout)[0]["OverdueTotal"], 7);
    assert_eq!(checksum(&mut c), before, "backlog must write nothing");
}

#[test]
fn the_table_shows_every_count() {
    let db = TestDb::new();
    let mut c = db.client();
    let mix = seed_mix(&mut c);
    let run = db.run(&["backlog"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The first table: from its header to the first blank line.
    let rows: BTreeMap<String, Vec<String>> = run
        .stdout
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let (name, rest) = l.split_at(l.find("  ").unwrap());
            (
                name.trim().to_owned(),
                rest.split_whitespace().map(str::to_owned).collect(),
            )
        })
        .collect();
    let cells = |name: &str| rows[name].iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(
        cells("overdue Reserve")[..2],
        [
            "4",
            &mix.oldest_reserve
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        ]
    );
    assert_eq!(cells("overdue Reserve")[2..4], ["2h", "0m"]);
    assert_eq!(
        cells("overdue Booking")[..3],
        [
            "3",
            &mix.oldest_booking
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "15m"
        ]
    );
    assert_eq!(cells("overdue total"), ["7", "-", "-"]);
    assert_eq!(cells("poison (active, isolated)"), ["2", "-", "-"]);
    assert_eq!(
        cells("outbox pending")[..3],
        [
            "3",
            &mix.oldest_pending
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "10m"
        ]
    );
    assert_eq!(cells("outbox failed"), ["2", "-", "-"]);
    // The next claims: Reserve's oldest overdue booking (2 h), Booking's second oldest
    // (10 min; the oldest is quarantined).
    assert_eq!(
        cells("next claim Reserve")[..3],
        [
            "-",
            &mix.oldest_reserve
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "2h"
        ]
    );
    assert_eq!(
        cells("next claim Booking")[..3],
        [
            "-",
            &mix.next_booking
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            "10m"
        ]
    );
    assert_eq!(rows.len(), 8, "{}", run.stdout);
    assert!(run.stdout.starts_with("backlog at "), "{}", run.stdout);
    for (phase, id, late) in [
        ("Reserve", mix.oldest_reserve_id, "2h 0m"),
        ("Booking", mix.next_booking_id, "10m"),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("next {phase} claim, {late}")))
            .unwrap_or_else(|| panic!("no next {phase} claim:\n{}", run.stdout));
        assert!(
            line.ends_with(&format!(" late: booking-expire explain {id}")),
            "{line}"
        );
    }
    // The table and the lines under it fit 120 columns (terminal columns, not bytes).
    assert_fits_120(&run.stdout);
}

/// The upkeep families of `backlog --format prometheus` (values: tests/it/hygiene.rs).
const HYGIENE_FAMILIES: [&str; 11] = [
    "crm_booking_expiration_outbox_live_tuples",
    "crm_booking_expiration_outbox_dead_tuples",
    "crm_booking_expiration_outbox_autovacuum_enabled",
    "crm_booking_expiration_outbox_last_autovacuum_timestamp_seconds",
    "crm_booking_expiration_outbox_last_autoanalyze_timestamp_seconds",
    "crm_booking_expiration_outbox_table_bytes",
    "crm_booking_expiration_outbox_indexes_bytes",
    "crm_booking_expiration_partial_index_bytes",
    "crm_booking_expiration_xmin_horizon_holders",
    "crm_booking_expiration_xmin_horizon_oldest_age_seconds",
    "crm_booking_expiration_xmin_horizon_oldest_xid_age",
];

/// Samples of the backlog's own families: 2 per phase for overdue, age and lateness,
/// poison, five of the outbox, two of the relay's floor, two of the other producers'
/// rows, two pause switches.
const BACKLOG_SAMPLES: usize = 2 * 3 + 1 + 5 + 2 + 2 + 2;
/// Samples of the upkeep: seven of the outbox, seven partial indexes, four kinds of
/// holders, two oldest ages, four oldest xid ages.
const HYGIENE_SAMPLES: usize = 7 + 7 + 4 + 2 + 4;

/// `name{labels}` → value, and the declared type of each metric.
fn parse_prometheus(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
    let (mut samples, mut types) = (BTreeMap::new(), BTreeMap::new());
    let mut helped = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split_whitespace().next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let name = parts.next().unwrap().to_owned();
            assert!(helped.contains(&name), "TYPE before HELP for {name}");
            types.insert(name, parts.next().unwrap().to_owned());
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            assert!(types.contains_key(name), "sample before its TYPE: {line}");
            samples.insert(series.to_owned(), value.parse().unwrap());
        }
    }
    (samples, types)
}

#[test]
fn prometheus_format_has_every_gauge_with_help_and_type() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_mix(&mut c);
    let run = db.run(&["backlog", "--format", "prometheus"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (samples, types) = parse_prometheus(&run.stdout);
    let names = [
        "crm_booking_expiration_backlog",
        "crm_booking_expiration_backlog_oldest_age_seconds",
        "crm_booking_expiration_poison",
        "crm_booking_expiration_outbox_pending",
        "crm_booking_expiration_outbox_oldest_pending_age_seconds",
        "crm_booking_expiration_outbox_failed",
        "crm_booking_expiration_outbox_waiting_for_topic",
        "crm_booking_expiration_outbox_late",
        "crm_booking_expiration_relay_floor_age_seconds",
        "crm_booking_expiration_relay_sweep_in_progress",
        "crm_booking_expiration_paused_seconds",
        "crm_booking_expiration_backlog_lateness_seconds",
        "crm_booking_expiration_outbox_other_producers_rows",
    ]
    .into_iter()
    .chain(HYGIENE_FAMILIES);
    assert_eq!(
        types,
        names.map(|n| (n.to_string(), "gauge".to_owned())).collect()
    );
    let get = |series: &str| samples[series];
    assert_eq!(
        get("crm_booking_expiration_backlog{phase=\"Reserve\"}"),
        4.0
    );
    assert_eq!(
        get("crm_booking_expiration_backlog{phase=\"Booking\"}"),
        3.0
    );
    assert_eq!(get("crm_booking_expiration_poison"), 2.0);
    assert_eq!(get("crm_booking_expiration_outbox_pending"), 3.0);
    assert_eq!(get("crm_booking_expiration_outbox_failed"), 2.0);
    // Ages follow the seeded moments (2 h, 15 min, 10 min), within a slow run's slack.
    for (series, age) in [
        (
            "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Reserve\"}",
            7_200.0,
        ),
        (
            "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Booking\"}",
            900.0,
        ),
        (
            "crm_booking_expiration_outbox_oldest_pending_age_seconds",
            600.0,
        ),
        // The next claims: Reserve's oldest, Booking's second oldest (10 min).
        (
            "crm_booking_expiration_backlog_lateness_seconds{phase=\"Reserve\"}",
            7_200.0,
        ),
        (
            "crm_booking_expiration_backlog_lateness_seconds{phase=\"Booking\"}",
            600.0,
        ),
    ] {
        let got = get(series);
        assert!((age..age + 60.0).contains(&got), "{series} = {got}");
    }
    assert_eq!(
        samples.len(),
        BACKLOG_SAMPLES + HYGIENE_SAMPLES,
        "{}",
        run.stdout
    );
}

#[test]
fn an_empty_database_reports_zeros() {
    let db = TestDb::new();
    let report = without_hygiene(backlog_json(&db, &[]));
    let as_of = report["AsOf"].clone();
    assert_eq!(
        report,
        json!({
            "AsOf": as_of,
            "OverdueTotal": 0,
            "Reserve": {"Overdue": 0, "OldestDeadline": null, "OldestAgeSeconds": null,
                        "NextClaim": null},
            "Booking": {"Overdue": 0, "OldestDeadline": null, "OldestAgeSeconds": null,
                        "NextClaim": null},
            "Poison": 0,
            "Outbox": {"Pending": 0, "OldestPendingAt": null, "OldestPendingAgeSeconds": null,
                       "Failed": 0, "WaitingForTopic": 0, "Late": 0, "Waiting": []},
            "OutboxOtherProducers": {"Pending": 0, "Failed": 0},
            "OutboxRowSecurity": "off",
            "Paused": [],
            "RelayFloor": null,
        })
    );
    let run = db.run(&["backlog", "--format", "prometheus"]);
    let (samples, _) = parse_prometheus(&run.stdout);
    assert_eq!(samples.len(), BACKLOG_SAMPLES + HYGIENE_SAMPLES);
    let backlog: Vec<(&String, &f64)> = samples
        .iter()
        .filter(|(series, _)| !HYGIENE_FAMILIES.contains(&series.split('{').next().unwrap()))
        .collect();
    assert_eq!(backlog.len(), BACKLOG_SAMPLES, "{backlog:?}");
    assert!(backlog.iter().all(|(_, v)| **v == 0.0), "{backlog:?}");
}

#[test]
fn fail_above_exits_1_only_when_the_overdue_count_exceeds_n() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(
        &mut c,
        &[
            Seed::reserved(-60),
            Seed::booked(-60),
            Seed::booked(-30),
            Seed::reserved(3_600),
        ],
    );
    for (n, code) in [("3", 0), ("100", 0), ("2", 1), ("0", 1)] {
        for format in ["table", "json", "prometheus"] {
            let run = db.run(&["backlog", "--format", format, "--fail-above", n]);
            assert_eq!(run.code, code, "--fail-above {n} {format}: {}", run.stderr);
            // The report is printed either way, for the alert's annotation.
            assert!(!run.stdout.is_empty(), "{format}");
            let message = format!("overdue bookings 3 exceed --fail-above {n}");
            assert_eq!(run.stderr.contains(&message), code == 1, "{}", run.stderr);
        }
    }
    let run = db.run(&["backlog", "--json", "--fail-above", "2"]);
    assert_eq!(run.code, 1);
    assert_eq!(json_lines(&run.stdout)[0]["OverdueTotal"], 3);
    let empty = TestDb::new();
    assert_eq!(empty.run(&["backlog", "--fail-above", "0"]).code, 0);
}

#[test]
fn bad_flags_exit_64_and_missing_configuration_78() {
    let db = TestDb::new();
    for (args, needle) in [
        (&["backlog", "--format", "xml"][..], "'xml'"),
        (&["backlog", "--fail-above", "-1"], "'-1'"),
        (&["backlog", "--fail-above=-1"], "--fail-above"),
        (&["backlog", "--fail-above", "lots"], "'lots'"),
        (&["backlog", "--fail-above", ""], "--fail-above"),
        (
            &["backlog", "--json", "--format", "prometheus"],
            "cannot be used with",
        ),
        // The threshold names the flag, the value and the range allowed.
        (
            &["backlog", "--xmin-horizon-age", "0s"],
            "invalid value '0s' for '--xmin-horizon-age <DURATION>': 0s is out of range: \
             allowed 1s to 7d",
        ),
        (
            &["backlog", "--xmin-horizon-age", "8d"],
            "invalid value '8d' for '--xmin-horizon-age <DURATION>': 8d is out of range: \
             allowed 1s to 7d",
        ),
        (
            &["backlog", "--xmin-horizon-age", "15"],
            "invalid value '15' for '--xmin-horizon-age <DURATION>'",
        ),
        (&["backlog", "--xmin-horizon-age", "soon"], "'soon'"),
        (&["backlog", "--xmin-horizon-age", ""], "--xmin-horizon-age"),
    ] {
        let run = db.run(args);
        assert_eq!(run.code, 64, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let mut cmd = db.command(&["backlog"]);
    cmd.env_remove("DATABASE_URL");
    let run = Run::of(cmd.output().unwrap());
    assert_eq!(run.code, 78, "{}", run.stderr);
    let run = TestDb::empty().run(&["backlog"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains("schema not migrated"), "{}", run.stderr);
}

#[test]
fn a_table_lock_fails_fast_with_a_clear_temporary_error() {
    let db = TestDb::new();
    // A migration as the CRM would run it, named so that the message can name it.
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let mut migration = postgres::Client::connect(
        &format!("{}{separator}application_name=nightly-migration", db.url),
        postgres::NoTls,
    )
    .unwrap();
    let pid: i32 = migration
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut tx = migration.transaction().unwrap();
    tx.batch_execute("LOCK TABLE crm.outbox IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let run = db.run(&["backlog", "--lock-timeout", "100ms"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("backlog: another session holds a lock on a table the report reads"),
        "{}",
        run.stderr
    );
    // The holder is named, as explain names a row lock's.
    assert!(
        run.stderr.contains(&format!(
            "held by PID {pid} (user {}, application nightly-migration, AccessExclusiveLock on crm.outbox",
            db.user()
        )),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty());
    tx.rollback().unwrap();
}

#[test]
fn backlog_queries_use_the_partial_indexes_with_much_history() {
    let db = TestDb::new();
    let mut c = db.client();
    // Much history, a little active work, a few poison rows, a long published outbox.
    seed_history(&mut c, 30_000, -99);
    c.batch_execute(
        "INSERT INTO crm.booking_expiration_poison
                (booking_id, tenant_id, phase, reason, error, attempts, first_seen_at,
                 last_seen_at, retry_at, booking_version, booking_status)
         SELECT id, tenant_id, 'Reserve', 'database', 'x', 1, now(), now(),
                now() + interval '1 hour', version, status
           FROM crm.bookings WHERE status = 'Reserved' ORDER BY reserve_expires_at LIMIT 20;
         INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                 occurred_at, published_at, failed_at)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text,
                CASE WHEN i % 10 = 0 THEN 'pin.crm.deal-closed' ELSE 'pin.crm.booking-expired' END,
                't', '{}', now() - interval '1 day',
                CASE WHEN i > 60 THEN now() END, CASE WHEN i <= 10 THEN now() END
           FROM generate_series(1, 30000) i;
         ANALYZE crm.bookings;
         ANALYZE crm.outbox;
         ANALYZE crm.booking_expiration_poison;",
    )
    .unwrap();
    let now = chrono::Utc::now();
    let limit: Option<i64> = Some(200);
    let one: Option<i64> = Some(1);
    // The job's outbox types, bound as backlog binds them: a filter on the same indexes.
    let own = booking_expire_domain::OutboxTypes::default();
    let types = own.as_slice();
    let no_topic: Vec<String> = Vec::new();
    let a_topic = vec!["pin.crm.booking-expired.v9".to_owned()];
    let cases: Vec<(String, &str, Vec<&(dyn postgres::types::ToSql + Sync)>)> = vec![
        (
            overdue_sql(Phase::Reserve),
            "ix_bookings_reserve_expires_at",
            vec![&now],
        ),
        (
            overdue_sql(Phase::Booking),
            "ix_bookings_booking_expires_at",
            vec![&now],
        ),
        (poison_sql(), "bookings_pkey", vec![]),
        (
            OUTBOX_PENDING_SQL.to_owned(),
            "ix_outbox_pending",
            vec![&types],
        ),
        (
            OUTBOX_FAILED_SQL.to_owned(),
            "ix_outbox_failed",
            vec![&types],
        ),
        (
            OUTBOX_WAITING_FOR_TOPIC_SQL.to_owned(),
            "ix_outbox_backing_off",
            vec![&booking_expire_store::WAITING_FOR_TOPIC, &types, &no_topic],
        ),
        // The pending rows of a topic that waits for its topic: the pending index.
        (
            OUTBOX_WAITING_FOR_TOPIC_SQL.to_owned(),
            "ix_outbox_pending",
            vec![&booking_expire_store::WAITING_FOR_TOPIC, &types, &a_topic],
        ),
        // The other producers' rows, apart: both partial indexes, one count each.
        (
            OUTBOX_OTHERS_SQL.to_owned(),
            "ix_outbox_pending",
            vec![&types],
        ),
        (
            OUTBOX_OTHERS_SQL.to_owned(),
            "ix_outbox_failed",
            vec![&types],
        ),
        // dry-run's list of quarantined rows.
        (
            quarantined_sql(Phase::Reserve),
            "bookings_pkey",
            vec![&now, &limit],
        ),
        // backlog's next claim per phase: the claim's query, one row.
        (
            candidates_sql(Phase::Reserve),
            "ix_bookings_reserve_expires_at",
            vec![&now, &one],
        ),
        (
            candidates_sql(Phase::Booking),
            "ix_bookings_booking_expires_at",
            vec![&now, &one],
        ),
    ];
    for (sql, index, params) in &cases {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
                .unwrap();
            let plan: String = c
                .query(&format!("EXPLAIN {sql}"), params)
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(plan.contains(index), "{mode}, no {index}:\n{sql}\n{plan}");
            for table in ["bookings", "outbox"] {
                assert!(
                    !plan.contains(&format!("Seq Scan on {table}")),
                    "{mode}:\n{sql}\n{plan}"
                );
            }
        }
    }
}

#[test]
fn both_reports_work_under_a_read_only_role() {
    let db = TestDb::new();
    let mut c = db.client();
    let mix = seed_mix(&mut c);
    let before = checksum(&mut c);
    let role = ReadOnlyRole::new(&db);
    let as_role = |args: &[&str]| {
        let mut cmd = db.command(args);
        cmd.env("DATABASE_URL", &role.url);
        Run::of(cmd.output().unwrap())
    };

    let run = as_role(&["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = &json_lines(&run.stdout)[0];
    assert_eq!(report["OverdueTotal"], 7);
    assert_eq!(report["Poison"], 2);
    assert_eq!(report["Outbox"]["Pending"], 3);
    assert_eq!(report["Outbox"]["Failed"], 2);
    assert_eq!(
        report["Reserve"]["OldestDeadline"],
        rfc3339(mix.oldest_reserve)
    );
    let run = as_role(&["backlog", "--format", "prometheus"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    let run = as_role(&["dry-run", "--as-of", "now", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = json_lines(&run.stdout);
    let summary = &lines.last().unwrap()["Summary"];
    assert_eq!(
        summary["Reserve"],
        json!({"WouldExpire": 3, "Rejected": 0, "Quarantined": 1, "LeftForLaterCycles": 0})
    );
    assert_eq!(
        summary["Booking"],
        json!({"WouldExpire": 2, "Rejected": 0, "Quarantined": 1, "LeftForLaterCycles": 0})
    );
    assert_eq!(lines.len(), 3 + 2 + 2 + 1);
    let run = as_role(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // The role really cannot write: not by default, and not when it asks to.
    {
        let mut ro = postgres::Client::connect(&role.url, postgres::NoTls).unwrap();
        let update = "UPDATE crm.bookings SET version = version + 1";
        let err = ro.batch_execute(update).unwrap_err();
        assert_eq!(
            err.code(),
            Some(&SqlState::READ_ONLY_SQL_TRANSACTION),
            "{err}"
        );
        ro.batch_execute("SET default_transaction_read_only = off")
            .unwrap();
        let err = ro.batch_execute(update).unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{err}");
    }
    assert_eq!(checksum(&mut c), before);
}

/// The table on the demo's data (scripts/demo-seed.sql), after a cycle that quarantines
/// one booking and with relay-outbox paused for a long reason: every line fits 120
/// columns (terminal columns, not bytes), the reason is wrapped, not cut, and the command
/// that ends the pause is whole on one line.
#[test]
fn the_table_fits_120_columns_on_the_demo_seed() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_demo(&mut c);
    let before = db.run(&["backlog"]);
    assert_eq!(before.code, 0, "{}", before.stderr);
    assert!(
        before.stdout.contains(
            "\nnext Reserve claim, 2h 0m 0s late: booking-expire explain \
             b1000001-0000-4000-8000-000000000000\n"
        ),
        "{}",
        before.stdout
    );
    break_demo_booking(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (6, 1, 0, 1));
    let reason = "Kafka incident INC-42: the brokers of the second rack are being replaced; \
                  resume once the partition reassignment has finished and the ISR is whole again";
    let paused = db.run(&[
        "pause",
        "relay-outbox",
        "--reason",
        reason,
        "--actor",
        "alice",
    ]);
    assert_eq!(paused.code, 0, "{}", paused.stderr);
    let run = db.run(&["backlog"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_fits_120(&before.stdout);
    assert_fits_120(&run.stdout);
    let words = run.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains(&format!(": {reason}")), "{}", run.stdout);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.ends_with("(booking-expire resume relay-outbox)")),
        "{}",
        run.stdout
    );
}

/// A pause's actor (the login, from `USER`) and reason are the operator's text: the
/// table writes their control characters as visible escapes; the JSON keeps the exact
/// values, as JSON escapes (C1 and the bidirectional controls too).
#[test]
fn paused_by_and_reason_cannot_steer_the_terminal() {
    let db = TestDb::new();
    let login = "evil\u{1b}]0;title\u{7}";
    let reason = "INC-7\u{1b}[2J\u{9b}31m\n\u{202e}gpj.exe";
    let run = Run::of(
        db.command(&["pause", "relay-outbox", "--reason", reason])
            .env("USER", login)
            .output()
            .expect("run the binary"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut c = db.client();
    let since: DateTime<Utc> = c
        .query_one("SELECT paused_at FROM crm.booking_expiration_pause", &[])
        .unwrap()
        .get(0);
    let since = since.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let me = db.user();

    let run = db.run(&["backlog"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let bad: Vec<char> = run
        .stdout
        .chars()
        .filter(|&c| c != '\n' && booking_expire::testing::render::is_control(c))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in:\n{}", run.stdout);
    let said: Vec<&str> = run
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("relay-outbox is paused since"))
        .take(2)
        .collect();
    assert_eq!(
        said,
        [
            format!(
                "relay-outbox is paused since {since} by evil\\u{{1b}}]0;title\\u{{7}} (database user {me}):"
            ),
            "  INC-7\\u{1b}[2J\\u{9b}31m \\u{202e}gpj.exe (booking-expire resume relay-outbox)"
                .to_owned(),
        ],
        "{}",
        run.stdout
    );

    let run = db.run(&["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("\\u001b]0;title\\u0007")
            && run.stdout.contains("\\u009b31m\\n\\u202egpj"),
        "{}",
        run.stdout
    );
    assert!(
        !run.stdout
            .trim_end()
            .chars()
            .any(booking_expire::testing::render::is_control)
    );
    let v: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(v["Paused"][0]["Reason"], reason, "{v}");
    assert_eq!(
        v["Paused"][0]["By"],
        format!("{login} (database user {me})"),
        "{v}"
    );
}
