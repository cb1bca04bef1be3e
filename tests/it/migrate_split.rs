//! The splitter and the classifier (PostgreSQL's own scanner and grammar, libpg_query)
//! on a real server: the inputs a hand lexer used to get wrong. `CREATE /* … */ INDEX
//! CONCURRENTLY` and a quoted index name with a space are index builds (an INVALID
//! leftover of an earlier build dropped and built again); a `BEGIN ATOMIC … ; … END`
//! body is one statement that the server takes; a comment or a string a file does not
//! close, and a statement the grammar refuses, refuse the file naming it and the line,
//! before any of it runs; and a history whose checksums are those of a CRLF checkout's
//! raw bytes is accepted as it is.

use crate::common;
use crate::postgres;

use std::time::Duration;

use booking_expire_store::Session;
use booking_expire_store::migrate::{MIGRATIONS, Migration, Policy, split};
use booking_expire_store::testing::migrate::{run_one, statements};
use common::*;
use postgres::Client;

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

/// (valid, oid) of the index `crm."name"`.
fn index(c: &mut Client, name: &str) -> Option<(bool, u32)> {
    c.query_opt(
        "SELECT i.indisvalid, i.indexrelid FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid
          WHERE c.relname = $1 AND c.relnamespace = 'crm'::regnamespace",
        &[&name],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

#[test]
fn a_commented_build_and_a_quoted_name_with_a_space_get_the_invalid_check() {
    let db = TestDb::new();
    let mut c = db.client();
    for (name, build) in [
        (
            "ix_split_commented",
            "CREATE /* online */ UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ix_split_commented \
             ON crm.outbox (aggregateid)",
        ),
        (
            "Ix C",
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS \"Ix C\" ON crm.outbox (aggregateid)",
        ),
    ] {
        c.batch_execute("DELETE FROM crm.outbox").unwrap();
        insert_outbox_rows(&mut c, OutboxState::Pending, &[1, 1]);
        c.batch_execute("UPDATE crm.outbox SET aggregateid = 'same'")
            .unwrap();
        // A build that fails (a duplicate) leaves the index INVALID ...
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        assert!(
            c.batch_execute(&format!(
                "CREATE UNIQUE INDEX CONCURRENTLY {quoted} ON crm.outbox (aggregateid)"
            ))
            .is_err()
        );
        let (valid, leftover) = index(&mut c, name).expect("the leftover");
        assert!(!valid, "{name}");
        c.batch_execute("DELETE FROM crm.outbox WHERE seq = (SELECT max(seq) FROM crm.outbox)")
            .unwrap();
        // ... which the runner finds by the statement's name and builds again.
        let mut session = Session::from_driver(db.client());
        run_one(&mut session, None, build, "099_split_test.sql", &policy()).unwrap();
        let (valid, rebuilt) = index(&mut c, name).expect("the index");
        assert!(valid, "{name}");
        assert_ne!(rebuilt, leftover, "{name}: a new index, not the leftover");
        c.batch_execute(&format!("DROP INDEX crm.{quoted}"))
            .unwrap();
    }
}

#[test]
fn a_begin_atomic_body_is_one_statement_the_server_takes() {
    let db = TestDb::new();
    let mut c = db.client();
    let file = "-- A SQL-standard body: its ;s end no statement.\n\
                CREATE OR REPLACE FUNCTION crm.split_test_sign(a integer) RETURNS integer\n\
                LANGUAGE sql\n\
                BEGIN ATOMIC\n\
                \x20   SELECT 0;\n\
                \x20   SELECT CASE WHEN a > 0 THEN 1 WHEN a < 0 THEN -1 ELSE 0 END;\n\
                END;\n\
                SELECT crm.split_test_sign(-5);\n";
    let all = statements(file).unwrap();
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[0].starts_with("CREATE OR REPLACE FUNCTION") && all[0].ends_with("END"));
    let mut session = Session::from_driver(db.client());
    for s in &all {
        run_one(&mut session, None, s, "099_split_test.sql", &policy()).unwrap();
    }
    let sign: i32 = c
        .query_one("SELECT crm.split_test_sign(7)", &[])
        .unwrap()
        .get(0);
    assert_eq!(sign, 1);
}

/// A file of the runner's, as `sql/` would ship it.
fn file(sql: &'static str) -> &'static Migration {
    Box::leak(Box::new(Migration {
        version: 99,
        file: "099_split_test.sql",
        sql,
        works_from: "0.1.0",
    }))
}

#[test]
fn a_comment_or_string_a_file_does_not_close_refuses_it_naming_file_and_line() {
    let db = TestDb::new();
    let mut c = db.client();
    // What the hand lexer did with an open /*: the rest of the file dropped, the index
    // never built, the file recorded. PostgreSQL's scanner refuses it, and so does psql.
    for (sql, message) in [
        (
            "SELECT 1;\n/* online\nCREATE INDEX CONCURRENTLY ix_split_never ON crm.outbox (seq);\n",
            "migration 099_split_test.sql: unterminated comment /* opened on line 2: the rest of \
             the file would be part of it; nothing of it ran",
        ),
        (
            "SELECT 1;\nCOMMENT ON TABLE crm.outbox IS 'the job''s;\nSELECT 2;\n",
            "migration 099_split_test.sql: unterminated string ' opened on line 2: the rest of \
             the file would be part of it; nothing of it ran",
        ),
        (
            "SELECT 1;\n\nDO $body$ BEGIN PERFORM 1; END $$;\n",
            "migration 099_split_test.sql: unterminated $body$ body opened on line 3: the rest \
             of the file would be part of it; nothing of it ran",
        ),
        (
            "SELECT 1;\n-- a typo\nCREATE INDX ix_split_never ON crm.outbox (seq);\n",
            "migration 099_split_test.sql: the statement on line 3 is not SQL PostgreSQL's \
             grammar accepts: syntax error at or near \"INDX\"; nothing of it ran",
        ),
    ] {
        let err = split(file(sql)).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    // The server agrees that the file is not SQL: it refuses it whole.
    let unclosed =
        "SELECT 1;\n/* online\nCREATE INDEX CONCURRENTLY ix_split_never ON crm.outbox (seq);\n";
    let refused = c.batch_execute(unclosed).unwrap_err();
    assert_eq!(
        refused.as_db_error().map(|e| e.message()),
        Some(
            "unterminated /* comment at or near \"/* online\nCREATE INDEX CONCURRENTLY ix_split_never ON crm.outbox (seq);\n\""
        ),
        "{refused:?}"
    );
    assert!(index(&mut c, "ix_split_never").is_none());
}

#[test]
fn a_history_of_a_crlf_checkouts_raw_checksums_is_accepted_as_it_is() {
    let db = TestDb::new();
    let mut c = db.client();
    // What a binary built from a CRLF checkout recorded before the normalisation.
    for m in MIGRATIONS {
        c.execute(
            "UPDATE crm.booking_expiration_migrations
                SET checksum = encode(sha256(convert_to($2, 'UTF8')), 'hex')
              WHERE version = $1",
            &[&m.version, &m.sql.replace('\n', "\r\n")],
        )
        .unwrap();
    }
    let run = db.run(&["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("\"Applied\":[]") && run.stdout.contains("\"Adopted\":[]"),
        "{}",
        run.stdout
    );
    let status = db.run(&["migrate", "status", "--json"]);
    let report: serde_json::Value = serde_json::from_str(status.stdout.trim()).unwrap();
    for row in report["Migrations"].as_array().unwrap() {
        assert_eq!(row["State"], "applied", "{row}");
    }
}

#[test]
fn a_concurrent_build_waiting_for_an_old_transaction_says_what_it_waits_for() {
    let db = TestDb::empty();
    // A transaction with a snapshot older than the build: CREATE INDEX CONCURRENTLY
    // waits for it to end (in no queue that blocks anyone), for up to --index-timeout.
    let mut holder = db.client();
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut migrate = Background::start(db.command(&["migrate", "--target", "1"]));
    let line = "still running after 30s: phase waiting for old snapshots";
    migrate.wait_for_lines(line, 1, Duration::from_secs(120));
    let err = migrate.stderr_so_far();
    assert!(
        err.lines().any(|l| l.contains(line)
            && l.contains(&format!("PID {holder_pid} to end"))
            && l.contains("Migration=001_bookings.sql")),
        "{err}"
    );
    holder.batch_execute("COMMIT").unwrap();
    let run = migrate.wait();
    assert_eq!(run.code, 0, "{}", run.stderr);
}
