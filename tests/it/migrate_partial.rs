//! Partial runs: a `migrate` stopped between two statements of a file records the file
//! as partial (how many statements committed, when, by whom, by which release), `migrate
//! status` shows it, and the next run goes on from there. Interrupted at every statement
//! boundary of every shipped file (the tests' hook `BOOKING_EXPIRE_TEST_MIGRATE_STOP_AFTER`
//! stops a run after so many statements, as a signal would), one statement per run, the
//! database ends with the same `pg_dump --schema-only` and the same history as one
//! migrated in one run.

use crate::common;

use std::process::Command;

use booking_expire_store::migrate::{MIGRATIONS, checksum};
use booking_expire_store::testing::migrate::statements;
use common::*;
use serde_json::Value;

const STOP_AFTER: &str = "BOOKING_EXPIRE_TEST_MIGRATE_STOP_AFTER";

/// The schema as `pg_dump --schema-only` prints it, without what differs between two
/// dumps of one schema (PostgreSQL 17.6+'s `\restrict` keys).
pub(crate) fn dump(db: &TestDb) -> String {
    let bindir = booking_expire_testbed::postgres::bindir().expect("the PostgreSQL binaries");
    let out = Command::new(bindir.join("pg_dump"))
        .args(["--schema-only", "--no-comments", "--dbname", &db.url])
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The history as a clean run and an interrupted one must agree on it: version, name,
/// checksum, adopted, works_from, release.
fn history(db: &TestDb) -> Vec<(i32, String, String, bool, String, String)> {
    db.client()
        .query(
            "SELECT version, name, checksum, adopted, works_from, release
               FROM crm.booking_expiration_migrations ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

fn partial_rows(db: &TestDb) -> Vec<(i32, i32, i32)> {
    db.client()
        .query(
            "SELECT version, done, statements FROM crm.booking_expiration_migration_partial
              ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn a_run_interrupted_at_every_statement_boundary_converges_to_a_clean_runs_schema_and_history() {
    let clean = TestDb::empty();
    let run = clean.run(&["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (clean_dump, clean_history) = (dump(&clean), history(&clean));
    assert_eq!(clean_history.len(), MIGRATIONS.len());
    assert!(
        clean_history
            .iter()
            .all(|h| h.5.contains("-dev+") || !h.5.contains("commit")),
        "an unreleased build's release says so: {clean_history:?}"
    );

    // Every boundary, in order: (file index, statements before it, statements of it).
    let mut boundaries = Vec::new();
    for (i, m) in MIGRATIONS.iter().enumerate() {
        let n = statements(m.sql).unwrap().len();
        for k in 1..=n {
            boundaries.push((i, k, n));
        }
    }
    let db = TestDb::empty();
    for (b, &(i, k, n)) in boundaries.iter().enumerate() {
        let m = &MIGRATIONS[i];
        let run = Run::of(
            db.command(&["migrate"])
                .env(STOP_AFTER, "1")
                .output()
                .expect("run migrate"),
        );
        let last = b + 1 == boundaries.len();
        if last {
            assert_eq!(
                run.code, 0,
                "the last statement ends the run:\n{}",
                run.stderr
            );
            break;
        }
        assert_eq!(
            run.code, 75,
            "{} statement {k}/{n}: stopped after it\n{}",
            m.file, run.stderr
        );
        assert!(
            run.stderr
                .contains("migrate: stopped by a signal; what committed stays"),
            "{}",
            run.stderr
        );
        let done_versions = history(&db).len();
        // A file without statements (010 makes nothing any more) is applied as soon as
        // the file before it is.
        let empty_after = MIGRATIONS[i + 1..]
            .iter()
            .take_while(|m| statements(m.sql).unwrap().is_empty())
            .count();
        if k < n {
            // Inside a file: the file is partial at k of n, nothing after it is applied.
            assert_eq!(
                partial_rows(&db),
                [(m.version, k as i32, n as i32)],
                "{} after statement {k}/{n}",
                m.file
            );
            assert_eq!(done_versions, i, "{} after statement {k}/{n}", m.file);
        } else {
            // At a file's end: it is applied, no partial row is left.
            assert_eq!(partial_rows(&db), [], "{} after its last statement", m.file);
            assert_eq!(done_versions, i + 1 + empty_after, "{}", m.file);
        }
        // Sampled, `migrate status` says so too (every file once, in its middle).
        if k == n.div_ceil(2) && k < n {
            let status = db.run(&["migrate", "status", "--json"]);
            assert_eq!(status.code, 0, "{}", status.stderr);
            let report: Value = serde_json::from_str(status.stdout.trim()).unwrap();
            let row = &report["Migrations"][i];
            assert_eq!(row["State"], "partial", "{row}");
            assert_eq!(
                (row["StatementsDone"].clone(), row["Statements"].clone()),
                (Value::from(k), Value::from(n)),
                "{row}"
            );
            assert!(
                row["AppliedBy"].is_string() && row["AppliedAt"].is_string(),
                "{row}"
            );
            assert_eq!(report["SchemaVersion"], i as i64, "{report}");
            let text = db.run(&["migrate", "status"]);
            assert!(
                text.stdout.contains(&format!(
                    "  {k} of {n} statements done; the next run goes on from there"
                )),
                "{}",
                text.stdout
            );
        }
    }
    assert_eq!(partial_rows(&db), []);
    let got = history(&db);
    assert_eq!(got, clean_history, "the same history as a clean run");
    for (row, m) in got.iter().zip(MIGRATIONS) {
        assert_eq!(row.2, checksum(m.sql), "{}", m.file);
    }
    assert_eq!(dump(&db), clean_dump, "the same schema as a clean run");
}

#[test]
fn a_resumed_file_goes_on_after_the_last_statement_that_committed_and_dry_run_says_so() {
    let db = TestDb::empty();
    // 001 has several statements: stop after its second.
    let m = &MIGRATIONS[0];
    let n = statements(m.sql).unwrap().len();
    assert!(n > 2, "{}: {n} statements", m.file);
    let run = Run::of(
        db.command(&["migrate"])
            .env(STOP_AFTER, "2")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 75, "{}", run.stderr);
    let dry = db.run(&["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let first = dry.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("would resume (begun ")
            && first.ends_with(&format!(
                ": 2 of {n} statements done) {} ({n} statements)",
                m.file
            )),
        "{}",
        dry.stdout
    );
    let listed: Vec<&str> = dry
        .stdout
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(
        listed
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect::<Vec<_>>(),
        (3..=n).map(|k| format!("{k}/{n}")).collect::<Vec<_>>(),
        "only what is left: {}",
        dry.stdout
    );
    let run = Run::of(db.command(&["migrate"]).output().unwrap());
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("migrate: file resumed after statement 2/{n}")),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr
            .contains(&format!("Migration={} Statement=2/{n}", m.file)),
        "statement 2 ran not again: {}",
        run.stderr
    );
    assert_eq!(history(&db).len(), MIGRATIONS.len());
    assert_eq!(partial_rows(&db), []);
}
