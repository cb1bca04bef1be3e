//! The INVALID index a failed concurrent build leaves behind: dropped and built again
//! by the runner's statement (`run_one`), and by `migrate` for a shipped file.

use super::*;

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
    let mut session = booking_expire_store::Session::from_driver(db.client());
    run_one(&mut session, None, build, "013_test.sql", &policy()).unwrap();
    let (valid, rebuilt) = index(&mut c, "ix_outbox_test_once").expect("the index");
    assert!(valid);
    assert_ne!(rebuilt, leftover, "a new index, not the leftover");
    // A valid one is left alone.
    run_one(&mut session, None, build, "013_test.sql", &policy()).unwrap();
    assert_eq!(index(&mut c, "ix_outbox_test_once"), Some((true, rebuilt)));
}

/// The first shipped `CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS name ON
/// crm.table …`: (version, index, table).
fn first_concurrent_build() -> Option<(i32, String, String)> {
    MIGRATIONS.iter().find_map(|m| {
        booking_expire_store::testing::migrate::statements(m.sql)
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
