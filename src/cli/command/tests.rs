//! The command line's definitions held: consistent for clap, every subcommand's
//! examples parse, every value read trimmed, the version line's schema.

use super::*;
use clap::CommandFactory;

#[test]
fn the_version_line_names_the_schema_built_in() {
    assert_eq!(
        env!("SCHEMA_VERSION_BUILT_IN"),
        crate::store::migrate::latest().to_string(),
        "build.rs counts other files than the store's list"
    );
}

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

/// A command line split as a POSIX shell does for what the examples use: words
/// separated by spaces, double quotes keeping spaces.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut started = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes: {line}");
    if started {
        words.push(word);
    }
    words
}

#[test]
fn every_subcommands_long_help_ends_with_examples_that_parse() {
    let cmd = Cli::command();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_name();
        let help = sub
            .get_after_long_help()
            .unwrap_or_else(|| panic!("{name}: no long help after the flags"))
            .to_string();
        let (_, examples) = help
            .split_once("\n\nExamples:\n")
            .unwrap_or_else(|| panic!("{name}: no examples"));
        let lines: Vec<&str> = examples.lines().collect();
        let commands: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("  booking-expire "))
            .collect();
        assert!(
            (2..=4).contains(&commands.len()),
            "{name}: {} examples",
            commands.len()
        );
        // Each command line says what it is for, in the comment line above it.
        assert_eq!(lines.len(), 2 * commands.len(), "{name}: {examples}");
        for pair in lines.chunks(2) {
            assert!(pair[0].starts_with("  # "), "{name}: {pair:?}");
        }
        for line in commands {
            let mut argv = vec!["booking-expire".to_owned()];
            argv.extend(shell_words(line));
            assert_eq!(argv[1], name, "{name}: {line}");
            if let Err(e) = Cli::try_parse_from(&argv) {
                panic!("{name}: the example `{line}` does not parse: {e}");
            }
        }
    }
}

/// Every value, of every flag and positional of every subcommand, is read without
/// the whitespace around it: parsed padded, the command line is the same as parsed
/// plain (the environment's values go through the same parsers).
#[test]
fn every_value_of_every_subcommand_is_read_trimmed() {
    let bases: &[&[&str]] = &[
        &["run-once"],
        &["relay-outbox"],
        &["dry-run", "--as-of", "now"],
        &["backlog"],
        &["explain", "bb7f5ae6"],
        &["pause", "run-once", "--reason", "INC-7"],
        &["resume", "run-once", "--reason", "INC-7"],
        &["republish", "--booking", "bb7f5ae6", "--reason", "INC-7"],
        &["retry-failed", "--all", "--reason", "INC-7"],
        &["migrate"],
        &["migrate", "status"],
        &["completions", "bash"],
    ];
    // Flags without a default or a choice: a value each accepts.
    let sample = |id: &str| match id {
        "as_of" | "since" | "until" => "2026-11-29T18:00:00Z",
        "ids" | "booking" | "booking_id" => "bb7f5ae6",
        "fail_above" | "target" | "otlp_timeout" => "7",
        "otel_sdk_disabled" => "true",
        id if id.ends_with("_file") => "/etc/ca.pem",
        _ => "some-text",
    };
    let parsed = |argv: &[String]| {
        let argv = std::iter::once("booking-expire".to_owned()).chain(argv.iter().cloned());
        Cli::try_parse_from(argv).map(|cli| format!("{cli:?}"))
    };
    let padded = |v: &str| format!(" {v}\n\t");
    let mut root = Cli::command();
    root.build();
    let mut checked = 0;
    for base in bases {
        let plain: Vec<String> = base.iter().map(|w| (*w).to_owned()).collect();
        let mut cmd = &root;
        let mut depth = 0;
        while let Some(sub) = base.get(depth).and_then(|name| cmd.find_subcommand(name)) {
            cmd = sub;
            depth += 1;
        }
        // The base's own values and positionals, padded.
        let pad_base: Vec<String> = plain
            .iter()
            .enumerate()
            .map(|(i, w)| match i < depth || w.starts_with('-') {
                true => w.clone(),
                false => padded(w),
            })
            .collect();
        assert_eq!(
            parsed(&pad_base).unwrap(),
            parsed(&plain).unwrap(),
            "{pad_base:?}"
        );
        for arg in cmd.get_arguments() {
            let (Some(long), true) = (arg.get_long(), arg.get_action().takes_values()) else {
                continue;
            };
            let id = arg.get_id().as_str();
            let value = arg
                .get_default_values()
                .first()
                .map(|v| v.to_string_lossy().into_owned())
                .or_else(|| {
                    arg.get_possible_values()
                        .first()
                        .map(|p| p.get_name().to_owned())
                })
                .unwrap_or_else(|| sample(id).to_owned());
            let with = |v: &str| {
                let mut argv = plain.clone();
                argv.push(format!("--{long}={v}"));
                argv
            };
            let Ok(expected) = parsed(&with(&value)) else {
                continue; // a flag the base already has, or one it excludes
            };
            assert_eq!(
                parsed(&with(&padded(&value))).ok(),
                Some(expected),
                "--{long}"
            );
            checked += 1;
        }
    }
    println!("{checked} flags checked");
    assert!(checked >= 100, "{checked} flags checked");
}
