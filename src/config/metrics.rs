//! Where a run's metrics go: the Pushgateway's URL (parsed with the `url` crate), its
//! CA file and the push's credentials, resolved from the flags and their variables.
//! `obs::pushgateway` pushes to what is resolved here.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::Secret;
use super::invalid::Invalid;
use crate::cli::MetricsArgs;
use crate::exit::{Failure, fail};

/// Which command pushes: the `step` of the grouping key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushStep {
    RunOnce,
    RelayOutbox,
}

impl PushStep {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PushStep::RunOnce => "run-once",
            PushStep::RelayOutbox => "relay-outbox",
        }
    }
}

/// How the push authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PushAuth {
    None,
    Basic { username: String, password: Secret },
    Bearer(Secret),
}

/// A Pushgateway, from `http[s]://host[:port][/path-prefix]`, with the CA file and the
/// credentials of the push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pushgateway {
    /// The host as the URL names it, IPv6 addresses without their brackets.
    pub host: String,
    pub port: u16,
    /// Empty, or `/…` without a trailing slash.
    pub prefix: String,
    pub https: bool,
    /// PEM file of the CA(s) trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    pub auth: PushAuth,
}

/// Where a run's metrics go.
#[derive(Debug, Clone, Default)]
pub(crate) struct MetricsConfig {
    /// `None`: no push.
    pub pushgateway: Option<Pushgateway>,
}

const EXPECTED: &str = "expected http[s]://host[:port][/path-prefix], e.g. \
                        http://pushgateway.monitoring:9091";

const PASSWORD: &str = "--pushgateway-password / PUSHGATEWAY_PASSWORD";
const PASSWORD_FILE: &str = "--pushgateway-password-file / PUSHGATEWAY_PASSWORD_FILE";
const TOKEN: &str = "--pushgateway-bearer-token / PUSHGATEWAY_BEARER_TOKEN";
const TOKEN_FILE: &str = "--pushgateway-bearer-token-file / PUSHGATEWAY_BEARER_TOKEN_FILE";

impl MetricsConfig {
    /// An empty URL means no push; a malformed one, or credentials that do not fit, are
    /// a configuration error (78), refused before the run starts.
    pub(crate) fn from_args(args: &MetricsArgs) -> Result<Self> {
        let pushgateway = match args.pushgateway_url.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(url) => {
                let mut gateway = Pushgateway::parse(url).map_err(|e| {
                    fail(
                        Failure::Config,
                        format!("invalid --pushgateway-url / PUSHGATEWAY_URL: {e}"),
                    )
                })?;
                let (ca_file, auth) = push_settings(args, gateway.https)
                    .map_err(|e| fail(Failure::Config, format!("metrics push: {e}")))?;
                gateway.ca_file = ca_file;
                gateway.auth = auth;
                Some(gateway)
            }
        };
        Ok(MetricsConfig { pushgateway })
    }
}

/// A value given, unless empty.
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.trim().is_empty())
}

/// A path given, unless empty.
fn given_path(value: &Option<PathBuf>) -> Option<&Path> {
    value.as_deref().filter(|p| !p.as_os_str().is_empty())
}

/// A secret given directly or in a file (its trailing newline cut).
fn secret(
    value: &Option<String>,
    file: &Option<PathBuf>,
    names: (&str, &str),
) -> Result<Option<Secret>, String> {
    match (given(value), given_path(file)) {
        (Some(_), Some(_)) => Err(format!("set {} or {}, not both", names.0, names.1)),
        (Some(v), None) => Ok(Some(Secret::new(v))),
        (None, Some(path)) => {
            let v = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {} {}: {e}", names.1, path.display()))?;
            Ok(Some(Secret::new(v.trim_end_matches(['\r', '\n']))))
        }
        (None, None) => Ok(None),
    }
}

/// The CA file and the credentials of the push; `https` says whether the URL is https.
fn push_settings(args: &MetricsArgs, https: bool) -> Result<(Option<PathBuf>, PushAuth), String> {
    let password = secret(
        &args.pushgateway_password,
        &args.pushgateway_password_file,
        (PASSWORD, PASSWORD_FILE),
    )?;
    let basic = match (given(&args.pushgateway_username), password) {
        (Some(username), Some(password)) => Some(PushAuth::Basic { username, password }),
        (None, None) => None,
        _ => {
            return Err(format!(
                "--pushgateway-username / PUSHGATEWAY_USERNAME and {PASSWORD} (or \
                 {PASSWORD_FILE}) go together"
            ));
        }
    };
    let bearer = secret(
        &args.pushgateway_bearer_token,
        &args.pushgateway_bearer_token_file,
        (TOKEN, TOKEN_FILE),
    )?
    .map(PushAuth::Bearer);
    let auth = match (basic, bearer) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "set either basic authentication (--pushgateway-username / \
                 PUSHGATEWAY_USERNAME) or a bearer token ({TOKEN}) for the Pushgateway, not both"
            ));
        }
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => PushAuth::None,
    };
    if auth != PushAuth::None && !https {
        return Err("Pushgateway credentials are sent only over https; the URL \
                    (--pushgateway-url / PUSHGATEWAY_URL) is http"
            .to_owned());
    }
    let ca_file = given_path(&args.pushgateway_ca_file).map(Path::to_path_buf);
    if let Some(path) = &ca_file {
        std::fs::metadata(path).map_err(|e| {
            format!(
                "cannot read --pushgateway-ca-file / PUSHGATEWAY_CA_FILE {}: {e}",
                path.display()
            )
        })?;
    }
    Ok((ca_file, auth))
}

impl Pushgateway {
    /// Parses `http[s]://host[:port][/path-prefix]`; the error says what is wrong and
    /// never repeats a credential.
    pub(crate) fn parse(text: &str) -> std::result::Result<Self, Invalid> {
        if !text.contains("://") {
            return Err(Invalid(format!("no scheme; {EXPECTED}")));
        }
        // The url crate drops tabs and newlines silently; a URL with them is a typo.
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Invalid(format!("it contains whitespace; {EXPECTED}")));
        }
        let url = url::Url::parse(text).map_err(|e| {
            Invalid(match e {
                url::ParseError::EmptyHost => format!("no host; {EXPECTED}"),
                url::ParseError::InvalidPort => {
                    format!("bad port {:?}; {EXPECTED}", port_text(text))
                }
                url::ParseError::InvalidIpv6Address => {
                    format!("unclosed [ or a bad IPv6 address in the host; {EXPECTED}")
                }
                other => format!("{other}; {EXPECTED}"),
            })
        })?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(Invalid(format!(
                    "scheme {other:?} is not supported; {EXPECTED}"
                )));
            }
        };
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Invalid(format!(
                "a query or fragment is not allowed; {EXPECTED}"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Invalid(format!(
                "credentials in the URL are not supported; {EXPECTED}"
            )));
        }
        let host = match url.host() {
            Some(url::Host::Ipv6(addr)) => addr.to_string(),
            Some(host) => host.to_string(),
            None => return Err(Invalid(format!("no host; {EXPECTED}"))),
        };
        let port = match url.port_or_known_default() {
            Some(0) => return Err(Invalid(format!("bad port \"0\"; {EXPECTED}"))),
            Some(port) => port,
            None => return Err(Invalid(format!("no port; {EXPECTED}"))),
        };
        Ok(Pushgateway {
            host,
            port,
            prefix: url.path().trim_end_matches('/').to_owned(),
            https,
            ca_file: None,
            auth: PushAuth::None,
        })
    }
}

/// The port as typed in `text` (for the message about it): after the authority's last
/// `:` (past an IPv6 address's `]`).
fn port_text(text: &str) -> &str {
    let rest = text.split_once("://").map_or(text, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let after_host = authority.rsplit_once(']').map_or(authority, |(_, a)| a);
    after_host.rsplit_once(':').map_or("", |(_, port)| port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gw(host: &str, port: u16, prefix: &str) -> Pushgateway {
        Pushgateway {
            host: host.into(),
            port,
            prefix: prefix.into(),
            https: false,
            ca_file: None,
            auth: PushAuth::None,
        }
    }

    fn args(url: &str) -> MetricsArgs {
        MetricsArgs {
            pushgateway_url: Some(url.into()),
            pushgateway_ca_file: None,
            pushgateway_username: None,
            pushgateway_password: None,
            pushgateway_password_file: None,
            pushgateway_bearer_token: None,
            pushgateway_bearer_token_file: None,
        }
    }

    #[test]
    fn urls_parse_with_port_prefix_and_ipv6() {
        assert_eq!(
            Pushgateway::parse("http://pushgateway.monitoring:9091"),
            Ok(gw("pushgateway.monitoring", 9091, ""))
        );
        assert_eq!(
            Pushgateway::parse("HTTP://pg:9091/"),
            Ok(gw("pg", 9091, ""))
        );
        assert_eq!(
            Pushgateway::parse("http://pg/gateway/"),
            Ok(gw("pg", 80, "/gateway"))
        );
        let tls = Pushgateway::parse("https://pg/gateway").unwrap();
        assert_eq!((tls.port, tls.https), (443, true));
        assert_eq!(
            Pushgateway::parse("http://[::1]:9091/a/b"),
            Ok(gw("::1", 9091, "/a/b"))
        );
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        for (url, reason) in [
            ("pg:9091", "no scheme"),
            ("ftp://pg", "scheme \"ftp\" is not supported"),
            ("http://user:secret@pg:9091", "credentials in the URL"),
            ("http://:9091", "no host"),
            ("http://pg:0", "bad port \"0\""),
            ("http://pg:99999", "bad port \"99999\""),
            ("http://pg:x", "bad port \"x\""),
            ("http://pg:9091/?a=b", "a query or fragment"),
            ("http://pg:9091/#top", "a query or fragment"),
            ("http://[::1:9091", "unclosed ["),
            ("http://p g", "whitespace"),
            ("http://pg\t:9091", "whitespace"),
        ] {
            let err = Pushgateway::parse(url).unwrap_err();
            assert!(err.0.contains(reason), "{url}: {err}");
            assert!(!err.0.contains("secret"), "{url}: {err}");
        }
    }

    #[test]
    fn an_empty_pushgateway_url_means_no_push_and_a_bad_one_is_a_config_error() {
        assert_eq!(
            MetricsConfig::from_args(&args("  ")).unwrap().pushgateway,
            None
        );
        let e = MetricsConfig::from_args(&args("ftp://pg")).unwrap_err();
        assert_eq!(crate::exit::exit_code(&e), std::process::ExitCode::from(78));
        assert!(
            format!("{e:#}").starts_with("invalid --pushgateway-url / PUSHGATEWAY_URL: scheme")
        );
    }

    #[test]
    fn credentials_go_over_https_only_and_never_print() {
        let mut basic = args("https://pg:9091");
        basic.pushgateway_username = Some("pusher".into());
        basic.pushgateway_password = Some("s3cret-pw".into());
        let gateway = MetricsConfig::from_args(&basic)
            .unwrap()
            .pushgateway
            .unwrap();
        let shown = format!("{gateway:?}");
        assert!(
            !shown.contains("s3cret-pw") && shown.contains("pusher"),
            "{shown}"
        );
        basic.pushgateway_url = Some("http://pg:9091".into());
        let e = format!("{:#}", MetricsConfig::from_args(&basic).unwrap_err());
        assert!(e.contains("credentials are sent only over https"), "{e}");
        let mut alone = args("https://pg");
        alone.pushgateway_username = Some("pusher".into());
        let e = format!("{:#}", MetricsConfig::from_args(&alone).unwrap_err());
        assert!(
            e.contains("PUSHGATEWAY_USERNAME and --pushgateway-password"),
            "{e}"
        );
        let mut both = args("https://pg");
        both.pushgateway_bearer_token = Some("tok-123".into());
        both.pushgateway_bearer_token_file = Some("/nonexistent".into());
        let e = format!("{:#}", MetricsConfig::from_args(&both).unwrap_err());
        assert!(e.contains("not both") && !e.contains("tok-123"), "{e}");
    }
}
