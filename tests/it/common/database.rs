//! The database of each test: a fresh one per test, cloned from a template with every
//! migration of `sql/` applied by the binary's `migrate` (made once per run on the
//! suite's server, see [`admin_url`]), migrations for a server a test started itself,
//! a read-only operator role (the URLs they hand out are `urls`'). What it makes on the suite's server is on the
//! harness's record (`leftovers`), so a killed run's leftovers are swept by the next.

use crate::postgres;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use uuid::Uuid;

use super::*;

/// A database of its own for one test, with every migration of `sql/` applied;
/// dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// The server's maintenance database, where this one is created and dropped.
    admin: String,
    /// On the suite's server, so on the harness's record ([`record_made`]) until dropped.
    recorded: bool,
}

impl TestDb {
    pub fn new() -> Self {
        let admin_url = admin_url();
        let name = format!("be_test_{}", Uuid::new_v4().simple());
        let template = template();
        let mut admin = Client::connect(&admin_url, NoTls).expect("connect as admin");
        record_made(Made::Database, &name);
        clone_database(&mut admin, &name, template);
        TestDb {
            url: with_database(&admin_url, &name),
            name,
            admin: admin_url,
            recorded: true,
        }
    }

    /// A migrated database on another server than the suite's, e.g. one of the test's
    /// own ([`OwnPostgres`]) with server-level settings; `admin` is that server's
    /// maintenance database URL.
    pub fn new_on(admin: &str) -> Self {
        let db = Self::empty_on(admin, false);
        db.migrate();
        db
    }

    /// A database without the schema.
    pub fn empty() -> Self {
        Self::empty_on(&admin_url(), true)
    }

    /// `suites`: the server is the suite's, where what the harness makes is recorded.
    fn empty_on(admin_url: &str, suites: bool) -> Self {
        let name = format!("be_test_{}", Uuid::new_v4().simple());
        let mut admin = Client::connect(admin_url, NoTls).expect("connect as admin");
        if suites {
            record_made(Made::Database, &name);
        }
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create test database");
        let url = with_database(admin_url, &name);
        TestDb {
            name,
            url,
            admin: admin_url.to_owned(),
            recorded: suites,
        }
    }

    /// Applies the migrations through the built binary's `migrate`.
    pub fn migrate(&self) {
        migrate_url(&self.url);
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the test database")
    }

    /// The binary, pointed at this database, with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        owned(&mut cmd)
            .args(args)
            .env_clear()
            .env("DATABASE_URL", &self.url)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::of(self.command(args).output().expect("run the binary"))
    }

    /// The database user the suite connects as (`DATABASE_URL`'s): `postgres` on the
    /// throwaway server, whoever it is on a server of yours.
    pub fn user(&self) -> String {
        self.client()
            .query_one("SELECT current_user::text", &[])
            .expect("read current_user")
            .get(0)
    }

    /// One `run-once` that must succeed; returns its result JSON.
    pub fn run_once(&self, extra: &[&str]) -> CycleResult {
        let mut args = vec!["run-once"];
        args.extend_from_slice(extra);
        let run = self.run(&args);
        assert_eq!(run.code, 0, "run-once failed:\n{}", run.stderr);
        run.result()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&self.admin, NoTls) {
            let dropped = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
            if dropped.is_ok() && self.recorded {
                forget_made(&self.name);
            }
        }
    }
}

impl TestDb {
    /// A copy of this database with the same rows (`CREATE DATABASE … TEMPLATE`), so
    /// two commands can be compared on the same state. No session may be connected to
    /// this database meanwhile.
    pub fn copy(&self) -> TestDb {
        let name = format!("be_test_{}", Uuid::new_v4().simple());
        let mut admin = Client::connect(&self.admin, NoTls).expect("connect as admin");
        if self.recorded {
            record_made(Made::Database, &name);
        }
        clone_database(&mut admin, &name, &self.name);
        let url = with_database(&self.admin, &name);
        TestDb {
            name,
            url,
            admin: self.admin.clone(),
            recorded: self.recorded,
        }
    }
}

/// The database every [`TestDb::new`] of this run is cloned from, on the suite's server:
/// made and migrated on first use. Nobody connects to it afterwards (PostgreSQL clones a
/// database only while no session is connected to it); when the server is the one
/// `DATABASE_URL` names, it is dropped when this process exits.
fn template() -> &'static str {
    static TEMPLATE: OnceLock<String> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let admin_url = admin_url();
        let name = format!("be_template_{}", Uuid::new_v4().simple());
        let mut admin = Client::connect(&admin_url, NoTls).expect("connect as admin");
        // Dropped at exit on a server of yours (below), swept by a later run otherwise.
        record_made(Made::Database, &name);
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create the template database");
        migrate_url(&with_database(&admin_url, &name));
        admin
            .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
            .expect("close the template database to connections");
        if std::env::var_os("DATABASE_URL").is_some() {
            super::services::drop_database_at_exit(&admin_url, &name);
        }
        name
    })
}

/// `CREATE DATABASE name TEMPLATE template`, again while another session is still
/// connected to the template (one that just closed may linger for a moment: PostgreSQL
/// then refuses with "source database … is being accessed by other users").
fn clone_database(admin: &mut Client, name: &str, template: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin.batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}")) {
            Ok(()) => return,
            Err(e) if e.code() == Some(&SqlState::OBJECT_IN_USE) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("clone database {template}: {e}"),
        }
    }
}

/// The migrations of `sql/`, applied to the database at `url` (one that no `TestDb`
/// owns, e.g. the `postgres` database of a server a test started itself) by the built
/// binary's `migrate`, as a deployment applies them; panics with its stderr unless it
/// exits 0.
pub fn migrate_url(url: &str) {
    let out = Command::new(BIN)
        .args(["migrate", "--database-url", url])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("run the binary's migrate");
    assert!(
        out.status.success(),
        "booking-expire migrate failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
/// A LOGIN role that may only read the three tables the reports need, with read-only
/// transactions by default, as an operator's account would be (docs/guides/operating.md,
/// "During an incident"). Roles are cluster-wide: it is dropped, with its grants, when
/// this value goes out of scope (before the database).
pub struct ReadOnlyRole {
    pub name: String,
    /// The test database's URL with this role as the user.
    pub url: String,
    db_url: String,
    recorded: bool,
}

impl ReadOnlyRole {
    pub fn new(db: &TestDb) -> Self {
        let name = format!("ro_{}", Uuid::new_v4().simple());
        let mut c = db.client();
        if db.recorded {
            record_made(Made::Role, &name);
        }
        c.batch_execute(&format!(
            "CREATE ROLE {name} LOGIN;
             ALTER ROLE {name} SET default_transaction_read_only = on;
             GRANT USAGE ON SCHEMA crm TO {name};
             GRANT SELECT ON crm.bookings, crm.booking_expiration_poison, crm.outbox TO {name};"
        ))
        .expect("create a read-only role");
        ReadOnlyRole {
            url: with_user(&db.url, &name),
            name,
            db_url: db.url.clone(),
            recorded: db.recorded,
        }
    }
}

impl Drop for ReadOnlyRole {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.db_url, NoTls) {
            let _ = c.batch_execute(&drop_owned_sql(&self.name));
        }
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls) {
            let dropped = admin.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
            if dropped.is_ok() && self.recorded {
                forget_made(&self.name);
            }
        }
    }
}

/// `DROP OWNED BY role` for a user that is not a superuser too: one with `CREATEROLE`
/// may only drop what a role owns or was granted once it has the role's privileges, so
/// it grants the role to itself first (dropping the role later removes that).
pub fn drop_owned_sql(role: &str) -> String {
    format!("GRANT {role} TO CURRENT_USER; DROP OWNED BY {role};")
}

/// A LOGIN role of a test's own on its database's server, e.g. a member of the job's
/// group roles as a deployment grants them: `CREATE ROLE name LOGIN {clause}`
/// (`IN ROLE crm_booking_expiration_worker`, `CONNECTION LIMIT 1 IN ROLE …`). Roles are
/// cluster-wide, so the name is unique and on the harness's record while it exists (a
/// killed run's role is swept by the next run); dropped, settings and grants with it,
/// when this value goes out of scope (before the database).
pub struct LoginRole {
    pub name: String,
    /// The test database's URL with this role as the user.
    pub url: String,
    db_url: String,
    recorded: bool,
}

impl LoginRole {
    /// `prefix` says what the role is for (`login`, `job`, `ro`).
    pub fn new(db: &TestDb, prefix: &str, clause: &str) -> Self {
        let name = format!("{prefix}_{}", Uuid::new_v4().simple());
        if db.recorded {
            record_made(Made::Role, &name);
        }
        db.client()
            .batch_execute(&format!("CREATE ROLE {name} LOGIN {clause}"))
            .unwrap_or_else(|e| panic!("create the login role {name} ({clause}): {e}"));
        LoginRole {
            url: with_user(&db.url, &name),
            db_url: db.url.clone(),
            name,
            recorded: db.recorded,
        }
    }

    /// A member of the group roles `groups` (comma-separated).
    pub fn member_of(db: &TestDb, prefix: &str, groups: &str) -> Self {
        Self::new(db, prefix, &format!("IN ROLE {groups}"))
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect as the login role")
    }

    /// The binary on the test database, connected as this role.
    pub fn run(&self, db: &TestDb, args: &[&str]) -> Run {
        Run::of(
            db.command(args)
                .env("DATABASE_URL", &self.url)
                .output()
                .expect("run the binary"),
        )
    }
}

impl Drop for LoginRole {
    fn drop(&mut self) {
        let Ok(mut c) = Client::connect(&self.db_url, NoTls) else {
            return;
        };
        let dropped = c.batch_execute(&format!(
            "ALTER ROLE {0} RESET ALL; {1} DROP ROLE IF EXISTS {0}",
            self.name,
            drop_owned_sql(&self.name)
        ));
        if dropped.is_ok() && self.recorded {
            forget_made(&self.name);
        }
    }
}
