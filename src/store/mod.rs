//! All SQL lives here: connecting (TLS, session timeouts), the schema check, the claim,
//! the set-based batch write and poison tracking.

mod connect;
mod expiration;
mod schema;

pub use connect::connect;
pub use expiration::{
    BatchWrite, CycleStatements, Poison, claim, claim_sql, count_skipped, quarantine,
    write_isolating,
};
pub use schema::{Need, check_schema};
