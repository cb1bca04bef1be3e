//! The flags of the operator commands: `explain`, `pause`, `resume`, `republish`,
//! `retry-failed`, `audit`, `completions`.

use std::time::Duration;

use clap::Args;

use super::connect::{DatabaseArgs, KafkaArgs};
use super::values::{IdArg, choice, duration_in, non_empty, parse_as_of, parse_id, text, trimmed};
use super::work::OutboxTypesArgs;
use crate::domain::AsOf;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// The booking's id: a UUID, or a unique prefix of at least 8 hex characters of
    /// one (as the tables show it, e.g. bb7f5ae6)
    #[arg(value_name = "BOOKING_ID", value_parser = trimmed(parse_id))]
    pub booking_id: IdArg,

    /// The moment of "the next cycle": RFC 3339 with an offset, or `now` (default)
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of), default_value = "now")]
    pub as_of: AsOf,

    /// One JSON object instead of the text report
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub outbox: OutboxTypesArgs,
}

/// Which command a pause switch stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pausable {
    #[value(name = "run-once")]
    RunOnce,
    #[value(name = "relay-outbox")]
    RelayOutbox,
}

impl Pausable {
    pub fn as_str(self) -> &'static str {
        match self {
            Pausable::RunOnce => "run-once",
            Pausable::RelayOutbox => "relay-outbox",
        }
    }
}

/// Who does an operator's action: a name for the trail, besides the database user.
#[derive(Debug, Args)]
pub struct ActorArgs {
    /// Who does this, for the operations trail (e.g. an e-mail address); the database
    /// user is recorded as well. Default: --login
    #[arg(long, env = "BOOKING_EXPIRE_ACTOR", value_name = "NAME", value_parser = trimmed(non_empty))]
    pub actor: Option<String>,

    /// The operator's login name, the trail's actor when --actor is not given (the USER
    /// environment variable, as the login shell sets it; empty = the database user only)
    #[arg(long, env = "USER", hide_env_values = true, value_name = "NAME", value_parser = text())]
    pub login: Option<String>,

    /// Why, for the operations trail and the log line of every paused run (required)
    #[arg(long, value_name = "TEXT", value_parser = trimmed(non_empty))]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// The command to switch: run-once or relay-outbox
    #[arg(value_name = "COMMAND", value_enum, value_parser = choice::<Pausable>())]
    pub command: Pausable,

    #[command(flatten)]
    pub actor: ActorArgs,

    /// One JSON object on stdout instead of a sentence
    #[arg(long)]
    pub json: bool,
}

/// The most `pause --wait` waits: longer than any batch in flight or delivery report
/// can take (their bounds are --statement-timeout and --message-timeout, 1m and 5m).
pub(crate) const PAUSE_WAIT_MAX: Duration = Duration::from_secs(600);

#[derive(Debug, Args)]
pub struct PauseOnArgs {
    #[command(flatten)]
    pub switch: PauseArgs,

    /// After switching, wait at most this long until no run of the command is working
    /// any more (0s..=10m; 0s = only say what is working now). A working run-once stops
    /// after its batch in flight; a working relay sends nothing more and waits for the
    /// delivery reports of what it sent. Exit 1 when work is still going on at the end
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = trimmed(duration_in(Duration::ZERO, PAUSE_WAIT_MAX)))]
    pub wait: Duration,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("selection").required(true).multiple(false)
    .args(["ids", "booking", "since", "all"])))]
pub struct RequeueArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub outbox: OutboxTypesArgs,

    /// Outbox row ids (the events' ce_id), comma-separated; each a UUID or a unique
    /// prefix of at least 8 hex characters of one
    #[arg(long, value_name = "UUID,...", value_delimiter = ',', value_parser = trimmed(parse_id))]
    pub ids: Vec<IdArg>,

    /// Every outbox row of this booking: its id, or a unique prefix of at least 8 hex
    /// characters of it (as the tables show it)
    #[arg(long, value_name = "BOOKING_ID", value_parser = trimmed(parse_id))]
    pub booking: Option<IdArg>,

    /// Rows written at or after T (RFC 3339 with an offset); needs --until
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of), requires = "until")]
    pub since: Option<AsOf>,

    /// Rows written before T (RFC 3339 with an offset, or now); needs --since
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of), requires = "since")]
    pub until: Option<AsOf>,

    /// retry-failed only: every failed row
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub actor: ActorArgs,

    /// Refuse (exit 64) when the selection holds more rows than this (1..=1000000)
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=1_000_000)))]
    pub max_rows: u32,

    /// Show what would be re-queued; change nothing
    #[arg(long)]
    pub dry_run: bool,

    /// One JSON object on stdout instead of the text report
    #[arg(long)]
    pub json: bool,

    /// Full booking ids in the table (by default every line fits 120 columns: the
    /// booking by its first 8 characters; the row id, the event's ce_id, is always whole)
    #[arg(long, conflicts_with = "json")]
    pub wide: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the script for
    #[arg(value_name = "SHELL", value_enum, value_parser = choice::<Shell>())]
    pub shell: Shell,
}

/// The shells `completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// How `audit` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    /// Tables for people (every line fits 120 columns)
    Table,
    /// One JSON object
    Json,
}

/// The most messages `audit --chunk-rows` lets it copy into the database at once.
pub(crate) const AUDIT_CHUNK_ROWS_MAX: u32 = 1_000_000;

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub outbox: OutboxTypesArgs,

    /// The window's start: rows written and messages sent at or after T (RFC 3339 with
    /// an offset; not in the future)
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of))]
    pub since: AsOf,

    /// The window's end: rows written and messages sent before T (RFC 3339 with an
    /// offset, or now)
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of), default_value = "now")]
    pub until: AsOf,

    /// The topics the job publishes to, as run-once takes them (its variable too); the
    /// audit reads each
    #[arg(long, env = "BOOKING_EXPIRATION_TOPICS", value_name = "TOPIC,...",
          default_value = "pin.crm.booking-expired.v1", value_parser = text())]
    pub topics: String,

    /// Audit these topics instead of --topics, comma-separated (any name the outbox
    /// rows' topic column holds, e.g. a version the job no longer writes)
    #[arg(long, value_name = "TOPIC,...", value_delimiter = ',', value_parser = trimmed(non_empty))]
    pub topic: Vec<String>,

    /// The relay's outbox retention (its variable too): a message older than this
    /// whose row is gone counts as purged, not as one nothing explains
    #[arg(long, env = "OUTBOX_RETENTION", value_name = "DURATION", default_value = "7d",
          value_parser = trimmed(duration_in(Duration::from_secs(3600), Duration::from_secs(365 * 86_400))))]
    pub retention: Duration,

    /// Messages copied into the database per statement, the most the audit holds in
    /// memory at once (1..=1000000)
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=i64::from(AUDIT_CHUNK_ROWS_MAX))))]
    pub chunk_rows: u32,

    /// Re-queue the missing rows that were published or failed (the same rows, the
    /// same ce_id), as republish does, recorded in the operations trail; needs --reason
    #[arg(long)]
    pub repair: bool,

    /// Who repairs, for the operations trail; the database user is recorded as well.
    /// Default: --login
    #[arg(long, env = "BOOKING_EXPIRE_ACTOR", value_name = "NAME", value_parser = trimmed(non_empty))]
    pub actor: Option<String>,

    /// The operator's login name, the trail's actor when --actor is not given
    #[arg(long, env = "USER", hide_env_values = true, value_name = "NAME", value_parser = text())]
    pub login: Option<String>,

    /// Why, for the operations trail (required with --repair)
    #[arg(long, value_name = "TEXT", value_parser = trimmed(non_empty), required_if_eq("repair", "true"))]
    pub reason: Option<String>,

    /// Refuse to repair (exit 64, nothing changed) when more rows than this are to be
    /// re-queued (1..=1000000)
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=1_000_000)))]
    pub max_rows: u32,

    /// Output format
    #[arg(long, value_enum, default_value_t = AuditFormat::Table, value_parser = choice::<AuditFormat>())]
    pub format: AuditFormat,

    /// Same as --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}
