//! End to end with a real Prometheus (Debian's `prometheus`) scraping a real Pushgateway
//! (`prometheus-pushgateway`) that `run-once` and `relay-outbox` pushed to: every series
//! the alert rules and `monitoring/grafana-dashboard.json` read exists in Prometheus with
//! the expected values, every dashboard query answers, and with the backlog above its
//! threshold the backlog alert fires (in a copy of the rules whose `for:` is 1 s; the
//! shipped rules stay as they are, with their `promtool` tests).

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use booking_expire_testbed::observe::{Prometheus, Pushgateway};

use common::kafka::*;
use common::*;
use serde_json::Value;

fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    common::pushgateway::http(addr, "GET", path, "")
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn repo() -> PathBuf {
    crate::common::repo()
}

fn pushgateway() -> Pushgateway {
    Pushgateway::start().unwrap_or_else(|e| panic!("a Pushgateway of the test's own: {e}"))
}

/// The shipped rules with every `for:` shortened to 1s.
fn test_rules() -> String {
    let rules =
        std::fs::read_to_string(repo().join("monitoring/booking-expiration.rules.yml")).unwrap();
    rules
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: 1s", &l[..l.len() - l.trim_start().len()]),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn prometheus(scrape: &str) -> Prometheus {
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [rules.yml]\n\
         scrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n    \
         static_configs:\n      - targets: ['{scrape}']\n"
    );
    Prometheus::start(&config, &[("rules.yml", &test_rules())])
        .unwrap_or_else(|e| panic!("a Prometheus of the test's own: {e}"))
}

/// The result vector of an instant query.
fn query(prom: &Prometheus, q: &str) -> Vec<Value> {
    let (status, body) = get(&prom.addr, &format!("/api/v1/query?query={}", encode(q))).unwrap();
    assert_eq!(status, 200, "{q}: {body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], "success", "{q}: {body}");
    json["data"]["result"].as_array().unwrap().clone()
}

/// The one value of a query that must answer with exactly one series.
fn value(prom: &Prometheus, q: &str) -> f64 {
    let result = query(prom, q);
    assert_eq!(result.len(), 1, "{q}: {result:?}");
    result[0]["value"][1].as_str().unwrap().parse().unwrap()
}

/// The metric names an expression reads: this job's own and the Pushgateway's.
fn names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        rest = &rest[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = &rest[..end];
        if word.starts_with("crm_booking_expiration_")
            || word == "push_time_seconds"
            || word == "push_failure_time_seconds"
        {
            out.insert(word.to_owned());
        }
        rest = &rest[end..];
    }
    out
}

/// Every PromQL expression of the dashboard: panel targets and template variables
/// (`label_values(m{…}, l)` stands for the series selector it lists), with the
/// variables as "All".
fn dashboard_queries() -> Vec<String> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("monitoring/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let all = |q: &str| q.replace("$job", ".*").replace("$instance", ".*");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(all(target["expr"].as_str().unwrap()));
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if var["type"] == "query" {
            let q = var["query"]["query"].as_str().unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|s| s.rsplit_once(','))
                .map(|(selector, _)| selector)
                .unwrap_or_else(|| panic!("unexpected variable query {q}"));
            queries.push(all(inner));
        }
    }
    queries
}

fn rule_expressions() -> Vec<String> {
    let rules =
        std::fs::read_to_string(repo().join("monitoring/booking-expiration.rules.yml")).unwrap();
    // Each expr is a block scalar: the indented lines after `expr: |`.
    let mut exprs = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for line in rules.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some((at, text)) = &mut current {
            if line.trim().is_empty() || indent > *at {
                text.push_str(line.trim());
                text.push(' ');
                continue;
            }
            exprs.push(std::mem::take(text));
            current = None;
        }
        if line.trim_start().starts_with("expr:") {
            current = Some((indent, String::new()));
        }
    }
    assert!(exprs.len() >= 10, "{exprs:?}");
    exprs
}

#[test]
fn prometheus_scraping_the_pushgateway_sees_what_the_rules_and_the_dashboard_read() {
    let gateway = pushgateway();
    let prom = prometheus(&gateway.addr);
    let db = TestDb::new();
    let mut c = db.client();
    // 350 overdue Reserve bookings and 20 Booking ones: one batch of 200 per phase, so
    // 150 stay overdue, above the alert's 100.
    seed_many(&mut c, 350, |i| Seed::reserved(-600 - i as i64));
    seed_many(&mut c, 20, |i| Seed::booked(-600 - i as i64));
    let url = gateway.addr.clone();
    let push = format!("http://{url}");
    let run = db.run(&["run-once", "--pushgateway-url", &push]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (200, 20, 0, 0));

    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let relay = db.run(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--message-timeout",
        "10s",
        "--pushgateway-url",
        &push,
    ]);
    assert_eq!(relay.code, 0, "{}", relay.stderr);

    // Scraped: Prometheus has the relay's push.
    let job = r#"job="crm_booking_expiration""#;
    wait_until(
        Duration::from_secs(30),
        "Prometheus scraped both pushes",
        || {
            query(
                &prom,
                &format!(
                    r#"crm_booking_expiration_relay_published{{{job}, step="relay-outbox"}} == 220"#
                ),
            )
            .len()
                == 1
                && query(
                    &prom,
                    &format!(
                        r#"crm_booking_expiration_items{{{job}, step="run-once", phase="Reserve"}}"#
                    ),
                )
                .len()
                    == 1
        },
    );

    // The values, as the runs left them.
    let topic_label = format!(r#"topic="{topic}""#);
    for (q, want) in [
        (
            format!(r#"crm_booking_expiration_items{{{job}, step="run-once", phase="Reserve"}}"#),
            200.0,
        ),
        (
            format!(r#"crm_booking_expiration_items{{{job}, step="run-once", phase="Booking"}}"#),
            20.0,
        ),
        (
            format!(r#"crm_booking_expiration_backlog{{{job}, step="run-once", phase="Reserve"}}"#),
            150.0,
        ),
        (
            format!(r#"crm_booking_expiration_backlog{{{job}, step="run-once", phase="Booking"}}"#),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_backlog_oldest_age_seconds{{{job}, step="run-once", phase="Booking"}}"#
            ),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_poison{{{job}, step="run-once"}}"#),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_poison_isolated{{{job}, step="run-once"}}"#),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_skip_locked{{{job}, step="run-once"}}"#),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_errors{{{job}, step="run-once"}}"#),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_errors{{{job}, step="relay-outbox"}}"#),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_cycle_duration_seconds_count{{{job}, step="run-once"}}"#
            ),
            1.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_cycle_duration_seconds_bucket{{{job}, step="run-once", le="+Inf"}}"#
            ),
            1.0,
        ),
        // Lateness: the oldest 200 Reserve deadlines were 750 to 949 s before the
        // seed, the 20 Booking ones 600 to 619 s; AsOf came moments after it.
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_count{{{job}, step="run-once", phase="Reserve"}}"#
            ),
            200.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_count{{{job}, step="run-once", phase="Booking"}}"#
            ),
            20.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_bucket{{{job}, step="run-once", phase="Reserve", le="300"}}"#
            ),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_bucket{{{job}, step="run-once", phase="Reserve", le="3600"}}"#
            ),
            200.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_bucket{{{job}, step="run-once", phase="Booking", le="300"}}"#
            ),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_lateness_seconds_bucket{{{job}, step="run-once", phase="Booking", le="900"}}"#
            ),
            20.0,
        ),
        (
            format!(r#"crm_booking_expiration_relay_published{{{job}, step="relay-outbox"}}"#),
            220.0,
        ),
        (
            format!(r#"crm_booking_expiration_relay_failed{{{job}, step="relay-outbox"}}"#),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_relay_publications{{{job}, {topic_label}, phase="Reserve"}}"#
            ),
            200.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_relay_publications{{{job}, {topic_label}, phase="Booking"}}"#
            ),
            20.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_relay_ack_age_seconds_count{{{job}, step="relay-outbox"}}"#
            ),
            220.0,
        ),
        (
            format!(r#"crm_booking_expiration_outbox_pending{{{job}, step="relay-outbox"}}"#),
            0.0,
        ),
        (
            format!(
                r#"crm_booking_expiration_outbox_oldest_pending_age_seconds{{{job}, step="relay-outbox"}}"#
            ),
            0.0,
        ),
        (
            format!(r#"crm_booking_expiration_outbox_failed{{{job}, step="relay-outbox"}}"#),
            0.0,
        ),
        (
            format!(r#"push_failure_time_seconds{{{job}, step="run-once"}}"#),
            0.0,
        ),
        (
            format!(r#"push_failure_time_seconds{{{job}, step="relay-outbox"}}"#),
            0.0,
        ),
    ] {
        assert_eq!(value(&prom, &q), want, "{q}");
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for step in ["run-once", "relay-outbox"] {
        for name in [
            "crm_booking_expiration_last_success_timestamp_seconds",
            "push_time_seconds",
        ] {
            let at = value(&prom, &format!(r#"{name}{{{job}, step="{step}"}}"#));
            assert!(now - 120.0 < at && at <= now, "{name} {step}: {at}");
        }
    }

    // Every series a rule or the dashboard names exists, for this job.
    let mut wanted = BTreeSet::new();
    for expr in rule_expressions().iter().chain(dashboard_queries().iter()) {
        wanted.extend(names(expr));
    }
    assert!(wanted.len() >= 15, "{wanted:?}");
    for name in &wanted {
        let series = query(&prom, &format!(r#"{{__name__="{name}", {job}}}"#));
        assert!(
            !series.is_empty(),
            "{name} is named by a rule or the dashboard but does not exist"
        );
    }
    // Every dashboard query answers with data.
    for q in dashboard_queries() {
        assert!(
            !query(&prom, &q).is_empty(),
            "no data for the dashboard query {q}"
        );
    }

    // The sum of a 15-minute window of scrapes of this one push: every count times
    // the number of scrapes, so the same p99. Booking: all 20 in (300, 900], so
    // p99 = 300 + 600 × 19.8 / 20 exactly.
    let p99 = |phase: &str| {
        value(
            &prom,
            &format!(
                r#"histogram_quantile(0.99, sum by (phase, le) (sum_over_time(crm_booking_expiration_lateness_seconds_bucket{{{job}, step="run-once", phase="{phase}"}}[15m])))"#
            ),
        )
    };
    let booking_p99 = p99("Booking");
    assert!((booking_p99 - 894.0).abs() < 1e-6, "{booking_p99}");
    let reserve_p99 = p99("Reserve");
    assert!(
        (900.0..3600.0).contains(&reserve_p99),
        "the p99 of 750..949 s lies in the (900, 3600] bucket: {reserve_p99}"
    );

    // 150 overdue > 100: the backlog alert fires (for: 1s in this copy of the rules);
    // every expiry was 10 minutes late, past the 85 s objective: the lateness alert
    // fires for both phases; the liveness and failure alerts do not.
    let mut alerts = Vec::new();
    let firing = |alerts: &[Value], name: &str| {
        alerts
            .iter()
            .filter(|a| a["labels"]["alertname"] == name && a["state"] == "firing")
            .count()
    };
    wait_until(
        Duration::from_secs(30),
        "the backlog and lateness alerts fire",
        || {
            let (_, body) = get(&prom.addr, "/api/v1/alerts").unwrap();
            let json: Value = serde_json::from_str(&body).unwrap();
            alerts = json["data"]["alerts"].as_array().unwrap().clone();
            firing(&alerts, "BookingExpirationBacklogHigh") == 1
                && firing(&alerts, "BookingExpirationLate") == 2
        },
    );
    let names: BTreeSet<&str> = alerts
        .iter()
        .map(|a| a["labels"]["alertname"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["BookingExpirationBacklogHigh", "BookingExpirationLate"]),
        "{alerts:#?}"
    );
    let late = |phase: &str| {
        let alert = alerts
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == "BookingExpirationLate" && a["labels"]["phase"] == phase
            })
            .unwrap_or_else(|| panic!("no lateness alert for {phase}: {alerts:#?}"));
        alert["value"].as_str().unwrap().parse::<f64>().unwrap()
    };
    assert!((late("Booking") - 894.0).abs() < 1e-6, "{alerts:#?}");
    assert!((late("Reserve") - reserve_p99).abs() < 1e-6, "{alerts:#?}");
    let backlog = alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == "BookingExpirationBacklogHigh")
        .unwrap();
    assert_eq!(
        backlog["value"].as_str().unwrap().parse::<f64>().unwrap(),
        150.0
    );
}
