//! `--as-of`: RFC 3339 with any offset or `now`, a bad value exits 64 touching nothing;
//! and the failures of the infrastructure keep their exit codes.

use super::*;

#[test]
fn bad_as_of_values_exit_64_with_a_clear_message_and_touch_nothing() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::booked(-60)]);
    let before = checksum(&mut c);
    let example = "e.g. 2026-11-29T18:00:00Z or 2026-11-29T21:00:00+03:00, or now";
    let cases: &[(&str, &str)] = &[
        ("yesterday", "'yesterday'"),
        ("2026-13-01T00:00:00Z", "a field is out of range"),
        ("2026-02-30T00:00:00Z", "a field is out of range"),
        ("2026-11-29T18:00:00", "it has no UTC offset"),
        ("2026-11-29 18:00:00", "it has no UTC offset"),
        ("2026-11-29", "'2026-11-29'"),
        ("", "it is empty"),
        ("NOW", "'NOW'"),
        ("1764439200", "'1764439200'"),
    ];
    for (value, needle) in cases {
        let run = db.run(&["dry-run", "--as-of", value]);
        assert_eq!(run.code, 64, "{value:?}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("invalid value '{value}' for '--as-of <T>'")),
            "{value:?}: {}",
            run.stderr
        );
        assert!(run.stderr.contains(needle), "{value:?}: {}", run.stderr);
        assert!(run.stderr.contains(example), "{value:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let missing = db.run(&["dry-run"]);
    assert_eq!(missing.code, 64);
    assert!(missing.stderr.contains("--as-of <T>"), "{}", missing.stderr);
    assert_eq!(checksum(&mut c), before);
}

#[test]
fn as_of_parses_rfc_3339_with_any_offset_or_now() {
    let t = Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap();
    assert_eq!(parse_as_of("now"), Ok(AsOf::Now));
    assert_eq!(parse_as_of("2026-11-29T18:00:00Z"), Ok(AsOf::At(t)));
    assert_eq!(parse_as_of("2026-11-29T21:00:00+03:00"), Ok(AsOf::At(t)));
    assert_eq!(parse_as_of("2026-11-29T13:00:00-05:00"), Ok(AsOf::At(t)));
    // PostgreSQL's precision: microseconds kept, nanoseconds dropped.
    assert_eq!(
        parse_as_of("2026-11-29T18:00:00.123456789Z"),
        Ok(AsOf::At(t + Duration::microseconds(123_456)))
    );
    assert!(parse_as_of("2026-11-29T18:00:00").is_err());
}

#[test]
fn infrastructure_failures_keep_their_exit_codes() {
    let empty = TestDb::empty();
    let run = empty.run(&["dry-run", "--as-of", "now"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("schema not migrated: missing table crm.bookings"),
        "{}",
        run.stderr
    );
    let mut cmd = empty.command(&["dry-run", "--as-of", "now", "--connect-timeout", "1s"]);
    cmd.env("DATABASE_URL", "postgres://u@127.0.0.1:1/db");
    let run = Run::of(cmd.output().unwrap());
    assert_eq!(run.code, 69, "{}", run.stderr);
    let run = empty.run(&["dry-run", "--as-of", "now", "--batch-size", "0"]);
    assert_eq!(run.code, 64, "{}", run.stderr);

    let help = empty.run(&["dry-run", "--help"]);
    assert_eq!(help.code, 0);
    for needle in ["--as-of <T>", "ce_id", "  64 ", "  75 "] {
        assert!(help.stdout.contains(needle), "{needle}:\n{}", help.stdout);
    }
}
