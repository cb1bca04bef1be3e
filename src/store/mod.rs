//! All SQL lives here: connecting (TLS, session timeouts), the schema check, the claim,
//! the set-based batch write and poison tracking, the outbox relay's queue, and the
//! reports' reads (the backlog figures are read here once, for `backlog` and the push).

mod clock;
mod connect;
mod expiration;
mod hygiene;
pub mod ids;
pub mod ops;
mod outbox;
mod report;
pub mod running;
mod schema;

pub use clock::{ClockSkew, measure_clock_skew};
pub use connect::{Db, connect};
pub use expiration::{
    BatchWrite, Claim, ClaimKey, CycleStatements, Poison, WriteOutcome, booking_row,
    candidates_sql, claim, claim_counting_sql, claim_sql, count_left, left_sql, quarantine,
    release_stale_quarantine, write_direct, write_isolating,
};
pub use hygiene::{
    Hygiene, IndexSize, Listed, PreparedHolder, SessionHolder, SlotHolder, TableHealth, XminHorizon,
};
pub use outbox::{
    MARK_PUBLISHED_SQL, MAX_FAILURES, OUTBOX_CHANNEL, OutboxRow, PENDING_SQL, Receipt, listen,
    mark_attempted, mark_failed, mark_published, mark_retry, pending, purge_published,
    try_relay_lock,
};
pub use report::{
    Backlog, CHUNK_ROWS, Figures, NextClaim, OUTBOX_FAILED_SQL, OUTBOX_PENDING_SQL, OutboxLag,
    Overdue, Quarantined, begin_read_only, candidates_in_chunks, count_candidates, outbox_lag,
    overdue, overdue_sql, poison_count, poison_sql, quarantined_in_chunks, quarantined_sql,
    read_backlog, read_report,
};
pub use schema::{Need, check_schema, status_type};
