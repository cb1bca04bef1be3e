//! `migrate`: the migrations built into the binary, applied through the runner of
//! `store::migrate` on a session of its own (the pooler check first), and what it
//! prints: the result line, the dry run's list, `migrate status`'s table or JSON.

use anyhow::Result;
use serde::Serialize;

use crate::clock::{Monotonic, SystemMonotonic};
use crate::config::{MigrateAction, MigrateConfig, MigrateLimits};
use crate::exit::{Failure, fail};
use crate::shutdown::Shutdown;
use crate::store::migrate::{self as runner, Applied, Partial, Policy, State, Step};
use crate::store::{self, Db};

/// The result line of a run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct MigrateResult {
    schema_version: i32,
    applied: Vec<String>,
    adopted: Vec<String>,
    duration_ms: u64,
}

/// Runs `migrate` as `cfg` says.
pub(crate) fn migrate(cfg: &MigrateConfig, shutdown: &Shutdown) -> Result<()> {
    // What the server says on the migrator's session is logged at WARN per statement.
    let (db_cfg, notices) = runner::attach_notices(&cfg.db);
    let mut db = store::connect(&db_cfg)?;
    shutdown.on_signal(db.interrupter());
    match cfg.action {
        MigrateAction::Status { json } => status(&mut db, json),
        MigrateAction::DryRun { target } => dry_run(&mut db, target_of(target)?),
        MigrateAction::Apply { target } => {
            apply(&mut db, cfg, &notices, target_of(target)?, shutdown)
        }
    }
}

/// The version to apply up to: `--target`, which must name a built-in migration.
fn target_of(target: Option<i32>) -> Result<i32> {
    let latest = runner::latest();
    match target {
        None => Ok(latest),
        Some(t) if (1..=latest).contains(&t) => Ok(t),
        Some(t) => Err(fail(
            Failure::Usage,
            format!(
                "--target {t}: no such migration in this binary; allowed 1 to {latest} (the \
                 versions built in)"
            ),
        )),
    }
}

fn policy(limits: &MigrateLimits) -> Policy {
    Policy {
        lock_timeout: limits.lock_timeout,
        statement_timeout: limits.statement_timeout,
        index_timeout: limits.index_timeout,
        lock_wait: limits.lock_wait,
        retry_for: limits.retry_for,
        stop_after: crate::config::env::test_migrate_stop_after(),
    }
}

/// What the binary's build calls itself in the history: its release (an unreleased
/// build's says so, `0.2.0-dev+<commit>`) and commit.
fn release() -> String {
    format!(
        "{} (commit {})",
        env!("RELEASE_BUILT_IN"),
        env!("BOOKING_EXPIRE_COMMIT")
    )
}

fn apply(
    db: &mut Db,
    cfg: &MigrateConfig,
    notices: &runner::Notices,
    target: i32,
    shutdown: &Shutdown,
) -> Result<()> {
    let started = SystemMonotonic.now();
    db.require_writable(&cfg.db, "migrate")?;
    crate::preflight::require_own_session(db, &cfg.db, "migrate")?;
    // A second session names the lock a statement waits for; without one (the
    // server's connections are full) the messages say less, the run is the same.
    let mut watcher = store::connect_another(&cfg.db).ok();
    let stopped = || shutdown.requested().is_some();
    let policy = policy(&cfg.limits);
    let release = release();
    let run = runner::Run {
        policy: &policy,
        release: &release,
        notices,
        stopped: &stopped,
    };
    let outcome = runner::apply(
        &mut db.client,
        watcher.as_mut().map(|w| &mut w.client),
        &run,
        target,
    )?;
    let result = MigrateResult {
        schema_version: outcome.schema_version,
        applied: outcome.applied,
        adopted: outcome.adopted,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    crate::render::print_json(&result)
}

fn dry_run(db: &mut Db, target: i32) -> Result<()> {
    let plan = runner::plan(&mut db.client, target)?;
    let mut out = String::new();
    let missing = runner::missing_privileges(&mut db.client, &plan)?;
    if !plan.refused.is_empty() {
        out.push_str(&format!(
            "would refuse: {}\n",
            crate::exit::adoption_refusal(&plan.refused, &plan.reruns)
        ));
    }
    if !missing.is_empty() {
        out.push_str(&format!("would refuse: {}\n", runner::refusal(&missing)));
    }
    for what in &plan.reruns {
        out.push_str(&format!("would not adopt, would run again: {what}\n"));
    }
    for what in &plan.kept {
        out.push_str(&format!("would adopt, keeping the DBA's setting: {what}\n"));
    }
    if plan.steps.is_empty() {
        out.push_str("nothing to do: every migration up to the target is applied\n");
        if target >= runner::latest() {
            let lacking = runner::job_needs(&mut db.client, &plan)?;
            if !lacking.is_empty() {
                out.push_str(&format!(
                    "would refuse: {}\n",
                    crate::exit::recorded_but_lacking(&lacking)
                ));
            }
        }
    }
    for step in &plan.steps {
        let m = step.migration();
        let (from, verb) = match step {
            Step::Adopt(m) => {
                out.push_str(&format!(
                    "would adopt {} (what it makes is there as it makes it: applied by the old script)\n",
                    m.file
                ));
                continue;
            }
            Step::Run(_) => (0, "would apply".to_owned()),
            Step::Resume(_, p) => (
                p.done.max(0) as usize,
                format!(
                    "would resume (begun {} by {}: {} of {} statements done{})",
                    crate::domain::rfc3339(p.updated_at),
                    p.updated_by,
                    p.done,
                    p.statements,
                    reason(p)
                ),
            ),
        };
        let statements = runner::split(m)?;
        out.push_str(&format!(
            "{verb} {} ({} statements)\n",
            m.file,
            statements.len()
        ));
        for (k, s) in statements.iter().enumerate().skip(from) {
            out.push_str(&format!(
                "  {}/{} {}\n",
                k + 1,
                statements.len(),
                runner::first_line(s)
            ));
            if let Some(index) = runner::invalid_leftover(&mut db.client, s)? {
                out.push_str(&format!(
                    "      first drops the INVALID index {index} an earlier build left\n"
                ));
            }
            if let Some(twin) = runner::renamed_twin(&mut db.client, s)? {
                out.push_str(&format!(
                    "      {twin} has this definition under another name: a second, \
                     identical index would be built\n"
                ));
            }
        }
    }
    for a in &plan.unknown {
        out.push_str(&format!(
            "left as it is: {} (applied by release {}, unknown to this binary)\n",
            a.name, a.release
        ));
    }
    crate::render::print(&out)
}

/// Why a partial file stopped, when it is not that a run ended: "; its check failed: …".
fn reason(p: &Partial) -> String {
    if p.reason.is_empty() {
        String::new()
    } else {
        format!("; its check failed: {}", p.reason)
    }
}

/// One migration's line of `migrate status --json`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct StatusRow {
    version: i32,
    name: String,
    state: &'static str,
    checksum: String,
    applied_checksum: Option<String>,
    applied_at: Option<String>,
    applied_by: Option<String>,
    release: Option<String>,
    duration_ms: Option<i64>,
    /// The oldest release that works on the schema the file leaves (this binary's
    /// entry; the history's when the file is applied and the row has one).
    works_from: String,
    /// A partial file: how many of its statements committed, of how many, and why it
    /// stopped when its statements all ran (its check failed).
    statements_done: Option<i32>,
    statements: Option<i32>,
    reason: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct StatusReport {
    /// The highest version in the history (0: none).
    schema_version: i32,
    /// The highest version built into this binary.
    expected_version: i32,
    migrations: Vec<StatusRow>,
}

fn row(
    version: i32,
    name: &str,
    state: &'static str,
    checksum: String,
    a: Option<&Applied>,
) -> StatusRow {
    let works_from = runner::MIGRATIONS
        .iter()
        .find(|m| m.version == version)
        .map_or("", |m| m.works_from);
    StatusRow {
        works_from: a
            .map(|a| a.works_from.as_str())
            .filter(|w| !w.is_empty())
            .unwrap_or(works_from)
            .to_owned(),
        statements_done: None,
        statements: None,
        reason: None,
        version,
        name: name.to_owned(),
        state,
        checksum,
        applied_checksum: a.map(|a| a.checksum.clone()),
        applied_at: a.map(|a| crate::domain::rfc3339(a.applied_at)),
        applied_by: a.map(|a| a.applied_by.clone()),
        release: a.map(|a| a.release.clone()),
        duration_ms: a.map(|a| a.duration_ms),
    }
}

fn status(db: &mut Db, json: bool) -> Result<()> {
    let (states, unknown) = runner::status(&mut db.client)?;
    let mut rows: Vec<StatusRow> = states
        .iter()
        .map(|(m, state)| {
            let sum = runner::checksum(m.sql);
            match state {
                State::Applied(a) => row(m.version, m.file, "applied", sum, Some(a)),
                State::Adopted(a) => row(m.version, m.file, "adopted", sum, Some(a)),
                State::Changed(a) => row(m.version, m.file, "changed", sum, Some(a)),
                State::Pending => row(m.version, m.file, "pending", sum, None),
                State::Partial(p) => StatusRow {
                    applied_at: Some(crate::domain::rfc3339(p.updated_at)),
                    applied_by: Some(p.updated_by.clone()),
                    release: Some(p.release.clone()),
                    statements_done: Some(p.done),
                    statements: Some(p.statements),
                    reason: Some(p.reason.clone()),
                    ..row(m.version, m.file, "partial", sum, None)
                },
            }
        })
        .collect();
    rows.extend(
        unknown
            .iter()
            .map(|a| row(a.version, &a.name, "unknown", String::new(), Some(a))),
    );
    let report = StatusReport {
        schema_version: rows
            .iter()
            .filter(|r| r.applied_at.is_some() && r.state != "partial")
            .map(|r| r.version)
            .max()
            .unwrap_or(0),
        expected_version: runner::latest(),
        migrations: rows,
    };
    if json {
        return crate::render::print_json(&report);
    }
    let mut out = format!(
        "schema version {} (this binary expects {})\n{:<34} {:<8} {:<20} {:<20} {:<28} {}\n",
        report.schema_version,
        report.expected_version,
        "MIGRATION",
        "STATE",
        "APPLIED AT",
        "BY",
        "RELEASE",
        "TOOK"
    );
    for r in &report.migrations {
        out.push_str(&format!(
            "{:<34} {:<8} {:<20} {:<20} {:<28} {}\n",
            r.name,
            r.state,
            r.applied_at
                .as_deref()
                .map_or("-", |t| t.get(..19).unwrap_or(t)),
            r.applied_by.as_deref().unwrap_or("-"),
            r.release.as_deref().unwrap_or("-"),
            r.duration_ms.map_or("-".to_owned(), |d| format!("{d}ms"))
        ));
        if let (Some(done), Some(n)) = (r.statements_done, r.statements) {
            out.push_str(&format!(
                "  {done} of {n} statements done{}; the next run goes on from there\n",
                r.reason
                    .as_deref()
                    .filter(|w| !w.is_empty())
                    .map_or(String::new(), |w| format!(
                        ", all ran but its check failed: {w}"
                    ))
            ));
        }
        if r.state == "changed" {
            out.push_str(&format!(
                "  applied with checksum {}, this binary's is {}\n",
                r.applied_checksum.as_deref().unwrap_or_default(),
                r.checksum
            ));
        }
    }
    crate::render::print(&out)
}
