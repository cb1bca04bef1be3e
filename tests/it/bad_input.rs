//! Bad input: every flag and environment variable of every subcommand with empty,
//! negative, out-of-range, huge, hostile (SQL), very long and non-UTF-8 values must
//! give a clear error naming the input (exit 64 or 78), never a panic, and write
//! nothing. Then malformed rows in the table: unknown status text, NULL deadlines, a
//! version at its limit, handled as the docs describe, never a crash.
//!
//! Here: the hostile values and the helpers every kind of input shares; `flags` holds
//! the parsed flags and every argument clap knows, `free_text` the URLs, paths,
//! credentials, the login name and OpenTelemetry's text, `spelling_and_whitespace`
//! misspelt variables and values padded with whitespace, `json_logging` usage and
//! other errors under JSON logging, `rows` malformed rows and a relaxed schema.

use crate::common;
use crate::postgres;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::process::Command;

use clap::CommandFactory;
use common::*;
use serde_json::json;

mod flags;
mod free_text;
mod json_logging;
mod rows;
mod spelling_and_whitespace;

/// The hostile values every typed input gets, with a label for the failure message.
fn hostile_values() -> Vec<(&'static str, OsString)> {
    vec![
        ("empty", OsString::from("")),
        ("negative", OsString::from("-1")),
        ("zero", OsString::from("0")),
        ("huge", OsString::from("99999999999999999999")),
        ("sql", OsString::from("1; DROP TABLE crm.bookings")),
        ("quote", OsString::from("'); DELETE FROM crm.outbox; --")),
        ("fullwidth digit", OsString::from("５s")),
        ("100 KiB", OsString::from("9".repeat(100 * 1024))),
        (
            "non-UTF-8",
            OsString::from_vec(vec![b'5', 0xff, 0xfe, b's']),
        ),
    ]
}

/// What a subcommand needs besides the input under test to get past parsing.
fn base_args(subcommand: &str) -> Vec<&'static str> {
    match subcommand {
        "dry-run" => vec!["dry-run", "--as-of", "now"],
        "relay-outbox" => vec!["relay-outbox"],
        "run-once" => vec!["run-once"],
        "backlog" => vec!["backlog"],
        "explain" => vec!["explain", "00000000-0000-0000-0000-000000000000"],
        "pause" => vec!["pause", "run-once", "--reason", "test"],
        "resume" => vec!["resume", "run-once", "--reason", "test"],
        "republish" => vec![
            "republish",
            "--booking",
            "00000000-0000-0000-0000-000000000000",
            "--reason",
            "test",
        ],
        "retry-failed" => vec!["retry-failed", "--all", "--reason", "test"],
        "completions" => vec!["completions", "bash"],
        // A dry run: a value that got through would change nothing.
        "migrate" => vec!["migrate", "--dry-run"],
        "audit" => vec!["audit", "--since", "2000-01-01T00:00:00Z"],
        other => panic!("{other}"),
    }
}

/// Runs the binary with a clean environment plus `env`.
fn run(args: &[OsString], env: &[(&str, OsString)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    Run::of(cmd.output().unwrap())
}

fn assert_clean_failure(run: &Run, codes: &[i32], names: &[&str], what: &str) {
    assert!(
        codes.contains(&run.code),
        "{what}: exit {} not in {codes:?}: {}",
        run.code,
        tail(&run.stderr)
    );
    for bad in ["panicked", "stack backtrace", "RUST_BACKTRACE"] {
        assert!(!run.stderr.contains(bad), "{what}: {}", tail(&run.stderr));
    }
    assert!(
        names.iter().any(|n| run.stderr.contains(n)),
        "{what}: none of {names:?} named in: {}",
        tail(&run.stderr)
    );
    assert!(
        run.stdout.is_empty(),
        "{what}: stdout {:?}",
        tail(&run.stdout)
    );
}

/// The end of a long stderr, enough to see the error.
fn tail(s: &str) -> &str {
    let mut start = s.len().saturating_sub(600);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A database with overdue bookings and pending outbox rows: any run that got past
/// its input checks would change it.
fn tempting_database() -> (TestDb, postgres::Client, String) {
    let db = TestDb::new();
    let mut c = db.client();
    seed_many(&mut c, 6, |i| {
        if i % 2 == 0 {
            Seed::reserved(-600)
        } else {
            Seed::booked(-600)
        }
    });
    insert_outbox_rows(&mut c, OutboxState::Pending, &[60, 30]);
    let before = checksum(&mut c);
    (db, c, before)
}
