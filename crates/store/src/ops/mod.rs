//! The operators' SQL (`sql/009_operations.sql`), one room per concern: the pause
//! switches, the operations trail, re-queueing outbox rows (republish, retry-failed),
//! and what `explain` reads about one booking.

mod booking;
mod pause;
mod requeue;
mod trail;

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
