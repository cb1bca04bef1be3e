//! Ids by their start, as the tables show them: the rows of a table whose primary key
//! (a uuid) begins with some hex digits, found as a range on that key (every uuid
//! starting with them lies between the start padded with 0s and the start padded with
//! fs), so the primary key's index answers it, however large the table.

use crate::error::{Context, Result};
use postgres::GenericClient;
use postgres::types::ToSql;
use uuid::Uuid;

use crate::Conn;
use crate::domain::OutboxTypes;

/// Which ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdTable<'a> {
    Bookings,
    /// The outbox rows of the job's outbox types: another producer's row is no match.
    Outbox(&'a OutboxTypes),
}

/// The ids of `crm.bookings` in a key range, in order, at most `$3`.
pub(crate) const BOOKINGS_IN_RANGE_SQL: &str =
    "SELECT id FROM crm.bookings WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3";
/// How many ids of `crm.bookings` lie in a key range.
pub(crate) const BOOKINGS_IN_RANGE_COUNT_SQL: &str =
    "SELECT count(*) FROM crm.bookings WHERE id >= $1 AND id <= $2";
/// The ids of `crm.outbox` of the job's outbox types (`$4`, a filter) in a key range, in
/// order, at most `$3`.
pub(crate) const OUTBOX_IN_RANGE_SQL: &str = "SELECT id FROM crm.outbox \
     WHERE id >= $1 AND id <= $2 AND type = ANY($4::text[]) ORDER BY id LIMIT $3";
/// How many ids of `crm.outbox` of the job's outbox types (`$3`) lie in a key range.
pub(crate) const OUTBOX_IN_RANGE_COUNT_SQL: &str =
    "SELECT count(*) FROM crm.outbox WHERE id >= $1 AND id <= $2 AND type = ANY($3::text[])";

/// The smallest and the largest uuid that start with the hex digits `prefix`
/// (lowercase, at most 32).
pub(crate) fn prefix_range(prefix: &str) -> Result<(Uuid, Uuid)> {
    let pad = |c: char| -> Result<Uuid> {
        let mut hex = prefix.to_owned();
        while hex.len() < 32 {
            hex.push(c);
        }
        Uuid::parse_str(&hex).with_context(|| format!("{prefix:?} is not the start of a uuid"))
    };
    Ok((pad('0')?, pad('f')?))
}

/// The ids found for a prefix: the first `limit` in key order, and how many there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matches {
    pub first: Vec<Uuid>,
    pub total: u64,
}

/// The ids of `table` that start with `prefix`: at most `limit` of them, and their
/// number (counted only when there are more than `limit`, on the same index range).
pub fn with_prefix(
    client: &mut impl Conn,
    table: IdTable,
    prefix: &str,
    limit: u32,
) -> Result<Matches> {
    let client = client.pg();
    let (low, high) = prefix_range(prefix)?;
    let most = i64::from(limit) + 1;
    let types: &[String] = match table {
        IdTable::Bookings => &[],
        IdTable::Outbox(types) => types.as_slice(),
    };
    let (rows_sql, count_sql, rows, counted): (
        _,
        _,
        Vec<&(dyn ToSql + Sync)>,
        Vec<&(dyn ToSql + Sync)>,
    ) = match table {
        IdTable::Bookings => (
            BOOKINGS_IN_RANGE_SQL,
            BOOKINGS_IN_RANGE_COUNT_SQL,
            vec![&low, &high, &most],
            vec![&low, &high],
        ),
        IdTable::Outbox(_) => (
            OUTBOX_IN_RANGE_SQL,
            OUTBOX_IN_RANGE_COUNT_SQL,
            vec![&low, &high, &most, &types],
            vec![&low, &high, &types],
        ),
    };
    let mut first: Vec<Uuid> = client
        .query(rows_sql, &rows)
        .context("cannot look the id up by its start")?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let total = if first.len() > limit as usize {
        first.truncate(limit as usize);
        let n: i64 = client
            .query_one(count_sql, &counted)
            .context("cannot count the ids with this start")?
            .get(0);
        n as u64
    } else {
        first.len() as u64
    };
    Ok(Matches { first, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_spans_every_uuid_that_starts_with_it() {
        let (low, high) = prefix_range("bb7f5ae6").unwrap();
        assert_eq!(low.to_string(), "bb7f5ae6-0000-0000-0000-000000000000");
        assert_eq!(high.to_string(), "bb7f5ae6-ffff-ffff-ffff-ffffffffffff");
    }
}
