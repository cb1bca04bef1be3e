//! The operators' commands for the months after go-live: `explain` one booking,
//! `pause`/`resume` either half of the job, `republish`/`retry-failed` outbox rows with
//! an audit trail, `audit` the outbox against its topics, and the pooler guard. Their
//! SQL lives in `store::ops`.

pub(crate) mod audit;
pub(crate) mod explain;
pub(crate) mod ids;
pub(crate) mod migrate;
pub(crate) mod pause;
pub(crate) mod republish;

use crate::store::Conn;
use anyhow::Result;

use crate::config::Actor;
use crate::exit::ClassifyExt;
use crate::exit::Failure;

/// Who does an operator's action, for the trail: the name given (`--actor`, else the
/// operator's login name) and the database user, which the database vouches for.
pub(crate) fn actor(client: &mut impl Conn, actor: &Actor) -> Result<String> {
    let db_user = crate::store::ops::session_user(client)
        .classify(Failure::Temporary, "cannot read the database user")?;
    Ok(match actor.name.clone() {
        Some(name) if name != db_user => format!("{name} (database user {db_user})"),
        _ => db_user,
    })
}
