//! Every parsed flag and its environment variable, of every subcommand, with the
//! hostile values (exit 64 naming it, nothing written), and every argument clap knows
//! (never a panic).

use super::*;

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

/// Every argument clap knows, of every subcommand, including flags added later: a
/// hostile value never panics and never gets past its checks into work (the database
/// and the brokers are unreachable, so a value wrongly accepted shows as 69).
#[test]
fn no_argument_of_any_subcommand_panics_on_a_hostile_value() {
    let cli = booking_expire::testing::cli::Cli::command();
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
