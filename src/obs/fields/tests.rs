//! The vocabulary's tests: every key of src/ and the member crates is in it, and the
//! reference lists it.
use std::collections::BTreeSet;

use super::*;
use booking_expire_layout::proc_macro2::{self, TokenTree};
use booking_expire_layout::source;

use source::{line_of, sequences, string_of, tokens};

const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// Every key of a `log` macro's key-values and every attribute of a span or event
/// in `source`: (line, key).
fn keys_of(source: &str) -> Vec<(usize, String)> {
    let mut keys = Vec::new();
    for t in sequences(tokens(source).expect("Rust")) {
        let ident = |i: usize| match t.get(i) {
            Some(TokenTree::Ident(n)) => Some(n.to_string()),
            _ => None,
        };
        let punct =
            |i: usize, c: char| matches!(t.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
        let parens = |i: usize| match t.get(i) {
            Some(TokenTree::Group(g)) if g.delimiter() == proc_macro2::Delimiter::Parenthesis => {
                Some(g.stream())
            }
            _ => None,
        };
        for i in 0..t.len() {
            // A log macro: `info!(k = v, k2:% = v2; "message")`.
            if ident(i).is_some_and(|n| LEVELS.contains(&n.as_str()))
                && punct(i + 1, '!')
                && let Some(args) = parens(i + 2)
            {
                let mut item_start = true;
                let mut items = Vec::new();
                for tree in args {
                    match &tree {
                        TokenTree::Punct(p) if p.as_char() == ',' => item_start = true,
                        TokenTree::Punct(p) if p.as_char() == ';' => {
                            keys.append(&mut items);
                            break;
                        }
                        TokenTree::Ident(n) if item_start => {
                            items.push((line_of(&tree), n.to_string()));
                            item_start = false;
                        }
                        _ => item_start = false,
                    }
                }
            }
            // A span's or an event's attribute: `Attr::new("Key", …)`.
            if matches!(ident(i).as_deref(), Some("Attr" | "KeyValue"))
                && punct(i + 1, ':')
                && punct(i + 2, ':')
                && ident(i + 3).as_deref() == Some("new")
                && let Some(args) = parens(i + 4)
                && let Some(first) = args.into_iter().next()
                && let TokenTree::Literal(key) = &first
                && let Some(key) = string_of(key)
            {
                keys.push((line_of(&first), key));
            }
        }
    }
    keys.sort();
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
    let files = source::files();
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
    let root = source::root();
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
