//! Ids as operators type them: a whole UUID, or its start as the tables show it
//! (`bb7f5ae6`), resolved when exactly one row's id starts with it.

use crate::store::Conn;
use anyhow::Result;
use uuid::Uuid;

use crate::config::TypedId;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::store::ids::{self, IdTable};

/// The most candidates an ambiguous start lists (then it counts the rest).
const SHOWN: u32 = 10;

/// The id `arg` stands for in `table`: itself when whole (whether or not it exists),
/// the one id starting with it when unique, `None` when no id starts with it. An
/// ambiguous start is a usage error (64) listing the candidates; `flag` names the
/// input in it.
pub(crate) fn resolve(
    client: &mut impl Conn,
    table: IdTable,
    arg: &TypedId,
    flag: &str,
) -> Result<Option<Uuid>> {
    let prefix = match arg {
        TypedId::Full(id) => return Ok(Some(*id)),
        TypedId::Prefix(prefix) => prefix,
    };
    let found = ids::with_prefix(client, table, prefix, SHOWN).classify(
        Failure::Temporary,
        format!("cannot resolve {flag} {prefix}"),
    )?;
    match found.total {
        0 => Ok(None),
        1 => Ok(found.first.first().copied()),
        total => {
            let what = match table {
                IdTable::Bookings => "bookings",
                IdTable::Outbox(_) => "outbox rows",
            };
            let listed: Vec<String> = found.first.iter().map(Uuid::to_string).collect();
            let rest = total - found.first.len() as u64;
            let more = if rest > 0 {
                format!(", and {rest} more")
            } else {
                String::new()
            };
            Err(fail(
                Failure::Usage,
                format!(
                    "{flag} {prefix} is ambiguous: the ids of {total} {what} start with it: {}{more}; \
                     give more of the id",
                    listed.join(", ")
                ),
            ))
        }
    }
}
