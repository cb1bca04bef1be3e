//! Defence in depth for a shared outbox (`sql/015_outbox_row_security.sql`): once the
//! table's owner enables row security on `crm.outbox`, each of the job's roles reaches
//! only the rows of the types listed in `crm.booking_expiration_outbox_type`, whatever a
//! statement of the job says: another producer's row is never read, changed nor
//! deleted (its bytes stay as they were), and the job's own work still passes. Every
//! other role keeps its reach; what enabling costs them (`COPY … FROM`, reads with
//! `row_security = off` as pg_dump does them) is shown here, and why the migration
//! leaves the switch to the owner. The job says whether the defence is on, and refuses a
//! run whose outbox types the policies hide from it.

use crate::common;
use crate::postgres;

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use serde_json::{Value, json};
use uuid::Uuid;

const OWN_TYPE: &str = "pin.crm.booking-expired";
const CREATED: &str = "pin.crm.booking-created";
const CLOSED: &str = "pin.crm.deal-closed";

const WORKER: &str = "crm_booking_expiration_worker";
const RELAY: &str = "crm_outbox_relay";
const READONLY: &str = "crm_booking_expiration_readonly";
const OPERATOR: &str = "crm_booking_expiration_operator";

/// A LOGIN role of one test's own, made with `how` (`IN ROLE group`, `BYPASSRLS`, …),
/// as a deployment or a CRM would make it; dropped with its grants at the end.
struct LoginRole {
    name: String,
    url: String,
    db_url: String,
}

impl LoginRole {
    fn new(db: &TestDb, how: &str) -> Self {
        let name = format!("rls_{}", Uuid::new_v4().simple());
        record_made(Made::Role, &name);
        db.client()
            .batch_execute(&format!("CREATE ROLE {name} LOGIN {how}"))
            .expect("create a login role");
        LoginRole {
            url: with_user(&db.url, &name),
            db_url: db.url.clone(),
            name,
        }
    }

    /// One of the job's group roles' members.
    fn member_of(db: &TestDb, group: &str) -> Self {
        Self::new(db, &format!("IN ROLE {group}"))
    }

    fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect as the login role")
    }

    /// `bin` (the current binary unless given), connected as this role.
    fn run_bin(&self, bin: Option<&PathBuf>, args: &[&str]) -> Run {
        let out = match bin {
            Some(bin) => Command::new(bin)
                .args(args)
                .env_clear()
                .env("DATABASE_URL", &self.url)
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .output(),
            None => Command::new(BIN)
                .args(args)
                .env_clear()
                .env("DATABASE_URL", &self.url)
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .output(),
        };
        Run::of(out.expect("run the binary"))
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_bin(None, args)
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.db_url, NoTls) {
            let _ = c.batch_execute(&drop_owned_sql(&self.name));
        }
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls)
            && admin
                .batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name))
                .is_ok()
        {
            forget_made(&self.name);
        }
    }
}

/// The table's owner's switch, as the deployment guide gives it.
fn enable(c: &mut Client) {
    c.batch_execute("ALTER TABLE crm.outbox ENABLE ROW LEVEL SECURITY")
        .unwrap();
}

fn disable(c: &mut Client) {
    c.batch_execute("ALTER TABLE crm.outbox DISABLE ROW LEVEL SECURITY")
        .unwrap();
}

/// Every column of every other producer's row, as text, by id (read by the owner).
fn others(c: &mut Client) -> Vec<(String, String)> {
    c.query(
        "SELECT id::text, row_to_json(o)::text FROM crm.outbox o WHERE type <> $1 ORDER BY id",
        &[&OWN_TYPE],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Another producer's row: pending, published 8 days ago, or failed.
fn other_row(c: &mut Client, r#type: &str, topic: &str, state: &str) -> Uuid {
    let id = Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers,
                                 occurred_at, published_at, failed_at, attempts, last_error)
         VALUES ($1::uuid, 'Booking', gen_random_uuid()::text, $2, $3,
                 jsonb_build_object('Producer', $2::text), jsonb_build_object('ce_id', $1::uuid::text),
                 now() - interval '9 days',
                 CASE WHEN $4 = 'published' THEN now() - interval '8 days' END,
                 CASE WHEN $4 = 'failed' THEN now() - interval '2 days' END,
                 CASE WHEN $4 = 'pending' THEN 0 ELSE 3 END,
                 CASE WHEN $4 = 'failed' THEN 'their own relay gave up' END)",
        &[&id, &r#type, &topic, &state],
    )
    .unwrap();
    id
}

/// The rows a statement affected, as this role ran it; `Err` with its SQLSTATE.
fn affected(c: &mut Client, sql: &str) -> Result<u64, SqlState> {
    c.execute(sql, &[]).map_err(|e| {
        e.code()
            .cloned()
            .unwrap_or_else(|| panic!("{sql}: no SQLSTATE: {e}"))
    })
}

fn ok_json(run: &Run) -> Value {
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// `COPY crm.outbox … FROM STDIN` of one other producer's row, as `c`'s role.
fn copy_in(c: &mut Client) -> Result<u64, String> {
    let row = format!("{}\tBooking\tk\t{CLOSED}\tt\t{{}}\n", Uuid::now_v7());
    let mut w = c
        .copy_in(
            "COPY crm.outbox (id, aggregatetype, aggregateid, type, topic, payload) FROM STDIN",
        )
        .map_err(|e| {
            e.as_db_error()
                .map_or(e.to_string(), |d| d.message().to_owned())
        })?;
    w.write_all(row.as_bytes()).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| {
        e.as_db_error()
            .map_or(e.to_string(), |d| d.message().to_owned())
    })
}

fn relay_args<'a>(brokers: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn each_job_role_reaches_none_of_another_producers_rows_and_its_own_work_passes() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut admin = db.client();
    let worker = LoginRole::member_of(&db, WORKER);
    let relay = LoginRole::member_of(&db, RELAY);
    let reader = LoginRole::member_of(&db, READONLY);
    let operator = LoginRole::member_of(&db, OPERATOR);
    enable(&mut admin);

    // The cycle, as the worker: its inserts are of the job's own type.
    seed_many(&mut admin, 3, |i| Seed::booked(-60 - i as i64));
    let cycle = worker.run(&["run-once"]);
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    assert_eq!(cycle.result().booking, 3);
    assert!(cycle.stderr.contains("RowSecurity=on"), "{}", cycle.stderr);
    admin
        .execute(
            "UPDATE crm.outbox SET topic = $1 WHERE type = $2",
            &[&topic, &OWN_TYPE],
        )
        .unwrap();
    let missing = unique_topic();
    let theirs: Vec<Uuid> = [
        (CREATED, "pending"),
        (CREATED, "pending"),
        (CREATED, "published"),
        (CLOSED, "failed"),
        (CLOSED, "published"),
    ]
    .iter()
    .map(|(t, state)| other_row(&mut admin, t, &missing, state))
    .collect();
    let snapshot = others(&mut admin);
    assert_eq!(snapshot.len(), 5);
    let one_of_theirs = theirs[2];

    // What a bug of each role could try on the others' rows: none is reached.
    let others_filter = format!("type <> '{OWN_TYPE}'");
    let mut r = relay.client();
    let mut o = operator.client();
    let mut ro = reader.client();
    let mut w = worker.client();
    for (who, c) in [
        ("relay", &mut r),
        ("operator", &mut o),
        ("read-only", &mut ro),
    ] {
        let seen: i64 = c
            .query_one(
                &format!("SELECT count(*) FROM crm.outbox WHERE {others_filter}"),
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(seen, 0, "{who} sees other producers' rows");
        let by_id = c
            .query("SELECT 1 FROM crm.outbox WHERE id = $1", &[&one_of_theirs])
            .unwrap();
        assert!(by_id.is_empty(), "{who} reads another producer's row by id");
        let all: i64 = c
            .query_one("SELECT count(*) FROM crm.outbox", &[])
            .unwrap()
            .get(0);
        assert_eq!(all, 3, "{who}: the job's three rows");
    }
    for sql in [
        format!(
            "UPDATE crm.outbox SET published_at = now(), last_error = 'a bug' WHERE {others_filter}"
        ),
        format!("UPDATE crm.outbox SET failed_at = now() WHERE id = '{one_of_theirs}'"),
        format!("DELETE FROM crm.outbox WHERE {others_filter}"),
        format!("DELETE FROM crm.outbox WHERE id = '{one_of_theirs}'"),
        // A purge without the type filter: the job's rows alone are in reach (none is
        // published yet, so none goes).
        "DELETE FROM crm.outbox WHERE published_at IS NOT NULL".to_owned(),
    ] {
        assert_eq!(affected(&mut r, &sql), Ok(0), "relay: {sql}");
    }
    for sql in [
        format!(
            "UPDATE crm.outbox SET published_at = NULL, failed_at = NULL, next_attempt_at = NULL,
                    failures = 0, last_error = NULL WHERE {others_filter}"
        ),
        format!("UPDATE crm.outbox SET published_at = NULL WHERE id = '{one_of_theirs}'"),
        "UPDATE crm.outbox SET failed_at = NULL WHERE failed_at IS NOT NULL".to_owned(),
    ] {
        assert_eq!(affected(&mut o, &sql), Ok(0), "operator: {sql}");
    }
    // The worker may only insert: another producer's type is refused by the policy, and
    // it reads nothing (no grant, as before).
    assert_eq!(
        affected(
            &mut w,
            &format!(
                "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
                 VALUES (gen_random_uuid(), 'Booking', 'k', '{CREATED}', 't', '{{}}')"
            ),
        ),
        Err(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(
        affected(&mut ro, "DELETE FROM crm.outbox"),
        Err(SqlState::INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(
        others(&mut admin),
        snapshot,
        "a role's statement reached them"
    );

    // The job's own work, each command as its role: backlog, relay, republish.
    let report = ok_json(&reader.run(&["backlog", "--json"]));
    assert_eq!(report["Outbox"]["Pending"], 3, "{report}");
    assert_eq!(report["OutboxRowSecurity"], "on", "{report}");
    // Hidden from this role: its counts of the others' rows are none.
    assert_eq!(
        report["OutboxOtherProducers"],
        json!({"Pending": 0, "Failed": 0}),
        "{report}"
    );
    let table = reader.run(&["backlog"]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table.stdout.contains(
            "row security on crm.outbox: on (other producers' rows are hidden from this role)"
        ),
        "{}",
        table.stdout
    );
    let relayed = relay.run(&relay_args(&brokers, &["--retention", "1h"]));
    let result = ok_json(&relayed);
    assert_eq!(
        (&result["Published"], &result["Failed"], &result["Purged"]),
        (&json!(3), &json!(0), &json!(0)),
        "{result}"
    );
    assert!(
        relayed.stderr.contains("RowSecurity=on"),
        "{}",
        relayed.stderr
    );
    assert_eq!(
        consume(&brokers, &topic, 6, 3, Duration::from_secs(20)).len(),
        3
    );
    let window = ok_json(&operator.run(&[
        "republish",
        "--since",
        "2000-01-01T00:00:00Z",
        "--until",
        "now",
        "--reason",
        "replay",
        "--json",
    ]));
    assert_eq!(window["Requeued"], 3, "{window}");
    let by_id = ok_json(&operator.run(&[
        "republish",
        "--ids",
        &one_of_theirs.to_string(),
        "--reason",
        "not ours",
        "--json",
    ]));
    assert_eq!(by_id["Requeued"], 0, "{by_id}");
    let retried = ok_json(&operator.run(&["retry-failed", "--all", "--reason", "r", "--json"]));
    assert_eq!(retried["Requeued"], 0, "{retried}");
    let again = ok_json(&relay.run(&relay_args(&brokers, &[])));
    assert_eq!(again["Published"], 3, "{again}");
    assert_eq!(
        others(&mut admin),
        snapshot,
        "the job's commands reached them"
    );
}

#[test]
fn other_roles_keep_their_reach_and_copy_from_is_what_enabling_costs_them() {
    let db = TestDb::new();
    let mut admin = db.client();
    // A CRM writer that is not the table's owner, a backup role, a BYPASSRLS role.
    let writer = LoginRole::new(&db, "");
    let backup = LoginRole::new(&db, "");
    let bypass = LoginRole::new(&db, "BYPASSRLS");
    let relay = LoginRole::member_of(&db, RELAY);
    for (role, grant) in [
        (&writer, "SELECT, INSERT, UPDATE, DELETE"),
        (&backup, "SELECT"),
        (&bypass, "SELECT, INSERT"),
    ] {
        admin
            .batch_execute(&format!(
                "GRANT USAGE ON SCHEMA crm TO {0}; GRANT {grant} ON crm.outbox TO {0}",
                role.name
            ))
            .unwrap();
    }
    insert_outbox_rows(&mut admin, OutboxState::Pending, &[10, 5]);
    for state in ["pending", "published", "failed"] {
        other_row(&mut admin, CREATED, "their.topic", state);
    }
    let total = |c: &mut Client| -> i64 {
        c.query_one("SELECT count(*) FROM crm.outbox", &[])
            .unwrap()
            .get(0)
    };

    // Migrated, not enabled: the policies lie dormant; nothing changed for anyone, the
    // job's roles included, and backlog says so.
    let report = ok_json(&LoginRole::member_of(&db, READONLY).run(&["backlog", "--json"]));
    assert_eq!(report["OutboxRowSecurity"], "off", "{report}");
    assert_eq!(total(&mut relay.client()), 5);
    assert_eq!(copy_in(&mut writer.client()), Ok(1));
    let rows = total(&mut admin);
    assert_eq!(rows, 6);

    enable(&mut admin);
    let mut wc = writer.client();
    // The writer reads, inserts, updates and deletes every row as before…
    assert_eq!(total(&mut wc), rows);
    let mut tx = wc.transaction().unwrap();
    assert_eq!(
        tx.execute(
            &format!(
                "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
                 VALUES (gen_random_uuid(), 'Deal', 'd', '{CLOSED}', 't', '{{}}')"
            ),
            &[]
        )
        .unwrap(),
        1
    );
    assert_eq!(
        tx.execute("UPDATE crm.outbox SET attempts = attempts", &[])
            .unwrap(),
        rows as u64 + 1
    );
    assert_eq!(
        tx.execute("DELETE FROM crm.outbox", &[]).unwrap(),
        rows as u64 + 1
    );
    tx.rollback().unwrap();
    // …but COPY FROM is refused to it, and so is a read with row_security off, as
    // pg_dump makes it (a backup by a role the policies bind fails on crm.outbox unless
    // it runs with --enable-row-security).
    assert_eq!(
        copy_in(&mut wc),
        Err("COPY FROM not supported with row-level security".to_owned())
    );
    let mut bc = backup.client();
    let err = bc
        .batch_execute("SET row_security = off; SELECT count(*) FROM crm.outbox")
        .unwrap_err();
    assert_eq!(
        err.as_db_error().map(|d| d.message()),
        Some("query would be affected by row-level security policy for table \"outbox\"")
    );
    bc.batch_execute("SET row_security = on").unwrap();
    assert_eq!(total(&mut bc), rows);
    // The owner (here the suite's superuser) and a BYPASSRLS role are not subject to it.
    assert_eq!(copy_in(&mut bypass.client()), Ok(1));
    assert_eq!(copy_in(&mut admin), Ok(1));
    let mut bx = bypass.client();
    bx.batch_execute("SET row_security = off").unwrap();
    assert_eq!(total(&mut bx), rows + 2);
    // The job's relay now sees its two rows alone; the superuser's backlog says the
    // defence does not bind it.
    assert_eq!(total(&mut relay.client()), 2);
    let report = ok_json(&db.run(&["backlog", "--json"]));
    assert_eq!(report["OutboxRowSecurity"], "not-binding", "{report}");

    // Off again: COPY FROM works for the writer again.
    disable(&mut admin);
    assert_eq!(copy_in(&mut writer.client()), Ok(1));
}

#[test]
fn a_relay_of_other_types_too_is_refused_until_the_owner_lists_them() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let created_topic = format!("{}-booking-created.v1", unique_topic());
    create_topic(&brokers, &created_topic, 6, &[]);
    let db = TestDb::new();
    let mut admin = db.client();
    let relay = LoginRole::member_of(&db, RELAY);
    seed_many(&mut admin, 2, |i| Seed::reserved(-60 - i as i64));
    assert_eq!(db.run_once(&[]).reserve, 2);
    admin
        .execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    for _ in 0..2 {
        other_row(&mut admin, CREATED, &created_topic, "pending");
    }
    other_row(&mut admin, CLOSED, "deal-closed.v1", "pending");
    let closed = |c: &mut Client| {
        c.query(
            "SELECT row_to_json(o)::text FROM crm.outbox o WHERE type = $1",
            &[&CLOSED],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
    };
    let before = closed(&mut admin);
    let both = format!("{OWN_TYPE},{CREATED}");
    let listing =
        format!("INSERT INTO crm.booking_expiration_outbox_type (type) VALUES ('{CREATED}')");

    // Off: the run works, and warns what enabling would hide from it.
    let reader = LoginRole::member_of(&db, READONLY);
    let off = reader.run(&["backlog", "--outbox-types", &both]);
    assert_eq!(off.code, 0, "{}", off.stderr);
    assert!(
        off.stderr.contains("would hide these outbox types") && off.stderr.contains(&listing),
        "{}",
        off.stderr
    );

    enable(&mut admin);
    let refused = relay.run(&relay_args(&brokers, &["--outbox-types", &both]));
    assert_eq!(refused.code, 78, "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!(
            "booking-expire: error: row security on crm.outbox hides the outbox types {CREATED} \
             of --outbox-types from role {}: its policies let the job's roles reach only \
             {OWN_TYPE}; list them as the table's owner ({listing}; see \
             sql/015_outbox_row_security.sql)",
            relay.name
        )),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "{}", refused.stdout);
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        5
    );

    // The owner lists the type: the whole-outbox relay publishes both, the third type
    // stays as it was.
    admin.batch_execute(&listing).unwrap();
    let result = ok_json(&relay.run(&relay_args(&brokers, &["--outbox-types", &both])));
    assert_eq!(result["Published"], 4, "{result}");
    assert_eq!(
        consume(&brokers, &topic, 6, 2, Duration::from_secs(20)).len(),
        2
    );
    assert_eq!(
        consume(&brokers, &created_topic, 6, 2, Duration::from_secs(20)).len(),
        2
    );
    assert_eq!(closed(&mut admin), before);
}

#[test]
fn the_previous_release_under_row_security_relays_only_the_jobs_rows() {
    let previous = crate::upgrade::previous_bin();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut admin = db.client();
    let worker = LoginRole::member_of(&db, WORKER);
    let relay = LoginRole::member_of(&db, RELAY);
    let round = |admin: &mut Client, n: usize| {
        seed_many(admin, n, |i| Seed::booked(-60 - i as i64));
        let cycle = worker.run_bin(Some(&previous), &["run-once"]);
        assert_eq!(cycle.code, 0, "{}", cycle.stderr);
        admin
            .execute(
                "UPDATE crm.outbox SET topic = $1 WHERE published_at IS NULL",
                &[&topic],
            )
            .unwrap();
        // Another producer's row, pending on a topic the broker has.
        other_row(admin, CREATED, &topic, "pending")
    };
    let relayed = |args: &[&str]| {
        let run = relay.run_bin(Some(&previous), args);
        ok_json(&run)["Published"].as_i64().unwrap()
    };
    let args = relay_args(&brokers, &[]);

    // Off: 0.1.0's relay, which filters no type, takes the other producer's row too.
    let first = round(&mut admin, 2);
    assert_eq!(relayed(&args), 3);
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM crm.outbox WHERE id = '{first}' AND published_at IS NOT NULL"
            )
        ),
        1
    );

    // On: the same binary, the same roles, reaches the job's rows alone.
    enable(&mut admin);
    let second = round(&mut admin, 2);
    let before = admin
        .query_one(
            "SELECT row_to_json(o)::text FROM crm.outbox o WHERE id = $1",
            &[&second],
        )
        .unwrap()
        .get::<_, String>(0);
    assert_eq!(relayed(&args), 2);
    let after = admin
        .query_one(
            "SELECT row_to_json(o)::text FROM crm.outbox o WHERE id = $1",
            &[&second],
        )
        .unwrap()
        .get::<_, String>(0);
    assert_eq!(after, before);
    assert_eq!(
        consume(&brokers, &topic, 6, 5, Duration::from_secs(20)).len(),
        5
    );
}

#[test]
fn where_the_host_has_row_security_of_its_own_its_policies_still_decide_for_its_roles() {
    let db = TestDb::new();
    let mut admin = db.client();
    let writer = LoginRole::new(&db, "");
    let relay = LoginRole::member_of(&db, RELAY);
    admin
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA crm TO {0}; GRANT SELECT, INSERT ON crm.outbox TO {0}",
            writer.name
        ))
        .unwrap();
    // The host's own policy, before migration 15: its roles never see 'secret' rows.
    admin
        .batch_execute(
            "DROP POLICY booking_expiration_others_unchanged ON crm.outbox;
             DROP POLICY booking_expiration_job ON crm.outbox;
             DROP POLICY booking_expiration_own_types ON crm.outbox;
             CREATE POLICY crm_no_secrets ON crm.outbox AS PERMISSIVE FOR ALL TO PUBLIC
                 USING (topic <> 'secret') WITH CHECK (topic <> 'secret');
             ALTER TABLE crm.outbox ENABLE ROW LEVEL SECURITY;",
        )
        .unwrap();
    insert_outbox_rows(&mut admin, OutboxState::Pending, &[10]);
    other_row(&mut admin, CREATED, "their.topic", "pending");
    other_row(&mut admin, CREATED, "secret", "pending");
    let sql =
        std::fs::read_to_string(crate::common::repo().join("sql/015_outbox_row_security.sql"))
            .unwrap();
    admin.batch_execute(&sql).unwrap();
    admin.batch_execute(&sql).unwrap();
    let policies: Vec<String> = admin
        .query(
            "SELECT polname::text FROM pg_policy WHERE polrelid = 'crm.outbox'::regclass
              ORDER BY polname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        policies,
        [
            "booking_expiration_job",
            "booking_expiration_own_types",
            "crm_no_secrets"
        ]
    );
    let topics = |c: &mut Client| -> Vec<String> {
        c.query("SELECT topic FROM crm.outbox ORDER BY topic", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    // The host's role: as its own policy says, not widened by the job's.
    assert_eq!(
        topics(&mut writer.client()),
        ["pin.crm.booking-expired.v1", "their.topic"]
    );
    // The job's role: its own type's rows alone.
    assert_eq!(topics(&mut relay.client()), ["pin.crm.booking-expired.v1"]);
}

#[test]
fn a_cycle_whose_own_type_the_owner_left_out_is_refused_before_any_work() {
    let db = TestDb::new();
    let mut admin = db.client();
    let worker = LoginRole::member_of(&db, WORKER);
    seed_many(&mut admin, 2, |i| Seed::reserved(-60 - i as i64));
    admin
        .batch_execute("DELETE FROM crm.booking_expiration_outbox_type")
        .unwrap();
    enable(&mut admin);
    let bookings = |c: &mut Client| {
        count(
            c,
            "SELECT count(*) FROM crm.bookings WHERE expired_at IS NULL",
        )
    };
    let cycle = worker.run(&["run-once"]);
    assert_eq!(cycle.code, 78, "{}", cycle.stderr);
    assert!(
        cycle.stderr.contains(&format!(
            "row security on crm.outbox hides the outbox types {OWN_TYPE} the cycle writes \
             from role {}: its policies let the job's roles reach no outbox type; list them as \
             the table's owner (INSERT INTO crm.booking_expiration_outbox_type (type) VALUES \
             ('{OWN_TYPE}'); see sql/015_outbox_row_security.sql)",
            worker.name
        )),
        "{}",
        cycle.stderr
    );
    assert_eq!(bookings(&mut admin), 2);
    assert_eq!(count(&mut admin, "SELECT count(*) FROM crm.outbox"), 0);
}

#[test]
fn under_row_security_the_relays_queue_and_mark_keep_their_index_plans() {
    let db = TestDb::new();
    let mut admin = db.client();
    let relay = LoginRole::member_of(&db, RELAY);
    // The job's pending rows beside many more of another producer's, published.
    admin
        .batch_execute(&format!(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, published_at)
             SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, '{CREATED}', 't', '{{}}', now()
               FROM generate_series(1, 50000);
             INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
             SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, '{OWN_TYPE}',
                    'pin.crm.booking-expired.v1', '{{}}'
               FROM generate_series(1, 2000);
             ANALYZE crm.outbox;"
        ))
        .unwrap();
    enable(&mut admin);
    let mut c = relay.client();
    let seqs: Vec<i64> = c
        .query(
            "SELECT seq FROM crm.outbox WHERE published_at IS NULL ORDER BY seq LIMIT 500",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(seqs.len(), 500);
    let receipts = serde_json::Value::Object(
        seqs.iter()
            .map(|seq| (seq.to_string(), json!([0, 0])))
            .collect(),
    );
    let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
    let now = chrono::Utc::now();
    let own = booking_expire_domain::OutboxTypes::default();
    let types = own.as_slice();
    let in_flight: Vec<String> = vec![Uuid::new_v4().to_string()];
    let waiting: Vec<String> = vec![];
    for mode in ["force_custom_plan", "force_generic_plan"] {
        c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .unwrap();
        let explain =
            |c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]| {
                c.query(&format!("EXPLAIN (COSTS OFF) {sql}"), params)
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
        let plan = explain(
            &mut c,
            booking_expire_store::testing::PENDING_SQL,
            &[
                &500_i64,
                &now,
                &in_flight,
                &1_000_000_i64,
                &booking_expire_store::testing::FETCH_BYTES,
                &types,
                &waiting,
                &booking_expire_store::WAITING_FOR_TOPIC,
            ],
        );
        // The queue in seq order from the pending index; the policy's list, read once
        // into a hash, is the only other table read.
        assert!(
            plan.contains("Index Scan using ix_outbox_pending on outbox o"),
            "{mode}:\n{plan}"
        );
        assert!(
            plan.contains("Seq Scan on booking_expiration_outbox_type"),
            "{mode}:\n{plan}"
        );
        assert!(!plan.contains("Seq Scan on outbox"), "{mode}:\n{plan}");
        assert!(!plan.contains("Sort"), "{mode}:\n{plan}");
        let plan = explain(
            &mut c,
            booking_expire_store::testing::MARK_PUBLISHED_SQL,
            &[&seqs, &receipts, &now, &first, &last, &types],
        );
        assert!(
            plan.contains("Index Scan using ux_outbox_seq on outbox o"),
            "{mode}:\n{plan}"
        );
        assert!(!plan.contains("Seq Scan on outbox"), "{mode}:\n{plan}");
    }
}
