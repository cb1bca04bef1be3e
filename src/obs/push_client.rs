//! The HTTP side of the metrics push: reqwest's blocking client (already in the build
//! for the OTLP exporter, native TLS through the system's OpenSSL as everywhere else in
//! this program), so `https`, a private CA and authentication come from a maintained
//! client instead of a hand-written one.
//!
//! Read from the environment, next to `PUSHGATEWAY_URL`:
//!
//! - `PUSHGATEWAY_CA_FILE`: PEM file of the CA(s) that signed the Pushgateway's
//!   certificate, trusted besides the system's roots.
//! - `PUSHGATEWAY_USERNAME` with `PUSHGATEWAY_PASSWORD` (or `PUSHGATEWAY_PASSWORD_FILE`):
//!   HTTP basic authentication.
//! - `PUSHGATEWAY_BEARER_TOKEN` (or `PUSHGATEWAY_BEARER_TOKEN_FILE`): a bearer token.
//!
//! Credentials are sent only over `https` (a plain-`http` URL with credentials is a
//! configuration error), never appear in a log line, an error or `Debug`.

use std::fmt;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A credential that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Hidden(String);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Basic { username: String, password: Hidden },
    Bearer(Hidden),
}

/// What the push needs besides the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSettings {
    pub ca_file: Option<String>,
    pub auth: Auth,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A secret given directly (`NAME`) or in a file (`NAME_FILE`, trailing newline cut).
fn secret(name: &str) -> Result<Option<Hidden>> {
    let file_var = format!("{name}_FILE");
    match (var(name), var(&file_var)) {
        (Some(_), Some(_)) => bail!("set {name} or {file_var}, not both"),
        (Some(v), None) => Ok(Some(Hidden(v))),
        (None, Some(path)) => {
            let v = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {file_var} {path}"))?;
            Ok(Some(Hidden(v.trim_end_matches(['\r', '\n']).to_owned())))
        }
        (None, None) => Ok(None),
    }
}

impl PushSettings {
    /// From the environment; `https` says whether the URL is https.
    pub fn from_env(https: bool) -> Result<Self> {
        let basic = match (var("PUSHGATEWAY_USERNAME"), secret("PUSHGATEWAY_PASSWORD")?) {
            (Some(username), Some(password)) => Some(Auth::Basic { username, password }),
            (None, None) => None,
            _ => bail!("PUSHGATEWAY_USERNAME and PUSHGATEWAY_PASSWORD go together"),
        };
        let bearer = secret("PUSHGATEWAY_BEARER_TOKEN")?.map(Auth::Bearer);
        let auth = match (basic, bearer) {
            (Some(_), Some(_)) => {
                bail!("set either basic authentication or a bearer token for the Pushgateway")
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => Auth::None,
        };
        if auth != Auth::None && !https {
            bail!("Pushgateway credentials are sent only over https; the URL is http");
        }
        let ca_file = var("PUSHGATEWAY_CA_FILE");
        if let Some(path) = &ca_file {
            std::fs::metadata(path)
                .with_context(|| format!("cannot read PUSHGATEWAY_CA_FILE {path}"))?;
        }
        Ok(PushSettings { ca_file, auth })
    }
}

/// POSTs `body` (text exposition format) to `url`, within `timeout` in all. A 2xx is
/// success; otherwise the error has the status and the first line of the body.
pub fn post(settings: &PushSettings, url: &str, body: String, timeout: Duration) -> Result<()> {
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("booking-expire/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none());
    if let Some(path) = &settings.ca_file {
        let pem = std::fs::read(path).with_context(|| format!("cannot read CA file {path}"))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("no PEM certificate in CA file {path}"))?
        {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder.build().context("cannot set up the HTTP client")?;
    let mut request = client
        .post(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )
        .body(body);
    request = match &settings.auth {
        Auth::None => request,
        Auth::Basic { username, password } => request.basic_auth(username, Some(&password.0)),
        Auth::Bearer(token) => request.bearer_auth(&token.0),
    };
    // reqwest's errors name the URL, which never holds a credential.
    let response = request.send().map_err(|e| {
        if e.is_timeout() {
            anyhow::anyhow!("no response: timed out after {}s", timeout.as_secs())
        } else if e.is_connect() {
            anyhow::anyhow!("cannot connect: {}", chain(&e))
        } else {
            anyhow::anyhow!(chain(&e))
        }
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let version = response.version();
    let text = response.text().unwrap_or_default();
    let first = text.lines().next().unwrap_or_default();
    bail!(
        "{version:?} {status}: {}",
        first.chars().take(300).collect::<String>()
    )
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let s = PushSettings {
            ca_file: None,
            auth: Auth::Basic {
                username: "pusher".into(),
                password: Hidden("s3cret-pw".into()),
            },
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
        assert!(shown.contains("pusher"));
        let b = format!("{:?}", Auth::Bearer(Hidden("tok-123".into())));
        assert!(!b.contains("tok-123"), "{b}");
    }
}
