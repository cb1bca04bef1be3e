//! The upkeep part of `backlog`: the outbox's dead tuples, autovacuum's last visits,
//! the sizes of the outbox and of the partial indexes, and what holds the xmin horizon
//! back, as a table, as JSON and as Prometheus gauges. The runbook of each finding is
//! in `docs/runbooks/database-hygiene.md`.

//!
//! The figures are read by `store::hygiene`; this room renders them: `table` for
//! people, `json` for `--format json`, `gauges` for `--format prometheus`.

mod gauges;
mod json;
mod table;

pub(super) use gauges::prometheus;
pub(super) use json::{Json, json};
pub(super) use table::table;
