//! Where the project's scripts are, which the services' set-up runs (the binaries'
//! installation, Kafka's jars, the Go-built tools).

use std::path::{Path, PathBuf};

/// The scripts' directory: `BOOKING_EXPIRE_SCRIPTS` when set, else that of the checkout
/// cargo runs the tests in (its `CARGO_MANIFEST_DIR` at run time: a test binary found
/// fresh in a target directory several checkouts share may come from one that is gone),
/// else the checkout this crate was built in.
pub fn scripts_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BOOKING_EXPIRE_SCRIPTS") {
        return dir.into();
    }
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join("scripts"))
        .filter(|d| d.join("pg-start.sh").is_file())
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts"))
}
