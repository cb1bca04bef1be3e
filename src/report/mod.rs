//! Operator reports: `dry-run` (what a cycle at moment T would do) and `backlog` (how
//! far behind the job is). Read-only: each runs in one READ ONLY transaction of plain
//! SELECTs, so it never writes, never takes a row lock and never waits on one, and it
//! works under a read-only database role.

mod backlog;
pub(crate) mod backlog_figures;
mod dry_run;
mod hygiene;
mod read_failure;

pub(crate) use backlog::backlog;
pub(crate) use dry_run::dry_run;
