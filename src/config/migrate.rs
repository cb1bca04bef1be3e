//! The resolved configuration of `migrate` and `migrate status`.

use std::time::Duration;

use anyhow::Result;

use super::DbConfig;
use crate::cli::{ConnectionArgs, MigrateArgs, MigrateCommand};

/// What `migrate` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MigrateAction {
    /// Apply the pending migrations up to `target` (every one when `None`).
    Apply { target: Option<i32> },
    /// Say what `Apply` would do; change nothing.
    DryRun { target: Option<i32> },
    /// List every migration's state.
    Status { json: bool },
}

/// The runner's limits, as typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MigrateLimits {
    pub lock_timeout: Duration,
    pub statement_timeout: Duration,
    pub index_timeout: Duration,
    pub lock_wait: Duration,
    pub retry_for: Duration,
}

/// The resolved configuration of `migrate`.
#[derive(Debug, Clone)]
pub(crate) struct MigrateConfig {
    /// The session's own limits are the runner's: `lock_timeout` and
    /// `statement_timeout` of [`MigrateLimits`] (set again before each statement).
    pub db: DbConfig,
    pub action: MigrateAction,
    pub limits: MigrateLimits,
}

impl MigrateConfig {
    pub(crate) fn from_args(args: &MigrateArgs) -> Result<Self> {
        let limits = MigrateLimits {
            lock_timeout: args.lock_timeout,
            statement_timeout: args.statement_timeout,
            index_timeout: args.index_timeout,
            lock_wait: args.lock_wait,
            retry_for: args.retry_for,
        };
        let target = args.target.map(i32::from);
        let (database, action) = match &args.command {
            Some(MigrateCommand::Status(status)) => (
                &status.database,
                MigrateAction::Status { json: status.json },
            ),
            None if args.dry_run => (&args.database, MigrateAction::DryRun { target }),
            None => (&args.database, MigrateAction::Apply { target }),
        };
        Ok(MigrateConfig {
            db: db_config(database, &limits)?,
            action,
            limits,
        })
    }
}

/// The connection as every command resolves it, with the runner's limits as the
/// session's.
fn db_config(args: &ConnectionArgs, limits: &MigrateLimits) -> Result<DbConfig> {
    super::db::from_connection(args, limits.statement_timeout, limits.lock_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn resolve(args: &[&str]) -> MigrateConfig {
        let mut argv = vec![
            "booking-expire",
            "migrate",
            "--database-url",
            "postgres://m@db/crm",
        ];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Migrate(args) => MigrateConfig::from_args(&args).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_defaults_are_the_runners_and_the_session_gets_them() {
        let cfg = resolve(&[]);
        assert_eq!(cfg.action, MigrateAction::Apply { target: None });
        assert_eq!(cfg.limits.lock_timeout, Duration::from_secs(2));
        assert_eq!(cfg.limits.statement_timeout, Duration::from_secs(60));
        assert_eq!(cfg.limits.index_timeout, Duration::from_secs(3600));
        assert_eq!(cfg.limits.lock_wait, Duration::from_secs(900));
        assert_eq!(cfg.limits.retry_for, Duration::from_secs(600));
        assert_eq!(cfg.db.lock_timeout, Duration::from_secs(2));
        assert_eq!(cfg.db.statement_timeout, Duration::from_secs(60));
    }

    #[test]
    fn dry_run_target_and_status_resolve_to_their_actions() {
        assert_eq!(
            resolve(&["--dry-run", "--target", "7"]).action,
            MigrateAction::DryRun { target: Some(7) }
        );
        let argv = [
            "booking-expire",
            "migrate",
            "status",
            "--json",
            "--database-url",
            "postgres://m@db/crm",
        ];
        let Command::Migrate(args) = Cli::try_parse_from(argv).unwrap().command else {
            unreachable!()
        };
        assert_eq!(
            MigrateConfig::from_args(&args).unwrap().action,
            MigrateAction::Status { json: true }
        );
    }
}
