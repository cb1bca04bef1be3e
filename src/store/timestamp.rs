//! [`Timestamp`] to and from PostgreSQL's binary `timestamptz` (and `timestamp`): the
//! eight bytes as they are, so `±infinity` and any year PostgreSQL holds decode.

use std::error::Error;

use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::domain::Timestamp;

type BoxError = Box<dyn Error + Sync + Send>;

impl<'a> FromSql<'a> for Timestamp {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        let bytes: [u8; 8] = raw
            .try_into()
            .map_err(|_| format!("a timestamp is 8 bytes, got {}", raw.len()))?;
        Ok(Timestamp::from_pg_micros(i64::from_be_bytes(bytes)))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::TIMESTAMP
    }
}

impl ToSql for Timestamp {
    fn to_sql(&self, _: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, BoxError> {
        out.extend_from_slice(&self.pg_micros().to_be_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ || *ty == Type::TIMESTAMP
    }

    to_sql_checked!();
}
