//! The session's TLS as `sslmode` asks for it (libpq's semantics), built only when the
//! server agrees to TLS.

use crate::error::Result;
use native_tls::TlsConnector;
use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres_native_tls::TlsStream;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::{Context, Fault};
use crate::settings::{DbConfig, SslMode};

/// The TLS settings `cfg`'s `sslmode` and CA file ask for.
pub(super) fn tls_connector(cfg: &DbConfig) -> Result<LazyTls> {
    let (accept_invalid_certs, accept_invalid_hostnames) = match cfg.ssl_mode {
        // libpq semantics: prefer/require encrypt without verifying, unless a CA was
        // given, in which case require verifies the chain (as verify-ca does).
        SslMode::Disable | SslMode::Prefer | SslMode::Require if cfg.root_cert.is_none() => {
            (true, false)
        }
        SslMode::Disable | SslMode::Prefer | SslMode::Require | SslMode::VerifyCa => (false, true),
        SslMode::VerifyFull => (false, false),
    };
    let root = match &cfg.root_cert {
        Some((_, pem)) => Some(native_tls::Certificate::from_pem(pem).classify(
            Fault::Config,
            "the database CA file is not a PEM certificate",
        )?),
        None => None,
    };
    Ok(LazyTls(Arc::new(TlsSettings {
        accept_invalid_certs,
        accept_invalid_hostnames,
        root,
    })))
}

/// The session's TLS, set up only when the server agrees to TLS: building a connector
/// loads the system's CA bundle (most of a short cycle's time), which a server without
/// TLS under `sslmode=prefer` never needs, nor does `sslmode=disable`.
#[derive(Clone)]
pub struct LazyTls(Arc<TlsSettings>);

struct TlsSettings {
    accept_invalid_certs: bool,
    accept_invalid_hostnames: bool,
    root: Option<native_tls::Certificate>,
}

impl LazyTls {
    fn build(&self) -> Result<TlsConnector, native_tls::Error> {
        let mut builder = TlsConnector::builder();
        builder
            .danger_accept_invalid_certs(self.0.accept_invalid_certs)
            .danger_accept_invalid_hostnames(self.0.accept_invalid_hostnames);
        if let Some(root) = &self.0.root {
            builder.add_root_certificate(root.clone());
        }
        builder.build()
    }
}

impl<S> MakeTlsConnect<S> for LazyTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = LazyTlsConnect;
    type Error = native_tls::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<LazyTlsConnect, native_tls::Error> {
        Ok(LazyTlsConnect {
            tls: self.clone(),
            domain: domain.to_owned(),
        })
    }
}

/// One connection attempt of [`LazyTls`].
pub struct LazyTlsConnect {
    tls: LazyTls,
    domain: String,
}

impl<S> TlsConnect<S> for LazyTlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = native_tls::Error;
    type Future = Pin<Box<dyn Future<Output = Result<TlsStream<S>, native_tls::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        match self.tls.build() {
            Ok(connector) => {
                postgres_native_tls::TlsConnector::new(connector, &self.domain).connect(stream)
            }
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
