//! The flags of the two jobs (`run-once`, `relay-outbox`) and of the reports
//! (`dry-run`, `backlog`).

use std::time::Duration;

use clap::Args;

use super::connect::{DatabaseArgs, KafkaArgs, MetricsArgs, TraceArgs};
use super::values::{choice, duration_in, parse_as_of, parse_outbox_types, text, trimmed};
use crate::domain::{AsOf, OutboxTypes};

/// The size of a cycle.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Bookings claimed per batch, per phase (1..=10000)
    #[arg(long, env = "BOOKING_EXPIRATION_BATCH_SIZE", value_name = "N", default_value_t = 200,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=10_000)))]
    pub batch_size: u32,

    /// Most batches per phase in one cycle (1..=100000). A cycle takes batch after batch,
    /// the phases in turn, while overdue rows remain, this many were not taken and
    /// --deadline leaves time for one more; each batch is its own short transaction, so
    /// a large value drains a backlog without holding locks longer
    #[arg(long, env = "BOOKING_EXPIRATION_MAX_BATCHES", value_name = "N", default_value_t = 1,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=100_000)))]
    pub max_batches: u32,
}

/// Which rows of the outbox are the job's: shared by the relay and every command that
/// reads or re-queues outbox rows.
#[derive(Debug, Args)]
pub struct OutboxTypesArgs {
    /// The outbox event types (the outbox's type column) this job owns, comma-separated:
    /// relay-outbox sends, marks and purges only their rows, and backlog, explain,
    /// republish and retry-failed count, show and re-queue only theirs. The default is
    /// the job's own type, for an outbox shared with other producers: their rows are never
    /// read, written or deleted (backlog shows their number apart). A relay meant to
    /// publish the whole outbox names every type it publishes
    #[arg(long, env = "BOOKING_EXPIRATION_OUTBOX_TYPES", value_name = "TYPE,...",
          default_value = "pin.crm.booking-expired", value_parser = trimmed(parse_outbox_types))]
    pub outbox_types: OutboxTypes,
}

#[derive(Debug, Args)]
pub struct RunOnceArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub batch: BatchArgs,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    #[command(flatten)]
    pub trace: TraceArgs,

    /// The cycle's time budget since its start (1s..=10m): no batch starts unless the
    /// time left exceeds twice the slowest batch so far (and a tenth of the budget, at
    /// most 1s); a statement still running at the end is cancelled (exit 75). Keep it
    /// below the schedule's interval
    #[arg(long, env = "BOOKING_EXPIRATION_DEADLINE", value_name = "DURATION",
          default_value = "25s", value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(600))))]
    pub deadline: Duration,

    /// Refuse to expire anything (exit 78) when the system clock and the database
    /// clock differ by more than this for certain (the measured difference less half
    /// the query's round trip): a node with a wrong clock would expire bookings early
    /// or late (100ms..=5m)
    #[arg(long, env = "BOOKING_EXPIRATION_MAX_CLOCK_SKEW", value_name = "DURATION",
          default_value = "2s", value_parser = trimmed(duration_in(Duration::from_millis(100), Duration::from_secs(300))))]
    pub max_clock_skew: Duration,

    /// The topics each expiry is published to, comma-separated, each at most once: one
    /// outbox row per topic, written with the expiry. Allowed: pin.crm.booking-expired.v1,
    /// pin.crm.booking-expired.v2 (both while consumers move from v1 to v2)
    #[arg(
        long,
        env = "BOOKING_EXPIRATION_TOPICS",
        value_name = "TOPIC,...",
        default_value = "pin.crm.booking-expired.v1", value_parser = text())]
    pub topics: String,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    #[command(flatten)]
    pub trace: TraceArgs,

    #[command(flatten)]
    pub outbox: OutboxTypesArgs,

    /// Outbox rows fetched and sent per batch (1..=10000)
    #[arg(long, env = "OUTBOX_RELAY_BATCH_SIZE", value_name = "N", default_value_t = 2000,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=10_000)))]
    pub batch_size: u32,

    /// Without --follow: start no new batch this long after the run's start; the
    /// batches in flight then get their reports, and the purge runs. With --follow,
    /// --follow is the bound instead (1s..=1h)
    #[arg(long, env = "OUTBOX_RELAY_DEADLINE", value_name = "DURATION",
          default_value = "25s", value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(3600))))]
    pub deadline: Duration,

    /// Bound the whole run to this long from its start, in place of --deadline: send
    /// what is pending, then wait for each cycle's commit (LISTEN/NOTIFY) and send it
    /// within a second, starting no new batch once this has passed since the start, however
    /// much is still pending (the next run goes on with it). 0s = send what is pending
    /// and exit when the outbox is empty, within --deadline (at most 1h)
    #[arg(long, env = "OUTBOX_RELAY_FOLLOW", value_name = "DURATION",
          default_value = "0s", value_parser = trimmed(duration_in(Duration::ZERO, Duration::from_secs(3600))))]
    pub follow: Duration,

    /// How long the producer tries to deliver one message before giving up (1s..=5m)
    #[arg(long, env = "OUTBOX_RELAY_MESSAGE_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(300))))]
    pub message_timeout: Duration,

    /// Delete rows published longer ago than this; pending and failed rows are kept
    /// (1h..=365d)
    #[arg(long, env = "OUTBOX_RETENTION", value_name = "DURATION",
          default_value = "7d", value_parser = trimmed(duration_in(Duration::from_secs(3600), Duration::from_secs(365 * 86_400))))]
    pub retention: Duration,

    /// Published rows deleted per purge statement (1..=100000)
    #[arg(long, env = "OUTBOX_PURGE_BATCH_SIZE", value_name = "N", default_value_t = 1000,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=100_000)))]
    pub purge_batch_size: u32,

    /// Partitions every topic must have (a different count changes the key → partition map)
    #[arg(long, env = "OUTBOX_TOPIC_PARTITIONS", value_name = "N", default_value_t = 6,
          value_parser = trimmed(clap::value_parser!(u32).range(1..=10_000)))]
    pub expected_partitions: u32,

    /// The largest message sent, payload and headers (1000..=100000000 bytes; at most
    /// the topics' max.message.bytes): a larger row is marked failed without being read
    #[arg(long, env = "OUTBOX_MAX_MESSAGE_BYTES", value_name = "BYTES", default_value_t = 1_000_000,
          value_parser = trimmed(clap::value_parser!(u32).range(1000..=100_000_000)))]
    pub max_message_bytes: u32,

    /// Also write what release 0.1.0's relay reads in crm.outbox (published_at,
    /// attempts, failed_at, the back-off and the receipt's columns) beside the relay's
    /// own receipts and exceptions, so that a 0.1.0 relay started again (a rollback)
    /// sends nothing this one delivered. Each such mark rewrites a wide row of the
    /// shared outbox and every one of its indexes: turn them off once no 0.1.0 binary
    /// will run again (docs/guides/upgrading.md); the next release drops them
    #[arg(long, env = "BOOKING_EXPIRATION_LEGACY_MARKS", value_name = "ON|OFF",
          value_enum, default_value_t = LegacyMarks::On, value_parser = choice::<LegacyMarks>())]
    pub legacy_marks: LegacyMarks,
}

/// Whether the relay also writes the outbox columns release 0.1.0 reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LegacyMarks {
    /// Write them beside the relay's own state (this release's default)
    On,
    /// The relay's own state only: no UPDATE of crm.outbox
    Off,
}

#[derive(Debug, Args)]
pub struct DryRunArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub batch: BatchArgs,

    /// The moment to evaluate: RFC 3339 with an offset (2026-11-29T18:00:00Z,
    /// 2026-11-29T21:00:00+03:00) or `now` (the system clock, as run-once reads it).
    /// Fractions below a microsecond are dropped, as PostgreSQL stores time
    #[arg(long, value_name = "T", value_parser = trimmed(parse_as_of))]
    pub as_of: AsOf,

    /// List every candidate, not only what one cycle would take (--batch-size ×
    /// --max-batches per phase)
    #[arg(long)]
    pub all: bool,

    /// Show everything in full: ids, times to the microsecond, reasons and errors in
    /// columns (by default every line fits 120 columns: ids by their first 8
    /// characters, times at whole seconds, long errors cut with …)
    #[arg(long, conflicts_with = "json")]
    pub wide: bool,

    /// JSON lines on stdout: one per booking and topic with the exact event payload and
    /// headers a cycle would publish (ce_id, traceparent and ce_correlationid are this
    /// dry run's own: run-once assigns fresh ones), then a summary line
    #[arg(long)]
    pub json: bool,

    /// The topics a cycle would publish each expiry to, as run-once's --topics (the same
    /// variable): --json shows one event per topic
    #[arg(
        long,
        env = "BOOKING_EXPIRATION_TOPICS",
        value_name = "TOPIC,...",
        default_value = "pin.crm.booking-expired.v1", value_parser = text())]
    pub topics: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// Aligned text for people
    Table,
    /// One JSON object
    Json,
    /// Prometheus text exposition format: gauges, e.g. for a node-exporter textfile or a
    /// Pushgateway
    Prometheus,
}

#[derive(Debug, Args)]
pub struct BacklogArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub outbox: OutboxTypesArgs,

    /// Output format
    #[arg(long, value_enum, default_value_t = ReportFormat::Table, value_parser = choice::<ReportFormat>())]
    pub format: ReportFormat,

    /// Same as --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// After printing the report, exit 1 when the overdue count (both phases, poison
    /// included) exceeds N: for alerts and probes
    #[arg(long, value_name = "N", value_parser = trimmed(clap::value_parser!(u64)))]
    pub fail_above: Option<u64>,

    /// Name the sessions and prepared transactions that have held the xmin horizon back
    /// (so that VACUUM cannot clean the outbox) for longer than this; an inactive
    /// replication slot that holds it is named whatever its age (1s..=7d)
    #[arg(long, value_name = "DURATION", default_value = "15m",
          value_parser = trimmed(duration_in(Duration::from_secs(1), Duration::from_secs(7 * 86_400))))]
    pub xmin_horizon_age: Duration,
}
