//! Rows that wait (backing off after a refused send, or waiting for their topic) are
//! visible: in the relay's result and log, and per topic in `backlog`.

use crate::common;

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
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(
        (
            &result["Published"],
            &result["Waiting"],
            &result["WaitingForTopic"],
            &result["NextDue"]
        ),
        (&json!(0), &json!(3), &json!(1), &json!(FIRST_DUE)),
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
        "nothing published: 3 rows are waiting (1 of them for their topic, the others out a \
         back-off), the next is due at {FIRST_DUE}"
    ));
    let expected = (json!("INFO"), json!(3), json!(1), json!(FIRST_DUE));
    assert_eq!(fields(said), expected);
    assert_eq!(fields(line("relay completed")), expected);
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
