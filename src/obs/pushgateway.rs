//! The Pushgateway client. A CronJob has no scrape endpoint, so `run-once` and
//! `relay-outbox` push their gauges when they end (see `obs::gauges` for what).
//!
//! - `POST /metrics/job/crm_booking_expiration/step/<step>`: a fixed grouping key, never
//!   the pod, so each run replaces the last run's values instead of leaving one stale
//!   group per pod behind. POST (not PUT) replaces only the metric names it sends, so
//!   `crm_booking_expiration_last_success_timestamp_seconds`, sent only on success,
//!   keeps the last success across failed runs: the "no successful cycle" alert reads it.
//! - A failed push is logged and never changes the run's outcome or exit code.
//!
//! The POST goes through `obs::push_client` (reqwest, blocking): `http` or `https`, a CA
//! file, basic authentication or a bearer token from the environment.

use std::time::{Duration, Instant};

use anyhow::Result;
use log::{info, warn};

use crate::obs::push_client::{self, Auth, PushSettings};

/// The `job` of the grouping key, the same for both steps.
pub const JOB: &str = "crm_booking_expiration";

/// How long a push may take in all: name lookup, connect, send, response.
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Which command pushes: the `step` of the grouping key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    RunOnce,
    RelayOutbox,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::RunOnce => "run-once",
            Step::RelayOutbox => "relay-outbox",
        }
    }
}

/// A Pushgateway, from `http[s]://host[:port][/path-prefix]`, with the CA file and
/// credentials of `obs::push_client` when the environment gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushgateway {
    host: String,
    port: u16,
    /// Empty, or `/…` without a trailing slash.
    prefix: String,
    https: bool,
    settings: PushSettings,
}

impl Pushgateway {
    /// Reads the CA file and credentials for the push from the environment
    /// (`obs::push_client`); a Pushgateway given without them pushes as before.
    pub fn with_settings_from_env(mut self) -> Result<Self> {
        self.settings = PushSettings::from_env(self.https)?;
        Ok(self)
    }

    /// Parses `http[s]://host[:port][/path-prefix]`; the error says what is wrong and
    /// never repeats a credential.
    pub fn parse(url: &str) -> Result<Self, String> {
        const EXPECTED: &str = "expected http[s]://host[:port][/path-prefix], e.g. \
                                http://pushgateway.monitoring:9091";
        let scheme_end = url.find("://").ok_or(format!("no scheme; {EXPECTED}"))?;
        let https = match url[..scheme_end].to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            other => return Err(format!("scheme {other:?} is not supported; {EXPECTED}")),
        };
        let rest = match url[..scheme_end].to_ascii_lowercase().as_str() {
            "http" | "https" => &url[scheme_end + 3..],
            other => return Err(format!("scheme {other:?} is not supported; {EXPECTED}")),
        };
        if rest.contains(['?', '#']) {
            return Err(format!("a query or fragment is not allowed; {EXPECTED}"));
        }
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("it contains whitespace; {EXPECTED}"));
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err(format!(
                "credentials in the URL are not supported; {EXPECTED}"
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or(format!("unclosed [ in the host; {EXPECTED}"))?;
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(format!("unexpected {after:?} after the host")),
                },
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("no host; {EXPECTED}"));
        }
        let port = match port {
            None if https => 443,
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(format!("bad port {p:?}; {EXPECTED}")),
            },
        };
        Ok(Pushgateway {
            host: host.to_owned(),
            port,
            prefix: path.trim_end_matches('/').to_owned(),
            https,
            settings: PushSettings {
                ca_file: None,
                auth: Auth::None,
            },
        })
    }

    /// The URL, for logs (it never holds a credential).
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.prefix)
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path of a step's group.
    pub fn path(&self, step: Step) -> String {
        format!("{}/metrics/job/{JOB}/step/{}", self.prefix, step.as_str())
    }

    /// Pushes and logs the outcome; never fails (a failed push never changes a run's
    /// outcome).
    pub fn push_logged(&self, step: Step, body: &str) {
        let started = Instant::now();
        match self.push(step, body) {
            Ok(()) => info!(Pushgateway = self.url().as_str(), Step = step.as_str(),
                            DurationMs = started.elapsed().as_millis() as u64; "metrics pushed"),
            Err(e) => warn!(Pushgateway = self.url().as_str(), Step = step.as_str(),
                            Error:% = format!("{e:#}");
                            "metrics push failed for {}: {e:#}; the run's outcome is unchanged",
                            self.url()),
        }
    }

    /// POSTs `body` (text exposition format) to the step's group, within
    /// [`PUSH_TIMEOUT`] in all.
    pub fn push(&self, step: Step, body: &str) -> Result<()> {
        let scheme = if self.https { "https" } else { "http" };
        let url = format!("{scheme}://{}{}", self.authority(), self.path(step));
        push_client::post(&self.settings, &url, body.to_owned(), PUSH_TIMEOUT)
    }
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
            settings: PushSettings {
                ca_file: None,
                auth: Auth::None,
            },
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
        assert_eq!(tls.url(), "https://pg:443/gateway");
        assert_eq!(
            Pushgateway::parse("http://[::1]:9091/a/b"),
            Ok(gw("::1", 9091, "/a/b"))
        );
        let p = Pushgateway::parse("http://[::1]:9091/a").unwrap();
        assert_eq!(p.url(), "http://[::1]:9091/a");
        assert_eq!(
            p.path(Step::RunOnce),
            "/a/metrics/job/crm_booking_expiration/step/run-once"
        );
        assert_eq!(
            gw("h", 1, "").path(Step::RelayOutbox),
            "/metrics/job/crm_booking_expiration/step/relay-outbox"
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
            ("http://[::1:9091", "unclosed ["),
            ("http://p g", "whitespace"),
        ] {
            let err = Pushgateway::parse(url).unwrap_err();
            assert!(err.contains(reason), "{url}: {err}");
            assert!(!err.contains("secret"), "{url}: {err}");
        }
    }
}
