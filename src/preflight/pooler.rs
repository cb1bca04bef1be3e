//! The pooler guard. Behind a pooler in transaction (or statement) mode, a client's
//! statements run on whichever server session is free: session advisory locks (the
//! relay's singleton lock), LISTEN (`--follow`), prepared statements and session `SET`s
//! (the timeouts) silently stop applying. The guard proves at start that this client
//! keeps one server session: a second session of its own must get another backend, and
//! this one must keep its backend while the second holds a transaction open.

use crate::store::Session;
use anyhow::Result;

use crate::exit::{Failure, fail};
use crate::store::{self, Db};

/// Fails with 78 unless `client`, whose backend was `first` in the preflight's read, has
/// a server session of its own; `second` is the second session opened beside it. When
/// the server refused that one (too many connections: a role's `CONNECTION LIMIT`, a
/// full `max_connections`) and `one_is_enough`, the check makes do with this session
/// alone: its backend must stay the same across transactions (a weaker proof, logged);
/// otherwise that refusal is the command's error.
pub(super) fn require_session(
    client: &mut Session,
    first: i32,
    second: Result<Db, store::StoreError>,
    command: &str,
    one_is_enough: bool,
) -> Result<()> {
    let refuse = |detail: String| {
        fail(
            Failure::Config,
            format!(
                "{command} needs a session of its own (session advisory lock, LISTEN, prepared \
                 statements, session settings), but the database connection goes through a \
                 pooler in transaction or statement mode ({detail}); connect directly or \
                 through session pooling (PgBouncer: pool_mode = session)"
            ),
        )
    };
    let mut other = match second {
        Ok(other) => other,
        Err(e) if one_is_enough && e.too_many_connections() => {
            let again = store::backend_pid(client, false)?;
            if again != first {
                return Err(refuse(format!(
                    "the backend PID changed from {first} to {again} between two transactions"
                )));
            }
            log::info!(Error:% = format!("{e:#}");
                       "pooler check on one session: a second connection was refused; the backend \
                        stayed the same across transactions");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let other_pid = match store::backend_pid(&mut other.client, true) {
        Ok(pid) => pid,
        Err(e) if other.client.is_closed() => return Err(e.into()),
        Err(e) => return Err(refuse(format!("a transaction could not begin: {e:#}"))),
    };
    if other_pid == first {
        return Err(refuse(format!(
            "two client connections were served by the same backend, PID {first}"
        )));
    }
    let again = store::backend_pid(client, false)?;
    drop(other);
    if again != first {
        return Err(refuse(format!(
            "the backend PID changed from {first} to {again} between two transactions"
        )));
    }
    Ok(())
}
