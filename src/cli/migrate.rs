//! The flags of `migrate` and `migrate status`: the connection (without the jobs'
//! session timeouts: the runner sets its own before each statement) and the runner's
//! limits.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::connect::ConnectionArgs;
use super::values::{duration_in, trimmed};

#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(subcommand)]
    pub command: Option<MigrateCommand>,

    #[command(flatten)]
    pub database: ConnectionArgs,

    /// Show what would run (files, statements; a partial file's statements left) and
    /// what would be adopted; change nothing, not even the history table
    #[arg(long)]
    pub dry_run: bool,

    /// Apply up to this version only (the file's number, 1..=9999; default: every file)
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_TARGET", value_name = "N",
          value_parser = trimmed(clap::value_parser!(u16).range(1..=9999)))]
    pub target: Option<u16>,

    /// How long a statement waits for a lock before it gives up and is tried again
    /// after a back-off, so that the CRM's statements never queue behind it longer
    /// (10ms..=1m)
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_LOCK_TIMEOUT", value_name = "DURATION",
          default_value = "2s", value_parser = trimmed(duration_in(Duration::from_millis(10), Duration::from_secs(60))))]
    pub lock_timeout: Duration,

    /// How long one statement may run (1s..=1d); index builds CONCURRENTLY have
    /// --index-timeout instead
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_STATEMENT_TIMEOUT", value_name = "DURATION",
          default_value = "1m", value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(86_400))))]
    pub statement_timeout: Duration,

    /// The lock and statement timeout of an index build CONCURRENTLY, which waits for
    /// older transactions, never in a queue that blocks writers (1m..=1d)
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_INDEX_TIMEOUT", value_name = "DURATION",
          default_value = "1h", value_parser = trimmed(duration_in(Duration::from_secs(60), Duration::from_secs(86_400))))]
    pub index_timeout: Duration,

    /// How long to wait for another migrator to finish (its advisory lock, polled
    /// every 500ms); then exit 75 (0s..=1d)
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_LOCK_WAIT", value_name = "DURATION",
          default_value = "15m", value_parser = trimmed(duration_in(Duration::ZERO, Duration::from_secs(86_400))))]
    pub lock_wait: Duration,

    /// How long one statement is tried again after giving up a lock (back-off 1s, 2s,
    /// 4s … at most 30s, jittered); then exit 75 naming it (0s..=1d)
    #[arg(long, env = "BOOKING_EXPIRATION_MIGRATE_RETRY_FOR", value_name = "DURATION",
          default_value = "10m", value_parser = trimmed(duration_in(Duration::ZERO, Duration::from_secs(86_400))))]
    pub retry_for: Duration,
}

#[derive(Debug, Subcommand)]
pub enum MigrateCommand {
    /// List every built-in migration with its state: applied, adopted, pending,
    /// partial or changed; read-only
    #[command(
        long_about = "List every migration built into this binary with its state against \
                      the database's history (crm.booking_expiration_migrations): applied, \
                      adopted (found applied by the old script), pending, partial (begun and \
                      not finished: how many statements committed, or all and its check \
                      failed; the next migrate goes on from there), or changed (applied with \
                      another checksum: the file was edited after it shipped), with when, by \
                      whom, by which release and how long it took, and the oldest release \
                      that works on the schema each file leaves. Read-only: it makes nothing, \
                      not even the history table.",
        after_help = crate::exit::EXIT_CODES_HELP,
        after_long_help = concat!(
            crate::exit::exit_codes_text!(),
            "\n\nExamples:\n",
                "  # What has this database had, and what is still to come?\n",
                "  booking-expire migrate status\n",
                "  # The same as one JSON object, for a deploy pipeline's check\n",
                "  booking-expire migrate status --json\n",
        )
    )]
    Status(MigrateStatusArgs),
}

#[derive(Debug, Args)]
pub struct MigrateStatusArgs {
    #[command(flatten)]
    pub database: ConnectionArgs,

    /// One JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}
