//! Resolved, validated configuration, built once from what was typed (the second stage
//! after `cli`, as ripgrep's `HiArgs` follows its `LowArgs`), for every subcommand
//! before it runs. Every error here names its input and exits 78 before anything
//! touches the database.

mod audit;
mod conninfo;
mod db;
pub(crate) mod env;
mod invalid;
mod kafka;
mod metrics;
mod migrate;
mod operate;
mod secret;
mod topics;
mod trace;

use std::time::Duration;

use anyhow::Result;

pub(crate) use self::audit::{AUDIT_KAFKA_TIMEOUT, AuditConfig, AuditFormat};
pub(crate) use self::db::DbConfig;
pub(crate) use self::metrics::{MetricsConfig, PushAuth, PushStep, Pushgateway};
pub(crate) use self::migrate::{MigrateAction, MigrateConfig, MigrateLimits};
pub(crate) use self::operate::{
    Actor, ExplainConfig, Pausable, READ_BACK_TIMEOUT, RequeueConfig, SwitchConfig, TypedId,
};
pub(crate) use self::secret::Secret;
pub(crate) use self::topics::Topics;
pub(crate) use self::trace::{Protocol, TraceConfig};
use crate::cli::{self, BacklogArgs, BatchArgs, Command, DryRunArgs, RelayArgs, RunOnceArgs};
use crate::domain::{AsOf, OutboxTypes};
pub use crate::kafka::{DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, KafkaSecurity};

/// A subcommand's resolved configuration: what `main` hands to `app::run`.
#[derive(Debug)]
pub(crate) enum Config {
    RunOnce(RunOnceConfig, MetricsConfig),
    RelayOutbox(RelayConfig, MetricsConfig),
    DryRun(DryRunConfig),
    Backlog(BacklogConfig),
    Explain(ExplainConfig),
    /// `pause` (its `wait` set) and `resume`.
    Switch(SwitchConfig),
    /// `republish` and `retry-failed` (`failed_only`).
    Requeue(RequeueConfig),
    Audit(AuditConfig),
    /// `migrate`, `migrate --dry-run`, `migrate status`.
    Migrate(MigrateConfig),
    /// `completions`: the shell's script for stdout, rendered from cli's definitions
    /// (`cli::reference`).
    Completions(Vec<u8>),
}

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

impl From<cli::LogFormat> for LogFormat {
    fn from(format: cli::LogFormat) -> Self {
        match format {
            cli::LogFormat::Text => LogFormat::Text,
            cli::LogFormat::Json => LogFormat::Json,
        }
    }
}

/// How `backlog` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReportFormat {
    Table,
    Json,
    Prometheus,
}

impl From<cli::ReportFormat> for ReportFormat {
    fn from(format: cli::ReportFormat) -> Self {
        match format {
            cli::ReportFormat::Table => ReportFormat::Table,
            cli::ReportFormat::Json => ReportFormat::Json,
            cli::ReportFormat::Prometheus => ReportFormat::Prometheus,
        }
    }
}

/// A configuration that was refused. A command that pushes metrics reports a refused
/// configuration too (its errors gauge is 1), once its Pushgateway URL was valid:
/// `push` says where.
#[derive(Debug)]
pub(crate) struct Refused {
    pub error: anyhow::Error,
    pub push: Option<Box<(Pushgateway, PushStep)>>,
}

impl Config {
    /// Resolves the subcommand typed. The Pushgateway URL is resolved first: when it is
    /// valid and the rest is not, the refusal is still pushed.
    pub(crate) fn resolve(command: Command) -> Result<Config, Refused> {
        let refused = |push: Option<Box<(Pushgateway, PushStep)>>| {
            move |error: anyhow::Error| Refused { error, push }
        };
        Ok(match command {
            Command::RunOnce(ref args) => {
                let metrics = MetricsConfig::from_args(&args.metrics).map_err(refused(None))?;
                let push = metrics
                    .pushgateway
                    .clone()
                    .map(|p| Box::new((p, PushStep::RunOnce)));
                let cfg = RunOnceConfig::from_args(args).map_err(refused(push))?;
                Config::RunOnce(cfg, metrics)
            }
            Command::RelayOutbox(ref args) => {
                let metrics = MetricsConfig::from_args(&args.metrics).map_err(refused(None))?;
                let push = metrics
                    .pushgateway
                    .clone()
                    .map(|p| Box::new((p, PushStep::RelayOutbox)));
                let cfg = RelayConfig::from_args(args).map_err(refused(push))?;
                Config::RelayOutbox(cfg, metrics)
            }
            Command::DryRun(ref args) => {
                Config::DryRun(DryRunConfig::from_args(args).map_err(refused(None))?)
            }
            Command::Backlog(ref args) => {
                Config::Backlog(BacklogConfig::from_args(args).map_err(refused(None))?)
            }
            Command::Explain(ref args) => {
                Config::Explain(ExplainConfig::from_args(args).map_err(refused(None))?)
            }
            Command::Pause(ref args) => {
                Config::Switch(SwitchConfig::pause(args).map_err(refused(None))?)
            }
            Command::Resume(ref args) => {
                Config::Switch(SwitchConfig::resume(args).map_err(refused(None))?)
            }
            Command::Republish(ref args) => {
                Config::Requeue(RequeueConfig::from_args(args, false).map_err(refused(None))?)
            }
            Command::RetryFailed(ref args) => {
                Config::Requeue(RequeueConfig::from_args(args, true).map_err(refused(None))?)
            }
            Command::Audit(ref args) => {
                Config::Audit(AuditConfig::from_args(args).map_err(refused(None))?)
            }
            Command::Migrate(ref args) => {
                Config::Migrate(MigrateConfig::from_args(args).map_err(refused(None))?)
            }
            Command::Completions(ref args) => {
                Config::Completions(cli::reference::completions(args.shell))
            }
        })
    }
}

/// The resolved configuration of `dry-run`.
#[derive(Debug, Clone)]
pub(crate) struct DryRunConfig {
    pub db: DbConfig,
    pub batch: Batch,
    pub as_of: AsOf,
    /// Every candidate, not only one cycle's.
    pub all: bool,
    pub json: bool,
    /// Full ids in the table instead of their first eight characters.
    pub wide: bool,
    /// The topics a cycle would publish each expiry on (`--json` shows each event).
    pub topics: Topics,
}

impl DryRunConfig {
    pub(crate) fn from_args(args: &DryRunArgs) -> Result<Self> {
        Ok(DryRunConfig {
            db: db::from_args(&args.database)?,
            batch: Batch::from(&args.batch),
            as_of: args.as_of,
            all: args.all,
            json: args.json,
            wide: args.wide,
            topics: Topics::parse(&args.topics)?,
        })
    }

    /// Candidates per phase one cycle takes; `None` with `--all`. run-once claims up to
    /// max_batches × batch_size per phase, oldest deadline first, batch after batch;
    /// one query with their product as the limit reads the same rows.
    pub(crate) fn limit(&self) -> Option<i64> {
        (!self.all).then(|| i64::from(self.batch.size) * i64::from(self.batch.max_batches))
    }
}

/// The resolved configuration of `backlog`.
#[derive(Debug, Clone)]
pub(crate) struct BacklogConfig {
    pub db: DbConfig,
    pub format: ReportFormat,
    pub fail_above: Option<u64>,
    /// What holds the xmin horizon back longer than this is named.
    pub xmin_horizon_age: std::time::Duration,
    /// The outbox rows counted as the job's; the others are shown apart.
    pub outbox_types: OutboxTypes,
}

impl BacklogConfig {
    pub(crate) fn from_args(args: &BacklogArgs) -> Result<Self> {
        Ok(BacklogConfig {
            db: db::from_args(&args.database)?,
            format: if args.json {
                ReportFormat::Json
            } else {
                args.format.into()
            },
            fail_above: args.fail_above,
            xmin_horizon_age: args.xmin_horizon_age,
            outbox_types: args.outbox.outbox_types.clone(),
        })
    }
}

/// The resolved configuration of `run-once`.
#[derive(Debug, Clone)]
pub struct RunOnceConfig {
    pub db: DbConfig,
    pub batch: Batch,
    pub deadline: Duration,
    /// The largest difference between the system clock and the database clock at
    /// which the cycle still expires bookings.
    pub max_clock_skew: Duration,
    /// The contract versions each expiry is published in: one outbox row per topic.
    pub topics: Topics,
}

#[derive(Debug, Clone, Copy)]
pub struct Batch {
    pub size: u32,
    pub max_batches: u32,
}

impl From<&BatchArgs> for Batch {
    fn from(args: &BatchArgs) -> Self {
        Batch {
            size: args.batch_size,
            max_batches: args.max_batches,
        }
    }
}

impl RunOnceConfig {
    pub fn from_args(args: &RunOnceArgs) -> Result<Self> {
        Ok(RunOnceConfig {
            db: db::from_args(&args.database)?,
            batch: Batch::from(&args.batch),
            deadline: args.deadline,
            max_clock_skew: args.max_clock_skew,
            topics: Topics::parse(&args.topics)?,
        })
    }
}

/// The resolved configuration of `relay-outbox`.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub db: DbConfig,
    pub kafka: KafkaConfig,
    pub batch_size: u32,
    /// No new batch after this (without --follow).
    pub deadline: Duration,
    /// Keep relaying this long, woken by NOTIFY, when non-zero.
    pub follow: Duration,
    pub retention: Duration,
    pub purge_batch_size: u32,
    pub expected_partitions: usize,
    /// The outbox rows this relay sends, marks and purges: no other row is touched.
    pub outbox_types: OutboxTypes,
    /// Also write the outbox columns release 0.1.0 reads (`--legacy-marks`).
    pub legacy_marks: bool,
}

#[cfg(test)]
impl RelayConfig {
    /// A relay's configuration from `relay-outbox`'s flags: for the unit tests of the
    /// rooms that take the configuration and may not name the command line.
    pub(crate) fn from_flags(flags: &[&str]) -> Self {
        use clap::Parser;
        let argv = ["booking-expire", "relay-outbox"].iter().chain(flags);
        let crate::cli::Command::RelayOutbox(args) =
            crate::cli::Cli::try_parse_from(argv).unwrap().command
        else {
            unreachable!("relay-outbox parses as relay-outbox")
        };
        RelayConfig::from_args(&args).unwrap()
    }
}

impl RelayConfig {
    pub fn from_args(args: &RelayArgs) -> Result<Self> {
        Ok(RelayConfig {
            db: db::from_args(&args.database)?,
            kafka: KafkaConfig {
                max_message_bytes: args.max_message_bytes as usize,
                ..kafka::from_args(&args.kafka, args.message_timeout)?
            },
            batch_size: args.batch_size,
            deadline: args.deadline,
            follow: args.follow,
            retention: args.retention,
            purge_batch_size: args.purge_batch_size,
            expected_partitions: args.expected_partitions as usize,
            outbox_types: args.outbox.outbox_types.clone(),
            legacy_marks: args.legacy_marks == crate::cli::LegacyMarks::On,
        })
    }

    /// How long this run may keep starting batches.
    pub fn run_for(&self) -> Duration {
        if self.follow.is_zero() {
            self.deadline
        } else {
            self.follow
        }
    }
}
