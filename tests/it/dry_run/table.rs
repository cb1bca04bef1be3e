//! The human table: the default fits 120 columns, `--wide` shows everything in full,
//! and the demo seed's table fits 120 columns too.

use super::*;

#[test]
fn the_default_table_fits_120_columns_and_wide_shows_everything_in_full() {
    let db = TestDb::new();
    let mut c = db.client();
    // The widest of each kind: the longest transition, over a year overdue; a Booking
    // expiry; a refusal by the guard; a quarantined row with a long, two-line error.
    let reserve = Seed::new("AwaitingPayment", Some(-400 * 86_400 - 3_599), None);
    let booking = Seed::booked(-600);
    let mut rejected = Seed::booked(-300);
    rejected.expired_at_set = true;
    let quarantined = Seed::new("AwaitingPayment", Some(-366 * 86_400), None);
    seed(
        &mut c,
        &[
            reserve.clone(),
            booking.clone(),
            rejected.clone(),
            quarantined.clone(),
        ],
    );
    put_in_quarantine(&mut c, &quarantined, "Reserve", "database", 12, 600);
    let error = format!(
        "duplicate key value violates unique constraint \"ux_outbox_event\"\nDETAIL: {}",
        "Key (aggregateid)=(b1000004) already exists. ".repeat(5)
    );
    c.execute(
        "UPDATE crm.booking_expiration_poison SET error = $2 WHERE booking_id = $1",
        &[&quarantined.id, &error],
    )
    .unwrap();
    let one_line = error.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(one_line.chars().count() > 200);

    let run = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_fits_120(&run.stdout);
    let all = [&reserve, &booking, &rejected, &quarantined];
    for s in all {
        for id in [s.id, s.tenant_id, s.deal_id] {
            assert!(!run.stdout.contains(&id.to_string()), "{}", run.stdout);
        }
    }
    let lines: Vec<&str> = run.stdout.lines().collect();
    // A row by its short id, and the line under it.
    let row = |s: &Seed| {
        let short = &s.id.to_string()[..8];
        let i = lines
            .iter()
            .position(|l| l.starts_with(&format!("{short}  ")))
            .unwrap_or_else(|| panic!("{} not listed:\n{}", s.id, run.stdout));
        (lines[i], lines.get(i + 1).copied().unwrap_or_default())
    };
    let short = |id: Uuid| id.to_string()[..8].to_owned();
    let cells = |line: &str| {
        line.split("  ")
            .filter(|c| !c.is_empty())
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("|")
    };

    // Whole seconds, Z.
    let seconds = |column: &str, id: Uuid| {
        deadline(&mut db.client(), id, column).to_rfc3339_opts(SecondsFormat::Secs, true)
    };
    let (line, _) = row(&reserve);
    assert_eq!(
        cells(line),
        [
            short(reserve.id),
            short(reserve.tenant_id),
            short(reserve.deal_id),
            "AwaitingPayment → ReserveExpired".into(),
            seconds("reserve_expires_at", reserve.id),
        ]
        .join("|")
            + "|400d 0h 59m 59s",
        "{line}"
    );
    let (line, _) = row(&booking);
    assert!(line.contains("  Booked → BookingExpired  "), "{line}");
    assert!(line.ends_with("  10m 0s"), "{line}");

    let (line, under) = row(&rejected);
    assert_eq!(
        cells(line),
        [
            short(rejected.id),
            short(rejected.tenant_id),
            short(rejected.deal_id),
            "Booked".into(),
            seconds("booking_expires_at", rejected.id),
        ]
        .join("|"),
        "{line}"
    );
    assert!(
        under.starts_with("  ↳ expired_at_already_set: active booking already has expired_at ")
            && under.ends_with(" (inconsistent)"),
        "{under}"
    );

    let (line, under) = row(&quarantined);
    let retry_at: DateTime<Utc> = c
        .query_one(
            "SELECT retry_at FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&quarantined.id],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        cells(line),
        [
            short(quarantined.id),
            short(quarantined.tenant_id),
            short(quarantined.deal_id),
            "AwaitingPayment".into(),
            seconds("reserve_expires_at", quarantined.id),
            "366d 0h 0m 0s".into(),
            "12".into(),
            retry_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        ]
        .join("|"),
        "{line}"
    );
    // The error on one line, cut to fit.
    assert_eq!(under.chars().count(), 120, "{under}");
    assert_eq!(
        under,
        format!("  ↳ database: {one_line}")
            .chars()
            .take(119)
            .collect::<String>()
            .trim_end()
            .to_owned()
            + "…"
    );
    assert!(run.stdout.contains(
        "\nReserve: 1 would expire, 0 rejected by the guard, 1 in quarantine, 0 left for later cycles\n"
    ));
    assert!(run.stdout.contains(
        "\nBooking: 1 would expire, 1 rejected by the guard, 0 in quarantine, 0 left for later cycles\n"
    ));

    // --wide: every id, time and text in full, in columns.
    let wide = db.run(&["dry-run", "--as-of", "now", "--wide"]);
    assert_eq!(wide.code, 0, "{}", wide.stderr);
    for s in all {
        let line = wide
            .stdout
            .lines()
            .find(|l| l.starts_with(&s.id.to_string()))
            .unwrap_or_else(|| panic!("{} not listed:\n{}", s.id, wide.stdout));
        for id in [s.tenant_id, s.deal_id] {
            assert!(line.contains(&format!("  {id}  ")), "{line}");
        }
    }
    let line = |s: &Seed| {
        wide.stdout
            .lines()
            .find(|l| l.starts_with(&s.id.to_string()))
            .unwrap()
    };
    assert!(
        line(&rejected)
            .contains("  expired_at_already_set  active booking already has expired_at ")
            && line(&rejected).ends_with(" (inconsistent)"),
        "{}",
        line(&rejected)
    );
    assert!(
        line(&quarantined).contains(&format!(
            "  database  12        {}  {one_line}",
            at(retry_at)
        )),
        "{}",
        line(&quarantined)
    );
    let micros = at(deadline(&mut c, reserve.id, "reserve_expires_at"));
    assert!(
        line(&reserve).contains(&format!("  {micros}  ")),
        "{}",
        line(&reserve)
    );
    assert!(!wide.stdout.contains('…'), "{}", wide.stdout);
    assert!(
        wide.stdout.contains(" left for later cycles (AsOf "),
        "{}",
        wide.stdout
    );
}

#[test]
fn the_demo_seed_fits_120_columns() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_demo(&mut c);
    let first = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_fits_120(&first.stdout);
    assert!(
        first
            .stdout
            .contains("\nb1000003   11111111  d1000003  AwaitingPayment → ReserveExpired  "),
        "{}",
        first.stdout
    );

    // As in the worked example of docs/guides/operating.md: one booking made inconsistent, a cycle that
    // quarantines it, and a look ahead past its retry, when the guard refuses it again.
    break_demo_booking(&mut c);
    assert_eq!(db.run_once(&[]).counts(), (6, 1, 0, 1));
    let quarantined = db.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(quarantined.code, 0, "{}", quarantined.stderr);
    assert_fits_120(&quarantined.stdout);
    assert!(
        quarantined
            .stdout
            .contains("\n  ↳ expired_at_already_set: active booking already has expired_at "),
        "{}",
        quarantined.stdout
    );
    let ahead = at(Utc::now() + Duration::minutes(65));
    let refused = db.run(&["dry-run", "--as-of", &ahead]);
    assert_eq!(refused.code, 0, "{}", refused.stderr);
    assert_fits_120(&refused.stdout);
    assert!(
        refused
            .stdout
            .contains("Booking phase: the guard would reject (run-once quarantines these)\n"),
        "{}",
        refused.stdout
    );
}
