//! Adoption: a database migrated the old way (0.1.0's files replayed, no history) is
//! adopted when its objects are the files', and refused, naming what differs, when a
//! column, a grant or an index is not; a target run first, the release before last,
//! and 0.1.0's 007 alone.

use super::*;

/// A database 0.1.0's script migrated (through 012), then changed by a DBA's `sql`; the
/// guard keeps the other old ways waiting (see `migrate_the_old_way`).
fn the_old_way_then(sql: &str) -> (TestDb, Client, std::sync::MutexGuard<'static, ()>) {
    let db = TestDb::empty();
    let mut c = db.client();
    let one = migrate_the_old_way(&mut c, 12);
    c.batch_execute(sql).unwrap();
    (db, c, one)
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

/// Asserts that crm.outbox's storage parameters hold `option` (`name=value`), e.g. a
/// DBA's setting that adopting must keep.
#[track_caller]
fn assert_outbox_keeps(c: &mut Client, option: &str) {
    let options: Vec<String> = c
        .query_one(
            "SELECT reloptions FROM pg_class WHERE oid = 'crm.outbox'::regclass",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(options.contains(&option.to_owned()), "{options:?}");
}

#[test]
fn a_database_migrated_the_old_way_is_adopted_and_nothing_runs_again() {
    // A marker 009 would put back (its autovacuum settings), had it run again.
    let (db, mut c, _one) =
        the_old_way_then("ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 4321)");
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
    assert_outbox_keeps(&mut c, "autovacuum_vacuum_threshold=4321");
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
fn a_target_run_on_an_old_way_database_then_migrate_adopts_the_rest_of_the_baseline() {
    // A DBA's setting on an object of 009, which running 009 again would reset.
    let (db, mut c, _one) =
        the_old_way_then("ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 5000)");
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
    assert_outbox_keeps(&mut c, "autovacuum_vacuum_threshold=5000");
}

#[test]
fn a_file_that_must_run_again_where_it_would_reset_a_dbas_setting_is_refused() {
    // 009 sets the outbox's autovacuum thresholds and grants the relay its receipt
    // columns: with the grant revoked it must run again, which would reset the DBA's
    // threshold. Neither silently: 78 naming both.
    let (db, mut c, _one) = the_old_way_then(
        "ALTER TABLE crm.outbox SET (autovacuum_vacuum_threshold = 5000);
         REVOKE UPDATE (delivered_offset) ON crm.outbox FROM crm_outbox_relay",
    );
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

#[test]
fn an_old_way_database_missing_a_column_and_a_grant_is_not_adopted_and_migrate_names_both() {
    // 0.1.0's database where a DBA dropped a column of 004 and revoked a column
    // privilege of 007: not adopted (what 004 makes is not there, and running it would
    // not add a column to the table that is there), refused before anything is made;
    // run-once says what is missing too.
    let (db, mut c, _one) = the_old_way_then(
        "ALTER TABLE crm.booking_expiration_poison DROP COLUMN retry_at;
         REVOKE UPDATE (updated_at) ON crm.bookings FROM crm_booking_expiration_worker",
    );
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
    let (db, mut c, _one) =
        the_old_way_then("ALTER INDEX crm.ix_outbox_failed RENAME TO ix_outbox_failed_by_dba");
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
    let (db, mut c, _one) = the_old_way_then(
        "DROP INDEX crm.ix_outbox_pending;
         CREATE INDEX ix_outbox_pending ON crm.outbox (occurred_at)",
    );
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
    let snapshot =
        |c: &mut Client| booking_expire_store::testing::migrate::catalog::snapshot(c).unwrap();
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
