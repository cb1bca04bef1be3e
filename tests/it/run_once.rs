//! `run-once` against a real PostgreSQL: the seeds' test table for the cycle.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn empty_batch_writes_nothing_at_all() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(
        &mut c,
        &[
            Seed::reserved(3600),
            Seed::booked(3600),
            Seed::new("Cancelled", Some(-3600), Some(-3600)),
            Seed::new("Completed", Some(-3600), Some(-3600)),
            Seed::new("ReserveExpired", Some(-3600), None),
        ],
    );
    let before = checksum(&mut c);
    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (0, 0, 0, 0));
    assert_eq!(
        checksum(&mut c),
        before,
        "an empty cycle must write nothing"
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.booking_audit"), 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 0);
}

#[test]
fn reserve_phase_expires_reserved_and_awaiting_payment() {
    let db = TestDb::new();
    let mut c = db.client();
    let reserved = Seed::reserved(-60);
    let awaiting = Seed::new("AwaitingPayment", Some(-30), None);
    seed(&mut c, &[reserved.clone(), awaiting.clone()]);

    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (2, 0, 0, 0));
    for (seeded, from) in [(&reserved, "Reserved"), (&awaiting, "AwaitingPayment")] {
        let b = booking(&mut c, seeded.id);
        assert_eq!(b.status, "ReserveExpired");
        assert_eq!(b.expired_at, Some(result.as_of));
        assert_eq!(b.updated_at, result.as_of);
        assert_eq!(b.version, 2);
        let audit = c
            .query_one(
                "SELECT from_status, to_status, version, actor, run_id, at, tenant_id
                   FROM crm.booking_audit WHERE booking_id = $1",
                &[&seeded.id],
            )
            .unwrap();
        assert_eq!(audit.get::<_, String>(0), from);
        assert_eq!(audit.get::<_, String>(1), "ReserveExpired");
        assert_eq!(audit.get::<_, i64>(2), 2);
        assert_eq!(audit.get::<_, String>(3), "system:booking-expiration");
        assert_eq!(audit.get::<_, uuid::Uuid>(4), result.run_id);
        assert_eq!(
            audit.get::<_, chrono::DateTime<chrono::Utc>>(5),
            result.as_of
        );
        assert_eq!(audit.get::<_, uuid::Uuid>(6), seeded.tenant_id);
        let timeline = c
            .query_one(
                "SELECT kind, deal_id, occurred_at, correlation_id FROM crm.deal_timeline
                  WHERE booking_id = $1",
                &[&seeded.id],
            )
            .unwrap();
        assert_eq!(timeline.get::<_, String>(0), "BookingReserveExpired");
        assert_eq!(timeline.get::<_, uuid::Uuid>(1), seeded.deal_id);
        assert_eq!(
            timeline.get::<_, chrono::DateTime<chrono::Utc>>(2),
            result.as_of
        );
        assert_eq!(timeline.get::<_, uuid::Uuid>(3), result.run_id);
    }
    let phases: Vec<String> = c
        .query("SELECT payload->>'Phase' FROM crm.outbox", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(phases, ["Reserve", "Reserve"]);
}

#[test]
fn booking_phase_expires_booked() {
    let db = TestDb::new();
    let mut c = db.client();
    let booked = Seed::booked(-1);
    seed(&mut c, std::slice::from_ref(&booked));
    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (0, 1, 0, 0));
    let b = booking(&mut c, booked.id);
    assert_eq!(
        (b.status.as_str(), b.expired_at, b.updated_at, b.version),
        ("BookingExpired", Some(result.as_of), result.as_of, 2)
    );
    let row = c
        .query_one(
            "SELECT payload->>'Phase', kind FROM crm.outbox o
               JOIN crm.deal_timeline t ON t.booking_id::text = o.aggregateid",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "Booking");
    assert_eq!(row.get::<_, String>(1), "BookingExpired");
}

#[test]
fn only_the_deadline_of_the_current_phase_counts() {
    let db = TestDb::new();
    let mut c = db.client();
    // Booked: reserve deadline passed, booking deadline not yet.
    let booked = Seed::new("Booked", Some(-3600), Some(3600));
    // The mirror: Reserved whose booking deadline passed but reserve deadline did not.
    let reserved = Seed::new("Reserved", Some(3600), Some(-3600));
    seed(&mut c, &[booked.clone(), reserved.clone()]);
    let before = checksum(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    assert_eq!(checksum(&mut c), before);
    assert_eq!(status_of(&mut c, booked.id), "Booked");
    assert_eq!(status_of(&mut c, reserved.id), "Reserved");
}

#[test]
fn terminal_and_future_rows_are_untouched_while_overdue_ones_expire() {
    let db = TestDb::new();
    let mut c = db.client();
    let untouched = [
        Seed::reserved(600),
        Seed::new("AwaitingPayment", Some(600), None),
        Seed::booked(600),
        Seed::new("ReserveExpired", Some(-600), None),
        Seed::new("BookingExpired", Some(-600), Some(-600)),
        Seed::new("Cancelled", Some(-600), Some(-600)),
        Seed::new("Completed", Some(-600), Some(-600)),
        // An active row with a NULL deadline is never selected.
        Seed::new("Booked", Some(-600), None),
    ];
    seed(&mut c, &untouched);
    let overdue = [Seed::reserved(-5), Seed::booked(-5)];
    seed(&mut c, &overdue);
    let before: Vec<Booking> = untouched.iter().map(|s| booking(&mut c, s.id)).collect();

    assert_eq!(db.run_once(&[]).counts(), (1, 1, 0, 0));
    let after: Vec<Booking> = untouched.iter().map(|s| booking(&mut c, s.id)).collect();
    assert_eq!(after, before);
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.outbox"),
        2,
        "events only for the two overdue bookings"
    );
}

#[test]
fn outbox_row_carries_exactly_the_contract_payload_and_headers() {
    let db = TestDb::new();
    let mut c = db.client();
    let s = Seed::new("AwaitingPayment", Some(-10), None);
    seed(&mut c, std::slice::from_ref(&s));
    let result = db.run_once(&[]);
    let row = c
        .query_one(
            "SELECT id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at,
                    published_at, attempts, last_error, failed_at
               FROM crm.outbox",
            &[],
        )
        .unwrap();
    let id: uuid::Uuid = row.get(0);
    assert_eq!(id.get_version_num(), 7, "MessageId is a UUIDv7");
    assert_eq!(row.get::<_, String>(1), "Booking");
    assert_eq!(row.get::<_, String>(2), s.id.to_string());
    assert_eq!(row.get::<_, String>(3), "pin.crm.booking-expired");
    assert_eq!(row.get::<_, String>(4), "pin.crm.booking-expired.v1");
    let b = booking(&mut c, s.id);
    let expired_at = b.expired_at.unwrap();
    let payload: serde_json::Value = row.get(5);
    assert_eq!(
        payload,
        json!({
            "BookingId": b.id.to_string(),
            "TenantId": b.tenant_id.to_string(),
            "DealId": b.deal_id.to_string(),
            "PropertyObjectId": b.property_object_id.to_string(),
            "Phase": "Reserve",
            "ExpiredAt": expired_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        })
    );
    let headers: serde_json::Value = row.get(6);
    assert_eq!(headers["ce_id"], json!(id.to_string()));
    assert_eq!(
        headers["ce_correlationid"],
        json!(result.run_id.to_string())
    );
    assert_eq!(headers["ce_subject"], json!(s.id.to_string()));
    assert_eq!(headers["ce_type"], json!("pin.crm.booking-expired"));
    assert_eq!(headers["ce_specversion"], json!("1.0"));
    assert_eq!(headers["ce_contractversion"], json!("1"));
    let traceparent = headers["traceparent"].as_str().unwrap();
    assert!(
        traceparent.starts_with(&format!("00-{}-", result.run_id.simple())),
        "{traceparent}"
    );
    assert_eq!(row.get::<_, chrono::DateTime<chrono::Utc>>(7), result.as_of);
    assert_eq!(row.get::<_, Option<chrono::DateTime<chrono::Utc>>>(8), None);
    assert_eq!(row.get::<_, i32>(9), 0);
    assert_eq!(row.get::<_, Option<String>>(10), None);
    assert_eq!(
        row.get::<_, Option<chrono::DateTime<chrono::Utc>>>(11),
        None
    );
}

#[test]
fn a_second_cycle_expires_nothing_and_writes_nothing() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 30, |i| {
        if i % 2 == 0 {
            Seed::reserved(-100)
        } else {
            Seed::booked(-100)
        }
    });
    assert_eq!(db.run_once(&[]).counts(), (15, 15, 0, 0));
    let after_first = checksum(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    assert_eq!(checksum(&mut c), after_first);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 30);
}

#[test]
fn version_rises_by_exactly_one() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut s = Seed::booked(-5);
    s.version = 41;
    seed(&mut c, std::slice::from_ref(&s));
    db.run_once(&[]);
    assert_eq!(booking(&mut c, s.id).version, 42);
}

#[test]
fn slo_a_deadline_expires_on_the_first_cycle_after_it() {
    let db = TestDb::new();
    let mut c = db.client();
    let s = Seed::reserved(2);
    seed(&mut c, std::slice::from_ref(&s));
    let deadline: chrono::DateTime<chrono::Utc> = c
        .query_one("SELECT reserve_expires_at FROM crm.bookings", &[])
        .unwrap()
        .get(0);
    let early = db.run_once(&[]);
    assert!(
        early.as_of <= deadline,
        "the first cycle ran before the deadline"
    );
    assert_eq!(early.counts(), (0, 0, 0, 0));
    assert_eq!(status_of(&mut c, s.id), "Reserved");

    wait_until(std::time::Duration::from_secs(10), "the deadline", || {
        chrono::Utc::now() > deadline
    });
    let on_time = db.run_once(&[]);
    assert!(on_time.as_of > deadline);
    assert_eq!(on_time.counts(), (1, 0, 0, 0));
    let b = booking(&mut c, s.id);
    assert_eq!(b.expired_at, Some(on_time.as_of));
    assert_eq!(b.updated_at, on_time.as_of);
    // The event was committed with the expiry, by the same run, at the same instant.
    let event = c
        .query_one(
            "SELECT occurred_at, headers->>'ce_correlationid' FROM crm.outbox WHERE aggregateid = $1",
            &[&s.id.to_string()],
        )
        .unwrap();
    assert_eq!(
        event.get::<_, chrono::DateTime<chrono::Utc>>(0),
        on_time.as_of
    );
    assert_eq!(event.get::<_, String>(1), on_time.run_id.to_string());
}

#[test]
fn batch_size_bounds_each_phase_and_max_batches_drains_oldest_first() {
    let db = TestDb::new();
    let mut c = db.client();
    // 25 reserve rows, deadlines 1..25 minutes ago.
    let ids = seed_many(&mut c, 25, |i| Seed::reserved(-60 * (i as i64 + 1)));
    let first = db.run_once(&["--batch-size", "10"]);
    assert_eq!(first.counts(), (10, 0, 0, 0));
    // The ten oldest went first.
    for (i, id) in ids.iter().enumerate() {
        let want = if i >= 15 {
            "ReserveExpired"
        } else {
            "Reserved"
        };
        assert_eq!(status_of(&mut c, *id), want, "row {i}");
    }
    let rest = db.run_once(&["--batch-size", "10", "--max-batches", "5"]);
    assert_eq!(rest.counts(), (15, 0, 0, 0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status = 'Reserved'"
        ),
        0
    );
}

#[test]
fn batch_size_from_the_environment() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 7, |_| Seed::booked(-60));
    let out = db
        .command(&["run-once"])
        .env("BOOKING_EXPIRATION_BATCH_SIZE", "3")
        .output()
        .unwrap();
    let run = Run::of(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (0, 3, 0, 0));
}

#[test]
fn json_logs_carry_the_run_id_on_every_line_and_the_spec_events() {
    let db = TestDb::new();
    let mut c = db.client();
    let s = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&s));
    let out = db
        .command(&["run-once"])
        .env("LOG_FORMAT", "json")
        .output()
        .unwrap();
    let run = Run::of(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.result();
    let lines: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert_eq!(line["RunId"], json!(result.run_id.to_string()), "{line}");
        assert!(line["ts"].is_string() && line["level"].is_string());
    }
    let msgs: Vec<&str> = lines.iter().map(|l| l["msg"].as_str().unwrap()).collect();
    for want in [
        "cycle started",
        "batch selected",
        "booking expired",
        "cycle completed",
    ] {
        assert!(msgs.contains(&want), "no {want:?} in {msgs:?}");
    }
    let expired = lines
        .iter()
        .find(|l| l["msg"] == "booking expired")
        .unwrap();
    assert_eq!(expired["BookingId"], json!(s.id.to_string()));
    assert_eq!(expired["DealId"], json!(s.deal_id.to_string()));
    assert_eq!(expired["TenantId"], json!(s.tenant_id.to_string()));
    assert_eq!(expired["Phase"], json!("Booking"));
    let completed = lines
        .iter()
        .find(|l| l["msg"] == "cycle completed")
        .unwrap();
    assert_eq!(completed["BookingExpiredCount"], json!(1));
    assert_eq!(completed["SkippedLockedCount"], json!(0));
    assert!(completed["DurationMs"].is_u64());
}

/// The `msg` and fields of each JSON log line of a run.
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")))
        .collect()
}

/// The log line of a cycle that goes on with the Booking phase on a second session.
const SECOND_SESSION: &str =
    "both phases have a backlog: the Booking phase goes on on a second session";

/// (Phase, Count) of each "batch selected" line, in the order logged.
fn selected_batches(lines: &[serde_json::Value]) -> Vec<(String, u64)> {
    lines
        .iter()
        .filter(|l| l["msg"] == "batch selected")
        .map(|l| {
            (
                l["Phase"].as_str().unwrap().to_owned(),
                l["Count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_backlog_in_one_phase_only_stays_on_one_session() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 12, |i| Seed::reserved(-600 + i as i64));
    let run = Run::of(
        db.command(&["run-once", "--batch-size", "5", "--max-batches", "100"])
            .env("LOG_FORMAT", "json")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (12, 0, 0, 0));
    let lines = json_lines(&run.stderr);
    assert_eq!(
        selected_batches(&lines),
        [
            ("Reserve".to_owned(), 5),
            ("Booking".to_owned(), 0),
            ("Reserve".to_owned(), 5),
            ("Reserve".to_owned(), 2),
        ]
    );
    assert!(
        !lines.iter().any(|l| l["msg"] == SECOND_SESSION),
        "{}",
        run.stderr
    );
}

#[test]
fn a_cycle_takes_batches_of_both_phases_in_turn_then_side_by_side_until_drained_or_max_batches() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 50, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600 + i as i64)
        } else {
            Seed::booked(-600 + i as i64)
        }
    });
    drop(c);
    let twin = db.copy();
    let mut c = db.client();

    // Up to 3 batches of 5 per phase: 15 + 15 of 25 + 25, the phases in turn.
    let capped = db.run_once(&["--batch-size", "5", "--max-batches", "3"]);
    assert_eq!(capped.counts(), (15, 15, 0, 0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE expired_at IS NULL"
        ),
        20
    );

    // No cap in reach: 5 full batches per phase, then one short (empty) batch each
    // says the phase is drained. The first turn, Reserve then Booking, finds both
    // full: a backlog in both, so the Booking phase goes on on a second session, side
    // by side with the Reserve phase.
    let out = twin
        .command(&["run-once", "--batch-size", "5", "--max-batches", "100"])
        .env("LOG_FORMAT", "json")
        .output()
        .unwrap();
    let run = Run::of(out);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (25, 25, 0, 0));
    let lines = json_lines(&run.stderr);
    let batches = selected_batches(&lines);
    assert_eq!(
        batches[..2],
        [("Reserve".to_owned(), 5), ("Booking".to_owned(), 5)]
    );
    for phase in ["Reserve", "Booking"] {
        let counts: Vec<u64> = batches
            .iter()
            .filter(|(p, _)| p == phase)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(counts, [5, 5, 5, 5, 5, 0], "{phase}");
    }
    let side_by_side: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["msg"] == SECOND_SESSION)
        .collect();
    assert_eq!(side_by_side.len(), 1, "{}", run.stderr);
    assert_eq!(side_by_side[0]["Phase"], "Booking");
    assert!(
        !lines
            .iter()
            .any(|l| l["msg"].as_str().unwrap().contains("budget spent")),
        "a drained cycle reports nothing left: {}",
        run.stderr
    );
    let mut t = twin.client();
    assert_eq!(assert_each_expiry_written_once(&mut t), 50);
}

#[test]
fn a_cycle_out_of_budget_with_rows_left_ends_before_its_deadline_with_exit_0_and_says_what_is_left()
{
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 400, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600 + i as i64)
        } else {
            Seed::booked(-600 + i as i64)
        }
    });
    // Every batch write takes 0.4 s: with a 2 s budget the cycle can take only a few
    // of the 40 batches of 5 per phase before the time left is under twice the slowest.
    slow_outbox_writes(&mut c, 0.4);
    let out = db
        .command(&[
            "run-once",
            "--batch-size",
            "5",
            "--max-batches",
            "100000",
            "--deadline",
            "2s",
        ])
        .env("LOG_FORMAT", "json")
        .output()
        .unwrap();
    let run = Run::of(out);
    assert_eq!(run.code, 0, "out of budget is a normal end: {}", run.stderr);
    let result = run.result();
    let expired = result.reserve + result.booking;
    assert!(
        expired > 0 && expired < 400,
        "some batches, not all: {result:?}"
    );
    // The batches alternate, so the phases differ by one batch at most.
    assert!((result.reserve - result.booking).abs() <= 5, "{result:?}");
    // The last batch started with time to finish: nothing was cancelled.
    assert!(result.duration_ms < 2_000, "{result:?}");
    assert_eq!(assert_each_expiry_written_once(&mut c), expired);

    let lines = json_lines(&run.stderr);
    let left = lines
        .iter()
        .find(|l| {
            l["msg"]
                == "cycle budget spent with overdue bookings left; the next cycle goes on with them"
        })
        .unwrap_or_else(|| panic!("no budget line in {}", run.stderr));
    let still = |phase: &str| {
        let statuses = if phase == "Reserve" {
            "('Reserved', 'AwaitingPayment')"
        } else {
            "('Booked')"
        };
        count(
            &mut db.client(),
            &format!("SELECT count(*) FROM crm.bookings WHERE status IN {statuses}"),
        )
        .to_string()
    };
    assert_eq!(left["ReserveLeft"], json!(still("Reserve")));
    assert_eq!(left["BookingLeft"], json!(still("Booking")));
    assert_eq!(left["DeadlineMs"], json!(2000));
    assert!(lines.iter().any(|l| l["msg"] == "cycle completed"));

    // The next cycles go on where it stopped, until nothing is left.
    let mut cycles = 1;
    while count(
        &mut c,
        "SELECT count(*) FROM crm.bookings WHERE expired_at IS NULL",
    ) > 0
    {
        db.run_once(&["--batch-size", "200", "--max-batches", "10"]);
        cycles += 1;
        assert!(cycles < 10, "the backlog does not shrink");
    }
    assert_eq!(assert_each_expiry_written_once(&mut c), 400);
}

/// The settings of the cycles below: batches of 5, no cap in reach.
const SMALL_BATCHES: &[&str] = &[
    "--batch-size",
    "5",
    "--max-batches",
    "100",
    "--connect-timeout",
    "2s",
];

#[test]
fn a_second_session_that_cannot_be_opened_leaves_the_phases_taking_turns_on_one() {
    use booking_expire::testing::cycle::{self, CycleResult};
    use booking_expire_store::{self as store, CycleStatements};
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 24, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600 + i as i64)
        } else {
            Seed::booked(-600 + i as i64)
        }
    });
    // The cycle's own session is open; the settings it would open a second one from
    // name a port nothing listens on (as a connection limit or a database going away
    // would refuse it). Both phases have a backlog after the first turn (5 + 5 of 12
    // each), so the cycle tries, fails, and drains both on its one session.
    let mut session = store::connect(&run_once_config(&db.url, SMALL_BATCHES).db).unwrap();
    let status_type = store::status_type(&mut session.client).unwrap();
    let stmts = CycleStatements::prepare(&mut session.client, &status_type).unwrap();
    let refused = refused_port();
    let dead_port = refused.port;
    let unreachable = run_once_config(
        &format!("postgres://postgres@127.0.0.1:{dead_port}/x"),
        SMALL_BATCHES,
    );
    let mut result = CycleResult {
        run_id: uuid::Uuid::new_v4(),
        ..CycleResult::default()
    };
    cycle::run_cycle(
        &mut session,
        &stmts,
        &unreachable,
        chrono::Utc::now(),
        booking_expire::testing::clock::Ambient::system(
            &booking_expire::testing::shutdown::Shutdown::new(),
        ),
        &mut result,
    )
    .unwrap();
    assert_eq!(
        (result.reserve_expired_count, result.booking_expired_count),
        (12, 12)
    );
    assert_eq!(assert_each_expiry_written_once(&mut c), 24);
}
