//! The job as a guest in the CRM's database: sessions the owners make read-only, cut,
//! time out or limit. Every writer checks that its session can write before any work;
//! a `--follow` relay reconnects when its session drops; `run-once` makes do with one
//! connection; output to a closed pipe never aborts.

use crate::common;
use crate::postgres;

use std::time::Duration;

use common::kafka::*;
use common::*;

/// Overdue bookings of both phases, and pending outbox rows on `topic` (written by a
/// first run-once before the database was made read-only).
fn with_work(db: &TestDb, topic: &str) -> postgres::Client {
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-100), Seed::booked(-100)]);
    db.run_once(&[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    seed(&mut c, &[Seed::reserved(-50), Seed::booked(-50)]);
    c
}

fn read_only_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("booking-expire: error:"))
        .collect()
}

#[test]
fn a_read_only_database_stops_every_writer_before_any_work_and_nothing_is_sent() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = with_work(&db, &topic);
    let before = checksum(&mut c);
    let pending = count(
        &mut c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    );
    assert_eq!(pending, 2);
    let outbox_id: uuid::Uuid = c
        .query_one("SELECT id FROM crm.outbox LIMIT 1", &[])
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "ALTER DATABASE {} SET default_transaction_read_only = on",
        db.name
    ))
    .unwrap();
    let id = outbox_id.to_string();
    let commands: [(&str, Vec<&str>); 5] = [
        ("run-once", vec!["run-once"]),
        (
            "relay-outbox",
            vec!["relay-outbox", "--brokers", &brokers, "--follow", "2s"],
        ),
        (
            "republish",
            vec![
                "republish",
                "--ids",
                &id,
                "--reason",
                "test",
                "--actor",
                "t",
            ],
        ),
        (
            "pause",
            vec!["pause", "run-once", "--reason", "test", "--actor", "t"],
        ),
        (
            "resume",
            vec!["resume", "run-once", "--reason", "test", "--actor", "t"],
        ),
    ];
    for (name, args) in commands {
        let run = db.run(&args);
        assert_eq!(run.code, 75, "{name}:\n{}", run.stderr);
        let errors = read_only_lines(&run.stderr);
        assert_eq!(errors.len(), 1, "{name}:\n{}", run.stderr);
        let line = errors[0];
        assert!(
            line.contains(&format!("{name} writes, but the server at 127.0.0.1:"))
                && line.contains("is read-only (transaction_read_only is on")
                && line.contains("target_session_attrs=read-write"),
            "{name}: {line}"
        );
    }
    // Nothing changed, nothing reached Kafka.
    assert_eq!(checksum(&mut c), before);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        pending
    );
    // Every command has exited: what the topic holds now is all that was sent.
    assert_eq!(records_on(&brokers, &topic, 6), 0, "nothing sent");

    // The read-only reports still work.
    let backlog = db.run(&["backlog"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
}

/// An outbox row of a key of its own on `topic`, written as another CRM writer would.
fn insert_row(c: &mut postgres::Client, topic: &str) -> uuid::Uuid {
    let id = uuid::Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, '{}'::jsonb)",
        &[&id, &uuid::Uuid::new_v4().to_string(), &topic],
    )
    .unwrap();
    id
}

/// Whether a `--follow` relay waits for inserts: its session idle after its first
/// fetch (it listens before fetching), or after the read of its pause switch that
/// follows the fetch. (pg_stat_activity keeps a prefix of a long statement.) Its start
/// reads the pause switch too, before it listens: only after its `relay started` line
/// (logged once it listens) does this say that it follows; see [`wait_listening`].
fn relay_listens(c: &mut postgres::Client) -> bool {
    c.query_one(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'booking-expire'
            AND state = 'idle'
            AND (starts_with($1::text, query)
                 OR query LIKE 'SELECT 1 FROM crm.booking_expiration_pause WHERE%')",
        &[&booking_expire_store::testing::PENDING_SQL],
    )
    .unwrap()
    .get::<_, i64>(0)
        == 1
}

/// Waits until `relay` follows: its `relay started` line on stderr (it listens then,
/// and reads nothing of its start's any more that [`relay_listens`] could take for a
/// fetch), then its session idle after a fetch. Before that a dropped session ends its
/// start, as the relay's start is not yet where it reconnects.
fn wait_listening(relay: &mut Background, c: &mut postgres::Client) {
    relay.wait_for_lines("relay started", 1, Duration::from_secs(60));
    wait_until(Duration::from_secs(60), "the relay listening", || {
        relay_listens(c)
    });
}

/// A topic of its own, a test database and a `--follow` relay on them, waiting for
/// inserts. The relay follows for ten minutes, a window that only bounds a relay left
/// behind: the test ends it with [`stop_following`] once it saw what it asserts.
struct Listening {
    brokers: String,
    topic: String,
    db: TestDb,
    c: postgres::Client,
    relay: Background,
}

fn listening() -> Listening {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let mut relay = following_relay(&db, &brokers, LEFT_BEHIND);
    wait_listening(&mut relay, &mut c);
    Listening {
        brokers,
        topic,
        db,
        c,
        relay,
    }
}

/// The follow window of a relay the test stops itself ([`stop_following`]): it only
/// bounds a relay left behind, so the test waits for what happened, however long a
/// loaded machine takes, and never for the window.
const LEFT_BEHIND: &str = "600s";

/// Stops a following relay with SIGTERM once the test has seen what it awaited, and
/// waits for its exit: 143, the signal's, with its report of what it did on stdout.
fn stop_following(relay: Background) -> Run {
    send_signal(&relay.child, "TERM");
    let run = relay.wait_within(Duration::from_secs(60));
    assert_eq!(
        run.code, 143,
        "SIGTERM ends a following relay:\n{}",
        run.stderr
    );
    run
}

/// Published rows of the test database.
fn marked(c: &mut postgres::Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
    )
}

fn following_relay(db: &TestDb, brokers: &str, follow: &str) -> Background {
    Background::start(db.command(&[
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
        "--follow",
        follow,
    ]))
}

/// The one line a reconnected relay logs, naming why its session dropped.
fn reconnect_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("database session dropped"))
        .collect()
}

#[test]
fn a_following_relay_whose_session_is_terminated_reconnects_and_goes_on() {
    let Listening {
        brokers,
        topic,
        db: _db,
        mut c,
        mut relay,
    } = listening();
    let first = insert_row(&mut c, &topic);
    assert_eq!(
        consume(&brokers, &topic, 6, 1, Duration::from_secs(60)).len(),
        1
    );
    c.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'booking-expire'",
        &[],
    )
    .unwrap();
    // Committed while the relay has no session: it still goes out in this run.
    let second = insert_row(&mut c, &topic);
    let got = consume(&brokers, &topic, 6, 2, Duration::from_secs(60));
    let ids: Vec<String> = got.iter().map(|m| m.headers["ce_id"].clone()).collect();
    assert!(ids.contains(&second.to_string()), "{ids:?}");
    relay.wait_for_lines("database session dropped", 1, Duration::from_secs(60));
    wait_until(Duration::from_secs(60), "both rows marked", || {
        marked(&mut c) == 2
    });
    let run = stop_following(relay);
    let lines = reconnect_lines(&run.stderr);
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].contains("reconnected") && lines[0].contains("administrator command"),
        "{}",
        lines[0]
    );
    let published = count(
        &mut c,
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
    );
    assert_eq!(published, 2, "{first} and {second} marked");
}

#[test]
fn a_following_relay_survives_a_server_restart() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let server = OwnPostgres::start();
    let db = TestDb::new_on(&server.url);
    let mut c = db.client();
    let mut relay = following_relay(&db, &brokers, LEFT_BEHIND);
    wait_listening(&mut relay, &mut c);
    server.restart();
    let mut c = db.client();
    let row = insert_row(&mut c, &topic);
    let got = consume(&brokers, &topic, 6, 1, Duration::from_secs(60));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["ce_id"], row.to_string());
    relay.wait_for_lines("database session dropped", 1, Duration::from_secs(60));
    wait_until(Duration::from_secs(60), "the row marked", || {
        marked(&mut c) == 1
    });
    let run = stop_following(relay);
    assert_eq!(reconnect_lines(&run.stderr).len(), 1, "{}", run.stderr);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL"
        ),
        1
    );
}

#[test]
fn a_republished_row_reaches_a_following_relay_in_the_same_run() {
    let Listening {
        brokers,
        topic,
        db,
        mut c,
        relay,
    } = listening();
    let id = insert_row(&mut c, &topic);
    assert_eq!(
        consume(&brokers, &topic, 6, 1, Duration::from_secs(60)).len(),
        1
    );
    wait_until(Duration::from_secs(60), "the row marked", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) == 1
    });
    let run = db.run(&[
        "republish",
        "--ids",
        &id.to_string(),
        "--reason",
        "test",
        "--actor",
        "t",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = consume(&brokers, &topic, 6, 2, Duration::from_secs(60));
    assert_eq!(got.len(), 2);
    wait_until(Duration::from_secs(60), "the row marked again", || {
        marked(&mut c) == 1
    });
    let run = stop_following(relay);
    assert_eq!(json_lines(&run.stdout)[0]["Published"], 2, "{}", run.stdout);
}

#[test]
fn a_short_idle_session_timeout_does_not_end_a_quiet_following_relay() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(&format!(
        "ALTER DATABASE {} SET idle_session_timeout = '1s'",
        db.name
    ))
    .unwrap();
    let relay = following_relay(&db, &brokers, "5s");
    let run = relay.wait();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(reconnect_lines(&run.stderr).is_empty(), "{}", run.stderr);
    // The database's setting stays as its owners set it for everyone else.
    let mut other = db.client();
    let setting: String = other
        .query_one("SHOW idle_session_timeout", &[])
        .unwrap()
        .get(0);
    assert_eq!(setting, "1s");
}

/// A LOGIN role allowed one connection, a member of `group`; dropped at the end.
fn one_connection_role(db: &TestDb, group: &str) -> LoginRole {
    LoginRole::new(
        db,
        "one_conn",
        &format!("CONNECTION LIMIT 1 IN ROLE {group}"),
    )
}

#[test]
fn run_once_does_a_catch_up_on_one_connection_when_a_second_is_refused() {
    let db = TestDb::new();
    let mut c = db.client();
    // Both phases with more than a batch: a catch-up that would go side by side.
    seed_many(&mut c, 12, |i| {
        if i % 2 == 0 {
            Seed::reserved(-100 - i as i64)
        } else {
            Seed::booked(-100 - i as i64)
        }
    });
    let role = one_connection_role(&db, "crm_booking_expiration_worker");
    let run = role.run(
        &db,
        &["run-once", "--batch-size", "2", "--max-batches", "3"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (6, 6, 0, 0), "{}", run.stdout);
    assert!(
        run.stderr
            .contains("pooler check on one session: a second connection was refused"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("cannot open a second session; the phases go on taking turns on one"),
        "{}",
        run.stderr
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE expired_at IS NOT NULL"
        ),
        12
    );
}

#[test]
fn a_relay_allowed_one_connection_says_it_needs_two_and_sends_nothing() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    insert_row(&mut c, &topic);
    let role = one_connection_role(&db, "crm_outbox_relay");
    let run = role.run(&db, &["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 69, "{}", run.stderr);
    let errors: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("booking-expire: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert!(
        errors[0].contains("relay-outbox needs 2 database connections at once")
            && errors[0].contains("CONNECTION LIMIT 2"),
        "{}",
        errors[0]
    );
    assert_eq!(records_on(&brokers, &topic, 6), 0, "nothing sent");
}

/// Runs the binary with its stdout and stderr read by nobody: both pipes are closed
/// before it writes anything (`2>&1 | head -0`). Returns the exit code (128 + signal).
fn with_closed_pipes(db: &TestDb, args: &[&str]) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = db.command(args);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[test]
fn every_command_ends_normally_when_its_output_is_closed_early() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed(&mut c, &[Seed::reserved(-100), Seed::booked(-100)]);
    let booking = ids[0].to_string();
    // run-once first, then its events go to this test's topic.
    for _ in 0..3 {
        let code = with_closed_pipes(&db, &["run-once"]);
        assert!([0, 141].contains(&code), "run-once exited {code}");
    }
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["run-once"],
        vec!["relay-outbox", "--brokers", &brokers],
        vec!["dry-run", "--as-of", "now"],
        vec!["backlog"],
        vec!["backlog", "--json"],
        vec!["backlog", "--format", "prometheus"],
        vec!["explain", &booking],
        vec!["explain", &booking, "--json"],
        vec!["pause", "run-once", "--reason", "t", "--actor", "t"],
        vec!["resume", "run-once", "--reason", "t", "--actor", "t"],
        vec![
            "pause", "run-once", "--reason", "t", "--actor", "t", "--json",
        ],
        vec![
            "resume", "run-once", "--reason", "t", "--actor", "t", "--json",
        ],
        vec![
            "republish",
            "--booking",
            &booking,
            "--reason",
            "t",
            "--actor",
            "t",
        ],
        vec![
            "retry-failed",
            "--all",
            "--reason",
            "t",
            "--actor",
            "t",
            "--json",
        ],
        vec!["--help"],
        vec!["run-once", "--batch-size", "-1"],
    ];
    for args in &cases {
        // Run it several times: whether the reader is gone before the first write or
        // between two writes varies from one run to the next.
        for _ in 0..3 {
            let code = with_closed_pipes(&db, args);
            let usage = args.contains(&"-1");
            let expected: &[i32] = if usage { &[64] } else { &[0, 141] };
            assert!(expected.contains(&code), "{args:?} exited {code}");
        }
    }
    // The work was done although nobody read what it said (the republished row too).
    let code = with_closed_pipes(&db, &["relay-outbox", "--brokers", &brokers]);
    assert!([0, 141].contains(&code), "relay-outbox exited {code}");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE expired_at IS NOT NULL"
        ),
        2
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        0
    );
}

#[test]
fn on_a_hot_standby_writers_exit_75_naming_it_and_a_multi_host_url_finds_the_primary() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let primary = OwnPostgres::start();
    let db = TestDb::new_on(&primary.url);
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-100), Seed::booked(-100)]);
    insert_row(&mut c, &topic);
    let standby = OwnPostgres::standby_of(&primary);
    let on_standby = with_database(&standby.url, &db.name);
    wait_until(Duration::from_secs(60), "the standby has the rows", || {
        postgres::Client::connect(&on_standby, postgres::NoTls)
            .ok()
            .and_then(|mut s| s.query_one("SELECT count(*) FROM crm.bookings", &[]).ok())
            .is_some_and(|r| r.get::<_, i64>(0) == 2)
    });
    let run_on = |url: &str, args: &[&str]| {
        Run::of(db.command(args).env("DATABASE_URL", url).output().unwrap())
    };
    for (name, args) in [
        ("run-once", vec!["run-once"]),
        ("relay-outbox", vec!["relay-outbox", "--brokers", &brokers]),
    ] {
        let run = run_on(&on_standby, &args);
        assert_eq!(run.code, 75, "{name}: {}", run.stderr);
        let errors = read_only_lines(&run.stderr);
        assert_eq!(errors.len(), 1, "{name}: {}", run.stderr);
        assert!(
            errors[0].contains(&format!(
                "{name} writes, but the server at 127.0.0.1:{} is a standby in recovery",
                standby.port()
            )) && errors[0].contains("target_session_attrs=read-write"),
            "{}",
            errors[0]
        );
    }
    assert_eq!(records_on(&brokers, &topic, 6), 0, "nothing sent");
    // The reports write nothing: they run on the standby.
    let run = run_on(&on_standby, &["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = run_on(&on_standby, &["dry-run", "--as-of", "now", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);

    // Standby first, then the primary: target_session_attrs=read-write picks the primary.
    let both = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{}?target_session_attrs=read-write",
        standby.port(),
        primary.port(),
        db.name
    );
    let run = run_on(&both, &["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (1, 1, 0, 0));
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let run = run_on(&both, &["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        consume(&brokers, &topic, 6, 3, Duration::from_secs(60)).len(),
        3
    );
}

#[test]
fn a_relay_whose_marks_are_refused_as_read_only_stops_at_once() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let server = OwnPostgres::start();
    let db = TestDb::new_on(&server.url);
    let mut c = db.client();
    // This session keeps writing after the server turns read-only.
    c.batch_execute("SET default_transaction_read_only = off")
        .unwrap();
    // It stops itself (exit 75) on the refused mark: the window only bounds a relay
    // left behind.
    let mut relay = following_relay(&db, &brokers, LEFT_BEHIND);
    wait_listening(&mut relay, &mut c);
    insert_row(&mut c, &topic);
    wait_until(Duration::from_secs(60), "the first row marked", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) == 1
    });
    // The server turns read-only under the relay's open sessions, as during a failover.
    c.batch_execute("ALTER SYSTEM SET default_transaction_read_only = on")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(Duration::from_secs(60), "the reload", || {
        let mut other = db.client();
        other
            .query_one("SHOW default_transaction_read_only", &[])
            .unwrap()
            .get::<_, String>(0)
            == "on"
    });
    insert_row(&mut c, &topic);
    let run = relay.wait();
    assert_eq!(run.code, 75, "{}", run.stderr);
    let errors = read_only_lines(&run.stderr);
    assert_eq!(errors.len(), 1, "{}", run.stderr);
    assert!(
        errors[0].contains("the server turned read-only while relaying (SQLSTATE 25006)")
            && errors[0].contains("target_session_attrs=read-write"),
        "{}",
        errors[0]
    );
    // The second row went out once and stays pending, to go again from the primary.
    assert_eq!(
        consume(&brokers, &topic, 6, 2, Duration::from_secs(60)).len(),
        2
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL"
        ),
        1
    );
}

#[test]
fn a_following_relay_whose_mark_session_is_terminated_goes_on_with_its_lock() {
    let Listening {
        brokers,
        topic,
        db: _db,
        mut c,
        mut relay,
    } = listening();
    insert_row(&mut c, &topic);
    wait_until(Duration::from_secs(60), "the first row marked", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) == 1
    });
    // Only the session that marked; the main session (and its lock) stays. The marks
    // are the relay's one session that holds no advisory lock (its last statement may
    // be the mark's COMMIT, or any of the mark's statements).
    let ended = count(
        &mut c,
        "SELECT count(*) FROM (SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.application_name = 'booking-expire'
            AND NOT EXISTS (SELECT FROM pg_locks l
                             WHERE l.pid = a.pid AND l.locktype = 'advisory')) t",
    );
    assert_eq!(ended, 1);
    insert_row(&mut c, &topic);
    relay.wait_for_lines("database session dropped", 1, Duration::from_secs(60));
    wait_until(Duration::from_secs(60), "both rows marked", || {
        marked(&mut c) == 2
    });
    let run = stop_following(relay);
    assert_eq!(json_lines(&run.stdout)[0]["Published"], 2, "{}", run.stderr);
    assert_eq!(reconnect_lines(&run.stderr).len(), 1, "{}", run.stderr);
    // The second row's mark met the dead session: it went out again (same ce_id).
    let got = consume(&brokers, &topic, 6, 2, Duration::from_secs(60));
    let ids: std::collections::BTreeSet<&str> =
        got.iter().map(|m| m.headers["ce_id"].as_str()).collect();
    assert_eq!(ids.len(), 2, "{} messages", got.len());
}
