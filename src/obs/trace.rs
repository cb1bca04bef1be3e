//! Traces over OTLP. Off unless an endpoint is configured (`config::TraceConfig`, from
//! OpenTelemetry's standard variables, each a flag: `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); then `run-once` and `relay-outbox` export
//! their spans with the OpenTelemetry SDK, over `http/protobuf` (the default) or
//! `http/json` (`grpc` is not built in and turns tracing off with a warning), with the
//! configured headers, timeout, service name (default `booking-expire`) and resource
//! attributes; `OTEL_SDK_DISABLED=true` keeps it off.
//!
//! - One trace per run, whose trace id is the run id (`RunId` 3a14e5e0-2902-… is trace
//!   3a14e5e029024c28…): a log line, a `ce_correlationid` or a `traceparent` header
//!   leads straight to the trace.
//! - Spans are batched in memory and sent by the SDK's background thread; the run ends
//!   with a flush bounded by [`FLUSH_TIMEOUT`]. An unreachable or slow backend costs at
//!   most that, is logged once as a warning, and never changes the run's outcome.
//! - The helpers here are cheap no-ops when tracing is off (the global tracer is the
//!   no-op one), so the cycle and the relay call them unconditionally.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Link, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider as _,
};
use opentelemetry::{Context, ContextGuard, KeyValue, global};
use opentelemetry_otlp::{SpanExporter as OtlpExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{IdGenerator, SdkTracerProvider, SpanData, SpanExporter};
use uuid::Uuid;

use crate::config::{Protocol, TraceConfig};

pub(crate) use opentelemetry::KeyValue as Attr;

/// The longest the run waits at its end for the last spans to be sent.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

const SCOPE: &str = "booking-expire";

/// The trace id of this run's spans, while tracing is on (for the log lines).
static TRACE_ID: OnceLock<TraceId> = OnceLock::new();

/// Tracing for one run: hold it until the run's work is done, then [`Tracing::finish`].
#[derive(Debug)]
pub(crate) struct Tracing {
    provider: Option<SdkTracerProvider>,
    /// Where the spans go (for the messages about it).
    endpoint: String,
}

/// No tracing (for the commands that export none).
pub(crate) fn init_off() -> Tracing {
    Tracing {
        provider: None,
        endpoint: String::new(),
    }
}

/// Starts tracing for run `run_id` of `command` as `cfg` says (off without an
/// endpoint). Never fails: a configuration the SDK refuses is logged and tracing stays
/// off.
pub(crate) fn init(run_id: Uuid, command: &'static str, cfg: &TraceConfig) -> Tracing {
    let off = init_off();
    if let Some(why) = &cfg.refused {
        log::warn!(Error = why.as_str(); "{why}");
    }
    let Some(endpoint) = cfg.endpoint.clone() else {
        return off;
    };
    let protocol = cfg.protocol.as_str();
    let otlp_protocol = match cfg.protocol {
        Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
        Protocol::Grpc => {
            log::warn!(Protocol = protocol;
                       "OTEL_EXPORTER_OTLP_PROTOCOL not supported (use http/protobuf or http/json); tracing is off");
            return off;
        }
    };
    let headers: HashMap<String, String> = cfg.headers.iter().cloned().collect();
    let mut builder = OtlpExporter::builder()
        .with_http()
        .with_endpoint(endpoint.clone())
        .with_protocol(otlp_protocol)
        .with_headers(headers);
    if let Some(timeout) = cfg.timeout {
        builder = builder.with_timeout(timeout);
    }
    let exporter = match builder.build() {
        Ok(exporter) => exporter,
        Err(e) => {
            log::warn!(Endpoint = endpoint.as_str(), Error:% = e;
                       "cannot set up the OTLP trace exporter for {endpoint}: {e}; tracing is off");
            return off;
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Logged {
            inner: exporter,
            warned: AtomicBool::new(false),
            endpoint: endpoint.clone(),
        })
        .with_id_generator(RunTrace(TraceId::from_bytes(*run_id.as_bytes())))
        .with_resource(resource(command, cfg))
        .build();
    global::set_tracer_provider(provider.clone());
    let _ = TRACE_ID.set(TraceId::from_bytes(*run_id.as_bytes()));
    log::info!(Endpoint = endpoint.as_str(), Protocol = protocol; "tracing on");
    Tracing {
        provider: Some(provider),
        endpoint,
    }
}

/// The resource: `service.name` as given (its flag, or among the resource attributes),
/// else `booking-expire`; the resource attributes; the version and the command besides.
fn resource(command: &'static str, cfg: &TraceConfig) -> Resource {
    let attributes = cfg
        .resource_attributes
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    Resource::builder()
        .with_attributes(attributes)
        .with_service_name(cfg.service_name.clone().unwrap_or_else(|| SCOPE.to_owned()))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_attribute(KeyValue::new("process.command", command))
        .build()
}

impl Tracing {
    /// Sends what is left, waiting at most [`FLUSH_TIMEOUT`]; a failure is logged.
    pub(crate) fn finish(self) {
        let Some(provider) = self.provider else {
            return;
        };
        if let Err(e) = provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            let endpoint = self.endpoint.as_str();
            log::warn!(Endpoint = endpoint, Error:% = e, FlushTimeoutMs = FLUSH_TIMEOUT.as_millis() as u64;
                       "traces not flushed before exit to {endpoint} within {}ms ({e}); the run's \
                        outcome is unchanged", FLUSH_TIMEOUT.as_millis());
        }
    }
}

/// Every trace of the run gets the run id as its trace id: a run is one trace.
#[derive(Debug)]
struct RunTrace(TraceId);

impl IdGenerator for RunTrace {
    fn new_trace_id(&self) -> TraceId {
        self.0
    }

    fn new_span_id(&self) -> SpanId {
        loop {
            let id = Uuid::new_v4().as_u64_pair().0;
            if id != 0 {
                return SpanId::from(id);
            }
        }
    }
}

/// The OTLP exporter, saying once (as a warning) when an export fails.
#[derive(Debug)]
struct Logged {
    inner: OtlpExporter,
    warned: AtomicBool,
    endpoint: String,
}

impl SpanExporter for Logged {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            let endpoint = self.endpoint.as_str();
            log::warn!(Spans = spans, Endpoint = endpoint, Error:% = e;
                       "trace export failed for {endpoint}: {e}; the run's outcome is unchanged");
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

fn tracer() -> global::BoxedTracer {
    global::tracer_provider().tracer(SCOPE)
}

/// A span that is the current one until dropped (then it ends). Spans nest: one
/// started while another is current is its child.
pub(crate) struct Scope {
    cx: Context,
    _guard: ContextGuard,
}

/// Starts an internal span, current until the returned scope drops.
pub(crate) fn span(name: &'static str, attributes: Vec<KeyValue>) -> Scope {
    span_of_kind(name, SpanKind::Internal, attributes)
}

/// Starts a span of `kind`, current until the returned scope drops.
pub(crate) fn span_of_kind(name: &'static str, kind: SpanKind, attributes: Vec<KeyValue>) -> Scope {
    let span = tracer()
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(&tracer(), &Context::current());
    let cx = Context::current_with_span(span);
    Scope {
        _guard: cx.clone().attach(),
        cx,
    }
}

impl Scope {
    pub(crate) fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        self.cx.span().set_attributes(attributes);
    }

    /// Marks the span failed with `error` (its full chain), as an `exception` event
    /// and the span's status.
    pub(crate) fn fail(&self, error: &anyhow::Error) {
        let message = format!("{error:#}");
        let span = self.cx.span();
        span.add_event(
            "exception",
            vec![
                KeyValue::new("exception.type", "error"),
                KeyValue::new("exception.message", message.clone()),
            ],
        );
        span.set_status(Status::error(message));
    }

    /// Sets `Outcome` (and the error, if any) from a result.
    pub(crate) fn outcome<T>(&self, result: &anyhow::Result<T>) {
        match result {
            Ok(_) => self.set([KeyValue::new("Outcome", "success")]),
            Err(e) => {
                self.set([KeyValue::new("Outcome", "failure")]);
                self.fail(e);
            }
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// Adds an event to the current span.
pub(crate) fn event(name: impl Into<Cow<'static, str>>, attributes: Vec<KeyValue>) {
    Context::current().span().add_event(name, attributes);
}

/// Records a finished child span of the current span, from `start` to now: for work
/// whose timing is known only afterwards (a message between send and acknowledgement).
pub(crate) fn record_child(
    name: String,
    kind: SpanKind,
    start: SystemTime,
    attributes: Vec<KeyValue>,
    links: Vec<SpanContext>,
    error: Option<&str>,
) {
    let tracer = tracer();
    let mut span = tracer
        .span_builder(name)
        .with_kind(kind)
        .with_start_time(start)
        .with_attributes(attributes)
        .with_links(links.into_iter().map(Link::with_context).collect())
        .start_with_context(&tracer, &Context::current());
    if let Some(error) = error {
        use opentelemetry::trace::Span as _;
        span.set_status(Status::error(error.to_owned()));
    }
    drop(span);
}

/// The current span, to be made current on another thread ([`Carried::enter`]), so
/// what that thread records nests under it.
pub(crate) struct Carried(Context);

pub(crate) fn carry() -> Carried {
    Carried(Context::current())
}

impl Carried {
    /// Makes the carried span current on this thread until the guard drops.
    pub(crate) fn enter(self) -> ContextGuard {
        self.0.attach()
    }
}

/// The W3C `traceparent` of the current span, when tracing is on and one is current.
pub(crate) fn current_traceparent() -> Option<String> {
    let cx = Context::current();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The span context a `traceparent` header names (version 00), if it is well formed.
pub(crate) fn parse_traceparent(header: &str) -> Option<SpanContext> {
    let mut parts = header.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// For log lines while tracing is on: the trace id, and the current span's id if any.
pub(crate) fn log_ids() -> Option<(String, Option<String>)> {
    let trace_id = TRACE_ID.get()?;
    let cx = Context::current();
    let sc = cx.span().span_context().clone();
    let span_id = sc.is_valid().then(|| sc.span_id().to_string());
    Some((trace_id.to_string(), span_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip() {
        let tp = "00-3a14e5e029024c28913ceafb1fd44556-970c0a843405d1b2-01";
        let sc = parse_traceparent(tp).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "3a14e5e029024c28913ceafb1fd44556"
        );
        assert_eq!(sc.span_id().to_string(), "970c0a843405d1b2");
        assert!(sc.is_sampled());
        for bad in [
            "",
            "01-3a14e5e029024c28913ceafb1fd44556-970c0a843405d1b2-01",
            "00-00000000000000000000000000000000-970c0a843405d1b2-01",
            "00-3a14e5e029024c28913ceafb1fd44556-0000000000000000-01",
            "00-3a14e5e029024c28913ceafb1fd4455-970c0a843405d1b2-01",
            "00-3a14e5e029024c28913ceafb1fd44556-970c0a843405d1b2",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn without_tracing_nothing_is_current() {
        let scope = span("test", vec![KeyValue::new("Phase", "Reserve")]);
        scope.set([KeyValue::new("Outcome", "success")]);
        event("e", vec![]);
        assert_eq!(current_traceparent(), None);
    }

    #[test]
    fn the_run_id_is_the_trace_id() {
        let run = Uuid::parse_str("3a14e5e0-2902-4c28-913c-eafb1fd44556").unwrap();
        let ids = RunTrace(TraceId::from_bytes(*run.as_bytes()));
        assert_eq!(ids.new_trace_id().to_string(), run.simple().to_string());
        assert_ne!(ids.new_span_id(), ids.new_span_id());
    }
}
