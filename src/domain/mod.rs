//! The booking expiration domain: statuses, phases, the `Expire(AsOf)` transition with
//! its guards, the integration event it raises, and the plan of a batch (`plan`:
//! rows + AsOf + ids in, decisions out).
//!
//! Pure by design: nothing here reads a clock, does I/O or logs. Time (`as_of`) and
//! identities (run id, message id) come in as arguments, so `run-once` and `dry-run`
//! reach exactly the same decision for the same row and the same moment.

pub(crate) mod booking;
mod event;
pub mod json;
pub mod plan;
mod time;

pub use booking::{BookingRow, Expiry, Phase, Status, expire};
pub use event::{
    AGGREGATE_TYPE, ContractVersion, EVENT_TYPE, ExpiredEvent, ExpiredEventV2, PAYLOAD_FIELDS,
    TOPIC, event_headers, payload_in_contract_order, rfc3339, with_header,
};
pub use plan::{AsOf, BatchWrite, OutboxEvent, Poison, decide};
pub use time::Timestamp;
