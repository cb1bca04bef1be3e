//! Metrics push. A CronJob has no scrape endpoint, so when `--pushgateway-url` /
//! `PUSHGATEWAY_URL` is set, `run-once` and `relay-outbox` push the gauges of their run
//! to a Prometheus Pushgateway when they end, success or failure.
//!
//! - `POST /metrics/job/crm_booking_expiration/step/<step>`: a fixed grouping key, never
//!   the pod, so each run replaces the last run's values instead of leaving one stale
//!   group per pod behind. POST (not PUT) replaces only the metric names it sends, so
//!   `crm_booking_expiration_last_success_timestamp_seconds`, sent only on success,
//!   keeps the last success across failed runs: the "no successful cycle" alert reads it.
//! - Gauges, since each value describes the last run (so the names carry no
//!   `_total`): items per phase, skipped, poison, errors (1 = the run failed), duration;
//!   and, read after the run in a short read-only transaction, under the very names and
//!   help texts `backlog --format prometheus` uses: `run-once` the overdue backlog and
//!   the quarantined poison, `relay-outbox` the outbox lag, each from the tables its
//!   least-privilege role may read (the worker may insert into the outbox, not read it).
//! - A failed push (or an unreadable database) is logged and never changes the run's
//!   outcome or exit code.
//!
//! The POST goes through `obs::push_client` (reqwest, blocking): `http` or `https`, a CA
//! file, basic authentication or a bearer token from the environment.

use crate::clock::Clock;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::{DateTime, TimeDelta, Utc};
use log::{info, warn};

use crate::cli::MetricsArgs;
use crate::config::DbConfig;
use crate::cycle::CycleResult;
use crate::domain::Phase;
use crate::exit::{Failure, fail};
use crate::obs::push_client::{self, Auth, PushSettings};
use crate::relay::RelayResult;
use crate::store::{self, OutboxLag, Overdue};

/// The `job` of the grouping key, the same for both steps.
pub const JOB: &str = "crm_booking_expiration";

/// How long a push may take in all: name lookup, connect, send, response.
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Limits for the short read of the backlog gauges after a run.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

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

/// A metric family: its name and help text. Families pushed by both steps use one
/// constant, so the Pushgateway sees one help text per name.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
}

const fn family(name: &'static str, help: &'static str) -> Family {
    Family { name, help }
}

// Of a `run-once` run.
pub const ITEMS: Family = family(
    "crm_booking_expiration_items",
    "Bookings the last run-once expired, per phase.",
);
pub const SKIP_LOCKED: Family = family(
    "crm_booking_expiration_skip_locked",
    "Overdue bookings the last run-once skipped because another session held them locked.",
);
pub const POISON_ISOLATED: Family = family(
    "crm_booking_expiration_poison_isolated",
    "Bookings the last run-once isolated as poison (refused by the guard or the database).",
);
pub const CYCLE_DURATION: Family = family(
    "crm_booking_expiration_cycle_duration_seconds",
    "How long the last run-once took, in seconds: a histogram of one observation per run \
     (sum_over_time of the buckets gives the distribution across runs).",
);
/// Upper bounds of the cycle duration buckets (a cycle takes ~50 ms; its deadline is
/// under a minute).
pub const CYCLE_DURATION_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

// Of a `relay-outbox` run.
pub const RELAY_PUBLISHED: Family = family(
    "crm_booking_expiration_relay_published",
    "Outbox rows the last relay-outbox published to Kafka.",
);
pub const RELAY_FAILED: Family = family(
    "crm_booking_expiration_relay_failed",
    "Outbox rows the last relay-outbox marked failed (they can never be delivered).",
);
pub const RELAY_PURGED: Family = family(
    "crm_booking_expiration_relay_purged",
    "Published outbox rows the last relay-outbox deleted after the retention.",
);
pub const RELAY_SKIPPED: Family = family(
    "crm_booking_expiration_relay_skipped",
    "1 when the last relay-outbox did nothing because another relay held the outbox lock.",
);
pub const RELAY_PUBLICATIONS: Family = family(
    "crm_booking_expiration_relay_publications",
    "Outbox rows the last relay-outbox published, per topic and Phase of the event.",
);
pub const RELAY_ACK_AGE: Family = family(
    "crm_booking_expiration_relay_ack_age_seconds",
    "Seconds from an event's write (the cycle's commit) to Kafka's acknowledgement, \
     for each event the last relay-outbox published.",
);
/// Upper bounds of the ack age buckets, around the delivery objective of one minute.
pub const RELAY_ACK_AGE_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
pub const RELAY_DURATION: Family = family(
    "crm_booking_expiration_relay_duration_seconds",
    "How long the last relay-outbox took, in seconds.",
);

// Of either step (told apart by the `step` label).
pub const ERRORS: Family = family(
    "crm_booking_expiration_errors",
    "1 when the last run failed (exited non-zero), else 0.",
);
pub const LAST_SUCCESS: Family = family(
    "crm_booking_expiration_last_success_timestamp_seconds",
    "Unix time at which the last successful run ended (pushed only on success).",
);

// Read from the database after the run: the names and help texts of
// `backlog --format prometheus`.
pub const BACKLOG: Family = family(
    "crm_booking_expiration_backlog",
    "Active bookings whose deadline has passed, per phase (poison rows included).",
);
pub const BACKLOG_OLDEST_AGE: Family = family(
    "crm_booking_expiration_backlog_oldest_age_seconds",
    "Seconds since the oldest overdue active booking's deadline, per phase (0 when none).",
);
pub const POISON: Family = family(
    "crm_booking_expiration_poison",
    "Active bookings isolated as poison: the cycle could not expire them and retries with back-off.",
);
pub const OUTBOX_PENDING: Family = family(
    "crm_booking_expiration_outbox_pending",
    "Outbox rows not yet published to Kafka.",
);
pub const OUTBOX_OLDEST_AGE: Family = family(
    "crm_booking_expiration_outbox_oldest_pending_age_seconds",
    "Seconds since the oldest pending outbox row was written (0 when none).",
);
pub const OUTBOX_FAILED: Family = family(
    "crm_booking_expiration_outbox_failed",
    "Outbox rows the relay gave up on (e.g. too large to send).",
);

/// The text exposition format (version 0.0.4), gauges only.
#[derive(Debug, Default)]
pub struct Exposition(String);

impl Exposition {
    fn family(&mut self, f: Family) {
        self.typed(f, "gauge");
    }

    fn typed(&mut self, f: Family, kind: &str) {
        let _ = write!(
            self.0,
            "# HELP {} {}\n# TYPE {} {kind}\n",
            f.name, f.help, f.name
        );
    }

    /// A histogram of `observations` with the upper bounds `buckets` (+Inf added).
    pub fn histogram(&mut self, f: Family, buckets: &[f64], observations: &[f64]) {
        self.typed(f, "histogram");
        for le in buckets {
            let n = observations.iter().filter(|o| **o <= *le).count();
            let _ = writeln!(self.0, "{}_bucket{{le=\"{le}\"}} {n}", f.name);
        }
        let _ = writeln!(
            self.0,
            "{}_bucket{{le=\"+Inf\"}} {}",
            f.name,
            observations.len()
        );
        let _ = writeln!(
            self.0,
            "{}_sum {}",
            f.name,
            observations.iter().sum::<f64>()
        );
        let _ = writeln!(self.0, "{}_count {}", f.name, observations.len());
    }

    /// A gauge with one sample per label set.
    pub fn labelled(&mut self, f: Family, samples: &[(Vec<(&str, &str)>, f64)]) {
        self.family(f);
        for (labels, value) in samples {
            let labels: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(self.0, "{}{{{}}} {value}", f.name, labels.join(","));
        }
    }

    pub fn gauge(&mut self, f: Family, value: f64) {
        self.family(f);
        let _ = writeln!(self.0, "{} {value}", f.name);
    }

    pub fn per_phase(&mut self, f: Family, value: impl Fn(Phase) -> f64) {
        self.family(f);
        for phase in Phase::ALL {
            let _ = writeln!(self.0, "{}{{phase=\"{phase}\"}} {}", f.name, value(phase));
        }
    }

    pub fn into_text(self) -> String {
        self.0
    }
}

/// A label value in the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What the database said after a run: the `backlog` report's numbers, those of the
/// bookings after `run-once`, those of the outbox after `relay-outbox`.
#[derive(Debug, Clone)]
pub struct Backlog {
    pub as_of: DateTime<Utc>,
    pub overdue: Option<Vec<(Phase, Overdue)>>,
    pub poison: Option<u64>,
    pub outbox: Option<OutboxLag>,
}

fn seconds(d: TimeDelta) -> f64 {
    d.num_microseconds()
        .map_or(d.num_seconds() as f64, |us| us as f64 / 1e6)
        .max(0.0)
}

fn unix_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_micros() as f64 / 1e6
}

fn backlog_gauges(out: &mut Exposition, b: &Backlog) {
    let age = |oldest: Option<DateTime<Utc>>| oldest.map_or(0.0, |at| seconds(b.as_of - at));
    if let Some(overdue) = &b.overdue {
        let of = |phase: Phase| {
            overdue
                .iter()
                .find(|(p, _)| *p == phase)
                .map(|(_, o)| *o)
                .unwrap_or(Overdue {
                    count: 0,
                    oldest_deadline: None,
                })
        };
        out.per_phase(BACKLOG, |p| of(p).count as f64);
        out.per_phase(BACKLOG_OLDEST_AGE, |p| age(of(p).oldest_deadline));
    }
    if let Some(poison) = b.poison {
        out.gauge(POISON, poison as f64);
    }
    if let Some(outbox) = &b.outbox {
        out.gauge(OUTBOX_PENDING, outbox.pending as f64);
        out.gauge(OUTBOX_OLDEST_AGE, age(outbox.oldest_pending_at));
        out.gauge(OUTBOX_FAILED, outbox.failed as f64);
    }
}

/// The gauges of a `run-once` run that ended at `now`.
pub fn cycle_metrics(
    result: &CycleResult,
    failed: bool,
    duration: Duration,
    backlog: Option<&Backlog>,
    now: DateTime<Utc>,
) -> String {
    let mut out = Exposition::default();
    out.per_phase(ITEMS, |phase| match phase {
        Phase::Reserve => result.reserve_expired_count as f64,
        Phase::Booking => result.booking_expired_count as f64,
    });
    out.gauge(SKIP_LOCKED, result.skipped_locked_count as f64);
    out.gauge(POISON_ISOLATED, result.poison_count as f64);
    out.gauge(ERRORS, if failed { 1.0 } else { 0.0 });
    out.histogram(
        CYCLE_DURATION,
        CYCLE_DURATION_BUCKETS,
        &[duration.as_secs_f64()],
    );
    if !failed {
        out.gauge(LAST_SUCCESS, unix_seconds(now));
    }
    if let Some(b) = backlog {
        backlog_gauges(&mut out, b);
    }
    out.into_text()
}

/// The gauges of a `relay-outbox` run that ended at `now`. A relay that found another
/// one holding the lock did not relay anything: it is not a success to report, or a
/// relay hung while holding the lock would look healthy.
pub fn relay_metrics(
    result: &RelayResult,
    failed: bool,
    duration: Duration,
    backlog: Option<&Backlog>,
    now: DateTime<Utc>,
) -> String {
    let mut out = Exposition::default();
    out.gauge(RELAY_PUBLISHED, result.published as f64);
    out.gauge(RELAY_FAILED, result.failed as f64);
    out.gauge(RELAY_PURGED, result.purged as f64);
    out.gauge(RELAY_SKIPPED, if result.skipped { 1.0 } else { 0.0 });
    out.gauge(ERRORS, if failed { 1.0 } else { 0.0 });
    out.gauge(RELAY_DURATION, duration.as_secs_f64());
    let publications: Vec<(Vec<(&str, &str)>, f64)> = result
        .publications
        .iter()
        .map(|((topic, phase), n)| {
            (
                vec![("topic", topic.as_str()), ("phase", phase.as_str())],
                *n as f64,
            )
        })
        .collect();
    if !publications.is_empty() {
        out.labelled(RELAY_PUBLICATIONS, &publications);
    }
    out.histogram(
        RELAY_ACK_AGE,
        RELAY_ACK_AGE_BUCKETS,
        &result.ack_age_seconds,
    );
    if !failed && !result.skipped {
        out.gauge(LAST_SUCCESS, unix_seconds(now));
    }
    if let Some(b) = backlog {
        backlog_gauges(&mut out, b);
    }
    out.into_text()
}

/// Pushes the gauges of a `run-once` run; logs, never fails. `db` is the cycle's
/// database when its configuration was valid.
pub fn push_cycle(
    gateway: &Pushgateway,
    db: Option<&DbConfig>,
    result: &CycleResult,
    outcome: &Result<()>,
    duration: Duration,
) {
    let backlog = db.and_then(|db| read_after_run(db, Step::RunOnce));
    let body = cycle_metrics(
        result,
        outcome.is_err(),
        duration,
        backlog.as_ref(),
        Utc::now(),
    );
    gateway.push_logged(Step::RunOnce, &body);
}

/// Pushes the gauges of a `relay-outbox` run; logs, never fails.
pub fn push_relay(
    gateway: &Pushgateway,
    db: Option<&DbConfig>,
    result: &RelayResult,
    outcome: &Result<()>,
    duration: Duration,
) {
    let backlog = db.and_then(|db| read_after_run(db, Step::RelayOutbox));
    let body = relay_metrics(
        result,
        outcome.is_err(),
        duration,
        backlog.as_ref(),
        Utc::now(),
    );
    gateway.push_logged(Step::RelayOutbox, &body);
}

/// Reads the step's backlog gauges in one short read-only transaction. Skipped after a
/// signal: the pod is going away, and its grace period is for the push.
fn read_after_run(db: &DbConfig, step: Step) -> Option<Backlog> {
    if crate::shutdown::requested().is_some() {
        return None;
    }
    let read = || -> Result<Backlog> {
        let mut quick = db.clone();
        let connect = quick
            .pg
            .get_connect_timeout()
            .map_or(READ_TIMEOUT, |t| (*t).min(READ_TIMEOUT));
        quick.pg.connect_timeout(connect);
        quick.statement_timeout = quick.statement_timeout.min(READ_TIMEOUT);
        quick.lock_timeout = quick.lock_timeout.min(READ_TIMEOUT / 2);
        let mut session = store::connect(&quick)?;
        let mut tx = store::begin_read_only(&mut session.client)
            .context("cannot begin a read-only transaction")?;
        // The cycle's clock, as `backlog` reads it.
        let as_of = crate::clock::SystemClock.now();
        let mut backlog = Backlog {
            as_of,
            overdue: None,
            poison: None,
            outbox: None,
        };
        match step {
            Step::RunOnce => {
                let mut overdue = Vec::new();
                for phase in Phase::ALL {
                    overdue.push((phase, store::overdue(&mut tx, phase, as_of)?));
                }
                backlog.overdue = Some(overdue);
                backlog.poison = Some(store::poison_count(&mut tx)?);
            }
            Step::RelayOutbox => backlog.outbox = Some(store::outbox_lag(&mut tx)?),
        }
        tx.commit()
            .context("cannot end the read-only transaction")?;
        Ok(backlog)
    };
    match read() {
        Ok(backlog) => Some(backlog),
        Err(e) => {
            warn!(error:% = format!("{e:#}");
                  "cannot read the backlog for the metrics push; pushing the run's own gauges only");
            None
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
    /// The configured Pushgateway, if any (an empty value means none). A malformed URL
    /// is a configuration error (78), refused before the run starts.
    pub fn from_args(args: &MetricsArgs) -> Result<Option<Self>> {
        match args.pushgateway_url.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(url) => {
                let mut gateway = Self::parse(url).map_err(|e| {
                    fail(
                        Failure::Config,
                        format!("invalid --pushgateway-url / PUSHGATEWAY_URL: {e}"),
                    )
                })?;
                gateway.settings = PushSettings::from_env(gateway.https)
                    .map_err(|e| fail(Failure::Config, format!("metrics push: {e:#}")))?;
                Ok(Some(gateway))
            }
        }
    }

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

    fn push_logged(&self, step: Step, body: &str) {
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

    #[test]
    fn an_empty_url_means_no_push_and_a_bad_one_is_a_config_error() {
        let none = MetricsArgs {
            pushgateway_url: Some("  ".into()),
        };
        assert_eq!(Pushgateway::from_args(&none).unwrap(), None);
        let bad = MetricsArgs {
            pushgateway_url: Some("ftp://pg".into()),
        };
        let e = Pushgateway::from_args(&bad).unwrap_err();
        assert_eq!(crate::exit::exit_code(&e), std::process::ExitCode::from(78));
        assert!(
            format!("{e:#}").starts_with("invalid --pushgateway-url / PUSHGATEWAY_URL: scheme")
        );
    }

    fn result() -> CycleResult {
        CycleResult {
            reserve_expired_count: 6,
            booking_expired_count: 2,
            skipped_locked_count: 1,
            poison_count: 3,
            ..CycleResult::default()
        }
    }

    #[test]
    fn a_failed_cycle_pushes_errors_and_no_last_success() {
        let now = DateTime::from_timestamp(1_800_000_000, 250_000_000).unwrap();
        let ok = cycle_metrics(&result(), false, Duration::from_millis(1500), None, now);
        assert!(ok.contains("\ncrm_booking_expiration_items{phase=\"Reserve\"} 6\n"));
        assert!(ok.contains("\ncrm_booking_expiration_items{phase=\"Booking\"} 2\n"));
        assert!(ok.contains("\ncrm_booking_expiration_errors 0\n"));
        assert!(ok.contains(
            "\ncrm_booking_expiration_cycle_duration_seconds_bucket{le=\"1\"} 0\n\
             crm_booking_expiration_cycle_duration_seconds_bucket{le=\"2.5\"} 1\n"
        ));
        assert!(
            ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_bucket{le=\"+Inf\"} 1\n")
        );
        assert!(ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_sum 1.5\n"));
        assert!(ok.contains("\ncrm_booking_expiration_cycle_duration_seconds_count 1\n"));
        assert!(
            ok.contains("\ncrm_booking_expiration_last_success_timestamp_seconds 1800000000.25\n")
        );
        let failed = cycle_metrics(&result(), true, Duration::from_millis(1500), None, now);
        assert!(failed.contains("\ncrm_booking_expiration_errors 1\n"));
        assert!(!failed.contains("last_success"));
        // Each family once, every sample line after its HELP and TYPE.
        for text in [ok, failed] {
            let mut seen = std::collections::HashSet::new();
            let mut current = "";
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("# HELP ") {
                    current = rest.split(' ').next().unwrap();
                    assert!(seen.insert(current), "{current} twice");
                } else if !line.starts_with("# TYPE ") {
                    assert!(line.starts_with(current), "{line} outside its family");
                }
            }
        }
    }

    #[test]
    fn a_relay_that_found_the_lock_taken_reports_no_success() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let skipped = RelayResult {
            skipped: true,
            ..RelayResult::default()
        };
        let text = relay_metrics(&skipped, false, Duration::from_millis(5), None, now);
        assert!(text.contains("\ncrm_booking_expiration_relay_skipped 1\n"));
        assert!(!text.contains("last_success"));
        let done = RelayResult {
            published: 7,
            ..RelayResult::default()
        };
        let text = relay_metrics(&done, false, Duration::from_millis(5), None, now);
        assert!(text.contains("\ncrm_booking_expiration_relay_published 7\n"));
        assert!(
            text.contains("\ncrm_booking_expiration_last_success_timestamp_seconds 1800000000\n")
        );
    }
}
