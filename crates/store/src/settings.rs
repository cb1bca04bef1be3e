//! How to reach PostgreSQL, in the store's terms: the URL (or key=value string) as the
//! driver reads it, libpq's `sslmode`, the CA, the session's timeouts. The program
//! builds them from its flags (`config/db.rs`); the store turns them into the driver's
//! settings. The password never shows.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// libpq's `sslmode` values. tokio-postgres only knows the first three, so the verify
/// modes are implemented by the TLS connector (`store::connect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => {
                return Err(format!(
                    "sslmode={s:?} is not allowed: use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }
}

/// `target_session_attrs`: which of the URL's servers a session may be opened on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSessionAttrs {
    Any,
    ReadWrite,
    ReadOnly,
}

/// The URL or key=value string, libpq's TLS parameters taken out, as the driver reads
/// it. `Debug` prints the password as `_`.
#[derive(Clone)]
pub struct Conninfo(pub(crate) postgres::Config);

impl FromStr for Conninfo {
    /// The parser's message: it names the option, never the value.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        postgres::Config::from_str(s)
            .map(Conninfo)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Debug for Conninfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Conninfo {
    /// How many hosts the URL names.
    pub fn host_count(&self) -> usize {
        self.0.get_hosts().len()
    }

    /// The ports given: none, one for every host, or one per host.
    pub fn ports(&self) -> &[u16] {
        self.0.get_ports()
    }

    pub fn has_user(&self) -> bool {
        self.0.get_user().is_some()
    }

    pub fn password(&self) -> Option<&[u8]> {
        self.0.get_password()
    }

    pub fn connect_timeout(&self) -> Option<Duration> {
        self.0.get_connect_timeout().copied()
    }

    pub fn set_connect_timeout(&mut self, timeout: Duration) {
        self.0.connect_timeout(timeout);
    }

    pub fn application_name(&self) -> Option<&str> {
        self.0.get_application_name()
    }

    pub fn set_application_name(&mut self, name: &str) {
        self.0.application_name(name);
    }

    pub fn target_session_attrs(&self) -> TargetSessionAttrs {
        match self.0.get_target_session_attrs() {
            postgres::config::TargetSessionAttrs::ReadWrite => TargetSessionAttrs::ReadWrite,
            postgres::config::TargetSessionAttrs::ReadOnly => TargetSessionAttrs::ReadOnly,
            _ => TargetSessionAttrs::Any,
        }
    }

    /// The driver's TLS setting for `mode`: it knows disable, prefer and require; the
    /// verify modes require TLS and are verified by the store's connector.
    fn set_ssl_mode(&mut self, mode: SslMode) {
        self.0.ssl_mode(match mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
    }
}

/// Whether `pem` is a PEM certificate TLS can trust; the TLS library's reason if not.
pub fn check_ca_pem(pem: &[u8]) -> crate::error::Result<()> {
    native_tls::Certificate::from_pem(pem)
        .map(|_| ())
        .map_err(|e| crate::error::StoreError::Other(Box::new(e)))
}

/// How to reach PostgreSQL. `Debug` never shows the password (the driver's own
/// settings print it as `_`).
#[derive(Clone)]
pub struct DbConfig {
    pub conninfo: Conninfo,
    pub ssl_mode: SslMode,
    /// PEM bytes of an extra trusted CA, and where they came from.
    pub root_cert: Option<(PathBuf, Vec<u8>)>,
    pub statement_timeout: Duration,
    pub lock_timeout: Duration,
}

impl DbConfig {
    /// The settings, the URL's TLS setting made `ssl_mode`'s.
    pub fn new(
        mut conninfo: Conninfo,
        ssl_mode: SslMode,
        root_cert: Option<(PathBuf, Vec<u8>)>,
        statement_timeout: Duration,
        lock_timeout: Duration,
    ) -> Self {
        conninfo.set_ssl_mode(ssl_mode);
        DbConfig {
            conninfo,
            ssl_mode,
            root_cert,
            statement_timeout,
            lock_timeout,
        }
    }
}

impl fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbConfig")
            .field("pg", &self.conninfo)
            .field("ssl_mode", &self.ssl_mode)
            .field("root_cert", &self.root_cert.as_ref().map(|(p, _)| p))
            .field("statement_timeout", &self.statement_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_modes_parse_like_libpq() {
        assert_eq!("verify-full".parse(), Ok(SslMode::VerifyFull));
        let err = "allow-all".parse::<SslMode>().unwrap_err();
        assert!(err.contains("\"allow-all\""), "{err}");
        assert!(err.contains("verify-full"), "{err}");
    }
}
