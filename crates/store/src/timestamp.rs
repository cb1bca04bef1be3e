//! [`Timestamp`] to and from PostgreSQL's binary `timestamptz` (and `timestamp`): the
//! eight bytes as they are, so `±infinity` and any year PostgreSQL holds decode. The
//! driver's traits are implemented on the store's own [`PgTimestamp`], not on the
//! domain's type (the orphan rule allows them only in the crate of the type or of the
//! trait); [`get`] and [`get_opt`] read a column into a [`Timestamp`].

use std::error::Error;

use postgres::Row;
use postgres::row::RowIndex;
use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::domain::Timestamp;

type BoxError = Box<dyn Error + Sync + Send>;

/// A [`Timestamp`] as the driver reads and binds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PgTimestamp(pub Timestamp);

impl<'a> FromSql<'a> for PgTimestamp {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let bytes: [u8; 8] = raw
            .try_into()
            .map_err(|_| format!("a timestamp is 8 bytes, got {}", raw.len()))?;
        Ok(PgTimestamp(Timestamp::from_pg_micros(i64::from_be_bytes(
            bytes,
        ))))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::TIMESTAMP
    }
}

impl ToSql for PgTimestamp {
    fn to_sql(&self, _: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        out.extend_from_slice(&self.0.pg_micros().to_be_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::TIMESTAMP
    }

    to_sql_checked!();
}

/// A `timestamptz` column that is never NULL, as a [`Timestamp`] (panics like
/// `Row::get` on a NULL or a column of another type).
pub(crate) fn get<I: RowIndex + std::fmt::Display>(row: &Row, column: I) -> Timestamp {
    row.get::<_, PgTimestamp>(column).0
}

/// A `timestamptz` column that may be NULL, as an `Option<Timestamp>`.
pub(crate) fn get_opt<I: RowIndex + std::fmt::Display>(row: &Row, column: I) -> Option<Timestamp> {
    row.get::<_, Option<PgTimestamp>>(column).map(|t| t.0)
}
