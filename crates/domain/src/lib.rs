//! The booking expiration domain: statuses, phases, the `Expire(AsOf)` transition with
//! its guards, the integration event it raises, and the plan of a batch (`plan`:
//! rows + AsOf + ids in, decisions out).
//!
//! Pure by design: nothing here reads a clock, does I/O or logs. Time (`as_of`) and
//! identities (run id, message id) come in as arguments, so `run-once` and `dry-run`
//! reach exactly the same decision for the same row and the same moment.

// No unsafe code: the compiler holds it.
#![forbid(unsafe_code)]

pub mod booking;
mod event;
pub mod json;
mod outbox_types;
mod payload_order;
pub mod plan;
mod status;
mod time;
mod worker;

pub use booking::{BookingRow, Expiry, expire};
pub use event::{
    AGGREGATE_TYPE, ContractVersion, EVENT_TYPE, ExpiredEvent, ExpiredEventV2, TOPIC,
    event_headers, rfc3339, with_header,
};
pub use outbox_types::{MAX_OUTBOX_TYPES, OUTBOX_TYPES_INPUT, OutboxTypes};
pub use payload_order::{PAYLOAD_FIELDS, payload_in_contract_order};
pub use plan::{AsOf, BatchWrite, OutboxEvent, Poison, decide};
pub use status::{Phase, Status};
pub use time::Timestamp;
pub use worker::Worker;
