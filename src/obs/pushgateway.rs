//! The Pushgateway client. A CronJob has no scrape endpoint, so `run-once` and
//! `relay-outbox` push their gauges when they end (see `obs::metrics` for what).
//!
//! - `POST /metrics/job/crm_booking_expiration/step/<step>`: a fixed grouping key, never
//!   the pod, so each run replaces the last run's values instead of leaving one stale
//!   group per pod behind. POST (not PUT) replaces only the metric names it sends, so
//!   `crm_booking_expiration_last_success_timestamp_seconds`, sent only on success,
//!   keeps the last success across failed runs: the "no successful cycle" alert reads it.
//! - A failed push is logged and never changes the run's outcome or exit code.
//!
//! The Pushgateway speaks plain HTTP inside the cluster; one small POST per run needs no
//! HTTP client library, so this is HTTP/1.1 over `std::net::TcpStream`, bounded in time
//! at every step (lookup, connect, send, response), with `https` refused as a
//! configuration error rather than silently sent in clear.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use log::{info, warn};

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

/// A Pushgateway, from `http://host[:port][/path-prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushgateway {
    host: String,
    port: u16,
    /// Empty, or `/…` without a trailing slash.
    prefix: String,
}

impl Pushgateway {
    /// Parses `http://host[:port][/path-prefix]`; the error says what is wrong and never
    /// repeats a credential.
    pub fn parse(url: &str) -> Result<Self, String> {
        const EXPECTED: &str = "expected http://host[:port][/path-prefix], e.g. \
                                http://pushgateway.monitoring:9091";
        let scheme_end = url.find("://").ok_or(format!("no scheme; {EXPECTED}"))?;
        let rest = match url[..scheme_end].to_ascii_lowercase().as_str() {
            "http" => &url[scheme_end + 3..],
            "https" => {
                return Err(format!(
                    "https is not supported (the push is plain HTTP, meant for a \
                     Pushgateway inside the cluster); {EXPECTED}"
                ));
            }
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
        })
    }

    /// The URL, for logs (it never holds a credential).
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority(), self.prefix)
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
            Ok(()) => info!(pushgateway = self.url().as_str(), step = step.as_str(),
                            duration_ms = started.elapsed().as_millis() as u64; "metrics pushed"),
            Err(e) => warn!(pushgateway = self.url().as_str(), step = step.as_str(),
                            error:% = format!("{e:#}");
                            "metrics push failed; the run's outcome is unchanged"),
        }
    }

    /// POSTs `body` (text exposition format) to the step's group, within
    /// [`PUSH_TIMEOUT`] in all.
    pub fn push(&self, step: Step, body: &str) -> Result<()> {
        let deadline = Instant::now() + PUSH_TIMEOUT;
        let left = || {
            deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow!("timed out after {}s", PUSH_TIMEOUT.as_secs()))
        };
        let addrs = resolve(&self.host, self.port, left()?)?;
        let mut stream = None;
        let mut last_error = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, left()?) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_error = Some(anyhow!("cannot connect to {addr}: {e}")),
            }
        }
        let mut stream = stream
            .ok_or_else(|| last_error.unwrap_or_else(|| anyhow!("{} has no address", self.host)))?;
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: booking-expire/{}\r\n\
             Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.path(step),
            self.authority(),
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        stream.set_write_timeout(Some(left()?))?;
        stream
            .write_all(request.as_bytes())
            .and_then(|()| stream.write_all(body.as_bytes()))
            .map_err(|e| io_error(e, "cannot send the request"))?;
        let mut response = Vec::new();
        let mut chunk = [0_u8; 4096];
        loop {
            stream.set_read_timeout(Some(left()?))?;
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => {
                    response.extend_from_slice(&chunk[..n]);
                    // The status line and a short error text are all we need.
                    if response.len() > 16 * 1024 {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e, "no response")),
            }
        }
        check_response(&response)
    }
}

/// An I/O error of the push; a socket timeout says so in words.
fn io_error(e: std::io::Error, what: &str) -> anyhow::Error {
    use std::io::ErrorKind::{TimedOut, WouldBlock};
    if matches!(e.kind(), TimedOut | WouldBlock) {
        anyhow!("{what}: timed out after {}s", PUSH_TIMEOUT.as_secs())
    } else {
        anyhow!("{what}: {e}")
    }
}

/// The name lookup, bounded in time (the system resolver has no timeout of its own
/// that we control); the lookup thread is left to finish on its own after a timeout.
fn resolve(host: &str, port: u16, within: Duration) -> Result<Vec<SocketAddr>> {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("pushgateway-lookup".into())
        .spawn(move || {
            let _ = tx.send((name.as_str(), port).to_socket_addrs().map(Vec::from_iter));
        })?;
    match rx.recv_timeout(within) {
        Ok(Ok(addrs)) => Ok(addrs),
        Ok(Err(e)) => Err(anyhow!("cannot resolve {host}: {e}")),
        Err(_) => bail!("cannot resolve {host}: timed out"),
    }
}

/// A 2xx status is success; anything else is an error with the status and the first
/// line of the body (the Pushgateway explains a rejected push there).
fn check_response(response: &[u8]) -> Result<()> {
    let text = String::from_utf8_lossy(response);
    let status_line = text.lines().next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next());
    let code: u16 = match code.map(str::parse) {
        Some(Ok(code)) if version.starts_with("HTTP/") => code,
        _ => bail!("not an HTTP response: {:?}", truncate(status_line, 80)),
    };
    if (200..300).contains(&code) {
        return Ok(());
    }
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim())
        .unwrap_or_default();
    let first = body.lines().next().unwrap_or_default();
    bail!("{}: {}", status_line.trim(), truncate(first, 300))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
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
            ("https://pg:9091", "https is not supported"),
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

    #[test]
    fn responses_are_judged_by_status() {
        assert!(check_response(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").is_ok());
        assert!(check_response(b"HTTP/1.1 202 Accepted\r\n\r\n").is_ok());
        let e = check_response(
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\r\npushed metrics are invalid or inconsistent with existing metrics: x\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "HTTP/1.1 400 Bad Request: pushed metrics are invalid or inconsistent with existing metrics: x"
        );
        assert!(check_response(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(check_response(b"").is_err());
    }
}
