//! The test services as owned children: each server is started in the foreground as a
//! child of this process (never a daemon), through `setpriv --pdeathsig` from one
//! long-lived keeper thread, so that it dies with the process that started it however
//! that process ends, and is stopped (its fast shutdown, bounded, then KILL) when the
//! value that owns it is dropped. Its temporary directory is removed with it, or kept
//! and named when the thread is panicking, so a failed test keeps its servers' logs.
//!
//! `process` is the owned child and the temporary directory; `postgres` the PostgreSQL
//! server (plain, TLS, a streaming standby with its replication slot, PgBouncer in
//! front) built from the same environment the scripts read (`PG_FLAVOR`, `PG_BINDIR`,
//! `PG_START_TIMEOUT`). `detach` keeps servers in a directory of the caller's instead,
//! detached, for `testbed start` and `testbed stop` (the scripts' by-hand servers).

pub mod detach;
pub mod error;
pub mod kafka;
pub mod kept;
pub mod kube;
pub mod observe;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod random;
pub mod scripts;
pub mod state_file;
pub mod tls;

pub use error::{Error, Result};
