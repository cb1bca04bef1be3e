//! A database with a history: an edited shipped file is refused naming both checksums,
//! status and --dry-run change nothing, a recorded file's objects changed since are
//! named, and an integer audit version is warned of.

use super::*;

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
