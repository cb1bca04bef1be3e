//! The CronJob's time budget (cronjob.yaml's header, checked by
//! scripts/deploy/check_deploy.py): with the flags `cronjob.yaml` ships, read from it,
//! `relay-outbox` and `run-once` exit within `activeDeadlineSeconds` minus the pod's
//! start whatever hangs: the broker stalled (SIGSTOP) as the last batch goes out, the
//! Pushgateway and the OTLP endpoint taking connections and never answering. The bound
//! asserted is the budget itself, the product's contract (not a benchmark).

use crate::common;

use std::time::{Duration, Instant};

// The budgets asserted below are behaviour (cronjob.yaml's contract), measured with
// `elapsed`; every wait for a process or a row is bounded generously instead.

use common::kafka::*;
use common::*;

/// The pod's start, as cronjob.yaml's timing counts it (P <= S+5).
const POD_START: u64 = 5;

fn cronjob() -> String {
    std::fs::read_to_string(crate::common::repo().join("cronjob.yaml")).unwrap()
}

/// The container's args in cronjob.yaml: its subcommand, then its flags (comments off).
fn shipped_args(yaml: &str, subcommand: &str) -> Vec<String> {
    let mut lines = yaml.lines().map(str::trim);
    lines
        .find(|l| *l == format!("- {subcommand}"))
        .unwrap_or_else(|| panic!("no `- {subcommand}` in cronjob.yaml"));
    let mut args = vec![subcommand.to_owned()];
    for l in lines {
        let Some(flag) = l.strip_prefix("- --") else {
            break;
        };
        let flag = flag.split('#').next().unwrap().trim();
        args.push(format!("--{flag}"));
    }
    assert!(args.len() > 1, "{subcommand} has flags in cronjob.yaml");
    args
}

fn shipped_seconds(args: &[String], flag: &str) -> u64 {
    let value = args
        .iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
        .unwrap_or_else(|| panic!("{flag} in {args:?}"));
    value.strip_suffix('s').unwrap().parse().unwrap()
}

/// activeDeadlineSeconds minus the pod's start: what each container has.
fn budget(yaml: &str) -> Duration {
    let deadline: u64 = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("activeDeadlineSeconds:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Duration::from_secs(deadline - POD_START)
}

/// One command's budget as cronjob.yaml's header states it: its terms (what each wait
/// is, in seconds), their sum and what the sum must fit in.
#[derive(Debug)]
struct Stated {
    terms: Vec<(String, u64)>,
    total: u64,
    limit: u64,
}

impl Stated {
    fn term(&self, what: &str) -> u64 {
        self.terms
            .iter()
            .find(|(name, _)| name.starts_with(what))
            .unwrap_or_else(|| panic!("no term {what:?} in {self:?}"))
            .1
    }
}

/// The budget of `command` in cronjob.yaml's header: from its line (`#   relay-outbox
/// follow window  28`) through its `+ …` lines to `= total <= limit`.
fn stated_budget(yaml: &str, command: &str) -> Stated {
    let mut lines = yaml
        .lines()
        .map(|l| l.trim_start_matches('#').trim())
        .skip_while(|l| !l.starts_with(&format!("{command} ")));
    let mut terms = Vec::new();
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no budget of {command} in cronjob.yaml's header"));
    let mut line = first.strip_prefix(command).unwrap().trim().to_owned();
    loop {
        if let Some(sum) = line.strip_prefix("= ") {
            let (total, limit) = sum.split_once(" <= ").expect("`= total <= limit`");
            return Stated {
                terms,
                total: total.trim().parse().unwrap(),
                limit: limit.trim().parse().unwrap(),
            };
        }
        // Columns: what, seconds, and a note, two spaces or more apart (or what and
        // seconds one space apart, with no note).
        let mut columns = line
            .trim_start_matches("+ ")
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty());
        let first = columns.next().unwrap_or_default();
        let (name, seconds) = match columns.next() {
            Some(seconds) => (first, seconds),
            None => first.rsplit_once(' ').unwrap_or_default(),
        };
        let seconds = seconds.parse().unwrap_or_else(|_| {
            panic!("a term of {command}'s budget: what, then seconds: {line:?}")
        });
        terms.push((name.trim().to_owned(), seconds));
        line = lines
            .next()
            .unwrap_or_else(|| panic!("{command}'s budget has no `= total <= limit` line"))
            .to_owned();
    }
}

/// The relay's budget, exactly as the shipped flags make it: the header's terms are
/// what the flags give (the follow window, the topic check, the delivery reports),
/// they add up to its total, and that fills activeDeadlineSeconds minus the pod's start
/// exactly. The follow window is what is left of the budget after every other wait,
/// so a longer `--follow` (or any longer wait) fails here before any run.
fn relay_budget(yaml: &str) -> (Stated, Duration) {
    let args = shipped_args(yaml, "relay-outbox");
    let stated = stated_budget(yaml, "relay-outbox");
    let limit = budget(yaml).as_secs();
    assert_eq!(
        stated.limit, limit,
        "the relay's budget is activeDeadlineSeconds - pod start: {stated:?}"
    );
    let sum: u64 = stated.terms.iter().map(|(_, s)| s).sum();
    assert_eq!(
        sum, stated.total,
        "the relay's terms add up to its total: {stated:?}"
    );
    let message = shipped_seconds(&args, "--message-timeout");
    assert_eq!(stated.term("topic check"), message, "{stated:?}");
    assert_eq!(
        stated.term("that batch's delivery reports"),
        message + 2,
        "{stated:?}"
    );
    let others: u64 = stated.terms[1..].iter().map(|(_, s)| s).sum();
    assert!(stated.terms[0].0.starts_with("follow window"), "{stated:?}");
    let follow = limit - others;
    assert_eq!(
        stated.terms[0].1, follow,
        "the follow window is what the other waits leave: {stated:?}"
    );
    assert_eq!(
        shipped_seconds(&args, "--follow"),
        follow,
        "relay-outbox's --follow is the budget ({limit} s) minus every other wait ({others} s)"
    );
    (stated, Duration::from_secs(follow))
}

#[test]
fn the_shipped_relay_flags_fill_its_budget_exactly() {
    let yaml = cronjob();
    let (stated, follow) = relay_budget(&yaml);
    assert_eq!(stated.total, stated.limit, "{stated:?}");
    assert!(follow > Duration::ZERO, "{stated:?}");
    let cycle = stated_budget(&yaml, "run-once");
    assert_eq!(
        cycle.terms.iter().map(|(_, s)| s).sum::<u64>(),
        cycle.total,
        "{cycle:?}"
    );
    assert!(
        cycle.total <= cycle.limit && cycle.limit == budget(&yaml).as_secs(),
        "{cycle:?}"
    );
    let args = shipped_args(&yaml, "run-once");
    assert_eq!(
        cycle.term("--deadline"),
        shipped_seconds(&args, "--deadline"),
        "{cycle:?}"
    );
}

/// The Pushgateway and the OTLP endpoint: both take the connection and never answer.
fn hanging_endpoints(cmd: &mut std::process::Command) -> [std::net::TcpListener; 2] {
    let (gateway, gateway_port) = silent_listener();
    let (otlp, otlp_port) = silent_listener();
    cmd.env(
        "PUSHGATEWAY_URL",
        format!("http://127.0.0.1:{gateway_port}"),
    )
    .env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{otlp_port}"),
    )
    .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    [gateway, otlp]
}

#[test]
fn the_relay_with_the_shipped_flags_exits_within_its_budget_when_everything_hangs() {
    let yaml = cronjob();
    let args = shipped_args(&yaml, "relay-outbox");
    let (stated, follow) = relay_budget(&yaml);
    let budget = Duration::from_secs(stated.total);
    let broker = OwnBroker::start();
    let topic = unique_topic();
    create_topic(&broker.brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 5, |i| Seed::booked(-100 - i as i64));
    db.run_once(&["--batch-size", "1000"]);
    c.execute(
        "UPDATE crm.outbox SET topic = $1 WHERE published_at IS NULL",
        &[&topic],
    )
    .unwrap();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = db.command(&argv);
    cmd.env("KAFKA_BROKERS", &broker.brokers);
    let _endpoints = hanging_endpoints(&mut cmd);
    let started = Instant::now();
    let relay = Background::start(cmd);
    wait_until(Duration::from_secs(60), "the first rows published", || {
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NOT NULL",
        ) == 5
    });
    // The worst moment: the broker stops near the end of the follow window, as five
    // more rows commit; the relay sends them and waits out their delivery reports.
    // Behaviour, so timed: the window ends `follow` after the relay's start, which is
    // after `started`; the stall comes 4 s before that at the latest. So the batch goes
    // out if the relay wakes within 4 s (it takes well under one), and as its reports
    // take the message timeout (5 s) to fail, the run outlasts the window by 1 s or more.
    let stall_at = started + follow - Duration::from_secs(4);
    assert!(
        Instant::now() < stall_at,
        "the relay took {:?} to publish its first rows: no time left in its window",
        started.elapsed()
    );
    std::thread::sleep(stall_at.saturating_duration_since(Instant::now()));
    broker.pause();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text,
                'pin.crm.booking-expired', $1, jsonb_build_object('n', i)
           FROM generate_series(1, 5) i",
        &[&topic],
    )
    .unwrap();
    let run = relay.wait_within(Duration::from_secs(120));
    let took = started.elapsed();
    broker.resume();
    eprintln!("relay-outbox exited after {took:?} of its {budget:?}");
    assert!(
        took > follow,
        "relay-outbox ran its whole follow window ({follow:?}), took {took:?}: {}",
        run.stderr
    );
    assert!(
        took < budget,
        "relay-outbox {args:?} took {took:?}, over its budget {budget:?}: {}",
        run.stderr
    );
    assert_eq!(run.code, 75, "{}", run.stderr);
    let result = json_lines(&run.stdout);
    assert_eq!(result.len(), 1, "one result line: {}", run.stdout);
    assert_eq!(result[0]["Published"], 5, "{}", run.stdout);
    assert!(
        result[0]["StoppedEarly"]
            .as_str()
            .is_some_and(|why| why.contains("not acknowledged by Kafka")),
        "{}",
        run.stdout
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL AND failures = 0"
        ),
        5,
        "the unacknowledged rows stay pending, uncounted"
    );
}

#[test]
fn run_once_with_the_shipped_flags_exits_within_its_budget_when_push_and_traces_hang() {
    let yaml = cronjob();
    let args = shipped_args(&yaml, "run-once");
    let budget = budget(&yaml);
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 20, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600 + i as i64)
        } else {
            Seed::booked(-600 + i as i64)
        }
    });
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = db.command(&argv);
    let _endpoints = hanging_endpoints(&mut cmd);
    let started = Instant::now();
    let run = Background::start(cmd).wait_within(Duration::from_secs(120));
    let took = started.elapsed();
    eprintln!("run-once exited after {took:?} of its {budget:?}");
    assert!(
        took < budget,
        "run-once {args:?} took {took:?}, over its budget {budget:?}: {}",
        run.stderr
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (10, 10, 0, 0));
}

/// The purge is one step of the relay's budget: however many published rows are past
/// the retention, it starts no statement after its first second, reports what it
/// purged, and the next run goes on.
#[test]
fn the_purge_stops_after_its_share_of_the_budget_and_the_next_run_goes_on() {
    const OLD: i64 = 20_000;
    let db = TestDb::new();
    let mut c = db.client();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, published_at)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text,
                'pin.crm.booking-expired', 'pin.crm.booking-expired.v1',
                jsonb_build_object('n', i), now() - interval '30 days'
           FROM generate_series(1, $1::int) i",
        &[&(OLD as i32)],
    )
    .unwrap();
    // One row per statement: 20,000 statements take far longer than the purge's second.
    let relay = |db: &TestDb| {
        let run = db.run(&[
            "relay-outbox",
            "--brokers",
            "127.0.0.1:9",
            "--purge-batch-size",
            "1",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let result = json_lines(&run.stdout);
        assert!(run.stderr.contains("purge time spent"), "{}", run.stderr);
        result[0]["Purged"].as_i64().unwrap()
    };
    let first = relay(&db);
    assert!(first > 0 && first < OLD, "purged {first} of {OLD}");
    let left = count(&mut c, "SELECT count(*) FROM crm.outbox");
    assert_eq!(left, OLD - first, "each purged row counted once");
    let second = relay(&db);
    assert!(second > 0, "the next run goes on purging");
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.outbox"),
        OLD - first - second
    );
}
