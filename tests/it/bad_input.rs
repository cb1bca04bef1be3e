//! Bad input: every flag and environment variable of every subcommand with empty,
//! negative, out-of-range, huge, hostile (SQL), very long and non-UTF-8 values must
//! give a clear error naming the input (exit 64 or 78), never a panic, and write
//! nothing. Then malformed rows in the table: unknown status text, NULL deadlines, a
//! version at its limit, handled as the docs describe, never a crash.

use crate::common;
use crate::postgres;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::Command;

use clap::CommandFactory;
use common::*;
use serde_json::json;

/// The hostile values every typed input gets, with a label for the failure message.
fn hostile_values() -> Vec<(&'static str, OsString)> {
    vec![
        ("empty", OsString::from("")),
        ("negative", OsString::from("-1")),
        ("zero", OsString::from("0")),
        ("huge", OsString::from("99999999999999999999")),
        ("sql", OsString::from("1; DROP TABLE crm.bookings")),
        ("quote", OsString::from("'); DELETE FROM crm.outbox; --")),
        ("fullwidth digit", OsString::from("５s")),
        ("100 KiB", OsString::from("9".repeat(100 * 1024))),
        (
            "non-UTF-8",
            OsString::from_vec(vec![b'5', 0xff, 0xfe, b's']),
        ),
    ]
}

/// What a subcommand needs besides the input under test to get past parsing.
fn base_args(subcommand: &str) -> Vec<&'static str> {
    match subcommand {
        "dry-run" => vec!["dry-run", "--as-of", "now"],
        "relay-outbox" => vec!["relay-outbox"],
        "run-once" => vec!["run-once"],
        "backlog" => vec!["backlog"],
        "explain" => vec!["explain", "00000000-0000-0000-0000-000000000000"],
        "pause" => vec!["pause", "run-once", "--reason", "test"],
        "resume" => vec!["resume", "run-once", "--reason", "test"],
        "republish" => vec![
            "republish",
            "--booking",
            "00000000-0000-0000-0000-000000000000",
            "--reason",
            "test",
        ],
        "retry-failed" => vec!["retry-failed", "--all", "--reason", "test"],
        "completions" => vec!["completions", "bash"],
        // A dry run: a value that got through would change nothing.
        "migrate" => vec!["migrate", "--dry-run"],
        "audit" => vec!["audit", "--since", "2000-01-01T00:00:00Z"],
        other => panic!("{other}"),
    }
}

struct Input {
    subcommand: &'static str,
    flag: &'static str,
    env: Option<&'static str>,
}

const fn input(subcommand: &'static str, flag: &'static str, env: Option<&'static str>) -> Input {
    Input {
        subcommand,
        flag,
        env,
    }
}

/// Every input whose value is parsed on the command line (numbers, durations, enums,
/// moments): a bad value is a usage error, 64.
const PARSED: &[Input] = &[
    input("run-once", "--log-format", Some("LOG_FORMAT")),
    input(
        "run-once",
        "--connect-timeout",
        Some("BOOKING_EXPIRATION_CONNECT_TIMEOUT"),
    ),
    input(
        "run-once",
        "--statement-timeout",
        Some("BOOKING_EXPIRATION_STATEMENT_TIMEOUT"),
    ),
    input(
        "run-once",
        "--lock-timeout",
        Some("BOOKING_EXPIRATION_LOCK_TIMEOUT"),
    ),
    input(
        "run-once",
        "--batch-size",
        Some("BOOKING_EXPIRATION_BATCH_SIZE"),
    ),
    input(
        "run-once",
        "--max-batches",
        Some("BOOKING_EXPIRATION_MAX_BATCHES"),
    ),
    input(
        "run-once",
        "--deadline",
        Some("BOOKING_EXPIRATION_DEADLINE"),
    ),
    input(
        "run-once",
        "--max-clock-skew",
        Some("BOOKING_EXPIRATION_MAX_CLOCK_SKEW"),
    ),
    input(
        "relay-outbox",
        "--connect-timeout",
        Some("BOOKING_EXPIRATION_CONNECT_TIMEOUT"),
    ),
    input(
        "relay-outbox",
        "--kafka-security-protocol",
        Some("KAFKA_SECURITY_PROTOCOL"),
    ),
    input(
        "relay-outbox",
        "--kafka-sasl-mechanism",
        Some("KAFKA_SASL_MECHANISM"),
    ),
    input(
        "relay-outbox",
        "--batch-size",
        Some("OUTBOX_RELAY_BATCH_SIZE"),
    ),
    input("relay-outbox", "--deadline", Some("OUTBOX_RELAY_DEADLINE")),
    input("relay-outbox", "--follow", Some("OUTBOX_RELAY_FOLLOW")),
    input(
        "relay-outbox",
        "--message-timeout",
        Some("OUTBOX_RELAY_MESSAGE_TIMEOUT"),
    ),
    input("relay-outbox", "--retention", Some("OUTBOX_RETENTION")),
    input(
        "relay-outbox",
        "--purge-batch-size",
        Some("OUTBOX_PURGE_BATCH_SIZE"),
    ),
    input(
        "relay-outbox",
        "--expected-partitions",
        Some("OUTBOX_TOPIC_PARTITIONS"),
    ),
    input(
        "relay-outbox",
        "--max-message-bytes",
        Some("OUTBOX_MAX_MESSAGE_BYTES"),
    ),
    input("dry-run", "--as-of", None),
    input(
        "dry-run",
        "--batch-size",
        Some("BOOKING_EXPIRATION_BATCH_SIZE"),
    ),
    input(
        "dry-run",
        "--max-batches",
        Some("BOOKING_EXPIRATION_MAX_BATCHES"),
    ),
    input(
        "dry-run",
        "--lock-timeout",
        Some("BOOKING_EXPIRATION_LOCK_TIMEOUT"),
    ),
    input(
        "run-once",
        "--otlp-protocol",
        Some("OTEL_EXPORTER_OTLP_PROTOCOL"),
    ),
    input(
        "relay-outbox",
        "--otlp-traces-protocol",
        Some("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
    ),
    input(
        "run-once",
        "--otlp-timeout",
        Some("OTEL_EXPORTER_OTLP_TIMEOUT"),
    ),
    input(
        "relay-outbox",
        "--otel-sdk-disabled",
        Some("OTEL_SDK_DISABLED"),
    ),
    input("backlog", "--format", None),
    input("backlog", "--fail-above", None),
    input(
        "backlog",
        "--statement-timeout",
        Some("BOOKING_EXPIRATION_STATEMENT_TIMEOUT"),
    ),
    input(
        "migrate",
        "--lock-timeout",
        Some("BOOKING_EXPIRATION_MIGRATE_LOCK_TIMEOUT"),
    ),
    input(
        "migrate",
        "--statement-timeout",
        Some("BOOKING_EXPIRATION_MIGRATE_STATEMENT_TIMEOUT"),
    ),
    input(
        "migrate",
        "--index-timeout",
        Some("BOOKING_EXPIRATION_MIGRATE_INDEX_TIMEOUT"),
    ),
    input(
        "migrate",
        "--lock-wait",
        Some("BOOKING_EXPIRATION_MIGRATE_LOCK_WAIT"),
    ),
    input(
        "migrate",
        "--retry-for",
        Some("BOOKING_EXPIRATION_MIGRATE_RETRY_FOR"),
    ),
    input(
        "migrate",
        "--target",
        Some("BOOKING_EXPIRATION_MIGRATE_TARGET"),
    ),
    input("audit", "--until", None),
    input("audit", "--chunk-rows", None),
    input("audit", "--format", None),
];

/// Runs the binary with a clean environment plus `env`.
fn run(args: &[OsString], env: &[(&str, OsString)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::of(cmd.output().unwrap())
}

fn assert_clean_failure(run: &Run, codes: &[i32], names: &[&str], what: &str) {
    assert!(
        codes.contains(&run.code),
        "{what}: exit {} not in {codes:?}: {}",
        run.code,
        tail(&run.stderr)
    );
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(!run.stderr.contains(bad), "{what}: {}", tail(&run.stderr));
    }
    assert!(
        names.iter().any(|n| run.stderr.contains(n)),
        "{what}: none of {names:?} named in: {}",
        tail(&run.stderr)
    );
    assert!(
        run.stdout.is_empty(),
        "{what}: stdout {:?}",
        tail(&run.stdout)
    );
}

/// The end of a long stderr, enough to see the error.
fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(600);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A database with overdue bookings and pending outbox rows: any run that got past
/// its input checks would change it.
fn tempting_database() -> (TestDb, postgres::Client, String) {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 6, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600)
        } else {
            Seed::booked(-600)
        }
    });
    insert_outbox_rows(&mut c, OutboxState::Pending, &[60, 30]);
    let before = checksum(&mut c);
    (db, c, before)
}

#[test]
fn every_parsed_flag_and_variable_refuses_bad_values_with_64_naming_it() {
    let (db, mut c, before) = tempting_database();
    let mut cases = 0;
    for input in PARSED {
        for (label, value) in hostile_values() {
            // 0 is a fine threshold; every other zero lacks a unit or is out of range.
            if label == "zero" && input.flag == "--fail-above" {
                continue;
            }
            let base: Vec<OsString> = if input.flag == "--as-of" {
                vec![OsString::from("dry-run")]
            } else {
                base_args(input.subcommand)
                    .into_iter()
                    .map(OsString::from)
                    .collect()
            };
            let common_env = vec![
                ("DATABASE_URL", OsString::from(&db.url)),
                ("KAFKA_BROKERS", OsString::from("127.0.0.1:1")),
            ];
            // As a flag, `--flag VALUE` and `--flag=VALUE`.
            for joined in [false, true] {
                let mut args = base.clone();
                if joined {
                    let mut a = OsString::from(format!("{}=", input.flag));
                    a.push(&value);
                    args.push(a);
                } else {
                    args.push(OsString::from(input.flag));
                    args.push(value.clone());
                }
                let r = run(&args, &common_env);
                let what = format!(
                    "{} {} ({label}, joined {joined})",
                    input.subcommand, input.flag
                );
                assert_clean_failure(&r, &[64], &[input.flag], &what);
                cases += 1;
            }
            // From its environment variable.
            if let Some(env) = input.env {
                let mut vars = common_env.clone();
                vars.push((env, value.clone()));
                let r = run(&base, &vars);
                let what = format!("{} {env} ({label})", input.subcommand);
                assert_clean_failure(&r, &[64], &[env], &what);
                cases += 1;
            }
        }
    }
    println!("{cases} bad parsed inputs refused");
    assert_eq!(checksum(&mut c), before, "nothing was written");
}

/// Inputs checked when the configuration is resolved (URLs, addresses, files,
/// credentials): a bad value is a configuration error, 78, or a usage error when it
/// is not UTF-8.
#[test]
fn free_text_inputs_refuse_bad_values_with_78_naming_them() {
    let (db, mut c, before) = tempting_database();
    let url = OsString::from(&db.url);
    let brokers = OsString::from("127.0.0.1:1");
    let https_gateway = OsString::from("https://127.0.0.1:1");
    let mut cases = 0;
    for (label, value) in hostile_values() {
        let non_utf8 = label == "non-UTF-8";
        type Case<'a> = (
            &'static str,
            Vec<&'static str>,
            Vec<(&'static str, OsString)>,
            &'a [&'a str],
        );
        let cases_here: Vec<Case> = vec![
            (
                "DATABASE_URL",
                vec!["run-once"],
                vec![("DATABASE_URL", value.clone())],
                &["DATABASE_URL"],
            ),
            (
                "DATABASE_URL (backlog)",
                vec!["backlog"],
                vec![("DATABASE_URL", value.clone())],
                &["DATABASE_URL"],
            ),
            (
                "PGSSLROOTCERT",
                vec!["run-once"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("PGSSLROOTCERT", value.clone()),
                ],
                &["PGSSLROOTCERT", "database CA file"],
            ),
            (
                "KAFKA_BROKERS",
                vec!["relay-outbox"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", value.clone()),
                ],
                &["KAFKA_BROKERS"],
            ),
            (
                "KAFKA_CA_FILE",
                vec!["relay-outbox", "--kafka-security-protocol", "ssl"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", brokers.clone()),
                    ("KAFKA_CA_FILE", value.clone()),
                ],
                &["KAFKA_CA_FILE", "Kafka CA file"],
            ),
            (
                "KAFKA_USERNAME without a password",
                vec!["relay-outbox", "--kafka-security-protocol", "sasl_ssl"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", brokers.clone()),
                    ("KAFKA_USERNAME", value.clone()),
                ],
                &["KAFKA_USERNAME", "KAFKA_PASSWORD"],
            ),
            (
                "KAFKA_PASSWORD without a user",
                vec![
                    "relay-outbox",
                    "--kafka-security-protocol",
                    "sasl_plaintext",
                ],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", brokers.clone()),
                    ("KAFKA_PASSWORD", value.clone()),
                ],
                &["KAFKA_USERNAME", "KAFKA_PASSWORD"],
            ),
            (
                "PUSHGATEWAY_CA_FILE",
                vec!["run-once"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("PUSHGATEWAY_URL", https_gateway.clone()),
                    ("PUSHGATEWAY_CA_FILE", value.clone()),
                ],
                &["PUSHGATEWAY_CA_FILE"],
            ),
            (
                "PUSHGATEWAY_PASSWORD_FILE",
                vec!["relay-outbox"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", brokers.clone()),
                    ("PUSHGATEWAY_URL", https_gateway.clone()),
                    ("PUSHGATEWAY_USERNAME", OsString::from("pusher")),
                    ("PUSHGATEWAY_PASSWORD_FILE", value.clone()),
                ],
                &["PUSHGATEWAY_PASSWORD_FILE"],
            ),
            (
                "PUSHGATEWAY_BEARER_TOKEN_FILE",
                vec!["run-once"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("PUSHGATEWAY_URL", https_gateway.clone()),
                    ("PUSHGATEWAY_BEARER_TOKEN_FILE", value.clone()),
                ],
                &["PUSHGATEWAY_BEARER_TOKEN_FILE"],
            ),
            (
                // Empty: a password without a user; else credentials over http.
                "PUSHGATEWAY_USERNAME over http",
                vec!["run-once"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("PUSHGATEWAY_URL", OsString::from("http://127.0.0.1:1")),
                    ("PUSHGATEWAY_PASSWORD", OsString::from("pw")),
                    ("PUSHGATEWAY_USERNAME", value.clone()),
                ],
                &["PUSHGATEWAY_USERNAME", "PUSHGATEWAY_URL"],
            ),
            (
                // Empty: a user without a password; else basic and bearer both.
                "PUSHGATEWAY_PASSWORD beside a bearer token",
                vec!["run-once"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("PUSHGATEWAY_URL", https_gateway.clone()),
                    ("PUSHGATEWAY_USERNAME", OsString::from("pusher")),
                    ("PUSHGATEWAY_BEARER_TOKEN", OsString::from("token")),
                    ("PUSHGATEWAY_PASSWORD", value.clone()),
                ],
                &["PUSHGATEWAY_PASSWORD", "PUSHGATEWAY_USERNAME"],
            ),
            (
                // Empty: the token file alone, which cannot be read; else both.
                "PUSHGATEWAY_BEARER_TOKEN beside a token file",
                vec!["relay-outbox"],
                vec![
                    ("DATABASE_URL", url.clone()),
                    ("KAFKA_BROKERS", brokers.clone()),
                    ("PUSHGATEWAY_URL", https_gateway.clone()),
                    (
                        "PUSHGATEWAY_BEARER_TOKEN_FILE",
                        OsString::from("/nonexistent/token"),
                    ),
                    ("PUSHGATEWAY_BEARER_TOKEN", value.clone()),
                ],
                &["PUSHGATEWAY_BEARER_TOKEN"],
            ),
        ];
        for (what, args, env, names) in cases_here {
            let r = run(&args.iter().map(OsString::from).collect::<Vec<_>>(), &env);
            let path = what.contains("_FILE") || what == "PGSSLROOTCERT";
            // Any bytes make a path (then: no such file, 78), but not an empty one.
            let usage = if path { label == "empty" } else { non_utf8 };
            let codes: &[i32] = if usage { &[64] } else { &[78] };
            let names: Vec<&str> = if usage {
                vec![env.last().unwrap().0]
            } else {
                names.to_vec()
            };
            assert_clean_failure(&r, codes, &names, &format!("{what} ({label})"));
            cases += 1;
        }
        // The same through the flags.
        for (flag, args) in [
            ("--database-url", vec!["run-once"]),
            ("--brokers", vec!["relay-outbox"]),
        ] {
            let mut argv: Vec<OsString> = args.iter().map(OsString::from).collect();
            argv.push(OsString::from(flag));
            argv.push(value.clone());
            let r = run(&argv, &[("DATABASE_URL", url.clone())]);
            let codes: &[i32] = if non_utf8 { &[64] } else { &[64, 78] };
            assert_clean_failure(&r, codes, &[flag], &format!("{flag} ({label})"));
            cases += 1;
        }
    }
    println!("{cases} bad free-text inputs refused");
    assert_eq!(checksum(&mut c), before, "nothing was written");
}

/// The operator's login name (`USER`, the actor when `--actor` is not given) is any
/// text, but text: one that is not UTF-8 is a usage error naming it, before anything
/// is written.
#[test]
fn a_login_name_that_is_not_utf8_is_refused_with_64_naming_user() {
    let (db, mut c, before) = tempting_database();
    let bad = OsString::from_vec(vec![b'o', 0xff, b'p']);
    for args in [
        &["pause", "run-once", "--reason", "test"][..],
        &["resume", "relay-outbox", "--reason", "test"],
        &["retry-failed", "--all", "--reason", "test"],
    ] {
        let r = run(
            &args.iter().map(OsString::from).collect::<Vec<_>>(),
            &[
                ("DATABASE_URL", OsString::from(&db.url)),
                ("USER", bad.clone()),
            ],
        );
        let what = format!("{} USER (non-UTF-8)", args[0]);
        assert_clean_failure(
            &r,
            &[64],
            &["the environment variable USER is not valid UTF-8"],
            &what,
        );
    }
    assert_eq!(checksum(&mut c), before, "nothing was written");
}

/// OpenTelemetry's free-text inputs never change a run's outcome: an endpoint that is
/// no http(s) URL turns tracing off with a warning naming the input, the value and
/// what is allowed; any other text is handed to the exporter as the SDK reads it. The
/// run then fails as it would without them (the database is unreachable: 69).
#[test]
fn a_bad_tracing_input_turns_tracing_off_saying_so_and_changes_no_outcome() {
    let unreachable = OsString::from("postgres://u@127.0.0.1:1/none");
    let mut cases = 0;
    for (label, value) in hostile_values() {
        if label == "non-UTF-8" || label == "empty" {
            continue;
        }
        for (var, flag) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "--otlp-endpoint"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "--otlp-traces-endpoint",
            ),
        ] {
            let r = run(
                &[OsString::from("run-once")],
                &[("DATABASE_URL", unreachable.clone()), (var, value.clone())],
            );
            let what = format!("run-once {var} ({label})");
            assert_eq!(r.code, 69, "{what}: {}", tail(&r.stderr));
            assert!(
                r.stderr.contains(&format!("invalid {flag} / {var}"))
                    && r.stderr.contains("expected http[s]://host[:port][/path]")
                    && r.stderr.contains("tracing is off"),
                "{what}: {}",
                tail(&r.stderr)
            );
            assert!(!r.stderr.contains("panicked"), "{what}");
            cases += 1;
        }
        for var in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_SERVICE_NAME",
            "OTEL_RESOURCE_ATTRIBUTES",
        ] {
            let r = run(
                &[OsString::from("relay-outbox")],
                &[
                    ("DATABASE_URL", unreachable.clone()),
                    ("KAFKA_BROKERS", OsString::from("127.0.0.1:1")),
                    (
                        "OTEL_EXPORTER_OTLP_ENDPOINT",
                        OsString::from("http://127.0.0.1:1"),
                    ),
                    (var, value.clone()),
                ],
            );
            let what = format!("relay-outbox {var} ({label})");
            assert_eq!(r.code, 69, "{what}: {}", tail(&r.stderr));
            assert!(!r.stderr.contains("panicked"), "{what}");
            cases += 1;
        }
    }
    println!("{cases} bad tracing inputs");
}

/// Every argument clap knows, of every subcommand, including flags added later: a
/// hostile value never panics and never gets past its checks into work (the database
/// and the brokers are unreachable, so a value wrongly accepted shows as 69).
#[test]
fn no_argument_of_any_subcommand_panics_on_a_hostile_value() {
    let cli = booking_expire::cli::Cli::command();
    let mut cases = 0;
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        let base: Vec<OsString> = base_args(name).into_iter().map(OsString::from).collect();
        for arg in sub.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if !arg.get_action().takes_values() || ["help", "version"].contains(&long) {
                continue;
            }
            for (label, value) in hostile_values() {
                let mut args = base.clone();
                args.push(OsString::from(format!("--{long}")));
                args.push(value.clone());
                let r = run(
                    &args,
                    &[
                        (
                            "DATABASE_URL",
                            OsString::from("postgres://u@127.0.0.1:1/none"),
                        ),
                        ("KAFKA_BROKERS", OsString::from("127.0.0.1:1")),
                    ],
                );
                let what = format!("{name} --{long} ({label})");
                assert!(
                    [64, 69, 78].contains(&r.code),
                    "{what}: exit {}: {}",
                    r.code,
                    tail(&r.stderr)
                );
                assert!(
                    !r.stderr.contains("panicked"),
                    "{what}: {}",
                    tail(&r.stderr)
                );
                cases += 1;
            }
        }
    }
    println!("{cases} hostile values across every argument");
    assert!(cases > 100);
}

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

#[test]
fn a_misspelt_variable_is_named_with_the_setting_it_most_likely_meant() {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 3, |_| Seed::booked(-600));
    let env = |extra: &[(&'static str, &str)]| {
        let mut vars = vec![("DATABASE_URL", OsString::from(&db.url))];
        vars.extend(extra.iter().map(|(k, v)| (*k, OsString::from(v))));
        vars
    };
    let run_once = |args: &[&str], vars: &[(&str, OsString)]| {
        let mut all = vec![OsString::from("run-once")];
        all.extend(args.iter().map(OsString::from));
        run(&all, vars)
    };
    let r = run_once(
        &["--max-batches", "1"],
        &env(&[
            ("BOOKING_EXPIRATION_BATCHSIZE", "1"),
            ("BOOKING_EXPIRATION_TOPIC", "pin.crm.booking-expired.v2"),
            ("PUSHGATEWAY_URI", "http://127.0.0.1:1"),
            ("OUTBOX_RELAY_BATCH_SIZE", "10"),
            ("KAFKA_SERVICE_HOST", "10.0.0.7"),
            ("KAFKA_PORT_9092_TCP", "tcp://10.0.0.7:9092"),
        ]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warned: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("is not a setting of booking-expire"))
        .collect();
    assert_eq!(warned.len(), 3, "{}", r.stderr);
    for (typo, meant) in [
        (
            "BOOKING_EXPIRATION_BATCHSIZE",
            "BOOKING_EXPIRATION_BATCH_SIZE",
        ),
        ("BOOKING_EXPIRATION_TOPIC", "BOOKING_EXPIRATION_TOPICS"),
        ("PUSHGATEWAY_URI", "PUSHGATEWAY_URL"),
    ] {
        let line = format!(
            "environment variable {typo} is not a setting of booking-expire and is ignored; \
             did you mean {meant}?"
        );
        assert!(r.stderr.contains(&line), "{line}\n{}", r.stderr);
    }
    // Ignored indeed: the batch stayed at its default (200), all three expired.
    assert_eq!(r.result().booking, 3);

    // Under JSON logging the warning is a JSON line with both names as fields.
    seed_many(&mut c, 1, |_| Seed::booked(-600));
    let r = run_once(
        &["--log-format", "json"],
        &env(&[("BOOKING_EXPIRATION_BATCHSIZE", "1")]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warning = r
        .stderr
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["Variable"] == "BOOKING_EXPIRATION_BATCHSIZE")
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert_eq!(warning["DidYouMean"], "BOOKING_EXPIRATION_BATCH_SIZE");
    assert_eq!(warning["level"], "WARN", "{warning}");
}

#[test]
fn every_value_is_read_without_its_surrounding_whitespace() {
    let db = TestDb::new();
    let mut c = db.client();
    let base = |vars: &[(&'static str, &str)]| {
        let mut all = vec![("DATABASE_URL", OsString::from(format!(" {}\n", db.url)))];
        all.extend(vars.iter().map(|(k, v)| (*k, OsString::from(v))));
        all
    };
    // A count, a duration and a choice, from the environment and from flags, each with
    // whitespace around it: every one is taken (the batch of 2 shows the count was).
    for (args, vars) in [
        (
            vec!["run-once", "--max-batches", "1"],
            base(&[
                ("BOOKING_EXPIRATION_BATCH_SIZE", "2 "),
                ("BOOKING_EXPIRATION_DEADLINE", "25s "),
                ("LOG_FORMAT", " json\n"),
                ("BOOKING_EXPIRATION_TOPICS", " pin.crm.booking-expired.v1\n"),
                ("BOOKING_EXPIRATION_MAX_CLOCK_SKEW", "\t2s"),
                ("BOOKING_EXPIRATION_CONNECT_TIMEOUT", " 5s \r\n"),
                ("OTEL_SDK_DISABLED", " true "),
            ]),
        ),
        (
            vec![
                "run-once",
                "--max-batches= 1",
                "--batch-size",
                " 2\t",
                "--deadline",
                "25s ",
                "--log-format",
                "json ",
            ],
            base(&[]),
        ),
    ] {
        seed_many(&mut c, 3, |_| Seed::booked(-600));
        let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        let r = run(&args, &vars);
        assert_eq!(r.code, 0, "{args:?} {vars:?}: {}", r.stderr);
        assert_eq!(r.result().booking, 2, "{args:?}");
        assert!(
            r.stderr
                .lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
            "{}",
            r.stderr
        );
        c.batch_execute("DELETE FROM crm.outbox; DELETE FROM crm.booking_audit; DELETE FROM crm.deal_timeline; DELETE FROM crm.bookings")
            .unwrap();
    }
}

/// The operator commands' text from the environment (the login from `USER`, the actor
/// from `BOOKING_EXPIRE_ACTOR`) and from flags is stored without the whitespace around
/// it, as a Secret or a shell's `$(cat file)` leaves it.
#[test]
fn padded_actors_and_reasons_are_stored_without_their_whitespace() {
    let db = TestDb::new();
    let me = db.user();
    let url = OsString::from(&db.url);
    let pause = run(
        &["pause", "run-once", "--reason", " INC-7 \n"].map(OsString::from),
        &[("DATABASE_URL", url.clone()), ("USER", " carol\n".into())],
    );
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    let pause = run(
        &["pause", "relay-outbox", "--reason= INC-8\t"].map(OsString::from),
        &[
            ("DATABASE_URL", url.clone()),
            ("USER", "carol".into()),
            ("BOOKING_EXPIRE_ACTOR", "\tdave@example.com ".into()),
        ],
    );
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    let backlog = run(
        &["backlog", "--json"].map(OsString::from),
        &[("DATABASE_URL", url)],
    );
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let b: serde_json::Value = serde_json::from_str(backlog.stdout.trim()).unwrap();
    let paused: Vec<(&str, &str)> = b["Paused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["By"].as_str().unwrap(), p["Reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        paused,
        [
            (
                format!("dave@example.com (database user {me})").as_str(),
                "INC-8"
            ),
            (format!("carol (database user {me})").as_str(), "INC-7"),
        ],
        "{b}"
    );
}

#[test]
fn under_json_logging_every_stderr_line_is_one_json_object() {
    let db = TestDb::new();
    let url = OsString::from(&db.url);
    // (what, arguments, environment, exit code)
    type Case = (
        &'static str,
        Vec<&'static str>,
        Vec<(&'static str, OsString)>,
        i32,
    );
    let cases: Vec<Case> = vec![
        (
            "bad value from the environment",
            vec!["run-once"],
            vec![
                ("LOG_FORMAT", "json".into()),
                ("BOOKING_EXPIRATION_STATEMENT_TIMEOUT", "abc".into()),
            ],
            64,
        ),
        (
            "unknown flag, JSON asked by flag",
            vec!["run-once", "--log-format", "json", "--bogus"],
            vec![],
            64,
        ),
        (
            "negative count",
            vec!["run-once", "--log-format=json", "--batch-size", "-1"],
            vec![],
            64,
        ),
        (
            "missing subcommand",
            vec!["--log-format", "json"],
            vec![],
            64,
        ),
        (
            "non-UTF-8 value",
            vec!["run-once"],
            vec![
                ("LOG_FORMAT", "json".into()),
                (
                    "BOOKING_EXPIRATION_DEADLINE",
                    OsString::from_vec(vec![b'5', 0xff, b's']),
                ),
            ],
            64,
        ),
        (
            "configuration error, with a misspelt variable",
            vec!["run-once", "--log-format", "json"],
            vec![
                (
                    "DATABASE_URL",
                    "postgres://u@h:5432/db?sslmode=bogus".into(),
                ),
                ("BOOKING_EXPIRATION_BATCHSIZE", "5".into()),
            ],
            78,
        ),
        (
            "panic",
            vec!["backlog", "--log-format", "json"],
            vec![
                ("DATABASE_URL", url.clone()),
                ("BOOKING_EXPIRE_TEST_PANIC", "1".into()),
            ],
            70,
        ),
    ];
    for (what, args, env, code) in cases {
        let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        let r = run(&args, &env);
        assert_eq!(r.code, code, "{what}: {}", r.stderr);
        assert!(!r.stderr.is_empty(), "{what}");
        for line in r.stderr.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"));
            assert!(v.is_object(), "{what}: {line}");
            assert!(
                v["level"].is_string() && v["ts"].is_string(),
                "{what}: {line}"
            );
        }
    }
}
