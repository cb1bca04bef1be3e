//! The log vocabulary: the name and meaning of every field of a log line and every
//! attribute of a span or an event, in one place. Fields are PascalCase (`RunId`,
//! `BookingId`, `DurationMs`) in the JSON lines, the text lines and the spans alike;
//! OpenTelemetry's semantic-convention attributes keep their own names
//! (`messaging.*`, `exception.*`), and the line's envelope keeps the keys log
//! collectors read by default (`ts`, `level`, `msg`). A test reads `src/` and fails on
//! a key of a `log` macro or an `Attr::new` that is not here, or not so written; another
//! keeps the table of `docs/reference/metrics.md` the same as this one.

/// The envelope of every line (`obs::log` writes them first; a record's field of the
/// same name is left out).
pub(crate) const TS: &str = "ts";
pub(crate) const LEVEL: &str = "level";
pub(crate) const MSG: &str = "msg";
pub(crate) const RUN_ID: &str = "RunId";
pub(crate) const TRACE_ID: &str = "TraceId";
pub(crate) const SPAN_ID: &str = "SpanId";
pub(crate) const ENVELOPE: [&str; 6] = [TS, LEVEL, MSG, RUN_ID, TRACE_ID, SPAN_ID];

/// Every field and attribute: its name and what it means (held against the code and
/// the reference page by this room's tests).
#[cfg(test)]
pub(crate) const FIELDS: &[(&str, &str)] = &[
    (
        "ts",
        "every line: when, RFC 3339 UTC with milliseconds (the line's envelope)",
    ),
    (
        "level",
        "every line: `ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE` (the line's envelope)",
    ),
    ("msg", "every line: the message (the line's envelope)"),
    (
        "RunId",
        "every line: the run's id, the correlation id of its audit rows, timeline entries and events (and the cycle's and the relay's span)",
    ),
    (
        "TraceId",
        "every line while tracing is on: the run's trace (the run id's 32 hex digits)",
    ),
    (
        "SpanId",
        "every line while tracing is on and inside a span: the current span",
    ),
    (
        "Actor",
        "who ran an operator command (`--actor` or the operator's name)",
    ),
    (
        "AsOf",
        "the moment a cycle or a dry run decides on, RFC 3339",
    ),
    (
        "Attempt",
        "migrate: the try of a statement that gave up its lock (1, 2, …)",
    ),
    (
        "BackingOff",
        "rows of a batch whose send was refused: they back off and are retried",
    ),
    ("BatchSize", "`--batch-size`: rows per batch"),
    (
        "BookingExpiredCount",
        "bookings the cycle expired in the Booking phase",
    ),
    ("BookingId", "the booking (the event's key)"),
    (
        "BookingLeft",
        "overdue Booking-phase bookings left when the budget ran out",
    ),
    ("Brokers", "the Kafka bootstrap servers"),
    ("Candidates", "overdue bookings a dry run read for a phase"),
    (
        "Cause",
        "why the relay lost its session or broker connection",
    ),
    ("Claimed", "rows the batch claimed"),
    (
        "Command",
        "the step or operator command concerned (`run-once`, `relay-outbox`, …)",
    ),
    ("Count", "rows the batch selected"),
    (
        "DeadlineMs",
        "the cycle's deadline (`--deadline`), in milliseconds",
    ),
    ("DealId", "the deal of the booking"),
    (
        "DidYouMean",
        "the known environment variable nearest a misspelt one",
    ),
    (
        "Done",
        "migrate: how many statements of a file resumed had committed before",
    ),
    (
        "DurationMs",
        "how long the run or the push took, in milliseconds",
    ),
    ("ElapsedMs", "milliseconds since the cycle started"),
    ("Endpoint", "where spans are sent (the OTLP traces URL)"),
    ("Error", "the whole error chain"),
    ("Expired", "bookings the batch expired"),
    (
        "ExpiredAt",
        "when the booking expired, as the event says (RFC 3339)",
    ),
    ("Failed", "rows marked failed: they can never be delivered"),
    (
        "Floor",
        "relay: its watermark's floor, every own outbox row at or below it settled",
    ),
    (
        "High",
        "relay: the highest outbox seq its watermark has dealt with",
    ),
    (
        "Index",
        "migrate: an index of the schema, `schema.name` (one the build would make twice)",
    ),
    (
        "Failures",
        "failures of the phase's batches in a row (the last cycles')",
    ),
    (
        "FlushTimeoutMs",
        "the longest the run waits for the last spans to be sent, in milliseconds",
    ),
    (
        "FollowMs",
        "`--follow`: how long the relay waits for new rows, in milliseconds",
    ),
    (
        "Lock",
        "migrate: the lock a statement waited for, and who held it",
    ),
    ("MaxBatches", "`--max-batches`: batches per phase at most"),
    ("MaxClockSkewMs", "`--max-clock-skew`, in milliseconds"),
    (
        "MaxFailures",
        "sends a row may fail before it is marked failed",
    ),
    (
        "MessageId",
        "the event's id (the outbox row's); a list when one expiry is published in several versions",
    ),
    (
        "Migration",
        "migrate: the migration file (e.g. `001_bookings.sql`)",
    ),
    (
        "NextDue",
        "when the first waiting row is due, RFC 3339 (`-` when none waits)",
    ),
    ("Offset", "the event's offset in its partition"),
    ("Outcome", "a span's end: `success` or `failure`"),
    (
        "OutboxTypes",
        "`--outbox-types`: the outbox event types the relay sends, marks and purges (no other row is touched)",
    ),
    ("Partition", "the event's partition"),
    ("PausedBy", "who paused the step"),
    ("PausedForSeconds", "seconds the step has been paused"),
    ("PausedSince", "when the step was paused, RFC 3339"),
    ("PerPhase", "a dry run's `--limit` per phase"),
    ("Phase", "the expiration phase: `Reserve` or `Booking`"),
    (
        "Pid",
        "migrate: the backend PID of the session holding the migrators' advisory lock",
    ),
    ("Poison", "bookings the batch isolated as poison"),
    ("PoisonCount", "bookings the cycle isolated as poison"),
    (
        "PropertyObjectId",
        "the property object of the booking, as the event says",
    ),
    ("Protocol", "the OTLP protocol asked for"),
    (
        "Published",
        "rows acknowledged by Kafka and marked published",
    ),
    ("Purged", "published rows deleted after the retention"),
    ("PurgeForMs", "the longest a purge runs, in milliseconds"),
    ("Pushgateway", "the Pushgateway's URL (without credentials)"),
    (
        "Quarantined",
        "quarantined bookings a dry run listed for a phase",
    ),
    (
        "ReachableTypes",
        "the outbox types crm.outbox's row security lets the job's roles reach (crm.booking_expiration_outbox_type), comma-separated",
    ),
    (
        "Reason",
        "why: the guard's or the database's refusal of a booking, or the operator's reason for a command",
    ),
    (
        "ReconnectedAfterMs",
        "how long the relay took to reconnect, in milliseconds",
    ),
    ("Refused", "rows of the batch Kafka refused"),
    (
        "Release",
        "migrate: the release (version and commit) a history row was written by",
    ),
    (
        "Released",
        "quarantine entries released because their bookings changed",
    ),
    ("Requeued", "outbox rows an operator re-queued"),
    (
        "ReserveExpiredCount",
        "bookings the cycle expired in the Reserve phase",
    ),
    (
        "ReserveLeft",
        "overdue Reserve-phase bookings left when the budget ran out",
    ),
    (
        "RetentionSeconds",
        "`--retention`: how long published rows are kept, in seconds",
    ),
    (
        "RetryInMs",
        "migrate: how long until a statement that gave up its lock is tried again, in milliseconds",
    ),
    (
        "Retrying",
        "rows whose send failed this run: they back off and are retried",
    ),
    (
        "Role",
        "the database role a command's session runs as (`current_user`)",
    ),
    (
        "RoundTripMs",
        "the clock read's round trip to the database, in milliseconds",
    ),
    ("Rows", "rows concerned"),
    (
        "RowSecurity",
        "whether crm.outbox's row security narrows the session's role to the job's outbox types: `on`, `off` or `not-binding` (on, but not for this role)",
    ),
    (
        "Selection",
        "which outbox rows an operator command selected",
    ),
    ("Sent", "rows of the batch sent to Kafka"),
    (
        "Severity",
        "migrate: the severity of what the server said during a statement (`NOTICE`, `WARNING`, …)",
    ),
    ("Signal", "the signal received (2 = SIGINT, 15 = SIGTERM)"),
    (
        "Skipped",
        "true when another relay held the outbox lock and this one did nothing",
    ),
    (
        "SkippedLocked",
        "overdue bookings a batch skipped because another session held them locked",
    ),
    (
        "SkippedLockedCount",
        "overdue bookings the cycle skipped because another session held them locked",
    ),
    (
        "SlowestBatchMs",
        "the slowest batch of the cycle, in milliseconds",
    ),
    ("Spans", "spans that could not be sent"),
    ("SqlState", "the SQLSTATE of a database refusal"),
    ("SslMode", "the database connection's sslmode"),
    ("Statement", "migrate: the statement of the file, `k/n`"),
    ("Statements", "migrate: how many statements the file has"),
    (
        "Step",
        "the step whose metrics were pushed: `run-once` or `relay-outbox`",
    ),
    (
        "SystemAheadMs",
        "how far this node's clock is ahead of the database's, in milliseconds",
    ),
    ("TenantId", "the tenant of the booking"),
    ("Topic", "the Kafka topic"),
    (
        "Topics",
        "the topics (contract versions) each expiry is published to",
    ),
    ("Unacknowledged", "rows Kafka did not acknowledge in time"),
    (
        "Unsent",
        "rows of the batch not sent (the run stopped first)",
    ),
    ("Variable", "an environment variable"),
    (
        "Waiting",
        "pending rows not due yet (backing off after a refused send, or waiting for their topic)",
    ),
    (
        "WaitingForTopic",
        "those of them waiting for a missing or unusable topic",
    ),
    ("WouldExpire", "bookings a dry run would expire in a phase"),
    ("error.type", "OpenTelemetry: the class of a send's failure"),
    (
        "exception.message",
        "OpenTelemetry: an error event's message",
    ),
    ("exception.type", "OpenTelemetry: an error event's type"),
    (
        "messaging.batch.message_count",
        "OpenTelemetry: messages in the send",
    ),
    ("messaging.destination.name", "OpenTelemetry: the topic"),
    (
        "messaging.destination.partition.id",
        "OpenTelemetry: the partition",
    ),
    (
        "messaging.kafka.message.key",
        "OpenTelemetry: the message key (the booking id)",
    ),
    ("messaging.kafka.offset", "OpenTelemetry: the offset"),
    ("messaging.message.id", "OpenTelemetry: the event's id"),
    ("messaging.operation.name", "OpenTelemetry: `send`"),
    ("messaging.operation.type", "OpenTelemetry: `send`"),
    ("messaging.system", "OpenTelemetry: `kafka`"),
    ("process.command", "OpenTelemetry resource: the subcommand"),
    (
        "service.version",
        "OpenTelemetry resource: the program's version",
    ),
];

/// The page whose table of fields is this one.
#[cfg(test)]
pub(crate) const PAGE: &str = "docs/reference/metrics.md";

/// The line that opens the page's table of fields.
#[cfg(test)]
pub(crate) const TABLE_HEADER: &str = "| field | meaning |";

/// The table of fields as the page shows it.
#[cfg(test)]
pub(crate) fn table() -> String {
    let mut text = format!("{TABLE_HEADER}\n|---|---|\n");
    for (name, meaning) in FIELDS {
        text.push_str(&format!("| `{name}` | {meaning} |\n"));
    }
    text
}

#[cfg(test)]
mod tests;
