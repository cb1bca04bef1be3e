//! `scripts/kafka-acls.sh` on a real broker that enforces ACLs (KRaft's
//! StandardAuthorizer, SCRAM-SHA-512 users over SASL_SSL): the relay's principal
//! publishes with the real `booking-expire relay-outbox`, a consumer principal reads
//! with its own group, and a principal the script does not list can neither write nor
//! read; a reader cannot write, and a consumer cannot use another team's group.

use crate::common;
use crate::rdkafka;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use booking_expire_testbed::kafka::{Broker, Kafka};
use common::kafka::create_topic;
use common::tls::{Certs, run};
use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::json;

const TOPIC: &str = "pin.crm.booking-expired.v1";

fn scripts() -> PathBuf {
    crate::common::repo().join("scripts")
}

fn secret() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A broker of the test's own with ACLs enforced: PLAINTEXT (a super user, for the
/// admin work), and SASL_SSL with one SCRAM user per application. Killed and removed
/// on drop.
struct AclBroker {
    plaintext: String,
    sasl_ssl: String,
    passwords: Vec<(&'static str, String)>,
    broker: Broker,
}

impl AclBroker {
    fn start(certs: &Certs, users: &[&'static str]) -> Self {
        let passwords: Vec<(&'static str, String)> = users.iter().map(|u| (*u, secret())).collect();
        let kafka = passwords.iter().fold(
            Kafka::new().tls(&certs.dir).authorizer(true),
            |k, (u, p)| k.user(u, p),
        );
        let broker = kafka
            .start()
            .unwrap_or_else(|e| panic!("a broker with ACLs of the test's own: {e}"));
        AclBroker {
            plaintext: broker.brokers(),
            sasl_ssl: broker.sasl_ssl().expect("a SASL_SSL listener"),
            passwords,
            broker,
        }
    }

    fn password(&self, user: &str) -> &str {
        &self.passwords.iter().find(|(u, _)| *u == user).unwrap().1
    }
}

impl Drop for AclBroker {
    fn drop(&mut self) {
        self.broker.kill();
    }
}

fn pending(db: &TestDb) -> i64 {
    count(
        &mut db.client(),
        "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL",
    )
}

/// `booking-expire relay-outbox` as one SCRAM user.
fn relay_as(db: &TestDb, broker: &AclBroker, certs: &Certs, user: &str) -> Run {
    run(
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("KAFKA_BROKERS", broker.sasl_ssl.as_str()),
            ("KAFKA_SECURITY_PROTOCOL", "sasl_ssl"),
            ("KAFKA_CA_FILE", certs.ca.to_str().unwrap()),
            ("KAFKA_USERNAME", user),
            ("KAFKA_PASSWORD", broker.password(user)),
        ],
        &["relay-outbox", "--message-timeout", "5s"],
    )
}

/// What one SCRAM user gets reading the whole topic with a consumer group: the
/// records' keys, or the first error the broker answered with.
fn read_as(
    broker: &AclBroker,
    certs: &Certs,
    user: &str,
    group: &str,
    expected: usize,
) -> Result<Vec<String>, RDKafkaErrorCode> {
    read(broker, certs, user, Some(group), expected)
}

/// The same without a consumer group of its own: the partitions assigned, from the
/// beginning, nothing committed, so Read on the topic is all it needs. (librdkafka
/// still looks the configured group's coordinator up; that refusal is not the point
/// here and is skipped.)
fn fetch_as(
    broker: &AclBroker,
    certs: &Certs,
    user: &str,
    expected: usize,
) -> Result<Vec<String>, RDKafkaErrorCode> {
    read(broker, certs, user, None, expected)
}

fn read(
    broker: &AclBroker,
    certs: &Certs,
    user: &str,
    group: Option<&str>,
    expected: usize,
) -> Result<Vec<String>, RDKafkaErrorCode> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.sasl_ssl)
        .set("security.protocol", "sasl_ssl")
        .set("ssl.ca.location", certs.ca.to_str().unwrap())
        .set("sasl.mechanism", "SCRAM-SHA-512")
        .set("sasl.username", user)
        .set("sasl.password", broker.password(user))
        .set("group.id", group.unwrap_or("unused-no-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    match group {
        Some(_) => consumer.subscribe(&[TOPIC]).unwrap(),
        None => {
            let mut tpl = TopicPartitionList::new();
            for p in 0..6 {
                tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
                    .unwrap();
            }
            consumer.assign(&tpl).unwrap();
        }
    }
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && keys.len() < expected {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                use rdkafka::message::Message;
                keys.push(String::from_utf8(m.key().unwrap().to_vec()).unwrap());
            }
            Some(Err(e)) => match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::GroupAuthorizationFailed) if group.is_none() => {}
                Some(code) => return Err(code),
                None => panic!("{user}: {e}"),
            },
            None => {}
        }
    }
    Ok(keys)
}

/// The ACL lines `--list` printed, trimmed and sorted.
fn acl_lines(stdout: &str) -> Vec<String> {
    let mut lines: Vec<String> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("(principal="))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn only_the_relay_writes_and_only_the_listed_consumers_read() {
    let certs = Certs::generate();
    let broker = AclBroker::start(&certs, &["relay", "chessboard", "messenger", "outsider"]);
    create_topic(&broker.plaintext, TOPIC, 6, &[]);

    let out = Command::new(scripts().join("kafka-acls.sh"))
        .args(["--bootstrap-server", &broker.plaintext])
        .args(["--relay", "User:relay"])
        .args(["--consumer", "User:chessboard=chessboard"])
        .args(["--consumer", "User:messenger=messenger"])
        .args(["--consumer", "User:notifications=notifications"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kafka-acls.sh failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let allow = |who: &str, op: &str| {
        format!("(principal=User:{who}, host=*, operation={op}, permissionType=ALLOW)")
    };
    assert_eq!(
        acl_lines(&stdout),
        {
            let mut want = vec![
                allow("relay", "WRITE"),
                allow("relay", "DESCRIBE"),
                allow("chessboard", "READ"),
                allow("messenger", "READ"),
                allow("notifications", "READ"),
            ];
            want.sort();
            want
        },
        "the topic's ACLs, as --list printed them:\n{stdout}"
    );
    // Run again: nothing changes, nothing fails.
    let again = Command::new(scripts().join("kafka-acls.sh"))
        .args([
            "--bootstrap-server",
            &broker.plaintext,
            "--relay",
            "User:relay",
        ])
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(acl_lines(&String::from_utf8_lossy(&again.stdout)).len(), 5);

    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 3, |i| Seed::reserved(-100 - i as i64));
    assert_eq!(db.run_once(&[]).reserve, 3);
    assert_eq!(pending(&db), 3);

    // Unlisted, and a reader: neither may write.
    for user in ["outsider", "chessboard"] {
        // A refused attempt puts the rows in back-off (a second): as if that had passed.
        c.execute("UPDATE crm.outbox SET next_attempt_at = NULL", &[])
            .unwrap();
        let denied = relay_as(&db, &broker, &certs, user);
        assert_ne!(denied.code, 0, "{user} published:\n{}", denied.stdout);
        assert!(
            denied.stderr.contains("authoriz") || denied.stderr.contains("Authoriz"),
            "{user}: want an authorization error, got:\n{}",
            denied.stderr
        );
        assert_eq!(pending(&db), 3, "{user}: nothing published");
        // The outsider may not even describe the topic: its wait is one row, saying
        // why. The reader may describe it (no wait), but not write: its producer is
        // refused, which is not the topic's fault.
        let reasons: Vec<String> = c
            .query("SELECT reason FROM crm.booking_expiration_topic_wait", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        match user {
            "outsider" => assert!(
                reasons.len() == 1 && reasons[0].contains("uthoriz"),
                "{reasons:?}"
            ),
            _ => assert!(reasons.is_empty(), "{reasons:?}"),
        }
    }
    // A refusal by the ACLs is a configuration fault, not the rows' own: they wait for
    // their topic, counting no failure and never given up, unwritten; the topic's wait
    // says why, once.
    let waiting: (i32, i32, i64, i64) = {
        let r = c
            .query_one(
                "SELECT min(failures), max(failures),
                        count(*) FILTER (WHERE failed_at IS NOT NULL),
                        count(*) FILTER (WHERE last_error IS NOT NULL)
                   FROM crm.outbox",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(waiting, (0, 0, 0, 0));

    // The relay's principal publishes (idempotent producer, Write + Describe only),
    // once the back-off has passed (made to pass here).
    c.execute("UPDATE crm.outbox SET next_attempt_at = NULL", &[])
        .unwrap();
    let ok = relay_as(&db, &broker, &certs, "relay");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    // The relay's principal may write: the topic's wait is gone.
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM crm.booking_expiration_topic_wait"
        ),
        0
    );
    let result: serde_json::Value = serde_json::from_str(ok.stdout.trim()).unwrap();
    assert_eq!(result["Published"], json!(3));
    assert_eq!(pending(&db), 0);

    let mut want: Vec<String> = c
        .query("SELECT aggregateid FROM crm.outbox", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    want.sort();

    // FirstOf consumers read with their own group.
    for user in ["chessboard", "messenger"] {
        let mut got = read_as(&broker, &certs, user, user, 3).expect(user);
        got.sort();
        assert_eq!(got, want, "{user} reads every record");
    }
    // Not with another team's group.
    assert_eq!(
        read_as(&broker, &certs, "chessboard", "messenger", 3),
        Err(RDKafkaErrorCode::GroupAuthorizationFailed)
    );
    // Without a group, Read on the topic is what counts: the listed consumer reads...
    let mut got = fetch_as(&broker, &certs, "chessboard", 3).expect("chessboard");
    got.sort();
    assert_eq!(got, want);
    // ... an unlisted principal and the relay (a writer) get nothing: librdkafka
    // reports the refused topic, or just never receives a record (within 30 s, where
    // chessboard got all three at once).
    for user in ["outsider", "relay"] {
        match fetch_as(&broker, &certs, user, 3) {
            Ok(keys) => assert_eq!(keys, Vec::<String>::new(), "{user} read records"),
            Err(code) => assert_eq!(code, RDKafkaErrorCode::TopicAuthorizationFailed, "{user}"),
        }
    }
    // Nor through a group: its own, or a listed one (the group's ACL names
    // chessboard's principal, not the group alone).
    for group in ["outsider", "chessboard"] {
        assert_eq!(
            read_as(&broker, &certs, "outsider", group, 3),
            Err(RDKafkaErrorCode::GroupAuthorizationFailed),
            "outsider with group {group}"
        );
    }
}
