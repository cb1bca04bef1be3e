//! The PostgreSQL and the Kafka broker of the whole run: those `DATABASE_URL` and
//! `KAFKA_BROKERS` name when set; otherwise a throwaway server and broker started once,
//! on first use, and shared by every test of the binary.
//!
//! The server is the testbed crate's: a child of this process that gets its fast
//! shutdown when this process ends, however it ends (its death signal: libtest exits
//! without running destructors; a panic, a signal or SIGKILL end it too), its directory
//! removed then by a guard. So is the broker: a child of this process that dies with it
//! (its death signal, KILL), its directory removed by a guard once the process exited.

use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The URL of the suite's PostgreSQL (its maintenance database): `DATABASE_URL`, or a
/// throwaway server started now or earlier in this run.
pub fn admin_url() -> String {
    if let Some(url) = std::env::var_os("DATABASE_URL") {
        return url.into_string().expect("DATABASE_URL is UTF-8");
    }
    static POSTGRES: OnceLock<Result<String, booking_expire_testbed::Error>> = OnceLock::new();
    let started = POSTGRES.get_or_init(|| {
        booking_expire_testbed::postgres::Postgres::new()
            .start()
            .map(|server| server.keep_until_exit().url())
    });
    match started {
        Ok(url) => url.clone(),
        Err(e) => panic!(
            "DATABASE_URL is not set and no throwaway PostgreSQL could be started: {e}\n\
             (scripts/test.sh installs what the tests need; or set DATABASE_URL)"
        ),
    }
}

/// `host:port` of the suite's Kafka broker: `KAFKA_BROKERS`, or a throwaway broker
/// started now or earlier in this run (the testbed crate's, a child of this process
/// that dies with it; its directory is removed once the process has exited).
pub fn shared_brokers() -> String {
    if let Some(brokers) = std::env::var_os("KAFKA_BROKERS") {
        return brokers.into_string().expect("KAFKA_BROKERS is UTF-8");
    }
    static KAFKA: OnceLock<Result<String, booking_expire_testbed::Error>> = OnceLock::new();
    let outcome = KAFKA.get_or_init(|| {
        booking_expire_testbed::kafka::Kafka::new()
            .start()
            .map(|broker| broker.keep_until_exit().brokers())
    });
    match outcome {
        Ok(address) => address.clone(),
        Err(e) => panic!(
            "KAFKA_BROKERS is not set and no throwaway kafka could be started: {e}\n\
             (scripts/test.sh installs what the tests need; or set KAFKA_BROKERS)"
        ),
    }
}

/// The write ends of the guards' stdin, held until the process exits.
static GUARDS: Mutex<Vec<ChildStdin>> = Mutex::new(Vec::new());

/// `DROP DATABASE name` on the server of `admin_url` once this process has exited (with
/// `psql`, from a process of its own that waits for a pipe to close).
pub fn drop_database_at_exit(admin_url: &str, name: &str) {
    let spawned = Command::new("sh")
        .args([
            "-c",
            r#"cat >/dev/null; exec psql -X -q -d "$1" -c "DROP DATABASE IF EXISTS $2""#,
            "sh",
            admin_url,
            name,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Ok(mut child) = spawned {
        GUARDS
            .lock()
            .unwrap()
            .push(child.stdin.take().expect("piped stdin"));
    }
}
