//! It never writes, in any table, and never waits on a lock: rows another session holds
//! are still listed, and a table lock fails fast with a temporary error.

use super::*;

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
