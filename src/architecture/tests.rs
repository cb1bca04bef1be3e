//! The rules' tests: the page's rules held against the workspace's source, and each
//! kind of import and rule on small sources of their own.

use std::fs;
use std::path::PathBuf;

use super::*;

fn manifest() -> PathBuf {
    crate::source::root()
}

fn page_rules() -> (Vec<Rule>, Vec<Rule>) {
    let page = fs::read_to_string(manifest().join(PAGE)).unwrap();
    (
        rules_in(&page, "never").unwrap(),
        rules_in(&page, "pending").unwrap(),
    )
}

fn rules(lines: &[&str]) -> Vec<Rule> {
    lines.iter().map(|l| Rule::parse(l).unwrap()).collect()
}

/// Files by their path: relative to `src/`, or from the root for `crates/…`.
fn files(sources: &[(&str, &str)]) -> BTreeMap<String, String> {
    sources
        .iter()
        .map(|(p, s)| {
            let path = if p.starts_with("crates/") {
                (*p).to_owned()
            } else {
                format!("src/{p}")
            };
            (path, (*s).to_owned())
        })
        .collect()
}

#[test]
fn the_code_keeps_the_rules_of_the_architecture_page() {
    let (never, pending) = page_rules();
    assert!(
        never
            .iter()
            .any(|r| r.kind == Kind::NoCycles { within: None }),
        "{never:?}"
    );
    let sources = crate::source::files();
    // Every name is a room, a dependency or a member crate's `driver` feature (its
    // `ROOM::driver` module): a misspelt one would forbid nothing.
    let rooms = rooms_of(&sources);
    let manifest_text = fs::read_to_string(manifest().join("Cargo.toml")).unwrap();
    let has_driver = |name: &str| {
        name.strip_suffix("::driver").is_some_and(|room| {
            let member = manifest().join("crates").join(room).join("Cargo.toml");
            fs::read_to_string(member).is_ok_and(|t| t.contains("\n[features]\ndriver = "))
        })
    };
    for rule in never.iter().chain(&pending) {
        let names = match &rule.kind {
            Kind::Never { subject, object } => vec![subject, object],
            Kind::NoSql { subject } => vec![subject],
            Kind::NoCycles { within: None } => vec![],
            Kind::NoCycles {
                within: Some(names),
            } => vec![names],
        };
        for set in names {
            let (Names::Only(listed) | Names::AllBut(listed)) = set;
            for name in listed {
                assert!(
                    rooms.contains(name)
                        || manifest_text.contains(&format!("\n{name} = "))
                        || has_driver(name),
                    "{PAGE}: \"{}\" names {name}, neither a room nor a dependency",
                    rule.text
                );
            }
        }
    }
    assert!(
        sources.contains_key("src/obs/metrics.rs"),
        "{:?}",
        sources.keys()
    );
    // Pending: printed, not failed on (a rule that holds now can move to `never`).
    for rule in &pending {
        let broken = violations(&sources, std::slice::from_ref(rule), &[]);
        if broken.is_empty() {
            println!(
                "pending rule holds now, move it to never: \"{}\"",
                rule.text
            );
        }
        for v in broken {
            println!("pending: {v}");
        }
    }
    let broken = violations(&sources, &never, &pending);
    assert!(
        broken.is_empty(),
        "{PAGE}'s rules are broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn a_wrong_import_fails_naming_the_file_the_import_and_the_rule() {
    let sources = files(&[
        (
            "domain/plan.rs",
            "use chrono::Utc;\nuse crate::clock::seconds;\nuse crate::store::Backlog;\n",
        ),
        ("store/mod.rs", "pub struct Backlog;\n"),
        ("clock.rs", ""),
    ]);
    let never = rules(&["domain never imports anything but clock"]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "src/domain/plan.rs:3: `crate::store::Backlog` (domain → store) breaks \"domain \
             never imports anything but clock\""
        ]
    );
}

#[test]
fn use_groups_the_binary_super_and_named_crates_are_imports_comments_and_strings_are_not() {
    let sources = files(&[
        (
            "obs/gauges.rs",
            "use crate::{clock, cycle::CycleResult};\n\
             // use crate::store::Backlog;\n\
             /* crate::relay */ const S: &str = \"crate::report::x\";\n\
             const C: char = '{';\n\
             mod tests {\n    use super::super::super::ops::Paused;\n    use super::*;\n}\n\
             fn f() { rdkafka::config::ClientConfig::new(); }\n",
        ),
        ("main.rs", "use booking_expire::app;\n"),
        ("app.rs", ""),
        ("clock.rs", ""),
        ("cycle.rs", ""),
        ("ops/mod.rs", ""),
    ]);
    let never = rules(&[
        "obs never imports cycle relay report ops store",
        "anything but kafka never imports rdkafka",
        "anything but main, config, reference never imports app",
        "main never imports app",
    ]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "src/main.rs:1: `booking_expire::app` (main → app) breaks \"main never imports app\"",
            "src/obs/gauges.rs:1: `crate::cycle::CycleResult` (obs → cycle) breaks \"obs never \
             imports cycle relay report ops store\"",
            "src/obs/gauges.rs:6: `super::super::super::ops::Paused` (obs → ops) breaks \"obs \
             never imports cycle relay report ops store\"",
            "src/obs/gauges.rs:9: `rdkafka::config::ClientConfig::new` (obs → rdkafka) breaks \
             \"anything but kafka never imports rdkafka\"",
        ]
    );
}

#[test]
fn a_cycle_of_rooms_is_named_once_with_where_each_room_imports_the_next() {
    let sources = files(&[
        ("ops/mod.rs", "use crate::report::format;\n"),
        ("report/mod.rs", "\nuse crate::ops::pause::Paused;\n"),
    ]);
    let never = rules(&["no import cycles"]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "ops → report → ops breaks \"no import cycles\": ops → report at \
             src/ops/mod.rs:1: `crate::report::format`; report → ops at src/report/mod.rs:2: \
             `crate::ops::pause::Paused`",
            "src/ops/mod.rs → src/report/mod.rs → src/ops/mod.rs breaks \"no import cycles\": \
             src/ops/mod.rs:1 `crate::report::format`; src/report/mod.rs:2 \
             `crate::ops::pause::Paused`",
        ]
    );
    // While one of its edges is pending, the cycle is too, and the files' circle.
    let pending = rules(&["report never imports ops"]);
    assert!(violations(&sources, &never, &pending).is_empty());
}

#[test]
fn sql_outside_its_room_is_found_in_string_literals() {
    let sources = files(&[
        (
            "cycle.rs",
            "fn f() { c.batch_execute(\"COMMIT AND CHAIN\"); }\n",
        ),
        ("store/outbox.rs", "const Q: &str = \"SELECT 1\";\n"),
        (
            "cli.rs",
            "/// SELECT in a comment\nconst H: &str = \"select rows\";\n",
        ),
    ]);
    let never = rules(&["anything but store never holds SQL"]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "src/cycle.rs:1: `\"COMMIT AND CHAIN…\"` (cycle → SQL) breaks \"anything but \
          store never holds SQL\""
        ]
    );
}

#[test]
fn a_member_crate_is_a_room_whose_own_paths_stay_in_it_but_whose_sql_and_crates_count() {
    let sources = files(&[
        (
            "crates/kafka/src/topic.rs",
            "use crate::store::Check;\nuse super::relay;\nconst Q: &str = \"SELECT 1\";\n",
        ),
        ("crates/kafka/src/store.rs", ""),
        ("store/mod.rs", ""),
        ("relay.rs", ""),
        ("cycle.rs", "use booking_expire_kafka::KafkaProducer;\n"),
        (
            "crates/store/src/lib.rs",
            "use booking_expire_domain as domain;\nfn f() { booking_expire_kafka::g(); }\n",
        ),
        (
            "crates/domain/src/lib.rs",
            "use booking_expire_store as s;\n",
        ),
    ]);
    let never = rules(&[
        "kafka never imports store relay",
        "cycle never imports kafka",
        "store never imports anything but domain",
        "anything but store never holds SQL",
        "no import cycles",
    ]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "crates/kafka/src/topic.rs:3: `\"SELECT 1…\"` (kafka → SQL) breaks \"anything \
             but store never holds SQL\"",
            "crates/store/src/lib.rs:2: `booking_expire_kafka::g` (store → kafka) breaks \
             \"store never imports anything but domain\"",
            "src/cycle.rs:1: `booking_expire_kafka::KafkaProducer` (cycle → kafka) breaks \
             \"cycle never imports kafka\"",
            "domain → store → domain breaks \"no import cycles\": domain → store at \
             crates/domain/src/lib.rs:1: `booking_expire_store`; store → domain at \
             crates/store/src/lib.rs:1: `booking_expire_domain`",
        ]
    );
}

#[test]
fn a_use_of_a_member_crates_driver_module_is_an_import_of_it() {
    let sources = files(&[
        ("lib.rs", "pub use booking_expire_store as store;\n"),
        (
            "relay/mod.rs",
            "use crate::store::driver::postgres::Client;\n\
             use booking_expire_kafka::{driver, Stop};\n\
             use crate::store::Db;\n",
        ),
        (
            "main.rs",
            "fn f() { booking_expire::store::driver::native_tls::TlsConnector::new(); }\n",
        ),
        (
            "crates/store/src/lib.rs",
            "pub mod driver {\n    pub use native_tls;\n    pub use postgres;\n}\npub struct Db;\n",
        ),
        (
            "crates/kafka/src/lib.rs",
            "pub mod driver {\n    pub use rdkafka;\n}\npub struct Stop;\n",
        ),
    ]);
    let never = rules(&["anything never imports store::driver kafka::driver"]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "src/main.rs:1: `booking_expire::store::driver::native_tls::TlsConnector::new` \
             (main → store::driver) breaks \"anything never imports store::driver kafka::driver\"",
            "src/relay/mod.rs:1: `crate::store::driver::postgres::Client` (relay → \
             store::driver) breaks \"anything never imports store::driver kafka::driver\"",
            "src/relay/mod.rs:2: `booking_expire_kafka::driver` (relay → kafka::driver) \
             breaks \"anything never imports store::driver kafka::driver\"",
        ]
    );
}

#[test]
fn a_circle_of_files_is_named_with_where_each_imports_the_next_unless_pending() {
    let sources = files(&[
        ("lib.rs", "mod cycle;\nmod relay;\n"),
        (
            "cycle/mod.rs",
            "mod batch;\npub struct Cycle;\nfn f() { batch::run(); }\n",
        ),
        (
            "cycle/batch.rs",
            "use super::Cycle;\npub fn run() -> Cycle { Cycle }\n",
        ),
        (
            "relay/mod.rs",
            "mod marker;\npub struct Run;\nfn f() { marker::mark(); }\n",
        ),
        (
            "relay/marker.rs",
            "\npub fn mark() -> super::Run { super::Run }\n",
        ),
    ]);
    let never = rules(&["no import cycles"]);
    assert_eq!(
        violations(&sources, &never, &[]),
        [
            "src/cycle/batch.rs → src/cycle/mod.rs → src/cycle/batch.rs breaks \"no import \
             cycles\": src/cycle/batch.rs:1 `super::Cycle`; src/cycle/mod.rs:3 `batch::run`",
            "src/relay/marker.rs → src/relay/mod.rs → src/relay/marker.rs breaks \"no import \
             cycles\": src/relay/marker.rs:2 `super::Run`; src/relay/mod.rs:3 `marker::mark`",
        ]
    );
    // A pending `within` rule: its circles are printed by it, not failed on by `never`.
    let pending = rules(&["no import cycles within cycle"]);
    assert_eq!(
        violations(&sources, &pending, &[]),
        [
            "src/cycle/batch.rs → src/cycle/mod.rs → src/cycle/batch.rs breaks \"no import \
             cycles within cycle\": src/cycle/batch.rs:1 `super::Cycle`; src/cycle/mod.rs:3 \
             `batch::run`",
        ]
    );
    let broken = violations(&sources, &never, &pending);
    assert_eq!(broken.len(), 1);
    assert!(
        broken[0].starts_with("src/relay/marker.rs → "),
        "{broken:?}"
    );
}

#[test]
fn a_line_that_is_no_rule_is_refused() {
    assert!(Rule::parse("domain may import store").is_err());
    assert_eq!(
        Rule::parse("anything but main config never imports app")
            .unwrap()
            .kind,
        Kind::Never {
            subject: Names::AllBut(["main", "config"].map(str::to_owned).into()),
            object: Names::Only(["app"].map(str::to_owned).into()),
        }
    );
}
