//! The resolved configuration of the operator commands: `explain`, `pause`, `resume`,
//! `republish`, `retry-failed`; and the values they share with the jobs (which command
//! a pause switch stops, an id as typed, who acts).

use std::fmt;
use std::time::Duration;

use anyhow::Result;
use uuid::Uuid;

use super::{DbConfig, KafkaConfig};
use crate::cli::{self, ActorArgs, ExplainArgs, IdArg, PauseArgs, PauseOnArgs, RequeueArgs};
use crate::domain::{AsOf, OutboxTypes};
use crate::exit::{Failure, fail};

/// How long `explain` waits for each message it reads back from Kafka.
pub(crate) const READ_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Which command a pause switch stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pausable {
    RunOnce,
    RelayOutbox,
}

impl Pausable {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Pausable::RunOnce => "run-once",
            Pausable::RelayOutbox => "relay-outbox",
        }
    }

    /// Its pause switch and working lock in the store.
    pub(crate) fn worker(self) -> crate::domain::Worker {
        match self {
            Pausable::RunOnce => crate::domain::Worker::Cycle,
            Pausable::RelayOutbox => crate::domain::Worker::Relay,
        }
    }
}

impl From<cli::Pausable> for Pausable {
    fn from(command: cli::Pausable) -> Self {
        match command {
            cli::Pausable::RunOnce => Pausable::RunOnce,
            cli::Pausable::RelayOutbox => Pausable::RelayOutbox,
        }
    }
}

/// An id as typed: a whole UUID, or the start of one, which the database resolves if
/// it is unique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TypedId {
    Full(Uuid),
    /// Lowercase hex digits, fewer than 32.
    Prefix(String),
}

impl fmt::Display for TypedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypedId::Full(id) => write!(f, "{id}"),
            TypedId::Prefix(hex) => f.write_str(hex),
        }
    }
}

impl From<&IdArg> for TypedId {
    fn from(arg: &IdArg) -> Self {
        match arg {
            IdArg::Full(id) => TypedId::Full(*id),
            IdArg::Prefix(hex) => TypedId::Prefix(hex.clone()),
        }
    }
}

/// Who does an operator's action, for the trail, besides the database user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor {
    /// `--actor`, else the operator's login name (`USER`); `None` when neither is set.
    pub name: Option<String>,
    pub reason: String,
}

impl From<&ActorArgs> for Actor {
    fn from(args: &ActorArgs) -> Self {
        let name = args
            .actor
            .clone()
            .or_else(|| args.login.clone())
            .filter(|n| !n.trim().is_empty());
        Actor {
            name,
            reason: args.reason.clone(),
        }
    }
}

/// The resolved configuration of `explain`.
#[derive(Debug, Clone)]
pub(crate) struct ExplainConfig {
    pub db: DbConfig,
    pub booking_id: TypedId,
    pub as_of: AsOf,
    pub json: bool,
    /// Where to read each delivery receipt back from; `None` without brokers.
    pub kafka: Option<KafkaConfig>,
    /// The booking's outbox rows shown: those of these types.
    pub outbox_types: OutboxTypes,
}

impl ExplainConfig {
    pub(crate) fn from_args(args: &ExplainArgs) -> Result<Self> {
        let db = super::db::from_args(&args.database)?;
        let kafka = match args.kafka.brokers.as_deref().map(str::trim) {
            Some(b) if !b.is_empty() => {
                Some(super::kafka::from_args(&args.kafka, READ_BACK_TIMEOUT)?)
            }
            _ => None,
        };
        Ok(ExplainConfig {
            db,
            booking_id: TypedId::from(&args.booking_id),
            as_of: args.as_of,
            json: args.json,
            kafka,
            outbox_types: args.outbox.outbox_types.clone(),
        })
    }
}

/// The resolved configuration of `pause` and `resume`.
#[derive(Debug, Clone)]
pub(crate) struct SwitchConfig {
    pub db: DbConfig,
    pub command: Pausable,
    pub actor: Actor,
    pub json: bool,
    /// `pause`: how long to wait for the working runs; `None` for `resume`.
    pub wait: Option<Duration>,
}

impl SwitchConfig {
    /// `pause`.
    pub(crate) fn pause(args: &PauseOnArgs) -> Result<Self> {
        Ok(SwitchConfig {
            wait: Some(args.wait),
            ..SwitchConfig::resume(&args.switch)?
        })
    }

    /// `resume`.
    pub(crate) fn resume(args: &PauseArgs) -> Result<Self> {
        Ok(SwitchConfig {
            db: super::db::from_args(&args.database)?,
            command: args.command.into(),
            actor: Actor::from(&args.actor),
            json: args.json,
            wait: None,
        })
    }
}

/// The resolved configuration of `republish` and `retry-failed`.
#[derive(Debug, Clone)]
pub(crate) struct RequeueConfig {
    pub db: DbConfig,
    /// `retry-failed`: only rows the relay gave up on.
    pub failed_only: bool,
    pub ids: Vec<TypedId>,
    pub booking: Option<TypedId>,
    pub since: Option<AsOf>,
    pub until: Option<AsOf>,
    /// Every failed row (`retry-failed` only).
    pub all: bool,
    pub actor: Actor,
    pub max_rows: u32,
    pub dry_run: bool,
    pub json: bool,
    pub wide: bool,
    /// Only rows of these types are selected, counted and re-queued.
    pub outbox_types: OutboxTypes,
}

impl RequeueConfig {
    /// `republish` (`failed_only` = false) and `retry-failed` (true). The selection is
    /// checked before the database settings, as it was typed first.
    pub(crate) fn from_args(args: &RequeueArgs, failed_only: bool) -> Result<Self> {
        if args.all && !failed_only {
            return Err(fail(
                Failure::Usage,
                "republish: --all is only for retry-failed; name the rows with --ids, --booking \
                 or --since/--until",
            ));
        }
        Ok(RequeueConfig {
            db: super::db::from_args(&args.database)?,
            failed_only,
            ids: args.ids.iter().map(TypedId::from).collect(),
            booking: args.booking.as_ref().map(TypedId::from),
            since: args.since,
            until: args.until,
            all: args.all,
            actor: Actor::from(&args.actor),
            max_rows: args.max_rows,
            dry_run: args.dry_run,
            json: args.json,
            wide: args.wide,
            outbox_types: args.outbox.outbox_types.clone(),
        })
    }

    /// The command's name, as its messages and the trail say it.
    pub(crate) fn command(&self) -> &'static str {
        if self.failed_only {
            "retry-failed"
        } else {
            "republish"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(actor: Option<&str>, login: Option<&str>) -> Option<String> {
        Actor::from(&ActorArgs {
            actor: actor.map(str::to_owned),
            login: login.map(str::to_owned),
            reason: "r".into(),
        })
        .name
    }

    #[test]
    fn the_actor_is_the_name_given_else_the_login_else_none() {
        assert_eq!(
            actor(Some("ann@example.com"), Some("ann")).as_deref(),
            Some("ann@example.com")
        );
        assert_eq!(actor(None, Some("ann")).as_deref(), Some("ann"));
        assert_eq!(actor(None, Some("  ")), None);
        assert_eq!(actor(None, None), None);
    }

    #[test]
    fn ids_as_typed_keep_their_form() {
        let full: Uuid = "0190a6f0-58c1-7b5e-9a51-3c1f4e2d8b70".parse().unwrap();
        assert_eq!(TypedId::from(&IdArg::Full(full)), TypedId::Full(full));
        let start = TypedId::from(&IdArg::Prefix("bb7f5ae6".into()));
        assert_eq!(start.to_string(), "bb7f5ae6");
        assert_eq!(
            Pausable::from(cli::Pausable::RelayOutbox).as_str(),
            "relay-outbox"
        );
    }
}
