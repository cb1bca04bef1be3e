//! A real Prometheus Pushgateway of a test's own (Debian's `prometheus-pushgateway`, on
//! a free port, in memory: the testbed crate's), a small HTTP/1.0 client to read it
//! back, and a parser of the text exposition format.

use std::collections::BTreeMap;

pub const JOB: &str = "crm_booking_expiration";

/// A Pushgateway of the test's own (the testbed crate's); killed when dropped.
pub struct Pushgateway {
    pub addr: String,
    _gateway: booking_expire_testbed::observe::Pushgateway,
}

impl Pushgateway {
    pub fn start() -> Self {
        let gateway = booking_expire_testbed::observe::Pushgateway::start()
            .unwrap_or_else(|e| panic!("a Pushgateway of the test's own: {e}"));
        Pushgateway {
            addr: gateway.addr.clone(),
            _gateway: gateway,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The samples of one step's group, keyed `name` or `name{phase="…",topic="…"}`, after
    /// checking that every sample of the group carries exactly the grouping key's labels
    /// (and `phase`, `topic` where there are). Histogram buckets are left out (their
    /// `_count` and `_sum` are in): `buckets` has them.
    pub fn group(&self, step: &str) -> BTreeMap<String, f64> {
        let (status, text) = http(&self.addr, "GET", "/metrics", "").expect("GET /metrics");
        assert_eq!(status, 200, "{text}");
        let mut group = BTreeMap::new();
        for (name, labels, value) in samples(&text) {
            if labels.get("job").map(String::as_str) != Some(JOB)
                || labels.get("step").map(String::as_str) != Some(step)
            {
                continue;
            }
            if name.ends_with("_bucket") {
                continue;
            }
            let mut keys: Vec<&str> = labels.keys().map(String::as_str).collect();
            keys.retain(|k| *k != "phase" && *k != "topic");
            assert_eq!(keys, ["instance", "job", "step"], "{name} {labels:?}");
            assert_eq!(labels["instance"], "", "never the pod: {name} {labels:?}");
            let extra: Vec<String> = labels
                .iter()
                .filter(|(k, _)| *k == "phase" || *k == "topic")
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            let key = if extra.is_empty() {
                name.clone()
            } else {
                format!("{name}{{{}}}", extra.join(","))
            };
            assert!(group.insert(key, value).is_none(), "{name} twice");
        }
        group
    }

    /// The buckets of histogram `name` in a step's group: (le, cumulative count).
    pub fn buckets(&self, step: &str, name: &str) -> Vec<(String, f64)> {
        let (_, text) = http(&self.addr, "GET", "/metrics", "").expect("GET /metrics");
        samples(&text)
            .into_iter()
            .filter(|(n, labels, _)| {
                *n == format!("{name}_bucket")
                    && labels.get("step").map(String::as_str) == Some(step)
            })
            .map(|(_, labels, v)| (labels["le"].clone(), v))
            .collect()
    }

    pub fn exposition(&self) -> String {
        http(&self.addr, "GET", "/metrics", "").unwrap().1
    }
}

/// One HTTP/1.0 request: the testbed's, which the services' own readiness checks use.
pub use booking_expire_testbed::observe::http;

/// The samples of a text exposition: (name, labels, value).
pub fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                None => (series, BTreeMap::new()),
                Some((name, rest)) => {
                    let labels = rest
                        .trim_end_matches('}')
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once("=\"").unwrap();
                            (k.to_owned(), v.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name, labels)
                }
            };
            (name.to_owned(), labels, value.parse().unwrap())
        })
        .collect()
}
