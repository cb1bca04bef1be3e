//! The error of a run a signal stopped, while it waited for the lock or between
//! statements.

use crate::error::{Fault, fail};

/// The error of a run a signal stopped (its exit code is the signal's).
pub(super) fn stopped_error() -> crate::error::StoreError {
    fail(
        Fault::Temporary,
        "migrate: stopped by a signal; what committed stays, the next run goes on from there",
    )
}
