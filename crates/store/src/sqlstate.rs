//! The one place that reads SQLSTATE classes: what a PostgreSQL error says about the
//! deployment, the data of one row, or the moment. By class (the first two characters
//! of the code), never by message text. The store decides by them (a row's refusal, a
//! refused connection); the program reads an error's code through
//! `StoreError::sqlstate` and names the codes it acts on by the constants below.

/// What a PostgreSQL server error means for the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
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

/// The SQLSTATE of a server error; `None` for one not from the server.
pub(crate) fn code(e: &postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// The SQLSTATE of a server error (`""` for one not from the server), for log lines.
pub(crate) fn code_of(e: &postgres::Error) -> &str {
    code(e).unwrap_or_default()
}

/// A missing table (42P01) or an insufficient privilege (42501): what the preflight's
/// read meets where the pause switches cannot be read.
pub(crate) fn missing_or_forbidden(e: &postgres::Error) -> bool {
    matches!(code_of(e), "42P01" | "42501")
}

/// A feature the server does not support here (0A000): a rule in the way of a
/// data-modifying `WITH`.
pub(crate) fn feature_not_supported(e: &postgres::Error) -> bool {
    code_of(e) == "0A000"
}

/// A statement cancelled (57014): `statement_timeout`, or a cancel request.
pub(crate) fn query_canceled(e: &postgres::Error) -> bool {
    code_of(e) == QUERY_CANCELED
}

/// Too many connections (53300): a role's `CONNECTION LIMIT`, the database's, or
/// `max_connections`.
pub(crate) fn too_many_connections(e: &postgres::Error) -> bool {
    code_of(e) == TOO_MANY_CONNECTIONS
}

const TOO_MANY_CONNECTIONS: &str = "53300";

/// A lock not granted in time (55P03) or a deadlock (40P01): a statement that gave its
/// lock up, worth another try.
pub(crate) fn lock_given_up(e: &postgres::Error) -> bool {
    matches!(code_of(e), LOCK_NOT_AVAILABLE | "40P01")
}

/// The server ended the session (57P01 admin shutdown, 57P02 crash shutdown, 57P03
/// cannot connect now, 57P05 idle_session_timeout) or the connection failed (class 08).
pub(crate) fn session_ended(code: &str) -> bool {
    matches!(code, "57P01" | "57P02" | "57P03" | "57P05") || code.starts_with("08")
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
        assert_eq!(TOO_MANY_CONNECTIONS, SqlState::TOO_MANY_CONNECTIONS.code());
        for (code, named) in [
            ("42P01", SqlState::UNDEFINED_TABLE),
            ("42501", SqlState::INSUFFICIENT_PRIVILEGE),
            ("0A000", SqlState::FEATURE_NOT_SUPPORTED),
            ("40P01", SqlState::T_R_DEADLOCK_DETECTED),
            ("57P01", SqlState::ADMIN_SHUTDOWN),
            ("57P02", SqlState::CRASH_SHUTDOWN),
            ("57P03", SqlState::CANNOT_CONNECT_NOW),
            ("57P05", SqlState::IDLE_SESSION_TIMEOUT),
        ] {
            assert_eq!(code, named.code());
        }
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
