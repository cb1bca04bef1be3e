//! Least privilege (`sql/007_roles.sql`): each subcommand runs under a login role that
//! is a member of its group role only, and that role is refused (SQLSTATE 42501)
//! everything its subcommand does not need; a subcommand under the wrong role fails
//! up front with exit 78 naming the missing privileges.

use crate::common;
use crate::postgres;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use postgres::Client;
use postgres::error::SqlState;
use serde_json::json;
use uuid::Uuid;

const WORKER: &str = "crm_booking_expiration_worker";
const RELAY: &str = "crm_outbox_relay";
const READONLY: &str = "crm_booking_expiration_readonly";

/// The statement fails with insufficient_privilege.
fn refused(c: &mut Client, sql: &str) {
    let err = c
        .batch_execute(sql)
        .expect_err(&format!("allowed, but must be refused: {sql}"));
    assert_eq!(
        err.code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE),
        "{sql}: {err}"
    );
}

/// The subcommand fails before any work, naming what the role lacks.
fn refused_up_front(run: &Run, role: &LoginRole, subcommand: &str, missing: &str, group: &str) {
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    let want = format!(
        "booking-expire: error: role {} lacks privileges for {subcommand}: {missing} \
         (GRANT {group} TO {}; see sql/007_roles.sql)",
        role.name, role.name
    );
    assert!(
        run.stderr.contains(&want),
        "want {want:?} in:\n{}",
        run.stderr
    );
}

const RELAY_MISSING_FOR_WORKER: &str = "SELECT on crm.outbox, UPDATE on crm.outbox \
     (published_at, attempts, last_error, failed_at, next_attempt_at, failures, \
     delivered_partition, delivered_offset), DELETE on crm.outbox";

#[test]
fn the_worker_role_runs_a_cycle_and_is_refused_everything_else() {
    let db = TestDb::new();
    let mut admin = db.client();
    let worker = LoginRole::member_of(&db, "login", WORKER);

    // Healthy overdue bookings; one that was quarantined and may be retried now (its
    // expiry deletes its poison row); one the guard refuses again (its poison row is
    // updated).
    let healthy: Vec<Seed> = (0..3)
        .map(|i| Seed::reserved(-60 - i))
        .chain((0..2).map(|i| Seed::booked(-60 - i)))
        .collect();
    let retried = Seed::reserved(-300);
    let mut broken = Seed::booked(-300);
    broken.expired_at_set = true;
    seed(&mut admin, &healthy);
    seed(&mut admin, &[retried.clone(), broken.clone()]);
    put_in_quarantine(&mut admin, &retried, "Reserve", "database", 1, -10);
    put_in_quarantine(
        &mut admin,
        &broken,
        "Booking",
        "expired_at_already_set",
        1,
        -10,
    );

    let run = worker.run(&db, &["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (4, 2, 0, 1));
    for table in ["outbox", "booking_audit", "deal_timeline"] {
        assert_eq!(
            count(&mut admin, &format!("SELECT count(*) FROM crm.{table}")),
            6,
            "{table}"
        );
    }
    let poison: Vec<(Uuid, i32)> = admin
        .query(
            "SELECT booking_id, attempts FROM crm.booking_expiration_poison",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(poison, [(broken.id, 2)]);

    let mut c = worker.client();
    refused(&mut c, "DELETE FROM crm.bookings");
    refused(
        &mut c,
        "UPDATE crm.bookings SET tenant_id = gen_random_uuid()",
    );
    refused(&mut c, "SELECT created_at FROM crm.bookings");
    refused(&mut c, "UPDATE crm.outbox SET published_at = now()");
    refused(&mut c, "DELETE FROM crm.outbox");
    refused(
        &mut c,
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, published_at)
         VALUES (gen_random_uuid(), 'Booking', 'k', 't', 't', '{}', now())",
    );
    refused(
        &mut c,
        "UPDATE crm.booking_audit SET actor = 'someone else'",
    );
    refused(&mut c, "DELETE FROM crm.deal_timeline");

    let relay = worker.run(&db, &["relay-outbox", "--brokers", "127.0.0.1:9"]);
    refused_up_front(
        &relay,
        &worker,
        "relay-outbox",
        RELAY_MISSING_FOR_WORKER,
        RELAY,
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        6
    );
}

#[test]
fn the_relay_role_publishes_the_outbox_and_is_refused_everything_else() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut admin = db.client();
    let relay = LoginRole::member_of(&db, "login", RELAY);
    seed_many(&mut admin, 4, |i| Seed::booked(-60 - i as i64));
    assert_eq!(db.run_once(&[]).booking, 4);
    admin
        .execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    // A row published long ago: the retention purge deletes it.
    let old = insert_outbox_rows(&mut admin, OutboxState::Published, &[0]);
    admin
        .execute(
            "UPDATE crm.outbox SET published_at = now() - interval '8 days' WHERE id = $1",
            &[&old[0]],
        )
        .unwrap();

    let run = relay.run(
        &db,
        &[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--message-timeout",
            "5s",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(
        (&result["Published"], &result["Failed"], &result["Purged"]),
        (&json!(4), &json!(0), &json!(1))
    );
    assert_eq!(
        consume(&brokers, &topic, 6, 4, Duration::from_secs(30)).len(),
        4
    );

    let mut c = relay.client();
    refused(&mut c, "SELECT id FROM crm.bookings");
    refused(&mut c, "UPDATE crm.bookings SET status = 'Cancelled'");
    refused(&mut c, "DELETE FROM crm.bookings");
    refused(
        &mut c,
        "SELECT booking_id FROM crm.booking_expiration_poison",
    );
    refused(&mut c, "UPDATE crm.outbox SET payload = '{}'");
    refused(
        &mut c,
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES (gen_random_uuid(), 'Booking', 'k', 't', 't', '{}')",
    );
    refused(
        &mut c,
        "INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, at)
         VALUES (gen_random_uuid(), gen_random_uuid(), 'Booked', 'BookingExpired', 2, 'x', now())",
    );

    seed(&mut admin, &[Seed::reserved(-60)]);
    let before_cycle = checksum_of_bookings(&mut admin);
    let cycle = relay.run(&db, &["run-once"]);
    refused_up_front(
        &cycle,
        &relay,
        "run-once",
        "SELECT on crm.bookings (id, tenant_id, deal_id, property_object_id, status, \
         reserve_expires_at, booking_expires_at, expired_at, version), UPDATE on crm.bookings \
         (status, expired_at, updated_at, version), INSERT on crm.booking_audit (booking_id, \
         tenant_id, from_status, to_status, version, actor, run_id, at), INSERT on \
         crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, \
         details), INSERT on crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, \
         headers, occurred_at), SELECT on crm.booking_expiration_poison, INSERT on \
         crm.booking_expiration_poison, UPDATE on crm.booking_expiration_poison, DELETE on \
         crm.booking_expiration_poison",
        WORKER,
    );
    assert_eq!(checksum_of_bookings(&mut admin), before_cycle);
    let backlog = relay.run(&db, &["backlog"]);
    refused_up_front(
        &backlog,
        &relay,
        "dry-run and backlog",
        "SELECT on crm.bookings (id, tenant_id, deal_id, property_object_id, status, \
         reserve_expires_at, booking_expires_at, expired_at, version), SELECT on \
         crm.booking_expiration_poison",
        READONLY,
    );
}

/// The bookings table as text, to show it did not change.
fn checksum_of_bookings(c: &mut Client) -> String {
    c.query_one(
        "SELECT count(*)::text || ':' || coalesce(md5(string_agg(b::text, '|' ORDER BY b::text)), '')
           FROM crm.bookings b",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn the_read_only_role_reports_and_is_refused_every_write() {
    let db = TestDb::new();
    let mut admin = db.client();
    let reader = LoginRole::member_of(&db, "login", READONLY);
    seed(
        &mut admin,
        &[
            Seed::reserved(-120),
            Seed::reserved(-60),
            Seed::booked(-30),
            Seed::reserved(3_600),
        ],
    );
    insert_outbox_rows(&mut admin, OutboxState::Pending, &[10, 5]);
    let before = checksum(&mut admin);

    let backlog = reader.run(&db, &["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let report: serde_json::Value = serde_json::from_str(&backlog.stdout).unwrap();
    assert_eq!(report["OverdueTotal"], json!(3));
    assert_eq!(report["Outbox"]["Pending"], json!(2));
    let dry_run = reader.run(&db, &["dry-run", "--as-of", "now", "--json"]);
    assert_eq!(dry_run.code, 0, "{}", dry_run.stderr);
    let lines = json_lines(&dry_run.stdout);
    assert_eq!(lines.len(), 4, "three expiries and the summary");
    assert_eq!(lines[3]["Summary"]["Reserve"]["WouldExpire"], json!(2));
    assert_eq!(lines[3]["Summary"]["Booking"]["WouldExpire"], json!(1));

    let mut c = reader.client();
    refused(
        &mut c,
        "INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
             created_at, updated_at, version)
         VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                 'Reserved', now(), now(), 1)",
    );
    refused(&mut c, "UPDATE crm.bookings SET status = 'Cancelled'");
    refused(&mut c, "DELETE FROM crm.bookings");
    refused(&mut c, "UPDATE crm.outbox SET published_at = now()");
    refused(&mut c, "DELETE FROM crm.outbox");
    refused(
        &mut c,
        "INSERT INTO crm.booking_expiration_poison (booking_id, tenant_id, phase, reason, error,
             first_seen_at, last_seen_at, retry_at)
         VALUES (gen_random_uuid(), gen_random_uuid(), 'Reserve', 'x', 'x', now(), now(), now())",
    );
    refused(&mut c, "DELETE FROM crm.booking_expiration_poison");
    // explain reads a booking's audit trail (sql/009_operations.sql); writing stays refused.
    c.batch_execute("SELECT count(*) FROM crm.booking_audit")
        .unwrap();
    refused(&mut c, "DELETE FROM crm.booking_audit");

    let cycle = reader.run(&db, &["run-once"]);
    refused_up_front(
        &cycle,
        &reader,
        "run-once",
        "UPDATE on crm.bookings (status, expired_at, updated_at, version), INSERT on \
         crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, \
         run_id, at), INSERT on crm.deal_timeline (deal_id, tenant_id, booking_id, kind, \
         occurred_at, correlation_id, details), INSERT on crm.outbox (id, aggregatetype, \
         aggregateid, type, topic, payload, headers, occurred_at), INSERT on \
         crm.booking_expiration_poison, UPDATE on crm.booking_expiration_poison, DELETE on \
         crm.booking_expiration_poison",
        WORKER,
    );
    let relay = reader.run(&db, &["relay-outbox", "--brokers", "127.0.0.1:9"]);
    refused_up_front(
        &relay,
        &reader,
        "relay-outbox",
        "UPDATE on crm.outbox (published_at, attempts, last_error, failed_at, next_attempt_at, failures, \
         delivered_partition, delivered_offset), DELETE on crm.outbox",
        RELAY,
    );
    assert_eq!(checksum(&mut admin), before, "nothing was written");
}

#[test]
fn the_group_roles_are_nologin_and_the_migration_is_idempotent() {
    let db = TestDb::new();
    db.migrate();
    db.migrate();
    let mut c = db.client();
    let roles: Vec<(String, bool)> = c
        .query(
            "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = ANY($1) ORDER BY rolname",
            &[&vec![WORKER, RELAY, READONLY]],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        roles,
        [
            (READONLY.to_owned(), false),
            (WORKER.to_owned(), false),
            (RELAY.to_owned(), false),
        ]
    );
}

#[test]
fn databases_migrating_at_once_race_for_the_new_roles_and_all_succeed() {
    // The roles of sql/007_roles.sql under names of this test's own, so that they do
    // not exist yet: four databases create them at the same moment.
    // (Short: a role name has at most 63 bytes.)
    let suffix = &Uuid::new_v4().simple().to_string()[..12];
    let sql = std::fs::read_to_string(crate::common::repo().join("sql/007_roles.sql")).unwrap();
    let names: Vec<String> = [WORKER, RELAY, READONLY]
        .iter()
        .map(|r| format!("{r}_{suffix}"))
        .collect();
    let mut renamed = sql.clone();
    for (role, name) in [WORKER, RELAY, READONLY].iter().zip(&names) {
        renamed = renamed.replace(role, name);
    }
    assert_ne!(renamed, sql);
    let dbs: Vec<TestDb> = (0..4).map(|_| TestDb::new()).collect();
    let barrier = Arc::new(Barrier::new(dbs.len()));
    let results: Vec<Result<(), postgres::Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = dbs
            .iter()
            .map(|db| {
                let (barrier, renamed) = (barrier.clone(), &renamed);
                let mut c = db.client();
                s.spawn(move || {
                    barrier.wait();
                    c.batch_execute(renamed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // (privileges on whole tables, privileges on columns) granted to the three roles.
    let granted: Vec<(i64, i64)> = dbs
        .iter()
        .map(|db| {
            let row = db
                .client()
                .query_one(
                    "SELECT (SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
                              WHERE c.relnamespace = 'crm'::regnamespace
                                AND a.grantee::regrole::text = ANY($1)),
                            (SELECT count(*)
                               FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid,
                                    aclexplode(t.attacl) a
                              WHERE c.relnamespace = 'crm'::regnamespace
                                AND a.grantee::regrole::text = ANY($1))",
                    &[&names],
                )
                .unwrap();
            (row.get(0), row.get(1))
        })
        .collect();
    // Clean up before asserting: the roles are cluster-wide.
    for db in &dbs {
        let mut c = db.client();
        for name in &names {
            let _ = c.batch_execute(&drop_owned_sql(name));
        }
    }
    let mut c = dbs[0].client();
    for name in &names {
        let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {name}"));
    }
    for r in results {
        r.expect("a concurrent migration failed");
    }
    // Tables: poison ×4 (worker), outbox SELECT and DELETE (relay), three SELECTs
    // (read-only). Columns: bookings 9 SELECT + 4 UPDATE, audit 8, timeline 7 and
    // outbox 8 INSERT (worker), outbox 4 UPDATE (relay).
    assert_eq!(granted, vec![(9, 40); 4]);
}
