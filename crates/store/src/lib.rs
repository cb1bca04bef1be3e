//! All SQL and transaction control live here: connecting (TLS, session timeouts), the
//! preflight's one read (schema, privileges, clock, pause switch), the claim, the batch
//! transactions' chain,
//! the set-based batch write and poison tracking, the outbox relay's queue, and the
//! reports' reads (the backlog figures are read here once, for `backlog` and the push).
//!
//! With the `driver` feature, `driver` re-exports the driver crates: the integration
//! tests' own client (their fixtures, their TLS connector), never the program's. Only
//! the application's `[dev-dependencies]` enable it, so no build of the binary sees it,
//! and the architecture rules refuse a use of it in the program's code.

// No unsafe code: the compiler holds it.
#![forbid(unsafe_code)]

use booking_expire_domain as domain;

/// The driver crates, for the integration tests' own client only (the `driver`
/// feature; the crate's doc says why).
#[cfg(feature = "driver")]
pub mod driver {
    pub use native_tls;
    pub use postgres;
    pub use postgres_native_tls;
}

mod clock;
mod connect;
pub mod duration;
mod error;
mod expiration;
mod hygiene;
pub mod ids;
pub mod locks;
pub mod migrate;
pub mod ops;
mod outbox;
mod outbox_lag;
mod phase_failure;
mod preflight;
mod privileges;
mod relay_state;
mod report;
mod row_security;
pub mod running;
mod schema;
mod session;
mod settings;
pub mod sqlstate;
mod sweep;
mod timestamp;
mod tls;
mod topic_wait;
mod transaction;
mod waiting;
mod watermark;

pub use clock::ClockSkew;
pub use connect::{Db, Opening, Writable, connect, connect_another, open_another};
pub use error::{DbRejection, Fault, LockGivenUp, StoreError};
pub use expiration::{
    BatchWrite, Claim, ClaimKey, CycleStatements, Poison, WriteOutcome, candidates_sql, claim,
    claim_counting_sql, claim_sql, count_left, left_sql, quarantine, release_stale_quarantine,
    status_type, write_direct, write_isolating,
};
pub use hygiene::{
    FirstOf, Hygiene, IndexSize, PreparedHolder, SessionHolder, SlotHolder, TableHealth,
    XminHorizon,
};
pub use outbox::{
    FETCH_BYTES, Fetch, LeftOut, MARK_PUBLISHED_SQL, MAX_FAILURES, OUTBOX_CHANNEL, OutboxRow,
    PENDING_SQL, Receipt, RowExtra, WAITING_FOR_TOPIC, listen, mark_attempted, mark_failed,
    mark_published, mark_retry, pending, prepare_mark_published, prepare_pending, purge_published,
    release_advisory_locks, try_relay_lock,
};
pub use outbox_lag::{
    OUTBOX_FAILED_SQL, OUTBOX_OTHERS_SQL, OUTBOX_PENDING_SQL, OUTBOX_WAITING_FOR_TOPIC_SQL,
    OtherRows, OutboxLag, other_rows, outbox_lag,
};
pub use phase_failure::{PhaseFailure, clear_phase_failure, phase_failures, record_phase_failure};
pub use preflight::{
    Facts, backend_pid, check_schema, read_facts, statements as catalog_statements,
};
pub use relay_state::{
    Exception, Loaded, NewException, OUTBOX_STATE_SQL, RELAY_STATE_MIGRATION, Settling, Watermark,
    load_watermark, prepare_settling, put_exceptions, relay_state_usable, settling, types_key,
};
pub use report::{
    Backlog, BacklogScope, CHUNK_ROWS, NextClaim, Overdue, Quarantined, begin_read_only,
    candidates_in_chunks, count_candidates, overdue, overdue_sql, poison_count, poison_sql,
    quarantined_in_chunks, quarantined_sql, read_backlog, read_report,
};
pub use row_security::{
    OWN_TYPES_POLICY, ROW_SECURITY_MIGRATION, RowSecurity, outbox_type_listing, row_security,
};
pub use schema::{Lack, SchemaNeed};
pub use session::{Conn, Prepared, Session, Sql, Tx};
pub use settings::{Conninfo, DbConfig, SslMode, TargetSessionAttrs, check_ca_pem};
pub use sweep::{
    GapCheck, SWEEP_MIGRATION, SeqWindow, SweepState, SweepTop, inserted_xid_defaulted, sweep,
    sweep_state,
};
pub use topic_wait::{
    TOPIC_WAIT_MIGRATION, TopicWait, end_topic_waits, record_topic_waits, topic_waits,
};
pub use transaction::{BatchEnd, PauseRead, begin_chain, end_and_chain, end_chain};
pub use waiting::{TopicWaiting, WAITING_SQL, waiting, waiting_total};
pub use watermark::{
    Delivered, FetchAbove, FetchedAbove, MARK_RECEIPTS_SQL, NewHigh, PENDING_ABOVE_SQL, Purged,
    drop_exceptions, mark_receipts, pending_above, prepare_mark_receipts, prepare_pending_above,
    purge_range,
};
