//! How to reach PostgreSQL: the URL (or key=value string) with libpq's TLS parameters
//! taken out, the CA file, the session's timeouts. The password never shows.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Result;

use crate::cli::DatabaseArgs;
use crate::exit::{Failure, fail};

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

/// How to reach PostgreSQL. `Debug` never shows the password (tokio-postgres's own
/// `Config` prints it as `_`).
#[derive(Clone)]
pub struct DbConfig {
    pub pg: postgres::Config,
    pub ssl_mode: SslMode,
    /// PEM bytes of an extra trusted CA, and where they came from.
    pub root_cert: Option<(PathBuf, Vec<u8>)>,
    pub statement_timeout: Duration,
    pub lock_timeout: Duration,
}

impl fmt::Debug for DbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbConfig")
            .field("pg", &self.pg)
            .field("ssl_mode", &self.ssl_mode)
            .field("root_cert", &self.root_cert.as_ref().map(|(p, _)| p))
            .field("statement_timeout", &self.statement_timeout)
            .field("lock_timeout", &self.lock_timeout)
            .finish()
    }
}

impl DbConfig {
    pub fn from_args(args: &DatabaseArgs) -> Result<Self> {
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
        let mut pg = postgres::Config::from_str(&rest).map_err(|e| {
            // The parser's message names the option, never the value: no secret leaks.
            fail(
                Failure::Config,
                format!("invalid --database-url / DATABASE_URL: {e}"),
            )
        })?;
        if pg.get_hosts().is_empty() {
            return Err(fail(
                Failure::Config,
                "invalid --database-url / DATABASE_URL: no host given",
            ));
        }
        if pg.get_user().is_none() {
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
                native_tls::Certificate::from_pem(&pem).map_err(|e| {
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
                ssl_mode:? = ssl_mode;
                "no sslrootcert given: the server certificate is verified against the system's CAs"
            );
        }
        pg.ssl_mode(match ssl_mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        match pg.get_connect_timeout() {
            None => {
                pg.connect_timeout(args.connect_timeout);
            }
            Some(t) if *t > MAX_URL_TIMEOUT => {
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
        if pg.get_application_name().is_none() {
            pg.application_name("booking-expire");
        }
        Ok(DbConfig {
            pg,
            ssl_mode,
            root_cert,
            statement_timeout: args.statement_timeout,
            lock_timeout: args.lock_timeout,
        })
    }
}

/// The largest `connect_timeout` a URL may set: larger values overflow the connection's
/// deadline arithmetic (a panic with several hosts), and no attempt should take longer.
const MAX_URL_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Default, PartialEq)]
struct SslParams {
    mode: Option<String>,
    root_cert: Option<PathBuf>,
}

/// The URL parameters tokio-postgres understands besides the TLS ones we handle.
const KNOWN_PARAMS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
    "sslnegotiation",
];

/// Takes `sslmode` and `sslrootcert` out of a URL (`postgres://…?sslmode=…`) or a
/// key=value string, since tokio-postgres rejects what it does not implement itself.
/// Everything else is handed on as it was written.
fn split_ssl_params(url: &str) -> Result<(String, SslParams)> {
    let mut ssl = SslParams::default();
    let mut take = |key: &str, value: String| -> bool {
        match key {
            "sslmode" => ssl.mode = Some(value),
            "sslrootcert" => ssl.root_cert = Some(PathBuf::from(value)),
            _ => return false,
        }
        true
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if take(k, percent_decode(v)?) {
                        continue;
                    }
                    if !KNOWN_PARAMS.contains(&k) {
                        return Err(fail(
                            Failure::Config,
                            format!(
                                "invalid --database-url / DATABASE_URL: unknown parameter `{k}` \
                                 (known: sslmode, sslrootcert, {})",
                                KNOWN_PARAMS.join(", ")
                            ),
                        ));
                    }
                    kept.push(pair);
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for pair in conninfo_pairs(url)? {
            if !take(pair.keyword, pair.value) {
                kept.push(&url[pair.span]);
            }
        }
        kept.join(" ")
    };
    Ok((rest, ssl))
}

/// A URL query parameter's value, percent-decoded (the `url` crate's decoder); a `%`
/// not followed by two hex digits, or bytes that are not UTF-8, are refused.
fn percent_decode(s: &str) -> Result<String> {
    let bad = |what: &str| {
        fail(
            Failure::Config,
            format!("invalid --database-url / DATABASE_URL: {what} in a query parameter"),
        )
    };
    let bytes = s.as_bytes();
    let well_formed = bytes.iter().enumerate().all(|(i, b)| {
        *b != b'%'
            || bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !well_formed {
        return Err(bad("bad percent-encoding"));
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| bad("a value that is not UTF-8"))
}

/// One `keyword = value` of a libpq key/value string: where it is written, its
/// keyword, and its value with the quotes and backslash escapes taken out.
#[derive(Debug, PartialEq)]
struct Pair<'a> {
    span: std::ops::Range<usize>,
    keyword: &'a str,
    value: String,
}

/// The pairs of a libpq key/value string, as libpq reads them: pairs apart by
/// whitespace, spaces allowed around `=`, a value single-quoted (keeping its spaces)
/// or bare, `\` escaping the next character in either. An error names a keyword at
/// most, never a value.
fn conninfo_pairs(text: &str) -> Result<Vec<Pair<'_>>> {
    let bad = |what: String| {
        fail(
            Failure::Config,
            format!("invalid --database-url / DATABASE_URL: {what}"),
        )
    };
    let bytes = text.as_bytes();
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut pairs = Vec::new();
    let mut i = skip_space(0);
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let keyword = &text[start..i];
        i = skip_space(i);
        if bytes.get(i) != Some(&b'=') {
            // Not named: it may be a value typed without its keyword.
            return Err(bad(format!(
                "the word at character {} is not keyword=value",
                start + 1
            )));
        }
        i = skip_space(i + 1);
        let mut value = Vec::new();
        let quoted = bytes.get(i) == Some(&b'\'');
        if quoted {
            i += 1;
        }
        loop {
            match bytes.get(i) {
                None if quoted => {
                    return Err(bad(format!(
                        "the quoted value of `{keyword}` is not closed"
                    )));
                }
                None => break,
                Some(b'\'') if quoted => {
                    i += 1;
                    break;
                }
                Some(c) if !quoted && c.is_ascii_whitespace() => break,
                Some(b'\\') if i + 1 < bytes.len() => {
                    value.push(bytes[i + 1]);
                    i += 2;
                }
                Some(c) => {
                    value.push(*c);
                    i += 1;
                }
            }
        }
        pairs.push(Pair {
            span: start..i,
            keyword,
            // Cut at ASCII bytes only, so whole characters.
            value: String::from_utf8(value).expect("cut at ASCII bytes"),
        });
        i = skip_space(i);
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_params_are_taken_out_of_a_url() {
        let (rest, ssl) = split_ssl_params(
            "postgres://u:p@h:5432/db?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@h:5432/db?connect_timeout=3");
        assert_eq!(
            ssl,
            SslParams {
                mode: Some("verify-full".into()),
                root_cert: Some("/etc/ca.pem".into())
            }
        );
        let (rest, ssl) = split_ssl_params("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(ssl.mode.as_deref(), Some("require"));
    }

    #[test]
    fn ssl_params_are_taken_out_of_a_key_value_string() {
        let (rest, ssl) =
            split_ssl_params("host=h user=u sslmode=verify-ca sslrootcert='/ca.pem' dbname=crm")
                .unwrap();
        assert_eq!(rest, "host=h user=u dbname=crm");
        assert_eq!(ssl.mode.as_deref(), Some("verify-ca"));
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/ca.pem")));
    }

    #[test]
    fn bad_percent_encoding_is_refused() {
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%zz").is_err());
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%2").is_err());
        assert!(split_ssl_params("postgres://u@h/db?sslrootcert=%ff").is_err());
        let (_, ssl) = split_ssl_params("postgres://u@h/db?sslrootcert=/a+b%20c.pem").unwrap();
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/a+b c.pem")));
    }

    #[test]
    fn quoted_key_value_values_keep_their_spaces_and_escapes() {
        let (rest, ssl) = split_ssl_params(
            "host=h user=u password='a  b\\'c' sslrootcert = '/etc/my certs/ca.pem' \
             sslmode=verify-full application_name=x\\ y",
        )
        .unwrap();
        assert_eq!(
            rest,
            "host=h user=u password='a  b\\'c' application_name=x\\ y"
        );
        assert_eq!(ssl.root_cert, Some(PathBuf::from("/etc/my certs/ca.pem")));
        assert_eq!(ssl.mode.as_deref(), Some("verify-full"));
        let pg = postgres::Config::from_str(&rest).unwrap();
        assert_eq!(pg.get_password(), Some(&b"a  b'c"[..]));
        assert_eq!(pg.get_application_name(), Some("x y"));
    }

    #[test]
    fn a_broken_key_value_string_is_refused_naming_the_keyword_only() {
        for (text, what) in [
            (
                "host=h password='hunter2 x",
                "the quoted value of `password` is not closed",
            ),
            (
                "host=h hunter2",
                "the word at character 8 is not keyword=value",
            ),
        ] {
            let e = format!("{:#}", split_ssl_params(text).unwrap_err());
            assert!(e.ends_with(what) && !e.contains("hunter2"), "{text}: {e}");
        }
    }

    #[test]
    fn ssl_modes_parse_like_libpq() {
        assert_eq!("verify-full".parse(), Ok(SslMode::VerifyFull));
        let err = "allow-all".parse::<SslMode>().unwrap_err();
        assert!(err.contains("\"allow-all\""), "{err}");
        assert!(err.contains("verify-full"), "{err}");
    }

    #[test]
    fn target_session_attrs_and_several_hosts_reach_the_driver() {
        let args = DatabaseArgs {
            database_url: Some(
                "postgres://app@primary:5432,standby:5433/crm?target_session_attrs=read-write"
                    .into(),
            ),
            database_ca_file: None,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(1),
        };
        let cfg = DbConfig::from_args(&args).unwrap();
        assert_eq!(
            cfg.pg.get_target_session_attrs(),
            postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(cfg.pg.get_hosts().len(), 2);
        assert_eq!(cfg.pg.get_ports(), [5432, 5433]);
    }

    #[test]
    fn debug_output_hides_the_password() {
        let args = DatabaseArgs {
            database_url: Some("postgres://app:hunter2-secret@db:5432/crm".into()),
            database_ca_file: None,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            lock_timeout: Duration::from_secs(1),
        };
        let cfg = DbConfig::from_args(&args).unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        assert_eq!(cfg.ssl_mode, SslMode::Prefer);
    }
}
