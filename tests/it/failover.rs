//! Failover for real: a primary and a hot standby streaming from it, the job pointed at
//! both with a multi-host URL (`target_session_attrs=read-write`), the primary killed
//! (`pg_ctl stop -m immediate`) and the standby promoted, between cycles and in the
//! middle of a catch-up. Afterwards every overdue booking has expired once on the new
//! primary, the relay has published every outbox row that survived, and no cycle
//! needed a manual step.

use crate::common;
use crate::postgres;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use common::kafka::*;
use common::*;

/// As the contract's topics have (the relay checks it before sending).
const PARTITIONS: i32 = 6;

/// The pair, and the URL that names the standby first, so that the job must choose the
/// writable server by `target_session_attrs` and not by the order of the hosts.
fn pair() -> (OwnPostgres, OwnPostgres, String) {
    let primary = OwnPostgres::start();
    let standby = OwnPostgres::standby_of(&primary);
    let url = format!(
        "postgres://postgres@{},{}/postgres?target_session_attrs=read-write",
        standby.address(),
        primary.address()
    );
    (primary, standby, url)
}

fn job(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("DATABASE_URL", url)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd
}

fn run(url: &str, args: &[&str]) -> Run {
    Run::of(job(url, args).output().expect("run the binary"))
}

fn cycle(url: &str, extra: &[&str]) -> CycleResult {
    let mut args = vec!["run-once"];
    args.extend_from_slice(extra);
    let run = run(url, &args);
    assert_eq!(run.code, 0, "run-once failed:\n{}", run.stderr);
    run.result()
}

/// Points the rows still to publish at this test's topic (the job writes the
/// contract's), then relays them: all of them, in one run. The run ends once the outbox
/// is empty; its `--deadline` (25 s by default) would end it before, however much is
/// pending, and a loaded host (load 14-19 on 2 cores) sent 9,000 of 20,000 rows in 25 s.
/// Ten minutes is the room such a host needs for this test's backlog many times over;
/// the deadline only stops a stuck run.
fn relay(url: &str, c: &mut postgres::Client, brokers: &str, topic: &str) {
    c.execute(
        "UPDATE crm.outbox SET topic = $1 WHERE published_at IS NULL",
        &[&topic],
    )
    .unwrap();
    let run = run(
        url,
        &[
            "relay-outbox",
            "--brokers",
            brokers,
            "--message-timeout",
            "10s",
            "--deadline",
            "10m",
        ],
    );
    assert_eq!(run.code, 0, "relay-outbox failed:\n{}", run.stderr);
}

fn seed_overdue(c: &mut postgres::Client, n: usize) {
    seed_many(c, n, |i| {
        if i % 2 == 0 {
            Seed::reserved(-100 - i as i64)
        } else {
            Seed::booked(-100 - i as i64)
        }
    });
}

/// On the new primary: every booking expired, each once, every outbox row published,
/// and the topic holds every outbox row's `ce_id` (duplicates only by `ce_id`).
fn assert_all_expired_and_published(c: &mut postgres::Client, n: i64, brokers: &str, topic: &str) {
    assert_eq!(
        count(
            c,
            "SELECT count(*) FROM crm.bookings WHERE status NOT IN ('ReserveExpired', 'BookingExpired')"
        ),
        0,
        "bookings left unexpired on the new primary"
    );
    assert_eq!(assert_each_expiry_written_once(c), n);
    assert_eq!(
        count(
            c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0,
        "outbox rows left unpublished on the new primary"
    );
    let ids: HashSet<String> = c
        .query("SELECT id::text FROM crm.outbox", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len() as i64, n);
    // Reading 20,000 records takes longer on a loaded host: the read ends once they
    // arrived, the limit only stops a stuck test.
    let got = consume(
        brokers,
        topic,
        PARTITIONS,
        n as usize,
        Duration::from_secs(300),
    );
    let on_topic: HashSet<String> = got.iter().map(|m| m.headers["ce_id"].clone()).collect();
    let missing: Vec<&String> = ids.difference(&on_topic).take(5).collect();
    assert!(
        missing.is_empty(),
        "outbox rows never published: {missing:?}"
    );
}

#[test]
fn a_failover_between_cycles_needs_no_manual_step() {
    let (primary, standby, url) = pair();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, PARTITIONS, &[]);
    seed_overdue(&mut primary.client(), 600);

    // Before the failover the standby, named first, is passed over: the cycle writes.
    let first = cycle(&url, &["--batch-size", "100", "--max-batches", "2"]);
    assert_eq!((first.reserve, first.booking), (200, 200));
    relay(&url, &mut primary.client(), &brokers, &topic);

    primary.wait_replayed_by(&standby);
    primary.stop_immediately();
    standby.promote();

    // The same URL, unchanged, now reaches the promoted standby.
    let second = cycle(&url, &["--batch-size", "100", "--max-batches", "2"]);
    assert_eq!((second.reserve, second.booking), (100, 100));
    let mut c = standby.client();
    relay(&url, &mut c, &brokers, &topic);
    assert_all_expired_and_published(&mut c, 600, &brokers, &topic);
}

#[test]
fn a_failover_in_the_middle_of_a_catch_up_loses_no_booking() {
    let (primary, standby, url) = pair();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, PARTITIONS, &[]);
    let n = 20_000;
    seed_overdue(&mut primary.client(), n);
    primary.wait_replayed_by(&standby);

    // The cycles get ten minutes (--deadline; 25 s by default), the room a loaded host
    // needs to expire this backlog: the catch-up is still at work when the primary
    // goes, and each cycle after the failover takes what is overdue until none is, so
    // the count of cycles says what the failover cost, not what the load did.
    let catch_up = Background::start(job(
        &url,
        &[
            "run-once",
            "--batch-size",
            "200",
            "--max-batches",
            "1000",
            "--deadline",
            "10m",
        ],
    ));
    let mut p = primary.client();
    // The limit only stops a stuck test.
    wait_until(Duration::from_secs(300), "the catch-up to commit", || {
        count(
            &mut p,
            "SELECT count(*) FROM crm.bookings WHERE expired_at IS NOT NULL",
        ) >= 2_000
    });
    drop(p);
    primary.stop_immediately();
    let interrupted = catch_up.wait();
    // The database went away under the cycle: a temporary failure, retried next minute.
    assert_eq!(interrupted.code, 75, "{}", interrupted.stderr);
    standby.promote();

    // What the standby had not replayed is lost with the primary: those bookings are
    // overdue again on the new primary, and the next cycles expire them.
    let mut cycles = 0;
    loop {
        cycles += 1;
        assert!(
            cycles <= 10,
            "the new primary did not catch up in 10 cycles"
        );
        let r = cycle(
            &url,
            &[
                "--batch-size",
                "500",
                "--max-batches",
                "100",
                "--deadline",
                "10m",
            ],
        );
        if r.reserve + r.booking == 0 {
            break;
        }
    }
    let mut c = standby.client();
    relay(&url, &mut c, &brokers, &topic);
    assert_all_expired_and_published(&mut c, n as i64, &brokers, &topic);
}

/// `default_transaction_read_only` for the whole server, as on a primary demoted during
/// a failover (ALTER SYSTEM stays on this server: it is not replicated).
fn set_read_only(server: &OwnPostgres, on: bool) {
    let mut c = server.client();
    let sql = if on {
        "ALTER SYSTEM SET default_transaction_read_only = on"
    } else {
        "ALTER SYSTEM RESET default_transaction_read_only"
    };
    c.batch_execute(sql).unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    let want = if on { "on" } else { "off" };
    wait_until(Duration::from_secs(10), "the reloaded setting", || {
        server
            .client()
            .query_one("SHOW default_transaction_read_only", &[])
            .unwrap()
            .get::<_, String>(0)
            == want
    });
}

/// Mid-failover, before the promotion: the standby still in recovery and the old
/// primary demoted to read-only. No server of the URL accepts writes, so each writer
/// exits 75 with one line naming both and how to reach the primary, and nothing is
/// done; once a server takes writes again, the same URL works.
#[test]
fn a_multi_host_url_whose_every_server_is_read_only_exits_75_naming_them() {
    let (primary, standby, url) = pair();
    let brokers = shared_brokers();
    let mut c = primary.client();
    seed_overdue(&mut c, 10);
    set_read_only(&primary, true);
    let before = checksum(&mut c);
    for args in [
        vec!["run-once"],
        vec!["relay-outbox", "--brokers", &brokers],
    ] {
        let run = run(&url, &args);
        assert_eq!(run.code, 75, "{args:?}:\n{}", run.stderr);
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains("booking-expire: error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}:\n{}", run.stderr);
        assert!(
            errors[0].contains(&format!(
                "cannot connect to PostgreSQL at {}, {}: none of them accepts writes",
                standby.address(),
                primary.address()
            )) && errors[0]
                .contains("nothing was done: point --database-url / DATABASE_URL at the primary")
                && errors[0].contains("target_session_attrs=read-write")
                && !errors[0].contains("does not allow writes"),
            "{args:?}: {}",
            errors[0]
        );
    }
    assert_eq!(checksum(&mut c), before);

    set_read_only(&primary, false);
    let result = cycle(&url, &[]);
    assert_eq!((result.reserve, result.booking), (5, 5));
}

/// Two restarts of the primary while the standby is still reconnecting after the first
/// (its receiver waits `wal_retrieve_retry_interval`, 5 s), with more than a WAL segment
/// written in between: the second shutdown checkpoint recycles the segment the standby
/// asks for next. Without its replication slot the standby logged "requested WAL
/// segment … has already been removed" forever and never caught up (the simulation's
/// promotion then timed out); with it the primary keeps that WAL.
#[test]
fn a_standby_catches_up_after_two_quick_restarts_of_its_primary() {
    let (primary, standby, _) = pair();
    let mut c = primary.client();
    c.batch_execute("CREATE TABLE wal_filler (x text)").unwrap();
    primary.restart();
    let mut c = primary.client();
    c.batch_execute(
        "INSERT INTO wal_filler SELECT repeat('x', 200) FROM generate_series(1, 150000)",
    )
    .unwrap();
    primary.restart();
    primary.wait_replayed_by(&standby);
}
