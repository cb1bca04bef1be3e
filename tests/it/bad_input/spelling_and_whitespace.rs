//! Misspelt variables (named with the setting they most likely meant, then ignored)
//! and values padded with whitespace, from flags and variables (read, and stored,
//! without it).

use super::*;

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
