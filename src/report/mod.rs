//! Operator reports: `dry-run` (what a cycle at moment T would do) and `backlog` (how
//! far behind the job is). Read-only: they never write and never take a row lock.

use anyhow::Result;
use uuid::Uuid;

use crate::cli::{BacklogArgs, DryRunArgs};

/// `dry-run --as-of T`.
pub fn dry_run(_args: &DryRunArgs, _run_id: Uuid) -> Result<()> {
    anyhow::bail!("dry-run is not built yet")
}

/// `backlog`.
pub fn backlog(_args: &BacklogArgs) -> Result<()> {
    anyhow::bail!("backlog is not built yet")
}
