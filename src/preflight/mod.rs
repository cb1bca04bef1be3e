//! The checks every writing command (`run-once`, `relay-outbox`) makes before it works,
//! in this order: its pause switch (paused: it does nothing and exits 0), a session
//! that may write, a session of its own (no transaction pooler), then, for `run-once`,
//! the clock guard, and the schema with the role's privileges. The database is asked
//! once, in one round trip ([`store::read_facts`]), then the pooler check opens its second
//! session; what is found is judged here. The results are plain data of this room.

mod clock;
mod pause;
mod pooler;
mod row_security;
mod writer;

use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};

use crate::config::DbConfig;
use crate::store::{self, Db};

pub(crate) use pause::{PauseWatch, Paused, announce_working, stopped_mid_run};
pub(crate) use row_security::{Defence, check as check_row_security};
pub(crate) use writer::Writer;

/// What the preflight asks of a command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checks {
    pub writer: Writer,
    /// The clock guard's limit (`run-once`), or none.
    pub max_clock_skew: Option<Duration>,
    /// Whether the pooler check may make do with this session alone when the server
    /// refuses a second connection (`run-once`; the relay needs two anyway).
    pub one_session_is_enough: bool,
}

/// How the preflight ended, when no check failed.
#[derive(Debug)]
pub(crate) enum Preflight {
    /// The command's switch is on: do nothing (logged).
    Paused(Paused),
    /// Every check passed: work. `pause` watches the switch while it works.
    Ready { pause: PauseWatch },
}

/// Fails with 78 unless `db` has a server session of its own (no transaction pooler
/// in between), as the writing commands' preflight proves it: `command` needs one for
/// a session advisory lock and its session settings.
pub(crate) fn require_own_session(db: &mut Db, cfg: &DbConfig, command: &str) -> Result<()> {
    let first = store::backend_pid(&mut db.client, false)?;
    let second = store::connect_another(cfg);
    pooler::require_session(&mut db.client, first, second, command, true)
}

/// Runs the preflight of `checks` on `db` (opened from `cfg`) at `now`. Fails with the
/// first check that does not hold: writable (75), pooler (78), clock (78), schema and
/// privileges (78).
pub(crate) fn check(
    db: &mut Db,
    cfg: &DbConfig,
    checks: Checks,
    now: DateTime<Utc>,
) -> Result<Preflight> {
    let writer = checks.writer;
    // The pooler check's second session connects beside the read (a new backend's start
    // is most of its cost), but sends its first statement only after the first
    // session's transaction ended: behind a transaction pooler that statement then lands
    // on the server session the first just gave back (sent beside the first's read, it
    // took another, and the check could pass). A connection takes no server session of
    // a pooler before its first statement.
    let second = store::open_another(cfg);
    let facts = store::read_facts(&mut db.client, writer.need(), writer.worker())?;
    if let Some(row) = &facts.pause {
        return Ok(Preflight::Paused(pause::honour(writer, row, now)));
    }
    db.require_writable(cfg, writer.as_str())?;
    let second = second.finish(cfg);
    pooler::require_session(
        &mut db.client,
        facts.backend_pid,
        second,
        writer.as_str(),
        checks.one_session_is_enough,
    )?;
    if let Some(max) = checks.max_clock_skew {
        clock::check(&facts.skew, max)?;
    }
    facts.judge_schema()?;
    Ok(Preflight::Ready {
        pause: PauseWatch::new(writer, facts.pause_readable),
    })
}
