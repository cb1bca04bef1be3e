//! Shared test harness, one room per concern: the suite's server and broker
//! (`services`), the database of each test (`database`), seeding and reading back
//! (`seed`), the record of what the harness made on the suite's server and the sweep
//! of a killed run's leftovers (`leftovers`), the real binary as a process
//! (`process`) and what a finished run left (`run`), a failing test's first screen
//! (`failure`), locks and gates (`locks`), servers of a test's own (`servers`), a URL
//! with another database or user (`urls`), Kafka (`kafka`; its admin client's runtime
//! and topic deletion in `kafka_admin`), TLS (`tls`), the Pushgateway (`pushgateway`)
//! and the contract's schemas (`schemas`). Everything but `kafka`, `tls`,
//! `pushgateway` and `schemas` is re-exported here, so a test says `use common::*;`.

mod database;
pub mod failure;
pub mod kafka;
mod kafka_admin;
mod leftovers;
mod locks;
mod process;
pub mod pushgateway;
pub mod rng;
mod run;
pub mod schemas;
mod seed;
mod servers;
mod services;
pub mod tls;
mod urls;

pub use {
    database::*, leftovers::*, locks::*, process::*, run::*, seed::*, servers::*,
    services::admin_url, urls::*,
};

pub const BIN: &str = env!("CARGO_BIN_EXE_booking-expire");

/// The checkout the tests run in: cargo's `CARGO_MANIFEST_DIR` at run time, else the
/// one they were built in. A test binary that cargo finds fresh in a target directory
/// shared by several checkouts (a CI cache) keeps the path of the checkout that built
/// it, which may be gone.
pub fn repo() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}
