//! `run-once`: one expiration cycle. AsOf is read once; the preflight passes; the
//! phases take batches in turn while rows remain, up to `max_batches` each and while
//! the deadline leaves time for one more ([`schedule`]), each batch in its own short
//! transaction ([`batch`]): claim → domain decision → one set-based write → quarantine
//! the poison → commit.
//!
//! The rooms: `run` is the entry; `phases` orchestrates the phases, `drain` runs their
//! turns on one session and `side_by_side` on two; `schedule` is the pure schedule;
//! `batch` the batch's transaction, `poison` what a refused row becomes; `logbook` the
//! logging of what committed; `upkeep` the bookkeeping between cycles; `types` the
//! types they share. This root only declares them and re-exports: no file of the cycle
//! imports one that imports it back.

mod batch;
mod drain;
mod logbook;
mod phases;
mod poison;
mod run;
mod schedule;
mod side_by_side;
mod types;
mod upkeep;

pub use run::{run_cycle, run_once};
pub use types::CycleResult;
