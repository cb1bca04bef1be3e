//! Traces over OTLP against a real trace backend: Jaeger (all-in-one, in memory),
//! started by the testbed crate for each test, read back through its query API.
//! A `run-once` and a `relay-outbox` are one trace each (trace id = run id), with the
//! spans, attributes, events and links the code promises; an unreachable backend
//! changes nothing but a warning.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka::*;
use common::*;
use serde_json::Value;
use uuid::Uuid;

/// A Jaeger of the test's own (the testbed crate's); stopped and removed when dropped.
struct Jaeger {
    jaeger: booking_expire_testbed::observe::Jaeger,
    otlp_http: String,
}

impl Jaeger {
    fn start() -> Self {
        let jaeger = booking_expire_testbed::observe::Jaeger::start()
            .unwrap_or_else(|e| panic!("a Jaeger of the test's own: {e}"));
        Jaeger {
            otlp_http: jaeger.otlp_http.clone(),
            jaeger,
        }
    }

    /// The trace `trace_id` once it holds at least `spans` spans (Jaeger stores what
    /// it receives a moment later, so this waits for that, up to 20 s).
    fn trace(&self, trace_id: &str, spans: usize) -> Trace {
        let mut trace = None;
        wait_until(Duration::from_secs(20), "the trace is in Jaeger", || {
            let (status, body) = http_get(&self.jaeger.query, &format!("/api/traces/{trace_id}"));
            if status != 200 {
                return false;
            }
            let json: Value = serde_json::from_str(&body).unwrap();
            let found = Trace::of(&json["data"][0]);
            let enough = found.spans.len() >= spans;
            trace = Some(found);
            enough
        });
        let trace = trace.unwrap();
        assert_eq!(trace.spans.len(), spans, "{:#?}", trace.spans);
        trace
    }
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    common::pushgateway::http(addr, "GET", path, "").unwrap_or_default()
}

/// Jaeger prints trace ids without leading zeros.
fn trace_key(id: &str) -> String {
    id.trim_start_matches('0').to_owned()
}

#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    name: String,
    /// (refType, traceID, spanID)
    references: Vec<(String, String, String)>,
    tags: BTreeMap<String, Value>,
    /// Events: name and fields.
    events: Vec<(String, BTreeMap<String, Value>)>,
    service: String,
}

impl Span {
    fn tag(&self, key: &str) -> &Value {
        self.tags
            .get(key)
            .unwrap_or_else(|| panic!("{}: no tag {key}: {:#?}", self.name, self.tags))
    }

    fn parent(&self) -> Option<&str> {
        self.references
            .iter()
            .find(|(kind, trace, _)| {
                kind == "CHILD_OF" && trace_key(trace) == trace_key(&self.trace_id)
            })
            .map(|(_, _, span)| span.as_str())
    }
}

#[derive(Debug)]
struct Trace {
    spans: Vec<Span>,
}

impl Trace {
    fn of(json: &Value) -> Self {
        let processes = &json["processes"];
        let fields = |list: &Value| -> BTreeMap<String, Value> {
            list.as_array()
                .into_iter()
                .flatten()
                .map(|t| (t["key"].as_str().unwrap().to_owned(), t["value"].clone()))
                .collect()
        };
        let spans = json["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| Span {
                trace_id: s["traceID"].as_str().unwrap().to_owned(),
                span_id: s["spanID"].as_str().unwrap().to_owned(),
                name: s["operationName"].as_str().unwrap().to_owned(),
                references: s["references"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|r| {
                        (
                            r["refType"].as_str().unwrap().to_owned(),
                            r["traceID"].as_str().unwrap().to_owned(),
                            r["spanID"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect(),
                tags: fields(&s["tags"]),
                events: s["logs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|l| {
                        let mut f = fields(&l["fields"]);
                        let name = f
                            .remove("event")
                            .and_then(|v| v.as_str().map(str::to_owned));
                        (name.unwrap_or_default(), f)
                    })
                    .collect(),
                service: processes[s["processID"].as_str().unwrap()]["serviceName"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            })
            .collect();
        Trace { spans }
    }

    fn named(&self, name: &str) -> Vec<&Span> {
        self.spans.iter().filter(|s| s.name == name).collect()
    }

    fn one(&self, name: &str) -> &Span {
        let found = self.named(name);
        assert_eq!(found.len(), 1, "{name}: {:#?}", self.spans);
        found[0]
    }
}

fn run_id_of(stdout: &str) -> Uuid {
    let json: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    json["RunId"].as_str().unwrap().parse().unwrap()
}

fn traced(mut cmd: Command, endpoint: &str, service: &str) -> Run {
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", service)
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test");
    Run::of(cmd.output().unwrap())
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

#[test]
fn a_cycle_and_its_relay_are_one_trace_each_linked_by_the_traceparent() {
    let jaeger = Jaeger::start();
    let db = TestDb::new();
    let mut c = db.client();
    let mut poison = Seed::booked(-3_600);
    poison.expired_at_set = true;
    let rows = [
        Seed::reserved(-600),
        Seed::reserved(-300),
        Seed::booked(-120),
        poison.clone(),
        Seed::reserved(3_600),
    ];
    seed(&mut c, &rows);
    let service = format!("booking-expire-test-{}", Uuid::new_v4().simple());

    let run = traced(db.command(&["run-once"]), &jaeger.otlp_http, &service);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (2, 1, 0, 1));
    let run_id = run_id_of(&run.stdout);
    let trace_id = run_id.simple().to_string();

    // The trace id on every log line.
    for line in run.stderr.lines() {
        assert!(
            line.contains(&format!(" TraceId={trace_id}")),
            "no trace id: {line}"
        );
    }

    // root + one batch per phase (each phase's queue drains in one short batch)
    let trace = jaeger.trace(&trace_id, 3);
    let cycle = trace.one("run-once cycle");
    assert_eq!(cycle.service, service);
    assert_eq!(cycle.parent(), None);
    assert_eq!(trace_key(&cycle.trace_id), trace_key(&trace_id));
    assert_eq!(str_of(cycle.tag("RunId")), run_id.to_string());
    let printed: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(cycle.tag("AsOf"), &printed["AsOf"]);
    for (key, want) in [
        ("ReserveExpiredCount", 2),
        ("BookingExpiredCount", 1),
        ("SkippedLockedCount", 0),
        ("PoisonCount", 1),
    ] {
        assert_eq!(cycle.tag(key).as_i64(), Some(want), "{key}");
    }
    assert_eq!(str_of(cycle.tag("Outcome")), "success");

    let batches = trace.named("expire batch");
    assert_eq!(batches.len(), 2, "{batches:#?}");
    let by_phase: BTreeMap<&str, &Span> = batches
        .iter()
        .map(|b| (str_of(b.tag("Phase")), *b))
        .collect();
    let counts = |b: &Span| {
        ["Claimed", "Expired", "Poison", "SkippedLocked"].map(|k| b.tag(k).as_i64().unwrap())
    };
    assert_eq!(counts(by_phase["Reserve"]), [2, 2, 0, 0]);
    assert_eq!(counts(by_phase["Booking"]), [2, 1, 1, 0]);
    for batch in &batches {
        assert_eq!(batch.parent(), Some(cycle.span_id.as_str()));
    }

    // Per-item events: each expiry with its booking and tenant, the poison row failed.
    let expired_events = |b: &Span| -> BTreeMap<String, String> {
        b.events
            .iter()
            .filter(|(name, _)| name == "booking expired")
            .map(|(_, f)| {
                (
                    str_of(&f["BookingId"]).to_owned(),
                    str_of(&f["TenantId"]).to_owned(),
                )
            })
            .collect()
    };
    let want = |seeds: &[&Seed]| -> BTreeMap<String, String> {
        seeds
            .iter()
            .map(|s| (s.id.to_string(), s.tenant_id.to_string()))
            .collect()
    };
    assert_eq!(
        expired_events(by_phase["Reserve"]),
        want(&[&rows[0], &rows[1]])
    );
    assert_eq!(expired_events(by_phase["Booking"]), want(&[&rows[2]]));
    let failed: Vec<(&str, &str)> = by_phase["Booking"]
        .events
        .iter()
        .filter(|(name, _)| name == "item failed")
        .map(|(_, f)| (str_of(&f["BookingId"]), str_of(&f["TenantId"])))
        .collect();
    assert_eq!(
        failed,
        [(
            poison.id.to_string().as_str(),
            poison.tenant_id.to_string().as_str()
        )]
    );

    // Each outbox row's traceparent names the batch span that wrote it.
    let mut headers: BTreeMap<String, (String, String)> = BTreeMap::new();
    for row in c
        .query("SELECT id, aggregateid, headers FROM crm.outbox", &[])
        .unwrap()
    {
        let id: Uuid = row.get(0);
        let key: String = row.get(1);
        let h: Value = row.get(2);
        headers.insert(key, (id.to_string(), str_of(&h["traceparent"]).to_owned()));
    }
    assert_eq!(headers.len(), 3);
    for (seed, phase) in [
        (&rows[0], "Reserve"),
        (&rows[1], "Reserve"),
        (&rows[2], "Booking"),
    ] {
        let (_, tp) = &headers[&seed.id.to_string()];
        assert_eq!(
            tp,
            &format!("00-{trace_id}-{}-01", by_phase[phase].span_id),
            "{phase}"
        );
    }

    // The relay: a trace of its own, one producer span per message, linked to the
    // batch span of the cycle that wrote the event.
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    let relay = traced(
        db.command(&[
            "relay-outbox",
            "--brokers",
            &brokers,
            "--message-timeout",
            "5s",
        ]),
        &jaeger.otlp_http,
        &service,
    );
    assert_eq!(relay.code, 0, "{}", relay.stderr);
    let relay_id = run_id_of(&relay.stdout);
    let relay_trace_id = relay_id.simple().to_string();
    for line in relay.stderr.lines() {
        assert!(
            line.contains(&format!(" TraceId={relay_trace_id}")),
            "no trace id: {line}"
        );
    }
    // root + batch + 3 messages
    let trace = jaeger.trace(&relay_trace_id, 5);
    let root = trace.one("relay-outbox");
    assert_eq!(root.parent(), None);
    assert_eq!(str_of(root.tag("RunId")), relay_id.to_string());
    assert_eq!(root.tag("Published").as_i64(), Some(3));
    assert_eq!(str_of(root.tag("Outcome")), "success");
    let batch = trace.one("relay batch");
    assert_eq!(batch.parent(), Some(root.span_id.as_str()));
    assert_eq!(batch.tag("messaging.batch.message_count").as_i64(), Some(3));
    let sends = trace.named(&format!("send {topic}"));
    assert_eq!(sends.len(), 3, "{:#?}", trace.spans);
    let published: BTreeMap<String, (i64, i64)> = c
        .query(
            "SELECT aggregateid FROM crm.outbox WHERE published_at IS NOT NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), (0, 0)))
        .collect();
    assert_eq!(published.len(), 3);
    let mut keys = Vec::new();
    for send in &sends {
        assert_eq!(send.parent(), Some(batch.span_id.as_str()));
        assert_eq!(str_of(send.tag("span.kind")), "producer");
        assert_eq!(str_of(send.tag("messaging.system")), "kafka");
        assert_eq!(str_of(send.tag("messaging.operation.type")), "send");
        assert_eq!(str_of(send.tag("messaging.destination.name")), topic);
        let partition: i32 = str_of(send.tag("messaging.destination.partition.id"))
            .parse()
            .unwrap();
        assert!((0..6).contains(&partition), "{partition}");
        assert!(send.tag("messaging.kafka.offset").as_i64().is_some());
        let key = str_of(send.tag("messaging.kafka.message.key")).to_owned();
        let (row_id, tp) = &headers[&key];
        assert_eq!(str_of(send.tag("messaging.message.id")), row_id);
        assert_eq!(
            partition,
            java_partition(&key, 6),
            "the partition Kafka's default partitioner picks for the key"
        );
        // The link to the cycle: FOLLOWS_FROM the span of the traceparent.
        let parts: Vec<&str> = tp.split('-').collect();
        let links: Vec<(String, String)> = send
            .references
            .iter()
            .filter(|(kind, _, _)| kind == "FOLLOWS_FROM")
            .map(|(_, t, s)| (trace_key(t), s.clone()))
            .collect();
        assert_eq!(links, [(trace_key(parts[1]), parts[2].to_owned())]);
        keys.push(key);
    }
    keys.sort();
    assert_eq!(keys, published.keys().cloned().collect::<Vec<_>>());
}

#[test]
fn an_unreachable_trace_backend_changes_nothing_but_a_warning() {
    let db = TestDb::new();
    seed(&mut db.client(), &[Seed::reserved(-60)]);
    // A server that accepts connections and never answers: the worst case, where an
    // export would wait for its own timeout (10 s by default).
    let (_hung, port) = silent_listener();
    let started = Instant::now();
    let run = traced(
        db.command(&["run-once"]),
        &format!("http://127.0.0.1:{port}"),
        "booking-expire-test",
    );
    let took = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (1, 0, 0, 0));
    // Named with where the spans were to go.
    assert!(
        run.stderr.contains(&format!(
            "traces not flushed before exit to http://127.0.0.1:{port}/v1/traces within 2000ms ("
        )),
        "{}",
        run.stderr
    );
    // The flush is bounded (2 s); a generous budget for a loaded machine.
    assert!(took < Duration::from_secs(15), "{took:?}");

    // Nothing listens at all: the export fails at once, and is said once.
    let refused = refused_port();
    let port = refused.port;
    seed(&mut db.client(), &[Seed::booked(-60)]);
    let run = traced(
        db.command(&["run-once"]),
        &format!("http://127.0.0.1:{port}"),
        "booking-expire-test",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (0, 1, 0, 0));
    assert_eq!(
        run.stderr
            .matches(&format!(
                "trace export failed for http://127.0.0.1:{port}/v1/traces: "
            ))
            .count(),
        1,
        "{}",
        run.stderr
    );
}

#[test]
fn without_the_endpoint_there_is_no_tracing_and_the_traceparent_is_the_run_ids() {
    let db = TestDb::new();
    let mut c = db.client();
    seed(&mut c, &[Seed::reserved(-60)]);
    let run = db.run(&["run-once"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("TraceId="), "{}", run.stderr);
    let run_id = run_id_of(&run.stdout);
    let row = c
        .query_one("SELECT id, headers FROM crm.outbox", &[])
        .unwrap();
    let id: Uuid = row.get(0);
    let h: Value = row.get(1);
    let span = match id.as_u64_pair().1 {
        0 => 1,
        s => s,
    };
    assert_eq!(
        str_of(&h["traceparent"]),
        format!("00-{}-{span:016x}-01", run_id.simple())
    );
}
