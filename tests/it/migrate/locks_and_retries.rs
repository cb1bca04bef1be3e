//! Locks and retries: two migrators at once leave one history; a statement that cannot
//! get its lock gives it up, so that the CRM's writes never queue behind it, and is
//! tried again until the lock is free, or ends with 75 naming the file and the lock.

use super::*;

#[test]
fn two_migrators_at_once_on_a_fresh_database_both_exit_0_and_leave_one_history() {
    let db = TestDb::empty();
    let mut c = db.client();
    // Both start while the migrators' lock is held, then race for it.
    let mut holder = db.client();
    holder
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&booking_expire_store::testing::migrate::MIGRATE_LOCK],
        )
        .unwrap();
    let mut first = Background::start(db.command(&["migrate"]));
    let mut second = Background::start(db.command(&["migrate"]));
    let waiting = "another migrator holds the migrators' lock";
    first.wait_for_lines(waiting, 1, Duration::from_secs(60));
    second.wait_for_lines(waiting, 1, Duration::from_secs(60));
    drop(holder);
    let (first, second) = (first.wait(), second.wait());
    let (a, b) = (result_of(&first), result_of(&second));
    for run in [&first, &second] {
        assert!(
            !run.stderr.contains("ERROR") && !run.stderr.contains("error:"),
            "{}",
            run.stderr
        );
    }
    let mut applied = [names(&a["Applied"]), names(&b["Applied"])];
    applied.sort();
    assert_eq!(
        applied,
        [vec![], all_files()],
        "one applied all, the other nothing"
    );
    assert_eq!(a["SchemaVersion"], MIGRATIONS.len() as i64);
    assert_eq!(b["SchemaVersion"], MIGRATIONS.len() as i64);
    let rows = history(&mut c);
    assert_eq!(rows.len(), MIGRATIONS.len());
    for (row, m) in rows.iter().zip(MIGRATIONS) {
        assert_eq!((row.0, row.1.as_str()), (m.version, m.file));
        assert_eq!(row.2, checksum(m.sql), "{}", m.file);
        assert!(!row.3, "{}: not adopted", m.file);
    }
}

const GAVE_UP: &str = "migrate: gave up waiting for a lock after 300ms";

/// A CRM-like insert into crm.outbox, with the CRM's own patience; how long it took.
fn crm_insert(c: &mut Client) -> Duration {
    let started = Instant::now();
    c.batch_execute(
        "SET lock_timeout = '5s';
         INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES (gen_random_uuid(), 'Deal', 'crm-writer', 'pin.crm.deal-updated',
                 'pin.crm.deal-updated.v1', '{}')",
    )
    .expect("the CRM's insert never waits 5s behind the migrator");
    started.elapsed()
}

/// A database migrated through 007, a session on it, and one that reads crm.outbox in
/// a long transaction (`BEGIN; LOCK TABLE … IN ACCESS SHARE MODE`, open until the test
/// ends it): ALTER TABLE crm.outbox (008) waits for it.
fn migrated_to_7_and_a_reader_of_the_outbox() -> (TestDb, Client, Client) {
    let db = TestDb::empty();
    let c = db.client();
    result_of(&db.run(&["migrate", "--target", "7"]));
    let mut holder = db.client();
    holder
        .batch_execute("BEGIN; LOCK TABLE crm.outbox IN ACCESS SHARE MODE")
        .unwrap();
    (db, c, holder)
}

#[test]
fn a_statement_gives_up_its_lock_so_that_the_crm_never_queues_behind_it_and_retries_until_free() {
    let (db, mut c, mut holder) = migrated_to_7_and_a_reader_of_the_outbox();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut migrate = Background::start(db.command(&["migrate", "--lock-timeout", "300ms"]));
    migrate.wait_for_lines(GAVE_UP, 1, Duration::from_secs(60));
    // The CRM writes meanwhile: at most one lock timeout behind the migrator's request.
    let mut crm = db.client();
    let mut slowest = Duration::ZERO;
    let mut inserts = 0;
    while migrate
        .stderr_so_far()
        .lines()
        .filter(|l| l.contains(GAVE_UP))
        .count()
        < 3
    {
        slowest = slowest.max(crm_insert(&mut crm));
        inserts += 1;
        assert!(
            migrate.child.try_wait().unwrap().is_none(),
            "{}",
            migrate.stderr_so_far()
        );
    }
    assert!(inserts > 0);
    // Behaviour: a CRM insert waits at most the migrator's lock_timeout (300 ms) behind
    // it, never its own 5 s; 2 s tells the two apart under load.
    assert!(
        slowest < Duration::from_secs(2),
        "a CRM insert waited {slowest:?}"
    );
    let err = migrate.stderr_so_far();
    assert!(
        err.lines().any(|l| l.contains(GAVE_UP)
            && l.contains("AccessExclusiveLock on crm.outbox")
            && l.contains(&format!("held by PID {holder_pid}"))),
        "the lock and its holder named:\n{err}"
    );
    holder.batch_execute("COMMIT").unwrap();
    let result = result_of(&migrate.wait());
    let files = all_files();
    assert_eq!(names(&result["Applied"]), files[7..]);
    assert_eq!(history(&mut c).len(), MIGRATIONS.len());
}

#[test]
fn a_lock_never_free_within_retry_for_ends_with_75_naming_the_file_statement_and_lock() {
    let (db, mut c, mut holder) = migrated_to_7_and_a_reader_of_the_outbox();
    let run = db.run(&["migrate", "--lock-timeout", "200ms", "--retry-for", "3s"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    let (file, k, n) = first_alter_of_the_outbox_after(7);
    assert!(
        run.stderr.contains(&format!(
            "booking-expire: error: migration {file} statement {k}/{n} (ALTER TABLE \
             crm.outbox) could not get its lock within --lock-timeout 200ms"
        )) && run
            .stderr
            .contains("it waited for AccessExclusiveLock on crm.outbox"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    holder.batch_execute("ROLLBACK").unwrap();
    // The statements before it committed; the file is not recorded, and runs again whole.
    let version: i32 = file[..3].parse().unwrap();
    assert_eq!(history(&mut c).len(), version as usize - 1);
    let result = result_of(&db.run(&["migrate"]));
    assert_eq!(
        names(&result["Applied"]),
        all_files()[version as usize - 1..]
    );
}

/// The first statement after version `after` that alters crm.outbox (which waits for
/// a reader of the table): (file, k, n).
fn first_alter_of_the_outbox_after(after: i32) -> (&'static str, usize, usize) {
    MIGRATIONS
        .iter()
        .filter(|m| m.version > after)
        .find_map(|m| {
            let statements = booking_expire_store::testing::migrate::statements(m.sql).unwrap();
            let k = statements
                .iter()
                .position(|s| s.starts_with("ALTER TABLE crm.outbox"))?;
            Some((m.file, k + 1, statements.len()))
        })
        .expect("a migration that alters crm.outbox")
}
