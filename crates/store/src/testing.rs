//! The integration tests' one door (the `testing` feature; the crate's doc says why):
//! the driver crates for their own client, and what of the store only they use. The
//! program's code never reaches it: the architecture rules refuse it there.

pub use native_tls;
pub use postgres;
pub use postgres_native_tls;

pub use crate::expiration::{candidates_sql, claim_counting_sql, claim_sql};
pub use crate::outbox::{FETCH_BYTES, MARK_PUBLISHED_SQL, PENDING_SQL};
pub use crate::outbox_lag::{
    OUTBOX_FAILED_SQL, OUTBOX_OTHERS_SQL, OUTBOX_PENDING_SQL, OUTBOX_WAITING_FOR_TOPIC_SQL,
};
pub use crate::preflight::statements as catalog_statements;
pub use crate::report::{overdue_sql, poison_sql, quarantined_sql};
pub use crate::waiting::WAITING_SQL;

/// The short ids' statements and the range a prefix stands for (the program's
/// `ids::with_prefix` runs them).
pub mod ids {
    use uuid::Uuid;

    use crate::error::Result;

    pub const BOOKINGS_IN_RANGE_SQL: &str = crate::ids::BOOKINGS_IN_RANGE_SQL;
    pub const BOOKINGS_IN_RANGE_COUNT_SQL: &str = crate::ids::BOOKINGS_IN_RANGE_COUNT_SQL;
    pub const OUTBOX_IN_RANGE_SQL: &str = crate::ids::OUTBOX_IN_RANGE_SQL;
    pub const OUTBOX_IN_RANGE_COUNT_SQL: &str = crate::ids::OUTBOX_IN_RANGE_COUNT_SQL;

    /// The smallest and the largest uuid that start with the hex digits `prefix`.
    pub fn prefix_range(prefix: &str) -> Result<(Uuid, Uuid)> {
        crate::ids::prefix_range(prefix)
    }
}

/// The migrations' parts, run one by one, and the catalog's snapshot.
pub mod migrate {
    use crate::Session;
    use crate::error::Result;
    use crate::migrate::Policy;

    pub use crate::migrate::embedded::BASELINE;
    pub use crate::migrate::lock::MIGRATE_LOCK;
    pub use crate::migrate::split::{SplitError, statements};

    /// The catalog's facts as the migrations make them (`catalog.tsv`), and the
    /// snapshot a database's own are compared with.
    pub mod catalog {
        pub use crate::migrate::catalog::{
            EXPECTED, Fact, Key, Snapshot, diff, line, parse, snapshot,
        };
    }

    /// Runs one statement as the statements of a migration run (its policy, the check
    /// for an INVALID index before a concurrent build), as the only statement of `file`.
    pub fn run_one(
        client: &mut Session,
        watcher: Option<&mut Session>,
        statement: &str,
        file: &'static str,
        policy: &Policy,
    ) -> Result<()> {
        let at = crate::migrate::run::StatementAt {
            file,
            number: 1,
            count: 1,
        };
        let watcher = watcher.map(|w| w.pg());
        crate::migrate::run::statement(client.pg(), watcher, statement, &at, policy, &|| false)
    }
}
