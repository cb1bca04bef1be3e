//! The command line's definitions: `Cli` with its global flags, the subcommands
//! (`Command`) with their help texts and examples, `LogFormat`, and the version line.
//! Each subcommand's flags are its sibling's (`connect`, `work`, `operate`, `migrate`).

use clap::{Parser, Subcommand};

use super::migrate::MigrateArgs;
use super::operate::{
    AuditArgs, CompletionsArgs, ExplainArgs, PauseArgs, PauseOnArgs, RequeueArgs,
};
use super::values::choice;
use super::work::{BacklogArgs, DryRunArgs, RelayArgs, RunOnceArgs};
use crate::exit::EXIT_CODES_HELP;

/// What `--version` prints after the program's name: the release (an unreleased
/// build's says so: `0.2.0-dev+<commit>`), the commit it was built from and the schema
/// version it expects (the highest migration built in).
pub(crate) const VERSION_LINE: &str = concat!(
    env!("RELEASE_BUILT_IN"),
    " (commit ",
    env!("BOOKING_EXPIRE_COMMIT"),
    ", schema ",
    env!("SCHEMA_VERSION_BUILT_IN"),
    ")"
);

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "booking-expire",
    version = VERSION_LINE,
    about = "Expires overdue CRM bookings and publishes one booking-expired event per expiry \
             through a transactional outbox",
    long_about = "Expires overdue CRM bookings and publishes one booking-expired event per \
                  expiry through a transactional outbox.\n\n\
                  A Kubernetes CronJob runs `run-once` every minute: each run is one expiration \
                  cycle over both phases (Reserve, Booking), claiming overdue active bookings \
                  with FOR UPDATE SKIP LOCKED and committing, per batch, the status changes, \
                  the audit rows, the deal-timeline entries and the outbox rows atomically.",
    after_help = EXIT_CODES_HELP,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log line format on stderr
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true, value_parser = choice::<LogFormat>())]
    pub log_format: LogFormat,

    /// Log progress at info level also for the reports (dry-run, backlog), which
    /// otherwise log warnings and errors only; RUST_LOG overrides both
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

impl Cli {
    /// The log filter when `RUST_LOG` is not set: this program at info and its libraries
    /// at warn; the reports at warn unless `--verbose`, so their output stands alone.
    pub fn default_log_filter(&self) -> &'static str {
        let report = matches!(self.command, Command::DryRun(_) | Command::Backlog(_));
        if report && !self.verbose {
            "warn"
        } else {
            "warn,booking_expire=info"
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one expiration cycle: both phases, then print the result as one JSON line
    #[command(
        long_about = "Run one expiration cycle and exit.\n\n\
                      AsOf is read once from the system clock (UTC). For each phase (Reserve: \
                      Reserved/AwaitingPayment past reserve_expires_at; Booking: Booked past \
                      booking_expires_at) it claims up to --batch-size of the oldest overdue \
                      bookings with FOR UPDATE SKIP LOCKED and expires them in one transaction \
                      per batch, writing one audit row, one deal-timeline entry and one outbox \
                      row per booking. Rows the domain guard refuses or the database rejects \
                      are quarantined as poison with back-off; the rest of the batch commits.\n\n\
                      Connections: one is enough. A second is opened when the server allows it, \
                      for the pooler check and, after an outage, to run the two phases side by \
                      side; without it both happen on the one session. The session must be \
                      able to write: on a standby or a read-only server the run exits 75 \
                      before any work (use target_session_attrs=read-write).\n\n\
                      stdout: {\"RunId\",\"AsOf\",\"ReserveExpiredCount\",\"BookingExpiredCount\",\
                      \"SkippedLockedCount\",\"PoisonCount\",\"DurationMs\"}",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The CronJob's cycle: up to 2000 batches per phase within the default --deadline 25s\n",
                "  booking-expire run-once --max-batches 2000\n",
                "  # Catch up after an outage in larger batches, publishing on both contract versions\n",
                "  booking-expire run-once --batch-size 1000 --max-batches 2000 --topics pin.crm.booking-expired.v1,pin.crm.booking-expired.v2\n",
        )
    )]
    RunOnce(RunOnceArgs),

    /// Publish pending outbox rows to Kafka (at least once) and mark them published
    #[command(
        long_about = "Publish pending outbox rows to Kafka, at least once, and mark them published.\n\n\
                      One relay at a time (a PostgreSQL advisory lock; a second relay exits 0 at \
                      once). Rows go oldest first, at most one in flight per key; a row is marked \
                      published only after the broker acknowledged it (acks=all, idempotent \
                      producer). A row that can never be delivered (e.g. too large) is marked \
                      failed and does not block the rest. Published rows older than --retention \
                      are purged in bounded batches.\n\n\
                      Connections: 2 at once. The main session holds the relay lock, listens \
                      (--follow) and fetches; a second marks acknowledged rows while the next \
                      batch is sent. Both must be able to write: on a standby or a read-only \
                      server the run exits 75 before sending anything (use \
                      target_session_attrs=read-write). With --follow, a session that drops is \
                      reopened within the window.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The CronJob's relay: the whole run bounded to 40s, each commit sent within a second\n",
                "  booking-expire relay-outbox --follow 40s --message-timeout 5s\n",
                "  # Drain a backlog by hand after a Kafka incident, in bigger batches, for up to 5 minutes\n",
                "  booking-expire relay-outbox --batch-size 2000 --deadline 5m\n",
        )
    )]
    RelayOutbox(RelayArgs),

    /// Show what a cycle at moment T would expire and publish; changes nothing
    #[command(
        long_about = "Show what a cycle at moment T would expire and which events it would \
                      publish. Runs the same candidate predicate and the same domain decision as \
                      run-once in a READ ONLY transaction that takes no row locks and never waits \
                      on one; writes nothing.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # What would a cycle do right now?\n",
                "  booking-expire dry-run --as-of now\n",
                "  # Every candidate at a moment, with the exact events, as JSON lines\n",
                "  booking-expire dry-run --as-of 2026-11-29T18:00:00Z --all --json\n",
        )
    )]
    DryRun(DryRunArgs),

    /// Report overdue bookings, quarantined poison rows and outbox lag
    #[command(
        long_about = "Report, per phase, the active bookings whose deadline has passed and the age \
                      of the oldest; the poison rows in quarantine; the outbox's pending count, \
                      oldest pending age and failed count. Read-only. --fail-above N exits 1 when \
                      the overdue count exceeds N, for alerts and probes.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # How far behind is it, and is anything paused?\n",
                "  booking-expire backlog\n",
                "  # A probe: exit 1 when more than 500 bookings are overdue\n",
                "  booking-expire backlog --fail-above 500 --format json\n",
        )
    )]
    Backlog(BacklogArgs),

    /// Explain one booking: would the next cycle expire it, and if not, why; its audit,
    /// timeline and outbox rows, and where its event went
    #[command(
        long_about = "Explain one booking, read-only: its status, deadlines and version; whether \
                      the next cycle would expire it and, if not, every reason why (not yet due, \
                      terminal, a guard rejection, in quarantine until T with its reason and \
                      attempts, its row locked right now by another session (PID, application), \
                      run-once paused); its audit and deal-timeline rows; its outbox rows: \
                      pending (with the next attempt), published at T to partition P offset O \
                      (the delivery receipt), or failed with the reason. With --brokers (or \
                      KAFKA_BROKERS) each receipt is checked by reading the message back from \
                      that partition and offset.\n\n\
                      Exit 0 when the booking exists, 1 when it does not.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # A booking from an alert or a table, by the first 8 characters of its id\n",
                "  booking-expire explain bb7f5ae6\n",
                "  # Where did its event go? Read each delivery receipt back from Kafka\n",
                "  booking-expire explain bb7f5ae6-1111-4000-8000-000000000001 --brokers kafka:9092 --json\n",
        )
    )]
    Explain(ExplainArgs),

    /// Switch run-once or relay-outbox off until `resume`, also for the runs working now
    #[command(
        long_about = "Switch run-once or relay-outbox off, in the database, until `resume`. \
                      It takes effect at once, also on the runs working now: a working \
                      run-once checks the switch before every batch and stops at the next batch \
                      boundary (the batch in flight commits or rolls back whole; nothing \
                      expires after it); a working relay checks it after every fetch and sends \
                      nothing more (what it already sent gets its delivery reports and marks). \
                      A run started while the command is paused exits 0 at once. Each stopped \
                      or skipped run logs since when, by whom and why; backlog and the pushed \
                      metrics show the pause, and an alert fires when it lasts longer than an \
                      hour. Pause the relay during a Kafka incident (expiries go on and queue \
                      in the outbox); pause run-once during a data incident (the relay still \
                      delivers what committed).\n\n\
                      Then `pause` waits (--wait, 30s by default) until no run of the command \
                      is working any more and says so, or says what is still finishing and by \
                      when it will have stopped at the latest (exit 1).\n\n\
                      Pausing a paused command changes nothing and says since when it is \
                      paused. Every pause and resume is written to \
                      crm.booking_expiration_operations.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # A broker incident: stop sending; expiries go on and queue in the outbox\n",
                "  booking-expire pause relay-outbox --reason \"INC-42: Kafka cluster upgrade\" --actor you@example.com\n",
                "  # A data incident: stop expiring now, waiting up to a minute for the running cycle to stop\n",
                "  booking-expire pause run-once --reason \"INC-43: bad deadlines imported\" --wait 1m\n",
        )
    )]
    Pause(PauseOnArgs),

    /// Switch a paused command back on; its next run works as usual
    #[command(
        long_about = "Switch a command paused with `pause` back on: its next scheduled run works \
                      as usual (a paused relay then delivers what queued meanwhile). Resuming a \
                      command that is not paused changes nothing. Written to \
                      crm.booking_expiration_operations.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The broker incident is over: the next relay sends what queued meanwhile\n",
                "  booking-expire resume relay-outbox --reason \"INC-42 closed\" --actor you@example.com\n",
                "  # The deadlines are repaired: the next cycle expires as usual\n",
                "  booking-expire resume run-once --reason \"INC-43: deadlines repaired\" --json\n",
        )
    )]
    Resume(PauseArgs),

    /// Send published (or failed) outbox rows again, with the same ce_id, and record why
    #[command(
        long_about = "Put outbox rows back into the relay's queue so that the next relay-outbox \
                      run sends them again: the same rows, the same ce_id, key and payload, so \
                      consumers that dedupe on ce_id see a duplicate, never a new event. No row \
                      is inserted. Select the rows with exactly one of --ids, --booking, or \
                      --since/--until (when the events were written; only rows still within the \
                      outbox retention exist). Pending rows are left alone (they go anyway). \
                      --reason is required and, with who and how many, is written to \
                      crm.booking_expiration_operations in the same transaction. --dry-run \
                      lists what would be re-queued and changes nothing.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # A consumer lost the event of one booking: send it again, with the same ce_id\n",
                "  booking-expire republish --booking bb7f5ae6 --reason \"INC-44: the chessboard lost its event\"\n",
                "  # See first what an hour's events would be re-queued for a consumer's replay\n",
                "  booking-expire republish --since 2026-11-29T18:00:00Z --until 2026-11-29T19:00:00Z --reason \"INC-45: replay\" --dry-run\n",
        )
    )]
    Republish(RequeueArgs),

    /// Retry outbox rows the relay gave up on (failed_at set), and record why
    #[command(
        long_about = "Put outbox rows the relay marked failed (failed_at set: too large, or too \
                      many failed attempts) back into its queue, with their failure count reset, \
                      once the cause is fixed. Select with --ids, --booking, --since/--until, or \
                      --all (every failed row). Published and pending rows are left alone. \
                      --reason is required and is written, with who and how many, to \
                      crm.booking_expiration_operations. --dry-run changes nothing.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The topic is fixed: retry every row the relay gave up on\n",
                "  booking-expire retry-failed --all --reason \"INC-46: topic recreated with 6 partitions\"\n",
                "  # Retry the failed rows of one booking only\n",
                "  booking-expire retry-failed --booking bb7f5ae6 --reason \"INC-47: message size limit raised\"\n",
        )
    )]
    RetryFailed(RequeueArgs),

    /// Compare the outbox with its topics: rows missing from Kafka, messages with no row;
    /// --repair re-queues the missing rows
    #[command(
        long_about = "Compare a window of the outbox with the topics the job publishes to, \
                      read-only unless --repair: (a) the job's outbox rows written in the \
                      window whose ce_id is not on their topic, and (b) the window's messages \
                      on the topics with no outbox row, split into those whose row was purged \
                      after the retention (or whose receipt is still there) and those nothing \
                      explains. Each topic is read from the lowest offset per partition that \
                      the window's delivery receipts name, or from the first message at \
                      --since by time where that is lower or no receipt names one, up to each \
                      partition's high watermark at the start. The messages' ids are copied \
                      into a temporary table of the session in chunks of --chunk-rows and \
                      compared there, so memory stays bounded whatever the window holds.\n\n\
                      --repair re-queues the missing rows that were published or failed, as \
                      republish does (the same rows, the same ce_id: no row is inserted), and \
                      records it in crm.booking_expiration_operations with --reason; missing \
                      pending rows are left to the relay. After the next relay-outbox run, an \
                      audit of the window finds none missing.\n\n\
                      Needs a session of its own on the primary (temporary tables; no \
                      transaction pooler); a login read-only by default, as the read-only \
                      role's, may audit, and --repair needs one that may write and the \
                      operator role's grants. Exit 0 when nothing is missing, 2 when rows are missing or \
                      messages have no row (also after --repair).",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # After a failover to an asynchronous standby: did every event of the last day reach Kafka?\n",
                "  booking-expire audit --since 2026-11-29T00:00:00Z --brokers kafka:9092\n",
                "  # Send the missing ones again, with the same ce_id, and record why\n",
                "  booking-expire audit --since 2026-11-29T00:00:00Z --repair --reason \"INC-48: failover\" --format json\n",
        )
    )]
    Audit(AuditArgs),

    /// Apply the migrations built into this binary, recording each in a history;
    /// `migrate status` lists them
    #[command(
        long_about = "Apply the migrations built into this binary (the files of sql/), in \
                      version order, each recorded in crm.booking_expiration_migrations (version, \
                      checksum, applied at, by whom, release, how long, and the oldest release \
                      that works on the schema it leaves: a binary older than that refuses with \
                      78 before any work, one release behind it runs and says once that the \
                      schema is ahead). Every statement runs in \
                      its own transaction under the runner's --lock-timeout and \
                      --statement-timeout: a statement that cannot get its lock in time gives \
                      up, so that the CRM's statements never queue behind it, and is tried again \
                      after a jittered back-off (1s, 2s, 4s … at most 30s) for --retry-for. \
                      Index builds CONCURRENTLY wait for older transactions under \
                      --index-timeout; an INVALID index an earlier build left is dropped and \
                      built again. Whatever the server says (NOTICE, WARNING) is logged at WARN \
                      with the file and statement.\n\n\
                      Partial runs: a file stopped half-way (a signal, a lock never free, a \
                      failed statement) is recorded as partial in \
                      crm.booking_expiration_migration_partial (which statements committed, \
                      when, by whom), shown by migrate status, and the next run goes on after \
                      the last statement that committed. A file whose purpose is checked after \
                      it ran (011: the read-only role no member of pg_read_all_stats) and does \
                      not hold ends the run with 78 and what a superuser must run; it stays \
                      partial, and the next run checks again.\n\n\
                      One migrator at a time: a session advisory lock, polled every 500ms for up \
                      to --lock-wait; a second migrator waits, then finds nothing to do and \
                      exits 0. A database migrated by the old script (no history) is adopted \
                      file by file, whatever the history holds: a baseline file is recorded \
                      without running only when what it makes is there as it makes it \
                      (columns with their types and defaults, index definitions, \
                      constraints, triggers, functions, storage parameters, roles and \
                      privileges, compared with the facts built into the binary) and its \
                      check holds. Where they differ it says what differs (WARN) and runs \
                      the file again when that puts the difference back, keeps a DBA's \
                      storage parameters (named at WARN), and otherwise refuses before any \
                      change naming each difference (78). Once every file is \
                      recorded it runs the commands' schema and grant checks and names each \
                      difference a DBA made since (78). A role that cannot do what the pending \
                      files need (own crm.bookings and crm.outbox, create in schema crm, create \
                      a missing job role) is refused before any change (78). Files are split \
                      by PostgreSQL's own grammar (libpg_query, PostgreSQL 18): a file with a \
                      comment or string it does not close, or a statement the grammar \
                      refuses, is refused naming its line before any of it runs (78). A file \
                      whose checksum differs from the one applied (a shipped migration edited) \
                      is refused before any work (78). Behind a transaction pooler it refuses \
                      to run (78).\n\n\
                      Run it as a role that owns crm.bookings and crm.outbox (index builds need \
                      ownership) and may create roles, or as a superuser.\n\n\
                      stdout: {\"SchemaVersion\",\"Applied\",\"Adopted\",\"DurationMs\"}; \
                      progress on stderr.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The deploy's migration Job: wait up to 15 minutes for another migrator\n",
                "  booking-expire migrate\n",
                "  # See first what would run, changing nothing\n",
                "  booking-expire migrate --dry-run\n",
                "  # On a busy database: give locks up after 500ms and keep trying for 30 minutes\n",
                "  booking-expire migrate --lock-timeout 500ms --retry-for 30m\n",
        )
    )]
    Migrate(MigrateArgs),

    /// Print a shell completion script (bash, zsh or fish) on stdout
    #[command(
        long_about = "Print a completion script for the shell named on stdout, generated from \
                      this program's command line, so it knows every subcommand and flag. \
                      Load it for this shell with `source <(booking-expire completions bash)`, \
                      or install it where the shell looks for completions, e.g. \
                      `booking-expire completions bash > /etc/bash_completion.d/booking-expire`, \
                      `booking-expire completions zsh > \"${fpath[1]}/_booking-expire\"`, \
                      `booking-expire completions fish > ~/.config/fish/completions/booking-expire.fish`.",
        after_help = EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # The bash script; `source <(booking-expire completions bash)` loads it now\n",
                "  booking-expire completions bash\n",
                "  # The zsh script, to be written to \"${fpath[1]}/_booking-expire\"\n",
                "  booking-expire completions zsh\n",
        )
    )]
    Completions(CompletionsArgs),
}

#[cfg(test)]
mod tests;
