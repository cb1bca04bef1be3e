//! The rows a CRM's database holds or refuses, whatever its owners do to it: `±infinity`
//! and years past 9999 in any moment the job reads, constraints checked at COMMIT,
//! updates a trigger drops without an error, and an error one booking always causes.
//! Each case: no crash in any command, the healthy rows of both phases expire, the odd
//! booking is quarantined with a reason naming it.

use crate::common;
use crate::postgres;

use common::*;
use serde_json::Value;
use uuid::Uuid;

/// The quarantine entry of a booking: reason, error, sqlstate.
fn quarantine_of(c: &mut postgres::Client, id: Uuid) -> Option<(String, String, Option<String>)> {
    c.query_opt(
        "SELECT reason, error, sqlstate FROM crm.booking_expiration_poison WHERE booking_id = $1",
        &[&id],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// A command that must neither crash nor fail: exit 0, and no panic on stderr.
fn ok(db: &TestDb, args: &[&str]) -> Run {
    let run = db.run(args);
    assert_eq!(run.code, 0, "{args:?}:\n{}\n{}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("panicked"), "{args:?}: {}", run.stderr);
    run
}

/// Every read-only command over the whole database: dry-run, backlog in each format,
/// explain of each booking given.
fn every_report(db: &TestDb, ids: &[Uuid]) {
    ok(db, &["dry-run", "--as-of", "now"]);
    let dry = json_lines(&ok(db, &["dry-run", "--as-of", "now", "--json"]).stdout);
    assert!(!dry.is_empty());
    ok(db, &["backlog"]);
    let backlog: Value =
        serde_json::from_str(&ok(db, &["backlog", "--format", "json"]).stdout).unwrap();
    assert!(backlog.is_object(), "{backlog}");
    ok(db, &["backlog", "--format", "prometheus"]);
    for id in ids {
        ok(db, &["explain", &id.to_string()]);
        ok(db, &["explain", &id.to_string(), "--json"]);
    }
}

#[test]
fn infinite_and_far_moments_decode_in_every_command_and_the_healthy_rows_expire() {
    let db = TestDb::new();
    let mut c = db.client();
    let healthy = seed(
        &mut c,
        &[
            Seed::reserved(-300),
            Seed::reserved(-200),
            Seed::booked(-300),
            Seed::booked(-200),
        ],
    );
    // Overdue whatever AsOf: a `-infinity` deadline.
    let minus_infinity = Seed::reserved(-100);
    // Overdue Booked / Reserved rows whose other phase's deadline is odd.
    let booked_reserve_infinity = Seed::booked(-100);
    let reserved_booking_far = Seed::reserved(-100);
    // Never due: `infinity`, a year chrono cannot hold.
    let booked_never = Seed::booked(-100);
    let reserved_far = Seed::reserved(-100);
    // The guard's poison, with an `expired_at` of `infinity`.
    let expired_at_infinity = Seed::reserved(-100);
    // In quarantine until `infinity`, with `-infinity` as its first sighting.
    let held_forever = Seed::reserved(-400);
    let odd = [
        &minus_infinity,
        &booked_reserve_infinity,
        &reserved_booking_far,
        &booked_never,
        &reserved_far,
        &expired_at_infinity,
        &held_forever,
    ];
    seed(&mut c, &odd.map(|s| s.clone()));
    c.batch_execute(&format!(
        "UPDATE crm.bookings SET reserve_expires_at = '-infinity' WHERE id = '{}';
         UPDATE crm.bookings SET reserve_expires_at = 'infinity' WHERE id = '{}';
         UPDATE crm.bookings SET booking_expires_at = '290000-01-01' WHERE id = '{}';
         UPDATE crm.bookings SET booking_expires_at = 'infinity' WHERE id = '{}';
         UPDATE crm.bookings SET reserve_expires_at = '290000-01-01' WHERE id = '{}';
         UPDATE crm.bookings SET expired_at = 'infinity' WHERE id = '{}';
         INSERT INTO crm.booking_expiration_poison
                (booking_id, tenant_id, phase, reason, error, first_seen_at, last_seen_at,
                 retry_at, booking_version, booking_status)
         SELECT id, tenant_id, 'Reserve', 'manual', 'held by the CRM team', '-infinity',
                '290000-01-01', 'infinity', version, status::text
           FROM crm.bookings WHERE id = '{}';",
        minus_infinity.id,
        booked_reserve_infinity.id,
        reserved_booking_far.id,
        booked_never.id,
        reserved_far.id,
        expired_at_infinity.id,
        held_forever.id,
    ))
    .unwrap();
    let all: Vec<Uuid> = odd.iter().map(|s| s.id).chain(healthy.clone()).collect();
    every_report(&db, &all);
    // The oldest Reserve deadline is `-infinity`: infinitely late.
    let gauges = ok(&db, &["backlog", "--format", "prometheus"]).stdout;
    assert!(
        gauges.contains(
            "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Reserve\"} +Inf\n"
        ),
        "{gauges}"
    );
    let text = ok(&db, &["explain", &minus_infinity.id.to_string()]).stdout;
    assert!(text.contains("-infinity"), "{text}");
    assert!(text.contains("WOULD EXPIRE"), "{text}");
    let text = ok(&db, &["explain", &booked_never.id.to_string()]).stdout;
    assert!(text.contains("deadline is infinity: never due"), "{text}");

    let result = db.run_once(&[]);
    // Reserve: 2 healthy, `-infinity`, the far Booking deadline; Booking: 2 healthy and
    // the `infinity` Reserve deadline. The guard's refusal is the one poison row.
    assert_eq!(result.counts(), (4, 3, 0, 1));
    for id in healthy.iter().chain([
        &minus_infinity.id,
        &reserved_booking_far.id,
        &booked_reserve_infinity.id,
    ]) {
        assert!(status_of(&mut c, *id).ends_with("Expired"), "{id}");
    }
    assert_eq!(status_of(&mut c, booked_never.id), "Booked");
    assert_eq!(status_of(&mut c, reserved_far.id), "Reserved");
    assert_eq!(status_of(&mut c, held_forever.id), "Reserved");
    assert_eq!(quarantine_of(&mut c, booked_never.id), None);
    let (reason, error, _) = quarantine_of(&mut c, expired_at_infinity.id).unwrap();
    assert_eq!(reason, "expired_at_already_set");
    assert!(error.contains("expired_at infinity"), "{error}");
    assert_each_expiry_written_once(&mut c);
    // Outbox rows another writer left with odd moments.
    let odd_outbox = insert_outbox_rows(&mut c, OutboxState::Pending, &[0, 0, 0]);
    c.execute(
        "UPDATE crm.outbox SET occurred_at = CASE id WHEN $1::uuid THEN 'infinity'::timestamptz
                                                     WHEN $2::uuid THEN '-infinity'::timestamptz
                                                     ELSE '290000-01-01'::timestamptz END
          WHERE id = ANY(ARRAY[$1::uuid, $2::uuid, $3::uuid])",
        &[&odd_outbox[0], &odd_outbox[1], &odd_outbox[2]],
    )
    .unwrap();
    // A second cycle finds nothing new to do and does not crash on the leftovers.
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    every_report(&db, &all);
    let backlog: Value =
        serde_json::from_str(&ok(&db, &["backlog", "--format", "json"]).stdout).unwrap();
    assert!(backlog.to_string().contains("infinity"), "{backlog}");

    // The relay sends every pending row, the odd ones included, once.
    let brokers = common::kafka::shared_brokers();
    let topic = common::kafka::unique_topic();
    common::kafka::create_topic(&brokers, &topic, 6, &[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let pending = count(&mut c, "SELECT count(*) FROM crm.outbox") as usize;
    assert_eq!(pending, 7 + 3);
    ok(
        &db,
        &[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--message-timeout",
            "5s",
        ],
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0
    );
    let got = common::kafka::consume(
        &brokers,
        &topic,
        6,
        pending,
        std::time::Duration::from_secs(20),
    );
    assert_eq!(got.len(), pending);
    // republish reads the odd rows too (their moments decode).
    let ids = odd_outbox
        .iter()
        .map(Uuid::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dry = ok(
        &db,
        &[
            "republish",
            "--ids",
            &ids,
            "--reason",
            "replay",
            "--dry-run",
            "--json",
        ],
    );
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(dry["Requeued"], 3, "{dry}");
}

/// Bookings of both phases, one of which (`odd`, Booked) the CRM's rule refuses.
fn healthy_and_odd(c: &mut postgres::Client) -> (Vec<Uuid>, Seed) {
    let healthy = seed_many(c, 6, |i| {
        if i % 2 == 0 {
            Seed::reserved(-300 + i as i64)
        } else {
            Seed::booked(-300 + i as i64)
        }
    });
    let odd = Seed::booked(-400);
    seed(c, std::slice::from_ref(&odd));
    (healthy, odd)
}

fn all_expired(c: &mut postgres::Client, ids: &[Uuid]) {
    for id in ids {
        assert!(status_of(c, *id).ends_with("Expired"), "{id}");
    }
}

/// A function raising `errcode` for the booking `id` and passing every other.
fn refuse_one(c: &mut postgres::Client, id: Uuid, errcode: &str, returns: &str) {
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.id = '{id}' THEN
             RAISE EXCEPTION 'booking % is held by the CRM', NEW.id USING ERRCODE = '{errcode}';
           END IF;
           RETURN {returns};
         END $$;"
    ))
    .unwrap();
}

#[test]
fn a_deferred_constraint_refusing_one_booking_quarantines_it_at_the_write() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, odd) = healthy_and_odd(&mut c);
    refuse_one(&mut c, odd.id, "23514", "NULL");
    c.batch_execute(
        "CREATE CONSTRAINT TRIGGER refuse_one AFTER UPDATE ON crm.bookings
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION crm.refuse_one();",
    )
    .unwrap();
    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (3, 3, 0, 1));
    all_expired(&mut c, &healthy);
    assert_eq!(status_of(&mut c, odd.id), "Booked");
    let (reason, error, sqlstate) = quarantine_of(&mut c, odd.id).unwrap();
    assert_eq!(
        (reason.as_str(), sqlstate.as_deref()),
        ("database", Some("23514"))
    );
    assert!(error.contains("held by the CRM"), "{error}");
    assert_each_expiry_written_once(&mut c);
}

/// The phase's record of a failed batch: (phase, sqlstate).
fn phase_failures(c: &mut postgres::Client) -> Vec<(String, Option<String>)> {
    c.query(
        "SELECT phase, sqlstate FROM crm.booking_expiration_phase_failure ORDER BY phase",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn an_error_at_commit_isolates_the_batch_on_the_next_cycle() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, odd) = healthy_and_odd(&mut c);
    refuse_one(&mut c, odd.id, "23514", "NULL");
    // The constraint is deferred again by a trigger of the CRM's: it is checked at
    // COMMIT, whatever the batch's transaction set.
    c.batch_execute(
        "CREATE CONSTRAINT TRIGGER refuse_one AFTER UPDATE ON crm.bookings
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION crm.refuse_one();
         CREATE FUNCTION crm.defer_all() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN SET CONSTRAINTS ALL DEFERRED; RETURN NEW; END $$;
         CREATE TRIGGER defer_all BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.defer_all();",
    )
    .unwrap();
    // First cycle: the Booking batch fails at COMMIT; the Reserve phase expires.
    let first = db.run(&["run-once"]);
    assert_eq!(first.code, 75, "{}", first.stderr);
    assert!(first.stderr.contains("commit failed"), "{}", first.stderr);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status::text LIKE '%Expired'"
        ),
        3
    );
    assert_eq!(
        phase_failures(&mut c),
        vec![("Booking".to_owned(), Some("23514".to_owned()))]
    );
    // Next cycle: one booking per transaction; the odd one is quarantined, the rest
    // expire, and the phase's record is gone.
    let second = db.run(&["run-once"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.result().counts(), (0, 3, 0, 1));
    all_expired(&mut c, &healthy);
    assert_eq!(status_of(&mut c, odd.id), "Booked");
    let (reason, error, sqlstate) = quarantine_of(&mut c, odd.id).unwrap();
    assert_eq!(
        (reason.as_str(), sqlstate.as_deref()),
        ("database", Some("23514"))
    );
    assert!(error.starts_with("at COMMIT: "), "{error}");
    assert!(
        second.stderr.contains(&odd.id.to_string()),
        "{}",
        second.stderr
    );
    assert_eq!(phase_failures(&mut c), vec![]);
    assert_each_expiry_written_once(&mut c);
}

#[test]
fn an_error_one_booking_always_causes_is_isolated_on_the_next_cycle_whatever_its_class() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, odd) = healthy_and_odd(&mut c);
    refuse_one(&mut c, odd.id, "55P03", "NEW");
    c.batch_execute(
        "CREATE TRIGGER refuse_one BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.refuse_one();",
    )
    .unwrap();
    let first = db.run(&["run-once"]);
    assert_eq!(first.code, 75, "{}", first.stderr);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status::text LIKE '%Expired'"
        ),
        3
    );
    assert_eq!(
        phase_failures(&mut c),
        vec![("Booking".to_owned(), Some("55P03".to_owned()))]
    );
    let second = db.run(&["run-once"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.result().counts(), (0, 3, 0, 1));
    all_expired(&mut c, &healthy);
    let (reason, error, sqlstate) = quarantine_of(&mut c, odd.id).unwrap();
    assert_eq!(
        (reason.as_str(), sqlstate.as_deref()),
        ("database", Some("55P03"))
    );
    assert!(error.contains("held by the CRM"), "{error}");
    assert_eq!(phase_failures(&mut c), vec![]);
    // While it is in quarantine, cycles run clean.
    let third = db.run(&["run-once"]);
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert_eq!(third.result().counts(), (0, 0, 0, 0));
    assert_each_expiry_written_once(&mut c);
}

#[test]
fn an_update_a_trigger_drops_is_refused_named_quarantined_and_explained() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, odd) = healthy_and_odd(&mut c);
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.drop_one() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.id = '{}' THEN RETURN NULL; END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER drop_one BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.drop_one();",
        odd.id
    ))
    .unwrap();
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (3, 3, 0, 1));
    all_expired(&mut c, &healthy);
    assert_eq!(status_of(&mut c, odd.id), "Booked");
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains(&odd.id.to_string()) && l.contains("dropped the update")),
        "{}",
        run.stderr
    );
    let (reason, error, sqlstate) = quarantine_of(&mut c, odd.id).unwrap();
    assert_eq!((reason.as_str(), sqlstate), ("update_dropped", None));
    assert!(error.contains("BEFORE UPDATE trigger"), "{error}");
    // No event for it.
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.outbox WHERE aggregateid = '{}'",
                odd.id
            )
        ),
        0
    );
    let text = ok(&db, &["explain", &odd.id.to_string()]).stdout;
    assert!(text.contains("would NOT expire"), "{text}");
    assert!(text.contains("update_dropped"), "{text}");
    // Not claimed again while in quarantine.
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
}

#[test]
fn without_migration_12_the_cycle_says_so_and_runs_as_before() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, odd) = healthy_and_odd(&mut c);
    c.batch_execute("DROP TABLE crm.booking_expiration_phase_failure")
        .unwrap();
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("migration 012_phase_failures.sql: run `booking-expire migrate`"),
        "{}",
        run.stderr
    );
    assert_eq!(run.result().counts(), (3, 4, 0, 0));
    all_expired(&mut c, &healthy);
    all_expired(&mut c, &[odd.id]);
}

#[test]
fn a_rule_on_the_bookings_stops_the_cycle_with_a_message_naming_it() {
    let db = TestDb::new();
    let mut c = db.client();
    let (healthy, _) = healthy_and_odd(&mut c);
    c.batch_execute(
        "CREATE RULE keep_some AS ON UPDATE TO crm.bookings
           WHERE old.version > 1000 DO INSTEAD NOTHING",
    )
    .unwrap();
    let before = checksum(&mut c);
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("a rule on crm.bookings")
            && run.stderr.contains("replace the rule by a trigger"),
        "{}",
        run.stderr
    );
    assert_eq!(checksum(&mut c), before);
    c.batch_execute("DROP RULE keep_some ON crm.bookings")
        .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (3, 4, 0, 0));
    all_expired(&mut c, &healthy);
}

#[test]
fn a_pause_switch_set_by_hand_to_infinity_reads() {
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO crm.booking_expiration_pause (command, paused_at, paused_by, reason)
         VALUES ('relay-outbox', 'infinity', 'dba', 'until further notice'),
                ('run-once', '-infinity', 'dba', 'since forever')",
    )
    .unwrap();
    for format in ["table", "json"] {
        let run = ok(&db, &["backlog", "--format", format]);
        assert!(
            run.stdout.contains("9999-12-31"),
            "{format}: {}",
            run.stdout
        );
    }
    ok(&db, &["backlog", "--format", "prometheus"]);
    let brokers = common::kafka::shared_brokers();
    ok(&db, &["relay-outbox", "--brokers", &brokers]);
    let run = ok(&db, &["run-once"]);
    assert!(run.stdout.contains("0001-01-01"), "{}", run.stdout);
}
