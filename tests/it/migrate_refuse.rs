//! Refusals before any change: a role that cannot do what the pending migrations need
//! (here: it may create in schema `crm` but owns neither `crm.bookings` nor
//! `crm.outbox`) is refused with 78 naming each missing privilege and the role that has
//! it, before it makes or records anything, the history table included, so the real
//! owner is never locked out of a history another role made; `--dry-run` says the same.

use crate::common;

use booking_expire_store::migrate::MIGRATIONS;
use booking_expire_store::testing::migrate::BASELINE;
use common::*;

/// Whether the runner's tables exist.
fn runner_tables(db: &TestDb) -> i64 {
    count(
        &mut db.client(),
        "SELECT count(*) FROM pg_class
          WHERE oid IN (to_regclass('crm.booking_expiration_migrations'),
                        to_regclass('crm.booking_expiration_migration_partial'))",
    )
}

#[test]
fn a_role_that_owns_nothing_is_refused_before_any_change_and_the_owner_then_migrates() {
    let db = TestDb::empty();
    // A database of 0.1.0's files, without a history (as the old script left it).
    let target = BASELINE.to_string();
    let run = db.run(&["migrate", "--target", &target]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    db.client()
        .batch_execute(
            "DROP TABLE crm.booking_expiration_migrations, crm.booking_expiration_migration_partial",
        )
        .unwrap();
    let owner = db.user();
    let stranger = LoginRole::new(&db, "nonowner", "");
    db.client()
        .batch_execute(&format!(
            "GRANT USAGE, CREATE ON SCHEMA crm TO {}",
            stranger.name
        ))
        .unwrap();

    let want = |table: &str| {
        format!(
            "it does not own crm.{table} (its owner is {owner}: run migrate as {owner}, or as \
             a member of it that inherits its privileges)"
        )
    };
    let run = stranger.run(&db, &["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "booking-expire: error: migrate cannot apply the pending migrations: role {}: {}; \
             role {}: {}; nothing was done (not even the history table)",
            stranger.name,
            want("bookings"),
            stranger.name,
            want("outbox")
        )),
        "{}",
        run.stderr
    );
    assert_eq!(runner_tables(&db), 0, "nothing made");

    let dry = stranger.run(&db, &["migrate", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout
            .starts_with("would refuse: migrate cannot apply the pending migrations: role "),
        "{}",
        dry.stdout
    );
    assert!(dry.stdout.contains(&want("outbox")), "{}", dry.stdout);

    // The owner's run is not locked out: it adopts the baseline and applies the rest.
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let status = db.run(&["migrate", "status", "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let report: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(report["SchemaVersion"], MIGRATIONS.len() as i64, "{report}");
}
