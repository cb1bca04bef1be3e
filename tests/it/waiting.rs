//! Rows that wait (backing off after a refused send, or waiting for their topic) are
//! visible: in the relay's result and log, and per topic in `backlog`. A topic that
//! cannot take its rows is one fact, not a mark per row: a run writes none of the rows
//! that wait for it (their row versions stay as they were), and they go on the first
//! run once it exists, or within a second or so under `--follow`.

use crate::common;
use crate::postgres;

use common::kafka::*;
use common::*;
use serde_json::json;
use uuid::Uuid;

const FIRST_DUE: &str = "2100-01-01T00:00:00.000000Z";
const LATER_DUE: &str = "2100-01-02T00:00:00.000000Z";
const TOPIC_DUE: &str = "2100-01-03T00:00:00.000000Z";

/// A pending row of `topic` that waits until `due` after failing with `error`.
fn waiting_row(c: &mut postgres::Client, topic: &str, error: &str, due: &str) {
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                 last_error, failures, next_attempt_at)
         VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, '{}', $4, 1,
                 $5::text::timestamptz)",
        &[
            &Uuid::now_v7(),
            &Uuid::new_v4().to_string(),
            &topic,
            &error,
            &due,
        ],
    )
    .unwrap();
}

/// Topic `a` has a row backing off and one waiting for the topic; topic `b` a row
/// backing off that is due first; one row of `a` was due already and failed since.
fn seed(c: &mut postgres::Client, a: &str, b: &str) {
    waiting_row(c, a, "Broker: Message size too large", LATER_DUE);
    waiting_row(
        c,
        a,
        &format!("waiting for its topic: Kafka topic {a} does not exist"),
        TOPIC_DUE,
    );
    waiting_row(c, b, "Broker: Invalid message", FIRST_DUE);
    waiting_row(c, a, "Broker: Message size too large", FIRST_DUE);
    c.execute(
        "UPDATE crm.outbox SET failed_at = now(), next_attempt_at = NULL
          WHERE seq = (SELECT max(seq) FROM crm.outbox)",
        &[],
    )
    .unwrap();
}

#[test]
fn a_relay_whose_rows_all_wait_says_how_many_and_when_the_next_is_due() {
    let brokers = shared_brokers();
    let db = TestDb::new();
    let mut c = db.client();
    let (a, b) = (unique_topic(), unique_topic());
    seed(&mut c, &a, &b);
    let run = db.run(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--log-format",
        "json",
    ]);
    // The row an older relay marked waiting for topic `a` is due at once: `a` is asked
    // about, found missing, and the run says so (78) as any run whose rows wait for a
    // missing topic. From then on every pending row of `a` waits for it, the one backing
    // off too.
    assert_eq!(run.code, 78, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(
        (
            &result["Published"],
            &result["Waiting"],
            &result["WaitingForTopic"],
            &result["NextDue"]
        ),
        (&json!(0), &json!(3), &json!(2), &json!(FIRST_DUE)),
        "{}",
        run.stdout
    );
    let logged = json_lines(&run.stderr);
    let line = |msg: &str| {
        logged
            .iter()
            .find(|l| l["msg"] == msg)
            .unwrap_or_else(|| panic!("no {msg:?} in {}", run.stderr))
    };
    let fields = |l: &serde_json::Value| {
        (
            l["level"].clone(),
            l["Waiting"].clone(),
            l["WaitingForTopic"].clone(),
            l["NextDue"].clone(),
        )
    };
    let said = line(&format!(
        "nothing published: 3 rows are waiting (2 of them for their topic, the others out a \
         back-off), the next is due at {FIRST_DUE}"
    ));
    assert_eq!(
        fields(said),
        (json!("INFO"), json!(3), json!(2), json!(FIRST_DUE))
    );
    assert!(
        run.stderr
            .contains(&format!("Kafka topic {a} does not exist")),
        "{}",
        run.stderr
    );
}

#[test]
fn a_relay_with_nothing_waiting_has_no_next_due() {
    let brokers = shared_brokers();
    let db = TestDb::new();
    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(
        (&result["Waiting"], &result["WaitingForTopic"]),
        (&json!(0), &json!(0))
    );
    assert!(result.get("NextDue").is_none(), "{result}");
    assert!(!run.stderr.contains("nothing published"), "{}", run.stderr);
}

#[test]
fn backlog_shows_per_topic_what_waits_and_when_it_is_due() {
    let db = TestDb::new();
    let mut c = db.client();
    let (a, b) = {
        let (x, y) = (unique_topic(), unique_topic());
        if x < y { (x, y) } else { (y, x) }
    };
    seed(&mut c, &a, &b);

    let run = db.run(&["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = &json_lines(&run.stdout)[0];
    assert_eq!(
        report["Outbox"]["Waiting"],
        json!([
            {"Topic": a, "Waiting": 2, "WaitingForTopic": 1, "NextDue": LATER_DUE},
            {"Topic": b, "Waiting": 1, "WaitingForTopic": 0, "NextDue": FIRST_DUE},
        ])
    );

    let run = db.run(&["backlog", "--format", "prometheus"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let sample = |series: String| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .unwrap_or_else(|| panic!("no {series} in {}", run.stdout))
            .parse::<f64>()
            .unwrap()
    };
    let waiting = |t: &str| format!("crm_booking_expiration_outbox_waiting{{topic=\"{t}\"}}");
    let due = |t: &str| {
        format!("crm_booking_expiration_outbox_next_due_timestamp_seconds{{topic=\"{t}\"}}")
    };
    assert_eq!(sample(waiting(&a)), 2.0);
    assert_eq!(sample(waiting(&b)), 1.0);
    // 2100-01-02 and 2100-01-01, 00:00 UTC.
    assert_eq!(sample(due(&a)), 4_102_531_200.0);
    assert_eq!(sample(due(&b)), 4_102_444_800.0);

    let run = db.run(&["backlog"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("outbox waiting, topic {a} ")))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert_eq!(
        lines[at].split_whitespace().nth(4),
        Some("2"),
        "{}",
        lines[at]
    );
    assert!(
        lines[at + 1].contains("the next is due at 2100-01-02T00:00:00Z (in ")
            && lines[at + 1].contains("1 of them wait for their topic"),
        "{}",
        run.stdout
    );
}

/// `n` pending rows of the job's on `topic`, keys `<prefix>-1` … (in that order).
fn pending_rows(c: &mut postgres::Client, topic: &str, prefix: &str, n: i32) {
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Booking', $3 || '-' || i, 'pin.crm.booking-expired', $1,
                jsonb_build_object('n', i)
           FROM generate_series(1, $2) i",
        &[&topic, &n, &prefix],
    )
    .unwrap();
}

/// Every row version of `topic`'s rows (ctid and xmin, in seq order): any write of a
/// row changes it.
fn versions(c: &mut postgres::Client, topic: &str) -> String {
    c.query_one(
        "SELECT coalesce(string_agg(ctid::text || '/' || xmin::text, ',' ORDER BY seq), '')
           FROM crm.outbox WHERE topic = $1",
        &[&topic],
    )
    .unwrap()
    .get(0)
}

/// The relay's facts: (topic, reason, since, checked_at), in topic order.
fn topic_waits(c: &mut postgres::Client) -> Vec<(String, String, String, String)> {
    c.query(
        "SELECT topic, reason, since::text, checked_at::text
           FROM crm.booking_expiration_topic_wait ORDER BY topic",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn published(c: &mut postgres::Client, topic: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM crm.outbox WHERE topic = $1 AND published_at IS NOT NULL",
        &[&topic],
    )
    .unwrap()
    .get(0)
}

const ROWS: i32 = 1200;

#[test]
fn rows_waiting_for_a_missing_topic_are_never_written_and_go_once_it_exists() {
    let brokers = shared_brokers();
    let db = TestDb::new();
    let mut c = db.client();
    let missing = format!("{}-v2", unique_topic());
    let good = unique_topic();
    create_topic(&brokers, &good, 6, &[]);
    // The v2 rows come first, at the head of the queue; a healthy topic's rows after.
    pending_rows(&mut c, &missing, "k", ROWS);
    pending_rows(&mut c, &good, "g", 7);
    // A second missing topic, whose one row an operator takes away later.
    let gone = format!("{}-gone", unique_topic());
    pending_rows(&mut c, &gone, "x", 1);
    let before = versions(&mut c, &missing);
    let relay = || {
        db.run(&[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--log-format",
            "json",
        ])
    };

    let run = relay();
    assert_eq!(run.code, 78, "{}", run.stderr);
    let reason = format!(
        "Kafka topic {missing} does not exist (topic auto-creation is off: create it, e.g. with 6 partitions)"
    );
    assert!(run.stderr.contains(&reason), "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(result["Published"], json!(7), "{result}");
    assert_eq!(result["WaitingForTopic"], json!(ROWS + 1), "{result}");
    assert!(result.get("NextDue").is_none(), "{result}");
    assert_eq!(versions(&mut c, &missing), before, "no waiting row written");
    // One fact per topic.
    let facts = topic_waits(&mut c);
    let topics: Vec<&str> = facts.iter().map(|f| f.0.as_str()).collect();
    let mut want = vec![missing.as_str(), gone.as_str()];
    want.sort();
    assert_eq!(topics, want);
    let fact = facts.iter().find(|f| f.0 == missing).unwrap().clone();
    assert_eq!(fact.1, reason);

    // backlog (no broker) says how many wait, and for which topic.
    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let report = &json_lines(&backlog.stdout)[0];
    assert_eq!(
        report["Outbox"]["WaitingForTopic"],
        json!(ROWS + 1),
        "{report}"
    );
    let entry = report["Outbox"]["Waiting"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["Topic"] == json!(missing))
        .unwrap_or_else(|| panic!("{report}"))
        .clone();
    assert_eq!(
        (
            &entry["Waiting"],
            &entry["WaitingForTopic"],
            &entry["NextDue"],
            &entry["TopicWait"]["Reason"]
        ),
        (&json!(ROWS), &json!(ROWS), &json!(null), &json!(reason)),
        "{entry}"
    );
    let prometheus = db.run(&["backlog", "--format", "prometheus"]);
    assert!(
        prometheus.stdout.contains(&format!(
            "crm_booking_expiration_outbox_waiting{{topic=\"{missing}\"}} {ROWS}\n"
        )),
        "{}",
        prometheus.stdout
    );
    assert!(
        prometheus.stdout.contains(&format!(
            "crm_booking_expiration_outbox_waiting_for_topic {}\n",
            ROWS + 1
        )),
        "{}",
        prometheus.stdout
    );
    let table = db.run(&["backlog"]);
    assert!(
        table.stdout.contains(&format!(
            "{ROWS} of them wait for their topic; they go on the relay's first run"
        )),
        "{}",
        table.stdout
    );

    // Again, still missing: each topic asked about once, no row written, the same facts
    // (checked again), and 78 again. The operator took the other topic's row away: its
    // fact goes.
    c.execute(
        "UPDATE crm.outbox SET failed_at = now() WHERE topic = $1",
        &[&gone],
    )
    .unwrap();
    let run = relay();
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(run.stderr.contains(&reason), "{}", run.stderr);
    assert_eq!(versions(&mut c, &missing), before, "no waiting row written");
    let facts = topic_waits(&mut c);
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(
        (&facts[0].0, &facts[0].1, &facts[0].2),
        (&fact.0, &fact.1, &fact.2)
    );
    assert!(facts[0].3 >= fact.3, "{facts:?}");

    // The topic appears: the next run sends them all, and the fact goes.
    create_topic(&brokers, &missing, 6, &[]);
    let run = relay();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(
        (&result["Published"], &result["WaitingForTopic"]),
        (&json!(ROWS), &json!(0)),
        "{result}"
    );
    assert_eq!(published(&mut c, &missing), i64::from(ROWS));
    assert!(topic_waits(&mut c).is_empty());
    let got = consume(
        &brokers,
        &missing,
        6,
        ROWS as usize,
        std::time::Duration::from_secs(30),
    );
    assert_eq!(got.len(), ROWS as usize);
}

#[test]
fn a_following_relay_sends_the_rows_of_a_topic_within_a_second_or_so_of_its_creation() {
    let brokers = shared_brokers();
    let db = TestDb::new();
    let mut c = db.client();
    let missing = format!("{}-v2", unique_topic());
    pending_rows(&mut c, &missing, "k", 300);
    // A healthy topic's row: once it is published the relay's producer is ready (a
    // broker that has just started takes a while to hand out its first producer ids),
    // so what is timed below is the wait for the topic alone.
    let good = unique_topic();
    create_topic(&brokers, &good, 6, &[]);
    pending_rows(&mut c, &good, "g", 1);
    let before = versions(&mut c, &missing);
    // Its output to files: 300 publication lines would fill a pipe nobody reads yet.
    let follower =
        Background::start(db.command(&["relay-outbox", "--brokers", &brokers, "--follow", "60s"]));
    wait_until(
        std::time::Duration::from_secs(60),
        "the relay to find the topic missing and publish the healthy row",
        || {
            count(
                &mut c,
                "SELECT count(*) FROM crm.booking_expiration_topic_wait",
            ) == 1
                && published(&mut c, &good) == 1
        },
    );
    assert_eq!(versions(&mut c, &missing), before, "no waiting row written");
    create_topic(&brokers, &missing, 6, &[]);
    let created = std::time::Instant::now();
    let mut went = || {
        published(&mut c, &missing) == 300
            && count(
                &mut c,
                "SELECT count(*) FROM crm.booking_expiration_topic_wait",
            ) == 0
    };
    wait_for(
        std::time::Duration::from_secs(30),
        "the 300 rows of the new topic published and its wait forgotten",
        || went().then_some(()),
        || follower.stderr_so_far(),
    );
    let took = created.elapsed();
    send_signal(&follower.child, "TERM");
    let run = follower.wait();
    assert!(
        run.stderr
            .contains("the topic can take its rows again: they go in this run"),
        "{}",
        run.stderr
    );
    eprintln!("the waiting rows went {took:?} after their topic was created");
    // Behaviour: about a second between the checks, then the batch, never the 30 s
    // wait of old; the margin holds under load.
    assert!(
        took < std::time::Duration::from_secs(20),
        "{took:?}\n{}",
        run.stderr
    );
    let got = consume(
        &brokers,
        &missing,
        6,
        300,
        std::time::Duration::from_secs(30),
    );
    assert_eq!(got.len(), 300);
}

#[test]
fn a_row_the_release_before_marked_waiting_goes_at_once_when_its_topic_exists() {
    let brokers = shared_brokers();
    let db = TestDb::new();
    let mut c = db.client();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let key = Uuid::new_v4().to_string();
    let first = insert_outbox_row(&mut c, &topic, &key, 1);
    let second = insert_outbox_row(&mut c, &topic, &key, 2);
    // 0.1.0's mark: waiting 30 s for the topic, which exists now.
    c.execute(
        "UPDATE crm.outbox
            SET last_error = 'waiting for its topic: Kafka topic ' || topic || ' does not exist',
                next_attempt_at = now() + interval '30 seconds'
          WHERE id = $1",
        &[&first],
    )
    .unwrap();
    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        json_lines(&run.stdout)[0]["Published"],
        json!(2),
        "{}",
        run.stdout
    );
    let got = consume(&brokers, &topic, 6, 2, std::time::Duration::from_secs(20));
    let ids: Vec<String> = got.iter().map(|m| m.headers["ce_id"].clone()).collect();
    assert_eq!(ids, [first.to_string(), second.to_string()], "in key order");
    let cleared = count(
        &mut c,
        "SELECT count(*) FROM crm.outbox WHERE last_error IS NULL AND next_attempt_at IS NULL",
    );
    assert_eq!(cleared, 2);
}

#[test]
fn without_the_topic_wait_table_the_relay_still_writes_no_waiting_row() {
    // A database at the schema before migration 14: the relay keeps its topic waits to
    // itself for the run and says which migration to apply.
    let brokers = shared_brokers();
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute("DROP TABLE crm.booking_expiration_topic_wait")
        .unwrap();
    let missing = format!("{}-v2", unique_topic());
    pending_rows(&mut c, &missing, "k", 600);
    let before = versions(&mut c, &missing);
    let run = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains("apply sql/014_outbox_topic_waits.sql"),
        "{}",
        run.stderr
    );
    assert_eq!(json_lines(&run.stdout)[0]["WaitingForTopic"], json!(600));
    assert_eq!(versions(&mut c, &missing), before, "no waiting row written");
    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    assert_eq!(
        json_lines(&backlog.stdout)[0]["Outbox"]["Pending"],
        json!(600)
    );
}
