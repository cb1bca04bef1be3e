//! The operators' SQL (`sql/009_operations.sql`), one room per concern: the pause
//! switches, the operations trail, re-queueing outbox rows (republish, retry-failed),
//! what `explain` reads about one booking, and `audit`'s comparison of the outbox
//! with its topics.

mod audit;
mod booking;
mod pause;
mod requeue;
mod trail;

pub use audit::{
    AuditCounts, AuditWindow, MissingRow, NoRow, SeenMessage, allow_temp_tables, begin_seen,
    compare, copy_seen, missing, missing_to_requeue, no_row, receipt_starts,
};
pub use booking::{
    AuditEntry, PoisonEntry, RowLock, TimelineEntry, audit_of, booking, outbox_of_booking,
    poison_of, row_lock, timeline_of,
};
pub use pause::{PauseRow, pause, pauses, pauses_readable, resume};
pub use requeue::{
    OutboxEntry, Requeue, Selection, count_selection, existing_ids, left_alone, requeue,
    requeue_batch,
};
pub use trail::{Operation, record, session_user};
