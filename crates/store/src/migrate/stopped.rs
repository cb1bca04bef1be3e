//! The error of a run a signal stopped, while it waited for the lock or between
//! statements.

use crate::error::StoreError;

/// The error of a run a signal stopped (the program ends it as the signal says).
pub(super) fn stopped_error() -> StoreError {
    StoreError::MigrationStopped
}
