//! What the server says during a migration reaches the operator: every NOTICE and
//! WARNING a statement raises is a WARN line naming the file and the statement, in text
//! and JSON logs. A migration whose purpose failed ends `migrate` with 78 and what the
//! DBA must run, and stays not done: 011's revoke of `pg_read_all_stats`, run by a
//! database owner without admin option on that role, is checked after the file (the
//! server's wording differs between majors), recorded partial, named by `backlog`, and
//! done by the next run once a superuser revoked it.

use crate::common;
use crate::postgres;

use booking_expire_store::migrate::MIGRATIONS;
use booking_expire_store::testing::migrate::statements;
use common::*;
use postgres::{Client, NoTls};
use serde_json::Value;

/// The place (`k/n`) of the statement of `file` whose text contains `needle`.
fn place(file: &str, needle: &str) -> String {
    let m = MIGRATIONS.iter().find(|m| m.file == file).unwrap();
    let all = statements(m.sql).unwrap();
    let k = all.iter().position(|s| s.contains(needle)).unwrap();
    format!("{}/{}", k + 1, all.len())
}

#[test]
fn a_notice_of_a_migration_is_a_warn_line_naming_file_and_statement_in_text_and_json() {
    let db = TestDb::empty();
    let run = db.run(&["migrate", "--target", "14"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The host's own row security on the shared outbox: 015 says it leaves it alone.
    db.client()
        .batch_execute("ALTER TABLE crm.outbox ENABLE ROW LEVEL SECURITY")
        .unwrap();
    let json = db.copy();
    let file = "015_outbox_row_security.sql";
    let at = place(file, "row security of its own");
    let said = "crm.outbox has row security of its own: its policies decide for the other roles";

    let text = db.run(&["migrate"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = text
        .stderr
        .lines()
        .find(|l| l.contains(said))
        .unwrap_or_else(|| panic!("no line of the notice:\n{}", text.stderr));
    assert!(
        line.contains(" WARN ")
            && line.contains(&format!(
                "migrate: the server said, at {file} statement {at}: NOTICE: {said}"
            ))
            && line.contains(&format!("Migration={file}"))
            && line.contains(&format!("Statement={at}"))
            && line.contains("Severity=NOTICE"),
        "{line}"
    );

    let run = json.run(&["--log-format", "json", "migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let entry: Value = run
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["msg"].as_str().is_some_and(|m| m.contains(said)))
        .unwrap_or_else(|| panic!("no JSON line of the notice:\n{}", run.stderr));
    assert_eq!(entry["level"], "WARN", "{entry}");
    assert_eq!(entry["Migration"], file, "{entry}");
    assert_eq!(entry["Statement"], at.as_str(), "{entry}");
    assert_eq!(entry["Severity"], "NOTICE", "{entry}");
}

#[test]
fn a_revoke_the_owner_may_not_make_ends_with_78_what_to_run_and_the_file_not_done() {
    // Role memberships are the cluster's: a server of the test's own, migrated by its
    // superuser (the job's roles made), where the read-only role is then given
    // pg_read_all_stats again, as 0.1.0's migration 10 did.
    let pg = OwnPostgres::start();
    let mut admin = Client::connect(&pg.url, NoTls).unwrap();
    for sql in [
        "CREATE ROLE crm_owner LOGIN",
        "CREATE DATABASE crm_owned OWNER crm_owner",
        "GRANT pg_read_all_stats TO crm_booking_expiration_readonly",
    ] {
        admin.batch_execute(sql).unwrap();
    }
    let url = with_database(&with_user(&pg.url, "crm_owner"), "crm_owned");
    let migrate = |args: &[&str]| {
        Run::of(
            std::process::Command::new(BIN)
                .args(args)
                .env_clear()
                .env("DATABASE_URL", &url)
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .output()
                .unwrap(),
        )
    };
    let file = "011_xmin_holders_function.sql";
    let run = migrate(&["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    // The file's own WARNING, shown (PostgreSQL 15: the REVOKE fails and the DO block
    // says so; from 16 the server may say it as a WARNING of its own).
    let at = place(file, "REVOKE pg_read_all_stats");
    assert!(
        run.stderr.lines().any(|l| l.contains(" WARN ")
            && l.contains(&format!(
                "migrate: the server said, at {file} statement {at}: WARNING: "
            ))
            && l.contains("pg_read_all_stats")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "booking-expire: error: migration {file} ran but did not do what it is for: the \
             read-only role crm_booking_expiration_readonly is still a member of \
             pg_read_all_stats, so it can read the SQL text of every session of the cluster"
        )) && run.stderr.contains("(migrate ran as crm_owner)")
            && run.stderr.contains(
                "Run as a superuser: REVOKE pg_read_all_stats FROM \
                 crm_booking_expiration_readonly; then run booking-expire migrate again"
            ),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    let mut c = Client::connect(&url, NoTls).unwrap();
    let versions: Vec<i32> = c
        .query(
            "SELECT version FROM crm.booking_expiration_migrations ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, (1..=10).collect::<Vec<_>>(), "011 is not done");
    let status = migrate(&["migrate", "status", "--json"]);
    let report: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(report["Migrations"][10]["State"], "partial", "{report}");
    assert_eq!(
        report["Migrations"][10]["Reason"],
        "crm_booking_expiration_readonly is still a member of pg_read_all_stats"
    );
    // backlog names it too.
    let backlog = migrate(&["backlog"]);
    assert!(
        backlog.stderr.contains(
            "the read-only role crm_booking_expiration_readonly is a member of \
             pg_read_all_stats: it can read the SQL text of every session of the cluster"
        ),
        "{}",
        backlog.stderr
    );

    // The DBA revokes it; the next run checks 011 again and goes on.
    admin
        .batch_execute("REVOKE pg_read_all_stats FROM crm_booking_expiration_readonly")
        .unwrap();
    let run = migrate(&["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    let applied: Vec<&str> = result["Applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let want: Vec<&str> = MIGRATIONS[10..].iter().map(|m| m.file).collect();
    assert_eq!(applied, want);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_migration_partial"
        ),
        0
    );
    let backlog = migrate(&["backlog"]);
    assert!(
        !backlog.stderr.contains("pg_read_all_stats"),
        "{}",
        backlog.stderr
    );
}
