//! The rows it does not list as expiries: those the guard would refuse, with their
//! reason, and overdue rows in quarantine, listed apart until their retry time.

use super::*;

#[test]
fn guard_rejected_rows_are_shown_with_their_reason() {
    let db = TestDb::new();
    let mut c = db.client();
    let healthy = Seed::reserved(-60);
    let mut inconsistent = Seed::reserved(-120);
    inconsistent.expired_at_set = true;
    let mut worn_out = Seed::booked(-60);
    worn_out.version = i32::MAX;
    seed(
        &mut c,
        &[healthy.clone(), inconsistent.clone(), worn_out.clone()],
    );

    let lines = dry_run(&db, "now", &[]);
    assert_eq!(lines.expiring("Reserve"), [healthy.id]);
    assert_eq!(lines.expiring("Booking"), Vec::<Uuid>::new());
    let rejected: BTreeMap<Uuid, (Value, Value)> = lines
        .rejected
        .iter()
        .map(|l| {
            (
                l["BookingId"].as_str().unwrap().parse().unwrap(),
                (l["Rejected"].clone(), l["Status"].clone()),
            )
        })
        .collect();
    assert_eq!(
        rejected,
        BTreeMap::from([
            (
                inconsistent.id,
                (json!("expired_at_already_set"), json!("Reserved"))
            ),
            (worn_out.id, (json!("version_overflow"), json!("Booked"))),
        ])
    );
    let overflow = lines
        .rejected
        .iter()
        .find(|l| l["Rejected"] == "version_overflow")
        .unwrap();
    assert_eq!(overflow["Error"], "version cannot be incremented");
    assert_eq!(overflow["Phase"], "Booking");
    assert_eq!(lines.counts("Reserve"), (1, 1, 0, 0));
    assert_eq!(lines.counts("Booking"), (0, 1, 0, 0));

    // The table shows each refused row with its reason and error on the line under
    // it, under its own heading; ids by their first eight characters, so every line
    // fits 120 columns.
    let run = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let row_at = |id: Uuid| {
        let short = &id.to_string()[..8];
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{short}  ")))
            .unwrap_or_else(|| panic!("{id} not listed:\n{}", run.stdout))
    };
    let row_of = |id: Uuid| lines[row_at(id)].to_owned();
    let under = |id: Uuid| lines[row_at(id) + 1].to_owned();
    assert!(
        !run.stdout.contains(&healthy.id.to_string()),
        "{}",
        run.stdout
    );
    assert_fits_120(&run.stdout);
    // Report commands log warnings only, unless asked: the table stands alone.
    assert!(!run.stderr.contains(" INFO "), "{}", run.stderr);
    assert!(row_of(inconsistent.id).contains("  Reserved  "));
    assert!(
        under(inconsistent.id)
            .starts_with("  ↳ expired_at_already_set: active booking already has expired_at ")
    );
    assert_eq!(
        under(worn_out.id),
        "  ↳ version_overflow: version cannot be incremented"
    );
    assert!(row_of(healthy.id).contains("  Reserved → ReserveExpired  "));
    for heading in [
        "Reserve phase: would expire",
        "Reserve phase: the guard would reject (run-once quarantines these)",
        "Booking phase: nothing would expire",
        "Booking phase: the guard would reject (run-once quarantines these)",
    ] {
        assert!(
            run.stdout.lines().any(|l| l == heading),
            "{heading}:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains(
        "\nReserve: 1 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));
    assert!(run.stdout.contains(
        "\nBooking: 0 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));
}

#[test]
fn quarantined_overdue_rows_are_listed_apart_until_their_retry_at() {
    let db = TestDb::new();
    let mut c = db.client();
    let quarantined = Seed::reserved(-600);
    let healthy = Seed::reserved(-60);
    // Poison whose booking is not due at all: nothing to show.
    let not_due = Seed::booked(3_600);
    seed(
        &mut c,
        &[quarantined.clone(), healthy.clone(), not_due.clone()],
    );
    put_in_quarantine(&mut c, &quarantined, "Reserve", "database", 2, 600);
    put_in_quarantine(&mut c, &not_due, "Booking", "database", 1, 600);
    let retry_at: DateTime<Utc> = c
        .query_one(
            "SELECT retry_at FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&quarantined.id],
        )
        .unwrap()
        .get(0);

    let now = dry_run(&db, "now", &[]);
    assert_eq!(now.expiring("Reserve"), [healthy.id]);
    assert_eq!(ids(&now.quarantined, "Reserve"), [quarantined.id]);
    assert_eq!(now.quarantined.len(), 1);
    assert_eq!(
        now.quarantined[0]["Quarantined"],
        json!({"Reason": "database", "Error": "seeded by a test", "Attempts": 2,
               "RetryAt": at(retry_at)})
    );
    assert_eq!(now.counts("Reserve"), (1, 0, 1, 0));
    assert_eq!(now.counts("Booking"), (0, 0, 0, 0));

    // --wide shows full ids; --verbose logs the progress again.
    let run = db.run(&["dry-run", "--as-of", "now", "--wide", "--verbose"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("dry run started"), "{}", run.stderr);
    assert!(
        run.stdout.lines().any(|l| l
            == "Reserve phase: overdue but in quarantine as poison (not claimed before RetryAt)"),
        "{}",
        run.stdout
    );
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with(&quarantined.id.to_string()))
        .unwrap();
    assert!(line.contains("  database  2  "), "{line}");

    // Past its retry_at the row is a candidate again, oldest first.
    let after = dry_run(&db, &at(retry_at + Duration::seconds(1)), &[]);
    assert_eq!(after.expiring("Reserve"), [quarantined.id, healthy.id]);
    assert!(after.quarantined.is_empty());
}
