//! A report's failed read in an operator's words: the failures a report is expected to
//! meet during an incident (a table lock held by someone else, a query slower than the
//! statement timeout) get a message saying what happened and that nothing changed; any
//! other error passes through as it is.

use crate::exit::{Classified, Failure};
use crate::store::sqlstate;

/// Says in an operator's words why a report's query failed, when the reason is one a
/// report is expected to meet during an incident: a table lock held by someone else
/// (a migration, a VACUUM FULL), named from `pg_locks` on a session of its own, or a
/// query slower than the statement timeout.
pub(super) fn in_operator_words(
    e: anyhow::Error,
    command: &str,
    db: &crate::config::DbConfig,
    shutdown: &crate::shutdown::Shutdown,
) -> anyhow::Error {
    let sqlstate = crate::exit::store_error(&e).and_then(crate::store::StoreError::sqlstate);
    let message = match sqlstate {
        Some(sqlstate::LOCK_NOT_AVAILABLE) => format!(
            "{command}: another session holds a lock on a table the report reads (a \
             migration? ALTER TABLE, VACUUM FULL, LOCK TABLE){}; gave up after \
             --lock-timeout instead of waiting; nothing was changed, retry later",
            lock_holders(db)
        ),
        Some(sqlstate::QUERY_CANCELED) if shutdown.requested().is_none() => format!(
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

/// ": held by PID 123 (user u, application psql, AccessExclusiveLock on crm.outbox,
/// in a transaction open for 42s)", or nothing when the holder cannot be read (it may
/// have let go meanwhile, or no further session can be had).
fn lock_holders(db: &crate::config::DbConfig) -> String {
    let holders = crate::store::connect_another(db)
        .and_then(|mut s| crate::store::locks::table_lock_holders(&mut s.client));
    let holders = match holders {
        Ok(holders) if !holders.is_empty() => holders,
        _ => return String::new(),
    };
    let named: Vec<String> = holders
        .iter()
        .map(|h| {
            let mut about = vec![
                format!("user {}", h.user.as_deref().unwrap_or("?")),
                format!(
                    "application {}",
                    h.application
                        .as_deref()
                        .filter(|a| !a.is_empty())
                        .unwrap_or("?")
                ),
                format!("{} on {}", h.mode, h.table),
            ];
            if let Some(secs) = h.transaction_secs {
                about.push(format!("in a transaction open for {secs}s"));
            }
            format!("PID {} ({})", h.pid, about.join(", "))
        })
        .collect();
    format!(": held by {}", named.join("; "))
}
