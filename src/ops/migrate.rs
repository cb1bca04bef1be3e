//! `migrate`: the migrations built into the binary, applied through the runner of
//! `store::migrate` on a session of its own (the pooler check first), and what it
//! prints: the result line, the dry run's list, `migrate status`'s table or JSON.

use anyhow::Result;
use serde::Serialize;

use crate::clock::{Monotonic, SystemMonotonic};
use crate::config::{MigrateAction, MigrateConfig, MigrateLimits};
use crate::exit::{Failure, fail};
use crate::shutdown::Shutdown;
use crate::store::migrate::{self as runner, Applied, Policy, State, Step};
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
pub fn migrate(cfg: &MigrateConfig, shutdown: &Shutdown) -> Result<()> {
    let mut db = store::connect(&cfg.db)?;
    shutdown.on_signal(db.interrupter());
    match cfg.action {
        MigrateAction::Status { json } => status(&mut db, json),
        MigrateAction::DryRun { target } => dry_run(&mut db, target_of(target)?),
        MigrateAction::Apply { target } => apply(&mut db, cfg, target_of(target)?, shutdown),
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
    }
}

/// What the binary's build calls itself in the history: its version and commit.
fn release() -> String {
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("BOOKING_EXPIRE_COMMIT")
    )
}

fn apply(db: &mut Db, cfg: &MigrateConfig, target: i32, shutdown: &Shutdown) -> Result<()> {
    let started = SystemMonotonic.now();
    db.require_writable(&cfg.db, "migrate")?;
    crate::preflight::require_own_session(db, &cfg.db, "migrate")?;
    // A second session names the lock a statement waits for; without one (the
    // server's connections are full) the messages say less, the run is the same.
    let mut watcher = store::connect_another(&cfg.db).ok();
    let stopped = || shutdown.requested().is_some();
    let outcome = runner::apply(
        &mut db.client,
        watcher.as_mut().map(|w| &mut w.client),
        &policy(&cfg.limits),
        &release(),
        target,
        &stopped,
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
    if plan.steps.is_empty() {
        out.push_str("nothing to do: every migration up to the target is applied\n");
    }
    for step in &plan.steps {
        match step {
            Step::Adopt(m) => out.push_str(&format!(
                "would adopt {} (its objects are there: applied by the old script)\n",
                m.file
            )),
            Step::Run(m) => {
                let statements = runner::statements(m.sql);
                out.push_str(&format!(
                    "would apply {} ({} statements)\n",
                    m.file,
                    statements.len()
                ));
                for (k, s) in statements.iter().enumerate() {
                    out.push_str(&format!(
                        "  {}/{} {}\n",
                        k + 1,
                        statements.len(),
                        runner::first_line(s)
                    ));
                }
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
    StatusRow {
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
            .filter(|r| r.applied_at.is_some())
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
