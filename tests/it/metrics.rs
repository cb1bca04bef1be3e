//! The metrics push against a real Prometheus Pushgateway (Debian's
//! `prometheus-pushgateway`, one per test on a free port, in memory): what a run pushes
//! is read back from the Pushgateway's own `/metrics`, with exact names, labels and
//! values.

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka::*;
use common::pushgateway::*;
use common::*;

fn keys(group: &BTreeMap<String, f64>) -> Vec<&str> {
    group.keys().map(String::as_str).collect()
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every series `run-once` pushes, in the order of their keys, and the two the
/// Pushgateway adds to each group. The outbox gauges come from the relay, whose role
/// may read the outbox (the worker's may only insert into it).
const RUN_ONCE_SERIES: &[&str] = &[
    "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Booking\"}",
    "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Reserve\"}",
    "crm_booking_expiration_backlog{phase=\"Booking\"}",
    "crm_booking_expiration_backlog{phase=\"Reserve\"}",
    "crm_booking_expiration_cycle_duration_seconds_count",
    "crm_booking_expiration_cycle_duration_seconds_sum",
    "crm_booking_expiration_errors",
    "crm_booking_expiration_items{phase=\"Booking\"}",
    "crm_booking_expiration_items{phase=\"Reserve\"}",
    "crm_booking_expiration_last_success_timestamp_seconds",
    "crm_booking_expiration_lateness_seconds_count{phase=\"Booking\"}",
    "crm_booking_expiration_lateness_seconds_count{phase=\"Reserve\"}",
    "crm_booking_expiration_lateness_seconds_sum{phase=\"Booking\"}",
    "crm_booking_expiration_lateness_seconds_sum{phase=\"Reserve\"}",
    "crm_booking_expiration_paused_seconds",
    "crm_booking_expiration_poison",
    "crm_booking_expiration_poison_isolated",
    "crm_booking_expiration_skip_locked",
    "push_failure_time_seconds",
    "push_time_seconds",
];

#[test]
fn run_once_pushes_the_runs_gauges_and_the_backlog() {
    let gateway = Pushgateway::start();
    let db = TestDb::new();
    let mut c = db.client();
    let mut poison = Seed::booked(-3_600);
    poison.expired_at_set = true;
    let seeded = now_unix();
    seed(
        &mut c,
        &[
            Seed::reserved(-600),
            Seed::reserved(-300),
            Seed::reserved(-60),
            Seed::booked(-120),
            poison,
            Seed::reserved(3_600),
        ],
    );
    let before = now_unix();
    let run = db.run(&["run-once", "--pushgateway-url", &gateway.url()]);
    let after = now_unix();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (3, 1, 0, 1));
    assert!(run.stderr.contains("metrics pushed"), "{}", run.stderr);

    let group = gateway.group("run-once");
    assert_eq!(keys(&group), RUN_ONCE_SERIES.to_vec());
    let exact = [
        ("crm_booking_expiration_items{phase=\"Reserve\"}", 3.0),
        ("crm_booking_expiration_items{phase=\"Booking\"}", 1.0),
        ("crm_booking_expiration_skip_locked", 0.0),
        ("crm_booking_expiration_poison_isolated", 1.0),
        ("crm_booking_expiration_errors", 0.0),
        ("crm_booking_expiration_backlog{phase=\"Reserve\"}", 0.0),
        // The poison row stays active and overdue.
        ("crm_booking_expiration_backlog{phase=\"Booking\"}", 1.0),
        (
            "crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Reserve\"}",
            0.0,
        ),
        ("crm_booking_expiration_poison", 1.0),
        ("push_failure_time_seconds", 0.0),
    ];
    for (key, want) in exact {
        assert_eq!(group[key], want, "{key}");
    }
    // The duration histogram holds the run: one observation.
    assert_eq!(
        group["crm_booking_expiration_cycle_duration_seconds_count"],
        1.0
    );
    let duration = group["crm_booking_expiration_cycle_duration_seconds_sum"];
    assert!(duration > 0.0 && duration <= after - before, "{duration}");
    let buckets = gateway.buckets("run-once", "crm_booking_expiration_cycle_duration_seconds");
    let les: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
    assert_eq!(
        les,
        [
            "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"
        ]
    );
    for (le, n) in &buckets {
        let bound: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        assert_eq!(*n, if duration <= bound { 1.0 } else { 0.0 }, "le={le}");
    }
    let success = group["crm_booking_expiration_last_success_timestamp_seconds"];
    assert!(
        before <= success && success <= after,
        "{before} {success} {after}"
    );
    // The poison row was due an hour before the seed, and the run read the backlog
    // between the seed and its end, however long a loaded host took for those.
    let age = group["crm_booking_expiration_backlog_oldest_age_seconds{phase=\"Booking\"}"];
    assert!(
        (3_600.0..=3_600.0 + (after - seeded) + 1e-3).contains(&age),
        "{age} for a row due 3600 s before the seed, {:.3} s before the run's end",
        after - seeded
    );

    // Lateness: the deadlines were 600, 300 and 60 s (Reserve) and 120 s (Booking)
    // before the seed; the run's AsOf came a moment (under 10 s) after it. The poison
    // row did not expire and counts nowhere.
    let slack = after - before + 10.0;
    for (phase, count, sum) in [("Reserve", 3.0, 960.0), ("Booking", 1.0, 120.0)] {
        assert_eq!(
            group[&format!("crm_booking_expiration_lateness_seconds_count{{phase=\"{phase}\"}}")],
            count
        );
        let got =
            group[&format!("crm_booking_expiration_lateness_seconds_sum{{phase=\"{phase}\"}}")];
        assert!(sum < got && got < sum + count * slack, "{phase}: {got}");
    }
    let lateness = |phase: &str| -> Vec<(String, f64)> {
        samples(&gateway.exposition())
            .into_iter()
            .filter(|(name, labels, _)| {
                name == "crm_booking_expiration_lateness_seconds_bucket"
                    && labels["step"] == "run-once"
                    && labels["phase"] == phase
            })
            .map(|(_, labels, v)| (labels["le"].clone(), v))
            .collect()
    };
    let bounds = [
        "1", "5", "10", "20", "30", "45", "60", "70", "85", "120", "300", "900", "3600", "+Inf",
    ];
    let counts = |values: [f64; 14]| -> Vec<(String, f64)> {
        bounds.iter().map(|b| b.to_string()).zip(values).collect()
    };
    // Reserve: 60+ s → le 70, 300+ s and 600+ s → le 900.
    assert_eq!(
        lateness("Reserve"),
        counts([
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0
        ])
    );
    // Booking: 120+ s → le 300.
    assert_eq!(
        lateness("Booking"),
        counts([
            0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0
        ])
    );
}

#[test]
fn a_failed_run_pushes_errors_and_keeps_the_last_success() {
    let gateway = Pushgateway::start();
    let db = TestDb::new();
    seed(&mut db.client(), &[Seed::booked(-30)]);
    let first = db.run(&["run-once", "--pushgateway-url", &gateway.url()]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let ok = gateway.group("run-once");
    assert_eq!(ok["crm_booking_expiration_items{phase=\"Booking\"}"], 1.0);

    // PostgreSQL unreachable: exit 69, and the push still happens, through the
    // environment variable this time.
    let refused = refused_port();
    let down = format!("postgres://postgres@127.0.0.1:{}/postgres", refused.port);
    let failed = db
        .command(&["run-once"])
        .env("DATABASE_URL", &down)
        .env("PUSHGATEWAY_URL", gateway.url())
        .output()
        .unwrap();
    let failed = Run::of(failed);
    assert_eq!(failed.code, 69, "{}", failed.stderr);
    assert_eq!(failed.stdout, "");
    assert!(
        failed
            .stderr
            .contains("cannot read the backlog for the metrics push"),
        "{}",
        failed.stderr
    );
    let after = gateway.group("run-once");
    assert_eq!(keys(&after), RUN_ONCE_SERIES.to_vec());
    assert_eq!(after["crm_booking_expiration_errors"], 1.0);
    assert_eq!(
        after["crm_booking_expiration_items{phase=\"Booking\"}"],
        0.0
    );
    // POST, not PUT: what this run did not send keeps its value — the last success
    // above all, and the backlog the database could not tell this time.
    for key in [
        "crm_booking_expiration_last_success_timestamp_seconds",
        "crm_booking_expiration_backlog{phase=\"Booking\"}",
        "crm_booking_expiration_poison",
    ] {
        assert_eq!(after[key].to_bits(), ok[key].to_bits(), "{key}");
    }
    assert!(after["push_time_seconds"] > ok["push_time_seconds"]);
}

#[test]
fn a_run_that_fails_mid_cycle_pushes_what_it_committed() {
    let gateway = Pushgateway::start();
    let db = TestDb::new();
    let mut c = db.client();
    seed(
        &mut c,
        &[Seed::reserved(-90), Seed::reserved(-60), Seed::booked(-30)],
    );
    // The Booking phase's write outlasts the statement timeout: that batch rolls back
    // and the run fails (75) after the Reserve batch committed.
    c.batch_execute(
        "CREATE FUNCTION public.slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF OLD.status = 'Booked' THEN PERFORM pg_sleep(5); END IF; RETURN NEW; END $$;
         CREATE TRIGGER slow BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION public.slow();",
    )
    .unwrap();
    let run = db.run(&[
        "run-once",
        "--statement-timeout",
        "500ms",
        "--pushgateway-url",
        &gateway.url(),
    ]);
    assert_eq!(run.code, 75, "{}", run.stderr);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status = 'ReserveExpired'"
        ),
        2
    );
    let group = gateway.group("run-once");
    let mut want = RUN_ONCE_SERIES.to_vec();
    want.retain(|k| *k != "crm_booking_expiration_last_success_timestamp_seconds");
    assert_eq!(keys(&group), want, "no success has ever been pushed");
    for (key, value) in [
        ("crm_booking_expiration_items{phase=\"Reserve\"}", 2.0),
        ("crm_booking_expiration_items{phase=\"Booking\"}", 0.0),
        ("crm_booking_expiration_errors", 1.0),
        ("crm_booking_expiration_backlog{phase=\"Reserve\"}", 0.0),
        ("crm_booking_expiration_backlog{phase=\"Booking\"}", 1.0),
    ] {
        assert_eq!(group[key], value, "{key}");
    }
}

#[test]
fn a_run_stopped_by_sigterm_pushes_before_it_exits() {
    let gateway = Pushgateway::start();
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-60), Seed::booked(-30)]);
    c.batch_execute(
        "CREATE FUNCTION public.slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF OLD.status = 'Booked' THEN PERFORM pg_sleep(30); END IF; RETURN NEW; END $$;
         CREATE TRIGGER slow BEFORE UPDATE ON crm.bookings
           FOR EACH ROW EXECUTE FUNCTION public.slow();",
    )
    .unwrap();
    let child = spawn(db.command(&["run-once", "--pushgateway-url", &gateway.url()]));
    // The Reserve batch committed; the Booking batch's write is in flight.
    wait_until(
        Duration::from_secs(20),
        "the Booking batch in flight",
        || {
            count(
                &mut c,
                "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event = 'PgSleep'",
            ) == 1
        },
    );
    let signalled = Instant::now();
    send_signal(&child, "TERM");
    let run = Run::of(child.wait_with_output().unwrap());
    assert_eq!(run.code, 143, "{}", run.stderr);
    // Behaviour: SIGTERM ends the statement's wait (a 30 s pg_sleep) and the run; 20 s
    // tells the two apart under load.
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "{:?}",
        signalled.elapsed()
    );
    let group = gateway.group("run-once");
    // The pod is going away: no backlog read, only the run's own gauges.
    assert_eq!(
        keys(&group),
        [
            "crm_booking_expiration_cycle_duration_seconds_count",
            "crm_booking_expiration_cycle_duration_seconds_sum",
            "crm_booking_expiration_errors",
            "crm_booking_expiration_items{phase=\"Booking\"}",
            "crm_booking_expiration_items{phase=\"Reserve\"}",
            "crm_booking_expiration_lateness_seconds_count{phase=\"Booking\"}",
            "crm_booking_expiration_lateness_seconds_count{phase=\"Reserve\"}",
            "crm_booking_expiration_lateness_seconds_sum{phase=\"Booking\"}",
            "crm_booking_expiration_lateness_seconds_sum{phase=\"Reserve\"}",
            "crm_booking_expiration_paused_seconds",
            "crm_booking_expiration_poison_isolated",
            "crm_booking_expiration_skip_locked",
            "push_failure_time_seconds",
            "push_time_seconds",
        ]
    );
    // Lateness counts what committed: the Reserve expiry, not the rolled-back Booking one.
    assert_eq!(
        group["crm_booking_expiration_lateness_seconds_count{phase=\"Reserve\"}"],
        1.0
    );
    assert_eq!(
        group["crm_booking_expiration_lateness_seconds_count{phase=\"Booking\"}"],
        0.0
    );
    assert_eq!(group["crm_booking_expiration_errors"], 1.0);
    assert_eq!(
        group["crm_booking_expiration_items{phase=\"Reserve\"}"],
        1.0
    );
    assert_eq!(
        group["crm_booking_expiration_items{phase=\"Booking\"}"],
        0.0
    );
}

#[test]
fn the_relay_pushes_its_own_group() {
    let gateway = Pushgateway::start();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-60), Seed::booked(-60)]);
    db.run_once(&["--pushgateway-url", &gateway.url()]);
    let cycle = gateway.group("run-once");
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();

    let run = db
        .command(&["relay-outbox", "--brokers", &brokers])
        .env("PUSHGATEWAY_URL", gateway.url())
        .output()
        .unwrap();
    let run = Run::of(run);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let group = gateway.group("relay-outbox");
    let publications = |phase: &str| {
        format!("crm_booking_expiration_relay_publications{{phase=\"{phase}\",topic=\"{topic}\"}}")
    };
    assert_eq!(
        keys(&group),
        [
            "crm_booking_expiration_errors",
            "crm_booking_expiration_last_success_timestamp_seconds",
            "crm_booking_expiration_outbox_failed",
            "crm_booking_expiration_outbox_late",
            "crm_booking_expiration_outbox_oldest_pending_age_seconds",
            "crm_booking_expiration_outbox_pending",
            "crm_booking_expiration_outbox_waiting_for_topic",
            "crm_booking_expiration_paused_seconds",
            "crm_booking_expiration_relay_ack_age_seconds_count",
            "crm_booking_expiration_relay_ack_age_seconds_sum",
            "crm_booking_expiration_relay_duration_seconds",
            "crm_booking_expiration_relay_failed",
            "crm_booking_expiration_relay_floor_age_seconds",
            "crm_booking_expiration_relay_late",
            "crm_booking_expiration_relay_late_below_floor",
            publications("Booking").as_str(),
            publications("Reserve").as_str(),
            "crm_booking_expiration_relay_published",
            "crm_booking_expiration_relay_purged",
            "crm_booking_expiration_relay_skipped",
            "crm_booking_expiration_relay_sweep_in_progress",
            "push_failure_time_seconds",
            "push_time_seconds",
        ]
    );
    for (key, value) in [
        ("crm_booking_expiration_relay_published", 2.0),
        (publications("Reserve").as_str(), 1.0),
        (publications("Booking").as_str(), 1.0),
        ("crm_booking_expiration_relay_ack_age_seconds_count", 2.0),
        ("crm_booking_expiration_relay_failed", 0.0),
        ("crm_booking_expiration_relay_purged", 0.0),
        ("crm_booking_expiration_relay_skipped", 0.0),
        ("crm_booking_expiration_errors", 0.0),
        ("crm_booking_expiration_outbox_pending", 0.0),
        (
            "crm_booking_expiration_outbox_oldest_pending_age_seconds",
            0.0,
        ),
        ("crm_booking_expiration_outbox_failed", 0.0),
        ("crm_booking_expiration_outbox_waiting_for_topic", 0.0),
    ] {
        assert_eq!(group[key], value, "{key}");
    }
    assert!(group["crm_booking_expiration_relay_duration_seconds"] > 0.0);
    // Each event's age at the acknowledgement: written by the cycle above, acked now.
    let ages = gateway.buckets(
        "relay-outbox",
        "crm_booking_expiration_relay_ack_age_seconds",
    );
    assert_eq!(ages.last(), Some(&("+Inf".to_owned(), 2.0)));
    let sum = group["crm_booking_expiration_relay_ack_age_seconds_sum"];
    assert!(sum > 0.0, "{sum}");
    // A group per step: the relay's push left the cycle's group as it was.
    assert_eq!(gateway.group("run-once"), cycle);

    // The gauges `backlog --format prometheus` prints have the same help text when
    // pushed, so the Pushgateway and the dashboards see one meaning per name.
    let report = db.run(&["backlog", "--format", "prometheus"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let pushed = gateway.exposition();
    // (Lateness and the database's upkeep are printed by backlog only, never pushed.)
    let backlog_only = |l: &str| {
        booking_expire::testing::obs::backlog_only::FAMILIES
            .iter()
            .any(|f| l.starts_with(&format!("# HELP {} ", f.name)))
    };
    let helps: Vec<&str> = report
        .stdout
        .lines()
        .filter(|l| l.starts_with("# HELP ") && !backlog_only(l))
        .collect();
    assert_eq!(helps.len(), 11, "{}", report.stdout);
    for help in helps {
        assert!(pushed.lines().any(|l| l == help), "{help}\n{pushed}");
    }
}

/// The CronJob's pod as `cronjob.yaml` ships it (the same flags; check_deploy.py pins
/// them there): `run-once` and `relay-outbox --follow` start together; every commit of
/// the cycle reaches Kafka within 5 s, and both push their group.
#[test]
fn the_pod_as_deployed_gets_each_commit_to_kafka_within_5_seconds() {
    let gateway = Pushgateway::start();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 40, |i| {
        if i % 2 == 0 {
            Seed::reserved(-60 - i as i64)
        } else {
            Seed::booked(-60 - i as i64)
        }
    });
    // The cycle writes the contract's topic; this test's broker has its own.
    c.batch_execute(&format!(
        "CREATE FUNCTION public.to_test_topic() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN NEW.topic := '{topic}'; RETURN NEW; END $$;
         CREATE TRIGGER to_test_topic BEFORE INSERT ON crm.outbox
           FOR EACH ROW EXECUTE FUNCTION public.to_test_topic();"
    ))
    .unwrap();
    let with_env = |mut cmd: Command| {
        cmd.env("KAFKA_BROKERS", &brokers)
            .env("PUSHGATEWAY_URL", gateway.url());
        cmd
    };
    let relay = spawn(with_env(db.command(&[
        "relay-outbox",
        "--log-format=json",
        "--follow=28s",
        "--message-timeout=5s",
        "--batch-size=2000",
    ])));
    let cycle = with_env(db.command(&[
        "run-once",
        "--log-format=json",
        "--batch-size=200",
        "--max-batches=2000",
        "--deadline=25s",
    ]))
    .output()
    .unwrap();
    let cycle = Run::of(cycle);
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    assert_eq!(cycle.result().counts(), (20, 20, 0, 0));
    wait_until(Duration::from_secs(5), "every event published", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) == 40
    });
    // occurred_at is the cycle's AsOf, taken before its commit: an upper bound of the
    // commit → Kafka time.
    let slowest: f64 = c
        .query_one(
            "SELECT extract(epoch FROM max(published_at - occurred_at))::float8 FROM crm.outbox",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(slowest < 5.0, "{slowest} s from AsOf to published");
    assert_eq!(
        consume(&brokers, &topic, 6, 40, Duration::from_secs(10)).len(),
        40
    );

    send_signal(&relay, "TERM");
    let relay = Run::of(relay.wait_with_output().unwrap());
    assert_eq!(relay.code, 143, "{}", relay.stderr);
    assert_eq!(
        gateway.group("run-once")["crm_booking_expiration_items{phase=\"Reserve\"}"],
        20.0
    );
    let relayed = gateway.group("relay-outbox");
    assert_eq!(relayed["crm_booking_expiration_relay_published"], 40.0);
    assert_eq!(
        relayed["crm_booking_expiration_errors"], 1.0,
        "stopped by SIGTERM"
    );
}

#[test]
fn each_step_reads_its_gauges_under_its_least_privilege_role() {
    let gateway = Pushgateway::start();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-60), Seed::booked(-60)]);
    let worker = LoginRole::member_of(&db, "metrics", "crm_booking_expiration_worker");
    let relay = LoginRole::member_of(&db, "metrics", "crm_outbox_relay");

    let run = Run::of(
        db.command(&["run-once", "--pushgateway-url", &gateway.url()])
            .env("DATABASE_URL", &worker.url)
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("cannot read"), "{}", run.stderr);
    assert_eq!(keys(&gateway.group("run-once")), RUN_ONCE_SERIES.to_vec());

    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let run = Run::of(
        db.command(&["relay-outbox", "--brokers", &brokers])
            .env("DATABASE_URL", &relay.url)
            .env("PUSHGATEWAY_URL", gateway.url())
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("cannot read"), "{}", run.stderr);
    let group = gateway.group("relay-outbox");
    assert_eq!(group["crm_booking_expiration_relay_published"], 2.0);
    assert_eq!(group["crm_booking_expiration_outbox_pending"], 0.0);
}

#[test]
fn a_push_that_fails_never_fails_the_run() {
    let db = TestDb::new();
    seed(&mut db.client(), &[Seed::reserved(-60)]);

    // Nothing listens.
    let refused = refused_port();
    let closed = format!("http://127.0.0.1:{}", refused.port);
    let run = db.run(&["run-once", "--pushgateway-url", &closed]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (1, 0, 0, 0));
    // Named with the Pushgateway it was for, and why.
    assert!(
        run.stderr
            .contains(&format!("metrics push failed for {closed}: ")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("cannot connect"), "{}", run.stderr);

    // Something listens and never answers: the push gives up after its 2s.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let run = db.run(&["run-once", "--pushgateway-url", &url]);
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("no response: timed out after 2s"),
        "{}",
        run.stderr
    );
    // Behaviour: the push waits its 2 s timeout, then the run ends; 10 s bounds the rest
    // under load.
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "{took:?}"
    );

    // The Pushgateway refuses the push (a metric of that name has another type).
    let gateway = Pushgateway::start();
    let (status, _) = http(
        &gateway.addr,
        "POST",
        "/metrics/job/other",
        "# TYPE crm_booking_expiration_errors counter\ncrm_booking_expiration_errors 5\n",
    )
    .unwrap();
    assert_eq!(status, 200);
    let run = db.run(&["run-once", "--pushgateway-url", &gateway.url()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("HTTP/1.1 400 Bad Request: pushed metrics are invalid"),
        "{}",
        run.stderr
    );
    let group = gateway.group("run-once");
    assert!(group["push_failure_time_seconds"] > 0.0);
    assert_eq!(group["push_time_seconds"], 0.0);
}

#[test]
fn a_bad_pushgateway_url_is_refused_before_any_work() {
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed(&mut c, &[Seed::reserved(-60)]);
    for (url, message) in [
        (
            "ftp://pushgateway:9091",
            "invalid --pushgateway-url / PUSHGATEWAY_URL: scheme \"ftp\" is not supported",
        ),
        (
            "http://user:secret@pushgateway:9091",
            "invalid --pushgateway-url / PUSHGATEWAY_URL: credentials in the URL are not supported",
        ),
    ] {
        for relay in [false, true] {
            let args: &[&str] = if relay {
                &["relay-outbox", "--brokers", "127.0.0.1:1"]
            } else {
                &["run-once"]
            };
            let run = Run::of(
                db.command(args)
                    .env("PUSHGATEWAY_URL", url)
                    .output()
                    .unwrap(),
            );
            assert_eq!(run.code, 78, "{}", run.stderr);
            assert!(run.stderr.contains(message), "{}", run.stderr);
            assert!(!run.stderr.contains("secret"), "{}", run.stderr);
        }
    }
    assert_eq!(status_of(&mut c, ids[0]), "Reserved");
}
