//! Poison isolation, parallel instances and races with managers, on a real PostgreSQL.

use crate::common;
use crate::postgres;

use std::collections::HashSet;

use common::*;
use uuid::Uuid;

/// A trigger that refuses to expire the given bookings, as a CRM rule might.
fn reject_writes_for(c: &mut postgres::Client, ids: &[Uuid]) {
    let list: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.refuse_some() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.id IN ({}) THEN
             RAISE EXCEPTION 'booking % is frozen by legal hold', NEW.id;
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_some BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION crm.refuse_some();",
        list.join(", ")
    ))
    .unwrap();
}

#[test]
fn partial_failure_isolates_guard_and_database_poison_and_commits_the_rest() {
    let db = TestDb::new();
    let mut c = db.client();
    let healthy = seed_many(&mut c, 20, |i| {
        if i % 2 == 0 {
            Seed::reserved(-300 + i as i64)
        } else {
            Seed::booked(-300 + i as i64)
        }
    });
    // Guard poison: an active booking whose expired_at is already set.
    let mut inconsistent = Seed::reserved(-400);
    inconsistent.expired_at_set = true;
    // Database poison: the trigger refuses this one's update.
    let frozen = Seed::booked(-400);
    seed(&mut c, &[inconsistent.clone(), frozen.clone()]);
    reject_writes_for(&mut c, &[frozen.id]);

    let run = db.run(&["run-once"]);
    assert_eq!(
        run.code, 0,
        "poison is not a failure of the cycle: {}",
        run.stderr
    );
    let result = run.result();
    assert_eq!(result.counts(), (10, 10, 0, 2));
    for id in &healthy {
        assert!(status_of(&mut c, *id).ends_with("Expired"));
    }
    // The poison rows stay active, with no event, and are quarantined with the reason.
    assert_eq!(status_of(&mut c, inconsistent.id), "Reserved");
    assert_eq!(status_of(&mut c, frozen.id), "Booked");
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 20);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.booking_audit"), 20);
    let poison = c
        .query(
            "SELECT booking_id, phase, reason, sqlstate, attempts, retry_at > $1
               FROM crm.booking_expiration_poison ORDER BY phase DESC",
            &[&result.as_of],
        )
        .unwrap();
    assert_eq!(poison.len(), 2);
    assert_eq!(poison[0].get::<_, Uuid>(0), inconsistent.id);
    assert_eq!(poison[0].get::<_, String>(1), "Reserve");
    assert_eq!(poison[0].get::<_, String>(2), "expired_at_already_set");
    assert_eq!(poison[0].get::<_, Option<String>>(3), None);
    assert_eq!(poison[1].get::<_, Uuid>(0), frozen.id);
    assert_eq!(poison[1].get::<_, String>(1), "Booking");
    assert_eq!(poison[1].get::<_, String>(2), "database");
    assert_eq!(
        poison[1].get::<_, Option<String>>(3).as_deref(),
        Some("P0001")
    );
    for row in &poison {
        assert_eq!(row.get::<_, i32>(4), 1);
        assert!(row.get::<_, bool>(5), "quarantined until a later cycle");
    }
    // Each poison row is logged at ERROR with its BookingId.
    for id in [inconsistent.id, frozen.id] {
        assert!(
            run.stderr
                .lines()
                .any(|l| l.contains("ERROR") && l.contains(&id.to_string())),
            "no ERROR line for {id}:\n{}",
            run.stderr
        );
    }
}

#[test]
fn a_batch_with_a_refused_row_is_rolled_back_and_redone_with_isolation_each_row_once() {
    // A batch writes without savepoints; when the database refuses a row, the batch
    // rolls back and is done again from its claim with isolation. Nothing of the first
    // attempt may survive: every other row of that batch expires once, with one event,
    // and the refused row is quarantined and logged once.
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 12, |i| Seed::booked(-300 + i as i64));
    // Batches of 5, oldest first: the second (ids[5..10]) holds the refused row.
    let frozen = ids[7];
    reject_writes_for(&mut c, &[frozen]);

    let run = db.run(&["run-once", "--batch-size", "5", "--max-batches", "10"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (0, 11, 0, 1));
    for id in ids.iter().filter(|id| **id != frozen) {
        assert_eq!(status_of(&mut c, *id), "BookingExpired");
    }
    assert_eq!(status_of(&mut c, frozen), "Booked");
    for (table, key) in [
        ("crm.outbox", "aggregateid::uuid"),
        ("crm.booking_audit", "booking_id"),
        ("crm.deal_timeline", "booking_id"),
    ] {
        assert_eq!(
            count(
                &mut c,
                &format!("SELECT count(*) FROM {table} WHERE {key} <> '{frozen}'")
            ),
            11,
            "{table}"
        );
        assert_eq!(
            count(
                &mut c,
                &format!("SELECT count(DISTINCT {key}) FROM {table}")
            ),
            11,
            "{table}: a booking written twice"
        );
    }
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.booking_expiration_poison
                  WHERE booking_id = '{frozen}' AND attempts = 1 AND reason = 'database'"
            )
        ),
        1
    );
    let lines = |needle: &str| run.stderr.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(
        run.stderr
            .lines()
            .filter(|l| l.contains("item failed") && l.contains(&frozen.to_string()))
            .count(),
        1,
        "{}",
        run.stderr
    );
    assert_eq!(lines("redone with isolation"), 1, "{}", run.stderr);
    assert_eq!(lines("booking expired"), 11, "{}", run.stderr);
}

#[test]
fn a_repaired_poison_row_expires_later_and_leaves_quarantine() {
    let db = TestDb::new();
    let mut c = db.client();
    let frozen = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&frozen));
    reject_writes_for(&mut c, &[frozen.id]);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 1));
    // The cause is removed and the back-off has passed.
    c.batch_execute(
        "DROP TRIGGER refuse_some ON crm.bookings;
         UPDATE crm.booking_expiration_poison SET retry_at = now() - interval '1 second';",
    )
    .unwrap();
    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 0));
    assert_eq!(status_of(&mut c, frozen.id), "BookingExpired");
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_expiration_poison"),
        0
    );
}

#[test]
fn poison_back_off_doubles_on_each_repeat() {
    let db = TestDb::new();
    let mut c = db.client();
    let mut bad = Seed::booked(-60);
    bad.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&bad));
    let mut gaps = Vec::new();
    for _ in 0..3 {
        let r = db.run_once(&[]);
        assert_eq!(r.poison, 1);
        let row = c
            .query_one(
                "SELECT attempts, extract(epoch FROM retry_at - last_seen_at)::int8
                   FROM crm.booking_expiration_poison",
                &[],
            )
            .unwrap();
        gaps.push((row.get::<_, i32>(0), row.get::<_, i64>(1)));
        // Let the next cycle retry it at once.
        c.batch_execute(
            "UPDATE crm.booking_expiration_poison SET retry_at = now() - interval '1 second'",
        )
        .unwrap();
    }
    assert_eq!(gaps, [(1, 60), (2, 120), (3, 240)]);
}

#[test]
fn poison_at_the_head_of_the_queue_does_not_block_younger_healthy_rows() {
    let db = TestDb::new();
    let mut c = db.client();
    // 250 poison rows, all older than the 10 healthy ones: 125 refused by the guard,
    // 125 by the database.
    let mut guard_poison = Vec::new();
    let mut db_poison = Vec::new();
    for i in 0..250 {
        let mut s = Seed::booked(-10_000 + i);
        if i % 2 == 0 {
            s.expired_at_set = true;
            guard_poison.push(s);
        } else {
            db_poison.push(s);
        }
    }
    seed(&mut c, &guard_poison);
    seed(&mut c, &db_poison);
    let db_ids: Vec<Uuid> = db_poison.iter().map(|s| s.id).collect();
    reject_writes_for(&mut c, &db_ids);
    let healthy = seed_many(&mut c, 10, |i| Seed::booked(-100 + i as i64));

    let first = db.run_once(&[]);
    let second = db.run_once(&[]);
    assert_eq!(
        first.booking + second.booking,
        10,
        "healthy rows expire within two cycles"
    );
    assert_eq!(first.poison + second.poison, 250);
    for id in &healthy {
        assert_eq!(status_of(&mut c, *id), "BookingExpired");
    }
    // All 250 are visible and countable in quarantine, still active.
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_poison p
                         JOIN crm.bookings b ON b.id = p.booking_id WHERE b.status = 'Booked'"
        ),
        250
    );
    // A third cycle, inside the back-off, touches none of them again.
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
}

#[test]
fn parallel_instances_expire_each_row_exactly_once() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 2_000, |i| {
        if i % 2 == 0 {
            Seed::new("AwaitingPayment", Some(-5_000 + i as i64), None)
        } else {
            Seed::booked(-5_000 + i as i64)
        }
    });
    let children: Vec<_> = (0..4)
        .map(|_| {
            // Each gets the room to drain it all (--deadline; 25 s by default, which
            // four cycles sharing a loaded host can spend before the 2,000 rows are
            // done): the counts then add up whatever the load.
            spawn(db.command(&[
                "run-once",
                "--batch-size",
                "50",
                "--max-batches",
                "40",
                "--deadline",
                "10m",
            ]))
        })
        .collect();
    let runs: Vec<Run> = children
        .into_iter()
        .map(|ch| Run::of(ch.wait_with_output().unwrap()))
        .collect();
    let mut reserve = 0;
    let mut booking = 0;
    let mut run_ids = HashSet::new();
    for run in &runs {
        assert_eq!(run.code, 0, "{}", run.stderr);
        let r = run.result();
        reserve += r.reserve;
        booking += r.booking;
        run_ids.insert(r.run_id);
        assert_eq!(r.poison, 0);
    }
    assert_eq!(run_ids.len(), 4);
    assert_eq!(
        (reserve, booking),
        (1_000, 1_000),
        "counts add up to every row once"
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status IN ('ReserveExpired', 'BookingExpired') AND version = 2"
        ),
        2_000
    );
    for (sql, what) in [
        ("SELECT count(*) FROM crm.outbox", "outbox rows"),
        (
            "SELECT count(DISTINCT aggregateid) FROM crm.outbox",
            "bookings with an event",
        ),
        ("SELECT count(*) FROM crm.booking_audit", "audit rows"),
        (
            "SELECT count(DISTINCT booking_id) FROM crm.booking_audit",
            "bookings audited",
        ),
        ("SELECT count(*) FROM crm.deal_timeline", "timeline entries"),
    ] {
        assert_eq!(count(&mut c, sql), 2_000, "{what}");
    }
    // Every event was written by the run that expired the booking.
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox o JOIN crm.booking_audit a
                 ON a.booking_id::text = o.aggregateid
              WHERE o.headers->>'ce_correlationid' = a.run_id::text"
        ),
        2_000
    );
}

#[test]
fn a_row_held_by_a_manager_is_skipped_and_counted_then_expires_later() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 3, |i| Seed::booked(-300 + i as i64));
    // A manager's command holds the oldest row.
    let mut manager = db.client();
    let mut tx = manager.transaction().unwrap();
    tx.query_one(
        "SELECT id FROM crm.bookings WHERE id = $1 FOR UPDATE",
        &[&ids[0]],
    )
    .unwrap();

    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (0, 2, 1, 0));
    assert_eq!(status_of(&mut c, ids[0]), "Booked");
    tx.rollback().unwrap();

    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 0));
    assert_eq!(status_of(&mut c, ids[0]), "BookingExpired");
}

#[test]
fn skipped_rows_ahead_of_a_full_batch_are_counted() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 6, |i| Seed::reserved(-600 + i as i64));
    let mut manager = db.client();
    let mut tx = manager.transaction().unwrap();
    // Hold the 1st and the 3rd oldest, and the youngest (beyond the claimed range).
    for id in [ids[0], ids[2], ids[5]] {
        tx.execute(
            "SELECT 1 FROM crm.bookings WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .unwrap();
    }
    let result = db.run_once(&["--batch-size", "2"]);
    // Claimed ids[1], ids[3]; skipped ahead of them: ids[0], ids[2].
    assert_eq!(result.counts(), (2, 0, 2, 0));
    assert_eq!(status_of(&mut c, ids[1]), "ReserveExpired");
    assert_eq!(status_of(&mut c, ids[3]), "ReserveExpired");
    assert_eq!(status_of(&mut c, ids[4]), "Reserved");
    tx.rollback().unwrap();
}

#[test]
fn a_row_held_through_a_drain_is_counted_once_and_the_batches_after_it_go_on() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 5, |i| Seed::booked(-500 + i as i64));
    let mut manager = db.client();
    let mut tx = manager.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM crm.bookings WHERE id = $1 FOR UPDATE",
        &[&ids[0]],
    )
    .unwrap();
    // Three batches of two: ids[1..3], ids[3..5], then none. Each starts after the key
    // the one before it ended at, so the held row at the head is passed once, not by
    // every batch of the cycle.
    let result = db.run_once(&["--batch-size", "2", "--max-batches", "10"]);
    assert_eq!(result.counts(), (0, 4, 1, 0));
    assert_eq!(status_of(&mut c, ids[0]), "Booked");
    for id in &ids[1..] {
        assert_eq!(status_of(&mut c, *id), "BookingExpired");
    }
    tx.rollback().unwrap();
    // The next cycle starts at the head again and finds it.
    assert_eq!(db.run_once(&[]).counts(), (0, 1, 0, 0));
    assert_eq!(status_of(&mut c, ids[0]), "BookingExpired");
}

#[test]
fn a_managers_extend_committed_first_wins() {
    let db = TestDb::new();
    let mut c = db.client();
    let s = Seed::booked(-30);
    seed(&mut c, std::slice::from_ref(&s));
    // The manager extends with an optimistic version check, as the CRM does.
    let extended = c
        .execute(
            "UPDATE crm.bookings SET booking_expires_at = now() + interval '1 day',
                    updated_at = now(), version = version + 1
              WHERE id = $1 AND status = 'Booked' AND version = 1",
            &[&s.id],
        )
        .unwrap();
    assert_eq!(extended, 1);
    let before = checksum(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    assert_eq!(checksum(&mut c), before);
    let b = booking(&mut c, s.id);
    assert_eq!(
        (b.status.as_str(), b.version, b.expired_at),
        ("Booked", 2, None)
    );
}

#[test]
fn a_confirm_racing_with_a_cycle_never_both_win() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 400, |i| Seed::booked(-1_000 + i as i64));
    // Managers confirm every other booking with a version check while a cycle runs.
    let mut cycle = spawn(db.command(&["run-once", "--batch-size", "20", "--max-batches", "30"]));
    // Its log is read while the managers work: a full pipe would stop the cycle in a
    // log line while it holds a batch's locks, which a manager then waits for.
    let mut stderr = cycle.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).unwrap();
        bytes
    });
    let mut manager = db.client();
    let mut confirmed = Vec::new();
    for id in ids.iter().step_by(2) {
        let n = manager
            .execute(
                "UPDATE crm.bookings SET status = 'Completed', updated_at = now(), version = version + 1
                  WHERE id = $1 AND status = 'Booked' AND version = 1",
                &[id],
            )
            .unwrap();
        if n == 1 {
            confirmed.push(*id);
        }
    }
    let mut output = cycle.wait_with_output().unwrap();
    output.stderr = log.join().unwrap();
    let run = Run::of(output);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = run.result();
    let expired = count(
        &mut c,
        "SELECT count(*) FROM crm.bookings WHERE status = 'BookingExpired'",
    );
    assert_eq!(expired, result.booking);
    assert_eq!(
        expired + confirmed.len() as i64,
        400,
        "every booking has exactly one winner"
    );
    // Winners by confirm have no event and no expiry audit.
    let confirmed_text: Vec<String> = confirmed.iter().map(|u| u.to_string()).collect();
    let events_for_confirmed: i64 = c
        .query_one(
            "SELECT count(*) FROM crm.outbox WHERE aggregateid = ANY($1)",
            &[&confirmed_text],
        )
        .unwrap()
        .get(0);
    assert_eq!(events_for_confirmed, 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), expired);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE version <> 2"
        ),
        0,
        "each booking changed exactly once"
    );
}
