//! `explain BOOKING_ID` on a real PostgreSQL (and a real Kafka for `--brokers`): every
//! "why not" case, the audit and timeline rows, the outbox states, and delivery
//! receipts that match what a consumer reads.

use crate::common;

use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

fn explain(db: &TestDb, id: Uuid, extra: &[&str]) -> (i32, Value, String) {
    let id = id.to_string();
    let mut args = vec!["explain", id.as_str(), "--json"];
    args.extend_from_slice(extra);
    let run = db.run(&args);
    assert!(run.code == 0 || run.code == 1, "{}", run.stderr);
    let v: Value = serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", run.stdout, run.stderr));
    (run.code, v, run.stderr)
}

fn codes(v: &Value) -> Vec<String> {
    v["NextCycle"]["Reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["Code"].as_str().unwrap().to_owned())
        .collect()
}

fn detail(v: &Value, i: usize) -> String {
    v["NextCycle"]["Reasons"][i]["Detail"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn an_unknown_booking_exits_1_and_says_so() {
    let db = TestDb::new();
    let id = Uuid::new_v4();
    let (code, v, stderr) = explain(&db, id, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["Found"], false);
    assert_eq!(codes(&v), ["not_found"]);
    assert!(
        stderr.contains(&format!("booking {id} does not exist")),
        "{stderr}"
    );
    let run = db.run(&["explain", "not-a-uuid"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains("\"not-a-uuid\" is not a UUID"),
        "{}",
        run.stderr
    );
}

#[test]
fn each_reason_not_to_expire_is_named() {
    let db = TestDb::new();
    let mut c = db.client();
    let due = Seed::reserved(-60);
    let not_yet = Seed::reserved(3_600);
    let terminal = Seed::new("Cancelled", Some(-3_600), None);
    let mut bad = Seed::booked(-120);
    bad.expired_at_set = true;
    let mut no_deadline = Seed::booked(-120);
    no_deadline.booking_in = None;
    let quarantined = Seed::reserved(-300);
    seed(
        &mut c,
        &[
            due.clone(),
            not_yet.clone(),
            terminal.clone(),
            bad.clone(),
            no_deadline.clone(),
            quarantined.clone(),
        ],
    );
    put_in_quarantine(&mut c, &quarantined, "Reserve", "database", 3, 600);

    let (code, v, _) = explain(&db, due.id, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["NextCycle"]["WouldExpire"], true);
    assert_eq!(v["NextCycle"]["Phase"], "Reserve");
    assert_eq!(codes(&v), Vec::<String>::new());
    assert_eq!(v["Booking"]["Status"], "Reserved");
    assert_eq!(v["Booking"]["Version"], 1);

    let (_, v, _) = explain(&db, not_yet.id, &[]);
    assert_eq!(v["NextCycle"]["WouldExpire"], false);
    assert_eq!(codes(&v), ["not_yet_due"]);
    assert!(
        detail(&v, 0).starts_with("the Reserve deadline ")
            && (detail(&v, 0).contains(" is 59m 5") || detail(&v, 0).contains(" is 1h 0m 0s"))
            && detail(&v, 0).ends_with(": a cycle after it expires the booking"),
        "{v}"
    );

    let (_, v, _) = explain(&db, terminal.id, &[]);
    assert_eq!(codes(&v), ["terminal"]);
    assert_eq!(
        detail(&v, 0),
        "status Cancelled is terminal and never expires"
    );

    let (_, v, _) = explain(&db, no_deadline.id, &[]);
    assert_eq!(codes(&v), ["guard_rejection"]);
    assert_eq!(v["NextCycle"]["Reasons"][0]["Guard"], "no_deadline");
    assert_eq!(
        detail(&v, 0),
        "never claimed: the Booking deadline is null (no_deadline); repair the row"
    );

    // The guard refuses it; after a cycle it is also in quarantine.
    let (_, v, _) = explain(&db, bad.id, &[]);
    assert_eq!(codes(&v), ["guard_rejection"]);
    assert_eq!(
        v["NextCycle"]["Reasons"][0]["Guard"],
        "expired_at_already_set"
    );
    assert_eq!(db.run_once(&[]).counts(), (1, 0, 0, 1));
    let (_, v, _) = explain(&db, bad.id, &[]);
    assert_eq!(codes(&v), ["guard_rejection", "quarantined"]);
    assert_eq!(v["Quarantine"]["Reason"], "expired_at_already_set");
    assert_eq!(v["Quarantine"]["Attempts"], 1);
    assert_eq!(v["Quarantine"]["Applies"], true);
    assert!(
        detail(&v, 1).starts_with("in quarantine until ")
            && detail(&v, 1)
                .contains("(expired_at_already_set: active booking already has expired_at"),
        "{v}"
    );

    let (_, v, _) = explain(&db, quarantined.id, &[]);
    assert_eq!(codes(&v), ["quarantined"]);
    assert_eq!(v["Quarantine"]["Attempts"], 3);
    assert!(
        detail(&v, 0).contains("(database: seeded by a test; 3 attempts since "),
        "{v}"
    );

    // A manager repairs the row: the entry no longer applies.
    c.execute(
        "UPDATE crm.bookings SET version = version + 1 WHERE id = $1",
        &[&quarantined.id],
    )
    .unwrap();
    let (_, v, _) = explain(&db, quarantined.id, &[]);
    assert_eq!(v["NextCycle"]["WouldExpire"], true);
    assert_eq!(v["Quarantine"]["Applies"], false);
    assert!(
        v["NextCycle"]["Notes"][0]
            .as_str()
            .unwrap()
            .contains("no longer applies: the booking changed since"),
        "{v}"
    );
}

#[test]
fn a_row_locked_now_names_the_session_holding_it() {
    let db = TestDb::new();
    let mut c = db.client();
    let due = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&due));
    let mut holder = db.client();
    holder
        .batch_execute("SET application_name = 'crm-manager-ui'")
        .unwrap();
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM crm.bookings WHERE id = $1 FOR UPDATE",
        &[&due.id],
    )
    .unwrap();

    let (_, v, _) = explain(&db, due.id, &[]);
    assert_eq!(codes(&v), ["locked"]);
    assert_eq!(v["Lock"]["Pid"], pid);
    assert_eq!(v["Lock"]["Application"], "crm-manager-ui");
    assert!(
        detail(&v, 0).starts_with(&format!(
            "its row is locked right now by PID {pid} (application crm-manager-ui, user "
        )),
        "{v}"
    );
    // The cycle indeed skips it.
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 1, 0));
    tx.rollback().unwrap();
    let (_, v, _) = explain(&db, due.id, &[]);
    assert_eq!(v["NextCycle"]["WouldExpire"], true);
    assert_eq!(v["Lock"], Value::Null);
}

#[test]
fn a_paused_cycle_is_a_reason() {
    let db = TestDb::new();
    let mut c = db.client();
    let due = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&due));
    let run = db.run(&["pause", "run-once", "--reason", "INC-7", "--actor", "carol"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (_, v, _) = explain(&db, due.id, &[]);
    assert_eq!(codes(&v), ["paused"]);
    let me = db.user();
    assert!(
        detail(&v, 0).ends_with(&format!("by carol (database user {me}): INC-7")),
        "{v}"
    );
}

#[test]
fn the_outbox_row_is_pending_then_published_with_a_receipt_that_a_consumer_confirms() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    let ids = seed_many(&mut c, 5, |i| Seed::booked(-60 - i as i64));
    let cycle = db.run_once(&[]);
    assert_eq!(cycle.booking, 5);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();

    let (_, v, _) = explain(&db, ids[0], &[]);
    assert_eq!(codes(&v), ["terminal"]);
    assert_eq!(v["Booking"]["Status"], "BookingExpired");
    let audit = v["Audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0]["From"], "Booked");
    assert_eq!(audit[0]["To"], "BookingExpired");
    assert_eq!(audit[0]["Version"], 2);
    assert_eq!(audit[0]["RunId"], cycle.run_id.to_string());
    assert_eq!(v["Timeline"][0]["Kind"], "BookingExpired");
    assert_eq!(v["Outbox"].as_array().unwrap().len(), 1);
    assert_eq!(v["Outbox"][0]["State"], "pending");
    assert_eq!(v["Outbox"][0]["Partition"], Value::Null);

    let relay = db.run(&["relay-outbox", "--brokers", &brokers]);
    assert_eq!(relay.code, 0, "{}", relay.stderr);
    let received = consume(&brokers, &topic, 6, 5, Duration::from_secs(20));
    assert_eq!(received.len(), 5);
    // Every receipt is where the consumer found that row's event.
    let receipts: Vec<(Uuid, i32, i64)> = c
        .query(
            "SELECT id, delivered_partition, delivered_offset FROM crm.outbox",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(receipts.len(), 5);
    for (id, partition, offset) in &receipts {
        let got = received
            .iter()
            .find(|m| m.headers["ce_id"] == id.to_string())
            .unwrap_or_else(|| panic!("{id} not consumed"));
        assert_eq!((got.partition, got.offset), (*partition, *offset), "{id}");
    }

    let (_, v, _) = explain(&db, ids[0], &["--brokers", &brokers]);
    let row = &v["Outbox"][0];
    assert_eq!(row["State"], "published");
    let (_, partition, offset) = receipts
        .iter()
        .find(|(id, _, _)| id.to_string() == row["Id"])
        .unwrap();
    assert_eq!(row["Partition"], *partition);
    assert_eq!(row["Offset"], *offset);
    assert_eq!(
        row["ReadBack"],
        json!({"Found": true, "Matches": true, "CeId": row["Id"], "Key": ids[0].to_string(),
               "TimestampMs": row["ReadBack"]["TimestampMs"], "Error": null})
    );
    assert!(row["ReadBack"]["TimestampMs"].as_i64().unwrap() > 0);

    // The text report says the same in words (wrapped to 120 columns: compared with
    // its lines joined).
    let text = db.run(&["explain", &ids[0].to_string(), "--brokers", &brokers]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    let words = text.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!(
            "published at {} to {topic} partition {partition} offset {offset}",
            row["PublishedAt"].as_str().unwrap()
        )),
        "{}",
        text.stdout
    );
    assert!(
        words.contains(&format!(
            "read back: the message there has ce_id {} and key {}",
            row["Id"].as_str().unwrap(),
            ids[0]
        )),
        "{}",
        text.stdout
    );

    // A failed row says why.
    c.execute(
        "UPDATE crm.outbox SET published_at = NULL, failed_at = now(), last_error = 'Message size too large'
          WHERE aggregateid = $1",
        &[&ids[1].to_string()],
    )
    .unwrap();
    let (_, v, _) = explain(&db, ids[1], &[]);
    assert_eq!(v["Outbox"][0]["State"], "failed");
    assert_eq!(v["Outbox"][0]["LastError"], "Message size too large");
}

#[test]
fn the_read_only_role_may_explain() {
    let db = TestDb::new();
    let mut c = db.client();
    let due = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&due));
    let role = LoginRole::member_of(&db, "ro", "crm_booking_expiration_readonly");
    let run = role.run(&db, &["explain", &due.id.to_string()]);
    drop(role);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("next cycle: WOULD EXPIRE it (Booking phase)"),
        "{}",
        run.stdout
    );
}

/// The text of `explain` on the demo's data (scripts/demo-seed.sql), for a booking with
/// every section: a quarantined one with audit rows; every line fits 120 columns
/// (terminal columns, not bytes).
#[test]
fn the_text_fits_120_columns_on_the_demo_seed() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_demo(&mut c);
    break_demo_booking(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (6, 1, 0, 1));
    for id in [
        "b1000004-0000-4000-8000-000000000000",
        "b1000001-0000-4000-8000-000000000000",
        "b1000005-0000-4000-8000-000000000000",
        "b1000008-0000-4000-8000-000000000000",
    ] {
        let run = db.run(&["explain", id]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout.starts_with(&format!("booking {id} at ")),
            "{}",
            run.stdout
        );
        assert_fits_120(&run.stdout);
    }
}

/// Text from outside the program (the operator's login from `USER`, a pause's reason,
/// an outbox row's `last_error`) is printed with its control characters as visible
/// escapes: it cannot steer the operator's terminal. The JSON keeps the exact values.
#[test]
fn text_from_the_database_cannot_steer_the_terminal() {
    let db = TestDb::new();
    let mut c = db.client();
    let expired = Seed::booked(-120);
    seed(&mut c, std::slice::from_ref(&expired));
    assert_eq!(db.run_once(&[]).booking, 1);
    let due = Seed::booked(-60);
    seed(&mut c, std::slice::from_ref(&due));
    let login = "evil\u{1b}]0;title\u{7}";
    let reason = "INC-7\u{1b}[2J\u{9b}31m \u{202e}gpj.exe";
    let run = Run::of(
        db.command(&["pause", "run-once", "--reason", reason])
            .env("USER", login)
            .output()
            .expect("run the binary"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stdout.contains('\u{1b}'), "{}", run.stdout);
    c.execute(
        "UPDATE crm.outbox SET last_error = $2 WHERE aggregateid = $1",
        &[
            &expired.id.to_string(),
            &"broker said \u{1b}[31mno\u{7f}\r\nDETAIL: \u{85}x",
        ],
    )
    .unwrap();
    let me = db.user();
    let since: chrono::DateTime<chrono::Utc> = c
        .query_one("SELECT paused_at FROM crm.booking_expiration_pause", &[])
        .unwrap()
        .get(0);
    let since = since.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);

    let text = db.run(&["explain", &due.id.to_string()]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert_no_controls(&text.stdout);
    let lines: Vec<&str> = text.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("next cycle:"))
        .unwrap();
    assert_eq!(
        lines[at..at + 3],
        [
            "next cycle: would NOT expire it, because",
            &format!(
                "  - paused: run-once is paused since {since} by evil\\u{{1b}}]0;title\\u{{7}} (database user {me}):"
            ),
            "    INC-7\\u{1b}[2J\\u{9b}31m \\u{202e}gpj.exe",
        ],
        "{}",
        text.stdout
    );

    let text = db.run(&["explain", &expired.id.to_string()]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert_no_controls(&text.stdout);
    let (_, v, _) = explain(&db, expired.id, &[]);
    let row = &v["Outbox"][0];
    assert_eq!(
        row["LastError"], "broker said \u{1b}[31mno\u{7f}\r\nDETAIL: \u{85}x",
        "the JSON keeps the value"
    );
    let (id, kind, topic) = (&row["Id"], &row["Type"], &row["Topic"]);
    let (id, kind, topic) = (
        id.as_str().unwrap(),
        kind.as_str().unwrap(),
        topic.as_str().unwrap(),
    );
    let outbox: Vec<&str> = text.stdout.lines().skip_while(|l| *l != "outbox").collect();
    // Line breaks (and NEL, a Unicode space) are spaces in wrapped prose; the other
    // controls escapes.
    assert_eq!(
        outbox,
        [
            "outbox",
            &format!("  {id} {kind}: pending for {topic} (attempts 0,"),
            "    failures 0, last error: broker said \\u{1b}[31mno\\u{7f} DETAIL: x)",
        ],
        "{}",
        text.stdout
    );

    let (_, v, _) = explain(&db, due.id, &[]);
    assert!(
        detail(&v, 0).ends_with(&format!("by {login} (database user {me}): {reason}")),
        "{v}"
    );
}

/// No character a terminal acts on but the line breaks.
fn assert_no_controls(text: &str) {
    let bad: Vec<char> = text
        .chars()
        .filter(|&c| c != '\n' && booking_expire::testing::render::is_control(c))
        .collect();
    assert!(bad.is_empty(), "{bad:?} in:\n{text}");
}
