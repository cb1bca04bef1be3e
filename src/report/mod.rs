//! Operator reports: `dry-run` (what a cycle at moment T would do) and `backlog` (how
//! far behind the job is). Read-only: each runs in one READ ONLY transaction of plain
//! SELECTs, so it never writes, never takes a row lock and never waits on one, and it
//! works under a read-only database role.

mod backlog;
mod dry_run;
pub(crate) mod format;
mod hygiene;

use postgres::error::SqlState;

pub use backlog::backlog;
pub use dry_run::dry_run;

use crate::exit::{Classified, Failure};

/// Says in an operator's words why a report's query failed, when the reason is one a
/// report is expected to meet during an incident: a table lock held by someone else
/// (a migration, a VACUUM FULL), or a query slower than the statement timeout.
fn explain(e: anyhow::Error, command: &str) -> anyhow::Error {
    let message = match crate::sqlstate::code_in(&e) {
        Some(SqlState::LOCK_NOT_AVAILABLE) => format!(
            "{command}: another session holds a lock on a table the report reads (a \
             migration? ALTER TABLE, VACUUM FULL, LOCK TABLE); gave up after --lock-timeout \
             instead of waiting; nothing was changed, retry later"
        ),
        Some(SqlState::QUERY_CANCELED) if crate::shutdown::requested().is_none() => format!(
            "{command}: a query took longer than --statement-timeout and was cancelled; \
             nothing was changed"
        ),
        _ => return e,
    };
    e.context(Classified {
        failure: Failure::Temporary,
        message,
    })
}
