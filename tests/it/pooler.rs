//! The pooler guard against a real PgBouncer (Debian's `pgbouncer`): through transaction
//! pooling `relay-outbox` and `run-once` refuse with 78 and say why, before any work;
//! through session pooling they run as usual.

use crate::common;
use crate::postgres;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A PgBouncer in front of the suite's PostgreSQL, in `pool_mode`, stopped on drop.
struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl PgBouncer {
    fn start(pool_mode: &str) -> Self {
        assert!(
            std::path::Path::new(PGBOUNCER).exists(),
            "{PGBOUNCER} is missing: install Debian's pgbouncer package (scripts/test.sh does)"
        );
        let admin: postgres::Config = admin_url().parse().unwrap();
        let pg_port = admin.get_ports().first().copied().unwrap_or(5432);
        let user = admin.get_user().unwrap().to_owned();
        let dir =
            std::env::temp_dir().join(format!("be-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("userlist.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        // PgBouncer refuses to run as root: then it runs as the server's OS user.
        let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
        // On a port picked free a moment before: started again on another one if it was
        // taken meanwhile (PgBouncer then exits).
        let (child, port, ()) = start_on_free_port(
            "PgBouncer",
            Duration::from_secs(60),
            |port| {
                std::fs::write(
                    dir.join("pgbouncer.ini"),
                    format!(
                        "[databases]\n* = host=127.0.0.1 port={pg_port}\n\n[pgbouncer]\n\
                         listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
                         auth_type = trust\nauth_file = {auth}\npool_mode = {pool_mode}\n\
                         default_pool_size = 4\nignore_startup_parameters = extra_float_digits,options\n\
                         logfile = {log}\n",
                        auth = dir.join("userlist.txt").display(),
                        log = dir.join("pgbouncer.log").display(),
                    ),
                )
                .unwrap();
                let mut cmd = if root {
                    Command::new("chmod")
                        .args(["-R", "a+rwX"])
                        .arg(&dir)
                        .status()
                        .unwrap();
                    let mut c = Command::new("runuser");
                    c.args(["-u", "postgres", "--", PGBOUNCER]);
                    c
                } else {
                    Command::new(PGBOUNCER)
                };
                let child = cmd
                    .arg(dir.join("pgbouncer.ini"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start pgbouncer");
                (child, ())
            },
            |port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        PgBouncer { child, port, dir }
    }

    /// `db`'s URL through this PgBouncer.
    fn url(&self, db: &TestDb) -> String {
        let admin: postgres::Config = db.url.parse().unwrap();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            admin.get_user().unwrap(),
            self.port,
            db.name
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
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
