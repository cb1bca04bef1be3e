//! The operators' commands for the months after go-live: `explain` one booking,
//! `pause`/`resume` either half of the job, `republish`/`retry-failed` outbox rows with
//! an audit trail, and the pooler guard. Their SQL lives in `store::ops`.

pub mod explain;
pub mod ids;
pub mod pause;
pub mod republish;

use anyhow::Result;
use postgres::GenericClient;

use crate::cli::{ActorArgs, Command};
use crate::exit::ClassifyExt;
use crate::exit::Failure;

/// Runs an operator command.
pub fn run(command: &Command) -> Result<()> {
    match command {
        Command::Explain(args) => explain::explain(args),
        Command::Pause(args) => pause::pause(args),
        Command::Resume(args) => pause::resume(args),
        Command::Republish(args) => republish::republish(args, false),
        Command::RetryFailed(args) => republish::republish(args, true),
        other => unreachable!("not an operator command: {other:?}"),
    }
}

/// Who does an operator's action, for the trail: the name given (`--actor`, else the
/// USER environment variable) and the database user, which the database vouches for.
pub fn actor(client: &mut impl GenericClient, args: &ActorArgs) -> Result<String> {
    let db_user: String = client
        .query_one("SELECT session_user::text", &[])
        .classify(Failure::Temporary, "cannot read the database user")?
        .get(0);
    let name = args
        .actor
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|n| !n.trim().is_empty());
    Ok(match name {
        Some(name) if name != db_user => format!("{name} (database user {db_user})"),
        _ => db_user,
    })
}
