//! The pooler guard against a real PgBouncer (Debian's `pgbouncer`): through transaction
//! pooling `relay-outbox` and `run-once` refuse with 78 and say why, before any work;
//! through session pooling they run as usual.

use crate::common;
use crate::postgres;

use common::*;

/// A PgBouncer in front of the suite's PostgreSQL, in `pool_mode` (the testbed
/// crate's), stopped on drop.
struct PgBouncer(booking_expire_testbed::postgres::PgBouncer);

impl PgBouncer {
    fn start(pool_mode: &str) -> Self {
        let admin: postgres::Config = admin_url().parse().unwrap();
        let pg_port = admin.get_ports().first().copied().unwrap_or(5432);
        let user = admin.get_user().unwrap().to_owned();
        PgBouncer(
            booking_expire_testbed::postgres::PgBouncer::start(pg_port, &user, pool_mode)
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    /// `db`'s URL through this PgBouncer.
    fn url(&self, db: &TestDb) -> String {
        let admin: postgres::Config = db.url.parse().unwrap();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            admin.get_user().unwrap(),
            self.0.port(),
            db.name
        )
    }
}

fn through(db: &TestDb, url: &str, args: &[&str]) -> Run {
    let mut cmd = db.command(args);
    cmd.env("DATABASE_URL", url);
    Run::of(cmd.output().unwrap())
}

const REFUSAL: &str = "needs a session of its own (session advisory lock, LISTEN, prepared \
     statements, session settings), but the database connection goes through a pooler in \
     transaction or statement mode (";
const REMEDY: &str = "connect directly or through session pooling (PgBouncer: pool_mode = session)";

#[test]
fn transaction_pooling_is_refused_with_78_before_any_work() {
    let bouncer = PgBouncer::start("transaction");
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60)]);
    insert_outbox_rows(&mut c, OutboxState::Pending, &[10]);
    let before = checksum(&mut c);
    let url = bouncer.url(&db);

    let relay = through(&db, &url, &["relay-outbox", "--brokers", "127.0.0.1:9"]);
    assert_eq!(relay.code, 78, "{}", relay.stderr);
    assert!(
        relay
            .stderr
            .contains(&format!("booking-expire: error: relay-outbox {REFUSAL}"))
            && relay.stderr.contains(REMEDY),
        "{}",
        relay.stderr
    );
    assert!(relay.stdout.is_empty(), "{}", relay.stdout);
    let cycle = through(&db, &url, &["run-once"]);
    assert_eq!(cycle.code, 78, "{}", cycle.stderr);
    assert!(
        cycle
            .stderr
            .contains(&format!("booking-expire: error: run-once {REFUSAL}")),
        "{}",
        cycle.stderr
    );
    assert_eq!(checksum(&mut c), before, "nothing was written");
}

#[test]
fn session_pooling_is_accepted() {
    let bouncer = PgBouncer::start("session");
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60), Seed::reserved(-60)]);
    let url = bouncer.url(&db);
    let cycle = through(&db, &url, &["run-once"]);
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    assert_eq!(cycle.result().counts(), (1, 1, 0, 0));
    // An empty outbox: the relay takes its lock and finds nothing to do.
    c.batch_execute("DELETE FROM crm.outbox").unwrap();
    let relay = through(&db, &url, &["relay-outbox", "--brokers", "127.0.0.1:9"]);
    assert_eq!(relay.code, 0, "{}", relay.stderr);
    assert!(relay.stdout.contains("\"Published\":0"), "{}", relay.stdout);
}

#[test]
fn migrate_behind_transaction_pooling_is_refused_with_78_and_makes_nothing() {
    let bouncer = PgBouncer::start("transaction");
    let db = TestDb::empty();
    let url = bouncer.url(&db);
    let run = through(&db, &url, &["migrate"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("booking-expire: error: migrate {REFUSAL}"))
            && run.stderr.contains(REMEDY),
        "{}",
        run.stderr
    );
    let mut c = db.client();
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'crm'"
        ),
        0,
        "nothing was made"
    );
    // Through session pooling it migrates.
    let session = PgBouncer::start("session");
    let run = through(&db, &session.url(&db), &["migrate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}
