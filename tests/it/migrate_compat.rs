//! Which schemas a binary may run on: each history row carries the oldest release that
//! works on the schema its file leaves (`works_from`). A history far ahead of this
//! binary (a row for version 99) that needs a newer release makes `run-once`,
//! `relay-outbox` and the operators' commands refuse with 78 naming the release, before
//! any work and as the job's own roles too; one whose release this binary still is
//! (one release behind) runs and says once that the schema is ahead. An unreleased
//! build says it is unreleased, in `--version` and in the history.

use crate::common;

use booking_expire_store::migrate::{MIGRATIONS, latest};
use common::*;

/// A history row of a migration this binary does not know, as a later release writes
/// it.
fn applied_ahead(db: &TestDb, version: i32, works_from: &str) {
    db.client()
        .execute(
            "INSERT INTO crm.booking_expiration_migrations
                    (version, name, checksum, release, duration_ms, adopted, works_from)
             VALUES ($1, $2, repeat('0', 64), $3, 1, false, $4)",
            &[
                &version,
                &format!("{version:03}_later.sql"),
                &format!("{works_from} (commit 0123456789ab)"),
                &works_from,
            ],
        )
        .unwrap();
}

#[test]
fn an_unreleased_build_says_so_in_its_version_and_in_the_history() {
    let version = Run::of(
        std::process::Command::new(BIN)
            .arg("--version")
            .env_clear()
            .output()
            .unwrap(),
    );
    assert_eq!(version.code, 0, "{}", version.stderr);
    let line = version.stdout.trim();
    let release = line
        .strip_prefix("booking-expire ")
        .and_then(|l| l.split(' ').next())
        .unwrap();
    let released = std::fs::read_to_string(repo().join("scripts/releases.tsv")).unwrap();
    let commit = line.split("(commit ").nth(1).unwrap().get(..12).unwrap();
    let this_is_a_release = released
        .lines()
        .any(|l| l.split('\t').nth(1).is_some_and(|c| c.starts_with(commit)));
    if !this_is_a_release {
        assert!(
            release.ends_with(&format!("-dev+{commit}")),
            "an unreleased build: {line}"
        );
        assert!(
            !released
                .lines()
                .any(|l| l.split('\t').next() == Some(release)),
            "{line}: never a released version"
        );
    }
    assert!(line.ends_with(&format!(", schema {})", latest())), "{line}");
    let db = TestDb::empty();
    let run = db.run(&["migrate", "--target", "2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows: Vec<(String, String)> = db
        .client()
        .query(
            "SELECT release, works_from FROM crm.booking_expiration_migrations ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        MIGRATIONS[..2]
            .iter()
            .map(|m| (
                format!("{release} (commit {commit})"),
                m.works_from.to_owned()
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_history_far_ahead_that_needs_a_newer_release_is_refused_with_78_by_every_command() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-300)]);
    applied_ahead(&db, 98, "0.1.0");
    applied_ahead(&db, 99, "9.0.0");
    let worker = LoginRole::member_of(&db, "job", "crm_booking_expiration_worker");
    let relay = LoginRole::member_of(&db, "relay", "crm_outbox_relay");
    let want = "is too old for the schema: migration 099_later.sql (version 99, applied by \
                9.0.0 (commit 0123456789ab)) needs release 9.0.0 or later; nothing was done \
                (deploy release 9.0.0 or later)";
    let commands: [&[&str]; 6] = [
        &["run-once"],
        &["relay-outbox", "--brokers", "127.0.0.1:9"],
        &["backlog"],
        &["dry-run", "--as-of", "2026-01-01T00:00:00Z"],
        &["pause", "run-once", "--reason", "compat test"],
        &[
            "republish",
            "--ids",
            "00000000-0000-0000-0000-000000000001",
            "--reason",
            "compat test",
        ],
    ];
    for args in commands {
        let run = db.run(args);
        assert_eq!(run.code, 78, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(want), "{args:?}: {}", run.stderr);
    }
    // The job's own roles read the history too (its grant).
    for (role, args) in [
        (&worker, &["run-once"][..]),
        (&relay, &["relay-outbox", "--brokers", "127.0.0.1:9"][..]),
    ] {
        let run = role.run(&db, args);
        assert_eq!(run.code, 78, "{} {args:?}: {}", role.name, run.stderr);
        assert!(run.stderr.contains(want), "{args:?}: {}", run.stderr);
    }
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_audit"),
        0,
        "nothing expired"
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.booking_expiration_pause"),
        0,
        "nothing paused"
    );
    // `migrate` leaves the rows it does not know as they are, and says so.
    let run = db.run(&["migrate", "--dry-run"]);
    assert!(
        run.stdout.contains(
            "left as it is: 099_later.sql (applied by release 9.0.0 (commit 0123456789ab)"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn a_binary_one_release_behind_the_schema_runs_and_says_once_that_the_schema_is_ahead() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-300), Seed::booked(-300)]);
    applied_ahead(&db, latest() + 1, "0.1.0");
    applied_ahead(&db, 99, "0.1.0");
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (1, 1, 0, 0));
    let ahead = format!(
        "the schema is ahead of this binary ({}",
        run.stderr
            .split("the schema is ahead of this binary (")
            .nth(1)
            .map_or("", |r| r.split(',').next().unwrap_or_default())
    );
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("the schema is ahead of this binary"))
        .collect();
    assert_eq!(lines.len(), 1, "once: {}", run.stderr);
    assert!(
        lines[0].contains(&format!(
            "which knows migrations 1 to {}): {:03}_later.sql (applied by 0.1.0 (commit \
             0123456789ab)), 099_later.sql (applied by 0.1.0 (commit 0123456789ab)); it works \
             on it (the oldest release that does: 0.1.0), so it runs",
            latest(),
            latest() + 1
        )) && lines[0].contains(&ahead),
        "{}",
        lines[0]
    );
    let backlog = db.run(&["backlog"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    assert!(
        backlog
            .stderr
            .contains("the schema is ahead of this binary"),
        "{}",
        backlog.stderr
    );
}
