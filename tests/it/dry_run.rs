//! `dry-run --as-of T` against a real PostgreSQL: it lists what a cycle at T would
//! expire and publish, what the guard would refuse and what sits in quarantine, with
//! the same selection and decision as run-once, and never writes or waits on a lock.
//!
//! Here: the helpers the files below share (a run's lines by kind, deadlines set and
//! read); `selection` holds what it lists against what run-once expires,
//! `rejected_and_quarantined` the rows the guard refuses and those in quarantine,
//! `writes_and_locks` that it writes nothing and waits on no lock, `as_of_and_exit_codes`
//! the `--as-of` values and the exit codes of failures, `table` the human table.

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, BTreeSet};

use booking_expire::testing::cli::{AsOf, parse_as_of};
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use common::*;
use serde_json::{Value, json};
use uuid::Uuid;

mod as_of_and_exit_codes;
mod rejected_and_quarantined;
mod selection;
mod table;
mod writes_and_locks;

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The lines of a `dry-run --json`, by kind.
#[derive(Debug)]
struct Lines {
    expiries: Vec<Value>,
    rejected: Vec<Value>,
    quarantined: Vec<Value>,
    summary: Value,
}

impl Lines {
    fn of(run: &Run) -> Self {
        assert_eq!(run.code, 0, "dry-run failed:\n{}", run.stderr);
        let mut all = json_lines(&run.stdout);
        let summary = all.pop().expect("a summary line")["Summary"].clone();
        assert!(summary.is_object(), "the last line is the summary");
        let mut lines = Lines {
            expiries: Vec::new(),
            rejected: Vec::new(),
            quarantined: Vec::new(),
            summary,
        };
        for line in all {
            if line.get("Event").is_some() {
                lines.expiries.push(line);
            } else if line.get("Rejected").is_some() {
                lines.rejected.push(line);
            } else if line.get("Quarantined").is_some() {
                lines.quarantined.push(line);
            } else {
                panic!("unknown line {line}");
            }
        }
        lines
    }

    /// BookingIds of the expiries of a phase, in output (= claim) order.
    fn expiring(&self, phase: &str) -> Vec<Uuid> {
        ids(&self.expiries, phase)
    }

    /// (WouldExpire, Rejected, Quarantined, LeftForLaterCycles) of a phase.
    fn counts(&self, phase: &str) -> (u64, u64, u64, u64) {
        let s = &self.summary[phase];
        let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
        (
            n("WouldExpire"),
            n("Rejected"),
            n("Quarantined"),
            n("LeftForLaterCycles"),
        )
    }
}

fn ids(lines: &[Value], phase: &str) -> Vec<Uuid> {
    lines
        .iter()
        .filter(|l| l["Phase"] == phase)
        .map(|l| l["BookingId"].as_str().unwrap().parse().unwrap())
        .collect()
}

fn dry_run(db: &TestDb, as_of: &str, extra: &[&str]) -> Lines {
    let mut args = vec!["dry-run", "--as-of", as_of, "--json"];
    args.extend_from_slice(extra);
    Lines::of(&db.run(&args))
}

/// Sets a booking's deadline of a phase to an exact moment.
fn set_deadline(c: &mut postgres::Client, id: Uuid, column: &str, at: DateTime<Utc>) {
    c.execute(
        &format!("UPDATE crm.bookings SET {column} = $2 WHERE id = $1"),
        &[&id, &at],
    )
    .unwrap();
}

fn deadline(c: &mut postgres::Client, id: Uuid, column: &str) -> DateTime<Utc> {
    c.query_one(
        &format!("SELECT {column} FROM crm.bookings WHERE id = $1"),
        &[&id],
    )
    .unwrap()
    .get(0)
}
