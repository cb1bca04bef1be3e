//! Under JSON logging every stderr line is one JSON object: usage errors, a
//! configuration error, a panic, and the failures of the trace and metrics exports.

use super::*;

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
