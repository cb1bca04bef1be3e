//! The cycle's chain of batch transactions. The first is begun with `BEGIN`; each batch
//! ends its own with `COMMIT AND CHAIN` (or `ROLLBACK AND CHAIN`), which begins the next
//! one in the same round trip; the empty one left after the last batch is rolled back.
//! A chained transaction holds no snapshot, lock or transaction id until its first
//! statement. Each round trip can also read the run's pause switch, so the check at
//! every batch boundary costs no round trip of its own.

use postgres::{Client, SimpleQueryMessage, SimpleQueryRow};

use super::ops::PauseRow;
use super::running::{pause_row, pause_statement};
use crate::Session;
use crate::domain::Worker;

/// Every batch's transaction checks each constraint at the statement that breaks it,
/// also those the CRM declared `DEFERRABLE INITIALLY DEFERRED`: a refused row then
/// fails its write, where the batch can isolate and quarantine it, not the COMMIT,
/// where the whole batch would roll back. The setting lasts one transaction, so every
/// begin and chain of a batch's transaction sets it (in the same round trip).
const IMMEDIATE: &str = "SET CONSTRAINTS ALL IMMEDIATE";

/// How a batch's transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEnd {
    Commit,
    Rollback,
}

/// The pause switch as a chain's round trip read it: `None` when it was not asked for.
pub type PauseRead = Option<Option<PauseRow>>;

/// Begins the first transaction of a session's chain; with `pause`, reads that
/// worker's switch in the same round trip.
pub fn begin_chain(client: &mut Session, pause: Option<Worker>) -> crate::error::Result<PauseRead> {
    let client = client.pg();
    let mut sql = format!("BEGIN; {IMMEDIATE}");
    if let Some(worker) = pause {
        sql = format!("{sql}; {}", pause_statement(worker));
    }
    Ok(read(client, &sql, pause.is_some())?)
}

/// Ends a batch's transaction with `end` and sets the chained one's constraints
/// immediate, in one round trip; with `pause`, reads that command's switch in the same
/// round trip: before the commit, in the batch's transaction (a failed read then rolls
/// the batch back, never leaves a committed batch told as failed), after a rollback, in
/// the chained one. On a failure the session is left with a fresh transaction open
/// whatever state the failure left it in, so the next batch never runs its claim and
/// write in autocommit.
pub fn end_and_chain(
    client: &mut Session,
    end: BatchEnd,
    pause: Option<Worker>,
) -> crate::error::Result<PauseRead> {
    let client = client.pg();
    let read_pause = pause.map(pause_statement);
    let sql = match (end, &read_pause) {
        (BatchEnd::Commit, Some(read)) => format!("{read}; COMMIT AND CHAIN; {IMMEDIATE}"),
        (BatchEnd::Commit, None) => format!("COMMIT AND CHAIN; {IMMEDIATE}"),
        (BatchEnd::Rollback, Some(read)) => format!("ROLLBACK AND CHAIN; {IMMEDIATE}; {read}"),
        (BatchEnd::Rollback, None) => format!("ROLLBACK AND CHAIN; {IMMEDIATE}"),
    };
    let ended = read(client, &sql, pause.is_some());
    if ended.is_err() && !client.is_closed() {
        let _ = client.batch_execute(&format!("ROLLBACK; BEGIN; {IMMEDIATE}"));
    }
    Ok(ended?)
}

/// Ends the empty transaction the last batch chained (nothing in it: no statement ran
/// since). A lost connection shows in `client.is_closed()`.
pub fn end_chain(client: &mut Session) {
    let client = client.pg();
    if !client.is_closed() {
        let _ = client.batch_execute("ROLLBACK");
    }
}

fn read(client: &mut Client, sql: &str, pause: bool) -> Result<PauseRead, postgres::Error> {
    let messages = client.simple_query(sql)?;
    if !pause {
        return Ok(None);
    }
    let rows: Vec<SimpleQueryRow> = messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect();
    Ok(Some(pause_row(&rows)))
}
