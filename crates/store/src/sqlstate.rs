//! The one place that reads SQLSTATE classes: what a PostgreSQL error says about the
//! deployment, the data of one row, or the moment. By class (the first two characters
//! of the code), never by message text. The store decides by them (a row's refusal, a
//! refused connection); the program reads a chain's code through `store::code_in` and
//! names the codes it acts on by the constants below.

/// What a PostgreSQL server error means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Invalid authorization (28), invalid catalog name (3D), syntax error or access
    /// rule violation (42: a missing table or column, an insufficient privilege): the
    /// deployment is wrong; a retry will not help.
    Deployment,
    /// Feature not supported (0A): also the deployment, but a connection attempt that
    /// meets it is refused by a server that is up.
    Unsupported,
    /// One row's data was refused: data exceptions (22), integrity constraints (23),
    /// errors raised by triggers (P0), triggered-action failures (09, 27, 44).
    RowRejection,
    /// Anything else: lock and statement timeouts, serialization failures, a server
    /// shutting down; worth a retry.
    Other,
}

/// The class of a server error; `None` when the error did not come from the server
/// (I/O, a closed connection).
pub(crate) fn class(e: &postgres::Error) -> Option<Class> {
    e.as_db_error().map(|db| of_code(db.code().code()))
}

/// The class of a five-character SQLSTATE.
fn of_code(code: &str) -> Class {
    match code.get(..2).unwrap_or_default() {
        "28" | "3D" | "42" => Class::Deployment,
        "0A" => Class::Unsupported,
        "22" | "23" | "P0" | "09" | "27" | "44" => Class::RowRejection,
        _ => Class::Other,
    }
}

/// A write refused as the server is read-only (a standby, a primary during a failover).
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
/// `lock_timeout` ran out, or `NOWAIT` met a lock.
pub const LOCK_NOT_AVAILABLE: &str = "55P03";
/// `statement_timeout` ran out, or a cancel request came.
pub const QUERY_CANCELED: &str = "57014";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_named_codes_are_the_drivers() {
        use postgres::error::SqlState;
        assert_eq!(
            READ_ONLY_SQL_TRANSACTION,
            SqlState::READ_ONLY_SQL_TRANSACTION.code()
        );
        assert_eq!(LOCK_NOT_AVAILABLE, SqlState::LOCK_NOT_AVAILABLE.code());
        assert_eq!(QUERY_CANCELED, SqlState::QUERY_CANCELED.code());
    }

    #[test]
    fn classes_are_read_from_the_first_two_characters() {
        // The table above, checked against the codes the job meets in practice.
        let cases = [
            ("28P01", Class::Deployment),
            ("3D000", Class::Deployment),
            ("42501", Class::Deployment),
            ("42P01", Class::Deployment),
            ("0A000", Class::Unsupported),
            ("22001", Class::RowRejection),
            ("23505", Class::RowRejection),
            ("P0001", Class::RowRejection),
            ("55P03", Class::Other),
            ("57014", Class::Other),
            ("40001", Class::Other),
        ];
        for (code, want) in cases {
            assert_eq!(of_code(code), want, "{code}");
        }
    }
}
