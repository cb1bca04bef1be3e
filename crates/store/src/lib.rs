//! All SQL and transaction control live here: connecting (TLS, session timeouts), the
//! preflight's one read (schema, privileges, clock, pause switch), the claim, the batch
//! transactions' chain,
//! the set-based batch write and poison tracking, the outbox relay's queue, and the
//! reports' reads (the backlog figures are read here once, for `backlog` and the push).
//!
//! The root exports what the program's code (the application's `src/`, its tests
//! aside) names, and the types of the values it gets back; the modules it names as
//! such (`duration`, `ids`, `locks`, `migrate`, `ops`, `running`, `sqlstate`) are
//! public too, each with what the program uses of it. Nothing here knows the command
//! line: a message names no flag and tells no command to run; a finding the program
//! words itself (a connection without an answer, a refused adoption, a migration lock
//! given up) is a typed `StoreError` that carries its facts.
//!
//! What only the tests use goes through one door, the `testing` module, behind the
//! `testing` feature: the driver crates for the tests' own client, the SQL texts the
//! integration tests run or check themselves, the migrations' parts they run one by
//! one and the catalog's facts; with it, a `Session` can be made from the driver's
//! client and hands its client back (`Session::from_driver`,
//! `Session::driver_for_tests`). Only the application's `[dev-dependencies]` enable
//! the feature, so no build of the binary sees the door, and the architecture rules
//! refuse a use of it in the program's code.

// No unsafe code, and (with the tests' door open, as in every build of the tests and
// clippy's) no item marked `pub` that nothing outside can reach (it is `pub(crate)`):
// the compiler holds both. Without the door, what only it names is unreachable.
#![forbid(unsafe_code)]
#![cfg_attr(feature = "testing", warn(unreachable_pub))]

use booking_expire_domain as domain;

#[cfg(feature = "testing")]
pub mod testing;

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
pub use error::{DbRejection, Fault, LockGivenUp, NotWritable, StoreError};
pub use expiration::{
    BatchWrite, Claim, ClaimKey, CycleStatements, Poison, WriteOutcome, claim, count_left,
    quarantine, release_stale_quarantine, status_type, write_direct, write_isolating,
};
pub use hygiene::{
    FirstOf, Hygiene, IndexSize, PreparedHolder, SessionHolder, SlotHolder, TableHealth,
    XminHorizon,
};
pub use outbox::{
    Fetch, LeftOut, MAX_FAILURES, OutboxRow, Receipt, RowExtra, WAITING_FOR_TOPIC, listen,
    mark_failed, mark_published, mark_retry, pending, prepare_mark_published, prepare_pending,
    purge_published, release_advisory_locks, try_relay_lock,
};
pub use outbox_lag::{OtherRows, OutboxLag};
pub use phase_failure::{PhaseFailure, clear_phase_failure, phase_failures, record_phase_failure};
pub use preflight::{Facts, backend_pid, check_schema, read_facts};
pub use relay_state::{
    Exception, Loaded, NewException, Settling, Watermark, load_watermark, prepare_settling,
    put_exceptions, relay_state_usable, settling,
};
pub use report::{
    Backlog, BacklogScope, CHUNK_ROWS, NextClaim, Overdue, Quarantined, begin_read_only,
    candidates_in_chunks, count_candidates, quarantined_in_chunks, read_backlog, read_report,
};
pub use row_security::{ROW_SECURITY_MIGRATION, RowSecurity, outbox_type_listing, row_security};
pub use schema::{Lack, SchemaNeed};
pub use session::{Conn, Prepared, Session, Sql, Tx};
pub use settings::{Conninfo, DbConfig, SslMode, TargetSessionAttrs, check_ca_pem};
pub use sweep::{
    GapCheck, SWEEP_MIGRATION, SeqWindow, SweepState, SweepTop, inserted_xid_defaulted, sweep,
};
pub use topic_wait::{
    TOPIC_WAIT_MIGRATION, TopicWait, end_topic_waits, record_topic_waits, topic_waits,
};
pub use transaction::{BatchEnd, PauseRead, begin_chain, end_and_chain, end_chain};
pub use waiting::{TopicWaiting, waiting, waiting_total};
pub use watermark::{
    Delivered, FetchAbove, FetchedAbove, NewHigh, Purged, drop_exceptions, mark_receipts,
    pending_above, prepare_mark_receipts, prepare_pending_above, purge_range,
};
