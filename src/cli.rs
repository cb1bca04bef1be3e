// Over 450 lines: every flag's help text, environment variable and bounds, written once for --help, with the usage-error notes that explain them.
//! The command line as typed: clap definitions with their environment fallbacks.
//! Values are parsed here; cross-field checks and secrets live in `config`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::domain::AsOf;
pub use crate::duration::{parse_duration, show_duration};
use crate::exit::{EXIT_CODES_HELP, Failure};

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    name = "booking-expire",
    version,
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
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
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

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the script for
    #[arg(value_name = "SHELL", value_enum)]
    pub shell: crate::reference::CompletionShell,
}

/// How to reach PostgreSQL.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL connection URL or key=value string, e.g.
    /// postgres://user:secret@db:5432/crm?sslmode=verify-full. sslmode: disable, prefer
    /// (default), require, verify-ca, verify-full; sslrootcert=FILE adds a CA
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// PEM file with the CA that signs the database server's certificate (overrides
    /// sslrootcert in the URL)
    #[arg(long, env = "PGSSLROOTCERT", value_name = "FILE")]
    pub database_ca_file: Option<PathBuf>,

    /// Give up connecting to a host after this long, TLS and startup included (each
    /// host of a URL with several gets this long); a connect_timeout in the URL wins
    /// (1s..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_CONNECT_TIMEOUT", value_name = "DURATION",
          default_value = "5s", value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(60)))]
    pub connect_timeout: Duration,

    /// Cancel any single statement running longer than this; the server also ends a
    /// transaction left idle for three times this long (100ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_STATEMENT_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = duration_in(Duration::from_millis(100), Duration::from_secs(60)))]
    pub statement_timeout: Duration,

    /// Give up waiting for any lock after this long (10ms..=60s)
    #[arg(long, env = "BOOKING_EXPIRATION_LOCK_TIMEOUT", value_name = "DURATION",
          default_value = "3s", value_parser = duration_in(Duration::from_millis(10), Duration::from_secs(60)))]
    pub lock_timeout: Duration,
}

/// The size of a cycle.
#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Bookings claimed per batch, per phase (1..=10000)
    #[arg(long, env = "BOOKING_EXPIRATION_BATCH_SIZE", value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: u32,

    /// Most batches per phase in one cycle (1..=100000). A cycle takes batch after batch,
    /// the phases in turn, while overdue rows remain, this many were not taken and
    /// --deadline leaves time for one more; each batch is its own short transaction, so
    /// a large value drains a backlog without holding locks longer
    #[arg(long, env = "BOOKING_EXPIRATION_MAX_BATCHES", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_batches: u32,
}

/// Where to push the run's metrics.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Prometheus Pushgateway to push this run's metrics to when it ends, success or
    /// failure (http://host:port[/path-prefix]; unset or empty = no push). A failed push
    /// is logged and never fails the run
    #[arg(long, env = "PUSHGATEWAY_URL", value_name = "URL")]
    pub pushgateway_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunOnceArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub batch: BatchArgs,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// The cycle's time budget since its start (1s..=10m): no batch starts unless the
    /// time left exceeds twice the slowest batch so far (and a tenth of the budget, at
    /// most 1s); a statement still running at the end is cancelled (exit 75). Keep it
    /// below the schedule's interval
    #[arg(long, env = "BOOKING_EXPIRATION_DEADLINE", value_name = "DURATION",
          default_value = "25s", value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(600)))]
    pub deadline: Duration,

    /// Refuse to expire anything (exit 78) when the system clock and the database
    /// clock differ by more than this for certain (the measured difference less half
    /// the query's round trip): a node with a wrong clock would expire bookings early
    /// or late (100ms..=5m)
    #[arg(long, env = "BOOKING_EXPIRATION_MAX_CLOCK_SKEW", value_name = "DURATION",
          default_value = "2s", value_parser = duration_in(Duration::from_millis(100), Duration::from_secs(300)))]
    pub max_clock_skew: Duration,

    /// The topics each expiry is published to, comma-separated, each at most once: one
    /// outbox row per topic, written with the expiry. Allowed: pin.crm.booking-expired.v1,
    /// pin.crm.booking-expired.v2 (both while consumers move from v1 to v2)
    #[arg(
        long,
        env = "BOOKING_EXPIRATION_TOPICS",
        value_name = "TOPIC,...",
        default_value = "pin.crm.booking-expired.v1"
    )]
    pub topics: String,
}

/// How to reach Kafka.
#[derive(Debug, Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers, comma-separated host:port
    #[arg(long, env = "KAFKA_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,

    /// How to talk to the brokers
    #[arg(long, env = "KAFKA_SECURITY_PROTOCOL", value_enum, default_value_t = SecurityProtocol::Plaintext)]
    pub kafka_security_protocol: SecurityProtocol,

    /// PEM file with the CA that signs the brokers' certificates (SSL, SASL_SSL)
    #[arg(long, env = "KAFKA_CA_FILE", value_name = "FILE")]
    pub kafka_ca_file: Option<PathBuf>,

    /// SASL mechanism (SASL_SSL, SASL_PLAINTEXT)
    #[arg(long, env = "KAFKA_SASL_MECHANISM", value_enum, default_value_t = SaslMechanism::ScramSha512)]
    pub kafka_sasl_mechanism: SaslMechanism,

    /// SASL user name
    #[arg(long, env = "KAFKA_USERNAME", value_name = "USER")]
    pub kafka_username: Option<String>,

    /// SASL password; prefer the environment variable (never logged)
    #[arg(
        long,
        env = "KAFKA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub kafka_password: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityProtocol {
    #[value(name = "plaintext", alias = "PLAINTEXT")]
    Plaintext,
    #[value(name = "ssl", alias = "SSL")]
    Ssl,
    #[value(name = "sasl_ssl", alias = "SASL_SSL")]
    SaslSsl,
    #[value(name = "sasl_plaintext", alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "PLAIN")]
    Plain,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// Outbox rows fetched and sent per batch (1..=10000)
    #[arg(long, env = "OUTBOX_RELAY_BATCH_SIZE", value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: u32,

    /// Without --follow: start no new batch this long after the run's start; the
    /// batches in flight then get their reports, and the purge runs. With --follow,
    /// --follow is the bound instead (1s..=1h)
    #[arg(long, env = "OUTBOX_RELAY_DEADLINE", value_name = "DURATION",
          default_value = "25s", value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(3600)))]
    pub deadline: Duration,

    /// Bound the whole run to this long from its start, in place of --deadline: send
    /// what is pending, then wait for each cycle's commit (LISTEN/NOTIFY) and send it
    /// within a second, starting no new batch once this has passed since the start, however
    /// much is still pending (the next run goes on with it). 0s = send what is pending
    /// and exit when the outbox is empty, within --deadline (at most 1h)
    #[arg(long, env = "OUTBOX_RELAY_FOLLOW", value_name = "DURATION",
          default_value = "0s", value_parser = duration_in(Duration::ZERO, Duration::from_secs(3600)))]
    pub follow: Duration,

    /// How long the producer tries to deliver one message before giving up (1s..=5m)
    #[arg(long, env = "OUTBOX_RELAY_MESSAGE_TIMEOUT", value_name = "DURATION",
          default_value = "10s", value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(300)))]
    pub message_timeout: Duration,

    /// Delete rows published longer ago than this; pending and failed rows are kept
    /// (1h..=365d)
    #[arg(long, env = "OUTBOX_RETENTION", value_name = "DURATION",
          default_value = "7d", value_parser = duration_in(Duration::from_secs(3600), Duration::from_secs(365 * 86_400)))]
    pub retention: Duration,

    /// Published rows deleted per purge statement (1..=100000)
    #[arg(long, env = "OUTBOX_PURGE_BATCH_SIZE", value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub purge_batch_size: u32,

    /// Partitions every topic must have (a different count changes the key → partition map)
    #[arg(long, env = "OUTBOX_TOPIC_PARTITIONS", value_name = "N", default_value_t = 6,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub expected_partitions: u32,

    /// The largest message sent, payload and headers (1000..=100000000 bytes; at most
    /// the topics' max.message.bytes): a larger row is marked failed without being read
    #[arg(long, env = "OUTBOX_MAX_MESSAGE_BYTES", value_name = "BYTES", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u32).range(1000..=100_000_000))]
    pub max_message_bytes: u32,
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
    #[arg(long, value_name = "T", value_parser = parse_as_of)]
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
        default_value = "pin.crm.booking-expired.v1"
    )]
    pub topics: String,
}

const AS_OF_EXPECTED: &str = "expected RFC 3339 with an offset, e.g. 2026-11-29T18:00:00Z \
                              or 2026-11-29T21:00:00+03:00, or now";

/// Parses `--as-of`: `now`, or RFC 3339 with an explicit offset (a time without one
/// is ambiguous, so it is refused rather than guessed as UTC or local time).
pub fn parse_as_of(s: &str) -> Result<AsOf, String> {
    use chrono::format::ParseErrorKind;
    use chrono::{DateTime, NaiveDateTime, Utc};
    if s == "now" {
        return Ok(AsOf::Now);
    }
    match DateTime::parse_from_rfc3339(s) {
        Ok(at) => {
            let at = at.with_timezone(&Utc);
            // PostgreSQL keeps microseconds; deciding on more would let the domain and
            // the query disagree about a deadline within the same microsecond.
            Ok(AsOf::At(crate::clock::to_micros(at)))
        }
        Err(e) => {
            let no_offset = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .any(|f| NaiveDateTime::parse_from_str(s, f).is_ok());
            let detail = if s.is_empty() {
                "it is empty; "
            } else if no_offset {
                "it has no UTC offset; "
            } else if matches!(
                e.kind(),
                ParseErrorKind::OutOfRange | ParseErrorKind::Impossible
            ) {
                "not a real date and time (a field is out of range); "
            } else {
                ""
            };
            Err(format!("{detail}{AS_OF_EXPECTED}"))
        }
    }
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

    /// Output format
    #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
    pub format: ReportFormat,

    /// Same as --format json
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// After printing the report, exit 1 when the overdue count (both phases, poison
    /// included) exceeds N: for alerts and probes
    #[arg(long, value_name = "N")]
    pub fail_above: Option<u64>,

    /// Name the sessions and prepared transactions that have held the xmin horizon back
    /// (so that VACUUM cannot clean the outbox) for longer than this; an inactive
    /// replication slot that holds it is named whatever its age (1s..=7d)
    #[arg(long, value_name = "DURATION", default_value = "15m",
          value_parser = duration_in(Duration::from_secs(1), Duration::from_secs(7 * 86_400)))]
    pub xmin_horizon_age: Duration,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// The booking's id: a UUID, or a unique prefix of at least 8 hex characters of
    /// one (as the tables show it, e.g. bb7f5ae6)
    #[arg(value_name = "BOOKING_ID", value_parser = parse_id)]
    pub booking_id: IdArg,

    /// The moment of "the next cycle": RFC 3339 with an offset, or `now` (default)
    #[arg(long, value_name = "T", value_parser = parse_as_of, default_value = "now")]
    pub as_of: AsOf,

    /// One JSON object instead of the text report
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub kafka: KafkaArgs,
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
    /// user is recorded as well. Default: the USER environment variable, if set
    #[arg(long, env = "BOOKING_EXPIRE_ACTOR", value_name = "NAME", value_parser = non_empty)]
    pub actor: Option<String>,

    /// Why, for the operations trail and the log line of every paused run (required)
    #[arg(long, value_name = "TEXT", value_parser = non_empty)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// The command to switch: run-once or relay-outbox
    #[arg(value_name = "COMMAND", value_enum)]
    pub command: Pausable,

    #[command(flatten)]
    pub actor: ActorArgs,

    /// One JSON object on stdout instead of a sentence
    #[arg(long)]
    pub json: bool,
}

/// The most `pause --wait` waits: longer than any batch in flight or delivery report
/// can take (their bounds are --statement-timeout and --message-timeout, 1m and 5m).
pub const PAUSE_WAIT_MAX: Duration = Duration::from_secs(600);

#[derive(Debug, Args)]
pub struct PauseOnArgs {
    #[command(flatten)]
    pub switch: PauseArgs,

    /// After switching, wait at most this long until no run of the command is working
    /// any more (0s..=10m; 0s = only say what is working now). A working run-once stops
    /// after its batch in flight; a working relay sends nothing more and waits for the
    /// delivery reports of what it sent. Exit 1 when work is still going on at the end
    #[arg(long, value_name = "DURATION", default_value = "30s",
          value_parser = duration_in(Duration::ZERO, PAUSE_WAIT_MAX))]
    pub wait: Duration,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("selection").required(true).multiple(false)
    .args(["ids", "booking", "since", "all"])))]
pub struct RequeueArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,

    /// Outbox row ids (the events' ce_id), comma-separated; each a UUID or a unique
    /// prefix of at least 8 hex characters of one
    #[arg(long, value_name = "UUID,...", value_delimiter = ',', value_parser = parse_id)]
    pub ids: Vec<IdArg>,

    /// Every outbox row of this booking: its id, or a unique prefix of at least 8 hex
    /// characters of it (as the tables show it)
    #[arg(long, value_name = "BOOKING_ID", value_parser = parse_id)]
    pub booking: Option<IdArg>,

    /// Rows written at or after T (RFC 3339 with an offset); needs --until
    #[arg(long, value_name = "T", value_parser = parse_as_of, requires = "until")]
    pub since: Option<AsOf>,

    /// Rows written before T (RFC 3339 with an offset, or now); needs --since
    #[arg(long, value_name = "T", value_parser = parse_as_of, requires = "since")]
    pub until: Option<AsOf>,

    /// retry-failed only: every failed row
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub actor: ActorArgs,

    /// Refuse (exit 64) when the selection holds more rows than this (1..=1000000)
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
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

/// An id as typed: a whole UUID, or the start of one (at least [`IdArg::MIN_PREFIX`]
/// hex characters, hyphens ignored), which the database resolves if it is unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdArg {
    Full(uuid::Uuid),
    /// Lowercase hex digits, `MIN_PREFIX..32` of them.
    Prefix(String),
}

impl IdArg {
    /// The shortest prefix taken: what the 120-column tables show of an id.
    pub const MIN_PREFIX: usize = 8;
}

impl std::fmt::Display for IdArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdArg::Full(id) => write!(f, "{id}"),
            IdArg::Prefix(hex) => f.write_str(hex),
        }
    }
}

fn parse_id(s: &str) -> Result<IdArg, String> {
    let s = s.trim();
    if let Ok(id) = uuid::Uuid::parse_str(s) {
        return Ok(IdArg::Full(id));
    }
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() >= IdArg::MIN_PREFIX
        && hex.len() < 32
        && hex.chars().all(|c| c.is_ascii_hexdigit())
    {
        return Ok(IdArg::Prefix(hex.to_ascii_lowercase()));
    }
    Err(format!(
        "{s:?} is not a UUID, nor the start of one of at least {} hex characters (e.g. \
         0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70, or 0190a6f0 when no other id starts so)",
        IdArg::MIN_PREFIX
    ))
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

/// A clap value parser for a duration such as `250ms`, `5s` or `2m`, within bounds.
fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let d = parse_duration(s)?;
        if d < min || d > max {
            return Err(format!(
                "{s} is out of range: allowed {} to {}",
                show_duration(min),
                show_duration(max)
            ));
        }
        Ok(d)
    }
}

/// Prints a command-line error and says what it was: `Ok` for --help/--version (they
/// are shown, not refused), a usage failure otherwise; `exit::usage_code` names the
/// code. When the bad value came from an environment variable, says which, since
/// clap's message only names the flag. Under `--log-format json` (flag or variable)
/// the error is one JSON line, as every other line on stderr.
pub fn usage_error(e: clap::Error) -> Result<(), Failure> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return Ok(());
    }
    let mut notes = Vec::new();
    if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
        let flag = arg.split_whitespace().next().unwrap_or(arg);
        let typed = std::env::args_os().any(|a| {
            a.to_str()
                .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
        });
        if let Some(env) = env_of(flag).filter(|env| !typed && std::env::var_os(env).is_some()) {
            notes.push(format!(
                "the value of {flag} came from the environment variable {env}"
            ));
        }
    }
    match e.kind() {
        // clap names neither the flag nor the variable whose value is not UTF-8.
        ErrorKind::InvalidUtf8 => {
            for input in non_utf8_inputs() {
                notes.push(format!("{input} is not valid UTF-8"));
            }
        }
        // `--batch-size -1`: clap reads `-1` as a flag of its own and does not say whose
        // value it was meant to be.
        ErrorKind::UnknownArgument => {
            if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg)
                && let Some(flag) = flag_before_negative(arg)
            {
                notes.push(format!(
                    "{arg} was read as a flag, not as the value of {flag}, which takes no negative value"
                ));
            }
        }
        _ => {}
    }
    // Written without eprintln!, which panics when stderr is closed.
    if json_logging_asked() {
        crate::exit::error_line(&usage_json(&e.render().to_string(), &notes));
    } else {
        let _ = e.print();
        for note in &notes {
            crate::exit::error_line(&format!("note: {note}"));
        }
    }
    Err(Failure::Usage)
}

/// Whether the command line or the environment asks for JSON logs: read by hand, since
/// the command line that says so is the one clap refused.
fn json_logging_asked() -> bool {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().trim().to_owned())
        .collect();
    let from_args = args.iter().enumerate().rev().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix("--log-format=") {
            Some(v.trim().to_owned())
        } else if a == "--log-format" {
            args.get(i + 1).cloned()
        } else {
            None
        }
    });
    from_args
        .or_else(|| std::env::var("LOG_FORMAT").ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("json"))
}

/// A usage error as one JSON line: clap's message (its lines joined), the usage line
/// apart, and the notes.
fn usage_json(rendered: &str, notes: &[String]) -> String {
    let mut message = Vec::new();
    let mut usage = None;
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_owned());
        } else if !line.starts_with("For more information, try") {
            message.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
        }
    }
    let mut line = serde_json::Map::new();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    line.insert("ts".into(), now.into());
    line.insert("level".into(), "ERROR".into());
    line.insert("msg".into(), "usage error".into());
    line.insert("error".into(), message.join("; ").into());
    if let Some(usage) = usage {
        line.insert("usage".into(), usage.into());
    }
    if !notes.is_empty() {
        line.insert("notes".into(), notes.to_vec().into());
    }
    line.insert("exit_code".into(), Failure::Usage.code().into());
    serde_json::Value::Object(line).to_string()
}

/// The flag typed right before `value` when `value` looks like a negative number.
fn flag_before_negative(value: &str) -> Option<String> {
    let digits = value.strip_prefix('-')?;
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let args: Vec<_> = std::env::args_os().collect();
    let at = args.iter().position(|a| a.to_str() == Some(value))?;
    args.get(at.checked_sub(1)?)?
        .to_str()
        .filter(|flag| flag.starts_with("--") && !flag.contains('='))
        .map(str::to_owned)
}

/// The command-line values and the environment variables of this program that are not
/// UTF-8, named as the user typed or set them.
fn non_utf8_inputs() -> Vec<String> {
    use clap::CommandFactory;
    let args: Vec<_> = std::env::args_os().collect();
    let mut inputs = Vec::new();
    for (i, arg) in args.iter().enumerate().skip(1) {
        if arg.to_str().is_some() {
            continue;
        }
        let shown = arg.to_string_lossy();
        let flag = match shown.split_once('=') {
            Some((flag, _)) if flag.starts_with("--") => Some(flag.to_owned()),
            _ => args[i - 1]
                .to_str()
                .filter(|prev| prev.starts_with("--") && !prev.contains('='))
                .map(str::to_owned),
        };
        inputs.push(match flag {
            Some(flag) => format!("the value of {flag}"),
            None => format!("argument {i} ({shown:?})"),
        });
    }
    let cmd = Cli::command();
    let mut envs: Vec<String> = std::iter::once(&cmd)
        .chain(cmd.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect();
    envs.sort();
    envs.dedup();
    for env in envs {
        if std::env::var_os(&env).is_some_and(|v| v.to_str().is_none()) {
            inputs.push(format!("the environment variable {env}"));
        }
    }
    inputs
}

/// The environment variable behind a long flag of the subcommand typed (two
/// subcommands may read the same flag from different variables), or of any.
fn env_of(flag: &str) -> Option<String> {
    use clap::CommandFactory;
    let long = flag.strip_prefix("--")?;
    let cmd = Cli::command();
    let typed = std::env::args_os()
        .skip(1)
        .find_map(|a| cmd.find_subcommand(&a).map(|s| s.get_name().to_owned()));
    let commands = std::iter::once(&cmd).chain(
        cmd.get_subcommands()
            .filter(|s| typed.as_deref().is_none_or(|t| t == s.get_name())),
    );
    commands
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// A command line split as a POSIX shell does for what the examples use: words
    /// separated by spaces, double quotes keeping spaces.
    fn shell_words(line: &str) -> Vec<String> {
        let mut words = Vec::new();
        let mut word = String::new();
        let mut quoted = false;
        let mut started = false;
        for c in line.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    started = true;
                }
                ' ' if !quoted => {
                    if started {
                        words.push(std::mem::take(&mut word));
                        started = false;
                    }
                }
                c => {
                    word.push(c);
                    started = true;
                }
            }
        }
        assert!(!quoted, "unbalanced quotes: {line}");
        if started {
            words.push(word);
        }
        words
    }

    #[test]
    fn every_subcommands_long_help_ends_with_examples_that_parse() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = sub.get_name();
            let help = sub
                .get_after_long_help()
                .unwrap_or_else(|| panic!("{name}: no long help after the flags"))
                .to_string();
            let (_, examples) = help
                .split_once("\n\nExamples:\n")
                .unwrap_or_else(|| panic!("{name}: no examples"));
            let lines: Vec<&str> = examples.lines().collect();
            let commands: Vec<&str> = lines
                .iter()
                .filter_map(|l| l.strip_prefix("  booking-expire "))
                .collect();
            assert!(
                (2..=4).contains(&commands.len()),
                "{name}: {} examples",
                commands.len()
            );
            // Each command line says what it is for, in the comment line above it.
            assert_eq!(lines.len(), 2 * commands.len(), "{name}: {examples}");
            for pair in lines.chunks(2) {
                assert!(pair[0].starts_with("  # "), "{name}: {pair:?}");
            }
            for line in commands {
                let mut argv = vec!["booking-expire".to_owned()];
                argv.extend(shell_words(line));
                assert_eq!(argv[1], name, "{name}: {line}");
                if let Err(e) = Cli::try_parse_from(&argv) {
                    panic!("{name}: the example `{line}` does not parse: {e}");
                }
            }
        }
    }

    #[test]
    fn an_id_is_a_uuid_or_a_start_of_at_least_8_hex_characters() {
        let full = "0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70";
        assert_eq!(parse_id(full), Ok(IdArg::Full(full.parse().unwrap())));
        assert_eq!(parse_id(" BB7F5AE6 "), Ok(IdArg::Prefix("bb7f5ae6".into())));
        assert_eq!(
            parse_id("0190a6f0-58c1"),
            Ok(IdArg::Prefix("0190a6f058c1".into()))
        );
        for bad in [
            "bb7f5ae",
            "bb7f5aeg",
            "",
            "0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70ff",
        ] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_usage_error_under_json_logging_is_one_json_object() {
        let rendered = "error: invalid value 'abc' for '--statement-timeout <DURATION>': \
                        \"abc\": expected a whole number\n\nFor more information, try '--help'.\n";
        let line = usage_json(
            rendered,
            &["the value of --statement-timeout came from X".into()],
        );
        assert!(!line.contains('\n'), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["error"],
            "invalid value 'abc' for '--statement-timeout <DURATION>': \"abc\": expected a whole number"
        );
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["exit_code"], 64);
        assert_eq!(
            v["notes"][0],
            "the value of --statement-timeout came from X"
        );
    }

    #[test]
    fn durations_out_of_range_are_refused_with_the_range() {
        let parse = duration_in(Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(
            parse("61s"),
            Err("61s is out of range: allowed 1s to 1m".to_owned())
        );
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
    }
}
