//! The crates' boundaries as the manifests draw them, read from `cargo metadata`: the
//! one crate that may list `rdkafka`, the one that may list `postgres`, and the pure
//! crates that list no I/O crate at all. The compiler then refuses every import across
//! them; this test refuses the manifest line that would open one, of any kind: the
//! integration tests reach the drivers through the owners' `driver` feature (their
//! re-exports), so a dev-dependency on a driver has no exception either.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

/// Each crate of the outside world and the one package that may list it.
const OWNERS: &[(&str, &str)] = &[
    ("rdkafka", "booking-expire-kafka"),
    ("postgres", "booking-expire-store"),
];

/// The pure crates: they do no I/O, so they list no crate that does (or logs).
const PURE: &[&str] = &["booking-expire-domain"];

/// The crates that do I/O (a database, a broker, HTTP, signals, a runtime) or log.
const IO_CRATES: &[&str] = &[
    "postgres",
    "tokio-postgres",
    "postgres-native-tls",
    "rdkafka",
    "reqwest",
    "native-tls",
    "tokio",
    "signal-hook",
    "opentelemetry-otlp",
    "env_logger",
    "log",
];

/// What breaks the boundaries in `metadata` (`cargo metadata --format-version 1`'s
/// JSON), one message each.
fn violations(metadata: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let packages = metadata["packages"]
        .as_array()
        .expect("cargo metadata's packages");
    for package in packages {
        let name = package["name"].as_str().unwrap_or_default();
        let listed = package["dependencies"].as_array().into_iter().flatten();
        for dependency in listed {
            let krate = dependency["name"].as_str().unwrap_or_default();
            let kind = dependency["kind"].as_str().unwrap_or("normal");
            if let Some((_, owner)) = OWNERS.iter().find(|(c, _)| *c == krate)
                && name != *owner
            {
                found.push(format!(
                    "{name} lists {krate} ({kind}): only {owner} may (crates/*/Cargo.toml, \
                     docs/architecture.md's \"The crates\")"
                ));
            }
            if PURE.contains(&name) && IO_CRATES.contains(&krate) {
                found.push(format!(
                    "{name} lists {krate} ({kind}): it is pure and lists no I/O crate"
                ));
            }
        }
    }
    found
}

#[test]
fn only_the_kafka_crate_lists_rdkafka_only_the_store_postgres_and_the_pure_crates_no_io() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(crate::source::root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: BTreeSet<&str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        [
            "booking-expire",
            "booking-expire-domain",
            "booking-expire-kafka",
            "booking-expire-store"
        ]
        .iter()
        .all(|p| names.contains(p)),
        "{names:?}"
    );
    let broken = violations(&metadata);
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn a_crate_listed_outside_its_owner_or_io_in_a_pure_crate_is_named() {
    let metadata = serde_json::json!({ "packages": [
        { "name": "booking-expire", "dependencies": [
            { "name": "rdkafka", "kind": null },
            { "name": "rdkafka", "kind": "dev" },
            { "name": "postgres", "kind": null },
            { "name": "postgres", "kind": "dev" },
        ]},
        { "name": "booking-expire-store", "dependencies": [
            { "name": "postgres", "kind": null },
        ]},
        { "name": "booking-expire-kafka", "dependencies": [
            { "name": "rdkafka", "kind": null },
            { "name": "postgres", "kind": "dev" },
        ]},
        { "name": "booking-expire-domain", "dependencies": [
            { "name": "chrono", "kind": null },
            { "name": "tokio", "kind": null },
        ]},
    ]});
    assert_eq!(
        violations(&metadata),
        [
            "booking-expire lists rdkafka (normal): only booking-expire-kafka may \
             (crates/*/Cargo.toml, docs/architecture.md's \"The crates\")",
            "booking-expire lists rdkafka (dev): only booking-expire-kafka may \
             (crates/*/Cargo.toml, docs/architecture.md's \"The crates\")",
            "booking-expire lists postgres (normal): only booking-expire-store may \
             (crates/*/Cargo.toml, docs/architecture.md's \"The crates\")",
            "booking-expire lists postgres (dev): only booking-expire-store may \
             (crates/*/Cargo.toml, docs/architecture.md's \"The crates\")",
            "booking-expire-kafka lists postgres (dev): only booking-expire-store may \
             (crates/*/Cargo.toml, docs/architecture.md's \"The crates\")",
            "booking-expire-domain lists tokio (normal): it is pure and lists no I/O crate",
        ]
    );
}
