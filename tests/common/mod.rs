//! Shared test harness: a fresh, migrated database per test on the PostgreSQL that
//! `scripts/test.sh` started (or the one `DATABASE_URL` names), the real binary, and
//! helpers to seed bookings and read back what the job wrote.

#![allow(dead_code)]

pub mod kafka;
pub mod tls;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use postgres::{Client, NoTls};
use serde_json::Value;
use uuid::Uuid;

pub const BIN: &str = env!("CARGO_BIN_EXE_booking-expire");

fn admin_url() -> String {
    std::env::var("DATABASE_URL").expect(
        "DATABASE_URL is not set: run the suite with scripts/test.sh, which starts a \
         throwaway PostgreSQL, or point DATABASE_URL at a server where this user may \
         create databases",
    )
}

/// A database of its own for one test, with every migration of `sql/` applied;
/// dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub fn new() -> Self {
        let db = Self::empty();
        db.migrate();
        db
    }

    /// A database without the schema.
    pub fn empty() -> Self {
        let name = format!("be_test_{}", Uuid::new_v4().simple());
        let mut admin = Client::connect(&admin_url(), NoTls).expect("connect as admin");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create test database");
        let url = with_database(&admin_url(), &name);
        TestDb { name, url }
    }

    pub fn migrate(&self) {
        let mut c = self.client();
        for file in migrations() {
            let sql = std::fs::read_to_string(&file).unwrap();
            c.batch_execute(&sql)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the test database")
    }

    /// The binary, pointed at this database, with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env_clear()
            .env("DATABASE_URL", &self.url)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::of(self.command(args).output().expect("run the binary"))
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
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

fn migrations() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    files
}

/// Replaces the database name of a URL (`…/postgres` → `…/name`), keeping the query.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    format!("{}/{name}{query}", &base[..path_start])
}

/// A finished process: exit code and both streams.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn of(out: Output) -> Self {
        use std::os::unix::process::ExitStatusExt;
        let code = out
            .status
            .code()
            .unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
        Run {
            code,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn result(&self) -> CycleResult {
        let lines: Vec<&str> = self.stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "stdout must be one JSON line: {:?}",
            self.stdout
        );
        CycleResult::parse(lines[0])
    }
}

/// The cycle result JSON, with its exact field names checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleResult {
    pub run_id: Uuid,
    pub as_of: DateTime<Utc>,
    pub reserve: i64,
    pub booking: i64,
    pub skipped: i64,
    pub poison: i64,
    pub duration_ms: i64,
}

impl CycleResult {
    pub fn parse(line: &str) -> Self {
        let v: Value = serde_json::from_str(line).expect("result is JSON");
        let obj = v.as_object().expect("result is an object");
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "AsOf",
                "BookingExpiredCount",
                "DurationMs",
                "PoisonCount",
                "ReserveExpiredCount",
                "RunId",
                "SkippedLockedCount"
            ]
        );
        let int = |k: &str| {
            obj[k]
                .as_i64()
                .unwrap_or_else(|| panic!("{k} is an integer"))
        };
        CycleResult {
            run_id: obj["RunId"].as_str().unwrap().parse().unwrap(),
            as_of: DateTime::parse_from_rfc3339(obj["AsOf"].as_str().unwrap())
                .unwrap()
                .with_timezone(&Utc),
            reserve: int("ReserveExpiredCount"),
            booking: int("BookingExpiredCount"),
            skipped: int("SkippedLockedCount"),
            poison: int("PoisonCount"),
            duration_ms: int("DurationMs"),
        }
    }

    /// (ReserveExpiredCount, BookingExpiredCount, SkippedLockedCount, PoisonCount)
    pub fn counts(&self) -> (i64, i64, i64, i64) {
        (self.reserve, self.booking, self.skipped, self.poison)
    }
}

/// A booking to seed. Deadlines are given relative to now, in seconds.
#[derive(Debug, Clone)]
pub struct Seed {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub status: &'static str,
    pub reserve_in: Option<i64>,
    pub booking_in: Option<i64>,
    pub expired_at_set: bool,
    pub version: i32,
}

impl Seed {
    pub fn new(status: &'static str, reserve_in: Option<i64>, booking_in: Option<i64>) -> Self {
        Seed {
            id: Uuid::new_v4(),
            tenant_id: Uuid::new_v4(),
            deal_id: Uuid::new_v4(),
            property_object_id: Uuid::new_v4(),
            status,
            reserve_in,
            booking_in,
            expired_at_set: false,
            version: 1,
        }
    }
    pub fn reserved(reserve_in: i64) -> Self {
        Seed::new("Reserved", Some(reserve_in), None)
    }
    pub fn booked(booking_in: i64) -> Self {
        Seed::new("Booked", Some(-86_400), Some(booking_in))
    }
}

/// Inserts the bookings in one statement; returns their ids in order.
pub fn seed(c: &mut Client, rows: &[Seed]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let tenants: Vec<Uuid> = rows.iter().map(|r| r.tenant_id).collect();
    let deals: Vec<Uuid> = rows.iter().map(|r| r.deal_id).collect();
    let objects: Vec<Uuid> = rows.iter().map(|r| r.property_object_id).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r.status).collect();
    let reserve: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r.reserve_in.map(|s| s as f64))
        .collect();
    let booking: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r.booking_in.map(|s| s as f64))
        .collect();
    let expired: Vec<bool> = rows.iter().map(|r| r.expired_at_set).collect();
    let versions: Vec<i32> = rows.iter().map(|r| r.version).collect();
    c.execute(
        "INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
             reserve_expires_at, booking_expires_at, expired_at, created_at, updated_at, version)
         SELECT id, t, d, o, s,
                now() + r * interval '1 second', now() + b * interval '1 second',
                CASE WHEN e THEN now() - interval '1 day' END,
                now() - interval '2 days', now() - interval '2 days', v
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[],
                       $6::float8[], $7::float8[], $8::bool[], $9::int4[])
             AS x(id, t, d, o, s, r, b, e, v)",
        &[
            &ids, &tenants, &deals, &objects, &statuses, &reserve, &booking, &expired, &versions,
        ],
    )
    .expect("seed bookings");
    ids
}

/// `n` bookings of one kind.
pub fn seed_many(c: &mut Client, n: usize, make: impl Fn(usize) -> Seed) -> Vec<Uuid> {
    let rows: Vec<Seed> = (0..n).map(make).collect();
    seed(c, &rows)
}

/// A booking as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Booking {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub status: String,
    pub expired_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub version: i32,
}

pub fn booking(c: &mut Client, id: Uuid) -> Booking {
    let r = c
        .query_one(
            "SELECT id, tenant_id, deal_id, property_object_id, status, expired_at, updated_at, version
               FROM crm.bookings WHERE id = $1",
            &[&id],
        )
        .unwrap();
    Booking {
        id: r.get(0),
        tenant_id: r.get(1),
        deal_id: r.get(2),
        property_object_id: r.get(3),
        status: r.get(4),
        expired_at: r.get(5),
        updated_at: r.get(6),
        version: r.get(7),
    }
}

pub fn status_of(c: &mut Client, id: Uuid) -> String {
    booking(c, id).status
}

pub fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// A text digest of every row of every table of the schema `crm`: equal digests mean
/// nothing was written.
pub fn checksum(c: &mut Client) -> String {
    let tables: Vec<String> = c
        .query(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'crm' ORDER BY tablename",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = String::new();
    for t in tables {
        let row = c
            .query_one(
                &format!(
                    "SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '')
                       FROM crm.{t} x"
                ),
                &[],
            )
            .unwrap();
        let (n, digest): (i64, String) = (row.get(0), row.get(1));
        out.push_str(&format!("{t}:{n}:{digest}\n"));
    }
    out
}

/// Waits until `probe` is true, or panics after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut probe: impl FnMut() -> bool) {
    let start = Instant::now();
    while !probe() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the binary in the background with piped output.
pub fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the binary")
}

pub fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

// ---- Helpers of the operator reports' tests (dry-run, backlog) ----

impl TestDb {
    /// A copy of this database with the same rows (`CREATE DATABASE … TEMPLATE`), so
    /// two commands can be compared on the same state. No session may be connected to
    /// this database meanwhile.
    pub fn copy(&self) -> TestDb {
        let name = format!("be_test_{}", Uuid::new_v4().simple());
        let mut admin = Client::connect(&admin_url(), NoTls).expect("connect as admin");
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {}", self.name))
            .expect("copy the test database");
        let url = with_database(&admin_url(), &name);
        TestDb { name, url }
    }
}

/// Replaces the user of a URL (`postgres://old@host/db` → `postgres://new@host/db`).
pub fn with_user(url: &str, user: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).expect("a URL");
    let rest = &url[scheme_end..];
    let host = rest.find('@').map_or(rest, |at| &rest[at + 1..]);
    format!("{}{user}@{host}", &url[..scheme_end])
}

/// The JSON objects of a JSON-lines output.
pub fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Quarantines a booking (as it is now) as the cycle would, until `retry_in` seconds
/// from now.
pub fn put_in_quarantine(
    c: &mut Client,
    booking: &Seed,
    phase: &str,
    reason: &str,
    attempts: i32,
    retry_in: i64,
) {
    c.execute(
        "INSERT INTO crm.booking_expiration_poison
             (booking_id, tenant_id, phase, reason, error, sqlstate, attempts,
              first_seen_at, last_seen_at, retry_at, last_run_id, booking_version, booking_status)
         SELECT $1, $2, $3, $4, 'seeded by a test', NULL, $5,
                now() - interval '1 hour', now() - interval '1 minute',
                now() + $6 * interval '1 second', NULL, b.version, b.status::text
           FROM crm.bookings b WHERE b.id = $1",
        &[
            &booking.id,
            &booking.tenant_id,
            &phase,
            &reason,
            &attempts,
            &(retry_in as f64),
        ],
    )
    .expect("quarantine a booking");
}

/// The relay's view of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    Pending,
    Published,
    Failed,
}

/// Writes one outbox row per entry of `ages` (seconds since it was written); returns
/// their ids.
pub fn insert_outbox_rows(c: &mut Client, state: OutboxState, ages: &[i64]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = ages.iter().map(|_| Uuid::now_v7()).collect();
    let ages: Vec<f64> = ages.iter().map(|a| *a as f64).collect();
    let (published, failed) = match state {
        OutboxState::Pending => (false, false),
        OutboxState::Published => (true, false),
        OutboxState::Failed => (false, true),
    };
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers,
                                 occurred_at, published_at, failed_at, attempts)
         SELECT id, 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
                'pin.crm.booking-expired.v1', '{}'::jsonb, '{}'::jsonb,
                now() - age * interval '1 second',
                CASE WHEN $3 THEN now() END, CASE WHEN $4 THEN now() END,
                CASE WHEN $3 OR $4 THEN 1 ELSE 0 END
           FROM unnest($1::uuid[], $2::float8[]) AS x(id, age)",
        &[&ids, &ages, &published, &failed],
    )
    .expect("insert outbox rows");
    ids
}

/// A LOGIN role that may only read the three tables the reports need, with read-only
/// transactions by default, as an operator's account would be (README, "During an
/// incident"). Roles are cluster-wide: it is dropped,
/// with its grants, when this value goes out of scope (before the database).
pub struct ReadOnlyRole {
    pub name: String,
    /// The test database's URL with this role as the user.
    pub url: String,
    db_url: String,
}

impl ReadOnlyRole {
    pub fn new(db: &TestDb) -> Self {
        let name = format!("ro_{}", Uuid::new_v4().simple());
        let mut c = db.client();
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
        }
    }
}

impl Drop for ReadOnlyRole {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.db_url, NoTls) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {}", self.name));
        }
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls) {
            let _ = admin.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.name));
        }
    }
}

/// A background process whose output goes to files, so a chatty process never blocks
/// on a full pipe while the test waits for something else.
pub struct Background {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Background {
    pub fn start(mut cmd: Command) -> Self {
        let base = std::env::temp_dir().join(format!("be-out-{}", Uuid::new_v4().simple()));
        let stdout = base.with_extension("stdout");
        let stderr = base.with_extension("stderr");
        cmd.stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let child = cmd.spawn().expect("spawn the binary");
        Background {
            child,
            stdout,
            stderr,
        }
    }

    pub fn wait(mut self) -> Run {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().unwrap();
        let read = |p: &PathBuf| {
            let s = String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
            let _ = std::fs::remove_file(p);
            s
        };
        Run {
            code: status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            stdout: read(&self.stdout),
            stderr: read(&self.stderr),
        }
    }
}

// ---- Helpers of the fault, signal, soak and bad-input tests ----

/// The migrations of `sql/`, applied to the database at `url` (one that no `TestDb`
/// owns, e.g. the `postgres` database of a server a test started itself).
pub fn migrate_url(url: &str) {
    let mut c = Client::connect(url, NoTls).expect("connect to migrate");
    for file in migrations() {
        let sql = std::fs::read_to_string(&file).unwrap();
        c.batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}

/// A gate on one statement of the job: a trigger makes it wait for advisory lock `key`,
/// which the returned session holds until [`open_gate`] (or until it is dropped).
/// `trigger` is the trigger's definition up to `EXECUTE`, e.g.
/// `TRIGGER g AFTER INSERT ON crm.deal_timeline FOR EACH STATEMENT`, or a
/// `CONSTRAINT TRIGGER … DEFERRABLE INITIALLY DEFERRED FOR EACH ROW` to block a COMMIT.
pub fn hold_gate(url: &str, key: i64, trigger: &str) -> Client {
    let mut gate = Client::connect(url, NoTls).expect("connect the gate");
    gate.batch_execute(&format!(
        "CREATE FUNCTION crm.gate_{key}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_advisory_xact_lock({key}); RETURN NULL; END $$;
         CREATE {trigger} EXECUTE FUNCTION crm.gate_{key}();
         SELECT pg_advisory_lock({key});"
    ))
    .expect("install the gate");
    gate
}

pub fn open_gate(gate: &mut Client, key: i64) {
    gate.batch_execute(&format!("SELECT pg_advisory_unlock({key})"))
        .expect("open the gate");
}

/// Whether a session of the job (application_name `booking-expire`) on database
/// `db_name` waits for a lock in a statement whose text contains `query_part`.
pub fn job_waits_in(c: &mut Client, db_name: &str, query_part: &str) -> bool {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'booking-expire'
            AND wait_event_type = 'Lock' AND strpos(query, $2) > 0",
        &[&db_name, &query_part],
    )
    .unwrap()
    .get::<_, i64>(0)
        > 0
}

/// Sessions of the job connected to database `db_name`.
pub fn job_sessions(c: &mut Client, db_name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'booking-expire'",
        &[&db_name],
    )
    .unwrap()
    .get(0)
}

/// Locks held or awaited by the job's sessions on database `db_name`.
pub fn job_locks(c: &mut Client, db_name: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.datname = $1 AND a.application_name = 'booking-expire'",
        &[&db_name],
    )
    .unwrap()
    .get(0)
}

/// Waits until the job has no session (hence no lock) left on the database, and
/// checks that every row of `crm.bookings` can be locked at once.
pub fn assert_locks_released(c: &mut Client, db_name: &str) {
    wait_until(Duration::from_secs(15), "the job's sessions to end", || {
        job_sessions(c, db_name) == 0
    });
    assert_eq!(job_locks(c, db_name), 0, "no lock left by the job");
    let all = count(c, "SELECT count(*) FROM crm.bookings");
    let mut tx = c.transaction().unwrap();
    let lockable = tx
        .query("SELECT id FROM crm.bookings FOR UPDATE NOWAIT", &[])
        .expect("every booking lockable at once")
        .len() as i64;
    assert_eq!(lockable, all);
    tx.rollback().unwrap();
}

/// The invariants of the expiry write, whatever happened before: every expired
/// booking (status *Expired with `expired_at` set) has exactly one outbox row, one
/// audit row and one timeline entry, and nothing else has any.
pub fn assert_each_expiry_written_once(c: &mut Client) -> i64 {
    let expired = count(
        c,
        "SELECT count(*) FROM crm.bookings
          WHERE status IN ('ReserveExpired', 'BookingExpired') AND expired_at IS NOT NULL",
    );
    for (sql, what) in [
        (
            "SELECT count(*) FROM crm.outbox o JOIN crm.bookings b ON b.id::text = o.aggregateid
              WHERE b.status IN ('ReserveExpired', 'BookingExpired')",
            "outbox rows of expired bookings",
        ),
        (
            "SELECT count(DISTINCT aggregateid) FROM crm.outbox",
            "bookings with an outbox row",
        ),
        ("SELECT count(*) FROM crm.outbox", "outbox rows"),
        ("SELECT count(*) FROM crm.booking_audit", "audit rows"),
        (
            "SELECT count(DISTINCT booking_id) FROM crm.booking_audit",
            "bookings with an audit row",
        ),
        ("SELECT count(*) FROM crm.deal_timeline", "timeline entries"),
    ] {
        assert_eq!(count(c, sql), expired, "{what}");
    }
    expired
}

/// A TCP listener on 127.0.0.1 that never accepts: the kernel completes the
/// handshake, then nothing ever answers (a hung server, a half-dead proxy).
pub fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A PostgreSQL server of the test's own (scripts/pg-start.sh in a temporary
/// directory), to restart or stop; its `postgres` database is migrated.
pub struct OwnPostgres {
    pub dir: PathBuf,
    pub url: String,
}

fn scripts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

impl OwnPostgres {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("be-pg-{}", Uuid::new_v4().simple()));
        let out = Command::new(scripts_dir().join("pg-start.sh"))
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg-start.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        migrate_url(&url);
        OwnPostgres { dir, url }
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the own server")
    }

    /// `pg_ctl restart -m fast`: every session is terminated, the server comes back on
    /// the same port.
    pub fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "restart"]);
    }

    pub fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "-w", "stop"]);
    }

    /// As pg-stop.sh does: the cluster's tools run as its owner when we are root.
    fn pg_ctl(&self, args: &[&str]) {
        let bindir = std::fs::read_to_string(self.dir.join("pg_bindir")).unwrap();
        let pg_ctl = PathBuf::from(bindir.trim()).join("pg_ctl");
        let data = self.dir.join("pgdata");
        let log = self.dir.join("postgres.log");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        // -l: the restarted server logs to the file, never to our pipes.
        let out = cmd
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = Command::new(scripts_dir().join("pg-stop.sh"))
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Much history and a little active work, the shape the partial indexes exist for:
/// `terminal` finished bookings, then 1,000 active ones whose deadlines start
/// `first_deadline_min` minutes from now, one minute (reserve) and two (booking) apart.
pub fn seed_history(c: &mut Client, terminal: i32, first_deadline_min: i32) {
    c.execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['ReserveExpired','BookingExpired','Cancelled','Completed'])[1 + i % 4],
                now() - interval '30 days', now() - interval '20 days', now() - interval '20 days',
                now() - interval '40 days', now() - interval '20 days', 3
           FROM generate_series(1, $1) i",
        &[&terminal],
    )
    .expect("seed history");
    c.execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['Reserved','AwaitingPayment','Booked'])[1 + i % 3],
                now() + (i - 1 + $1) * interval '1 minute',
                now() + (i - 1 + $1) * interval '2 minutes', NULL, now(), now(), 1
           FROM generate_series(1, 1000) i",
        &[&first_deadline_min],
    )
    .expect("seed active bookings");
}

/// Makes every statement that inserts outbox rows take `seconds` longer (a statement
/// trigger), so a cycle's batches take measurable time.
pub fn slow_outbox_writes(c: &mut Client, seconds: f64) {
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
         CREATE TRIGGER slow AFTER INSERT ON crm.outbox
           FOR EACH STATEMENT EXECUTE FUNCTION crm.slow();"
    ))
    .expect("slow down outbox writes");
}

/// The ids (text) of the outbox rows marked published.
pub fn marked_published(c: &mut Client) -> std::collections::HashSet<String> {
    c.query(
        "SELECT id::text FROM crm.outbox WHERE published_at IS NOT NULL",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}
