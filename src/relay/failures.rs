//! A batch's rows that did not go, recorded: failed for good, backing off after a
//! refusal, or left for later (not acknowledged, their topic unusable). On the relay's
//! own state they are exceptions (and, with the legacy marks on, also the columns the
//! release before reads); on the columns' queue only the columns, as before.

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::domain::OutboxTypes;
use crate::store::{self, MAX_FAILURES, NewException, OutboxRow};

/// The rows of a batch that did not go, with their errors.
#[derive(Default)]
pub(super) struct NotSent<'a> {
    /// Never deliverable (too large, invalid): failed now.
    pub permanent: Vec<(&'a OutboxRow, String)>,
    /// Refused by the broker while it took others: a back-off, failed after
    /// [`MAX_FAILURES`].
    pub refused: Vec<(&'a OutboxRow, String)>,
    /// Not the row's fault (the cluster, its topic): as they were, due again
    /// (`reason` 'unsent' or 'topic').
    pub left: Vec<(&'a OutboxRow, &'static str)>,
}

/// Where the rows' state is kept.
#[derive(Debug, Clone, Copy)]
pub(super) enum Marks {
    /// `crm.outbox`'s columns only (no migration 16).
    Columns,
    /// The exceptions, and the columns as well when `legacy` is set.
    Own { legacy: bool },
}

/// Records the rows; returns the refused ones given up on (now failed).
pub(super) fn record(
    client: &mut Session,
    marks: Marks,
    now: DateTime<Utc>,
    rows: &NotSent,
    types: &OutboxTypes,
) -> Result<Vec<Uuid>> {
    let ids = |list: &[(&OutboxRow, String)]| -> Vec<(Uuid, String)> {
        list.iter().map(|(r, e)| (r.id, e.clone())).collect()
    };
    let legacy = match marks {
        Marks::Columns => true,
        Marks::Own { legacy } => legacy,
    };
    let mut gave_up_columns = Vec::new();
    if legacy {
        store::mark_failed(client, now, &ids(&rows.permanent), types)?;
        gave_up_columns = store::mark_retry(client, now, &ids(&rows.refused), types)?;
    }
    let Marks::Own { .. } = marks else {
        return Ok(gave_up_columns);
    };
    let mut exceptions = Vec::new();
    let mut gave_up = Vec::new();
    for (row, error) in &rows.permanent {
        exceptions.push(NewException {
            failed_at: Some(now),
            last_error: Some(error.as_str()),
            attempts: row.extra.attempts.min(i32::MAX - 1) + 1,
            ..exception(row, "failed")
        });
    }
    let mut messages = Vec::new();
    for (row, error) in &rows.refused {
        let failures = row.extra.failures.clamp(0, MAX_FAILURES - 1) + 1;
        let give_up = failures >= MAX_FAILURES;
        messages.push(if give_up {
            gave_up.push(row.id);
            format!("gave up after {MAX_FAILURES} failed attempts: {error}")
        } else {
            error.clone()
        });
        let _ = give_up;
    }
    for ((row, _), message) in rows.refused.iter().zip(&messages) {
        let failures = row.extra.failures.clamp(0, MAX_FAILURES - 1) + 1;
        let give_up = failures >= MAX_FAILURES;
        exceptions.push(NewException {
            attempts: row.extra.attempts.min(i32::MAX - 1) + 1,
            failures,
            next_attempt_at: (!give_up).then(|| now + back_off(row.extra.failures)),
            last_error: Some(message.as_str()),
            failed_at: give_up.then_some(now),
            ..exception(row, if give_up { "failed" } else { "back-off" })
        });
    }
    for (row, reason) in &rows.left {
        exceptions.push(exception(row, reason));
    }
    store::put_exceptions(client, &exceptions, now)?;
    Ok(gave_up)
}

/// A row's exception as it stands, for `reason` (no back-off, not failed).
pub(super) fn exception<'a>(row: &'a OutboxRow, reason: &'static str) -> NewException<'a> {
    NewException {
        seq: row.seq,
        id: row.id,
        key: &row.key,
        topic: &row.topic,
        r#type: &row.extra.r#type,
        reason,
        attempts: row.extra.attempts,
        failures: row.extra.failures,
        next_attempt_at: None,
        last_error: row.extra.last_error.as_deref(),
        failed_at: None,
    }
}

/// The back-off after a row's `failures`-th failure: 1 s, 2 s, 4 s, … capped at 10 min,
/// as the columns' statement computes it.
pub(super) fn back_off(failures: i32) -> TimeDelta {
    let seconds = 2_i64.pow(failures.clamp(0, 10) as u32);
    TimeDelta::seconds(seconds.min(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_up_to_ten_minutes() {
        assert_eq!(back_off(0), TimeDelta::seconds(1));
        assert_eq!(back_off(1), TimeDelta::seconds(2));
        assert_eq!(back_off(9), TimeDelta::seconds(512));
        assert_eq!(back_off(10), TimeDelta::seconds(600));
        assert_eq!(back_off(i32::MAX), TimeDelta::seconds(600));
        assert_eq!(back_off(-3), TimeDelta::seconds(1));
    }
}
