//! The resolved configuration of `audit`: the window as typed, the topics it reads (the
//! job's `--topics`, or `--topic`), the brokers, the chunk size, and for `--repair` who
//! and why.

use std::time::Duration;

use anyhow::Result;

use super::{Actor, DbConfig, KafkaConfig, Topics};
use crate::cli::{self, AuditArgs};
use crate::domain::{AsOf, OutboxTypes};

/// How long the audit waits for the brokers' answers and for the next message while a
/// partition is not read to its end.
pub(crate) const AUDIT_KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// How `audit` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuditFormat {
    Table,
    Json,
}

#[derive(Debug, Clone)]
pub(crate) struct AuditConfig {
    pub db: DbConfig,
    pub kafka: KafkaConfig,
    pub outbox_types: OutboxTypes,
    pub since: AsOf,
    pub until: AsOf,
    /// The topics read, each once, in the order given.
    pub topics: Vec<String>,
    pub retention: Duration,
    pub chunk_rows: u32,
    /// `--repair`: who and why (the reason is required then).
    pub repair: Option<Actor>,
    pub max_rows: u32,
    pub format: AuditFormat,
}

impl AuditConfig {
    pub(crate) fn from_args(args: &AuditArgs) -> Result<Self> {
        let topics = if args.topic.is_empty() {
            Topics::parse(&args.topics)?
                .versions()
                .iter()
                .map(|v| v.topic().to_owned())
                .collect()
        } else {
            let mut topics: Vec<String> = Vec::new();
            for t in &args.topic {
                if !topics.contains(t) {
                    topics.push(t.clone());
                }
            }
            topics
        };
        let repair = args.repair.then(|| {
            let name = args
                .actor
                .clone()
                .or_else(|| args.login.clone())
                .filter(|n| !n.trim().is_empty());
            Actor {
                name,
                reason: args.reason.clone().unwrap_or_default(),
            }
        });
        Ok(AuditConfig {
            db: super::db::from_args(&args.database)?,
            kafka: super::kafka::from_args(&args.kafka, AUDIT_KAFKA_TIMEOUT)?,
            outbox_types: args.outbox.outbox_types.clone(),
            since: args.since,
            until: args.until,
            topics,
            retention: args.retention,
            chunk_rows: args.chunk_rows,
            repair,
            max_rows: args.max_rows,
            format: if args.json || args.format == cli::AuditFormat::Json {
                AuditFormat::Json
            } else {
                AuditFormat::Table
            },
        })
    }
}
