//! The relay's own state (migration 16): receipts, exceptions and the watermark. With
//! the legacy marks off it never updates a row of `crm.outbox`; a row whose transaction
//! took its `seq` before a newer row was relayed, and committed after, is still
//! published, exactly once; the purge goes by `seq` range; a republish goes through
//! the exceptions with the same `ce_id`. Against a real Apache Kafka broker.

use crate::common;
use crate::postgres;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka::*;
use common::*;
use serde_json::Value;
use uuid::Uuid;

const OWN_TYPE: &str = "pin.crm.booking-expired";

fn insert(c: &mut impl postgres::GenericClient, topic: &str, r#type: &str) -> (Uuid, i64) {
    let id = Uuid::now_v7();
    let seq: i64 = c
        .query_one(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
             VALUES ($1, 'Booking', $2, $3, $4, '{\"n\": 1}') RETURNING seq",
            &[&id, &Uuid::new_v4().to_string(), &r#type, &topic],
        )
        .unwrap()
        .get(0);
    (id, seq)
}

/// One relay run, which sends every row it can: the tests count what one run published
/// (up to 3,000 rows), so it gets ten minutes (`--deadline`; 25 s by default, which a
/// loaded host can spend on fewer rows: one sent 9,000 in 25 s). A run still ends once
/// nothing is left to send.
fn relay(db: &TestDb, brokers: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "relay-outbox",
        "--brokers",
        brokers,
        "--message-timeout",
        "5s",
        "--legacy-marks",
        "off",
        "--deadline",
        "10m",
    ];
    args.extend_from_slice(extra);
    let run = db.run(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = json_lines(&run.stdout);
    assert_eq!(lines.len(), 1, "one JSON line: {}", run.stdout);
    lines.into_iter().next().unwrap()
}

/// Every row of the outbox as it is stored (its version included): seq → (xmin, text).
fn rows(c: &mut postgres::Client) -> BTreeMap<i64, (String, String)> {
    c.query(
        "SELECT seq, xmin::text, o::text FROM crm.outbox o ORDER BY seq",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), (r.get(1), r.get(2))))
    .collect()
}

/// `n` rows of the job's own type for `topic`, in one statement.
fn insert_own(c: &mut postgres::Client, topic: &str, n: i64) {
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, $1, $2, '{}'
           FROM generate_series(1, $3::int8)",
        &[&OWN_TYPE, &topic, &n],
    )
    .unwrap();
}

/// How many receipts and exceptions the relay's own state holds.
fn own_state(c: &mut postgres::Client) -> (i64, i64) {
    (
        count(c, "SELECT count(*) FROM crm.booking_expiration_receipt"),
        count(c, "SELECT count(*) FROM crm.booking_expiration_exception"),
    )
}

/// Only the other producer's row `theirs` is left in the outbox, byte for byte as it
/// was `before`.
fn assert_theirs_alone(
    c: &mut postgres::Client,
    before: &BTreeMap<i64, (String, String)>,
    theirs: i64,
) {
    let left = rows(c);
    assert_eq!(left.len(), 1, "only theirs: {left:?}");
    assert_eq!(left.get(&theirs), before.get(&theirs), "theirs untouched");
}

fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

fn watermark(c: &mut postgres::Client) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT floor, high FROM crm.booking_expiration_relay_state WHERE types = $1",
            &[&OWN_TYPE],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

/// `backlog --json`'s report.
fn backlog_report(db: &TestDb) -> Value {
    let run = db.run(&["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    json_lines(&run.stdout).swap_remove(0)
}

/// `backlog`'s outbox figures: (pending, failed).
fn backlog(db: &TestDb) -> (Value, Value) {
    let run = db.run(&["backlog", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = &json_lines(&run.stdout)[0];
    (
        report["Outbox"]["Pending"].clone(),
        report["Outbox"]["Failed"].clone(),
    )
}

fn ce_ids(got: &[Received]) -> Vec<String> {
    let mut ids: Vec<String> = got.iter().map(|m| m.headers["ce_id"].clone()).collect();
    ids.sort();
    ids
}

#[test]
fn a_lower_seq_committed_after_a_higher_one_was_relayed_is_published_exactly_once() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    // The first start makes the watermark (nothing pending: at the newest row).
    assert_eq!(relay(&db, &brokers, &[])["Published"], 0);

    // A transaction takes its xid, then the lower seq, and stays open...
    let mut slow = db.client();
    let mut open = slow.transaction().unwrap();
    open.query_one("SELECT pg_current_xact_id()", &[]).unwrap();
    let (late, late_seq) = insert(&mut open, &topic, OWN_TYPE);
    // ...while a newer row commits and is relayed.
    let (early, early_seq) = insert(&mut c, &topic, OWN_TYPE);
    assert!(late_seq < early_seq);
    assert_eq!(relay(&db, &brokers, &[])["Published"], 1);
    // The run's last sweep moved the floor up to its high, past the open
    // transaction's row: the sweep knows that transaction was in progress.
    let (floor, high) = watermark(&mut c);
    assert!(high >= early_seq, "high {high} has the newer row");
    assert_eq!(floor, high, "the floor at the run's high");
    assert!(
        floor > late_seq,
        "floor {floor} past the open row {late_seq}"
    );
    // backlog names the transactions in progress at that sweep: the open one among
    // them (other tests' may be too), whose rows the next sweeps read once it ends.
    let report = backlog_report(&db);
    let in_progress = report["RelayFloor"]["InProgress"].as_u64().unwrap();
    assert!(in_progress >= 1, "{report}");
    assert!(report["RelayFloor"]["SweptAgeSeconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(report["Outbox"]["Late"], 0, "not committed yet: {report}");

    // The lower one commits after: backlog counts it (committed below the floor,
    // not swept yet), the next run's first sweep finds it by its transaction and
    // sends it.
    open.commit().unwrap();
    assert_eq!(backlog(&db), (Value::from(1), Value::from(0)));
    let report = backlog_report(&db);
    assert_eq!(report["Outbox"]["Late"], 1, "{report}");
    assert_eq!(report["RelayFloor"]["Floor"], high, "{report}");
    assert_eq!(report["RelayFloor"]["High"], high, "{report}");
    let gauges = db.run(&["backlog", "--format", "prometheus"]);
    assert!(
        gauges
            .stdout
            .contains("\ncrm_booking_expiration_outbox_late 1\n"),
        "{}",
        gauges.stdout
    );
    let before = rows(&mut c);
    let found = relay(&db, &brokers, &[]);
    assert_eq!(found["Published"], 1, "{found}");
    // Nothing more, ever, and nothing pending or late.
    assert_eq!(relay(&db, &brokers, &[])["Published"], 0);
    assert_eq!(watermark(&mut c).0, high, "the floor stays at high");
    assert_eq!(backlog(&db), (Value::from(0), Value::from(0)));
    assert_eq!(backlog_report(&db)["Outbox"]["Late"], 0);

    let got = consume(&brokers, &topic, 6, 2, Duration::from_secs(30));
    let mut want = vec![late.to_string(), early.to_string()];
    want.sort();
    assert_eq!(ce_ids(&got), want, "each row exactly once");
    assert_eq!(records_on(&brokers, &topic, 6), 2);
    // Receipts for both; not one outbox row written by the relay.
    assert_eq!(own_state(&mut c), (2, 0), "receipts and exceptions");
    assert_eq!(rows(&mut c), before, "no outbox row updated");
    // The receipt explain reads: the partition and offset the broker acknowledged.
    let sent = got
        .iter()
        .find(|m| m.headers["ce_id"] == late.to_string())
        .unwrap();
    let state = c
        .query_one(
            "SELECT true, partition, \"offset\" FROM crm.booking_expiration_receipt WHERE id = $1",
            &[&late],
        )
        .unwrap();
    assert_eq!(
        (
            state.get::<_, bool>(0),
            state.get::<_, Option<i32>>(1),
            state.get::<_, Option<i64>>(2)
        ),
        (true, Some(sent.partition), Some(sent.offset))
    );
}

#[test]
fn without_legacy_marks_no_outbox_row_is_written_republish_resends_and_the_purge_goes_by_range() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    let theirs = insert(&mut c, &topic, "crm.deal-won");
    let ours: Vec<(Uuid, i64)> = (0..5).map(|_| insert(&mut c, &topic, OWN_TYPE)).collect();
    let before = rows(&mut c);
    let first = relay(&db, &brokers, &[]);
    assert_eq!(backlog(&db), (Value::from(0), Value::from(0)));
    assert_eq!(first["Published"], 5, "{first}");
    assert_eq!(rows(&mut c), before, "no outbox row updated");
    assert_eq!(own_state(&mut c).0, 5, "receipts");

    // republish: the same ce_id again, through an exception; the row stays as it is.
    let run = db.run(&[
        "republish",
        "--ids",
        &ours[0].0.to_string(),
        "--reason",
        "replay",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["Requeued"], 1, "{out}");
    assert_eq!(relay(&db, &brokers, &[])["Published"], 1);
    assert_eq!(rows(&mut c), before, "no outbox row updated by the re-send");
    let got = consume(&brokers, &topic, 6, 6, Duration::from_secs(30));
    let resent = got
        .iter()
        .filter(|m| m.headers["ce_id"] == ours[0].0.to_string())
        .count();
    assert_eq!(
        resent, 2,
        "the republished row went twice, by the same ce_id"
    );

    // The purge: receipts older than the retention go with their rows, by range;
    // the other producer's row (inside the range) stays.
    c.execute(
        "UPDATE crm.booking_expiration_receipt SET published_at = now() - interval '8 days'",
        &[],
    )
    .unwrap();
    let purged = relay(&db, &brokers, &[]);
    assert_eq!(purged["Purged"], 5, "{purged}");
    assert_eq!(own_state(&mut c).0, 0, "receipts");
    assert_theirs_alone(&mut c, &before, theirs.1);
}

#[test]
fn a_following_relay_sends_a_row_committed_below_one_it_relayed_within_seconds() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    assert_eq!(relay(&db, &brokers, &[])["Published"], 0);
    let mut follower = Background::start(db.command(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--legacy-marks",
        "off",
        "--follow",
        "60s",
    ]));
    let mut slow = db.client();
    let mut open = slow.transaction().unwrap();
    open.query_one("SELECT pg_current_xact_id()", &[]).unwrap();
    let (late, _) = insert(&mut open, &topic, OWN_TYPE);
    let (early, _) = insert(&mut c, &topic, OWN_TYPE);
    follower.wait_for_lines("event published", 1, Duration::from_secs(60));
    let committed = std::time::Instant::now();
    open.commit().unwrap();
    // Its commit notifies, but the row is below high: the gap check (every 3 s) finds it.
    follower.wait_for_lines("event published", 2, Duration::from_secs(30));
    let took = committed.elapsed();
    send_signal(&follower.child, "TERM");
    let run = follower.wait();
    assert_eq!(run.code, 143, "{}", run.stderr);
    assert!(
        took < Duration::from_secs(15),
        "the late row went {took:?} after its commit (the gap check is every 3 s)"
    );
    let got = consume(&brokers, &topic, 6, 2, Duration::from_secs(30));
    let mut want = vec![late.to_string(), early.to_string()];
    want.sort();
    assert_eq!(ce_ids(&got), want, "each row exactly once");
    assert_eq!(records_on(&brokers, &topic, 6), 2);
}

/// The `crm` schema's index scans, and the row updates of `crm.outbox`, in this
/// database, once every other session of it has ended (a backend flushes its
/// statistics as it exits).
fn footprint(db: &TestDb, c: &mut postgres::Client) -> (i64, i64) {
    wait_until(
        Duration::from_secs(30),
        "the relay's sessions to end",
        || {
            count(
                c,
                "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
            ) == 0
        },
    );
    let _ = db;
    c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    let r = c
        .query_one(
            "SELECT (SELECT coalesce(sum(idx_scan), 0)::int8 FROM pg_stat_all_indexes
                      WHERE schemaname = 'crm'),
                    (SELECT n_tup_upd + n_tup_hot_upd FROM pg_stat_all_tables
                      WHERE relid = 'crm.outbox'::regclass)",
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

#[test]
fn without_legacy_marks_a_relay_and_its_purge_cost_under_a_tenth_of_an_index_scan_per_event() {
    const ROWS: i64 = 3000;
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    assert_eq!(relay(&db, &brokers, &[])["Published"], 0);
    insert_own(&mut c, &topic, ROWS);
    let (scans, updates) = footprint(&db, &mut c);
    assert_eq!(relay(&db, &brokers, &[])["Published"], ROWS);
    // A run that finds nothing to send sweeps twice, as every idle run does.
    assert_eq!(relay(&db, &brokers, &[])["Published"], 0);
    c.execute(
        "UPDATE crm.booking_expiration_receipt SET published_at = now() - interval '8 days'",
        &[],
    )
    .unwrap();
    let purged = relay(&db, &brokers, &["--purge-batch-size", "100000"]);
    assert_eq!(purged["Purged"], ROWS, "{purged}");
    let (scans_after, updates_after) = footprint(&db, &mut c);
    assert_eq!(updates_after, updates, "no row of crm.outbox updated");
    let per_event = (scans_after - scans) as f64 / ROWS as f64;
    assert!(
        per_event <= 0.1,
        "{} index scans for {ROWS} events relayed and purged ({per_event:.3} per event)",
        scans_after - scans
    );
}

#[test]
fn a_relay_of_another_set_of_types_sends_only_what_no_relay_delivered() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    let ours: Vec<(Uuid, i64)> = (0..3).map(|_| insert(&mut c, &topic, OWN_TYPE)).collect();
    let (theirs, _) = insert(&mut c, &topic, "crm.deal-won");
    assert_eq!(relay(&db, &brokers, &[])["Published"], 3);
    // The whole-outbox model, its legacy marks off too: a watermark of its own, made
    // while the columns of the rows delivered above still say pending.
    let whole = ["--outbox-types", "pin.crm.booking-expired,crm.deal-won"];
    assert_eq!(relay(&db, &brokers, &whole)["Published"], 1);
    assert_eq!(relay(&db, &brokers, &whole)["Published"], 0);
    let got = consume(&brokers, &topic, 6, 4, Duration::from_secs(30));
    let mut want: Vec<String> = ours.iter().map(|(id, _)| id.to_string()).collect();
    want.push(theirs.to_string());
    want.sort();
    assert_eq!(ce_ids(&got), want, "each row exactly once");
}

#[test]
fn the_release_befores_back_off_and_failures_are_carried_over_without_rewriting_the_rows() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    // As release 0.1.0's relay left them: one row backing off an hour, one failed, one
    // pending.
    let (backing_off, _) = insert(&mut c, &topic, OWN_TYPE);
    let (failed, _) = insert(&mut c, &topic, OWN_TYPE);
    let (pending, _) = insert(&mut c, &topic, OWN_TYPE);
    c.execute(
        "UPDATE crm.outbox SET next_attempt_at = now() + interval '1 hour', failures = 3,
                attempts = 3, last_error = 'refused' WHERE id = $1",
        &[&backing_off],
    )
    .unwrap();
    c.execute(
        "UPDATE crm.outbox SET failed_at = now(), failures = 20, attempts = 20,
                last_error = 'gave up' WHERE id = $1",
        &[&failed],
    )
    .unwrap();
    let before = rows(&mut c);
    // This release, its legacy marks on (the default): only the pending row goes.
    let run = db.run(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--message-timeout",
        "5s",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let result = &json_lines(&run.stdout)[0];
    assert_eq!(result["Published"], 1, "{result}");
    assert_eq!(result["Waiting"], 1, "{result}");
    let carried: Vec<(Uuid, String, i32, bool, bool)> = c
        .query(
            "SELECT id, reason, failures, next_attempt_at IS NOT NULL, failed_at IS NOT NULL
               FROM crm.booking_expiration_exception ORDER BY seq",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert_eq!(
        carried,
        [
            (backing_off, "legacy".to_owned(), 3, true, false),
            (failed, "legacy".to_owned(), 20, false, true),
        ]
    );
    // Their rows as 0.1.0 left them; the pending one marked as 0.1.0 reads it.
    let after = rows(&mut c);
    for id in [backing_off, failed] {
        let seq: i64 = c
            .query_one("SELECT seq FROM crm.outbox WHERE id = $1", &[&id])
            .unwrap()
            .get(0);
        assert_eq!(after.get(&seq), before.get(&seq), "{id} not rewritten");
    }
    let published: bool = c
        .query_one(
            "SELECT published_at IS NOT NULL FROM crm.outbox WHERE id = $1",
            &[&pending],
        )
        .unwrap()
        .get(0);
    assert!(published, "the legacy mark of the row delivered");
    let got = consume(&brokers, &topic, 6, 1, Duration::from_secs(30));
    assert_eq!(ce_ids(&got), [pending.to_string()]);
}

#[test]
fn without_legacy_marks_the_run_after_the_relaying_one_purges_all_it_relayed_leaving_theirs() {
    const ROWS: i64 = 1200;
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    insert_own(&mut c, &topic, ROWS);
    // Another producer's row in the middle of the range the purge deletes.
    let theirs = insert(&mut c, &topic, "crm.deal-won");
    insert_own(&mut c, &topic, ROWS);
    let before = rows(&mut c);
    assert_eq!(relay(&db, &brokers, &[])["Published"], 2 * ROWS);
    // The run's last sweep moved the floor up to its high.
    let newest: i64 = count(&mut c, "SELECT max(seq) FROM crm.outbox");
    assert_eq!(watermark(&mut c), (newest, newest));

    // A retention later the next run purges every row the run before relayed, in
    // that one run, with their receipts.
    c.execute(
        "UPDATE crm.booking_expiration_receipt SET published_at = now() - interval '8 days'",
        &[],
    )
    .unwrap();
    let purged = relay(&db, &brokers, &[]);
    assert_eq!(purged["Purged"], 2 * ROWS, "{purged}");
    assert_eq!(purged["Published"], 0, "{purged}");
    assert_eq!(watermark(&mut c), (newest, newest));
    assert_eq!(own_state(&mut c), (0, 0), "receipts and exceptions");
    assert_theirs_alone(&mut c, &before, theirs.1);
}

#[test]
fn a_first_start_on_a_backlog_reads_no_row_of_the_outbox_by_a_sequential_scan() {
    const ROWS: i64 = 3000;
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    insert_own(&mut c, &topic, ROWS);
    c.batch_execute("ANALYZE crm.outbox").unwrap();
    let read = |c: &mut postgres::Client| -> i64 {
        footprint(&db, c);
        count(
            c,
            "SELECT coalesce(seq_tup_read, 0) FROM pg_stat_all_tables
              WHERE relid = 'crm.outbox'::regclass",
        )
    };
    let before = read(&mut c);
    // The watermark is made from the oldest unsettled row, found in seq order: the
    // search stops there, and the fetches go by range.
    assert_eq!(relay(&db, &brokers, &[])["Published"], ROWS);
    assert_eq!(
        read(&mut c),
        before,
        "rows of crm.outbox read by a sequential scan"
    );
}

/// A run that ended between a fetch that held a row (behind an older row of its key, as
/// an exception) and that batch's mark leaves an exception above `high`. It is sent as
/// an exception, its receipt then above `high`: no later fetch takes it again as a new
/// row (a run once did, and failed on the receipt's key).
#[test]
fn an_exception_above_high_is_sent_once_and_never_fetched_again_as_a_new_row() {
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    insert(&mut c, &topic, OWN_TYPE);
    assert_eq!(relay(&db, &brokers, &[])["Published"], 1);
    let key = Uuid::new_v4().to_string();
    let of_key: Vec<(Uuid, i64)> = (0..2)
        .map(|_| {
            let id = Uuid::now_v7();
            let seq: i64 = c
                .query_one(
                    "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
                     VALUES ($1, 'Booking', $2, $3, $4, '{}') RETURNING seq",
                    &[&id, &key, &OWN_TYPE, &topic],
                )
                .unwrap()
                .get(0);
            (id, seq)
        })
        .collect();
    // The later row held behind the older one, by a run that ended before its mark.
    c.execute(
        "INSERT INTO crm.booking_expiration_exception
                (seq, id, key, topic, type, reason, attempts, failures, since)
         VALUES ($1, $2, $3, $4, $5, 'behind', 0, 0, now())",
        &[&of_key[1].1, &of_key[1].0, &key, &topic, &OWN_TYPE],
    )
    .unwrap();
    let (_, high) = watermark(&mut c);
    assert!(high < of_key[0].1, "the held row above high {high}");

    let mut published = 0;
    for _ in 0..3 {
        published += relay(&db, &brokers, &[])["Published"].as_i64().unwrap();
    }
    assert_eq!(published, 2, "each row of the key once");
    assert_eq!(records_on(&brokers, &topic, 6), 3, "records on the topic");
    let got = consume(&brokers, &topic, 6, 3, Duration::from_secs(30));
    let order: Vec<String> = got
        .iter()
        .filter(|m| m.key == key)
        .map(|m| m.headers["ce_id"].clone())
        .collect();
    assert_eq!(
        order,
        vec![of_key[0].0.to_string(), of_key[1].0.to_string()],
        "the key's rows once each, in order"
    );
    assert_eq!(own_state(&mut c), (3, 0), "receipts and exceptions");
    // The watermark passed the delivered row above it (else it stays there, unpurged,
    // until a newer row comes): floor and high at the held row.
    assert_eq!(watermark(&mut c), (of_key[1].1, of_key[1].1));
}

/// A relay far behind the receipts of another set of types (another relay's, above its
/// `high`) reads them a bounded number at a time: its fetch stops at the last it read
/// (beyond it, an own row delivered as an exception is not taken again), passes them
/// when nothing of its own is cut off, and reaches its own newer row.
#[test]
fn receipts_above_high_are_read_a_bounded_number_at_a_time_and_passed() {
    const THEIRS: i64 = 12_000;
    let Fresh { brokers, topic, db } = Fresh::new(6);
    let mut c = db.client();
    insert(&mut c, &topic, OWN_TYPE);
    assert_eq!(relay(&db, &brokers, &[])["Published"], 1);
    // Another relay's deliveries above this one's high, more than one read takes, then
    // an own row delivered as an exception (its receipt above high), then a new one.
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         SELECT gen_random_uuid(), 'Deal', gen_random_uuid()::text, 'crm.deal-won', $1, '{}'
           FROM generate_series(1, $2::int8)",
        &[&topic, &THEIRS],
    )
    .unwrap();
    let (delivered, _) = insert(&mut c, &topic, OWN_TYPE);
    c.execute(
        "INSERT INTO crm.booking_expiration_receipt (seq, id, published_at, partition, \"offset\")
         SELECT seq, id, now(), 0, 0 FROM crm.outbox WHERE type = 'crm.deal-won' OR id = $1",
        &[&delivered],
    )
    .unwrap();
    let (_, newest) = insert(&mut c, &topic, OWN_TYPE);
    let run = relay(&db, &brokers, &[]);
    assert_eq!(run["Published"], 1, "the new row alone: {run}");
    assert_eq!(
        watermark(&mut c),
        (newest, newest),
        "floor and high at the new row"
    );
    assert_eq!(records_on(&brokers, &topic, 6), 2, "records on the topic");
}
