//! A model of the relay's watermark protocol (docs/design.md, "The model"), checked
//! exhaustively by stateright: writer sessions drawing `seq` from sequence caches,
//! PostgreSQL's xids and snapshots, the relay's fetch, mark, gap check or commit sweep,
//! purge, crash and restart, under today's floor rule and the new one. Test-only: no
//! crate of the workspace lists it; its tests are the checks.

pub mod bounds;
pub mod model;
pub mod pg;
pub mod progress;
pub mod relay_state;
pub mod state;
pub mod step;
pub mod trace;
pub mod watermark;
pub mod writers;

#[cfg(test)]
mod tests;
