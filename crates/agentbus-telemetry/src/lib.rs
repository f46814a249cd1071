//! OpenTelemetry traces and metrics of every AgentBus process (`docs/observability.md`).
//!
//! [`Settings`] are the standard `OTEL_*` variables (the gateway reads the same ones through its
//! settings table); [`Telemetry::start`] builds a tracer and a meter provider exporting OTLP over
//! HTTP/protobuf when an endpoint is set, and nothing at all otherwise: no exporter, no thread, no
//! connection. Spans are batched on the SDK's own thread, off any request path; [`Telemetry::shutdown`]
//! flushes them.
//!
//! Crates above this one see [`Tracer`] and [`Span`], which are empty and free when telemetry is
//! off, and parent spans on an envelope's W3C `traceparent` ([`Parent`]).

use std::borrow::Cow;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};

pub use opentelemetry::KeyValue;
/// The metric instruments, for a process that exports its counters ([`Telemetry::meter`]).
pub use opentelemetry::metrics as instruments;
pub use opentelemetry::metrics::Meter;
pub use opentelemetry::trace::SpanKind;

pub mod semconv;

/// The environment variables read, in the order the documentation lists them.
pub const VARIABLES: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
];

/// The only OTLP protocol built in.
pub const PROTOCOL: &str = "http/protobuf";

/// How long an export may take before it is given up (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a shutdown waits for the last export: a command's exit is not held longer by an
/// unreachable collector.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A value that cannot be used: what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The variable, as `OTEL_…`.
    pub variable: &'static str,
    /// What is wrong.
    pub cause: String,
    /// What to write instead.
    pub fix: String,
}

fn invalid(variable: &'static str, cause: impl Into<String>, fix: impl Into<String>) -> Invalid {
    Invalid {
        variable,
        cause: cause.into(),
        fix: fix.into(),
    }
}

/// The telemetry settings of one process, read from the standard variables.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Settings {
    /// The OTLP base URL (`/v1/traces` and `/v1/metrics` are appended); empty: telemetry is off.
    pub endpoint: String,
    /// The service name; empty: the process's own (`agentbus-gateway`, `agentbus-sidecar`, …).
    pub service_name: String,
    /// Resource attributes, `key=value` pairs (values percent-decoded).
    pub resource_attributes: Vec<(String, String)>,
    /// Which traces are kept.
    pub sampler: SamplerSetting,
    /// `OTEL_SDK_DISABLED=true`: off whatever else is set.
    pub sdk_disabled: bool,
    /// Whether spans carry a message's subject (`agentbus.message.subject`); off by default, since
    /// a subject is the sender's text.
    pub subject: bool,
}

/// `OTEL_TRACES_SAMPLER` with its argument.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum SamplerSetting {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio` with a ratio.
    Ratio(f64),
    /// `parentbased_always_on` (the default): a sampled parent's decision is kept.
    #[default]
    ParentAlwaysOn,
    /// `parentbased_always_off`.
    ParentAlwaysOff,
    /// `parentbased_traceidratio` with a ratio for roots.
    ParentRatio(f64),
}

impl SamplerSetting {
    /// The variable's name for it.
    pub fn name(&self) -> &'static str {
        match self {
            SamplerSetting::AlwaysOn => "always_on",
            SamplerSetting::AlwaysOff => "always_off",
            SamplerSetting::Ratio(_) => "traceidratio",
            SamplerSetting::ParentAlwaysOn => "parentbased_always_on",
            SamplerSetting::ParentAlwaysOff => "parentbased_always_off",
            SamplerSetting::ParentRatio(_) => "parentbased_traceidratio",
        }
    }

    /// Its argument as `OTEL_TRACES_SAMPLER_ARG` writes it; empty when it takes none.
    pub fn arg(&self) -> String {
        match self {
            SamplerSetting::Ratio(r) | SamplerSetting::ParentRatio(r) => r.to_string(),
            _ => String::new(),
        }
    }

    fn sampler(&self) -> Sampler {
        match *self {
            SamplerSetting::AlwaysOn => Sampler::AlwaysOn,
            SamplerSetting::AlwaysOff => Sampler::AlwaysOff,
            SamplerSetting::Ratio(r) => Sampler::TraceIdRatioBased(r),
            SamplerSetting::ParentAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            SamplerSetting::ParentAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            SamplerSetting::ParentRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: an `http://` or `https://` URL, or empty for none.
pub fn parse_endpoint(s: &str) -> Result<String, Invalid> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(String::new());
    }
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
            Ok(s.trim_end_matches('/').to_owned())
        }
        _ => Err(invalid(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "not an http:// or https:// URL",
            "write the collector's OTLP/HTTP base URL, such as http://127.0.0.1:4318",
        )),
    }
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL`: only `http/protobuf` (empty means it too).
pub fn parse_protocol(s: &str) -> Result<&'static str, Invalid> {
    match s.trim() {
        "" | PROTOCOL => Ok(PROTOCOL),
        "grpc" | "http/json" => Err(invalid(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            format!("{:?} is not built in", s.trim()),
            "write http/protobuf and point the endpoint at the collector's OTLP/HTTP port (4318)",
        )),
        _ => Err(invalid(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "not an OTLP protocol",
            "write http/protobuf",
        )),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs, comma-separated, values percent-encoded.
pub fn parse_resource_attributes(s: &str) -> Result<Vec<(String, String)>, Invalid> {
    let fix = "write key=value pairs, comma-separated, such as deployment.environment.name=prod,service.namespace=agents";
    let mut out = Vec::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(invalid(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("{pair:?} is not key=value"),
                fix,
            ));
        };
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(invalid(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("{k:?} is not an attribute key"),
                fix,
            ));
        }
        let v = percent_decode(v.trim()).ok_or_else(|| {
            invalid(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("the value of {k} is not percent-encoded UTF-8"),
                fix,
            )
        })?;
        out.push((k.to_owned(), v));
    }
    Ok(out)
}

/// The pairs written back as `OTEL_RESOURCE_ATTRIBUTES` would give them.
pub fn show_resource_attributes(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join(",")
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG` (a ratio from 0 to 1; 1 when absent).
pub fn parse_sampler(name: &str, arg: &str) -> Result<SamplerSetting, Invalid> {
    let ratio = || -> Result<f64, Invalid> {
        if arg.trim().is_empty() {
            return Ok(1.0);
        }
        match arg.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
            _ => Err(invalid(
                "OTEL_TRACES_SAMPLER_ARG",
                "not a ratio from 0 to 1",
                "write a number such as 0.01 (one trace in a hundred) or 1",
            )),
        }
    };
    Ok(match name.trim() {
        "" | "parentbased_always_on" => SamplerSetting::ParentAlwaysOn,
        "always_on" => SamplerSetting::AlwaysOn,
        "always_off" => SamplerSetting::AlwaysOff,
        "traceidratio" => SamplerSetting::Ratio(ratio()?),
        "parentbased_always_off" => SamplerSetting::ParentAlwaysOff,
        "parentbased_traceidratio" => SamplerSetting::ParentRatio(ratio()?),
        other => {
            return Err(invalid(
                "OTEL_TRACES_SAMPLER",
                format!("{other:?} is not a sampler built in"),
                "write always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
            ));
        }
    })
}

/// `OTEL_SDK_DISABLED`: `true` or `false`, in any case; empty is false.
pub fn parse_disabled(s: &str) -> Result<bool, Invalid> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "false" => Ok(false),
        "true" => Ok(true),
        _ => Err(invalid(
            "OTEL_SDK_DISABLED",
            "not true or false",
            "write true or false",
        )),
    }
}

impl Settings {
    /// The settings the variables give (`get` reads one, as `std::env::var(..).ok()` does);
    /// `AGENTBUS_OTEL_SUBJECT=true` adds subjects. Every bad value is one [`Invalid`].
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, Vec<Invalid>> {
        let var = |k: &str| get(k).unwrap_or_default();
        let mut errors = Vec::new();
        let mut s = Settings::default();
        match parse_endpoint(&var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            Ok(e) => s.endpoint = e,
            Err(e) => errors.push(e),
        }
        if let Err(e) = parse_protocol(&var("OTEL_EXPORTER_OTLP_PROTOCOL")) {
            errors.push(e);
        }
        s.service_name = var("OTEL_SERVICE_NAME").trim().to_owned();
        match parse_resource_attributes(&var("OTEL_RESOURCE_ATTRIBUTES")) {
            Ok(a) => s.resource_attributes = a,
            Err(e) => errors.push(e),
        }
        match parse_sampler(&var("OTEL_TRACES_SAMPLER"), &var("OTEL_TRACES_SAMPLER_ARG")) {
            Ok(x) => s.sampler = x,
            Err(e) => errors.push(e),
        }
        match parse_disabled(&var("OTEL_SDK_DISABLED")) {
            Ok(d) => s.sdk_disabled = d,
            Err(e) => errors.push(e),
        }
        s.subject = var("AGENTBUS_OTEL_SUBJECT").trim() == "true";
        if errors.is_empty() {
            Ok(s)
        } else {
            Err(errors)
        }
    }

    /// Whether these settings export anything: an endpoint is set and the SDK is not disabled.
    pub fn is_on(&self) -> bool {
        !self.sdk_disabled && !self.endpoint.is_empty()
    }
}

/// Why the exporters could not be built.
#[derive(Debug, thiserror::Error)]
#[error("the OTLP exporter could not be built: {0}")]
pub struct StartError(String);

/// One process's telemetry: its providers when on, nothing when off.
pub struct Telemetry {
    tracer: Tracer,
    traces: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Telemetry that records and exports nothing.
    pub fn off() -> Telemetry {
        Telemetry {
            tracer: Tracer::off(),
            traces: None,
            meters: None,
        }
    }

    /// The providers `settings` ask for, named `service` unless they name one; when they are off
    /// ([`Settings::is_on`]) nothing is built and nothing connects.
    pub fn start(settings: &Settings, service: &str) -> Result<Telemetry, StartError> {
        if !settings.is_on() {
            return Ok(Telemetry::off());
        }
        // reqwest is built without a default TLS provider in this workspace (see Cargo.toml);
        // one already installed by the process is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let name = if settings.service_name.is_empty() {
            service.to_owned()
        } else {
            settings.service_name.clone()
        };
        let resource = Resource::builder_empty()
            .with_service_name(name)
            .with_attributes(
                settings
                    .resource_attributes
                    .iter()
                    .filter(|(k, _)| k != "service.name")
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", settings.endpoint))
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(Default::default())
            .build()
            .map_err(|e| StartError(e.to_string()))?;
        let traces = SdkTracerProvider::builder()
            .with_batch_exporter(spans)
            .with_sampler(settings.sampler.sampler())
            .with_resource(resource.clone())
            .build();
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/metrics", settings.endpoint))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| StartError(e.to_string()))?;
        let meters = SdkMeterProvider::builder()
            .with_periodic_exporter(metrics)
            .with_resource(resource)
            .build();
        let scope = InstrumentationScope::builder("agentbus")
            .with_version(env!("CARGO_PKG_VERSION"))
            .with_schema_url(semconv::SCHEMA_URL)
            .build();
        Ok(Telemetry {
            tracer: Tracer {
                inner: Some(traces.tracer_with_scope(scope)),
                subject: settings.subject,
            },
            traces: Some(traces),
            meters: Some(meters),
        })
    }

    /// Whether anything is recorded.
    pub fn is_on(&self) -> bool {
        self.traces.is_some()
    }

    /// The tracer spans are started from.
    pub fn tracer(&self) -> Tracer {
        self.tracer.clone()
    }

    /// The meter instruments are made from, when on.
    pub fn meter(&self) -> Option<Meter> {
        use opentelemetry::metrics::MeterProvider as _;
        self.meters.as_ref().map(|m| m.meter("agentbus"))
    }

    /// Exports what is pending and stops the exporters' threads. Blocking: call it off an async
    /// runtime's worker (or at the end of `main`).
    pub fn shutdown(&self) {
        if let Some(t) = &self.traces {
            let _ = t.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
        if let Some(m) = &self.meters {
            let _ = m.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}

/// The telemetry of a process that is one agent (`agentbus work`, the sidecar, `agentbus mcp`),
/// from this process's `OTEL_*` variables, named `service` unless `OTEL_SERVICE_NAME` says; its
/// tracer becomes the [`global`] one. A bad variable is one line per value.
pub fn start_process(service: &str) -> Result<Telemetry, String> {
    let settings = Settings::from_env(|k| std::env::var(k).ok()).map_err(|errors| {
        errors
            .iter()
            .map(|e| format!("{}: {}; fix: {}", e.variable, e.cause, e.fix))
            .collect::<Vec<_>>()
            .join("\n")
    })?;
    let t = Telemetry::start(&settings, service).map_err(|e| e.to_string())?;
    set_global(t.tracer());
    Ok(t)
}

static GLOBAL: OnceLock<Tracer> = OnceLock::new();

/// Makes `tracer` the one [`global`] answers, for the processes that are one agent (sidecar,
/// worker, MCP server); the first call wins.
pub fn set_global(tracer: Tracer) {
    let _ = GLOBAL.set(tracer);
}

/// The process's tracer, off until [`set_global`].
pub fn global() -> Tracer {
    GLOBAL.get().cloned().unwrap_or_else(Tracer::off)
}

/// What a new span is a child of.
pub enum Parent<'a> {
    /// Nothing: a new trace.
    Root,
    /// A W3C `traceparent` (an envelope's); a malformed one starts a new trace.
    Traceparent(&'a str),
    /// A span of this process.
    Span(&'a Span),
}

/// Starts spans; empty (and free) when telemetry is off.
#[derive(Clone)]
pub struct Tracer {
    inner: Option<SdkTracer>,
    subject: bool,
}

impl Tracer {
    /// A tracer that records nothing.
    pub fn off() -> Tracer {
        Tracer {
            inner: None,
            subject: false,
        }
    }

    /// Whether spans are recorded.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether spans may carry a message's subject.
    pub fn with_subject(&self) -> bool {
        self.subject
    }

    /// Starts a span named `name`, child of `parent`.
    pub fn start(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Parent<'_>,
        attributes: Vec<KeyValue>,
    ) -> Span {
        self.start_at(name, kind, parent, attributes, None)
    }

    /// As [`Tracer::start`], with a start time of its own (something that happened earlier).
    pub fn start_at(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        parent: Parent<'_>,
        attributes: Vec<KeyValue>,
        at: Option<SystemTime>,
    ) -> Span {
        let Some(tracer) = &self.inner else {
            return Span { inner: None };
        };
        let cx = match parent {
            Parent::Root => Context::new(),
            Parent::Traceparent(t) => match parse_traceparent(t) {
                Some(sc) => Context::new().with_remote_span_context(sc),
                None => Context::new(),
            },
            Parent::Span(s) => match &s.inner {
                Some(span) => {
                    let sc = span.span_context();
                    Context::new().with_remote_span_context(SpanContext::new(
                        sc.trace_id(),
                        sc.span_id(),
                        sc.trace_flags(),
                        false,
                        sc.trace_state().clone(),
                    ))
                }
                None => Context::new(),
            },
        };
        let mut builder = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes);
        if let Some(at) = at {
            builder = builder.with_start_time(at);
        }
        Span {
            inner: Some(tracer.build_with_context(builder, &cx)),
        }
    }
}

/// The span context a W3C `traceparent` names (version 00), or `None`.
pub fn parse_traceparent(t: &str) -> Option<SpanContext> {
    let mut parts = t.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(trace, span, TraceFlags::new(flags), true, TraceState::NONE);
    sc.is_valid().then_some(sc)
}

/// One span; ends when dropped. Every method does nothing when telemetry is off.
pub struct Span {
    inner: Option<opentelemetry_sdk::trace::Span>,
}

impl Span {
    /// A span that records nothing.
    pub fn none() -> Span {
        Span { inner: None }
    }

    /// Whether this span is recorded (on, and sampled).
    pub fn is_recording(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_recording())
    }

    /// Adds an event now.
    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        if let Some(s) = &mut self.inner {
            s.add_event(name, attributes);
        }
    }

    /// Adds an event that happened at `at`.
    pub fn event_at(&mut self, name: &'static str, at: SystemTime, attributes: Vec<KeyValue>) {
        if let Some(s) = &mut self.inner {
            s.add_event_with_timestamp(name, at, attributes);
        }
    }

    /// Sets an attribute.
    pub fn set(&mut self, attribute: KeyValue) {
        if let Some(s) = &mut self.inner {
            s.set_attribute(attribute);
        }
    }

    /// Marks the span failed with an `AB-` code (`error.type`) and the catalogue's message.
    pub fn fail(&mut self, code: &str, message: &str) {
        if let Some(s) = &mut self.inner {
            s.set_attribute(KeyValue::new(semconv::ERROR_TYPE, code.to_owned()));
            s.set_status(Status::error(format!("{code}: {message}")));
        }
    }

    /// The `traceparent` naming this span, for an envelope sent from inside it; `None` when off.
    pub fn traceparent(&self) -> Option<String> {
        let sc = self.inner.as_ref()?.span_context();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    }

    /// Ends the span now (dropping it does too).
    pub fn end(mut self) {
        if let Some(s) = &mut self.inner {
            s.end();
        }
    }

    /// Ends the span at `at`.
    pub fn end_at(mut self, at: SystemTime) {
        if let Some(s) = &mut self.inner {
            s.end_with_timestamp(at);
        }
    }
}

#[cfg(test)]
mod tests;
