//! The integration tests, one binary: the real `booking-expire` binary against a real
//! PostgreSQL and a real Apache Kafka broker. `common` is the harness: it starts a
//! throwaway server and broker for the whole run when `DATABASE_URL` / `KAFKA_BROKERS`
//! are not set, and gives each test a database of its own cloned from a migrated
//! template. Each module is one subject; docs/guides/development.md says which ones the
//! second pass of scripts/test.sh runs again on other versions.

// The tests read the real clocks to bound their waits (common's wait_for and its
// kin, the polls of servers they start) and measure what the binary did in real time:
// the rooms of clippy.toml's disallowed methods are the crate's, not its tests'.
#![allow(
    clippy::disallowed_methods,
    reason = "tests bound their waits and measure the binary in real time"
)]

// The integration tests' own clients: the drivers as the store and the kafka crate
// re-export them (the store's `testing` door and the kafka crate's `driver` module,
// behind features only the tests enable), so no package but the store lists postgres
// and none but the kafka crate rdkafka. Each module names them from here
// (`use crate::postgres;`).
use booking_expire_kafka::driver::rdkafka;
use booking_expire_store::testing::{native_tls, postgres, postgres_native_tls};

mod common;

mod acl;
mod audit;
mod backlog;
mod bad_input;
mod budget;
mod cluster;
mod contract;
mod dashboard;
mod delivery_faults;
mod design;
mod dry_run;
mod dual_publish;
mod exit_codes;
mod explain;
mod failover;
mod faults;
mod golden;
mod host_matrix;
mod host_rows;
mod host_sessions;
mod hygiene;
mod kube;
mod long_running;
mod metrics;
mod migrate;
mod migrate_catalog;
mod migrate_compat;
mod migrate_notices;
mod migrate_partial;
mod migrate_refuse;
mod migrate_split;
mod no_loss;
mod pause;
mod poison_and_races;
mod pooler;
mod prometheus;
mod properties;
mod push_tls;
mod reference;
mod relay;
mod relay_isolation;
mod relay_own_broker;
mod relay_pipeline;
mod republish;
mod roles;
mod row_security;
mod run_once;
mod shared_outbox;
mod short_ids;
mod signals;
mod simulation;
mod soak;
mod tls;
mod trace;
mod upgrade;
mod waiting;
mod watermark;
