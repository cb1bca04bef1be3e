//! The migration runner: the files of `sql/` built into the binary (`embedded`), each
//! split into statements (`split`) and run one at a time, each in its own transaction
//! on one session, under the runner's timeouts (`policy`, `run`); a history with
//! checksums (`history`); migrators serialised by a polled advisory lock (`lock`); a
//! database migrated by the old script adopted through catalog probes (`adopt`).
//!
//! Hand-written, not a crate's: the migrators' lock must be polled outside any
//! transaction, steps must run outside transaction blocks (CONCURRENTLY), on the sync
//! `postgres` driver the job already uses, with no second driver.

mod adopt;
mod embedded;
mod history;
mod lock;
mod policy;
mod run;
mod split;
mod stopped;

use std::time::Instant;

use crate::Session;
use anyhow::Result;
use log::info;
use postgres::Client;

pub use embedded::{BASELINE, MIGRATIONS, Migration, latest};
pub use history::{Applied, checksum};
pub use lock::MIGRATE_LOCK;
pub use policy::{Policy, backoff};
pub use split::{first_line, statements};

use crate::error::{Fault, fail};

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Its objects are there (a database migrated by the old script): recorded only.
    Adopt(&'static Migration),
    /// Run, statement by statement.
    Run(&'static Migration),
}

/// What a run would do, in order: nothing of what is in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Versions in the history that this binary does not know (a newer release's).
    pub unknown: Vec<Applied>,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The highest version in the history after the run.
    pub schema_version: i32,
    pub applied: Vec<String>,
    pub adopted: Vec<String>,
}

/// The state of a built-in migration against the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Applied(Applied),
    Adopted(Applied),
    Pending,
    /// Applied with another checksum: the file was edited after it shipped.
    Changed(Applied),
}

/// Every built-in migration with its state, and the history's rows of versions no
/// built-in file has.
pub type Status = (Vec<(&'static Migration, State)>, Vec<Applied>);

/// Every built-in migration with its state; then the history's rows no built-in file
/// has (a newer release's). Reads only; nothing is made.
pub fn status(client: &mut Session) -> Result<Status> {
    let client = client.pg();
    let history = history::read(client)?.unwrap_or_default();
    let states = MIGRATIONS
        .iter()
        .map(|m| {
            let state = match history.iter().find(|a| a.version == m.version) {
                None => State::Pending,
                Some(a) if a.checksum != checksum(m.sql) => State::Changed(a.clone()),
                Some(a) if a.adopted => State::Adopted(a.clone()),
                Some(a) => State::Applied(a.clone()),
            };
            (m, state)
        })
        .collect();
    let unknown = history
        .into_iter()
        .filter(|a| !MIGRATIONS.iter().any(|m| m.version == a.version))
        .collect();
    Ok((states, unknown))
}

/// What a run up to `target` would do now, read without changing anything. Fails
/// with 78 when an applied file's checksum differs from the built-in one.
pub fn plan(client: &mut Session, target: i32) -> Result<Plan> {
    plan_on(client.pg(), target)
}

fn plan_on(client: &mut Client, target: i32) -> Result<Plan> {
    let history = history::read(client)?.unwrap_or_default();
    for a in &history {
        if let Some(m) = MIGRATIONS.iter().find(|m| m.version == a.version) {
            let built_in = checksum(m.sql);
            if built_in != a.checksum {
                return Err(fail(
                    Fault::Config,
                    format!(
                        "migration {} was applied with checksum {} but this binary's file has \
                         checksum {built_in}: a shipped migration was edited; nothing was done \
                         (ship the change as a new file instead)",
                        m.file, a.checksum
                    ),
                ));
            }
        }
    }
    // A database migrated by the old script has no history: what each baseline file
    // made is probed once, before anything runs.
    let fresh = history.is_empty();
    let mut steps = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version <= target) {
        if history.iter().any(|a| a.version == m.version) {
            continue;
        }
        let present = fresh && m.version <= BASELINE && probe(client, m.version)?;
        steps.push(if present {
            Step::Adopt(m)
        } else {
            Step::Run(m)
        });
    }
    let unknown = history
        .into_iter()
        .filter(|a| !MIGRATIONS.iter().any(|m| m.version == a.version))
        .collect();
    Ok(Plan { steps, unknown })
}

/// Whether what baseline file `version` made is there; 010 made nothing, and counts as
/// applied when 009 is (the old script applied every file in order).
fn probe(client: &mut Client, version: i32) -> Result<bool> {
    let probed = if version == 10 { 9 } else { version };
    Ok(adopt::present(client, probed)?.unwrap_or(false))
}

/// Applies the built-in migrations up to `target` on `client`, under the migrators'
/// lock; `watcher`, a second session, names the lock a statement waits for; `stopped`
/// says when a signal asks the run to end (between statements and waits). `release`
/// is what the history records as the release that applied each file.
pub fn apply(
    client: &mut Session,
    watcher: Option<&mut Session>,
    policy: &Policy,
    release: &str,
    target: i32,
    stopped: &dyn Fn() -> bool,
) -> Result<Outcome> {
    let client = client.pg();
    let watcher = watcher.map(|w| w.pg());
    lock::take(client, policy.lock_wait, stopped)?;
    let outcome = apply_locked(client, watcher, policy, release, target, stopped);
    lock::release(client);
    outcome
}

#[allow(
    clippy::disallowed_methods,
    reason = "a migration file's real duration, for its history row"
)]
fn apply_locked(
    client: &mut Client,
    mut watcher: Option<&mut Client>,
    policy: &Policy,
    release: &str,
    target: i32,
    stopped: &dyn Fn() -> bool,
) -> Result<Outcome> {
    history::ensure(client)?;
    let plan = plan_on(client, target)?;
    for a in &plan.unknown {
        log::warn!(Migration = a.name.as_str(), Release = a.release.as_str();
                   "migrate: the history holds a migration this binary does not know (applied by a newer release); left as it is");
    }
    if plan.steps.is_empty() {
        info!("migrate: nothing to do");
    }
    let mut outcome = Outcome {
        schema_version: 0,
        applied: Vec::new(),
        adopted: Vec::new(),
    };
    for step in &plan.steps {
        match *step {
            Step::Adopt(m) => {
                history::record(
                    client,
                    m.version,
                    m.file,
                    &checksum(m.sql),
                    release,
                    0,
                    true,
                )?;
                info!(Migration = m.file; "migrate: adopted (its objects are there: applied by the old script)");
                outcome.adopted.push(m.file.to_owned());
            }
            Step::Run(m) => {
                let started = Instant::now();
                let statements = statements(m.sql);
                info!(Migration = m.file, Statements = statements.len() as u64; "migrate: file started");
                for (k, statement) in statements.iter().enumerate() {
                    let at = run::At {
                        file: m.file,
                        k: k + 1,
                        n: statements.len(),
                    };
                    run::statement(
                        client,
                        watcher.as_deref_mut(),
                        statement,
                        &at,
                        policy,
                        stopped,
                    )?;
                }
                let took = started.elapsed().as_millis() as i64;
                history::record(
                    client,
                    m.version,
                    m.file,
                    &checksum(m.sql),
                    release,
                    took,
                    false,
                )?;
                info!(Migration = m.file, DurationMs = took as u64; "migrate: file applied");
                outcome.applied.push(m.file.to_owned());
            }
        }
    }
    history::grant_readers(client)?;
    outcome.schema_version = history::read(client)?
        .unwrap_or_default()
        .iter()
        .map(|a| a.version)
        .max()
        .unwrap_or(0);
    Ok(outcome)
}

/// Runs one statement as the statements of a migration run (its policy, the check for
/// an INVALID index before a concurrent build), as the only statement of `file`.
pub fn run_one(
    client: &mut Session,
    watcher: Option<&mut Session>,
    statement: &str,
    file: &'static str,
    policy: &Policy,
) -> Result<()> {
    let client = client.pg();
    let watcher = watcher.map(|w| w.pg());
    let at = run::At { file, k: 1, n: 1 };
    run::statement(client, watcher, statement, &at, policy, &|| false)
}
