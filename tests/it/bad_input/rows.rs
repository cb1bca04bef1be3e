//! Malformed rows in the table (unknown status text, NULL deadlines, a version at its
//! limit) and a CRM schema relaxed to allow NULL ids: never claimed, never a crash.

use super::*;

#[test]
fn malformed_rows_are_never_claimed_or_crash_and_reports_show_them_as_documented() {
    let db = TestDb::new();
    let mut c = db.client();
    // Unknown status text: no phase lists it, so no claim, no backlog count, no dry-run
    // line; even with both deadlines long past.
    let unknown: Vec<Seed> = [
        "Frozen",
        "reserved",
        "Booked ",
        "",
        "'; DROP TABLE crm.bookings; --",
    ]
    .into_iter()
    .map(|s| Seed::new(s, Some(-86_400), Some(-86_400)))
    .collect();
    // Active rows whose phase deadline is NULL: NULL < AsOf is not true, never overdue.
    let null_deadlines = vec![
        Seed::new("Reserved", None, Some(-86_400)),
        Seed::new("AwaitingPayment", None, None),
        Seed::new("Booked", Some(-86_400), None),
    ];
    // A version that cannot be incremented: the guard refuses it, it is quarantined.
    let mut at_limit = Seed::booked(-600);
    at_limit.version = i32::MAX;
    let healthy = vec![Seed::reserved(-60), Seed::booked(-60)];
    for rows in [&unknown, &null_deadlines, &vec![at_limit.clone()], &healthy] {
        seed(&mut c, rows);
    }
    let malformed: Vec<uuid::Uuid> = unknown
        .iter()
        .chain(&null_deadlines)
        .chain([&at_limit])
        .map(|s| s.id)
        .collect();
    let rows_of = |c: &mut postgres::Client| -> Vec<String> {
        c.query(
            "SELECT b::text FROM crm.bookings b WHERE id = ANY($1) ORDER BY id",
            &[&malformed],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = rows_of(&mut c);

    let future = "2099-01-01T00:00:00Z";
    let plan = db.run(&["dry-run", "--as-of", future, "--json", "--all"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let lines = json_lines(&plan.stdout);
    let listed: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["BookingId"].as_str())
        .collect();
    let mut want = vec![
        healthy[0].id.to_string(),
        healthy[1].id.to_string(),
        at_limit.id.to_string(),
    ];
    want.sort();
    let mut got: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
    got.sort();
    assert_eq!(got, want, "only the rows a claim would select are listed");
    let refused: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l.get("Rejected").is_some())
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["BookingId"], json!(at_limit.id.to_string()));
    assert_eq!(refused[0]["Rejected"], json!("version_overflow"));

    let result = db.run_once(&[]);
    assert_eq!(result.counts(), (1, 1, 0, 1), "the two healthy rows expire");
    assert_eq!(rows_of(&mut c), before, "malformed rows untouched");
    assert_eq!(assert_each_expiry_written_once(&mut c), 2);
    let poison = c
        .query_one(
            "SELECT booking_id, reason FROM crm.booking_expiration_poison",
            &[],
        )
        .unwrap();
    assert_eq!(poison.get::<_, uuid::Uuid>(0), at_limit.id);
    assert_eq!(poison.get::<_, String>(1), "version_overflow");

    let backlog = db.run(&["backlog", "--json"]);
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let b: serde_json::Value = serde_json::from_str(backlog.stdout.trim()).unwrap();
    assert_eq!(b["Reserve"]["Overdue"], json!(0));
    assert_eq!(b["Booking"]["Overdue"], json!(1), "the quarantined row");
    assert_eq!(b["Poison"], json!(1));
    assert_eq!(b["OverdueTotal"], json!(1));
    // A second cycle inside the back-off changes nothing at all.
    let before_all = checksum(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (0, 0, 0, 0));
    assert_eq!(checksum(&mut c), before_all);
}

/// The reference schema declares the ids NOT NULL; a CRM schema that allows NULL there
/// is refused up front (78, naming the column) instead of crashing on such a row.
#[test]
fn a_null_id_in_a_relaxed_schema_never_crashes_the_job() {
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute("ALTER TABLE crm.bookings ALTER COLUMN tenant_id DROP NOT NULL")
        .unwrap();
    let broken = Seed::booked(-600);
    seed(&mut c, std::slice::from_ref(&broken));
    c.execute(
        "UPDATE crm.bookings SET tenant_id = NULL WHERE id = $1",
        &[&broken.id],
    )
    .unwrap();
    seed(&mut c, &[Seed::booked(-60)]);
    for args in [
        &["run-once"][..],
        &["dry-run", "--as-of", "now"][..],
        &["backlog"][..],
    ] {
        let r = db.run(args);
        assert!(
            !r.stderr.contains("panicked"),
            "{args:?}: {}",
            tail(&r.stderr)
        );
        assert_eq!(r.code, 78, "{args:?}: {}", tail(&r.stderr));
        assert!(
            r.stderr.contains(
                "schema not as expected: crm.bookings.tenant_id may hold NULL; \
                 the job needs NOT NULL there"
            ),
            "{args:?}: {}",
            tail(&r.stderr)
        );
    }
    let status: String = c
        .query_one(
            "SELECT status FROM crm.bookings WHERE id = $1",
            &[&broken.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "Booked");
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM crm.outbox"),
        0,
        "nothing expired"
    );
}
