//! The HTTP side of the metrics push: reqwest's blocking client (already in the build
//! for the OTLP exporter, native TLS through the system's OpenSSL as everywhere else in
//! this program), so `https`, a private CA and authentication come from a maintained
//! client instead of a hand-written one.
//!
//! The CA file and the credentials come resolved from `config` (`Pushgateway`):
//! credentials are sent only over `https`, never appear in a log line, an error or
//! `Debug`.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::config::{PushAuth, Pushgateway};

/// POSTs `body` (text exposition format) to `url`, within `timeout` in all. A 2xx is
/// success; otherwise the error has the status and the first line of the body.
pub(crate) fn post(
    settings: &Pushgateway,
    url: &str,
    body: String,
    timeout: Duration,
) -> Result<()> {
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("booking-expire/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none());
    if let Some(file) = &settings.ca_file {
        let path = file.display();
        let pem = std::fs::read(file).with_context(|| format!("cannot read CA file {path}"))?;
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
        PushAuth::None => request,
        PushAuth::Basic { username, password } => {
            request.basic_auth(username, Some(password.expose()))
        }
        PushAuth::Bearer(token) => request.bearer_auth(token.expose()),
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
