//! The facts a writing command's preflight asks the database, in one round trip: one
//! simple-query batch reads the session's backend, the database clock, the command's
//! pause switch, the schema, whether the migrations' history can be read, and the
//! role's privileges (the history's rows, when there is one, in one more). `preflight` judges them, in its
//! own order; the reports check the schema alone the same way ([`check_schema`]).

use std::time::Instant;

use crate::error::Result;
use chrono::{DateTime, TimeDelta, Utc};
use postgres::{Client, SimpleQueryMessage, SimpleQueryRow};

use super::clock::ClockSkew;
use super::migrate::compat;
use super::ops::PauseRow;
use super::privileges;
use super::running::{pause_row, pause_statement};
use super::schema::{self, SchemaNeed};
use crate::Session;
use crate::domain::Worker;
use crate::error::{Context, Fault, StoreError};

/// What one preflight read found.
#[derive(Debug)]
pub struct Facts {
    /// `pg_backend_pid()` of the session: the pooler check compares it.
    pub backend_pid: i32,
    /// The database clock against the system clock, around the batch's round trip.
    pub skew: ClockSkew,
    /// Whether the role can read the pause switches (a schema not yet migrated, or a
    /// role without the grant, pauses nothing; the schema check names what is missing).
    pub pause_readable: bool,
    /// The worker's pause switch, when it is on.
    pub pause: Option<PauseRow>,
    need: SchemaNeed,
    answers: Vec<Vec<SimpleQueryRow>>,
    /// The migrations' history, as far as compatibility goes.
    history: Vec<compat::Row>,
}

impl Facts {
    /// The schema check, then the privilege check, as [`check_schema`] judges them.
    pub fn judge_schema(&self) -> Result<()> {
        judge(self.need, &self.answers, &self.history)
    }
}

/// Reads the facts of `worker`'s preflight for `need` in one round trip. Where the
/// pause switches cannot be read (no table, no grant), a second batch reads the rest.
#[allow(
    clippy::disallowed_methods,
    reason = "the clock guard reads the system clock beside the database's, on purpose; the round trip's time is real"
)]
pub fn read_facts(client: &mut Session, need: SchemaNeed, worker: Worker) -> Result<Facts> {
    let client = client.pg();
    let head = "SELECT pg_backend_pid()::text AS pid,
                       (extract(epoch FROM clock_timestamp()) * 1000000)::int8::text AS database_now_us,
                       (to_regclass('crm.booking_expiration_pause') IS NOT NULL
                        AND has_table_privilege('crm.booking_expiration_pause', 'SELECT'))::text
                        AS pause_readable"
        .to_owned();
    let checks = statements(need);
    let mut batch = vec![head.clone(), pause_statement(worker)];
    batch.extend(checks.iter().cloned());
    // The round trip's timer starts first: it then spans the system clock's reading
    // as well as the database's, so that the midpoint is within half of it of both
    // whatever the scheduler does between the two calls (a pause after the system
    // clock's reading, outside the timer, would move the estimate past its bound).
    let started = Instant::now();
    let system_before = Utc::now();
    let (mut answers, pause_read) = match run(client, &batch) {
        Ok(answers) => (answers, true),
        // The switch's table is missing or not granted: the rest, without it.
        Err(e) if crate::sqlstate::missing_or_forbidden(&e) => {
            let mut batch = vec![head];
            batch.extend(checks);
            let answers = run(client, &batch)
                .classify(Fault::Temporary, "preflight: cannot read the catalog")?;
            (answers, false)
        }
        Err(e) => return Err(e).classify(Fault::Temporary, "preflight: cannot read the catalog"),
    };
    let round_trip = started.elapsed();
    let leading = if pause_read { 2 } else { 1 };
    let mut rest = answers.drain(..leading.min(answers.len()));
    let head = rest.next().unwrap_or_default();
    let pause = rest.next().unwrap_or_default();
    drop(rest);
    let first = head.first();
    let field = |name: &str| first.and_then(|r| r.get(name));
    let database_now = field("database_now_us")
        .and_then(|us| us.parse().ok())
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(|| crate::error::fail(Fault::Temporary, "cannot read the database clock"))?;
    let half = TimeDelta::from_std(round_trip / 2).unwrap_or(TimeDelta::zero());
    let pause_readable = pause_read && field("pause_readable") == Some("true");
    let history = history(client, &answers)?;
    Ok(Facts {
        backend_pid: field("pid")
            .and_then(|p| p.parse().ok())
            .unwrap_or_default(),
        skew: ClockSkew {
            system_ahead_by: (system_before + half) - database_now,
            round_trip,
        },
        pause_readable,
        pause: pause_row(&pause).filter(|_| pause_readable),
        need,
        answers,
        history,
    })
}

/// The schema statements, the compatibility statements (the history's releases, the
/// read-only role's reach), then the privileges statement, of `need`: what every
/// preflight of a writing command asks the catalog each time it runs (public for the
/// tests of their plans).
pub fn statements(need: SchemaNeed) -> Vec<String> {
    let mut out = schema::statements(need);
    out.push(compat::PROBE_STATEMENT.to_owned());
    out.push(compat::READS_ALL_STATS_STATEMENT.to_owned());
    out.push(privileges::statement(need));
    out
}

/// The history's rows, when the batch's probe says it can be read (one more round
/// trip on a migrated database).
fn history(client: &mut Client, answers: &[Vec<SimpleQueryRow>]) -> Result<Vec<compat::Row>> {
    let probe = answers
        .len()
        .checked_sub(3)
        .and_then(|i| answers.get(i))
        .map_or(&[][..], Vec::as_slice);
    compat::read(client, probe)
}

/// Compatibility first (a schema ahead of the binary may lack what it looks for, and
/// "run migrate" would be the wrong advice), then the schema, then the privileges.
fn judge(need: SchemaNeed, answers: &[Vec<SimpleQueryRow>], history: &[compat::Row]) -> Result<()> {
    let (schema_answers, rest) = answers.split_at(answers.len().saturating_sub(3));
    let answer = |i: usize| rest.get(i).map_or(&[][..], Vec::as_slice);
    compat::judge(history, answer(1))?;
    schema::judge(need, schema_answers).map_err(StoreError::Lacks)?;
    privileges::judge(need, answer(2)).map_err(StoreError::Lacks)
}

/// Runs `statements` as one simple-query batch; the rows of each, in order.
pub(super) fn run(
    client: &mut Client,
    statements: &[String],
) -> Result<Vec<Vec<SimpleQueryRow>>, postgres::Error> {
    let messages = client.simple_query(&statements.join(";\n"))?;
    let mut answers = Vec::with_capacity(statements.len());
    let mut rows = Vec::new();
    for m in messages {
        match m {
            SimpleQueryMessage::Row(row) => rows.push(row),
            SimpleQueryMessage::CommandComplete(_) => answers.push(std::mem::take(&mut rows)),
            _ => {}
        }
    }
    Ok(answers)
}

/// Fails with [`StoreError::Lacks`]: every missing table and column ("schema not
/// migrated: …"), then every missing grant ("role … lacks privileges …"): one round
/// trip.
pub fn check_schema(client: &mut Session, need: SchemaNeed) -> Result<()> {
    let client = client.pg();
    let answers = run(client, &statements(need))
        .classify(Fault::Temporary, "cannot read the schema catalog")?;
    let history = history(client, &answers)?;
    judge(need, &answers, &history)
}

/// `pg_backend_pid()` of `client`'s session, in one round trip; `begin` first opens a
/// transaction (the pooler check's second session holds one while the first is asked).
pub fn backend_pid(client: &mut Session, begin: bool) -> Result<i32> {
    let client = client.pg();
    let sql = if begin {
        "BEGIN; SELECT pg_backend_pid()::text AS pid"
    } else {
        "SELECT pg_backend_pid()::text AS pid"
    };
    let answers = run(client, &[sql.to_owned()]).classify(
        Fault::Temporary,
        "pooler check: cannot read the backend PID",
    )?;
    Ok(answers
        .iter()
        .flatten()
        .find_map(|r| r.get("pid").and_then(|p| p.parse().ok()))
        .unwrap_or_default())
}
