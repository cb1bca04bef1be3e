//! How to reach PostgreSQL, built from the flags: the URL (or key=value string) with
//! libpq's TLS parameters taken out, the CA file, the session's timeouts, as the
//! store's `DbConfig`. The password never shows.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Result;

use super::conninfo::split_ssl_params;
use crate::cli::{ConnectionArgs, DatabaseArgs};
use crate::exit::{Failure, fail};
use crate::store::Conninfo;
pub(crate) use crate::store::{DbConfig, SslMode};

/// The connection and its session's timeouts, from the jobs' and reports' flags.
pub(super) fn from_args(args: &DatabaseArgs) -> Result<DbConfig> {
    from_connection(&args.connection, args.statement_timeout, args.lock_timeout)
}

/// The connection, with the session's statement and lock timeouts given apart
/// (`migrate`'s are its own flags).
pub(super) fn from_connection(
    args: &ConnectionArgs,
    statement_timeout: Duration,
    lock_timeout: Duration,
) -> Result<DbConfig> {
    let Some(url) = args
        .database_url
        .as_deref()
        .filter(|u| !u.trim().is_empty())
    else {
        return Err(fail(
            Failure::Config,
            "no database: set --database-url or DATABASE_URL \
                 (e.g. postgres://user:password@host:5432/crm)",
        ));
    };
    let (rest, ssl) = split_ssl_params(url)?;
    let mut pg = Conninfo::from_str(&rest).map_err(|e| {
        // The parser's message names the option, never the value: no secret leaks.
        fail(
            Failure::Config,
            format!("invalid --database-url / DATABASE_URL: {e}"),
        )
    })?;
    if pg.host_count() == 0 {
        return Err(fail(
            Failure::Config,
            "invalid --database-url / DATABASE_URL: no host given",
        ));
    }
    if !pg.has_user() {
        return Err(fail(
            Failure::Config,
            "invalid --database-url / DATABASE_URL: no user given",
        ));
    }
    let ssl_mode = match ssl.mode.as_deref() {
        None => SslMode::Prefer,
        Some(m) => m.parse().map_err(|e: String| {
            fail(
                Failure::Config,
                format!("invalid --database-url / DATABASE_URL: {e}"),
            )
        })?,
    };
    let root_cert_path = args.database_ca_file.clone().or(ssl.root_cert);
    let root_cert = match root_cert_path {
        None => None,
        Some(path) => {
            let pem = std::fs::read(&path).map_err(|e| {
                fail(
                    Failure::Config,
                    format!(
                        "cannot read the database CA file {} (--database-ca-file, \
                             PGSSLROOTCERT or sslrootcert): {e}",
                        path.display()
                    ),
                )
            })?;
            crate::store::check_ca_pem(&pem).map_err(|e| {
                fail(
                    Failure::Config,
                    format!(
                        "the database CA file {} is not a PEM certificate: {e}",
                        path.display()
                    ),
                )
            })?;
            Some((path, pem))
        }
    };
    if matches!(ssl_mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        log::info!(
            SslMode:? = ssl_mode;
            "no sslrootcert given: the server certificate is verified against the system's CAs"
        );
    }
    match pg.connect_timeout() {
        None => {
            pg.set_connect_timeout(args.connect_timeout);
        }
        Some(t) if t > MAX_URL_TIMEOUT => {
            return Err(fail(
                Failure::Config,
                format!(
                    "invalid --database-url / DATABASE_URL: connect_timeout={} is too large \
                         (at most {} seconds; or leave it out and use --connect-timeout)",
                    t.as_secs(),
                    MAX_URL_TIMEOUT.as_secs()
                ),
            ));
        }
        Some(_) => {}
    }
    if pg.application_name().is_none() {
        pg.set_application_name("booking-expire");
    }
    Ok(DbConfig::new(
        pg,
        ssl_mode,
        root_cert,
        statement_timeout,
        lock_timeout,
    ))
}

/// The largest `connect_timeout` a URL may set: larger values overflow the connection's
/// deadline arithmetic (a panic with several hosts), and no attempt should take longer.
const MAX_URL_TIMEOUT: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_session_attrs_and_several_hosts_reach_the_driver() {
        let args = DatabaseArgs {
            connection: ConnectionArgs {
                database_url: Some(
                    "postgres://app@primary:5432,standby:5433/crm?target_session_attrs=read-write"
                        .into(),
                ),
                database_ca_file: None,
                connect_timeout: Duration::from_secs(5),
            },
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(1),
        };
        let cfg = from_args(&args).unwrap();
        assert_eq!(
            cfg.conninfo.target_session_attrs(),
            crate::store::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(cfg.conninfo.host_count(), 2);
        assert_eq!(cfg.conninfo.ports(), [5432, 5433]);
    }

    #[test]
    fn debug_output_hides_the_password() {
        let args = DatabaseArgs {
            connection: ConnectionArgs {
                database_url: Some("postgres://app:hunter2-secret@db:5432/crm".into()),
                database_ca_file: None,
                connect_timeout: Duration::from_secs(5),
            },
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(1),
        };
        let cfg = from_args(&args).unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        assert_eq!(cfg.ssl_mode, SslMode::Prefer);
    }
}
