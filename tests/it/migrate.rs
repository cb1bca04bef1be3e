//! `booking-expire migrate` against a real PostgreSQL: two migrators at once leave one
//! history; a database migrated the old way (0.1.0's files replayed, no history) is
//! adopted and nothing runs again; an edited shipped file is refused naming it; status
//! and --dry-run change nothing; an INVALID index is dropped and built again; a
//! statement that cannot get its lock gives it up, so that the CRM's writes never
//! queue behind it, and is tried again until the lock is free.
//!
//! 0.1.0's files are copied in `fixtures/sql-0.1.0/` (from commit df0f67f), so the
//! old way stays the old way whatever sql/ becomes.

use crate::common;
use crate::postgres;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use booking_expire::store::migrate::{BASELINE, MIGRATIONS, Policy, checksum, run_one};
use common::*;
use postgres::Client;
use serde_json::Value;

/// The result line of a `migrate` that exited 0.
fn result_of(run: &Run) -> Value {
    assert_eq!(run.code, 0, "migrate failed:\n{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {:?}", run.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

fn all_files() -> Vec<String> {
    MIGRATIONS.iter().map(|m| m.file.to_owned()).collect()
}

/// The history: (version, name, checksum, adopted, duration_ms).
fn history(c: &mut Client) -> Vec<(i32, String, String, bool, i64)> {
    c.query(
        "SELECT version, name, checksum, adopted, duration_ms
           FROM crm.booking_expiration_migrations ORDER BY version",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// 0.1.0's files up to `last`, applied as the old harness and script did: each file
/// whole, one `batch_execute`. The guard it returns keeps the other tests' old ways
/// waiting while the caller holds it: 0.1.0's 010 grants the read-only role
/// `pg_read_all_stats` (a cluster-wide membership, which its 011 revokes), and a
/// `migrate` adopting 011 meanwhile would find the membership there and run 011.
fn migrate_the_old_way(c: &mut Client, last: i32) -> std::sync::MutexGuard<'static, ()> {
    // The files create the job's group roles, which are the cluster's, in DO blocks
    // that look first: two databases migrated at once race there ("role … does not
    // exist"), as two old scripts would. So the roles are made first, by the suite's
    // template (migrated once per run), and one database is migrated at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    drop(TestDb::new());
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = crate::common::repo().join("tests/it/fixtures/sql-0.1.0");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 12);
    for file in files.iter().take(last as usize) {
        let sql = std::fs::read_to_string(file).unwrap();
        // The roles and their grants are cluster-wide: another database migrating at the
        // same moment may collide with this one (a deadlock, a catalog tuple updated
        // concurrently); the files are idempotent, so the file is applied again, as the
        // old script's operator did.
        let mut tries = 0;
        while let Err(e) = c.batch_execute(&sql) {
            tries += 1;
            let transient = e
                .code()
                .is_some_and(|code| ["40P01", "40001", "XX000"].contains(&code.code()));
            assert!(transient && tries < 5, "{}: {e:?}", file.display());
            eprintln!("{}: applied again after {e:?}", file.display());
        }
    }
    one
}

#[test]
fn two_migrators_at_once_on_a_fresh_database_both_exit_0_and_leave_one_history() {
    let db = TestDb::empty();
    let mut c = db.client();
    // Both start while the migrators' lock is held, then race for it.
    let mut holder = db.client();
    holder
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&booking_expire::store::migrate::MIGRATE_LOCK],
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

/// What a file run again would change: the rows of the job's functions and triggers
/// and of its tables' grants in the catalog (CREATE OR REPLACE and GRANT rewrite them).
fn catalog_versions(c: &mut Client) -> Vec<(String, String)> {
    c.query(
        "SELECT 'proc ' || p.oid::regprocedure::text, p.xmin::text FROM pg_proc p
          WHERE p.pronamespace = 'crm'::regnamespace
         UNION ALL
         SELECT 'trigger ' || t.tgname, t.xmin::text FROM pg_trigger t
          WHERE t.tgrelid = 'crm.outbox'::regclass AND NOT t.tgisinternal
         UNION ALL
         SELECT 'class ' || c.relname, c.xmin::text FROM pg_class c
          WHERE c.relnamespace = 'crm'::regnamespace
          ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn a_database_migrated_the_old_way_is_adopted_and_nothing_runs_again() {
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    // A marker 009 would put back (its autovacuum settings), had it run again.
    c.batch_execute("ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 4321)")
        .unwrap();
    let before = catalog_versions(&mut c);
    assert!(before.len() > 20, "{before:?}");

    // The baseline alone first: what a database migrated the old way holds.
    let target = BASELINE.to_string();
    let result = result_of(&db.run(&["migrate", "--target", &target]));
    let files = all_files();
    let baseline = &files[..BASELINE as usize];
    assert_eq!(names(&result["Adopted"]), baseline);
    assert_eq!(names(&result["Applied"]), Vec::<String>::new());
    assert_eq!(result["SchemaVersion"], BASELINE);
    let rows = history(&mut c);
    assert_eq!(rows.len(), baseline.len());
    for (row, m) in rows.iter().zip(MIGRATIONS) {
        assert_eq!(
            (row.0, row.1.as_str(), row.2.as_str(), row.3, row.4),
            (m.version, m.file, checksum(m.sql).as_str(), true, 0)
        );
    }
    let after: Vec<(String, String)> = catalog_versions(&mut c)
        .into_iter()
        // The runner's own tables: the history and the partial files.
        .filter(|(what, _)| !what.starts_with("class booking_expiration_migration"))
        .collect();
    assert_eq!(after, before, "nothing of the job's catalog was rewritten");
    let options: Vec<String> = c
        .query_one(
            "SELECT reloptions FROM pg_class WHERE oid = 'crm.outbox'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        options.contains(&"autovacuum_vacuum_threshold=4321".to_owned()),
        "{options:?}"
    );
    // Then the migrations after the baseline run, as on any database of 0.1.0.
    let rest = result_of(&db.run(&["migrate"]));
    assert_eq!(names(&rest["Adopted"]), Vec::<String>::new());
    assert_eq!(names(&rest["Applied"]), files[BASELINE as usize..]);
    // And again: nothing to do.
    let again = result_of(&db.run(&["migrate"]));
    assert_eq!(names(&again["Adopted"]), Vec::<String>::new());
    assert_eq!(names(&again["Applied"]), Vec::<String>::new());
}

#[test]
fn a_database_of_the_release_before_last_is_adopted_up_to_its_files_and_the_rest_runs() {
    // 001–010, as a database the build of migrations 001–010 migrated.
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 10);
    let result = result_of(&db.run(&["migrate"]));
    let files = all_files();
    assert_eq!(names(&result["Adopted"]), files[..10]);
    assert_eq!(names(&result["Applied"]), files[10..]);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_migrations WHERE NOT adopted"
        ),
        MIGRATIONS.len() as i64 - 10
    );
}

#[test]
fn an_edited_shipped_migration_is_refused_with_78_naming_the_file_and_both_checksums() {
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(
        "UPDATE crm.booking_expiration_migrations SET checksum = repeat('ab', 32)
          WHERE version = 5",
    )
    .unwrap();
    let before = history(&mut c);
    for args in [&["migrate"][..], &["migrate", "--dry-run"]] {
        let run = db.run(args);
        assert_eq!(run.code, 78, "{args:?}: {}", run.stderr);
        let shipped = checksum(MIGRATIONS[4].sql);
        assert!(
            run.stderr.contains(&format!(
                "migration 005_outbox_failed_index.sql was applied with checksum {} but this \
                 binary's file has checksum {shipped}",
                "ab".repeat(32)
            )),
            "{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{}", run.stdout);
    }
    assert_eq!(history(&mut c), before, "nothing was recorded");
    let status = db.run(&["migrate", "status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let report: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(report["Migrations"][4]["State"], "changed");
    assert_eq!(report["Migrations"][3]["State"], "applied");
}

/// Everything in the database that a run could make: schemas, relations, roles' grants.
fn everything(c: &mut Client) -> i64 {
    count(
        c,
        "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'crm')
              + (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'crm')",
    )
}

#[test]
fn status_and_dry_run_change_nothing_and_list_what_they_should() {
    let db = TestDb::empty();
    let mut c = db.client();
    let status = db.run(&["migrate", "status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let report: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(report["SchemaVersion"], 0);
    assert_eq!(report["ExpectedVersion"], MIGRATIONS.len() as i64);
    let states: Vec<&str> = report["Migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["State"].as_str().unwrap())
        .collect();
    assert_eq!(states, vec!["pending"; MIGRATIONS.len()]);
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    for m in MIGRATIONS {
        assert!(
            dry.stdout.contains(&format!("would apply {} (", m.file)),
            "{}",
            dry.stdout
        );
    }
    assert!(
        dry.stdout
            .contains("  1/4 CREATE SCHEMA IF NOT EXISTS crm\n"),
        "{}",
        dry.stdout
    );
    assert_eq!(everything(&mut c), 0, "not even the history table");

    result_of(&db.run(&["migrate", "--target", "7"]));
    let made = everything(&mut c);
    let before = history(&mut c);
    assert_eq!(before.len(), 7);
    let status = db.run(&["migrate", "status"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    assert!(
        status.stdout.starts_with(&format!(
            "schema version 7 (this binary expects {})\n",
            MIGRATIONS.len()
        )),
        "{}",
        status.stdout
    );
    for m in MIGRATIONS {
        let state = if m.version <= 7 { "applied" } else { "pending" };
        assert!(
            status
                .stdout
                .lines()
                .any(|l| l.starts_with(m.file) && l.split_whitespace().nth(1) == Some(state)),
            "{} {state}:\n{}",
            m.file,
            status.stdout
        );
    }
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let would: Vec<&str> = dry
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("would apply "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let pending: Vec<&str> = MIGRATIONS
        .iter()
        .filter(|m| m.version > 7)
        .map(|m| m.file)
        .collect();
    assert_eq!(would, pending);
    assert_eq!(everything(&mut c), made);
    assert_eq!(history(&mut c), before);
    let bad = db.run(&["migrate", "--target", "0"]);
    assert_eq!(bad.code, 64, "{}", bad.stderr);
    assert!(bad.stderr.contains("--target"), "{}", bad.stderr);
}

fn policy() -> Policy {
    Policy {
        lock_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(60),
        index_timeout: Duration::from_secs(60),
        lock_wait: Duration::from_secs(60),
        retry_for: Duration::from_secs(60),
        stop_after: None,
    }
}

/// (valid, oid) of the index `crm.name`.
fn index(c: &mut Client, name: &str) -> Option<(bool, u32)> {
    c.query_opt(
        "SELECT i.indisvalid, i.indexrelid FROM pg_index i
          WHERE i.indexrelid = to_regclass($1)",
        &[&format!("crm.{name}")],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

#[test]
fn an_invalid_index_left_by_a_failed_build_is_dropped_and_built_again() {
    let db = TestDb::new();
    let mut c = db.client();
    insert_outbox_rows(&mut c, OutboxState::Pending, &[1, 1]);
    c.batch_execute("UPDATE crm.outbox SET aggregateid = 'same'")
        .unwrap();
    let build = "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ix_outbox_test_once \
                 ON crm.outbox (aggregateid)";
    // A build that fails (a duplicate) leaves the index INVALID ...
    let failed = c.batch_execute(&build.replace(" IF NOT EXISTS", ""));
    assert!(failed.is_err());
    let (valid, leftover) = index(&mut c, "ix_outbox_test_once").expect("the leftover");
    assert!(!valid);
    // ... that IF NOT EXISTS alone would skip; the runner drops it and builds it again.
    c.batch_execute("DELETE FROM crm.outbox WHERE seq = (SELECT max(seq) FROM crm.outbox)")
        .unwrap();
    let mut session = booking_expire::store::Session::from_driver(db.client());
    run_one(&mut session, None, build, "013_test.sql", &policy()).unwrap();
    let (valid, rebuilt) = index(&mut c, "ix_outbox_test_once").expect("the index");
    assert!(valid);
    assert_ne!(rebuilt, leftover, "a new index, not the leftover");
    // A valid one is left alone.
    run_one(&mut session, None, build, "013_test.sql", &policy()).unwrap();
    assert_eq!(index(&mut c, "ix_outbox_test_once"), Some((true, rebuilt)));
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

#[test]
fn a_statement_gives_up_its_lock_so_that_the_crm_never_queues_behind_it_and_retries_until_free() {
    let db = TestDb::empty();
    let mut c = db.client();
    result_of(&db.run(&["migrate", "--target", "7"]));
    // A session that reads crm.outbox in a long transaction: ALTER TABLE crm.outbox
    // (008) waits for it.
    let mut holder = db.client();
    holder
        .batch_execute("BEGIN; LOCK TABLE crm.outbox IN ACCESS SHARE MODE")
        .unwrap();
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
    let db = TestDb::empty();
    let mut c = db.client();
    result_of(&db.run(&["migrate", "--target", "7"]));
    let mut holder = db.client();
    holder
        .batch_execute("BEGIN; LOCK TABLE crm.outbox IN ACCESS SHARE MODE")
        .unwrap();
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
            let statements = booking_expire::store::migrate::statements(m.sql).unwrap();
            let k = statements
                .iter()
                .position(|s| s.starts_with("ALTER TABLE crm.outbox"))?;
            Some((m.file, k + 1, statements.len()))
        })
        .expect("a migration that alters crm.outbox")
}

/// The first shipped `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON
/// crm.table …`: (version, index, table).
fn first_concurrent_build() -> Option<(i32, String, String)> {
    MIGRATIONS.iter().find_map(|m| {
        booking_expire::store::migrate::statements(m.sql)
            .unwrap()
            .iter()
            .find_map(|s| {
                let words: Vec<&str> = s.split_whitespace().collect();
                let at = match words.as_slice() {
                    ["CREATE", "INDEX", "CONCURRENTLY", "IF", "NOT", "EXISTS", ..] => 6,
                    [
                        "CREATE",
                        "UNIQUE",
                        "INDEX",
                        "CONCURRENTLY",
                        "IF",
                        "NOT",
                        "EXISTS",
                        ..,
                    ] => 7,
                    _ => return None,
                };
                let table = words.get(at + 2)?.strip_prefix("crm.")?;
                Some((m.version, words[at].to_owned(), table.to_owned()))
            })
    })
}

#[test]
fn a_shipped_concurrent_build_that_failed_before_is_dropped_and_built_again_by_migrate() {
    // Until a shipped file builds an index concurrently there is nothing to see here
    // (the runner's part is the test above).
    let Some((version, name, table)) = first_concurrent_build() else {
        return;
    };
    assert_eq!(
        table, "bookings",
        "this test makes its leftover on crm.bookings"
    );
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(60), Seed::booked(120)]);
    c.batch_execute(&format!("DROP INDEX crm.{name}")).unwrap();
    // A build of that name that fails (two bookings share a status) leaves it INVALID.
    assert!(
        c.batch_execute(&format!(
            "CREATE UNIQUE INDEX CONCURRENTLY {name} ON crm.bookings (status)"
        ))
        .is_err()
    );
    let (valid, leftover) = index(&mut c, &name).expect("the leftover");
    assert!(!valid);
    c.execute(
        "DELETE FROM crm.booking_expiration_migrations WHERE version >= $1",
        &[&version],
    )
    .unwrap();
    let dry = db.run(&["migrate", "--dry-run"]);
    assert!(
        dry.stdout.contains(&format!(
            "      first drops the INVALID index crm.{name} an earlier build left\n"
        )),
        "--dry-run names the leftover: {}",
        dry.stdout
    );
    let run = db.run(&["migrate"]);
    let result = result_of(&run);
    assert!(
        names(&result["Applied"]).contains(&MIGRATIONS[version as usize - 1].file.to_owned()),
        "{result}"
    );
    assert!(
        run.stderr.contains(&format!("index crm.{name} is INVALID")),
        "{}",
        run.stderr
    );
    let (valid, rebuilt) = index(&mut c, &name).expect("the index");
    assert!(valid);
    assert_ne!(rebuilt, leftover);
    let def: String = c
        .query_one(
            "SELECT pg_get_indexdef(to_regclass($1))",
            &[&format!("crm.{name}")],
        )
        .unwrap()
        .get(0);
    assert!(
        !def.contains("UNIQUE") && !def.contains("(tenant_id)"),
        "{def}"
    );
}

#[test]
fn a_target_run_on_an_old_way_database_then_migrate_adopts_the_rest_of_the_baseline() {
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    // A DBA's setting on an object of 009, which running 009 again would reset.
    c.batch_execute("ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 5000)")
        .unwrap();
    let first = result_of(&db.run(&["migrate", "--target", "5"]));
    let files = all_files();
    assert_eq!(names(&first["Adopted"]), files[..5]);
    // The history now holds 1–5: the rest of the baseline is compared with what its
    // files make all the same, and adopted (not run again); the DBA's setting is kept,
    // and named.
    let kept = "009_operations.sql: storage parameter autovacuum_vacuum_threshold of \
                crm.outbox is 5000 where the file sets 1000: kept as it is";
    let dry = db.run(&["migrate", "--dry-run"]);
    assert!(
        dry.stdout
            .contains(&format!("would adopt, keeping the DBA's setting: {kept}\n"))
            && dry
                .stdout
                .contains("would adopt 009_operations.sql (what it makes is there"),
        "{}",
        dry.stdout
    );
    let run = db.run(&["migrate"]);
    let rest = result_of(&run);
    assert_eq!(names(&rest["Adopted"]), files[5..BASELINE as usize]);
    assert_eq!(names(&rest["Applied"]), files[BASELINE as usize..]);
    assert_eq!(
        warnings(&run.stderr)
            .iter()
            .filter(|l| l.contains(&format!("migrate: adopted, the DBA's setting kept: {kept}")))
            .count(),
        1,
        "{}",
        run.stderr
    );
    let options: Vec<String> = c
        .query_one(
            "SELECT reloptions FROM pg_class WHERE oid = 'crm.outbox'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        options.contains(&"autovacuum_vacuum_threshold=5000".to_owned()),
        "{options:?}"
    );
}

#[test]
fn a_file_that_must_run_again_where_it_would_reset_a_dbas_setting_is_refused() {
    // 009 sets the outbox's autovacuum thresholds and grants the relay its receipt
    // columns: with the grant revoked it must run again, which would reset the DBA's
    // threshold. Neither silently: 78 naming both.
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    c.batch_execute(
        "ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 5000);
         REVOKE UPDATE (delivered_offset) ON crm.outbox FROM crm_outbox_relay",
    )
    .unwrap();
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    let want = "009_operations.sql: storage parameter autovacuum_vacuum_threshold of crm.outbox \
                is 5000 where the file sets 1000: kept as it is; the file must run again \
                (privilege UPDATE on crm.outbox (delivered_offset) to crm_outbox_relay is not \
                granted), which would reset these settings of the DBA's";
    assert!(run.stderr.contains(want), "{}", run.stderr);
    assert!(!has_history(&mut c), "nothing was made");
    // The grant back by hand: 009 is adopted, the setting kept.
    c.batch_execute("GRANT UPDATE (delivered_offset) ON crm.outbox TO crm_outbox_relay")
        .unwrap();
    let done = result_of(&db.run(&["migrate"]));
    assert!(
        names(&done["Adopted"]).contains(&"009_operations.sql".to_owned()),
        "{done}"
    );
}

/// Whether the runner's history table exists.
fn has_history(c: &mut Client) -> bool {
    c.query_one(
        "SELECT to_regclass('crm.booking_expiration_migrations') IS NOT NULL",
        &[],
    )
    .unwrap()
    .get(0)
}

/// The lines of `stderr` logged at WARN.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(" WARN ")).collect()
}

#[test]
fn an_old_way_database_missing_a_column_and_a_grant_is_not_adopted_and_migrate_names_both() {
    // 0.1.0's database where a DBA dropped a column of 004 and revoked a column
    // privilege of 007: not adopted (what 004 makes is not there, and running it would
    // not add a column to the table that is there), refused before anything is made;
    // run-once says what is missing too.
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    c.batch_execute(
        "ALTER TABLE crm.booking_expiration_poison DROP COLUMN retry_at;
         REVOKE UPDATE (updated_at) ON crm.bookings FROM crm_booking_expiration_worker",
    )
    .unwrap();
    let column = "004_expiration_poison.sql: column crm.booking_expiration_poison.retry_at is \
                  missing (the file makes it timestamp with time zone NOT NULL; running the \
                  file again would not add it to the table that is there: add it back, ALTER \
                  TABLE crm.booking_expiration_poison ADD COLUMN retry_at timestamp with time \
                  zone NOT NULL)";
    let grant = "007_roles.sql: privilege UPDATE on crm.bookings (updated_at) to \
                 crm_booking_expiration_worker is not granted";
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "booking-expire: error: migrate cannot adopt what the old script made, nor run \
             the files again: "
        ) && run.stderr.contains(column)
            && run.stderr.contains(grant),
        "{}",
        run.stderr
    );
    assert!(!has_history(&mut c), "nothing was made");
    let once = db.run(&["run-once"]);
    assert_eq!(once.code, 78, "{}", once.stderr);
    assert!(
        once.stderr
            .contains("schema not migrated: missing column crm.booking_expiration_poison.retry_at"),
        "{}",
        once.stderr
    );
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout
            .contains("would refuse: migrate cannot adopt what the old script made")
            && dry.stdout.contains(column),
        "{}",
        dry.stdout
    );
    assert!(
        dry.stdout
            .contains(&format!("would not adopt, would run again: {grant}")),
        "{}",
        dry.stdout
    );
    // The column back as 004 makes it: 007 runs again (its grant back), the rest of the
    // baseline is adopted, and run-once works.
    c.batch_execute(
        "ALTER TABLE crm.booking_expiration_poison ADD COLUMN retry_at timestamptz NOT NULL",
    )
    .unwrap();
    let run = db.run(&["migrate"]);
    let done = result_of(&run);
    let files = all_files();
    let mut adopted = files[..BASELINE as usize].to_vec();
    adopted.remove(6);
    assert_eq!(names(&done["Adopted"]), adopted);
    let mut applied = vec![files[6].clone()];
    applied.extend_from_slice(&files[BASELINE as usize..]);
    assert_eq!(names(&done["Applied"]), applied);
    assert!(
        warnings(&run.stderr)
            .iter()
            .any(|l| l.contains(&format!("migrate: not adopted, runs again: {grant}"))),
        "{}",
        run.stderr
    );
    let once = db.run(&["run-once"]);
    assert_eq!(once.code, 0, "{}", once.stderr);
}

/// The job's index renamed by a DBA: its file runs again and builds the index under
/// the file's name, a second, identical one. `--dry-run` and the run name the twin.
#[test]
fn an_index_the_dba_renamed_is_named_by_dry_run_and_the_run_that_builds_its_twin() {
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    c.batch_execute("ALTER INDEX crm.ix_outbox_failed RENAME TO ix_outbox_failed_by_dba")
        .unwrap();
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(
            "      crm.ix_outbox_failed_by_dba has this definition under another name: a \
             second, identical index would be built\n"
        ),
        "{}",
        dry.stdout
    );
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        warnings(&run.stderr).iter().any(|l| l.contains(
            "migrate: crm.ix_outbox_failed_by_dba has the definition ix_outbox_failed builds, \
             under another name (renamed by hand?): building it makes a second, identical \
             index that every write of the table keeps up; drop one of the two afterwards"
        ) && l
            .contains("Migration=005_outbox_failed_index.sql")),
        "{}",
        run.stderr
    );
    // Built, beside the renamed one; the next run has nothing to say of it.
    let twins: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'crm'
                AND indexname IN ('ix_outbox_failed', 'ix_outbox_failed_by_dba')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(twins, 2);
    let again = db.run(&["migrate", "--dry-run"]);
    assert!(
        !again.stdout.contains("under another name"),
        "{}",
        again.stdout
    );
}

#[test]
fn an_old_way_index_recreated_under_the_files_name_on_other_columns_is_not_adopted() {
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 12);
    c.batch_execute(
        "DROP INDEX crm.ix_outbox_pending;
         CREATE INDEX ix_outbox_pending ON crm.outbox (occurred_at)",
    )
    .unwrap();
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    let want = "002_outbox.sql: index crm.ix_outbox_pending is `CREATE INDEX ix_outbox_pending \
                ON crm.outbox USING btree (occurred_at)` where the file makes `CREATE INDEX \
                ix_outbox_pending ON crm.outbox USING btree (seq) WHERE ((published_at IS \
                NULL) AND (failed_at IS NULL))`";
    assert!(run.stderr.contains(want), "{}", run.stderr);
    assert!(!has_history(&mut c), "nothing was made");
    // The DBA's index under a name of its own: 002 runs again and builds the job's.
    c.batch_execute("ALTER INDEX crm.ix_outbox_pending RENAME TO ix_outbox_dba_occurred_at")
        .unwrap();
    let run = db.run(&["migrate"]);
    let done = result_of(&run);
    assert!(
        names(&done["Applied"]).contains(&"002_outbox.sql".to_owned()),
        "{done}"
    );
    assert!(
        !names(&done["Adopted"]).contains(&"002_outbox.sql".to_owned()),
        "{done}"
    );
    assert!(
        warnings(&run.stderr).iter().any(|l| l.contains(
            "migrate: not adopted, runs again: 002_outbox.sql: index crm.ix_outbox_pending \
             does not exist"
        )),
        "{}",
        run.stderr
    );
    for (name, def) in [
        (
            "ix_outbox_pending",
            "CREATE INDEX ix_outbox_pending ON crm.outbox USING btree (seq) WHERE \
             ((published_at IS NULL) AND (failed_at IS NULL))",
        ),
        (
            "ix_outbox_dba_occurred_at",
            "CREATE INDEX ix_outbox_dba_occurred_at ON crm.outbox USING btree (occurred_at)",
        ),
    ] {
        let got: String = c
            .query_one(
                "SELECT pg_get_indexdef(to_regclass($1))",
                &[&format!("crm.{name}")],
            )
            .unwrap()
            .get(0);
        assert_eq!(got, def);
    }
}

#[test]
fn a_recorded_files_objects_changed_since_make_migrate_say_what_differs_not_nothing_to_do() {
    // Every file recorded, then a DBA dropped a column of 004 and revoked a column
    // privilege of 007: migrate does not run a recorded file again, and names both.
    let db = TestDb::new();
    let mut c = db.client();
    result_of(&db.run(&["migrate"]));
    c.batch_execute(
        "ALTER TABLE crm.booking_expiration_poison DROP COLUMN retry_at;
         REVOKE UPDATE (updated_at) ON crm.bookings FROM crm_booking_expiration_worker",
    )
    .unwrap();
    let want = "every migration is recorded, but the schema lacks what this binary's commands \
                need: schema not migrated: missing column crm.booking_expiration_poison.retry_at";
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains(want), "{}", run.stderr);
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!("would refuse: {want}")),
        "{}",
        dry.stdout
    );
    c.batch_execute(
        "ALTER TABLE crm.booking_expiration_poison ADD COLUMN retry_at timestamptz NOT NULL",
    )
    .unwrap();
    let revoked = "role crm_booking_expiration_worker lacks privileges for run-once: UPDATE on \
                   crm.bookings (updated_at)";
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains(revoked), "{}", run.stderr);
    assert!(!run.stderr.contains("retry_at"), "{}", run.stderr);
    c.batch_execute("GRANT UPDATE (updated_at) ON crm.bookings TO crm_booking_expiration_worker")
        .unwrap();
    let done = result_of(&db.run(&["migrate"]));
    assert_eq!(names(&done["Applied"]), Vec::<String>::new());
}

#[test]
fn the_path_through_0_1_0s_007_only_is_refused_with_the_steps_and_ends_as_a_fresh_database() {
    // 0.1.0's 003 made crm.booking_audit.version integer and its 008 changed it (a
    // rewrite under an ACCESS EXCLUSIVE lock): a database its script took through 007
    // only has integer, and no file of this binary changes it.
    let db = TestDb::empty();
    let mut c = db.client();
    let _one = migrate_the_old_way(&mut c, 7);
    let want = "003_audit_and_timeline.sql: column crm.booking_audit.version is integer NOT \
                NULL where the file makes it bigint NOT NULL (running the file again would not \
                change it; change it in a quiet moment: ALTER TABLE crm.booking_audit ALTER \
                COLUMN version TYPE bigint, which rewrites the table under an ACCESS EXCLUSIVE \
                lock; docs/guides/upgrading.md, \"A column of another type\")";
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains(want), "{}", run.stderr);
    assert!(!has_history(&mut c), "nothing was made");
    let dry = db.run(&["migrate", "--dry-run"]);
    assert!(dry.stdout.contains(want), "{}", dry.stdout);
    // The DBA's step, as the message and the guide say; then migrate adopts 001–007,
    // runs the rest, and the schema is a fresh database's.
    c.batch_execute("ALTER TABLE crm.booking_audit ALTER COLUMN version TYPE bigint")
        .unwrap();
    let run = db.run(&["migrate"]);
    let done = result_of(&run);
    let files = all_files();
    assert_eq!(names(&done["Adopted"]), files[..7]);
    assert_eq!(names(&done["Applied"]), files[7..]);
    assert!(warnings(&run.stderr).is_empty(), "{}", run.stderr);
    let fresh = TestDb::empty();
    result_of(&fresh.run(&["migrate"]));
    let snapshot = |c: &mut Client| booking_expire::store::migrate::catalog::snapshot(c).unwrap();
    let (ours, theirs) = (snapshot(&mut c), snapshot(&mut fresh.client()));
    let differ: Vec<_> = ours
        .iter()
        .filter(|(k, v)| theirs.get(*k) != Some(*v))
        .chain(theirs.iter().filter(|(k, _)| !ours.contains_key(*k)))
        .collect();
    assert!(differ.is_empty(), "{differ:?}");
    let (ours, theirs) = (
        crate::migrate_partial::dump(&db),
        crate::migrate_partial::dump(&fresh),
    );
    assert!(ours == theirs, "pg_dump --schema-only differs:\n{}", {
        let a: std::collections::BTreeSet<&str> = ours.lines().collect();
        let b: std::collections::BTreeSet<&str> = theirs.lines().collect();
        let mut d: Vec<String> = a.difference(&b).map(|l| format!("- {l}")).collect();
        d.extend(b.difference(&a).map(|l| format!("+ {l}")));
        d.join("\n")
    });
    let once = db.run(&["run-once"]);
    assert_eq!(once.code, 0, "{}", once.stderr);
}

#[test]
fn a_recorded_database_with_an_integer_audit_version_is_warned_with_the_statement() {
    // Adopted by an earlier build after 0.1.0's script took it through 007: every file
    // recorded, the column still integer. migrate runs nothing and says how to change it.
    let db = TestDb::new();
    let mut c = db.client();
    result_of(&db.run(&["migrate"]));
    c.batch_execute("ALTER TABLE crm.booking_audit ALTER COLUMN version TYPE integer")
        .unwrap();
    let run = db.run(&["migrate"]);
    let done = result_of(&run);
    assert_eq!(names(&done["Applied"]), Vec::<String>::new());
    assert!(
        warnings(&run.stderr).iter().any(|l| l.contains(
            "migrate: crm.booking_audit.version is integer where a fresh database has bigint"
        ) && l.contains(
            "ALTER TABLE crm.booking_audit ALTER COLUMN version TYPE bigint \
             (docs/guides/upgrading.md, \"A column of another type\")"
        )),
        "{}",
        run.stderr
    );
}
