//! Ids by their start, as the 120-column tables show them: `explain`, `republish` and
//! `retry-failed` take a unique start of at least 8 hex characters of a booking id (and
//! of an outbox id for `--ids`), show the whole id, refuse an ambiguous start with the
//! candidates (64), treat a start no id has as an unknown id; the look-up is a range
//! on the primary key's index, never a scan of the table.

use crate::common;
use crate::postgres;

use common::*;
use uuid::Uuid;

fn id(s: &str) -> Uuid {
    s.parse().unwrap()
}

fn overdue(ids: &[Uuid]) -> Vec<Seed> {
    ids.iter()
        .map(|id| Seed {
            id: *id,
            ..Seed::booked(-600)
        })
        .collect()
}

#[test]
fn a_unique_start_of_an_id_stands_for_it_and_an_ambiguous_one_lists_the_candidates() {
    let db = TestDb::new();
    let mut c = db.client();
    let unique = id("bb7f5ae6-1111-4000-8000-000000000001");
    let pair = [
        id("cc000000-0000-4000-8000-000000000001"),
        id("cc000000-0000-4000-8000-000000000002"),
    ];
    let twelve: Vec<Uuid> = (1..=12)
        .map(|n| id(&format!("dd000000-0000-4000-8000-{n:012}")))
        .collect();
    let mut all = vec![unique];
    all.extend(pair);
    all.extend(&twelve);
    seed(&mut c, &overdue(&all));
    assert_eq!(db.run_once(&[]).booking, 15);
    // As if the relay had sent them.
    c.batch_execute("UPDATE crm.outbox SET published_at = now()")
        .unwrap();

    // A unique start, in either case: the report is the whole id's.
    for typed in ["bb7f5ae6", "BB7F5AE6", "bb7f5ae6-1111"] {
        let run = db.run(&["explain", typed]);
        assert_eq!(run.code, 0, "{typed}: {}", run.stderr);
        assert!(
            run.stdout.starts_with(&format!("booking {unique} at ")),
            "{}",
            run.stdout
        );
    }
    let json = db.run(&["explain", "bb7f5ae6", "--json"]);
    let json: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(json["BookingId"], unique.to_string());

    // Ambiguous: 64, every candidate up to ten, then how many more.
    let run = db.run(&["explain", "cc000000"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "BOOKING_ID cc000000 is ambiguous: the ids of 2 bookings start with it: {}, {}; give \
             more of the id",
            pair[0], pair[1]
        )),
        "{}",
        run.stderr
    );
    let run = db.run(&["explain", "dd000000"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    let first_ten: Vec<String> = twelve[..10].iter().map(Uuid::to_string).collect();
    assert!(
        run.stderr.contains(&format!(
            "BOOKING_ID dd000000 is ambiguous: the ids of 12 bookings start with it: {}, and 2 \
             more; give more of the id",
            first_ten.join(", ")
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains(&twelve[10].to_string()));

    // No id starts with it: as an unknown id (exit 1, nothing found).
    let unknown = db.run(&["explain", "ee000000-0000-4000-8000-000000000000"]);
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    let run = db.run(&["explain", "ee000000"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("no booking's id starts with ee000000"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.starts_with("booking ee000000 at "),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("no booking in crm.bookings has an id starting with ee000000"),
        "{}",
        run.stdout
    );

    // republish and retry-failed --booking: the whole id in what they say and record.
    let run = db.run(&[
        "republish",
        "--booking",
        "bb7f5ae6",
        "--reason",
        "INC-3: consumer lost it",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(&format!(
            "republish: re-queued 1 outbox rows (booking {unique})"
        )),
        "{}",
        run.stdout
    );
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.booking_expiration_operations WHERE target = 'booking {unique}'"
            )
        ),
        1
    );
    let run = db.run(&["retry-failed", "--booking", "cc000000", "--reason", "x"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--booking cc000000 is ambiguous: the ids of 2 bookings start with it"),
        "{}",
        run.stderr
    );
    let run = db.run(&["retry-failed", "--booking", "ee000000", "--reason", "x"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("nothing to re-queue; nothing was changed"),
        "{}",
        run.stdout
    );

    // Outbox ids (UUIDv7: the rows of one minute share their first 8 characters).
    let outbox: Vec<Uuid> = c
        .query("SELECT id FROM crm.outbox ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outbox.len(), 15);
    let start8 = &outbox[0].simple().to_string()[..8];
    assert!(
        outbox
            .iter()
            .all(|o| o.simple().to_string().starts_with(start8))
    );
    let run = db.run(&["republish", "--ids", start8, "--reason", "x", "--dry-run"]);
    assert_eq!(run.code, 64, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "--ids {start8} is ambiguous: the ids of 15 outbox rows start with it: {}, ",
            outbox[0]
        )) && run.stderr.contains(", and 5 more; give more of the id"),
        "{}",
        run.stderr
    );
    let whole = outbox[3].to_string();
    let run = db.run(&[
        "republish",
        "--ids",
        &format!("{},ffffffff", &whole[..30]),
        "--reason",
        "x",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["Rows"][0]["Id"], whole);
    assert_eq!(out["Requeued"], 1);
    assert_eq!(out["NotFound"], serde_json::json!(["ffffffff"]));
}

fn plan(c: &mut postgres::Client, mode: &str, sql: &str, low: Uuid, high: Uuid) -> String {
    c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
        .unwrap();
    let explain = format!("EXPLAIN (COSTS OFF) {sql}");
    // The outbox's look-ups take the job's outbox types too (`$4` or `$3`).
    let own = booking_expire_domain::OutboxTypes::default();
    let types = own.as_slice();
    let rows = if sql.contains("$4") {
        c.query(&explain, &[&low, &high, &11_i64, &types])
    } else if sql.contains("$3::text[]") {
        c.query(&explain, &[&low, &high, &types])
    } else if sql.contains("$3") {
        c.query(&explain, &[&low, &high, &11_i64])
    } else {
        c.query(&explain, &[&low, &high])
    };
    rows.unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_start_of_an_id_is_looked_up_on_the_primary_key_never_by_a_scan() {
    use booking_expire_store::testing::ids::{
        BOOKINGS_IN_RANGE_COUNT_SQL, BOOKINGS_IN_RANGE_SQL, OUTBOX_IN_RANGE_COUNT_SQL,
        OUTBOX_IN_RANGE_SQL, prefix_range,
    };
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 20_000, |_| Seed::booked(3_600));
    insert_outbox_rows(&mut c, OutboxState::Published, &vec![60; 20_000]);
    c.batch_execute("ANALYZE crm.bookings; ANALYZE crm.outbox")
        .unwrap();
    let (low, high) = prefix_range("bb7f5ae6").unwrap();
    // The outbox's: the job's type is a filter on the same range of the primary key (an
    // index scan, no longer index-only: the type is in the row).
    for (sql, scan) in [
        (BOOKINGS_IN_RANGE_SQL, "Index Only Scan using bookings_pkey"),
        (
            BOOKINGS_IN_RANGE_COUNT_SQL,
            "Index Only Scan using bookings_pkey",
        ),
        (OUTBOX_IN_RANGE_SQL, "Index Scan using outbox_pkey"),
        (OUTBOX_IN_RANGE_COUNT_SQL, "Index Scan using outbox_pkey"),
    ] {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            let plan = plan(&mut c, mode, sql, low, high);
            assert!(
                plan.contains(scan)
                    && plan.contains("Index Cond: ((id >= ")
                    && !plan.contains("Seq Scan"),
                "{mode} {sql}:\n{plan}"
            );
        }
    }
}

#[test]
fn explain_takes_the_first_8_characters_the_tables_show_on_the_demo_seed() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_demo(&mut c);
    let run = db.run(&["explain", "b1000001"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("b1000001-0000-4000-8000-000000000000"),
        "{}",
        run.stdout
    );
}
