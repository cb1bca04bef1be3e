//! `dry-run --as-of T` against a real PostgreSQL: it lists what a cycle at T would
//! expire and publish, what the guard would refuse and what sits in quarantine, with
//! the same selection and decision as run-once, and never writes or waits on a lock.

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, BTreeSet};

use booking_expire::cli::{AsOf, parse_as_of};
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The lines of a `dry-run --json`, by kind.
#[derive(Debug)]
struct Lines {
    expiries: Vec<Value>,
    rejected: Vec<Value>,
    quarantined: Vec<Value>,
    summary: Value,
}

impl Lines {
    fn of(run: &Run) -> Self {
        assert_eq!(run.code, 0, "dry-run failed:\n{}", run.stderr);
        let mut all = json_lines(&run.stdout);
        let summary = all.pop().expect("a summary line")["Summary"].clone();
        assert!(summary.is_object(), "the last line is the summary");
        let mut lines = Lines {
            expiries: Vec::new(),
            rejected: Vec::new(),
            quarantined: Vec::new(),
            summary,
        };
        for line in all {
            if line.get("Event").is_some() {
                lines.expiries.push(line);
            } else if line.get("Rejected").is_some() {
                lines.rejected.push(line);
            } else if line.get("Quarantined").is_some() {
                lines.quarantined.push(line);
            } else {
                panic!("unknown line {line}");
            }
        }
        lines
    }

    /// BookingIds of the expiries of a phase, in output (= claim) order.
    fn expiring(&self, phase: &str) -> Vec<Uuid> {
        ids(&self.expiries, phase)
    }

    /// (WouldExpire, Rejected, Quarantined, LeftForLaterCycles) of a phase.
    fn counts(&self, phase: &str) -> (u64, u64, u64, u64) {
        let s = &self.summary[phase];
        let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
        (
            n("WouldExpire"),
            n("Rejected"),
            n("Quarantined"),
            n("LeftForLaterCycles"),
        )
    }
}

fn ids(lines: &[Value], phase: &str) -> Vec<Uuid> {
    lines
        .iter()
        .filter(|l| l["Phase"] == phase)
        .map(|l| l["BookingId"].as_str().unwrap().parse().unwrap())
        .collect()
}

fn dry_run(db: &TestDb, as_of: &str, extra: &[&str]) -> Lines {
    let mut args = vec!["dry-run", "--as-of", as_of, "--json"];
    args.extend_from_slice(extra);
    Lines::of(&db.run(&args))
}

/// Sets a booking's deadline of a phase to an exact moment.
fn set_deadline(c: &mut postgres::Client, id: Uuid, column: &str, at: DateTime<Utc>) {
    c.execute(
        &format!("UPDATE crm.bookings SET {column} = $2 WHERE id = $1"),
        &[&id, &at],
    )
    .unwrap();
}

fn deadline(c: &mut postgres::Client, id: Uuid, column: &str) -> DateTime<Utc> {
    c.query_one(
        &format!("SELECT {column} FROM crm.bookings WHERE id = $1"),
        &[&id],
    )
    .unwrap()
    .get(0)
}

#[test]
fn dry_run_writes_nothing_in_any_table() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(
        &mut c,
        &[
            Seed::reserved(-300),
            Seed::new("AwaitingPayment", Some(-200), None),
            Seed::reserved(-100),
            Seed::booked(-400),
            Seed::booked(-50),
            Seed::reserved(3600),
            Seed::new("Cancelled", Some(-3600), None),
            Seed::new("BookingExpired", Some(-9000), Some(-3600)),
        ],
    );
    let mut inconsistent = Seed::booked(-500);
    inconsistent.expired_at_set = true;
    let poison = Seed::reserved(-600);
    seed(&mut c, &[inconsistent, poison.clone()]);
    put_in_quarantine(&mut c, &poison, "Reserve", "database", 1, 600);
    insert_outbox_rows(&mut c, OutboxState::Pending, &[30, 20]);
    insert_outbox_rows(&mut c, OutboxState::Published, &[900]);
    let before = checksum(&mut c);

    let later = at(Utc::now() + Duration::days(30));
    for (args, listed) in [
        (
            &["dry-run", "--as-of", "now"][..],
            "Reserve: 3 would expire",
        ),
        (
            &["dry-run", "--as-of", "now", "--all"],
            "Reserve: 3 would expire",
        ),
        (
            &["dry-run", "--as-of", &later, "--all"],
            "Reserve: 5 would expire",
        ),
    ] {
        let run = db.run(args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        assert!(run.stdout.contains(listed), "{args:?}: {}", run.stdout);
    }
    let now = dry_run(&db, "now", &[]);
    assert_eq!(now.counts("Reserve"), (3, 0, 1, 0));
    assert_eq!(now.counts("Booking"), (2, 1, 0, 0));
    // Thirty days on the future rows are due too, and the quarantine has ended.
    let then = dry_run(&db, &later, &["--all"]);
    assert_eq!(then.counts("Reserve"), (5, 0, 0, 0));
    assert_eq!(then.counts("Booking"), (2, 1, 0, 0));

    assert_eq!(checksum(&mut c), before, "dry-run must write nothing");
}

#[test]
fn at_the_same_as_of_it_lists_exactly_what_run_once_expires() {
    let db = TestDb::new();
    let mut c = db.client();
    // The oldest reserve row is guard poison; then 6 healthy reserve rows, 4 booking
    // rows, and rows that must not move.
    let mut inconsistent = Seed::reserved(-1_000);
    inconsistent.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&inconsistent));
    seed_many(&mut c, 6, |i| {
        if i == 2 {
            Seed::new("AwaitingPayment", Some(-900 + 100 * i as i64), None)
        } else {
            Seed::reserved(-900 + 100 * i as i64)
        }
    });
    seed_many(&mut c, 4, |i| Seed::booked(-800 + 100 * i as i64));
    seed(
        &mut c,
        &[
            Seed::reserved(3_600),
            Seed::booked(3_600),
            Seed::new("Completed", Some(-9_000), Some(-3_600)),
        ],
    );
    drop(c);
    let twin = db.copy();

    // Two batches of two per phase: run-once claims 4 reserve rows (the poison one and
    // the three oldest healthy ones) and all 4 booking rows.
    let limits = ["--batch-size", "2", "--max-batches", "2"];
    let result = db.run_once(&limits);
    assert_eq!(result.counts(), (3, 4, 0, 1));
    let plan = dry_run(&twin, &at(result.as_of), &limits);

    let mut c = db.client();
    let outbox: BTreeMap<Uuid, (Value, Value)> = c
        .query(
            "SELECT aggregateid::uuid, payload, headers FROM crm.outbox",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let listed: BTreeSet<Uuid> = plan
        .expiries
        .iter()
        .map(|l| l["BookingId"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        listed,
        outbox.keys().copied().collect::<BTreeSet<_>>(),
        "dry-run lists exactly the bookings run-once expired"
    );
    assert_eq!(plan.expiries.len(), 7);
    let audit: BTreeMap<Uuid, (String, String)> = c
        .query(
            "SELECT booking_id, from_status, to_status FROM crm.booking_audit",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for line in &plan.expiries {
        let id: Uuid = line["BookingId"].as_str().unwrap().parse().unwrap();
        let (payload, headers) = &outbox[&id];
        assert_eq!(&line["Event"], payload, "the exact event payload of {id}");
        assert_eq!(line["Topic"], "pin.crm.booking-expired.v1");
        // Every header but the ones that identify the message and the run.
        let without_ids = |h: &Value| {
            let mut h = h.as_object().unwrap().clone();
            for k in ["ce_id", "ce_correlationid", "traceparent"] {
                assert!(h.remove(k).is_some(), "{k} missing");
            }
            h
        };
        assert_eq!(without_ids(&line["Headers"]), without_ids(headers));
        assert_eq!(line["Headers"]["ce_correlationid"], plan.summary["RunId"]);
        let (from, to) = &audit[&id];
        assert_eq!((&line["From"], &line["To"]), (&json!(from), &json!(to)));
    }
    // The guard's refusal is the one run-once quarantined.
    let poison: Vec<(Uuid, String)> = c
        .query(
            "SELECT booking_id, reason FROM crm.booking_expiration_poison",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        poison,
        [(inconsistent.id, "expired_at_already_set".to_owned())]
    );
    assert_eq!(ids(&plan.rejected, "Reserve"), [inconsistent.id]);
    assert_eq!(plan.rejected[0]["Rejected"], "expired_at_already_set");
    // What one cycle leaves is exactly what is still overdue after it.
    assert_eq!(plan.counts("Reserve"), (3, 1, 0, 3));
    assert_eq!(plan.counts("Booking"), (4, 0, 0, 0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status IN ('Reserved', 'AwaitingPayment')
                AND reserve_expires_at < now() AND expired_at IS NULL"
        ),
        3
    );
    assert_eq!(plan.summary["AsOf"], at(result.as_of));
    assert_eq!(plan.summary["PerPhaseLimit"], 4);
}

#[test]
fn a_deadline_equal_to_as_of_is_not_due() {
    let db = TestDb::new();
    let mut c = db.client();
    let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let us = Duration::microseconds(1);
    let reserve = seed_many(&mut c, 3, |_| Seed::reserved(0));
    let booking = seed_many(&mut c, 3, |_| Seed::booked(0));
    for (i, offset) in [-us, Duration::zero(), us].into_iter().enumerate() {
        set_deadline(&mut c, reserve[i], "reserve_expires_at", t + offset);
        set_deadline(&mut c, booking[i], "booking_expires_at", t + offset);
    }

    let exactly = dry_run(&db, "2030-01-01T00:00:00Z", &[]);
    assert_eq!(exactly.expiring("Reserve"), [reserve[0]]);
    assert_eq!(exactly.expiring("Booking"), [booking[0]]);
    assert_eq!(exactly.expiries[0]["OverdueBySeconds"], 0.000001);
    // The same instant written with another offset.
    let in_moscow = dry_run(&db, "2030-01-01T03:00:00+03:00", &[]);
    assert_eq!(in_moscow.expiring("Reserve"), [reserve[0]]);
    assert_eq!(in_moscow.expiring("Booking"), [booking[0]]);
    assert_eq!(in_moscow.summary["AsOf"], "2030-01-01T00:00:00.000000Z");
    // One microsecond later the equal deadline has passed.
    let after = dry_run(&db, "2030-01-01T00:00:00.000001Z", &[]);
    assert_eq!(after.expiring("Reserve"), [reserve[0], reserve[1]]);
    assert_eq!(after.expiring("Booking"), [booking[0], booking[1]]);
    for lines in [&exactly, &in_moscow, &after] {
        assert!(lines.rejected.is_empty() && lines.quarantined.is_empty());
    }
}

#[test]
fn a_future_as_of_lists_future_expiries() {
    let db = TestDb::new();
    let mut c = db.client();
    let in_1h = Seed::reserved(3_600);
    let in_2h = Seed::new("AwaitingPayment", Some(7_200), None);
    let in_3h = Seed::reserved(10_800);
    let booked_in_90m = Seed::booked(5_400);
    seed(
        &mut c,
        &[
            in_3h.clone(),
            in_1h.clone(),
            booked_in_90m.clone(),
            in_2h.clone(),
        ],
    );

    let now = dry_run(&db, "now", &[]);
    assert!(now.expiries.is_empty(), "{:?}", now.expiries);
    assert_eq!(now.counts("Reserve"), (0, 0, 0, 0));
    assert_eq!(now.counts("Booking"), (0, 0, 0, 0));

    let t = Utc::now() + Duration::minutes(150);
    let later = dry_run(&db, &at(t), &[]);
    assert_eq!(later.expiring("Reserve"), [in_1h.id, in_2h.id]);
    assert_eq!(later.expiring("Booking"), [booked_in_90m.id]);
    let t = DateTime::parse_from_rfc3339(&at(t))
        .unwrap()
        .with_timezone(&Utc);
    for line in &later.expiries {
        let id: Uuid = line["BookingId"].as_str().unwrap().parse().unwrap();
        let column = if line["Phase"] == "Reserve" {
            "reserve_expires_at"
        } else {
            "booking_expires_at"
        };
        let due = deadline(&mut c, id, column);
        assert_eq!(line["Deadline"], at(due));
        let overdue = (t - due).num_microseconds().unwrap() as f64 / 1e6;
        assert_eq!(line["OverdueBySeconds"], overdue);
        // The event carries the AsOf the cycle would run at.
        assert_eq!(line["Event"]["ExpiredAt"], at(t));
    }
    assert_eq!(
        later.expiries[1]["From"], "AwaitingPayment",
        "{:?}",
        later.expiries
    );
    assert_eq!(later.expiries[1]["To"], "ReserveExpired");
    assert_eq!(later.expiries[2]["From"], "Booked");
    assert_eq!(later.expiries[2]["To"], "BookingExpired");
}

#[test]
fn guard_rejected_rows_are_shown_with_their_reason() {
    let db = TestDb::new();
    let mut c = db.client();
    let healthy = Seed::reserved(-60);
    let mut inconsistent = Seed::reserved(-120);
    inconsistent.expired_at_set = true;
    let mut worn_out = Seed::booked(-60);
    worn_out.version = i32::MAX;
    seed(
        &mut c,
        &[healthy.clone(), inconsistent.clone(), worn_out.clone()],
    );

    let lines = dry_run(&db, "now", &[]);
    assert_eq!(lines.expiring("Reserve"), [healthy.id]);
    assert_eq!(lines.expiring("Booking"), Vec::<Uuid>::new());
    let rejected: BTreeMap<Uuid, (Value, Value)> = lines
        .rejected
        .iter()
        .map(|l| {
            (
                l["BookingId"].as_str().unwrap().parse().unwrap(),
                (l["Rejected"].clone(), l["Status"].clone()),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        BTreeMap::from([
            (
                inconsistent.id,
                (json!("expired_at_already_set"), json!("Reserved"))
            ),
            (worn_out.id, (json!("version_overflow"), json!("Booked"))),
        ])
    );
    let overflow = lines
        .rejected
        .iter()
        .find(|l| l["Rejected"] == "version_overflow")
        .unwrap();
    assert_eq!(overflow["Error"], "version cannot be incremented");
    assert_eq!(overflow["Phase"], "Booking");
    assert_eq!(lines.counts("Reserve"), (1, 1, 0, 0));
    assert_eq!(lines.counts("Booking"), (0, 1, 0, 0));

    // The table shows each refused row with its reason and error on the line under
    // it, under its own heading; ids by their first eight characters, so every line
    // fits 120 columns.
    let run = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let row_at = |id: Uuid| {
        let short = &id.to_string()[..8];
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{short}  ")))
            .unwrap_or_else(|| panic!("{id} not listed:\n{}", run.stdout))
    };
    let row_of = |id: Uuid| lines[row_at(id)].to_owned();
    let under = |id: Uuid| lines[row_at(id) + 1].to_owned();
    assert!(
        !run.stdout.contains(&healthy.id.to_string()),
        "{}",
        run.stdout
    );
    assert_fits_120(&run.stdout);
    // Report commands log warnings only, unless asked: the table stands alone.
    assert!(!run.stderr.contains(" INFO "), "{}", run.stderr);
    assert!(row_of(inconsistent.id).contains("  Reserved  "));
    assert!(
        under(inconsistent.id)
            .starts_with("  ↳ expired_at_already_set: active booking already has expired_at ")
    );
    assert_eq!(
        under(worn_out.id),
        "  ↳ version_overflow: version cannot be incremented"
    );
    assert!(row_of(healthy.id).contains("  Reserved → ReserveExpired  "));
    for heading in [
        "Reserve phase: would expire",
        "Reserve phase: the guard would reject (run-once quarantines these)",
        "Booking phase: nothing would expire",
        "Booking phase: the guard would reject (run-once quarantines these)",
    ] {
        assert!(
            run.stdout.lines().any(|l| l == heading),
            "{heading}:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains(
        "\nReserve: 1 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));
    assert!(run.stdout.contains(
        "\nBooking: 0 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));
}

#[test]
fn quarantined_overdue_rows_are_listed_apart_until_their_retry_at() {
    let db = TestDb::new();
    let mut c = db.client();
    let quarantined = Seed::reserved(-600);
    let healthy = Seed::reserved(-60);
    // Poison whose booking is not due at all: nothing to show.
    let not_due = Seed::booked(3_600);
    seed(
        &mut c,
        &[quarantined.clone(), healthy.clone(), not_due.clone()],
    );
    put_in_quarantine(&mut c, &quarantined, "Reserve", "database", 2, 600);
    put_in_quarantine(&mut c, &not_due, "Booking", "database", 1, 600);
    let retry_at: DateTime<Utc> = c
        .query_one(
            "SELECT retry_at FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&quarantined.id],
        )
        .unwrap()
        .get(0);

    let now = dry_run(&db, "now", &[]);
    assert_eq!(now.expiring("Reserve"), [healthy.id]);
    assert_eq!(ids(&now.quarantined, "Reserve"), [quarantined.id]);
    assert_eq!(now.quarantined.len(), 1);
    assert_eq!(
        now.quarantined[0]["Quarantined"],
        json!({"Reason": "database", "Error": "seeded by a test", "Attempts": 2,
               "RetryAt": at(retry_at)})
    );
    assert_eq!(now.counts("Reserve"), (1, 0, 1, 0));
    assert_eq!(now.counts("Booking"), (0, 0, 0, 0));

    // --wide shows full ids; --verbose logs the progress again.
    let run = db.run(&["dry-run", "--as-of", "now", "--wide", "--verbose"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("dry run started"), "{}", run.stderr);
    assert!(
        run.stdout.lines().any(|l| l
            == "Reserve phase: overdue but in quarantine as poison (not claimed before RetryAt)"),
        "{}",
        run.stdout
    );
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with(&quarantined.id.to_string()))
        .unwrap();
    assert!(line.contains("  database  2  "), "{line}");

    // Past its retry_at the row is a candidate again, oldest first.
    let after = dry_run(&db, &at(retry_at + Duration::seconds(1)), &[]);
    assert_eq!(after.expiring("Reserve"), [quarantined.id, healthy.id]);
    assert!(after.quarantined.is_empty());
}

#[test]
fn one_cycle_takes_batch_size_times_max_batches_and_all_lists_every_candidate() {
    let db = TestDb::new();
    let mut c = db.client();
    let overdue = seed_many(&mut c, 7, |i| Seed::reserved(-1_000 + 10 * i as i64));

    let cycle = dry_run(&db, "now", &["--batch-size", "2", "--max-batches", "2"]);
    assert_eq!(cycle.expiring("Reserve"), overdue[..4]);
    assert_eq!(cycle.counts("Reserve"), (4, 0, 0, 3));
    assert_eq!(cycle.summary["All"], false);
    assert_eq!(cycle.summary["PerPhaseLimit"], 4);

    // The deployment's environment sets the same limits for dry-run as for run-once.
    let mut cmd = db.command(&["dry-run", "--as-of", "now", "--json"]);
    cmd.env("BOOKING_EXPIRATION_BATCH_SIZE", "3");
    let from_env = Lines::of(&Run::of(cmd.output().unwrap()));
    assert_eq!(from_env.expiring("Reserve"), overdue[..3]);
    assert_eq!(from_env.counts("Reserve"), (3, 0, 0, 4));

    let all = dry_run(&db, "now", &["--batch-size", "2", "--all"]);
    assert_eq!(all.expiring("Reserve"), overdue);
    assert_eq!(all.counts("Reserve"), (7, 0, 0, 0));
    assert_eq!(all.summary["All"], true);
    assert_eq!(all.summary["PerPhaseLimit"], Value::Null);

    let run = db.run(&[
        "dry-run",
        "--as-of",
        "now",
        "--batch-size",
        "2",
        "--max-batches",
        "2",
    ]);
    assert!(
        run.stdout
            .contains("one cycle, up to 4 candidates per phase (--batch-size 2 × --max-batches 2)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("Reserve: 4 would expire, 0 rejected by the guard, 0 in quarantine, 3 left for later cycles"),
        "{}",
        run.stdout
    );
}

#[test]
fn it_does_not_wait_on_rows_another_session_holds_locked() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 3, |i| Seed::booked(-300 + i as i64));
    // A manager's command holds the rows (one with an uncommitted extension).
    let mut manager = db.client();
    let mut tx = manager.transaction().unwrap();
    let locked = tx
        .query(
            "SELECT id FROM crm.bookings WHERE status = 'Booked' FOR UPDATE",
            &[],
        )
        .unwrap();
    assert_eq!(locked.len(), 3);
    tx.execute(
        "UPDATE crm.bookings SET booking_expires_at = now() + interval '1 day' WHERE id = $1",
        &[&ids[0]],
    )
    .unwrap();

    let lines = dry_run(&db, "now", &["--lock-timeout", "1s"]);
    // It lists the committed state; run-once would skip these rows while they are held.
    assert_eq!(lines.expiring("Booking"), ids);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 3, 0));
    tx.rollback().unwrap();
}

#[test]
fn a_table_lock_fails_fast_with_a_clear_temporary_error() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60)]);
    // A migration holds the table.
    let mut migration = db.client();
    let mut tx = migration.transaction().unwrap();
    tx.batch_execute("LOCK TABLE crm.bookings IN ACCESS EXCLUSIVE MODE")
        .unwrap();

    let run = db.run(&["dry-run", "--as-of", "now", "--lock-timeout", "100ms"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("dry-run: another session holds a lock on a table the report reads"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--lock-timeout"), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    tx.rollback().unwrap();
}

#[test]
fn bad_as_of_values_exit_64_with_a_clear_message_and_touch_nothing() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60)]);
    let before = checksum(&mut c);
    let example = "e.g. 2026-11-29T18:00:00Z or 2026-11-29T21:00:00+03:00, or now";
    let cases: &[(&str, &str)] = &[
        ("yesterday", "'yesterday'"),
        ("2026-13-01T00:00:00Z", "a field is out of range"),
        ("2026-02-30T00:00:00Z", "a field is out of range"),
        ("2026-11-29T18:00:00", "it has no UTC offset"),
        ("2026-11-29 18:00:00", "it has no UTC offset"),
        ("2026-11-29", "'2026-11-29'"),
        ("", "it is empty"),
        ("NOW", "'NOW'"),
        ("1764439200", "'1764439200'"),
    ];
    for (value, needle) in cases {
        let run = db.run(&["dry-run", "--as-of", value]);
        assert_eq!(run.code, 64, "{value:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("invalid value '{value}' for '--as-of <T>'")),
            "{value:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(needle), "{value:?}: {}", run.stderr);
        assert!(run.stderr.contains(example), "{value:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let missing = db.run(&["dry-run"]);
    assert_eq!(missing.code, 64);
    assert!(missing.stderr.contains("--as-of <T>"), "{}", missing.stderr);
    assert_eq!(checksum(&mut c), before);
}

#[test]
fn as_of_parses_rfc_3339_with_any_offset_or_now() {
    let t = Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap();
    assert_eq!(parse_as_of("now"), Ok(AsOf::Now));
    assert_eq!(parse_as_of("2026-11-29T18:00:00Z"), Ok(AsOf::At(t)));
    assert_eq!(parse_as_of("2026-11-29T21:00:00+03:00"), Ok(AsOf::At(t)));
    assert_eq!(parse_as_of("2026-11-29T13:00:00-05:00"), Ok(AsOf::At(t)));
    // PostgreSQL's precision: microseconds kept, nanoseconds dropped.
    assert_eq!(
        parse_as_of("2026-11-29T18:00:00.123456789Z"),
        Ok(AsOf::At(t + Duration::microseconds(123_456)))
    );
    assert!(parse_as_of("2026-11-29T18:00:00").is_err());
}

#[test]
fn infrastructure_failures_keep_their_exit_codes() {
    let empty = TestDb::empty();
    let run = empty.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("schema not migrated: missing table crm.bookings"),
        "{}",
        run.stderr
    );
    let mut cmd = empty.command(&["dry-run", "--as-of", "now", "--connect-timeout", "1s"]);
    cmd.env("DATABASE_URL", "postgres://u@127.0.0.1:1/db");
    let run = Run::of(cmd.output().unwrap());
    assert_eq!(run.code, 69, "{}", run.stderr);
    let run = empty.run(&["dry-run", "--as-of", "now", "--batch-size", "0"]);
    assert_eq!(run.code, 64, "{}", run.stderr);

    let help = empty.run(&["dry-run", "--help"]);
    assert_eq!(help.code, 0);
    for needle in ["--as-of <T>", "ce_id", "  64 ", "  75 "] {
        assert!(help.stdout.contains(needle), "{needle}:\n{}", help.stdout);
    }
}

#[test]
fn the_default_table_fits_120_columns_and_wide_shows_everything_in_full() {
    let db = TestDb::new();
    let mut c = db.client();
    // The widest of each kind: the longest transition, over a year overdue; a Booking
    // expiry; a refusal by the guard; a quarantined row with a long, two-line error.
    let reserve = Seed::new("AwaitingPayment", Some(-400 * 86_400 - 3_599), None);
    let booking = Seed::booked(-600);
    let mut rejected = Seed::booked(-300);
    rejected.expired_at_set = true;
    let quarantined = Seed::new("AwaitingPayment", Some(-366 * 86_400), None);
    seed(
        &mut c,
        &[
            reserve.clone(),
            booking.clone(),
            rejected.clone(),
            quarantined.clone(),
        ],
    );
    put_in_quarantine(&mut c, &quarantined, "Reserve", "database", 12, 600);
    let error = format!(
        "duplicate key value violates unique constraint \"ux_outbox_event\"\nDETAIL: {}",
        "Key (aggregateid)=(b1000004) already exists. ".repeat(5)
    );
    c.execute(
        "UPDATE crm.booking_expiration_poison SET error = $2 WHERE booking_id = $1",
        &[&quarantined.id, &error],
    )
    .unwrap();
    let one_line = error.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(one_line.chars().count() > 200);

    let run = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_fits_120(&run.stdout);
    let all = [&reserve, &booking, &rejected, &quarantined];
    for s in all {
        for id in [s.id, s.tenant_id, s.deal_id] {
            assert!(!run.stdout.contains(&id.to_string()), "{}", run.stdout);
        }
    }
    let lines: Vec<&str> = run.stdout.lines().collect();
    // A row by its short id, and the line under it.
    let row = |s: &Seed| {
        let short = &s.id.to_string()[..8];
        let i = lines
            .iter()
            .position(|l| l.starts_with(&format!("{short}  ")))
            .unwrap_or_else(|| panic!("{} not listed:\n{}", s.id, run.stdout));
        (lines[i], lines.get(i + 1).copied().unwrap_or_default())
    };
    let short = |id: Uuid| id.to_string()[..8].to_owned();
    let cells = |line: &str| {
        line.split("  ")
            .filter(|c| !c.is_empty())
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("|")
    };

    // Whole seconds, Z.
    let seconds = |column: &str, id: Uuid| {
        deadline(&mut db.client(), id, column).to_rfc3339_opts(SecondsFormat::Secs, true)
    };
    let (line, _) = row(&reserve);
    assert_eq!(
        cells(line),
        [
            short(reserve.id),
            short(reserve.tenant_id),
            short(reserve.deal_id),
            "AwaitingPayment → ReserveExpired".into(),
            seconds("reserve_expires_at", reserve.id),
        ]
        .join("|")
            + "|400d 0h 59m 59s",
        "{line}"
    );
    let (line, _) = row(&booking);
    assert!(line.contains("  Booked → BookingExpired  "), "{line}");
    assert!(line.ends_with("  10m 0s"), "{line}");

    let (line, under) = row(&rejected);
    assert_eq!(
        cells(line),
        [
            short(rejected.id),
            short(rejected.tenant_id),
            short(rejected.deal_id),
            "Booked".into(),
            seconds("booking_expires_at", rejected.id),
        ]
        .join("|"),
        "{line}"
    );
    assert!(
        under.starts_with("  ↳ expired_at_already_set: active booking already has expired_at ")
            && under.ends_with(" (inconsistent)"),
        "{under}"
    );

    let (line, under) = row(&quarantined);
    let retry_at: DateTime<Utc> = c
        .query_one(
            "SELECT retry_at FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&quarantined.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        cells(line),
        [
            short(quarantined.id),
            short(quarantined.tenant_id),
            short(quarantined.deal_id),
            "AwaitingPayment".into(),
            seconds("reserve_expires_at", quarantined.id),
            "366d 0h 0m 0s".into(),
            "12".into(),
            retry_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        ]
        .join("|"),
        "{line}"
    );
    // The error on one line, cut to fit.
    assert_eq!(under.chars().count(), 120, "{under}");
    assert_eq!(
        under,
        format!("  ↳ database: {one_line}")
            .chars()
            .take(119)
            .collect::<String>()
            .trim_end()
            .to_owned()
            + "…"
    );
    assert!(run.stdout.contains(
        "\nReserve: 1 would expire, 0 rejected by the guard, 1 in quarantine, 0 left for later cycles\n"
    ));
    assert!(run.stdout.contains(
        "\nBooking: 1 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));

    // --wide: every id, time and text in full, in columns.
    let wide = db.run(&["dry-run", "--as-of", "now", "--wide"]);
    assert_eq!(wide.code, 0, "{}", wide.stderr);
    for s in all {
        let line = wide
            .stdout
            .lines()
            .find(|l| l.starts_with(&s.id.to_string()))
            .unwrap_or_else(|| panic!("{} not listed:\n{}", s.id, wide.stdout));
        for id in [s.tenant_id, s.deal_id] {
            assert!(line.contains(&format!("  {id}  ")), "{line}");
        }
    }
    let line = |s: &Seed| {
        wide.stdout
            .lines()
            .find(|l| l.starts_with(&s.id.to_string()))
            .unwrap()
    };
    assert!(
        line(&rejected)
            .contains("  expired_at_already_set  active booking already has expired_at ")
            && line(&rejected).ends_with(" (inconsistent)"),
        "{}",
        line(&rejected)
    );
    assert!(
        line(&quarantined).contains(&format!(
            "  database  12        {}  {one_line}",
            at(retry_at)
        )),
        "{}",
        line(&quarantined)
    );
    let micros = at(deadline(&mut c, reserve.id, "reserve_expires_at"));
    assert!(
        line(&reserve).contains(&format!("  {micros}  ")),
        "{}",
        line(&reserve)
    );
    assert!(!wide.stdout.contains('…'), "{}", wide.stdout);
    assert!(
        wide.stdout.contains(" left for later cycles (AsOf "),
        "{}",
        wide.stdout
    );
}

#[test]
fn the_demo_seed_fits_120_columns() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_demo(&mut c);
    let first = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_fits_120(&first.stdout);
    assert!(
        first
            .stdout
            .contains("\nb1000003   11111111  d1000003  AwaitingPayment → ReserveExpired  "),
        "{}",
        first.stdout
    );

    // As in the worked example of docs/guides/operating.md: one booking made inconsistent, a cycle that
    // quarantines it, and a look ahead past its retry, when the guard refuses it again.
    break_demo_booking(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (6, 1, 0, 1));
    let quarantined = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(quarantined.code, 0, "{}", quarantined.stderr);
    assert_fits_120(&quarantined.stdout);
    assert!(
        quarantined
            .stdout
            .contains("\n  ↳ expired_at_already_set: active booking already has expired_at "),
        "{}",
        quarantined.stdout
    );
    let ahead = at(Utc::now() + Duration::minutes(65));
    let refused = db.run(&["dry-run", "--as-of", &ahead]);
    assert_eq!(refused.code, 0, "{}", refused.stderr);
    assert_fits_120(&refused.stdout);
    assert!(
        refused
            .stdout
            .contains("Booking phase: the guard would reject (run-once quarantines these)\n"),
        "{}",
        refused.stdout
    );
}
