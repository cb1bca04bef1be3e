//! The migration runner: the files of `sql/` built into the binary (`embedded`), each
//! split into statements by PostgreSQL's own scanner and grammar (`split`, libpg_query)
//! and run one at a time, each in its own transaction
//! on one session, under the runner's timeouts (`policy`, `run`); a history with
//! checksums (`history`); migrators serialised by a polled advisory lock (`lock`); a
//! database migrated by the old script adopted file by file when what each file makes
//! is there as it makes it (`adopt`, against the facts of `catalog`).
//!
//! Hand-written, not a crate's: the migrators' lock must be polled outside any
//! transaction, steps must run outside transaction blocks (CONCURRENTLY), on the sync
//! `postgres` driver the job already uses, with no second driver.

mod adopt;
pub(crate) mod catalog;
mod check;
pub mod compat;
pub(crate) mod embedded;
mod history;
pub(crate) mod lock;
mod notices;
mod partial;
mod policy;
mod refuse;
pub(crate) mod run;
pub(crate) mod split;
mod stopped;
mod verify;

use std::time::Instant;

use crate::Session;
use crate::error::Result;
use log::{info, warn};
use postgres::Client;

use embedded::BASELINE;
pub use embedded::{MIGRATIONS, Migration, latest};
use history::accepts;
pub use history::{Applied, checksum};
pub use notices::{Notices, attach as attach_notices};
pub use partial::Partial;
pub use policy::Policy;
pub use split::first_line;
use split::statements;

use crate::error::{Fault, StoreError, fail};
use crate::schema::Lack;

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Its objects are there (a database migrated by the old script): recorded only.
    Adopt(&'static Migration),
    /// Run, statement by statement.
    Run(&'static Migration),
    /// Begun by an earlier run that stopped (its partial row): run from the statement
    /// after the last that committed.
    Resume(&'static Migration, Partial),
}

impl Step {
    pub fn migration(&self) -> &'static Migration {
        match self {
            Step::Adopt(m) | Step::Run(m) | Step::Resume(m, _) => m,
        }
    }
}

/// What a run would do, in order: nothing of what is in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Versions in the history that this binary does not know (a newer release's).
    pub unknown: Vec<Applied>,
    /// Why baseline files without a history row can be neither adopted nor run, one
    /// phrase each naming the file (the run refuses, a configuration fault, before any
    /// change).
    pub refused: Vec<String>,
    /// Baseline files without a history row that run because what they make differs,
    /// with why ("007_roles.sql: privilege … is not granted").
    pub reruns: Vec<String>,
    /// Settings of a DBA's on the objects of adopted files, kept and named.
    pub kept: Vec<String>,
}

impl Plan {
    /// The versions of the files it runs (not those it adopts).
    fn runs(&self) -> Vec<i32> {
        self.steps
            .iter()
            .filter(|s| !matches!(s, Step::Adopt(_)))
            .map(|s| s.migration().version)
            .collect()
    }
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
    /// Begun and not finished: some statements committed (or all, and its check
    /// failed); the next run goes on.
    Partial(Partial),
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
    let partial = partial::read(client)?;
    let states = MIGRATIONS
        .iter()
        .map(|m| {
            let state = match history.iter().find(|a| a.version == m.version) {
                None => match partial.iter().find(|p| p.version == m.version) {
                    Some(p) => State::Partial(p.clone()),
                    None => State::Pending,
                },
                Some(a) if !accepts(&a.checksum, m.sql) => State::Changed(a.clone()),
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
/// (a configuration fault) when an applied file's checksum differs from the built-in one.
pub fn plan(client: &mut Session, target: i32) -> Result<Plan> {
    plan_on(client.pg(), target)
}

fn plan_on(client: &mut Client, target: i32) -> Result<Plan> {
    let history = history::read(client)?.unwrap_or_default();
    for a in &history {
        if let Some(m) = MIGRATIONS.iter().find(|m| m.version == a.version)
            && !accepts(&a.checksum, m.sql)
        {
            return Err(fail(
                Fault::Config,
                format!(
                    "migration {} was applied with checksum {} but this binary's file has \
                     checksum {}: a shipped migration was edited; nothing was done \
                     (ship the change as a new file instead)",
                    m.file,
                    a.checksum,
                    checksum(m.sql)
                ),
            ));
        }
    }
    let partial = partial::read(client)?;
    // A database migrated by the old script has no history of some baseline files
    // (none, or only those a `--target` run adopted): what each of those makes is
    // compared with what is there, before anything runs, whatever the history holds.
    let actual = if MIGRATIONS.iter().any(|m| {
        m.version <= BASELINE.min(target) && !history.iter().any(|a| a.version == m.version)
    }) {
        let facts = catalog::snapshot(client)?;
        catalog::with_roles(client, facts, &catalog::roles())?
    } else {
        catalog::Snapshot::new()
    };
    let mut steps: Vec<Step> = Vec::new();
    let (mut refused, mut reruns, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for m in MIGRATIONS.iter().filter(|m| m.version <= target) {
        if history.iter().any(|a| a.version == m.version) {
            continue;
        }
        if let Some(p) = partial.iter().find(|p| p.version == m.version) {
            // Begun by this file's text: go on after what committed. Begun by another
            // text (a build whose file differed): every statement is idempotent, so run
            // it whole.
            steps.push(if accepts(&p.checksum, m.sql) {
                Step::Resume(m, p.clone())
            } else {
                Step::Run(m)
            });
            continue;
        }
        if m.version > BASELINE {
            steps.push(Step::Run(m));
            continue;
        }
        let verdict = adopt::judge(m.version, &actual);
        let name = |what: &String| format!("{}: {what}", m.file);
        refused.extend(verdict.refusals().iter().map(name));
        // A file that makes nothing (010) counts as applied when the file before it is.
        let empty = catalog::expected(m.version).is_empty();
        let before_adopted = steps.last().map_or_else(
            || history.iter().any(|a| a.version == m.version - 1),
            |s| matches!(s, Step::Adopt(_)),
        );
        let adopt = verdict.adopts()
            && (!empty || before_adopted)
            && check::failure(client, m.version)?.is_none();
        if adopt {
            kept.extend(verdict.kept.iter().map(name));
            steps.push(Step::Adopt(m));
        } else {
            reruns.extend(verdict.run.iter().map(name));
            steps.push(Step::Run(m));
        }
    }
    let unknown = history
        .into_iter()
        .filter(|a| !MIGRATIONS.iter().any(|m| m.version == a.version))
        .collect();
    Ok(Plan {
        steps,
        unknown,
        refused,
        reruns,
        kept,
    })
}

/// The refusal of baseline files that can be neither adopted nor run (`refused`),
/// naming too the files that would then run again and why (`reruns`).
fn adoption_refused(plan: &Plan) -> StoreError {
    StoreError::AdoptionRefused {
        refused: plan.refused.clone(),
        reruns: plan.reruns.clone(),
    }
}

/// The INVALID index (`schema.name`) an earlier build left that `statement` would drop
/// before building it again, if any. Reads only.
pub fn invalid_leftover(client: &mut Session, statement: &str) -> Result<Option<String>> {
    let policy::Kind::IndexBuild { schema, index } = policy::kind(statement) else {
        return Ok(None);
    };
    Ok(run::invalid(client.pg(), schema.as_deref(), &index)?.map(|s| format!("{s}.{index}")))
}

/// A valid index with the definition `statement` builds under another name, while
/// the one it builds is not there (`schema.name`), if any. Reads only.
pub fn renamed_twin(client: &mut Session, statement: &str) -> Result<Option<String>> {
    let policy::Kind::IndexBuild { schema, index } = policy::kind(statement) else {
        return Ok(None);
    };
    run::renamed_twin(client.pg(), schema.as_deref(), &index)
}

/// What the job lacks once every file is recorded (nothing when some file is not):
/// the preflights' findings, each once. Reads only.
pub fn job_needs(client: &mut Session, plan: &Plan) -> Result<Vec<Lack>> {
    if !plan.steps.is_empty() {
        return Ok(Vec::new());
    }
    let client = client.pg();
    let recorded = history::read(client)?.unwrap_or_default();
    if !MIGRATIONS
        .iter()
        .all(|m| recorded.iter().any(|a| a.version == m.version))
    {
        return Ok(Vec::new());
    }
    verify::missing(client)
}

/// What the role that runs `plan` lacks, one phrase each; empty when it may run it.
/// Reads only.
pub fn missing_privileges(client: &mut Session, plan: &Plan) -> Result<Vec<String>> {
    refuse::missing(client.pg(), &plan.runs())
}

/// The refusal of a run whose role lacks `missing`.
pub fn refusal(missing: &[String]) -> String {
    format!(
        "migrate cannot apply the pending migrations: {}; nothing was done (not even the \
         history table)",
        missing.join("; ")
    )
}

/// The statements of `m`; a configuration fault naming the file and line of a comment
/// or string it does not close (nothing of it runs).
pub fn split(m: &'static Migration) -> Result<Vec<&'static str>> {
    statements(m.sql).map_err(|e| {
        fail(
            Fault::Config,
            format!("migration {}: {e}; nothing of it ran", m.file),
        )
    })
}

/// Where a run is, for its messages and its partial rows.
pub struct Run<'a> {
    pub policy: &'a Policy,
    /// What the history records as the release that applied each file.
    pub release: &'a str,
    /// What the server says on the migrator's session ([`attach_notices`]).
    pub notices: &'a Notices,
    /// Says when a signal asks the run to end (between statements and waits).
    pub stopped: &'a dyn Fn() -> bool,
}

/// Applies the built-in migrations up to `target` on `client`, under the migrators'
/// lock; `watcher`, a second session, names the lock a statement waits for.
pub fn apply(
    client: &mut Session,
    watcher: Option<&mut Session>,
    run: &Run<'_>,
    target: i32,
) -> Result<Outcome> {
    let client = client.pg();
    let watcher = watcher.map(|w| w.pg());
    lock::take(client, run.policy.lock_wait, run.stopped)?;
    let outcome = apply_locked(client, watcher, run, target);
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
    run: &Run<'_>,
    target: i32,
) -> Result<Outcome> {
    // Before anything is made or recorded: can this role do what the pending files
    // need? (The history may not exist yet: the plan reads it as empty.)
    let pending = plan_on(client, target)?;
    if !pending.refused.is_empty() {
        return Err(adoption_refused(&pending));
    }
    let missing = refuse::missing(client, &pending.runs())?;
    if !missing.is_empty() {
        return Err(fail(Fault::Config, refusal(&missing)));
    }
    history::ensure(client)?;
    partial::ensure(client)?;
    history::own_like_the_tables(client);
    run.notices.log("(the history)", "-");
    let plan = plan_on(client, target)?;
    for a in &plan.unknown {
        warn!(Migration = a.name.as_str(), Release = a.release.as_str();
              "migrate: the history holds a migration this binary does not know (applied by a newer release); left as it is");
    }
    if !plan.refused.is_empty() {
        return Err(adoption_refused(&plan));
    }
    for what in &plan.reruns {
        warn!("migrate: not adopted, runs again: {what}");
    }
    for what in &plan.kept {
        warn!("migrate: adopted, the DBA's setting kept: {what}");
    }
    if plan.steps.is_empty() {
        info!("migrate: nothing to do");
    }
    let mut outcome = Outcome {
        schema_version: 0,
        applied: Vec::new(),
        adopted: Vec::new(),
    };
    // Statements run in this process: the tests' hook stops after so many.
    let mut ran = 0usize;
    for step in &plan.steps {
        let m = step.migration();
        let sum = checksum(m.sql);
        if let Step::Adopt(m) = step {
            history::record(
                client,
                m.version,
                m.file,
                &sum,
                run.release,
                0,
                true,
                m.works_from,
            )?;
            info!(Migration = m.file; "migrate: adopted (what it makes is there as it makes it: applied by the old script)");
            outcome.adopted.push(m.file.to_owned());
            continue;
        }
        let started = Instant::now();
        let statements = split(m)?;
        let n = statements.len();
        let from = match step {
            Step::Resume(_, p) => {
                let done = (p.done.max(0) as usize).min(n);
                info!(Migration = m.file, Statements = n as u64, Done = done as u64;
                      "migrate: file resumed after statement {done}/{n} (begun {} by {}, release {})",
                      crate::domain::rfc3339(p.updated_at), p.updated_by, p.release);
                done
            }
            _ => {
                info!(Migration = m.file, Statements = n as u64; "migrate: file started");
                0
            }
        };
        for (k, statement) in statements.iter().enumerate().skip(from) {
            if run.policy.stop_after.is_some_and(|stop| ran >= stop) {
                return Err(stopped::stopped_error());
            }
            let at = run::StatementAt {
                file: m.file,
                number: k + 1,
                count: n,
            };
            let result = run::statement(
                client,
                watcher.as_deref_mut(),
                statement,
                &at,
                run.policy,
                run.stopped,
            );
            run.notices.log(m.file, &format!("{}/{n}", k + 1));
            result?;
            ran += 1;
            partial::mark(
                client,
                m.version,
                m.file,
                &sum,
                (k + 1) as i32,
                n as i32,
                run.release,
                "",
            )?;
        }
        if let Some(failed) = check::failure(client, m.version)? {
            partial::mark(
                client,
                m.version,
                m.file,
                &sum,
                n as i32,
                n as i32,
                run.release,
                &failed.short,
            )?;
            return Err(StoreError::MigrationCheckFailed {
                file: m.file,
                what: failed.what,
                fix: failed.fix,
            });
        }
        let took = started.elapsed().as_millis() as i64;
        history::record(
            client,
            m.version,
            m.file,
            &sum,
            run.release,
            took,
            false,
            m.works_from,
        )?;
        info!(Migration = m.file, DurationMs = took as u64; "migrate: file applied");
        outcome.applied.push(m.file.to_owned());
    }
    history::grant_readers(client)?;
    let history = history::read(client)?.unwrap_or_default();
    outcome.schema_version = history.iter().map(|a| a.version).max().unwrap_or(0);
    // Every file recorded: what the job needs must be there, or the cycle's preflight
    // would send the DBA back here.
    if target >= latest()
        && MIGRATIONS
            .iter()
            .all(|m| history.iter().any(|a| a.version == m.version))
    {
        let missing = verify::missing(client)?;
        if !missing.is_empty() {
            return Err(StoreError::RecordedButLacking(missing));
        }
        for what in verify::divergences(client)? {
            warn!("migrate: {what}");
        }
    }
    Ok(outcome)
}
