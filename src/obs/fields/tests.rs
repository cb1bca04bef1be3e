//! The vocabulary's tests: every key of src/ and the member crates is in it, and the
//! reference lists it.
use std::collections::BTreeSet;

use super::*;
use crate::source::{Token, tokens};

const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// Every key of a `log` macro's key-values and every attribute of a span or event
/// in `source`: (line, key).
fn keys_of(source: &str) -> Vec<(usize, String)> {
    let t = tokens(source);
    let ident = |i: usize| match t.get(i) {
        Some((_, Token::Ident(n))) => Some(n.as_str()),
        _ => None,
    };
    let punct = |i: usize, c: char| matches!(t.get(i), Some((_, Token::Punct(p))) if *p == c);
    let mut keys = Vec::new();
    for i in 0..t.len() {
        // A log macro: `info!(k = v, k2:% = v2; "message")`.
        if ident(i).is_some_and(|n| LEVELS.contains(&n)) && punct(i + 1, '!') && punct(i + 2, '(') {
            let mut depth = 0;
            let mut item_start = true;
            let mut j = i + 3;
            let mut items = Vec::new();
            while j < t.len() {
                match &t[j].1 {
                    Token::Punct('(' | '[' | '{') => depth += 1,
                    Token::Punct(')' | ']' | '}') if depth == 0 => break,
                    Token::Punct(')' | ']' | '}') => depth -= 1,
                    Token::Punct(',') if depth == 0 => item_start = true,
                    Token::Punct(';') if depth == 0 => {
                        keys.append(&mut items);
                        break;
                    }
                    Token::Ident(n) if depth == 0 && item_start => {
                        items.push((t[j].0, n.clone()));
                        item_start = false;
                    }
                    _ => item_start = false,
                }
                j += 1;
            }
        }
        // A span's or an event's attribute: `Attr::new("Key", …)`.
        if matches!(ident(i), Some("Attr" | "KeyValue"))
            && matches!(t.get(i + 1), Some((_, Token::Path)))
            && ident(i + 2) == Some("new")
            && punct(i + 3, '(')
            && let Some((line, Token::Str(key))) = t.get(i + 4)
        {
            keys.push((*line, key.clone()));
        }
    }
    keys
}

/// Written as the vocabulary wants it: PascalCase, or an OpenTelemetry name
/// (lowercase words joined by dots).
fn well_written(key: &str) -> bool {
    let pascal = key.starts_with(|c: char| c.is_ascii_uppercase())
        && key.chars().all(|c| c.is_ascii_alphanumeric());
    let otel = key.contains('.')
        && key
            .split('.')
            .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
    pascal || otel
}

/// What is wrong with the keys of `files` (path from the workspace's root → text).
fn misnamed(files: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let known: BTreeSet<&str> = FIELDS.iter().map(|(name, _)| *name).collect();
    let mut found = Vec::new();
    for (path, source) in files {
        for (line, key) in keys_of(source) {
            if !well_written(&key) {
                found.push(format!("{path}:{line}: `{key}` is not PascalCase"));
            } else if !known.contains(key.as_str()) {
                found.push(format!(
                    "{path}:{line}: `{key}` is not in obs::fields::FIELDS"
                ));
            }
        }
    }
    found
}

#[test]
fn every_log_field_and_span_attribute_of_src_is_in_the_vocabulary() {
    let files = crate::source::files();
    let wrong = misnamed(&files);
    assert!(
        wrong.is_empty(),
        "log and trace keys:\n{}",
        wrong.join("\n")
    );
    // And nothing in it that the code never writes.
    let used: BTreeSet<String> = files
        .values()
        .flat_map(|s| keys_of(s))
        .map(|(_, k)| k)
        .collect();
    let unused: Vec<&str> = FIELDS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !used.contains(*name) && !ENVELOPE.contains(name))
        .collect();
    assert!(
        unused.is_empty(),
        "in obs::fields::FIELDS, written nowhere: {unused:?}"
    );
}

#[test]
fn a_key_out_of_the_vocabulary_fails_naming_its_place() {
    let files = [(
        "src/relay.rs".to_owned(),
        "fn f() {\n    // info!(nothing = 1; \"a comment\");\n    \
         info!(Phase:% = p, purged = n, Signal = s; \"done {}\", x);\n    \
         warn!(\"no fields {}\", y);\n    \
         log::error!(Error = e, Sent = 3, step; \"failed\");\n    \
         trace::span(\"s\", vec![Attr::new(\"Phase\", 1), Attr::new(\"messaging.system\", 2),\n        \
         KeyValue::new(\"Bogus\", 3)]);\n}\n"
            .to_owned(),
    )]
    .into();
    assert_eq!(
        misnamed(&files),
        [
            "src/relay.rs:3: `purged` is not PascalCase",
            "src/relay.rs:5: `step` is not PascalCase",
            "src/relay.rs:7: `Bogus` is not in obs::fields::FIELDS",
        ]
    );
}

#[test]
fn the_reference_lists_the_vocabulary() {
    let root = crate::source::root();
    let page = std::fs::read_to_string(root.join(PAGE)).unwrap();
    let start = page
        .find(TABLE_HEADER)
        .unwrap_or_else(|| panic!("{PAGE}: no table opening with {TABLE_HEADER}"));
    let end = page[start..]
        .find("\n\n")
        .map_or(page.len(), |e| start + e + 1);
    assert!(
        page[start..end] == table(),
        "{PAGE}: the table of fields differs from obs::fields::FIELDS; it is:\n{}",
        table()
    );
}
