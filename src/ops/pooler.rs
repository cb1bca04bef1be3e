//! The pooler guard. Behind a pooler in transaction (or statement) mode, a client's
//! statements run on whichever server session is free: session advisory locks (the
//! relay's singleton lock), LISTEN (`--follow`), prepared statements and session `SET`s
//! (the timeouts) silently stop applying. The guard proves at start that this client
//! keeps one server session: a second session of its own must get another backend, and
//! this one must keep its backend while the second holds a transaction open.

use anyhow::Result;
use postgres::Client;

use crate::config::DbConfig;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::store;

fn backend_pid(client: &mut Client) -> Result<i32> {
    Ok(client
        .query_one("SELECT pg_backend_pid()", &[])
        .classify(
            Failure::Temporary,
            "pooler check: cannot read the backend PID",
        )?
        .get(0))
}

/// Fails with 78 unless `client` (opened from `cfg`) has a server session of its own.
/// When the server refuses a second connection (too many connections: a role's
/// `CONNECTION LIMIT`, a full `max_connections`) and `one_is_enough`, the check makes do
/// with this session alone: its backend must stay the same across transactions (a
/// weaker proof, logged); otherwise that refusal is the command's error.
pub fn require_session(
    cfg: &DbConfig,
    client: &mut Client,
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
    let first = backend_pid(client)?;
    let mut other = match store::connect_another(cfg) {
        Ok(other) => other,
        Err(e) if one_is_enough && store::too_many_connections(&e) => {
            let again = backend_pid(client)?;
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
        Err(e) => return Err(e),
    };
    let mut tx = match other.client.transaction() {
        Ok(tx) => tx,
        Err(e) => return Err(refuse(format!("a transaction could not begin: {e}"))),
    };
    let other_pid: i32 = tx
        .query_one("SELECT pg_backend_pid()", &[])
        .classify(
            Failure::Temporary,
            "pooler check: cannot read the backend PID",
        )?
        .get(0);
    if other_pid == first {
        return Err(refuse(format!(
            "two client connections were served by the same backend, PID {first}"
        )));
    }
    let again = backend_pid(client)?;
    drop(tx);
    if again != first {
        return Err(refuse(format!(
            "the backend PID changed from {first} to {again} between two transactions"
        )));
    }
    Ok(())
}
