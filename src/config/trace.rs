//! Where a run's traces go, from OpenTelemetry's standard variables (each a flag of
//! `run-once` and `relay-outbox`). Tracing never changes a run's outcome, so nothing
//! here refuses a run: `obs::trace` logs what it cannot use and stays off.

use std::time::Duration;

use crate::cli::{Command, OtlpProtocol, TraceArgs};

/// The OTLP protocol of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    HttpProtobuf,
    HttpJson,
    /// Not built in: tracing stays off, with a warning.
    Grpc,
}

impl Protocol {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
            Protocol::Grpc => "grpc",
        }
    }
}

/// The resolved tracing settings of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceConfig {
    /// The URL the spans are posted to: the traces endpoint as given, or the base
    /// endpoint with `/v1/traces`; `None` when tracing is off (no endpoint, or
    /// `OTEL_SDK_DISABLED=true`).
    pub endpoint: Option<String>,
    pub protocol: Protocol,
    /// Headers sent with every export, values as given (percent-encoded).
    pub headers: Vec<(String, String)>,
    /// `None`: the exporter's default.
    pub timeout: Option<Duration>,
    /// `service.name`, when given (by its flag, or among the resource attributes).
    pub service_name: Option<String>,
    pub resource_attributes: Vec<(String, String)>,
    /// Why tracing is off though an endpoint was given (it is not a URL tracing can
    /// use): logged as a warning, the run goes on.
    pub refused: Option<String>,
}

/// `key=value,…` as OpenTelemetry writes lists: entries without `=` are left out, keys
/// and values trimmed.
fn pairs(list: Option<&str>) -> Vec<(String, String)> {
    list.unwrap_or_default()
        .split_terminator(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

impl TraceConfig {
    /// The tracing of the command typed: `run-once` and `relay-outbox` trace, with the
    /// command's name for the resource; the others never do.
    pub(crate) fn of(command: &Command) -> Option<(TraceConfig, &'static str)> {
        match command {
            Command::RunOnce(args) => Some((TraceConfig::from_args(&args.trace), "run-once")),
            Command::RelayOutbox(args) => {
                Some((TraceConfig::from_args(&args.trace), "relay-outbox"))
            }
            _ => None,
        }
    }

    pub(crate) fn from_args(args: &TraceArgs) -> Self {
        let disabled = args.otel_sdk_disabled == Some(true);
        let traces = given(&args.otlp_traces_endpoint).map(|url| {
            let checked = check_endpoint(
                &url,
                "--otlp-traces-endpoint / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            );
            checked.map(|()| url)
        });
        let endpoint = traces.or_else(|| {
            given(&args.otlp_endpoint).map(|base| {
                check_endpoint(&base, "--otlp-endpoint / OTEL_EXPORTER_OTLP_ENDPOINT")
                    .map(|()| format!("{}/v1/traces", base.trim_end_matches('/')))
            })
        });
        let (endpoint, refused) = match endpoint {
            Some(Ok(url)) => (Some(url), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        let protocol = match args.otlp_traces_protocol.or(args.otlp_protocol) {
            None | Some(OtlpProtocol::HttpProtobuf) => Protocol::HttpProtobuf,
            Some(OtlpProtocol::HttpJson) => Protocol::HttpJson,
            Some(OtlpProtocol::Grpc) => Protocol::Grpc,
        };
        let resource_attributes = pairs(args.otel_resource_attributes.as_deref());
        let service_name = given(&args.otel_service_name).or_else(|| {
            resource_attributes
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        });
        TraceConfig {
            endpoint: endpoint.filter(|_| !disabled),
            protocol,
            headers: pairs(args.otlp_headers.as_deref()),
            timeout: args.otlp_timeout.map(Duration::from_millis),
            service_name,
            resource_attributes,
            refused: refused.filter(|_| !disabled).map(|why| why.0),
        }
    }
}

/// An OTLP/HTTP endpoint must be an `http` or `https` URL with a host (the `url`
/// crate's reading); otherwise says which input, which value (its start) and what is
/// allowed.
fn check_endpoint(url: &str, input: &str) -> Result<(), super::invalid::Invalid> {
    let usable = url::Url::parse(url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if usable {
        return Ok(());
    }
    let shown: String = url.chars().take(80).collect();
    let cut = if shown.len() < url.len() { "…" } else { "" };
    Err(super::invalid::Invalid(format!(
        "invalid {input} {shown:?}{cut}: expected http[s]://host[:port][/path], e.g. \
         http://otel-collector.monitoring:4318; tracing is off"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn trace_of(words: &[&str]) -> TraceConfig {
        let argv = ["booking-expire", "run-once"].iter().chain(words).copied();
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        TraceConfig::of(&cli.command).unwrap().0
    }

    #[test]
    fn the_traces_endpoint_wins_and_the_base_one_gets_v1_traces() {
        let base = trace_of(&["--otlp-endpoint", "http://c:4318/"]);
        assert_eq!(base.endpoint.as_deref(), Some("http://c:4318/v1/traces"));
        assert_eq!(base.protocol, Protocol::HttpProtobuf);
        let both = trace_of(&[
            "--otlp-endpoint",
            "http://c:4318",
            "--otlp-traces-endpoint",
            "http://t:4318/x",
            "--otlp-protocol",
            "grpc",
            "--otlp-traces-protocol",
            "http/json",
        ]);
        assert_eq!(both.endpoint.as_deref(), Some("http://t:4318/x"));
        assert_eq!(both.protocol, Protocol::HttpJson);
        let off = trace_of(&[
            "--otlp-endpoint",
            "http://c:4318",
            "--otel-sdk-disabled",
            "TRUE",
        ]);
        assert_eq!(off.endpoint, None);
        assert_eq!(off.refused, None);
    }

    #[test]
    fn an_endpoint_that_is_no_http_url_turns_tracing_off_saying_why() {
        for bad in ["c:4318", "ftp://c", "1; DROP TABLE crm.bookings", "http://"] {
            let cfg = trace_of(&["--otlp-endpoint", bad]);
            assert_eq!(cfg.endpoint, None, "{bad}");
            let why = cfg.refused.unwrap();
            assert!(
                why.starts_with("invalid --otlp-endpoint / OTEL_EXPORTER_OTLP_ENDPOINT")
                    && why.contains("expected http[s]://"),
                "{bad}: {why}"
            );
        }
        let cfg = trace_of(&["--otlp-traces-endpoint", "x"]);
        assert!(
            cfg.refused
                .unwrap()
                .contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        );
    }

    #[test]
    fn lists_are_key_value_pairs_and_a_service_name_among_them_names_the_service() {
        let cfg = trace_of(&[
            "--otlp-headers",
            "authorization=Bearer%20x, broken ,=v,k= v ",
            "--otel-resource-attributes",
            "deployment.environment=prod,service.name=crm-expiry",
            "--otlp-timeout",
            "1500",
        ]);
        assert_eq!(
            cfg.headers,
            [
                ("authorization".to_owned(), "Bearer%20x".to_owned()),
                ("k".to_owned(), "v".to_owned())
            ]
        );
        assert_eq!(cfg.service_name.as_deref(), Some("crm-expiry"));
        assert_eq!(cfg.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(cfg.endpoint, None);
    }
}
