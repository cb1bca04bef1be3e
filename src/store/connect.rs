//! Opening a session: TLS per `sslmode`, timeouts, and a clear classification of why a
//! connection failed (unreachable → 69, refused credentials or TLS → 78).

use anyhow::Result;
use native_tls::TlsConnector;
use postgres::Client;
use postgres_native_tls::MakeTlsConnector;

use crate::config::{DbConfig, SslMode};
use crate::exit::{ClassifyExt, Failure};

/// An open session and what is needed to interrupt its statement in flight.
pub struct Db {
    pub client: Client,
    pub tls: MakeTlsConnector,
}

impl Db {
    /// A closure that cancels the statement in flight on this session, if any.
    pub fn interrupter(&self) -> impl Fn() + Send + 'static {
        let token = self.client.cancel_token();
        let tls = self.tls.clone();
        move || {
            if let Err(e) = token.cancel_query(tls.clone()) {
                log::warn!(error:% = e; "could not send the cancel request");
            }
        }
    }
}

pub fn connect(cfg: &DbConfig) -> Result<Db> {
    let tls = tls_connector(cfg)?;
    let mut client = cfg.pg.connect(tls.clone()).map_err(connect_failure)?;
    // Session limits: a statement or a lock wait never eats the whole cycle, and a
    // transaction left idle by a stuck client never keeps rows locked for long.
    client
        .batch_execute(&format!(
            "SET statement_timeout = {}; SET lock_timeout = {}; \
             SET idle_in_transaction_session_timeout = {}; SET TIME ZONE 'UTC'",
            cfg.statement_timeout.as_millis(),
            cfg.lock_timeout.as_millis(),
            (cfg.statement_timeout * 3).as_millis(),
        ))
        .classify(Failure::Temporary, "cannot set the session's timeouts")?;
    Ok(Db { client, tls })
}

fn tls_connector(cfg: &DbConfig) -> Result<MakeTlsConnector> {
    let mut builder = TlsConnector::builder();
    match cfg.ssl_mode {
        // libpq semantics: prefer/require encrypt without verifying, unless a CA was
        // given, in which case require verifies the chain (as verify-ca does).
        SslMode::Disable | SslMode::Prefer | SslMode::Require if cfg.root_cert.is_none() => {
            builder.danger_accept_invalid_certs(true);
        }
        SslMode::Disable | SslMode::Prefer | SslMode::Require | SslMode::VerifyCa => {
            builder.danger_accept_invalid_hostnames(true);
        }
        SslMode::VerifyFull => {}
    }
    if let Some((_, pem)) = &cfg.root_cert {
        let cert = native_tls::Certificate::from_pem(pem).classify(
            Failure::Config,
            "the database CA file is not a PEM certificate",
        )?;
        builder.add_root_certificate(cert);
    }
    let connector = builder
        .build()
        .classify(Failure::Config, "cannot set up TLS for the database")?;
    Ok(MakeTlsConnector::new(connector))
}

/// Why a connection could not be opened: refused credentials, an unknown database or
/// a failed TLS handshake are configuration (78); anything else means the server is
/// unreachable (69). The password is never part of the message.
fn connect_failure(e: postgres::Error) -> anyhow::Error {
    let failure = match e.as_db_error() {
        Some(db) if matches!(&db.code().code()[..2], "28" | "3D" | "42") => Failure::Config,
        Some(_) => Failure::Unavailable,
        None => {
            let tls = std::error::Error::source(&e)
                .is_some_and(|s| s.downcast_ref::<native_tls::Error>().is_some());
            if tls {
                Failure::Config
            } else {
                Failure::Unavailable
            }
        }
    };
    Err::<(), _>(e)
        .classify(failure, "cannot connect to PostgreSQL")
        .unwrap_err()
}
