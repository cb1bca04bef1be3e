//! Exit codes, bad input, secrets, timeouts and signals of `run-once`.

use crate::common;
use crate::postgres;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn bin(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::of(cmd.output().unwrap())
}

#[test]
fn help_documents_the_exit_codes_and_exits_0() {
    for args in [&["--help"][..], &["run-once", "--help"][..]] {
        let run = bin(args, &[]);
        assert_eq!(run.code, 0);
        for code in ["64", "69", "75", "78", "130", "143"] {
            assert!(
                run.stdout.contains(&format!("  {code} ")),
                "{code} missing:\n{}",
                run.stdout
            );
        }
    }
    assert_eq!(bin(&["--version"], &[]).code, 0);
}

#[test]
fn bad_flags_exit_64_naming_the_input_and_touch_nothing() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60)]);
    let before = checksum(&mut c);
    let cases: &[(&[&str], &str)] = &[
        (&["run-once", "--batch-size", "0"], "--batch-size"),
        (&["run-once", "--batch-size", "10001"], "10001"),
        (&["run-once", "--batch-size", "abc"], "abc"),
        (&["run-once", "--batch-size", ""], "--batch-size"),
        (
            &["run-once", "--batch-size", "1; DROP TABLE crm.bookings"],
            "--batch-size",
        ),
        (&["run-once", "--max-batches", "0"], "--max-batches"),
        (&["run-once", "--deadline", "forever"], "--deadline"),
        (&["run-once", "--deadline", "11m"], "allowed 1s to 10m"),
        (
            &["run-once", "--lock-timeout", "5"],
            "expected a whole number with a unit",
        ),
        (&["run-once", "--as-of", "2026-11-29T18:00:00Z"], "--as-of"),
        (&["run-once", "--log-format", "xml"], "xml"),
        (&["expire-everything"], "expire-everything"),
        (&[], "Usage"),
    ];
    for (args, needle) in cases {
        let run = bin(args, &[("DATABASE_URL", &db.url)]);
        assert_eq!(run.code, 64, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "{args:?}: no {needle:?} in {}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{args:?}");
    }
    assert_eq!(
        checksum(&mut c),
        before,
        "a usage error must not touch the database"
    );
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let run = bin(
        &["run-once"],
        &[
            ("DATABASE_URL", "postgres://u@127.0.0.1:1/db"),
            ("BOOKING_EXPIRATION_BATCH_SIZE", "lots"),
        ],
    );
    assert_eq!(run.code, 64);
    assert!(
        run.stderr.contains("BOOKING_EXPIRATION_BATCH_SIZE"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("lots"), "{}", run.stderr);
    let run = bin(
        &["run-once"],
        &[
            ("DATABASE_URL", "postgres://u@127.0.0.1:1/db"),
            ("LOG_FORMAT", "yaml"),
        ],
    );
    assert_eq!(run.code, 64);
    assert!(run.stderr.contains("LOG_FORMAT"), "{}", run.stderr);
}

#[test]
fn configuration_errors_exit_78_before_connecting() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[], "set --database-url or DATABASE_URL"),
        (
            &[("DATABASE_URL", "")],
            "set --database-url or DATABASE_URL",
        ),
        (
            &[("DATABASE_URL", "postgres://u@h/db?bogus=1")],
            "unknown parameter `bogus`",
        ),
        (
            &[("DATABASE_URL", "postgres://u@h/db?sslmode=sometimes")],
            "use disable, prefer, require, verify-ca or verify-full",
        ),
        (
            &[("DATABASE_URL", "postgres://u@h:99999/db")],
            "--database-url",
        ),
        (&[("DATABASE_URL", "postgres:///db")], "no host"),
        (
            &[(
                "DATABASE_URL",
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            )],
            "cannot read the database CA file /nonexistent/ca.pem",
        ),
        (
            &[
                ("DATABASE_URL", "postgres://u@h/db"),
                ("PGSSLROOTCERT", "/nonexistent/ca.pem"),
            ],
            "cannot read the database CA file /nonexistent/ca.pem",
        ),
    ];
    for (env, needle) in cases {
        let started = Instant::now();
        let run = bin(&["run-once"], env);
        assert_eq!(run.code, 78, "{env:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(needle),
            "{env:?}: no {needle:?} in {}",
            run.stderr
        );
        // Behaviour: a configuration fault exits before any connection attempt (whose
        // default timeout is 5 s).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no connection attempt"
        );
    }
}

#[test]
fn a_ca_file_that_is_not_pem_is_a_configuration_error() {
    let dir = std::env::temp_dir().join(format!("be-ca-{}", uuid::Uuid::new_v4()));
    std::fs::write(&dir, "not a certificate").unwrap();
    let run = bin(
        &["run-once", "--database-ca-file", dir.to_str().unwrap()],
        &[("DATABASE_URL", "postgres://u@h/db?sslmode=verify-full")],
    );
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("is not a PEM certificate"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_database_without_the_schema_exits_78_naming_what_is_missing() {
    let db = TestDb::empty();
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("schema not migrated: missing table crm.bookings"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("table crm.outbox"), "{}", run.stderr);
    assert!(run.stdout.is_empty());

    // A partly migrated one names the missing column.
    let db = TestDb::new();
    db.client()
        .batch_execute("ALTER TABLE crm.outbox DROP COLUMN failed_at")
        .unwrap();
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 78);
    assert!(
        run.stderr
            .contains("schema not migrated: missing column crm.outbox.failed_at"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unknown_database_is_a_configuration_error() {
    let db = TestDb::new();
    let url = with_database(&db.url, "no_such_database_here");
    let run = bin(&["run-once"], &[("DATABASE_URL", &url)]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot connect to PostgreSQL"),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unreachable_database_exits_69_and_never_shows_the_password() {
    // A port nothing listens on (by IP, by name, in key/value form): refused at once.
    let secret = "S3cr3t-pa55word";
    for (url, timeout, target) in [
        (
            format!("postgres://crm_worker:{secret}@127.0.0.1:1/crm"),
            "60s",
            "127.0.0.1:1",
        ),
        (
            format!("postgresql://crm_worker:{secret}@localhost:1/crm?sslmode=require"),
            "60s",
            "localhost:1",
        ),
        (
            format!("host=127.0.0.1 port=1 user=crm_worker password={secret} dbname=crm"),
            "60s",
            "127.0.0.1:1",
        ),
    ] {
        for format in ["text", "json"] {
            let started = Instant::now();
            let run = bin(
                &["run-once", "--connect-timeout", timeout],
                &[("DATABASE_URL", &url), ("LOG_FORMAT", format)],
            );
            assert_eq!(run.code, 69, "{url}: {}", run.stderr);
            // Behaviour: a refused port fails at once, not after the connect timeout
            // (60 s); 30 s tells the two apart under load.
            let took = started.elapsed();
            assert!(took < Duration::from_secs(30), "{url}: took {took:?}");
            // Where it tried, so a wrong host or port is seen at once; never who.
            assert!(
                run.stderr
                    .contains(&format!("cannot connect to PostgreSQL at {target}: ")),
                "{}",
                run.stderr
            );
            assert!(
                !run.stderr.contains(secret),
                "password leaked: {}",
                run.stderr
            );
            assert!(!run.stdout.contains(secret));
        }
    }
    // Also when the URL came from the flag, and in --help output with the env set.
    let url = format!("postgres://crm_worker:{secret}@127.0.0.1:1/crm");
    let run = bin(&["run-once", "--database-url", &url], &[]);
    assert_eq!(run.code, 69);
    assert!(!run.stderr.contains(secret));
    let run = bin(&["run-once", "--help"], &[("DATABASE_URL", &url)]);
    assert!(!run.stdout.contains(secret), "{}", run.stdout);
}

/// Makes the batch write block on a lock in the middle of its statement, after the
/// bookings are claimed and updated: a trigger on the deal timeline waits for an
/// advisory lock that the returned session holds until it is dropped or unlocks.
fn block_the_write(db: &TestDb) -> postgres::Client {
    let mut blocker = db.client();
    blocker
        .batch_execute(
            "CREATE FUNCTION crm.wait_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$;
             CREATE TRIGGER wait_for_test AFTER INSERT ON crm.deal_timeline
               FOR EACH STATEMENT EXECUTE FUNCTION crm.wait_for_test();
             SELECT pg_advisory_lock(4242);",
        )
        .unwrap();
    blocker
}

fn backend_waiting_on_a_lock(c: &mut postgres::Client, db: &TestDb) -> bool {
    count(
        c,
        &format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}'
               AND application_name = 'booking-expire' AND wait_event_type = 'Lock'",
            db.name
        ),
    ) == 1
}

fn locks_held_by_the_job(c: &mut postgres::Client, db: &TestDb) -> i64 {
    count(
        c,
        &format!(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE a.datname = '{}' AND a.application_name = 'booking-expire'",
            db.name
        ),
    )
}

#[test]
fn a_lock_timeout_rolls_the_batch_back_and_exits_75() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 5, |_| Seed::booked(-60));
    let before = checksum(&mut c);
    let mut blocker = block_the_write(&db);
    let run = db.run(&["run-once", "--lock-timeout", "300ms"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
    blocker
        .batch_execute("SELECT pg_advisory_unlock(4242)")
        .unwrap();
    assert_eq!(checksum(&mut c), before, "nothing of the batch survived");
    // The next cycle completes.
    assert_eq!(db.run_once(&[]).counts(), (0, 5, 0, 0));
}

#[test]
fn a_statement_timeout_rolls_the_batch_back_and_exits_75() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 3, |_| Seed::reserved(-60));
    slow_outbox_writes(&mut c, 2.0);
    let before = checksum(&mut c);
    let run = db.run(&["run-once", "--statement-timeout", "500ms"]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert_eq!(checksum(&mut c), before);
}

fn signal_while_the_write_is_blocked(signal: &str, want_code: i32) {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 50, |i| Seed::booked(-600 + i as i64));
    let before = checksum(&mut c);
    let mut blocker = block_the_write(&db);
    let child = spawn(db.command(&["run-once", "--lock-timeout", "30s"]));
    wait_until(
        Duration::from_secs(90),
        "the batch write to block on the lock",
        || backend_waiting_on_a_lock(&mut c, &db),
    );
    let signalled = Instant::now();
    send_signal(&child, signal);
    let run = Run::of(child.wait_with_output().unwrap());
    // Behaviour: the signal ends the wait for the lock, long before --lock-timeout
    // (30 s); 20 s tells the two apart under load.
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "exited promptly: {:?}",
        signalled.elapsed()
    );
    assert_eq!(run.code, want_code, "{}", run.stderr);
    assert!(run.stderr.contains("rolled back"), "{}", run.stderr);
    blocker
        .batch_execute("SELECT pg_advisory_unlock(4242)")
        .unwrap();
    // Rolled back whole: nothing changed, no lock left, every row claimable again.
    assert_eq!(checksum(&mut c), before);
    wait_until(Duration::from_secs(90), "the job's backend to go", || {
        locks_held_by_the_job(&mut c, &db) == 0
    });
    let mut tx = c.transaction().unwrap();
    let lockable = tx
        .query(
            "SELECT id FROM crm.bookings WHERE id = ANY($1) FOR UPDATE NOWAIT",
            &[&ids],
        )
        .unwrap();
    assert_eq!(lockable.len(), 50);
}

#[test]
fn sigterm_during_a_blocked_write_rolls_back_and_exits_143() {
    signal_while_the_write_is_blocked("TERM", 143);
}

#[test]
fn sigint_during_a_blocked_write_rolls_back_and_exits_130() {
    signal_while_the_write_is_blocked("INT", 130);
}

#[test]
fn sigterm_between_batches_lets_the_batch_in_flight_commit_whole() {
    let db = TestDb::new();
    let mut c = db.client();
    // Many small batches, each slowed by a trigger so the signal lands mid-cycle.
    seed_many(&mut c, 60, |i| Seed::booked(-600 + i as i64));
    slow_outbox_writes(&mut c, 0.3);
    let child = spawn(db.command(&["run-once", "--batch-size", "5", "--max-batches", "12"]));
    wait_until(Duration::from_secs(90), "the first batch to commit", || {
        count(&mut c, "SELECT count(*) FROM crm.outbox") > 0
    });
    send_signal(&child, "TERM");
    let run = Run::of(child.wait_with_output().unwrap());
    assert_eq!(run.code, 143, "{}", run.stderr);
    let expired = count(
        &mut c,
        "SELECT count(*) FROM crm.bookings WHERE status = 'BookingExpired'",
    );
    assert!(expired < 60, "stopped before the end");
    assert_eq!(expired % 5, 0, "only whole batches: {expired}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), expired);
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_audit"),
        expired
    );
    wait_until(Duration::from_secs(90), "the job's backend to go", || {
        locks_held_by_the_job(&mut c, &db) == 0
    });
}

#[test]
fn the_deadline_cancels_a_blocked_batch_and_exits_75() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 10, |_| Seed::reserved(-60));
    let before = checksum(&mut c);
    let mut blocker = block_the_write(&db);
    let started = Instant::now();
    let run = db.run(&[
        "run-once",
        "--deadline",
        "2s",
        "--lock-timeout",
        "60s",
        "--statement-timeout",
        "60s",
    ]);
    let took = started.elapsed();
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("the cycle deadline of 2000ms passed mid-batch"),
        "{}",
        run.stderr
    );
    // Behaviour: the deadline (2 s) ends the run, not the 60 s timeouts; 30 s tells the
    // two apart under load.
    assert!(
        took < Duration::from_secs(30),
        "ended near its deadline: {took:?}"
    );
    blocker
        .batch_execute("SELECT pg_advisory_unlock(4242)")
        .unwrap();
    assert_eq!(checksum(&mut c), before);
}
