//! Property tests (proptest) of the pure parts: the domain transition `expire`, and
//! the command line (durations, `--as-of`, whole argument lists, the database URL).
//! 256 cases per property by default (`PROPTEST_CASES` changes it), a few seconds in
//! all; no database needed.

use std::time::Duration;

use booking_expire::testing::cli::{AsOf, Cli, Command, parse_as_of, parse_duration};
use booking_expire::testing::config::RunOnceConfig;
use booking_expire_domain::{BookingRow, Phase, Timestamp, expire};
use chrono::{DateTime, FixedOffset, TimeDelta, TimeZone, Utc};
use clap::Parser;
use proptest::prelude::*;
use uuid::Uuid;

const STATUSES: [&str; 7] = [
    "Reserved",
    "AwaitingPayment",
    "Booked",
    "ReserveExpired",
    "BookingExpired",
    "Cancelled",
    "Completed",
];

fn as_of() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 18, 0, 0).unwrap() + TimeDelta::microseconds(123_456)
}

/// The seven statuses most of the time, else any text (near-misses included).
fn status() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => proptest::sample::select(&STATUSES[..]).prop_map(str::to_owned),
        1 => "(reserved|booked|Booked |Expired|)",
        1 => any::<String>(),
    ]
}

/// A moment around AsOf at microsecond granularity, equality and neighbours included.
fn near_as_of() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        Just(0i64),
        Just(-1),
        Just(1),
        -5_000_000i64..5_000_000,
        any::<i32>().prop_map(i64::from),
    ]
    .prop_map(|micros| as_of() + TimeDelta::microseconds(micros))
}

/// A stored moment: mostly near AsOf, sometimes `±infinity` or a year past chrono's
/// range (PostgreSQL holds them all).
fn stored() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        8 => near_as_of().prop_map(Timestamp::from),
        1 => Just(Timestamp::INFINITY),
        1 => Just(Timestamp::NEG_INFINITY),
        1 => Just(Timestamp::from_pg_micros(720 * 146_097 * 86_400 * 1_000_000)),
    ]
}

fn version() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MAX),
        Just(i64::MAX - 1),
        Just(i64::from(i32::MAX)),
        Just(0),
        1..1_000i64,
        any::<i64>()
    ]
}

prop_compose! {
    fn booking_row()(
        ids in any::<[u128; 4]>(),
        status in status(),
        reserve in proptest::option::weighted(0.8, stored()),
        booking in proptest::option::weighted(0.8, stored()),
        expired_at in proptest::option::weighted(0.15, stored()),
        version in version(),
    ) -> BookingRow {
        BookingRow {
            id: Uuid::from_u128(ids[0]),
            tenant_id: Uuid::from_u128(ids[1]),
            deal_id: Uuid::from_u128(ids[2]),
            property_object_id: Uuid::from_u128(ids[3]),
            status,
            reserve_expires_at: reserve,
            booking_expires_at: booking,
            expired_at,
            version,
            version_max: i64::from(i32::MAX),
        }
    }
}

/// The phase whose timer runs in a status, written out independently of the domain.
fn phase_of(status: &str) -> Option<Phase> {
    match status {
        "Reserved" | "AwaitingPayment" => Some(Phase::Reserve),
        "Booked" => Some(Phase::Booking),
        _ => None,
    }
}

proptest! {
    /// `expire` succeeds exactly when the status is active, `expired_at` is unset, the
    /// phase's deadline is strictly before AsOf and the version can grow; then the
    /// target, the phase, the moment and the expected version are the documented ones.
    /// Otherwise the first failing guard, in the documented order, names the reason.
    #[test]
    fn expire_decides_exactly_by_status_deadline_expired_at_and_version(row in booking_row()) {
        let as_of = as_of();
        let phase = phase_of(&row.status);
        let deadline = phase.and_then(|p| match p {
            Phase::Reserve => row.reserve_expires_at,
            Phase::Booking => row.booking_expires_at,
        });
        let expect_ok = phase.is_some()
            && row.expired_at.is_none()
            && deadline.is_some_and(|d| d < Timestamp::from(as_of))
            && row.version < row.version_max;
        match expire(&row, as_of) {
            Ok(expiry) => {
                prop_assert!(expect_ok, "{row:?} expired");
                let phase = phase.unwrap();
                prop_assert_eq!(expiry.phase, phase);
                prop_assert_eq!(expiry.from.as_str(), row.status.as_str());
                prop_assert_eq!(
                    expiry.to.as_str(),
                    match phase {
                        Phase::Reserve => "ReserveExpired",
                        Phase::Booking => "BookingExpired",
                    }
                );
                prop_assert_eq!(expiry.expired_at, as_of);
                prop_assert_eq!(Some(expiry.deadline), deadline);
                prop_assert_eq!(expiry.expected_version, row.version);
                prop_assert_eq!(
                    (expiry.booking_id, expiry.tenant_id, expiry.deal_id, expiry.property_object_id),
                    (row.id, row.tenant_id, row.deal_id, row.property_object_id)
                );
            }
            Err(rejection) => {
                prop_assert!(!expect_ok, "{row:?} refused: {rejection}");
                let want = if !STATUSES.contains(&row.status.as_str()) {
                    "unknown_status"
                } else if phase.is_none() {
                    "terminal_status"
                } else if row.expired_at.is_some() {
                    "expired_at_already_set"
                } else if deadline.is_none() {
                    "no_deadline"
                } else if deadline.is_some_and(|d| d >= Timestamp::from(as_of)) {
                    "not_yet_due"
                } else {
                    "version_overflow"
                };
                prop_assert_eq!(rejection.code(), want, "{:?}", row);
            }
        }
    }

    /// The decision depends on the row and AsOf only: the same inputs, the same answer.
    #[test]
    fn expire_is_deterministic(row in booking_row()) {
        prop_assert_eq!(
            format!("{:?}", expire(&row, as_of())),
            format!("{:?}", expire(&row.clone(), as_of()))
        );
    }

    #[test]
    fn parse_duration_never_panics_and_accepts_only_digits_and_a_unit(s in any::<String>()) {
        if let Ok(d) = parse_duration(&s) {
            let t = s.trim();
            let digits = t.chars().take_while(char::is_ascii_digit).count();
            prop_assert!(digits > 0, "{s:?} → {d:?}");
            prop_assert!(["ms", "s", "m", "h", "d"].contains(&&t[digits..]), "{s:?} → {d:?}");
        }
    }

    #[test]
    fn valid_durations_round_trip(n in 0u64..100_000_000, unit in 0usize..5) {
        let (suffix, millis) = [("ms", 1u64), ("s", 1_000), ("m", 60_000), ("h", 3_600_000), ("d", 86_400_000)][unit];
        prop_assert_eq!(
            parse_duration(&format!("{n}{suffix}")),
            Ok(Duration::from_millis(n * millis))
        );
    }

    #[test]
    fn as_of_never_panics_and_round_trips_rfc3339(
        s in any::<String>(),
        micros in -2_000_000_000_000_000i64..4_000_000_000_000_000,
        offset_minutes in -(23 * 60 + 59)..(23 * 60 + 59),
    ) {
        let _ = parse_as_of(&s);
        let at = DateTime::from_timestamp_micros(micros).unwrap();
        let written = at
            .with_timezone(&FixedOffset::east_opt(offset_minutes * 60).unwrap())
            .to_rfc3339();
        prop_assert_eq!(parse_as_of(&written), Ok(AsOf::At(at)), "{}", written);
    }

    /// Any argument list, made of real flags and hostile values, is parsed or refused;
    /// never a panic. What parses as run-once resolves to a configuration or a clear
    /// error, also never a panic.
    #[test]
    fn the_command_line_never_panics(
        words in proptest::collection::vec(
            prop_oneof![
                proptest::sample::select(&[
                    "run-once", "relay-outbox", "dry-run", "backlog", "--batch-size",
                    "--max-batches", "--deadline", "--max-clock-skew", "--as-of",
                    "--database-url", "--brokers", "--follow", "--fail-above", "--format",
                    "--json", "--all", "--log-format", "--", "-", "now", "5s", "0", "-1",
                ][..]).prop_map(str::to_owned),
                any::<String>(),
            ],
            0..8,
        )
    ) {
        let argv = std::iter::once("booking-expire".to_owned()).chain(words);
        if let Ok(cli) = Cli::try_parse_from(argv)
            && let Command::RunOnce(args) = cli.command
        {
            let _ = RunOnceConfig::from_args(&args);
        }
    }

    #[test]
    fn any_database_url_resolves_or_is_refused_without_panic(url in prop_oneof![
        any::<String>(),
        "postgres(ql)?://[a-z:@%/?=&.0-9]{0,40}",
        "(host|port|user|dbname|sslmode|sslrootcert)=[a-z0-9'%]{0,10}( [a-z]+=[a-z0-9']{0,6}){0,3}",
    ]) {
        let argv = ["booking-expire", "run-once", "--database-url", &url];
        if let Ok(cli) = Cli::try_parse_from(argv)
            && let Command::RunOnce(args) = cli.command
        {
            let _ = RunOnceConfig::from_args(&args);
        }
    }
}
