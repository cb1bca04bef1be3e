//! One statement of a migration, run as the policy says: its own transaction
//! (autocommit), the runner's `lock_timeout` and `statement_timeout` set before it, a
//! lock given up (55P03) or a deadlock (40P01) tried again after a back-off until the
//! policy's `retry_for` is spent; a concurrent index build under the patient limits, an
//! INVALID leftover of an earlier build dropped first.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::Result;
use log::{info, warn};
use postgres::Client;

use super::policy::{self, Kind, Policy};
use super::split::first_line;
use crate::duration::show_duration;
use crate::error::{Context, Fault, LockGivenUp, StoreError};

/// Where a statement is: its file, and its place there (`number` of `count`, from 1).
pub(crate) struct StatementAt {
    pub file: &'static str,
    pub number: usize,
    pub count: usize,
}

impl StatementAt {
    fn statement(&self) -> String {
        format!("{}/{}", self.number, self.count)
    }
}

/// Runs `statement` of `at` under `policy`; `watcher` (a second session) reads which
/// lock it waits for while it runs.
#[allow(
    clippy::disallowed_methods,
    reason = "the runner's back-off between lock retries is real time, bounded by retry_for"
)]
pub(crate) fn statement(
    client: &mut Client,
    mut watcher: Option<&mut Client>,
    statement: &str,
    at: &StatementAt,
    policy: &Policy,
    stopped: &dyn Fn() -> bool,
) -> Result<()> {
    if stopped() {
        return Err(super::stopped::stopped_error());
    }
    let kind = policy::kind(statement);
    info!(Migration = at.file, Statement = at.statement().as_str();
          "migrate: statement {}/{}: {}", at.number, at.count, first_line(statement));
    let (lock_timeout, statement_timeout) = kind.timeouts(policy);
    let mut attempt = 0u32;
    let mut first_failure: Option<Instant> = None;
    loop {
        attempt += 1;
        // Before every try: a build that failed (also this statement's last try, given
        // up or deadlocked) leaves an INVALID index that IF NOT EXISTS would skip.
        if let Kind::IndexBuild { schema, index } = &kind {
            drop_invalid(client, schema.as_deref(), index, at, policy)?;
            if attempt == 1
                && let Some(twin) = renamed_twin(client, schema.as_deref(), index)?
            {
                warn!(Migration = at.file, Statement = at.statement().as_str(), Index:% = twin;
                      "migrate: {twin} has the definition {} builds, under another name (renamed \
                       by hand?): building it makes a second, identical index that every write \
                       of the table keeps up; drop one of the two afterwards", index);
            }
        }
        set_timeouts(client, lock_timeout, statement_timeout)?;
        let pid = backend_pid(client)?;
        let (result, waited_for) = watched(
            client,
            watcher.as_deref_mut(),
            pid,
            statement,
            lock_timeout,
            (!matches!(kind, Kind::Queued)).then_some(at),
        );
        let error = match result {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let retryable = crate::sqlstate::lock_given_up(&error);
        let lock = waited_for.unwrap_or_else(|| "a lock the watcher did not see".to_owned());
        if !retryable {
            let failure = crate::error::fault_of(&error);
            return Err(error).classify(
                failure,
                format!(
                    "migration {} failed at statement {} ({}); the statements before it \
                     stay applied, the file runs again whole next time",
                    at.file,
                    at.statement(),
                    first_line(statement)
                ),
            );
        }
        let since = *first_failure.get_or_insert_with(Instant::now);
        let delay = policy::backoff(attempt, policy::jitter());
        if since.elapsed() + delay > policy.retry_for {
            return Err(StoreError::StatementLockGivenUp(Box::new(LockGivenUp {
                file: at.file,
                statement: at.statement(),
                first_line: first_line(statement).to_owned(),
                lock_timeout,
                attempts: attempt,
                retry_for: policy.retry_for,
                lock,
            })));
        }
        warn!(Migration = at.file, Statement = at.statement().as_str(), Attempt = attempt,
              RetryInMs = delay.as_millis() as u64, Lock = lock.as_str(), SqlState = crate::sqlstate::code_of(&error);
              "migrate: gave up waiting for a lock after {} (so that nobody queues behind it); retry {attempt} in {}",
              show_duration(lock_timeout), show_duration(delay));
        std::thread::sleep(delay);
        if stopped() {
            return Err(super::stopped::stopped_error());
        }
    }
}

/// Sets the statement's limits on the session, in a round trip of its own.
fn set_timeouts(client: &mut Client, lock: Duration, statement: Duration) -> Result<()> {
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}; SET statement_timeout = {}",
            lock.as_millis(),
            statement.as_millis()
        ))
        .classify(Fault::Temporary, "cannot set the migration's timeouts")
}

fn backend_pid(client: &mut Client) -> Result<i32> {
    Ok(client
        .query_one("SELECT pg_backend_pid()", &[])
        .classify(Fault::Temporary, "cannot read the session's backend PID")?
        .get(0))
}

/// Runs `statement` on `client` while `watcher`, if any, looks at what the session
/// waits for, from half the lock timeout on; returns the statement's result and the
/// last lock seen waited for ("AccessExclusiveLock on relation crm.outbox, held by
/// PID 123").
#[allow(
    clippy::disallowed_methods,
    reason = "a concurrent build's progress is logged every PROGRESS_EVERY of real time"
)]
fn watched(
    client: &mut Client,
    watcher: Option<&mut Client>,
    pid: i32,
    statement: &str,
    lock_timeout: Duration,
    concurrent: Option<&StatementAt>,
) -> (Result<(), postgres::Error>, Option<String>) {
    let Some(watcher) = watcher else {
        return (client.batch_execute(statement), None);
    };
    let (done, finished) = mpsc::channel::<()>();
    let place = concurrent.map(|at| (at.file, at.statement()));
    std::thread::scope(|scope| {
        let seen = scope.spawn(move || {
            let first = (lock_timeout / 2).max(Duration::from_millis(20));
            let every = (lock_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
            let mut wait = first;
            if place.is_some() {
                wait = wait.min(PROGRESS_EVERY);
            }
            let started = Instant::now();
            let mut logged = Duration::ZERO;
            let mut seen = None;
            while let Err(mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(wait) {
                if let Some(lock) = waiting_for(watcher, pid) {
                    seen = Some(lock);
                }
                if let Some((file, statement)) = &place
                    && started.elapsed() >= logged + PROGRESS_EVERY
                {
                    logged = started.elapsed();
                    let (phase, blockers) = progress(watcher, pid);
                    info!(Migration = *file, Statement = statement.as_str(), ElapsedMs = logged.as_millis() as u64;
                          "migrate: statement {statement} of {file} still running after {}: phase {phase}; waiting for {blockers}",
                          show_duration(Duration::from_secs(logged.as_secs())));
                }
                wait = if place.is_some() {
                    every.min(PROGRESS_EVERY)
                } else {
                    every
                };
            }
            seen
        });
        let result = client.batch_execute(statement);
        let _ = done.send(());
        (result, seen.join().ok().flatten())
    })
}

/// How often a concurrent build (or other `CONCURRENTLY` statement) that is still
/// running says what it does and waits for.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// A concurrent build's phase (`pg_stat_progress_create_index`) and the sessions it
/// waits for (`pg_blocking_pids`, else the progress view's current locker), in words.
fn progress(watcher: &mut Client, pid: i32) -> (String, String) {
    let row = watcher
        .query_opt(
            "SELECT coalesce((SELECT p.phase || CASE WHEN p.lockers_total > 0
                                     THEN format(' (%s of %s old transactions ended)',
                                                 p.lockers_done, p.lockers_total)
                                     ELSE '' END
                                FROM pg_catalog.pg_stat_progress_create_index p
                               WHERE p.pid = $1), 'not an index build, or between phases'),
                    coalesce(nullif(array_to_string(pg_blocking_pids($1), ', '), ''),
                             (SELECT nullif(p.current_locker_pid, 0)::text
                                FROM pg_catalog.pg_stat_progress_create_index p
                               WHERE p.pid = $1), '')",
            &[&pid],
        )
        .ok()
        .flatten();
    let Some(row) = row else {
        return (
            "unknown (the watcher could not read it)".to_owned(),
            "nothing it could see".to_owned(),
        );
    };
    let (phase, pids): (String, String) = (row.get(0), row.get(1));
    let blockers = if pids.is_empty() {
        "no other session".to_owned()
    } else {
        format!("the transactions of PID {pids} to end")
    };
    (phase, blockers)
}

/// The lock `pid` waits for right now, and who holds it, as one phrase.
fn waiting_for(watcher: &mut Client, pid: i32) -> Option<String> {
    let row = watcher
        .query_opt(
            "SELECT l.mode, l.locktype,
                    coalesce(l.relation::regclass::text, ''),
                    array_to_string(pg_blocking_pids($1), ', ')
               FROM pg_catalog.pg_locks l
              WHERE l.pid = $1 AND NOT l.granted
              LIMIT 1",
            &[&pid],
        )
        .ok()??;
    let (mode, locktype, relation, holders): (String, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let what = if relation.is_empty() {
        format!("{mode} ({locktype})")
    } else {
        format!("{mode} on {relation}")
    };
    Some(if holders.is_empty() {
        what
    } else {
        format!("{what}, held by PID {holders}")
    })
}

/// The schema of the index `index` (in `schema`, else the search path's) when an
/// earlier build left it INVALID.
pub(super) fn invalid(
    client: &mut Client,
    schema: Option<&str>,
    index: &str,
) -> Result<Option<String>> {
    Ok(client
        .query_opt(
            "SELECT n.nspname::text
               FROM pg_catalog.pg_index i
               JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relname = $1 AND n.nspname = coalesce($2, current_schema())
                AND NOT i.indisvalid",
            &[&index, &schema],
        )
        .classify(Fault::Temporary, "cannot read whether the index is valid")?
        .map(|row| row.get(0)))
}

/// A valid index of `schema` (`crm` when none) that has, under another name, the
/// definition the files give `index`, while `index` itself is not there: the build
/// would make a second, identical index (a DBA renamed the job's). `schema.name`.
pub(super) fn renamed_twin(
    client: &mut Client,
    schema: Option<&str>,
    index: &str,
) -> Result<Option<String>> {
    let schema = schema.unwrap_or("crm");
    let Some(definition) = super::catalog::index_definition(&format!("{schema}.{index}")) else {
        return Ok(None);
    };
    Ok(client
        .query_opt(
            "SELECT n.nspname || '.' || c.relname
               FROM pg_catalog.pg_index i
               JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = $1 AND c.relname <> $2 AND i.indisvalid
                AND to_regclass(format('%I.%I', $1, $2)) IS NULL
                AND regexp_replace(pg_catalog.pg_get_indexdef(i.indexrelid),
                                   '^(CREATE (UNIQUE )?INDEX )\\S+ ON ', '\\1' || $2 || ' ON ') = $3
              ORDER BY c.relname
              LIMIT 1",
            &[&schema, &index, &definition],
        )
        .classify(Fault::Temporary, "cannot read the schema's indexes")?
        .map(|row| row.get(0)))
}

/// Drops the index `index` when an earlier build left it INVALID, so that `IF NOT
/// EXISTS` does not skip the build; the drop is concurrent too, under the same limits.
fn drop_invalid(
    client: &mut Client,
    schema: Option<&str>,
    index: &str,
    at: &StatementAt,
    policy: &Policy,
) -> Result<()> {
    let Some(schema) = invalid(client, schema, index)? else {
        return Ok(());
    };
    warn!(Migration = at.file, Statement = at.statement().as_str();
          "migrate: index {schema}.{index} is INVALID (an earlier build failed): dropping it to build it again");
    set_timeouts(client, policy.index_timeout, policy.index_timeout)?;
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    client
        .batch_execute(&format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {}.{}",
            quote(&schema),
            quote(index)
        ))
        .classify(
            Fault::Temporary,
            format!(
                "cannot drop the invalid index {schema}.{index} of {}",
                at.file
            ),
        )
}
