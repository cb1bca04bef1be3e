//! booking-expire: expires overdue CRM bookings and publishes one booking-expired event
//! per expiry through a transactional outbox. The binary (`main.rs`) only parses,
//! resolves, runs (`app`) and exits (`exit`); everything else lives in these rooms.

// No unsafe code: the compiler holds it.
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod cycle;
pub use booking_expire_domain as domain;
pub mod exit;
pub mod kafka;
pub mod obs;
pub mod ops;
pub mod preflight;
pub mod relay;
pub mod render;
pub mod report;
pub mod shutdown;
pub use booking_expire_store as store;
