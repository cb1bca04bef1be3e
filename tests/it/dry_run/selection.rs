//! What it lists: at the same AsOf exactly what run-once expires, a deadline equal to
//! AsOf not due, a future AsOf's expiries, and one cycle's share (batch size times
//! max batches) beside `--all`.

use super::*;

#[test]
fn at_the_same_as_of_it_lists_exactly_what_run_once_expires() {
    let db = TestDb::new();
    let mut c = db.client();
    // The oldest reserve row is guard poison; then 6 healthy reserve rows, 4 booking
    // rows, and rows that must not move.
    let mut inconsistent = Seed::reserved(-1_000);
    inconsistent.expired_at_set = true;
    seed(&mut c, std::slice::from_ref(&inconsistent));
    seed_many(&mut c, 6, |i| {
        if i == 2 {
            Seed::new("AwaitingPayment", Some(-900 + 100 * i as i64), None)
        } else {
            Seed::reserved(-900 + 100 * i as i64)
        }
    });
    seed_many(&mut c, 4, |i| Seed::booked(-800 + 100 * i as i64));
    seed(
        &mut c,
        &[
            Seed::reserved(3_600),
            Seed::booked(3_600),
            Seed::new("Completed", Some(-9_000), Some(-3_600)),
        ],
    );
    drop(c);
    let twin = db.copy();

    // Two batches of two per phase: run-once claims 4 reserve rows (the poison one and
    // the three oldest healthy ones) and all 4 booking rows.
    let limits = ["--batch-size", "2", "--max-batches", "2"];
    let result = db.run_once(&limits);
    assert_eq!(result.counts(), (3, 4, 0, 1));
    let plan = dry_run(&twin, &at(result.as_of), &limits);

    let mut c = db.client();
    let outbox: BTreeMap<Uuid, (Value, Value)> = c
        .query(
            "SELECT aggregateid::uuid, payload, headers FROM crm.outbox",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let listed: BTreeSet<Uuid> = plan
        .expiries
        .iter()
        .map(|l| l["BookingId"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        listed,
        outbox.keys().copied().collect::<BTreeSet<_>>(),
        "dry-run lists exactly the bookings run-once expired"
    );
    assert_eq!(plan.expiries.len(), 7);
    let audit: BTreeMap<Uuid, (String, String)> = c
        .query(
            "SELECT booking_id, from_status, to_status FROM crm.booking_audit",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    for line in &plan.expiries {
        let id: Uuid = line["BookingId"].as_str().unwrap().parse().unwrap();
        let (payload, headers) = &outbox[&id];
        assert_eq!(&line["Event"], payload, "the exact event payload of {id}");
        assert_eq!(line["Topic"], "pin.crm.booking-expired.v1");
        // Every header but the ones that identify the message and the run.
        let without_ids = |h: &Value| {
            let mut h = h.as_object().unwrap().clone();
            for k in ["ce_id", "ce_correlationid", "traceparent"] {
                assert!(h.remove(k).is_some(), "{k} missing");
            }
            h
        };
        assert_eq!(without_ids(&line["Headers"]), without_ids(headers));
        assert_eq!(line["Headers"]["ce_correlationid"], plan.summary["RunId"]);
        let (from, to) = &audit[&id];
        assert_eq!((&line["From"], &line["To"]), (&json!(from), &json!(to)));
    }
    // The guard's refusal is the one run-once quarantined.
    let poison: Vec<(Uuid, String)> = c
        .query(
            "SELECT booking_id, reason FROM crm.booking_expiration_poison",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        poison,
        [(inconsistent.id, "expired_at_already_set".to_owned())]
    );
    assert_eq!(ids(&plan.rejected, "Reserve"), [inconsistent.id]);
    assert_eq!(plan.rejected[0]["Rejected"], "expired_at_already_set");
    // What one cycle leaves is exactly what is still overdue after it.
    assert_eq!(plan.counts("Reserve"), (3, 1, 0, 3));
    assert_eq!(plan.counts("Booking"), (4, 0, 0, 0));
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.bookings WHERE status IN ('Reserved', 'AwaitingPayment')
                AND reserve_expires_at < now() AND expired_at IS NULL"
        ),
        3
    );
    assert_eq!(plan.summary["AsOf"], at(result.as_of));
    assert_eq!(plan.summary["PerPhaseLimit"], 4);
}

#[test]
fn a_deadline_equal_to_as_of_is_not_due() {
    let db = TestDb::new();
    let mut c = db.client();
    let t = Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap();
    let us = Duration::microseconds(1);
    let reserve = seed_many(&mut c, 3, |_| Seed::reserved(0));
    let booking = seed_many(&mut c, 3, |_| Seed::booked(0));
    for (i, offset) in [-us, Duration::zero(), us].into_iter().enumerate() {
        set_deadline(&mut c, reserve[i], "reserve_expires_at", t + offset);
        set_deadline(&mut c, booking[i], "booking_expires_at", t + offset);
    }

    let exactly = dry_run(&db, "2030-01-01T00:00:00Z", &[]);
    assert_eq!(exactly.expiring("Reserve"), [reserve[0]]);
    assert_eq!(exactly.expiring("Booking"), [booking[0]]);
    assert_eq!(exactly.expiries[0]["OverdueBySeconds"], 0.000001);
    // The same instant written with another offset.
    let in_moscow = dry_run(&db, "2030-01-01T03:00:00+03:00", &[]);
    assert_eq!(in_moscow.expiring("Reserve"), [reserve[0]]);
    assert_eq!(in_moscow.expiring("Booking"), [booking[0]]);
    assert_eq!(in_moscow.summary["AsOf"], "2030-01-01T00:00:00.000000Z");
    // One microsecond later the equal deadline has passed.
    let after = dry_run(&db, "2030-01-01T00:00:00.000001Z", &[]);
    assert_eq!(after.expiring("Reserve"), [reserve[0], reserve[1]]);
    assert_eq!(after.expiring("Booking"), [booking[0], booking[1]]);
    for lines in [&exactly, &in_moscow, &after] {
        assert!(lines.rejected.is_empty() && lines.quarantined.is_empty());
    }
}

#[test]
fn a_future_as_of_lists_future_expiries() {
    let db = TestDb::new();
    let mut c = db.client();
    let in_1h = Seed::reserved(3_600);
    let in_2h = Seed::new("AwaitingPayment", Some(7_200), None);
    let in_3h = Seed::reserved(10_800);
    let booked_in_90m = Seed::booked(5_400);
    seed(
        &mut c,
        &[
            in_3h.clone(),
            in_1h.clone(),
            booked_in_90m.clone(),
            in_2h.clone(),
        ],
    );

    let now = dry_run(&db, "now", &[]);
    assert!(now.expiries.is_empty(), "{:?}", now.expiries);
    assert_eq!(now.counts("Reserve"), (0, 0, 0, 0));
    assert_eq!(now.counts("Booking"), (0, 0, 0, 0));

    let t = Utc::now() + Duration::minutes(150);
    let later = dry_run(&db, &at(t), &[]);
    assert_eq!(later.expiring("Reserve"), [in_1h.id, in_2h.id]);
    assert_eq!(later.expiring("Booking"), [booked_in_90m.id]);
    let t = DateTime::parse_from_rfc3339(&at(t))
        .unwrap()
        .with_timezone(&Utc);
    for line in &later.expiries {
        let id: Uuid = line["BookingId"].as_str().unwrap().parse().unwrap();
        let column = if line["Phase"] == "Reserve" {
            "reserve_expires_at"
        } else {
            "booking_expires_at"
        };
        let due = deadline(&mut c, id, column);
        assert_eq!(line["Deadline"], at(due));
        let overdue = (t - due).num_microseconds().unwrap() as f64 / 1e6;
        assert_eq!(line["OverdueBySeconds"], overdue);
        // The event carries the AsOf the cycle would run at.
        assert_eq!(line["Event"]["ExpiredAt"], at(t));
    }
    assert_eq!(
        later.expiries[1]["From"], "AwaitingPayment",
        "{:?}",
        later.expiries
    );
    assert_eq!(later.expiries[1]["To"], "ReserveExpired");
    assert_eq!(later.expiries[2]["From"], "Booked");
    assert_eq!(later.expiries[2]["To"], "BookingExpired");
}

#[test]
fn one_cycle_takes_batch_size_times_max_batches_and_all_lists_every_candidate() {
    let db = TestDb::new();
    let mut c = db.client();
    let overdue = seed_many(&mut c, 7, |i| Seed::reserved(-1_000 + 10 * i as i64));

    let cycle = dry_run(&db, "now", &["--batch-size", "2", "--max-batches", "2"]);
    assert_eq!(cycle.expiring("Reserve"), overdue[..4]);
    assert_eq!(cycle.counts("Reserve"), (4, 0, 0, 3));
    assert_eq!(cycle.summary["All"], false);
    assert_eq!(cycle.summary["PerPhaseLimit"], 4);

    // The deployment's environment sets the same limits for dry-run as for run-once.
    let mut cmd = db.command(&["dry-run", "--as-of", "now", "--json"]);
    cmd.env("BOOKING_EXPIRATION_BATCH_SIZE", "3");
    let from_env = Lines::of(&Run::of(cmd.output().unwrap()));
    assert_eq!(from_env.expiring("Reserve"), overdue[..3]);
    assert_eq!(from_env.counts("Reserve"), (3, 0, 0, 4));

    let all = dry_run(&db, "now", &["--batch-size", "2", "--all"]);
    assert_eq!(all.expiring("Reserve"), overdue);
    assert_eq!(all.counts("Reserve"), (7, 0, 0, 0));
    assert_eq!(all.summary["All"], true);
    assert_eq!(all.summary["PerPhaseLimit"], Value::Null);

    let run = db.run(&[
        "dry-run",
        "--as-of",
        "now",
        "--batch-size",
        "2",
        "--max-batches",
        "2",
    ]);
    assert!(
        run.stdout
            .contains("one cycle, up to 4 candidates per phase (--batch-size 2 × --max-batches 2)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("Reserve: 4 would expire, 0 rejected by the guard, 0 in quarantine, 3 left for later cycles"),
        "{}",
        run.stdout
    );
}
