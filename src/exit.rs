//! Exit codes, sysexits-style: the one module that turns an outcome (an error, a usage
//! error, a signal, a panic) into the code the process ends with, and the error into
//! the line the operator reads (the store's findings in this program's words: its
//! commands and flags). Nothing else calls `process::exit` or names a code.

use std::fmt;
use std::process::ExitCode;

use crate::store;

/// What went wrong, in the terms an operator or a CronJob acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A check asked for on the command line did not hold (`backlog --fail-above`,
    /// `pause --wait`) (1).
    Threshold,
    /// `audit` found outbox rows missing from their topic, or messages on it that no
    /// outbox row explains (2).
    Missing,
    /// Bad command line (64).
    Usage,
    /// A dependency (PostgreSQL, Kafka) cannot be reached (69).
    Unavailable,
    /// A transient failure; the batch was rolled back and the next run retries (75).
    Temporary,
    /// Configuration or schema is wrong; retrying will not help (78).
    Config,
    /// Stopped by a signal after the in-flight batch finished or rolled back
    /// (128 + signal: 130 for SIGINT, 143 for SIGTERM).
    Interrupted(i32),
    /// A bug: an error nothing classified, or a panic (70).
    Internal,
}

impl Failure {
    pub fn code(self) -> u8 {
        match self {
            Failure::Threshold => 1,
            Failure::Missing => 2,
            Failure::Usage => 64,
            Failure::Unavailable => 69,
            Failure::Temporary => 75,
            Failure::Config => 78,
            Failure::Interrupted(signal) => (128 + signal).clamp(0, 255) as u8,
            Failure::Internal => 70,
        }
    }
}

/// The exit-code table as a literal, for `concat!` (`cli` appends each subcommand's
/// examples to it).
macro_rules! exit_codes_text {
    () => {
        "\
Exit codes:
  0    success (also when poison rows were isolated and quarantined)
  1    a check asked for did not hold: backlog --fail-above (the overdue count is
       above the threshold), pause --wait (a run is still finishing)
  2    audit: outbox rows missing from their topic, or messages on it with no
       outbox row (the report lists them; --repair re-queued the rows)
  64   usage: a flag or environment variable has a bad value
  69   unavailable: PostgreSQL or Kafka cannot be reached
  70   internal error (a bug; please report it)
  75   temporary failure: the batch was rolled back, the next run retries
       (migrate: another migrator or a lock outlasted --lock-wait / --retry-for)
  78   configuration: bad URL, credentials, TLS, schema or privileges, clock skew
       (migrate: a shipped migration edited, a transaction pooler in front)
  130  interrupted by SIGINT after the in-flight batch committed or rolled back
  143  terminated by SIGTERM after the in-flight batch committed or rolled back"
    };
}
pub(crate) use exit_codes_text;

/// The exit-code table, shown in `--help`; docs/reference/exit-codes.md says what to do
/// about each (tests/it/reference.rs keeps the two and this module in step).
pub const EXIT_CODES_HELP: &str = exit_codes_text!();

/// An error message tagged with the failure it stands for; found again by
/// [`exit_code`] anywhere in an `anyhow` context chain.
#[derive(Debug)]
pub(crate) struct Classified {
    pub failure: Failure,
    pub message: String,
}

impl fmt::Display for Classified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Classified {}

/// A new error of the given kind.
pub(crate) fn fail(failure: Failure, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Classified {
        failure,
        message: message.into(),
    })
}

/// Adds a message that also fixes the exit code, whatever the cause below it.
pub(crate) trait ClassifyExt<T> {
    fn classify(self, failure: Failure, message: impl Into<String>) -> anyhow::Result<T>;
}

impl<T, E> ClassifyExt<T> for Result<T, E>
where
    E: Into<anyhow::Error>,
{
    fn classify(self, failure: Failure, message: impl Into<String>) -> anyhow::Result<T> {
        self.map_err(|e| {
            e.into().context(Classified {
                failure,
                message: message.into(),
            })
        })
    }
}

/// The exit code for an error, as [`failure_of`] decides it.
pub(crate) fn exit_code(err: &anyhow::Error) -> ExitCode {
    ExitCode::from(failure_of(err).code())
}

/// The exit code for an error of a run that `signal` (if any) stopped: after a signal,
/// whatever the work failed with (our own cancel request, most likely) it is an
/// interruption.
pub(crate) fn exit_code_after(err: &anyhow::Error, signal: Option<i32>) -> ExitCode {
    match signal {
        Some(signal) => ExitCode::from(Failure::Interrupted(signal).code()),
        None => exit_code(err),
    }
}

/// The failure an error stands for: the outermost explicit classification wins (the
/// program's, then the store's, whose own outermost fault wins, then its PostgreSQL
/// error's), else 70 (a bug).
pub fn failure_of(err: &anyhow::Error) -> Failure {
    if let Some(c) = err.downcast_ref::<Classified>() {
        c.failure
    } else if let Some(e) = store_error(err) {
        of_store(e)
    } else {
        Failure::Internal
    }
}

/// The store's error in an error's chain (the outermost), if any: what the program
/// asks of a failed store call (its fault, its SQLSTATE, a lost session).
pub(crate) fn store_error(err: &anyhow::Error) -> Option<&store::StoreError> {
    err.chain()
        .find_map(|c| c.downcast_ref::<store::StoreError>())
}

/// What a store's error is for the run: its fault's failure; 70 (a bug) for one without
/// a fault (an error from outside the database nothing classified).
pub(crate) fn of_store(e: &store::StoreError) -> Failure {
    match e.fault() {
        Some(fault) => of_fault(fault),
        None => Failure::Internal,
    }
}

/// What a store's fault is for the run.
pub(crate) fn of_fault(fault: store::Fault) -> Failure {
    match fault {
        store::Fault::Unavailable => Failure::Unavailable,
        store::Fault::Temporary => Failure::Temporary,
        store::Fault::Config => Failure::Config,
    }
}

/// The end of a run: `Ok` is 0; an error is printed once on stderr (a JSON line for
/// log collectors when `json`, else plain text, each as [`message`] words it) and mapped
/// to its code (`signal`: the signal that stopped the run, as its shutdown handle tells
/// it).
pub(crate) fn report(outcome: anyhow::Result<()>, json: bool, signal: Option<i32>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = exit_code_after(&e, signal);
            let message = message(&e);
            if json {
                log::error!(Error:% = message; "failed");
            } else {
                error_line(&format!("booking-expire: error: {message}"));
            }
            code
        }
    }
}

/// An error as the operator reads it: each layer's message after the other's, as
/// `{:#}` shows them, with the store's findings in this program's words
/// ([`store_words`]).
pub(crate) fn message(err: &anyhow::Error) -> String {
    err.chain()
        .map(|layer| match layer.downcast_ref::<store::StoreError>() {
            Some(e) => store_words(e).unwrap_or_else(|| e.to_string()),
            None => layer.to_string(),
        })
        .collect::<Vec<_>>()
        .join(": ")
}

/// The message of a store's error whose facts this program words (the command that
/// migrates, the commands a need is for, the flags that bound a wait or a connection or
/// name the database);
/// `None` for one whose own message says it all.
fn store_words(e: &store::StoreError) -> Option<String> {
    use store::StoreError as E;
    match e {
        E::Lacks(lack) => Some(lack_words(lack, Advice::Given)),
        E::RecordedButLacking(lacks) => Some(recorded_but_lacking(lacks)),
        E::MigratorsLockBusy { holder, wait } => Some(format!(
            "another migrator ({}) held the migrators' advisory lock for longer than \
             --lock-wait {}; nothing was done",
            holder.map_or("PID unknown".to_owned(), |p| format!("PID {p}")),
            store::duration::show_duration(*wait)
        )),
        E::StatementLockGivenUp(given_up) => {
            let store::LockGivenUp {
                file,
                statement,
                first_line,
                lock_timeout,
                attempts,
                retry_for,
                lock,
            } = given_up.as_ref();
            Some(format!(
                "migration {file} statement {statement} ({first_line}) could not get its lock \
                 within --lock-timeout {} in {attempts} tries over --retry-for {}: it waited \
                 for {lock}; nothing after it ran, the next run tries again",
                store::duration::show_duration(*lock_timeout),
                store::duration::show_duration(*retry_for)
            ))
        }
        E::MigrationStopped => Some(format!("migrate: {e}")),
        E::ConnectTimedOut { .. } => Some(format!("{e} (--connect-timeout)")),
        E::NotWritable(w) => Some(format!(
            "{}; nothing was done: point --database-url / DATABASE_URL at the primary, {}",
            w.found,
            w.otherwise()
        )),
        E::MigrationCheckFailed { file, what, fix } => Some(format!(
            "migration {file} ran but did not do what it is for: {what}; it is recorded as not \
             done (migrate status: partial), nothing after it ran. {fix}; then run \
             booking-expire migrate again"
        )),
        E::AdoptionRefused { refused, reruns } => Some(adoption_refusal(refused, reruns)),
        _ => None,
    }
}

/// `migrate`'s refusal of baseline files that can be neither adopted nor run
/// (`refused`), naming too the files that would then run again and why (`reruns`): the
/// error, and what `migrate --dry-run` says it would refuse.
pub(crate) fn adoption_refusal(refused: &[String], reruns: &[String]) -> String {
    let mut out = format!(
        "migrate cannot adopt what the old script made, nor run the files again: {}; nothing \
         was done (not even the history table). Put each back as its file in sql/ makes it \
         (docs/guides/upgrading.md, \"Adoption\"), then run booking-expire migrate again",
        refused.join("; ")
    );
    if !reruns.is_empty() {
        out.push_str(&format!(
            ", which then also runs again what differs in a way running puts back: {}",
            reruns.join("; ")
        ));
    }
    out
}

/// Whether a finding's message ends with what to run about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Advice {
    Given,
    Left,
}

/// What the schema or a role lacks, in this program's words: the commands a need is
/// for, and (with [`Advice::Given`]) the command or the grant that fixes it.
fn lack_words(lack: &store::Lack, advice: Advice) -> String {
    use store::Lack;
    match lack {
        Lack::Unmigrated { .. } if advice == Advice::Given => {
            format!("{lack} (run `booking-expire migrate`)")
        }
        Lack::Privileges {
            user,
            need,
            missing,
        } => {
            let mut words = format!(
                "role {user} lacks privileges for {}: {missing}",
                commands_of(*need)
            );
            if advice == Advice::Given {
                words.push_str(&format!(
                    " (GRANT {} TO {user}; see {})",
                    need.group_role(),
                    need.grants()
                ));
            }
            words
        }
        _ => lack.to_string(),
    }
}

/// The commands whose work a schema need is.
fn commands_of(need: store::SchemaNeed) -> &'static str {
    use store::SchemaNeed as N;
    match need {
        N::Cycle => "run-once",
        N::Relay => "relay-outbox",
        N::Report => "dry-run and backlog",
        N::Explain => "explain",
        N::Operate => "pause and resume",
        N::Requeue => "republish and retry-failed",
        N::Audit => "audit",
    }
}

/// `migrate`'s refusal of a schema whose recorded files' objects were changed since:
/// what the commands' preflights would find, each without its advice (migrate is the
/// command that gives it).
pub(crate) fn recorded_but_lacking(lacks: &[store::Lack]) -> String {
    let lacks: Vec<String> = lacks.iter().map(|l| lack_words(l, Advice::Left)).collect();
    format!(
        "every migration is recorded, but the schema lacks what this binary's commands need: \
         {}. A recorded file's objects were changed since it ran (a column dropped, a grant \
         revoked): put them back as its file in sql/ makes them; migrate does not run a \
         recorded file again",
        lacks.join("; ")
    )
}

/// Writes one line on stderr, its control characters escaped (a server's message may
/// carry any: `render::escape_lines`), ignoring a failed write: a reader that went away
/// (`2>&1 | head -1`) must not turn the end of a run into a panic.
pub(crate) fn error_line(line: &str) {
    use std::io::Write;
    let line = crate::render::escape_lines(line);
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}

/// The exit code of a command line clap refused, or of `--help`/`--version` (0), after
/// the command line printed it (`cli::usage_error`).
pub(crate) fn usage_code(shown: Result<(), Failure>) -> ExitCode {
    match shown {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => ExitCode::from(failure.code()),
    }
}

/// Ends the process at once for a second signal, or one that arrived before any work
/// started (`shutdown` asks; the database rolls back an open transaction when the
/// connection drops).
#[allow(
    clippy::disallowed_methods,
    reason = "the exit room: the one place the process ends, with its code"
)]
pub(crate) fn signalled(signal: i32) -> ! {
    std::process::exit(i32::from(Failure::Interrupted(signal).code()))
}

/// Makes any panic, on any thread, print one line on stderr (a JSON line when `json`)
/// and end the process with 70, as `--help` documents, instead of Rust's default 101
/// and backtrace hint. An open transaction rolls back when the connection drops.
#[allow(
    clippy::disallowed_methods,
    reason = "the exit room: the one place the process ends, with its code"
)]
pub(crate) fn install_panic_hook(json: bool) {
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = format!("internal error (a bug; please report it): {what}{at}");
        if json {
            log::error!(Error:% = message; "failed");
        } else {
            // Never `eprintln!`: it panics when stderr is closed, and a panic inside
            // the panic hook aborts the process (134) instead of ending it with 70.
            error_line(&format!("booking-expire: error: {message}"));
        }
        std::process::exit(i32::from(Failure::Internal.code()));
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_signal_any_error_is_the_interruption_and_without_one_its_own() {
        let e = fail(Failure::Config, "bad schema");
        assert_eq!(exit_code_after(&e, None), ExitCode::from(78));
        assert_eq!(exit_code_after(&e, Some(15)), ExitCode::from(143));
        assert_eq!(
            exit_code_after(&anyhow::anyhow!("a bug"), Some(2)),
            ExitCode::from(130)
        );
        assert_eq!(exit_code(&anyhow::anyhow!("a bug")), ExitCode::from(70));
    }

    #[test]
    fn the_stores_faults_have_their_codes_and_an_outer_classification_wins() {
        use crate::store::{Fault, StoreError};
        let failed = |fault, message: &str| StoreError::Failed {
            fault,
            message: message.to_owned(),
        };
        for (fault, code) in [
            (Fault::Unavailable, 69),
            (Fault::Temporary, 75),
            (Fault::Config, 78),
        ] {
            let e = anyhow::Error::from(failed(fault, "from the store"));
            assert_eq!(exit_code(&e), ExitCode::from(code), "{fault:?}");
            assert_eq!(format!("{e:#}"), "from the store");
            let e = e.context("the program's context");
            assert_eq!(exit_code(&e), ExitCode::from(code), "{fault:?}");
        }
        // Without a fault of its own, an error from outside the database is a bug (70);
        // the store's classification above it gives it one; the program's wins.
        let unclassified = StoreError::Other("io".into()).context("store");
        assert_eq!(exit_code(&unclassified.into()), ExitCode::from(70));
        let below = || StoreError::Context {
            context: "store".to_owned(),
            fault: Some(Fault::Unavailable),
            source: Box::new(StoreError::Other("io".into())),
        };
        assert_eq!(exit_code(&below().into()), ExitCode::from(69));
        let e =
            ClassifyExt::classify(Err::<(), _>(below()), Failure::Config, "program").unwrap_err();
        assert_eq!(exit_code(&e), ExitCode::from(78));
        assert_eq!(format!("{e:#}"), "program: store: io");
    }

    #[test]
    fn the_stores_findings_are_worded_in_the_programs_terms() {
        use crate::store::{self, Lack, SchemaNeed, StoreError};
        let revoked = || Lack::Privileges {
            user: "crm_booking_expiration_worker".to_owned(),
            need: SchemaNeed::Cycle,
            missing: "INSERT on crm.deal_timeline (details)".to_owned(),
        };
        let dropped = || Lack::Unmigrated {
            missing: vec!["column crm.booking_expiration_poison.retry_at".to_owned()],
        };
        let cases = [
            (
                StoreError::Lacks(revoked()),
                "role crm_booking_expiration_worker lacks privileges for run-once: INSERT on \
                 crm.deal_timeline (details) (GRANT crm_booking_expiration_worker TO \
                 crm_booking_expiration_worker; see sql/007_roles.sql)",
                78,
            ),
            (
                StoreError::Lacks(dropped()),
                "schema not migrated: missing column crm.booking_expiration_poison.retry_at \
                 (run `booking-expire migrate`)",
                78,
            ),
            (
                StoreError::RecordedButLacking(vec![dropped(), revoked()]),
                "every migration is recorded, but the schema lacks what this binary's commands \
                 need: schema not migrated: missing column \
                 crm.booking_expiration_poison.retry_at; role crm_booking_expiration_worker \
                 lacks privileges for run-once: INSERT on crm.deal_timeline (details). A \
                 recorded file's objects were changed since it ran (a column dropped, a grant \
                 revoked): put them back as its file in sql/ makes them; migrate does not run \
                 a recorded file again",
                78,
            ),
            (
                StoreError::MigratorsLockBusy {
                    holder: Some(4242),
                    wait: std::time::Duration::from_secs(30),
                },
                "another migrator (PID 4242) held the migrators' advisory lock for longer than \
                 --lock-wait 30s; nothing was done",
                75,
            ),
            (
                StoreError::StatementLockGivenUp(Box::new(store::LockGivenUp {
                    file: "016_relay_state.sql",
                    statement: "3/9".to_owned(),
                    first_line: "COMMENT ON TABLE crm.outbox".to_owned(),
                    lock_timeout: std::time::Duration::from_millis(200),
                    attempts: 4,
                    retry_for: std::time::Duration::from_secs(3),
                    lock: "AccessExclusiveLock on crm.outbox".to_owned(),
                })),
                "migration 016_relay_state.sql statement 3/9 (COMMENT ON TABLE crm.outbox) could not \
                 get its lock within --lock-timeout 200ms in 4 tries over --retry-for 3s: it \
                 waited for AccessExclusiveLock on crm.outbox; nothing after it ran, the next \
                 run tries again",
                75,
            ),
            (
                StoreError::MigrationStopped,
                "migrate: stopped by a signal; what committed stays, the next run goes on from \
                 there",
                75,
            ),
            (
                StoreError::NotWritable(store::NotWritable {
                    found: "run-once writes, but the server at db:5432 is a standby in \
                            recovery (pg_is_in_recovery() is true)"
                        .to_owned(),
                    listed: false,
                }),
                "run-once writes, but the server at db:5432 is a standby in recovery \
                 (pg_is_in_recovery() is true); nothing was done: point --database-url / \
                 DATABASE_URL at the primary, or list every server with \
                 target_session_attrs=read-write (postgres://USER@primary:5432,standby:5432/DB\
                 ?target_session_attrs=read-write) so that the primary is picked",
                75,
            ),
            (
                StoreError::NotWritable(store::NotWritable {
                    found: "cannot connect to PostgreSQL at a:5432, b:5432: none of them \
                            accepts writes (target_session_attrs=read-write, and each is a \
                            standby or read-only, as servers are during a failover)"
                        .to_owned(),
                    listed: true,
                }),
                "cannot connect to PostgreSQL at a:5432, b:5432: none of them accepts writes \
                 (target_session_attrs=read-write, and each is a standby or read-only, as \
                 servers are during a failover); nothing was done: point --database-url / \
                 DATABASE_URL at the primary, or add it to the URL's hosts \
                 (postgres://USER@primary:5432,standby:5432/DB?target_session_attrs=read-write)",
                75,
            ),
            (
                StoreError::ConnectTimedOut {
                    cannot: "cannot connect to PostgreSQL at 127.0.0.1:5432".to_owned(),
                    limit: std::time::Duration::from_secs(2),
                },
                "cannot connect to PostgreSQL at 127.0.0.1:5432: no answer within 2000ms \
                 (--connect-timeout)",
                69,
            ),
            (
                StoreError::MigrationCheckFailed {
                    file: "011_xmin_holders_function.sql",
                    what: "the read-only role is still a member of pg_read_all_stats".to_owned(),
                    fix: "Run as a superuser: REVOKE pg_read_all_stats FROM \
                          crm_booking_expiration_readonly"
                        .to_owned(),
                },
                "migration 011_xmin_holders_function.sql ran but did not do what it is for: the \
                 read-only role is still a member of pg_read_all_stats; it is recorded as not \
                 done (migrate status: partial), nothing after it ran. Run as a superuser: \
                 REVOKE pg_read_all_stats FROM crm_booking_expiration_readonly; then run \
                 booking-expire migrate again",
                78,
            ),
            (
                StoreError::AdoptionRefused {
                    refused: vec![
                        "007_roles.sql: a grant".to_owned(),
                        "008: a column".to_owned(),
                    ],
                    reruns: vec!["009: an index".to_owned()],
                },
                "migrate cannot adopt what the old script made, nor run the files again: \
                 007_roles.sql: a grant; 008: a column; nothing was done (not even the history \
                 table). Put each back as its file in sql/ makes it (docs/guides/upgrading.md, \
                 \"Adoption\"), then run booking-expire migrate again, which then also runs \
                 again what differs in a way running puts back: 009: an index",
                78,
            ),
        ];
        for (e, words, code) in cases {
            let e = anyhow::Error::from(e);
            assert_eq!(message(&e), words);
            assert_eq!(exit_code(&e), ExitCode::from(code), "{words}");
            let e = e.context("the program's context");
            assert_eq!(message(&e), format!("the program's context: {words}"));
        }
        // Any other error reads as `{:#}` shows it.
        let e =
            anyhow::Error::from(StoreError::Other("io".into()).context("store")).context("program");
        assert_eq!(message(&e), format!("{e:#}"));
    }
}
