//! The free-text inputs: URLs, broker lists, CA and credential files (exit 78 naming
//! them, 64 when not UTF-8), the operator's login name, and OpenTelemetry's text (a
//! warning and tracing off, the outcome unchanged).

use super::*;

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
