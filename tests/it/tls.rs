//! TLS towards PostgreSQL (libpq's `sslmode`, a CA of the test's own) and towards Kafka
//! (SSL and SASL_SSL with SCRAM-SHA-512): the right CA and credentials work, a wrong
//! CA, a wrong host name or a wrong password fail with exit 78 and say why, and the
//! password never shows.

use crate::common;
use crate::postgres;

use std::time::Duration;

use common::kafka::{consume, create_topic, shared_brokers, unique_topic};
use common::tls::{Certs, SlowLink, TlsBroker, TlsPostgres, command, run};
use common::*;
use postgres::Client;
use serde_json::json;

/// Overdue bookings on the TLS server: two reserves and one booking.
fn seed_overdue(c: &mut Client) -> Vec<uuid::Uuid> {
    seed(
        c,
        &[Seed::reserved(-120), Seed::reserved(-60), Seed::booked(-30)],
    )
}

fn active(c: &mut Client) -> i64 {
    count(
        c,
        "SELECT count(*) FROM crm.bookings WHERE status IN ('Reserved', 'AwaitingPayment', 'Booked')",
    )
}

#[test]
fn postgres_verify_full_with_the_test_ca_connects_and_only_over_tls() {
    let certs = Certs::generate();
    let pg = TlsPostgres::start(&certs);
    pg.migrate();
    let mut admin = pg.admin();
    seed_overdue(&mut admin);
    let ca = certs.ca.to_str().unwrap();

    // sslrootcert in the URL.
    let url = pg.url_with(&format!("sslmode=verify-full&sslrootcert={ca}"));
    let cycle = run(&[("DATABASE_URL", &url)], &["run-once"]);
    assert_eq!(cycle.code, 0, "{}", cycle.stderr);
    assert_eq!(cycle.result().counts(), (2, 1, 0, 0));
    assert_eq!(active(&mut admin), 0);

    // --database-ca-file, and PGSSLROOTCERT.
    let verify_full = pg.url_with("sslmode=verify-full");
    let backlog = run(
        &[("DATABASE_URL", &verify_full)],
        &["backlog", "--json", "--database-ca-file", ca],
    );
    assert_eq!(backlog.code, 0, "{}", backlog.stderr);
    let report: serde_json::Value = serde_json::from_str(&backlog.stdout).unwrap();
    assert_eq!(report["OverdueTotal"], json!(0));
    assert_eq!(report["Outbox"]["Pending"], json!(3));
    let dry_run = run(
        &[("DATABASE_URL", &verify_full), ("PGSSLROOTCERT", ca)],
        &["dry-run", "--as-of", "now", "--json"],
    );
    assert_eq!(dry_run.code, 0, "{}", dry_run.stderr);
    let summary = json_lines(&dry_run.stdout).pop().unwrap();
    assert_eq!(summary["Summary"]["Reserve"]["WouldExpire"], json!(0));

    // The server's side: a session of the binary is encrypted, as pg_stat_ssl sees it
    // (a following relay stays connected, waiting for outbox notifications)...
    admin.batch_execute("DELETE FROM crm.outbox").unwrap();
    let relay = Background::start(command(
        &[("DATABASE_URL", &url), ("KAFKA_BROKERS", &shared_brokers())],
        &["relay-outbox", "--follow", "30s"],
    ));
    let mut session = None;
    wait_until(Duration::from_secs(20), "the relay's session", || {
        session = admin
            .query_opt(
                "SELECT s.ssl, s.version FROM pg_stat_ssl s
                   JOIN pg_stat_activity a USING (pid)
                  WHERE a.application_name = 'booking-expire'",
                &[],
            )
            .unwrap()
            .map(|r| (r.get::<_, bool>(0), r.get::<_, String>(1)));
        session.is_some()
    });
    send_signal(&relay.child, "TERM");
    let relay = relay.wait();
    assert_eq!(relay.code, 143, "{}", relay.stderr);
    let (ssl, version) = session.unwrap();
    assert!(ssl, "the binary's session is not encrypted");
    assert!(version.starts_with("TLSv1."), "{version}");

    // ... and the server refuses TCP without TLS, so every success above was over TLS.
    let plain = run(
        &[("DATABASE_URL", &pg.url_with("sslmode=disable"))],
        &["backlog"],
    );
    assert_eq!(plain.code, 78, "{}", plain.stderr);
    assert!(
        plain.stderr.contains("no pg_hba.conf entry") && plain.stderr.contains("no encryption"),
        "{}",
        plain.stderr
    );
}

#[test]
fn postgres_with_a_wrong_ca_or_host_name_is_refused_clearly_and_writes_nothing() {
    let certs = Certs::generate();
    let pg = TlsPostgres::start(&certs);
    pg.migrate();
    let mut admin = pg.admin();
    seed_overdue(&mut admin);
    let (ca, other) = (certs.ca.to_str().unwrap(), certs.other_ca.to_str().unwrap());
    let handshake_failed = |run: &Run, expectation: &str, verdict: &str| {
        assert_eq!(run.code, 78, "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        let want = format!(
            "cannot connect to PostgreSQL at {}: TLS handshake failed ({expectation}): ",
            target(run)
        );
        assert!(
            run.stderr.contains(&want),
            "want {want:?} in:\n{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("certificate verify failed") && run.stderr.contains(verdict),
            "{}",
            run.stderr
        );
    };

    // A CA that did not sign the server's certificate.
    let wrong_ca = run(
        &[(
            "DATABASE_URL",
            &pg.url_with(&format!("sslmode=verify-full&sslrootcert={other}")),
        )],
        &["run-once"],
    );
    handshake_failed(
        &wrong_ca,
        &format!(
            "sslmode=verify-full: the server certificate must be signed by the CA in {other} \
             and name the host 127.0.0.1"
        ),
        "(unable to get local issuer certificate)",
    );
    // --database-ca-file wins over sslrootcert.
    let flag_wins = run(
        &[(
            "DATABASE_URL",
            &pg.url_with(&format!("sslmode=verify-full&sslrootcert={ca}")),
        )],
        &["run-once", "--database-ca-file", other],
    );
    assert_eq!(flag_wins.code, 78, "{}", flag_wins.stderr);
    // No CA at all: the system's CAs do not know the test CA.
    let system_cas = run(
        &[("DATABASE_URL", &pg.url_with("sslmode=verify-full"))],
        &["run-once"],
    );
    handshake_failed(
        &system_cas,
        "sslmode=verify-full: the server certificate must be signed by the system's trusted CAs \
         and name the host 127.0.0.1",
        "(unable to get local issuer certificate)",
    );
    // require with a CA verifies the chain, as libpq does.
    let require_wrong_ca = run(
        &[(
            "DATABASE_URL",
            &pg.url_with(&format!("sslmode=require&sslrootcert={other}")),
        )],
        &["run-once"],
    );
    handshake_failed(
        &require_wrong_ca,
        &format!(
            "sslmode=require: with a CA given, the server certificate must be signed by the CA \
             in {other}"
        ),
        "(unable to get local issuer certificate)",
    );

    // The right CA, but the server is reached under a name its certificate does not
    // carry (hostaddr connects; host is what the certificate must name).
    let other_name = |mode: &str| {
        format!(
            "host=db.example.internal hostaddr=127.0.0.1 port={} user=postgres dbname=postgres \
             sslmode={mode} sslrootcert={ca}",
            pg.port
        )
    };
    let wrong_host = run(
        &[("DATABASE_URL", &other_name("verify-full"))],
        &["run-once"],
    );
    handshake_failed(
        &wrong_host,
        &format!(
            "sslmode=verify-full: the server certificate must be signed by the CA in {ca} \
             and name the host db.example.internal"
        ),
        "(hostname mismatch)",
    );
    assert_eq!(active(&mut admin), 3, "nothing expired");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM crm.outbox"), 0);

    // verify-ca checks the chain only; require without a CA encrypts without verifying.
    let verify_ca = run(
        &[("DATABASE_URL", &other_name("verify-ca"))],
        &["backlog", "--json"],
    );
    assert_eq!(verify_ca.code, 0, "{}", verify_ca.stderr);
    let require = run(
        &[("DATABASE_URL", &pg.url_with("sslmode=require"))],
        &["run-once"],
    );
    assert_eq!(require.code, 0, "{}", require.stderr);
    assert_eq!(require.result().counts(), (2, 1, 0, 0));
}

#[test]
fn postgres_verify_full_against_a_server_without_tls_is_a_configuration_error() {
    // The shared test server runs without TLS.
    let certs = Certs::generate();
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-60)]);
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        db.url,
        certs.ca.display()
    );
    let run = run(&[("DATABASE_URL", &url)], &["run-once"]);
    assert_eq!(run.code, 78, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "cannot connect to PostgreSQL at {}: error performing TLS handshake: server does not support TLS",
            target(&run)
        )),
        "{}",
        run.stderr
    );
    assert_eq!(count(&mut c, "SELECT count(*) FROM crm.outbox"), 0);
}

/// `n` expired bookings on the shared test server whose events go to `topic`.
fn outbox_for(topic: &str, n: usize) -> TestDb {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, n, |i| Seed::reserved(-100 - i as i64));
    assert_eq!(db.run_once(&[]).reserve, n as i64);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    db
}

fn pending(db: &TestDb) -> i64 {
    count(
        &mut db.client(),
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    )
}

/// A relay that took the lock and then stopped reports its (empty) result and why.
fn assert_stopped_early(run: &Run, reason: &str) {
    let result: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(result["Published"], serde_json::json!(0), "{}", run.stdout);
    assert!(
        result["StoppedEarly"].as_str().unwrap().contains(reason),
        "{}",
        run.stdout
    );
}

/// The relay against the test's own broker. Its message timeout is also how long its
/// topic check may take to reach the broker's verdict on the handshake and the
/// credentials: 60 s is room a loaded host cannot spend (a TLS handshake and a SCRAM
/// exchange took over 5 s at load 33, and the check ran out before the refusal was
/// read: exit 69 instead of 78). A refusal ends the wait at once, and a good run
/// ends with its last report, so no run waits for it.
fn relay(db: &TestDb, envs: &[(&str, &str)], args: &[&str]) -> Run {
    let mut all = vec![("DATABASE_URL", db.url.as_str())];
    all.extend_from_slice(envs);
    let mut argv = vec!["relay-outbox", "--message-timeout", "60s"];
    argv.extend_from_slice(args);
    run(&all, &argv)
}

#[test]
fn relay_over_ssl_publishes_with_the_right_ca_and_names_a_failed_handshake() {
    let certs = Certs::generate();
    let broker = TlsBroker::start(&certs);
    let topic = unique_topic();
    create_topic(&broker.plaintext, &topic, 6, &[]);
    let db = outbox_for(&topic, 4);
    let (ca, other) = (certs.ca.to_str().unwrap(), certs.other_ca.to_str().unwrap());
    let ssl = [
        ("KAFKA_BROKERS", broker.ssl.as_str()),
        ("KAFKA_SECURITY_PROTOCOL", "ssl"),
    ];

    for (ca_args, trusted) in [
        (vec!["--kafka-ca-file", other], format!("the CA in {other}")),
        (vec![], "the system's trusted CAs".to_owned()),
    ] {
        let refused = relay(&db, &ssl, &ca_args);
        assert_eq!(refused.code, 78, "{}", refused.stderr);
        assert_stopped_early(&refused, "TLS handshake with Kafka");
        let want = format!(
            "booking-expire: error: TLS handshake with Kafka at {} failed (the brokers' \
             certificates must be signed by {trusted} and name the broker's host; \
             --kafka-ca-file / KAFKA_CA_FILE): ",
            broker.ssl
        );
        assert!(
            refused.stderr.contains(&want),
            "want {want:?} in:\n{}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("SSL handshake failed")
                && refused.stderr.contains("certificate verify failed"),
            "{}",
            refused.stderr
        );
        assert_eq!(pending(&db), 4, "nothing marked");
    }

    let mut envs = ssl.to_vec();
    envs.push(("KAFKA_CA_FILE", ca));
    let ok = relay(&db, &envs, &[]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let result: serde_json::Value = serde_json::from_str(ok.stdout.trim()).unwrap();
    assert_eq!(result["Published"], json!(4));
    assert_eq!(pending(&db), 0);
    let got = consume(&broker.plaintext, &topic, 6, 4, Duration::from_secs(30));
    assert_eq!(got.len(), 4);
}

#[test]
fn relay_over_sasl_ssl_needs_the_right_password_and_never_shows_it() {
    let certs = Certs::generate();
    let broker = TlsBroker::start(&certs);
    let topic = unique_topic();
    create_topic(&broker.plaintext, &topic, 6, &[]);
    let db = outbox_for(&topic, 3);
    let wrong_password = format!("{}-wrong", broker.password);
    let sasl = |password: &str| -> Vec<(&'static str, String)> {
        vec![
            ("KAFKA_BROKERS", broker.sasl_ssl.clone()),
            ("KAFKA_SECURITY_PROTOCOL", "sasl_ssl".to_owned()),
            ("KAFKA_CA_FILE", certs.ca.display().to_string()),
            ("KAFKA_USERNAME", broker.user.clone()),
            ("KAFKA_PASSWORD", password.to_owned()),
            // Everything this program and its libraries log.
            ("RUST_LOG", "trace".to_owned()),
        ]
    };
    let run_with = |envs: Vec<(&'static str, String)>| {
        let pairs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        relay(&db, &pairs, &[])
    };
    let no_secret = |run: &Run| {
        for secret in [&broker.password, &wrong_password] {
            assert!(
                !run.stdout.contains(secret.as_str()) && !run.stderr.contains(secret.as_str()),
                "a password is in the output:\n{}\n{}",
                run.stdout,
                run.stderr
            );
        }
    };

    let refused = run_with(sasl(&wrong_password));
    assert_eq!(refused.code, 78, "{}", refused.stderr);
    assert_stopped_early(&refused, "Kafka authentication failed");
    let want = format!(
        "booking-expire: error: Kafka authentication failed at {}: the brokers refused SASL user \
         \"{}\" (SCRAM-SHA-512; check KAFKA_USERNAME and KAFKA_PASSWORD): ",
        broker.sasl_ssl, broker.user
    );
    assert!(
        refused.stderr.contains(&want),
        "want {want:?} in:\n{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("Authentication failed"),
        "{}",
        refused.stderr
    );
    no_secret(&refused);
    assert_eq!(pending(&db), 3, "nothing marked");

    // The same refusal from a broker that answers slowly, as a loaded host's did:
    // each of its answers (the TLS handshake's, ApiVersion, SaslHandshake, the two
    // SCRAM steps) comes 1.5 s late, so the verdict takes over 7 s. A budget of 5 s
    // (the check's cap before) runs out first: the brokers are unavailable (69). The
    // relay's budget here is its message timeout (60 s): it reads the refusal and
    // exits 78, though the connection that carried it is then cut.
    let slow = SlowLink::start(&broker.sasl_ssl, Duration::from_millis(1500));
    let through_slow = |timeout: &str| {
        let mut envs = sasl(&wrong_password);
        envs[0].1 = slow.addr.clone();
        let pairs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut all = vec![("DATABASE_URL", db.url.as_str())];
        all.extend_from_slice(&pairs);
        run(&all, &["relay-outbox", "--message-timeout", timeout])
    };
    let cut_short = through_slow("5s");
    assert_eq!(cut_short.code, 69, "{}", cut_short.stderr);
    assert!(
        cut_short
            .stderr
            .contains(&format!("cannot reach Kafka at {} within 5s", slow.addr)),
        "{}",
        cut_short.stderr
    );
    let slowly_refused = through_slow("60s");
    assert_eq!(slowly_refused.code, 78, "{}", slowly_refused.stderr);
    assert!(
        slowly_refused.stderr.contains(&format!(
            "booking-expire: error: Kafka authentication failed at {}: the brokers refused SASL \
             user \"{}\"",
            slow.addr, broker.user
        )),
        "{}",
        slowly_refused.stderr
    );
    no_secret(&slowly_refused);
    assert_eq!(pending(&db), 3, "nothing marked");
    drop(slow);

    let ok = run_with(sasl(&broker.password));
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    no_secret(&ok);
    let result: serde_json::Value = serde_json::from_str(ok.stdout.trim()).unwrap();
    assert_eq!(result["Published"], json!(3));
    assert_eq!(pending(&db), 0);
    let got = consume(&broker.plaintext, &topic, 6, 3, Duration::from_secs(30));
    assert_eq!(got.len(), 3);
}

/// The `host:port` a connection error names, checked to be one: the message says where
/// it tried, never who (no user, no password).
fn target(run: &Run) -> &str {
    let at = run
        .stderr
        .split("cannot connect to PostgreSQL at ")
        .nth(1)
        .unwrap_or_else(|| panic!("no host named in:\n{}", run.stderr));
    let target = &at[..at.find(": ").expect("a colon after the target")];
    let (host, port) = target.rsplit_once(':').expect("host:port");
    assert!(!host.is_empty() && !host.contains('@'), "{target}");
    assert!(port.parse::<u16>().is_ok(), "{target}");
    target
}
