//! The dashboard lint: `monitoring/grafana-dashboard.json` against the rules of Grafana's
//! dashboard linter that apply to it. The linter itself is not used: one of the modules
//! it imports is refused by the Go module proxy this project builds from, so it cannot
//! be built (docs/design.md, Observability).
//! Each rule is named as the linter names it:
//!
//! - `template-datasource-rule`: a `datasource` variable of type `datasource` for
//!   Prometheus;
//! - `template-job-rule`: a `job` variable, a query on that data source, multi-value
//!   with "All";
//! - `template-label-promql-rule`: each `label_values(selector, label)` selector parses;
//! - `panel-datasource-rule`: every panel and every target uses `${datasource}`;
//! - `panel-title-description-rule`: every panel has a title and a description;
//! - `panel-units-rule`: every graph panel says its unit;
//! - `target-promql-rule`: every query parses (`promtool check rules` on a rules file
//!   made of it, Grafana's variables replaced by values of their kind);
//! - `target-rate-interval-rule`: `rate`, `irate` and `increase` use `$__rate_interval`;
//! - `target-job-rule`: every series selector matches `job=~"$job"`;
//! - and, the linter's schema checks: unique panel ids, a title and a uid.
//!
//! Not applied: `template-instance-rule` and `target-instance-rule`. The metrics come
//! from a Pushgateway whose grouping key is job and step, never the pod (each run
//! replaces the last run's values), so they carry no instance label: an instance
//! variable would list nothing, and its ".+" would hide every series.
//!
//! That every series a query names exists, with data, is checked end to end against a
//! real Prometheus in tests/prometheus.rs.
//!
//! `DASHBOARD=path` lints another file with the same rules (scripts/dashboard-lint.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shipped() -> Value {
    load(&repo().join("monitoring/grafana-dashboard.json"))
}

const DATASOURCE: &str = "${datasource}";
const JOB_MATCHER: &str = r#"job=~"$job""#;

/// Panels that show data (rows only group them).
fn panels(d: &Value) -> Vec<&Value> {
    d["panels"]
        .as_array()
        .map(|p| p.iter().filter(|p| p["type"] != "row").collect())
        .unwrap_or_default()
}

fn name(p: &Value) -> String {
    format!("panel {} {:?}", p["id"], p["title"].as_str().unwrap_or(""))
}

fn variables(d: &Value) -> Vec<&Value> {
    d["templating"]["list"]
        .as_array()
        .map(|l| l.iter().collect())
        .unwrap_or_default()
}

fn uses_datasource(ds: &Value) -> bool {
    ds["type"] == "prometheus" && (ds["uid"] == DATASOURCE || ds["uid"] == "$datasource")
}

/// Every problem the rules find, each as "rule: where: what"; empty when clean. PromQL
/// parsing is separate ([`promql_problems`]): it runs promtool.
fn lint(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut problem =
        |rule: &str, at: &str, what: String| out.push(format!("{rule}: {at}: {what}"));

    for key in ["title", "uid"] {
        if d[key].as_str().is_none_or(str::is_empty) {
            problem("dashboard-schema", "dashboard", format!("no {key}"));
        }
    }

    let vars = variables(d);
    let var = |n: &str| vars.iter().find(|v| v["name"] == n);
    match var("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        Some(v) => problem(
            "template-datasource-rule",
            "variable datasource",
            format!(
                "type {} query {}, want type datasource query prometheus",
                v["type"], v["query"]
            ),
        ),
        None => problem(
            "template-datasource-rule",
            "dashboard",
            "no datasource variable".into(),
        ),
    }
    match var("job") {
        Some(v) => {
            if v["type"] != "query" || !uses_datasource(&v["datasource"]) {
                problem(
                    "template-job-rule",
                    "variable job",
                    format!(
                        "type {} on {}, want a query on {DATASOURCE}",
                        v["type"], v["datasource"]
                    ),
                );
            }
            if v["multi"] != true || v["includeAll"] != true {
                problem(
                    "template-job-rule",
                    "variable job",
                    "must be multi-value with All".into(),
                );
            }
        }
        None => problem("template-job-rule", "dashboard", "no job variable".into()),
    }

    let mut ids = std::collections::BTreeSet::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        if !ids.insert(p["id"].to_string()) || !p["id"].is_u64() {
            problem(
                "panel-id-unique",
                &name(p),
                "id missing or used twice".into(),
            );
        }
    }
    for p in panels(d) {
        let at = name(p);
        if !uses_datasource(&p["datasource"]) {
            problem(
                "panel-datasource-rule",
                &at,
                format!("data source {}", p["datasource"]),
            );
        }
        for key in ["title", "description"] {
            if p[key].as_str().is_none_or(|s| s.trim().is_empty()) {
                problem("panel-title-description-rule", &at, format!("no {key}"));
            }
        }
        if ["timeseries", "stat", "gauge", "bargauge", "graph"]
            .contains(&p["type"].as_str().unwrap_or(""))
            && p["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .is_none_or(str::is_empty)
        {
            problem("panel-units-rule", &at, "no unit".into());
        }
        let targets = p["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if targets.is_empty() {
            problem("target-promql-rule", &at, "no query".into());
        }
        for t in targets {
            let at = format!("{at} target {}", t["refId"].as_str().unwrap_or("?"));
            if !uses_datasource(&t["datasource"]) {
                problem(
                    "panel-datasource-rule",
                    &at,
                    format!("data source {}", t["datasource"]),
                );
            }
            let Some(expr) = t["expr"].as_str() else {
                problem("target-promql-rule", &at, "no expr".into());
                continue;
            };
            for range in rate_ranges(expr) {
                if range != "$__rate_interval" {
                    problem(
                        "target-rate-interval-rule",
                        &at,
                        format!("[{range}], want [$__rate_interval]"),
                    );
                }
            }
            for selector in selectors(expr) {
                if !selector.contains(JOB_MATCHER) {
                    problem(
                        "target-job-rule",
                        &at,
                        format!("{selector} has no {JOB_MATCHER}"),
                    );
                }
            }
        }
    }
    out
}

/// The range of each `rate(…[r])`, `irate(…[r])` and `increase(…[r])`.
fn rate_ranges(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in ["rate(", "irate(", "increase("] {
        let mut from = 0;
        while let Some(i) = expr[from..].find(f) {
            let start = from + i;
            from = start + f.len();
            // `irate(` contains `rate(`: count a call once, by its whole name.
            let before = expr[..start].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(open) = expr[from..].find('[') {
                let open = from + open;
                if let Some(close) = expr[open..].find(']') {
                    out.push(expr[open + 1..open + close].to_owned());
                }
            }
        }
    }
    out
}

/// Each series selector of an expression, with its braces (`name{…}`, `{…}` or a bare
/// `name`): identifiers outside strings, braces and ranges that are not followed by `(`
/// (functions, aggregations), not keywords, and not the labels of a `by (…)`-like list.
fn selectors(expr: &str) -> Vec<String> {
    const KEYWORDS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
    ];
    // Aggregations may put `by (…)` between their name and their parenthesis.
    const AGGREGATIONS: &[&str] = &[
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut label_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '{' {
            let end = braces_end(&chars, i);
            out.push(chars[i..end].iter().collect());
            i = end;
        } else if c == ')' {
            label_list = false;
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let called = chars.get(next) == Some(&'(') || AGGREGATIONS.contains(&word.as_str());
            let keyword = KEYWORDS.contains(&word.to_ascii_lowercase().as_str());
            if keyword && called && !["and", "or", "unless", "bool"].contains(&word.as_str()) {
                label_list = true;
                i = next + 1;
            } else if label_list || keyword || called {
                // a label of a by (…) list, a keyword, or a function
            } else if chars.get(next) == Some(&'{') {
                let end = braces_end(&chars, next);
                out.push(format!(
                    "{word}{}",
                    chars[next..end].iter().collect::<String>()
                ));
                i = end;
            } else if !(start > 0 && chars[start - 1].is_ascii_digit()) {
                out.push(word);
            }
        } else if c.is_ascii_digit() {
            // numbers and durations (5m, 1h, 1e3)
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The index after the `}` that closes the `{` at `open`, skipping quoted strings.
fn braces_end(chars: &[char], open: usize) -> usize {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != '}' {
        if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
        }
        i += 1;
    }
    (i + 1).min(chars.len())
}

/// Every PromQL text of the dashboard with where it is: panel targets, and the selector
/// of each `label_values(selector, label)` variable query.
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                let at = format!("{} target {}", name(p), t["refId"].as_str().unwrap_or("?"));
                out.push((at, expr.to_owned()));
            }
        }
    }
    for v in variables(d) {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .unwrap_or("");
            let at = format!("variable {}", v["name"].as_str().unwrap_or("?"));
            match q
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .and_then(|s| s.rsplit_once(','))
            {
                Some((selector, _)) => out.push((at, selector.to_owned())),
                None => out.push((at, q.to_owned())),
            }
        }
    }
    out
}

/// Grafana's variables replaced by values of their kind: the range ones by durations,
/// the template ones (inside regex matchers) by ".+".
fn substitute(expr: &str) -> String {
    let mut out = expr
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h");
    for v in ["${datasource}", "${job}", "$datasource", "$job"] {
        out = out.replace(v, ".+");
    }
    out
}

/// `target-promql-rule` and `template-label-promql-rule`: each query, made a recording
/// rule of its own, must pass `promtool check rules`.
fn promql_problems(d: &Value) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("be-dashboard-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = Vec::new();
    for (at, expr) in queries(d) {
        let file = dir.join("rules.yml");
        let rules = format!(
            "groups:\n  - name: dashboard\n    rules:\n      - record: dashboard:query\n        expr: {}\n",
            serde_json::to_string(&substitute(&expr)).unwrap()
        );
        std::fs::write(&file, rules).unwrap();
        let run = Command::new("promtool")
            .args(["check", "rules"])
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("promtool: {e} (install Debian's prometheus)"));
        if !run.status.success() {
            let why = String::from_utf8_lossy(&run.stderr).trim().to_owned();
            let rule = if at.starts_with("variable") {
                "template-label-promql-rule"
            } else {
                "target-promql-rule"
            };
            out.push(format!("{rule}: {at}: {expr}: {why}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

#[test]
fn the_dashboard_passes_every_rule() {
    let path = std::env::var_os("DASHBOARD")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("monitoring/grafana-dashboard.json"));
    let d = load(&path);
    let mut problems = lint(&d);
    problems.extend(promql_problems(&d));
    assert!(
        problems.is_empty(),
        "{}:\n{}",
        path.display(),
        problems.join("\n")
    );
    // It lints something: the shipped panels and their queries.
    if std::env::var_os("DASHBOARD").is_none() {
        assert!(panels(&d).len() >= 9, "{}", panels(&d).len());
        assert!(queries(&d).len() >= 15, "{:?}", queries(&d));
    }
}

/// A copy of the shipped dashboard broken by `f`.
fn broken(f: impl FnOnce(&mut Value)) -> Value {
    let mut d = shipped();
    f(&mut d);
    d
}

fn panel_mut<'a>(d: &'a mut Value, title: &str) -> &'a mut Value {
    d["panels"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title}"))
}

fn var_mut<'a>(d: &'a mut Value, name: &str) -> &'a mut Value {
    d["templating"]["list"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|v| v["name"] == name)
        .unwrap()
}

#[test]
fn each_rule_catches_a_dashboard_broken_on_purpose() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "the datasource variable removed",
            broken(|d| {
                d["templating"]["list"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|v| v["name"] != "datasource");
            }),
            vec!["template-datasource-rule: dashboard: no datasource variable"],
        ),
        (
            "the datasource variable for Loki",
            broken(|d| var_mut(d, "datasource")["query"] = json!("loki")),
            vec![
                r#"template-datasource-rule: variable datasource: type "datasource" query "loki", want type datasource query prometheus"#,
            ],
        ),
        (
            "the job variable single-valued",
            broken(|d| var_mut(d, "job")["multi"] = json!(false)),
            vec!["template-job-rule: variable job: must be multi-value with All"],
        ),
        (
            "a panel on a fixed data source",
            broken(|d| panel_mut(d, "Poison")["datasource"]["uid"] = json!("prod-prometheus")),
            vec![
                r#"panel-datasource-rule: panel 6 "Poison": data source {"type":"prometheus","uid":"prod-prometheus"}"#,
            ],
        ),
        (
            "a target on a fixed data source",
            broken(|d| {
                panel_mut(d, "Poison")["targets"][1]["datasource"]["uid"] = json!("prod-prometheus")
            }),
            vec![
                r#"panel-datasource-rule: panel 6 "Poison" target B: data source {"type":"prometheus","uid":"prod-prometheus"}"#,
            ],
        ),
        (
            "a panel without a description",
            broken(|d| panel_mut(d, "Outbox lag")["description"] = json!(" ")),
            vec![r#"panel-title-description-rule: panel 7 "Outbox lag": no description"#],
        ),
        (
            "a panel without a unit",
            broken(|d| {
                panel_mut(d, "Cycle duration")["fieldConfig"]["defaults"]
                    .as_object_mut()
                    .unwrap()
                    .remove("unit");
            }),
            vec![r#"panel-units-rule: panel 9 "Cycle duration": no unit"#],
        ),
        (
            "two panels with one id",
            broken(|d| panel_mut(d, "Poison")["id"] = json!(5)),
            vec![r#"panel-id-unique: panel 5 "Poison": id missing or used twice"#],
        ),
        (
            "a rate over a fixed range",
            broken(|d| {
                panel_mut(d, "Expiries per phase")["targets"][0]["expr"] = json!(
                    r#"sum by (phase) (rate(crm_booking_expiration_items{job=~"$job", step="run-once"}[5m]))"#
                )
            }),
            vec![
                r#"target-rate-interval-rule: panel 4 "Expiries per phase" target A: [5m], want [$__rate_interval]"#,
            ],
        ),
        (
            "a selector without the job matcher",
            broken(|d| {
                panel_mut(d, "Outbox lag")["targets"][2]["expr"] =
                    json!(r#"sum(crm_booking_expiration_outbox_failed{step="relay-outbox"})"#)
            }),
            vec![
                r#"target-job-rule: panel 7 "Outbox lag" target C: crm_booking_expiration_outbox_failed{step="relay-outbox"} has no job=~"$job""#,
            ],
        ),
        (
            "a bare metric name",
            broken(|d| {
                panel_mut(d, "Cycle outcomes")["targets"][1]["expr"] = json!(
                    "time() - max by (step) (crm_booking_expiration_last_success_timestamp_seconds)"
                )
            }),
            vec![
                r#"target-job-rule: panel 3 "Cycle outcomes" target B: crm_booking_expiration_last_success_timestamp_seconds has no job=~"$job""#,
            ],
        ),
    ];
    for (what, d, want) in cases {
        assert_eq!(lint(&d), want, "{what}");
    }
    assert!(lint(&shipped()).is_empty());
}

#[test]
fn promtool_catches_a_query_that_does_not_parse() {
    let bad = broken(|d| {
        panel_mut(d, "Poison")["targets"][0]["expr"] =
            json!(r#"sum(crm_booking_expiration_poison{job=~"$job", step="run-once"}"#);
        var_mut(d, "job")["query"]["query"] =
            json!("label_values(crm_booking_expiration_errors{job=}, job)");
    });
    let problems = promql_problems(&bad);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].starts_with(
            r#"target-promql-rule: panel 6 "Poison" target A: sum(crm_booking_expiration_poison"#
        ),
        "{problems:#?}"
    );
    assert!(problems[0].contains("parse error"), "{problems:#?}");
    assert!(
        problems[1].starts_with(
            "template-label-promql-rule: variable job: crm_booking_expiration_errors{job=}"
        ),
        "{problems:#?}"
    );
    assert!(promql_problems(&shipped()).is_empty());
}

#[test]
fn selectors_are_found_outside_strings_ranges_and_label_lists() {
    assert_eq!(
        selectors(
            r#"histogram_quantile(0.99, sum by (phase, le) (sum_over_time(a_bucket{job=~"$job", x="}{"}[15m]))) / b + on (job) group_left (step) c{job=~"$job"} > bool 1e3"#
        ),
        [r#"a_bucket{job=~"$job", x="}{"}"#, "b", r#"c{job=~"$job"}"#]
    );
    assert_eq!(
        rate_ranges("rate(a[5m]) + irate(b[$__rate_interval]) + increase(c[1h])"),
        ["5m", "$__rate_interval", "1h"]
    );
}
