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
//! file, basic authentication or a bearer token, as `config` resolved them.

use std::time::Duration;

use anyhow::Result;
use log::{info, warn};

use crate::clock::{Monotonic, SystemMonotonic};
pub(crate) use crate::config::{PushStep, Pushgateway};
use crate::obs::push_client;

/// The `job` of the grouping key, the same for both steps.
pub(crate) const JOB: &str = "crm_booking_expiration";

/// How long a push may take in all: name lookup, connect, send, response.
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The push of a resolved Pushgateway (`config` parses its URL and credentials).
impl Pushgateway {
    /// The URL, for logs (it never holds a credential).
    pub(crate) fn url(&self) -> String {
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
    pub(crate) fn path(&self, step: PushStep) -> String {
        format!("{}/metrics/job/{JOB}/step/{}", self.prefix, step.as_str())
    }

    /// Pushes and logs the outcome; never fails (a failed push never changes a run's
    /// outcome).
    pub(crate) fn push_logged(&self, step: PushStep, body: &str) {
        let started = SystemMonotonic.now();
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
    pub(crate) fn push(&self, step: PushStep, body: &str) -> Result<()> {
        let scheme = if self.https { "https" } else { "http" };
        let url = format!("{scheme}://{}{}", self.authority(), self.path(step));
        push_client::post(self, &url, body.to_owned(), PUSH_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_and_the_groups_path_keep_the_prefix_and_the_brackets() {
        let tls = Pushgateway::parse("https://pg/gateway").unwrap();
        assert_eq!(tls.url(), "https://pg:443/gateway");
        let p = Pushgateway::parse("http://[::1]:9091/a").unwrap();
        assert_eq!(p.url(), "http://[::1]:9091/a");
        assert_eq!(
            p.path(PushStep::RunOnce),
            "/a/metrics/job/crm_booking_expiration/step/run-once"
        );
        let root = Pushgateway::parse("http://h:1").unwrap();
        assert_eq!(
            root.path(PushStep::RelayOutbox),
            "/metrics/job/crm_booking_expiration/step/relay-outbox"
        );
    }
}
