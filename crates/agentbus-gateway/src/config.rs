//! The gateway's settings: one table ([`SETTINGS`]) from which the flags, the `AGENTBUS_*`
//! environment variables, the TOML file keys, `--print-config` and `docs/settings.md` all come.
//!
//! Precedence is flag > environment > file > default ([`resolve`]). Every value is parsed and
//! checked at start; each bad one is reported on its own line with its cause and a fix. A new
//! setting is one entry of [`SETTINGS`] (and its field in [`Config`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Gateway configuration. Every field is a setting of [`SETTINGS`]; `docs/settings.md` lists
/// each with its default and the reason for it.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The data directory (database, master key, blobs).
    pub data_dir: PathBuf,
    /// The database: the SQLite file in `data_dir`, or a PostgreSQL database (`store`).
    pub store: StoreSetting,
    /// PostgreSQL connections one gateway process holds at most (`store_pool`).
    pub store_pool: usize,
    /// How long an operation waits for a free PostgreSQL connection before AB-9010 (`store_wait`).
    pub store_wait: Duration,
    /// The base URL clients reach the gateway at, for documentation links in error bodies.
    pub public_url: String,
    /// Accepted clock skew of `time`, seconds (§3.2: 300).
    pub max_skew_s: i64,
    /// The `(source, id)` replay window, seconds (§3.2: 24 h).
    pub replay_window_s: i64,
    /// The idempotency key window, seconds (§8: 7 days).
    pub idempotency_window_s: i64,
    /// Default message expiry, seconds (§2.1: 24 h).
    pub default_expiry_s: i64,
    /// How long a delivery waits for its ack before redelivery, seconds.
    pub visibility_timeout_s: i64,
    /// Deliveries before a message is dead-lettered.
    pub max_attempts: u32,
    /// Unacknowledged messages an inbox may hold (§13.6, AB-4040).
    pub inbox_max_depth: u64,
    /// Publishes per second per agent (§13.6, AB-5001).
    pub rate_per_agent: f64,
    /// Burst size of the per-agent rate limit.
    pub rate_burst: f64,
    /// Longest long-poll wait, seconds.
    pub max_wait_s: u64,
    /// Key lifetime when registration gives none, days (§3.3: 365).
    pub key_lifetime_days: i64,
    /// The oldest sidecar version accepted (§11.4).
    pub min_sidecar_version: String,
    /// How often the reaper runs, milliseconds; 0 disables it (tests drive it by hand).
    pub reaper_interval_ms: u64,
    /// The inline upload cap, bytes (`AGENTBUS_BLOB_INLINE_MAX`, §9: 8 MiB).
    pub blob_inline_max: u64,
    /// The plan's largest blob, bytes (AB-3040 above it).
    pub plan_blob_bytes: u64,
    /// A tenant's total unexpired blob bytes (AB-5005 above it).
    pub tenant_blob_quota: u64,
    /// Blob lifetime, seconds (`AGENTBUS_BLOB_TTL`, §9: 30 days).
    pub blob_ttl_s: i64,
    /// The S3-compatible store's endpoint URL; empty for none (blob content stays in `data`).
    pub s3_endpoint: String,
    /// Its bucket.
    pub s3_bucket: String,
    /// Its region, as its signatures name it.
    pub s3_region: String,
    /// Its access key id.
    pub s3_access_key_id: String,
    /// The file holding its secret access key (read at start; the secret is never in `Config`).
    pub s3_secret_access_key_file: String,
    /// Path-style addressing (`endpoint/bucket/key`) rather than virtual-hosted (`bucket.endpoint`).
    pub s3_path_style: bool,
    /// The prefix of every object key the gateway writes.
    pub s3_prefix: String,
    /// How parties download from the S3 store: a pre-signed GET, or through the gateway.
    pub s3_download: S3Download,
    /// Longest wait for a request's headers, from its first byte (or a new connection's accept).
    pub header_timeout: Duration,
    /// Longest wait for a request body to arrive in full, from its headers.
    pub body_timeout: Duration,
    /// Longest a kept-alive connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// Concurrent connections (WebSockets included); one more is refused with AB-9002.
    pub max_connections: usize,
    /// WebSockets one agent may hold open at once (AB-5002 above it).
    pub ws_per_agent: usize,
    /// Bytes of deliveries a WebSocket may have queued in the gateway before they are written.
    pub ws_send_buffer: usize,
    /// How long queued deliveries may wait for a WebSocket reader before it is closed as slow.
    pub ws_send_timeout: Duration,
    /// The largest agent card body (`POST /v1/agents`, `PATCH /v1/agents/{id}`), bytes.
    pub card_max_bytes: usize,
    /// How long a SIGTERM or SIGINT waits for in-flight requests before the gateway exits anyway.
    pub shutdown_grace: Duration,
    /// Whether anyone may read a `public` card (any tenant's credential, or none); off, `public`
    /// behaves as `tenant` (§10).
    pub public_discovery: bool,
    /// Whether publishes write the search index (`GET /v1/search`); off, new messages are
    /// never found.
    pub search_index: bool,
    /// What is logged: `level` or `target=level` directives, comma-separated.
    pub log: String,
    /// How log lines are written (text on a terminal, JSON lines for a pipeline).
    pub log_format: LogFormat,
    /// The OTLP/HTTP base URL traces and metrics are exported to; empty: telemetry is off.
    pub otel_endpoint: String,
    /// The OTLP protocol (only `http/protobuf` is built in).
    pub otel_protocol: String,
    /// The `service.name` of the gateway's spans and metrics.
    pub otel_service_name: String,
    /// Further resource attributes, `key=value` pairs as `OTEL_RESOURCE_ATTRIBUTES` writes them.
    pub otel_resource_attributes: String,
    /// Which traces are kept (`OTEL_TRACES_SAMPLER`).
    pub otel_traces_sampler: String,
    /// The sampler's ratio, for the ratio samplers; empty for 1.
    pub otel_traces_sampler_arg: String,
    /// `OTEL_SDK_DISABLED`: no export whatever the endpoint.
    pub otel_sdk_disabled: bool,
    /// Whether spans carry a message's subject.
    pub otel_subject: bool,
    /// The operator's trace viewer, `{trace_id}` in it; empty: the console links no trace.
    pub trace_url: String,
    /// The black-box test clock (`--unsafe-test-clock`): time an operator can move by HTTP.
    pub unsafe_test_clock: bool,
}

impl Config {
    /// The telemetry settings these give (each value was checked when it was set).
    pub fn telemetry(&self) -> agentbus_telemetry::Settings {
        agentbus_telemetry::Settings {
            endpoint: self.otel_endpoint.clone(),
            service_name: self.otel_service_name.clone(),
            resource_attributes: agentbus_telemetry::parse_resource_attributes(
                &self.otel_resource_attributes,
            )
            .unwrap_or_default(),
            sampler: agentbus_telemetry::parse_sampler(
                &self.otel_traces_sampler,
                &self.otel_traces_sampler_arg,
            )
            .unwrap_or_default(),
            sdk_disabled: self.otel_sdk_disabled,
            subject: self.otel_subject,
        }
    }

    /// The defaults of [`SETTINGS`], with data under `data_dir`, listening on `listen`.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Config {
        let mut c = Config {
            listen,
            data_dir,
            store: StoreSetting::Sqlite,
            store_pool: 0,
            store_wait: Duration::ZERO,
            public_url: format!("http://{listen}"),
            max_skew_s: 0,
            replay_window_s: 0,
            idempotency_window_s: 0,
            default_expiry_s: 0,
            visibility_timeout_s: 0,
            max_attempts: 0,
            inbox_max_depth: 0,
            rate_per_agent: 0.0,
            rate_burst: 0.0,
            max_wait_s: 0,
            key_lifetime_days: 0,
            min_sidecar_version: String::new(),
            reaper_interval_ms: 0,
            blob_inline_max: 0,
            plan_blob_bytes: 0,
            tenant_blob_quota: 0,
            blob_ttl_s: 0,
            s3_endpoint: String::new(),
            s3_bucket: String::new(),
            s3_region: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key_file: String::new(),
            s3_path_style: false,
            s3_prefix: String::new(),
            s3_download: S3Download::Presigned,
            header_timeout: Duration::ZERO,
            body_timeout: Duration::ZERO,
            idle_timeout: Duration::ZERO,
            max_connections: 0,
            ws_per_agent: 0,
            ws_send_buffer: 0,
            ws_send_timeout: Duration::ZERO,
            card_max_bytes: 0,
            shutdown_grace: Duration::ZERO,
            public_discovery: false,
            search_index: false,
            log: String::new(),
            log_format: LogFormat::Auto,
            otel_endpoint: String::new(),
            otel_protocol: String::new(),
            otel_service_name: String::new(),
            otel_resource_attributes: String::new(),
            otel_traces_sampler: String::new(),
            otel_traces_sampler_arg: String::new(),
            otel_sdk_disabled: false,
            otel_subject: false,
            trace_url: String::new(),
            unsafe_test_clock: false,
        };
        // Settings whose default depends on the machine (listen, data, public_url) keep the
        // values given here; every other default comes from the table, so code and docs agree.
        for s in SETTINGS.iter().filter(|s| !s.default.is_empty()) {
            let _ = (s.field.0)(&mut c, &Raw::Text(s.default.to_owned()));
        }
        c
    }
}

/// A value as given, before it is parsed: text from a flag or the environment, or a TOML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    /// A flag's or environment variable's text, or a TOML string.
    Text(String),
    /// A TOML integer.
    Int(i64),
    /// A TOML float.
    Float(f64),
    /// A TOML boolean.
    Bool(bool),
}

impl std::fmt::Display for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Text(s) => write!(f, "{s:?}"),
            Raw::Int(i) => write!(f, "{i}"),
            Raw::Float(x) => write!(f, "{x}"),
            Raw::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Why a value was refused: what is wrong with it, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    /// What is wrong.
    pub cause: String,
    /// What to do.
    pub fix: String,
}

fn bad(cause: impl Into<String>, fix: impl Into<String>) -> Bad {
    Bad {
        cause: cause.into(),
        fix: fix.into(),
    }
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The table's default.
    Default,
    /// The `--config` file.
    File(PathBuf),
    /// An environment variable.
    Env(&'static str),
    /// A command-line flag.
    Flag(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Env(name) => write!(f, "env {name}"),
            Origin::Flag(flag) => write!(f, "flag --{flag}"),
        }
    }
}

/// One setting: its names in each source, its default, and why.
pub struct Setting {
    /// The TOML key and the name `--print-config` shows.
    pub name: &'static str,
    /// The flag, without `--` (the name with `-` for `_`).
    pub flag: &'static str,
    /// The environment variable; `None` for a setting only a flag may give.
    pub env: Option<&'static str>,
    /// The form of its value, for help texts (`DURATION`, `BYTES`, `N`, …); empty for a switch.
    pub value_name: &'static str,
    /// The default, written as a value of this setting; empty when the machine decides it.
    pub default: &'static str,
    /// The default as `docs/settings.md` describes it, when `default` is empty.
    pub default_doc: &'static str,
    /// What it sets, in a line.
    pub help: &'static str,
    /// Why the default is what it is.
    pub reason: &'static str,
    /// Parses, checks and stores a value; and shows the effective value, written so that it
    /// parses back to itself (see [`field!`]).
    field: (Apply, Show),
}

type Apply = fn(&mut Config, &Raw) -> Result<(), Bad>;
type Show = fn(&Config) -> String;

impl Setting {
    /// Whether this setting is a switch (a flag without a value).
    pub fn is_switch(&self) -> bool {
        self.value_name.is_empty()
    }

    /// The effective value in `config`, as `--print-config` shows it.
    pub fn value(&self, config: &Config) -> String {
        (self.field.1)(config)
    }

    /// The default as the documentation shows it.
    pub fn default_text(&self) -> &'static str {
        if self.default.is_empty() {
            self.default_doc
        } else {
            self.default
        }
    }
}

/// Where the gateway listens when `listen` is not set.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    7700,
));

/// Where the gateway keeps its data (`store`, `AGENTBUS_STORE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSetting {
    /// The embedded SQLite file `agentbus.db` in the data directory: one gateway process.
    Sqlite,
    /// A PostgreSQL database (`postgres://user:password@host:port/db`) several replicas share.
    Postgres(String),
}

/// Shown with the password, if the URL has one, replaced by `***`: `--print-config` and logs
/// never carry it.
impl std::fmt::Display for StoreSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSetting::Sqlite => f.write_str("sqlite"),
            StoreSetting::Postgres(url) => f.write_str(&redact_password(url)),
        }
    }
}

/// `url` with the password of its user part, if any, as `***`.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

fn store_setting(r: &Raw) -> Result<StoreSetting, Bad> {
    let s = text(r)?;
    let s = s.trim();
    if s.is_empty() || s == "sqlite" {
        return Ok(StoreSetting::Sqlite);
    }
    agentbus_store::PgStore::check_url(s).map_err(|cause| {
        bad(
            cause,
            "write sqlite, or a URL such as postgres://agentbus:PASSWORD@db.example.com:5432/agentbus",
        )
    })?;
    Ok(StoreSetting::Postgres(s.to_owned()))
}

/// Where parties of a blob in the S3 store download it from (`AGENTBUS_S3_DOWNLOAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Download {
    /// A pre-signed GET of the sealed object, opened by the client with the blob's content key.
    Presigned,
    /// `GET /v1/blobs/{id}/content`: the gateway reads, opens and streams it.
    Gateway,
}

impl std::fmt::Display for S3Download {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            S3Download::Presigned => "presigned",
            S3Download::Gateway => "gateway",
        })
    }
}

fn s3_download(r: &Raw) -> Result<S3Download, Bad> {
    match text(r)?.trim() {
        "presigned" => Ok(S3Download::Presigned),
        "gateway" => Ok(S3Download::Gateway),
        _ => Err(bad(
            "not a download mode",
            "write presigned (clients fetch from the store) or gateway (through the gateway)",
        )),
    }
}

/// How the gateway writes its log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Text when stderr is a terminal, JSON lines otherwise.
    Auto,
    /// One readable line per event.
    Text,
    /// One JSON object per line, for a log pipeline.
    Json,
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Auto => "auto",
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

fn log_format(r: &Raw) -> Result<LogFormat, Bad> {
    match text(r)?.trim() {
        "auto" => Ok(LogFormat::Auto),
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(bad(
            "not a log format",
            "write auto (text on a terminal, JSON otherwise), text or json",
        )),
    }
}

/// The log levels a directive may name.
const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Log directives: `level` or `target=level`, comma-separated (the subset of the `RUST_LOG`
/// syntax the gateway documents, so a value that passes here is one the logger takes).
fn log_filter(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?.trim().to_owned();
    let fix = "write a level (error, warn, info, debug) or target=level directives, comma-separated, such as info,agentbus_gateway=debug";
    let target_ok = |t: &str| {
        !t.is_empty()
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '-')
    };
    for d in s.split(',') {
        let (target, level) = match d.trim().split_once('=') {
            Some((t, l)) => (Some(t.trim()), l.trim()),
            None => (None, d.trim()),
        };
        let level = level.to_ascii_lowercase();
        if !LOG_LEVELS.contains(&level.as_str()) || !target.is_none_or(target_ok) {
            let cause = if s.contains(',') {
                format!("{:?} is not a log directive", d.trim())
            } else {
                "not a log directive".to_owned()
            };
            return Err(bad(cause, fix));
        }
    }
    Ok(s)
}

fn telemetry_bad(e: agentbus_telemetry::Invalid) -> Bad {
    bad(e.cause, e.fix)
}

fn trace_url(r: &Raw) -> Result<String, Bad> {
    let t = text(r)?;
    if t.is_empty() {
        return Ok(t);
    }
    agentbus_protocol::tracelink::check(&t).map_err(|e| {
        bad(
            e.to_string(),
            "give an http(s) URL with {trace_id} in it, such as https://jaeger.example/trace/{trace_id}",
        )
    })?;
    Ok(t)
}

fn otel_endpoint(r: &Raw) -> Result<String, Bad> {
    agentbus_telemetry::parse_endpoint(&text(r)?).map_err(telemetry_bad)
}

fn otel_protocol(r: &Raw) -> Result<String, Bad> {
    agentbus_telemetry::parse_protocol(&text(r)?)
        .map(str::to_owned)
        .map_err(telemetry_bad)
}

fn otel_resource_attributes(r: &Raw) -> Result<String, Bad> {
    let pairs = agentbus_telemetry::parse_resource_attributes(&text(r)?).map_err(telemetry_bad)?;
    Ok(agentbus_telemetry::show_resource_attributes(&pairs))
}

fn otel_sampler(r: &Raw) -> Result<String, Bad> {
    agentbus_telemetry::parse_sampler(&text(r)?, "")
        .map(|s| s.name().to_owned())
        .map_err(telemetry_bad)
}

fn otel_sampler_arg(r: &Raw) -> Result<String, Bad> {
    let s = match r {
        Raw::Int(i) => i.to_string(),
        Raw::Float(x) => x.to_string(),
        _ => text(r)?,
    };
    agentbus_telemetry::parse_sampler("traceidratio", &s).map_err(telemetry_bad)?;
    Ok(s.trim().to_owned())
}

/// A service name: text without control characters, not empty.
fn service_name(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?.trim().to_owned();
    if s.is_empty() || s.chars().any(char::is_control) {
        return Err(bad(
            "not a service name",
            "write a name such as agentbus-gateway-eu",
        ));
    }
    Ok(s)
}

/// `true` or `false` in any case, as the OpenTelemetry variables write them.
fn otel_switch(r: &Raw) -> Result<bool, Bad> {
    match r {
        Raw::Bool(b) => Ok(*b),
        _ => agentbus_telemetry::parse_disabled(&text(r)?).map_err(telemetry_bad),
    }
}

/// An endpoint URL, or empty for none.
fn endpoint(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?;
    if s.trim().is_empty() {
        return Ok(String::new());
    }
    url(r).map_err(|_| {
        bad(
            "not an http:// or https:// URL",
            "write the store's endpoint, such as https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:9000",
        )
    })
}

/// A key prefix: empty, or segments of letters, digits and `-_.!*'()` each ending with `/`.
fn key_prefix(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?;
    let fix = "write segments such as agentbus/blobs/ (letters, digits, - _ . ! * ' ( ), each ending with /), or nothing";
    if s.is_empty() {
        return Ok(s);
    }
    let ok = s.ends_with('/')
        && s.trim_end_matches('/').split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.!*'()".contains(&b))
        });
    if ok {
        Ok(s)
    } else {
        Err(bad("not a key prefix", fix))
    }
}

/// Text with no spaces or control characters (a bucket, a region, a key id), or empty.
fn word(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?;
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad(
            "contains spaces or control characters",
            "write the name alone, without quotes or spaces",
        ));
    }
    Ok(s)
}

// Value forms shared by the table's entries.

fn int_of(r: &Raw) -> Option<i64> {
    match r {
        Raw::Int(i) => Some(*i),
        Raw::Text(s) => s.trim().replace('_', "").parse().ok(),
        _ => None,
    }
}

/// Splits a value into its number and its unit (`"90s"` is 90 and `s`); a TOML integer has none.
fn number_and_unit<'a>(r: &'a Raw, what: &str, fix: &str) -> Result<(u64, &'a str), Bad> {
    let text = match r {
        Raw::Int(i) if *i >= 0 => return Ok((*i as u64, "")),
        Raw::Text(s) => s.trim(),
        _ => return Err(bad(format!("not {what}"), fix)),
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n = digits
        .replace('_', "")
        .parse()
        .map_err(|_| bad(format!("not {what}"), fix))?;
    Ok((n, unit.trim()))
}

/// Parses a duration: `500ms`, `90s`, `5m`, `24h`, `7d`; a bare number is seconds.
pub fn parse_duration(r: &Raw) -> Result<Duration, Bad> {
    let fix = "write a duration such as 500ms, 90s, 5m, 24h or 7d; a bare number is seconds";
    let (n, unit) = number_and_unit(r, "a duration", fix)?;
    let ms = match unit {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(bad("unknown unit", fix)),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| bad("too long", fix))
}

/// Writes a duration in the largest unit it is a whole number of, at least two of (`24h`, not
/// `1d` or `86400s`; `90s`, not `1m30s`).
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= 2 * size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses a byte count: a number of bytes, or one with `KiB`, `MiB` or `GiB`.
pub fn parse_bytes(r: &Raw) -> Result<u64, Bad> {
    let fix = "write a number of bytes, or one with KiB, MiB or GiB, such as 64KiB or 8MiB";
    let (n, unit) = number_and_unit(r, "a byte count", fix)?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(bad("unknown unit", fix)),
    };
    n.checked_mul(scale).ok_or_else(|| bad("too large", fix))
}

/// Writes a byte count in its largest exact binary unit.
pub fn show_bytes(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n > 0 && n.is_multiple_of(size) {
            return format!("{}{unit}", n / size);
        }
    }
    n.to_string()
}

fn count(r: &Raw, min: u64, max: u64) -> Result<u64, Bad> {
    let n = int_of(r).ok_or_else(|| bad("not a whole number", "write digits only"))?;
    if n < min as i64 || n as u64 > max {
        return Err(bad(
            "out of range",
            format!("choose a number from {min} to {max}"),
        ));
    }
    Ok(n as u64)
}

fn duration_in(r: &Raw, min: Duration, max: Duration) -> Result<Duration, Bad> {
    let d = parse_duration(r)?;
    if d < min || d > max {
        return Err(bad(
            "out of range",
            format!(
                "choose a duration from {} to {}",
                show_duration(min),
                show_duration(max)
            ),
        ));
    }
    Ok(d)
}

/// A duration kept in whole seconds.
fn seconds(r: &Raw, min: Duration, max: Duration) -> Result<i64, Bad> {
    let d = duration_in(r, min, max)?;
    if d.subsec_millis() != 0 {
        return Err(bad(
            "not a whole number of seconds",
            "round it to seconds (such as 2s)",
        ));
    }
    Ok(d.as_secs() as i64)
}

fn bytes_in(r: &Raw, min: u64, max: u64) -> Result<u64, Bad> {
    let n = parse_bytes(r)?;
    if n < min || n > max {
        return Err(bad(
            "out of range",
            format!("choose from {} to {}", show_bytes(min), show_bytes(max)),
        ));
    }
    Ok(n)
}

fn rate(r: &Raw, min: f64) -> Result<f64, Bad> {
    let x = match r {
        Raw::Int(i) => Some(*i as f64),
        Raw::Float(x) => Some(*x),
        Raw::Text(s) => s.trim().replace('_', "").parse::<f64>().ok(),
        Raw::Bool(_) => None,
    };
    match x {
        Some(x) if x.is_finite() && x >= min => Ok(x),
        Some(_) => Err(bad(
            "out of range",
            format!("choose a number of at least {min}"),
        )),
        None => Err(bad("not a number", "write a number such as 100 or 0.5")),
    }
}

fn text(r: &Raw) -> Result<String, Bad> {
    match r {
        Raw::Text(s) => Ok(s.clone()),
        _ => Err(bad("not text", "write it as a quoted string")),
    }
}

fn switch(r: &Raw) -> Result<bool, Bad> {
    match r {
        Raw::Bool(b) => Ok(*b),
        Raw::Text(s) if s == "true" => Ok(true),
        Raw::Text(s) if s == "false" => Ok(false),
        _ => Err(bad("not true or false", "write true or false")),
    }
}

fn address(r: &Raw) -> Result<SocketAddr, Bad> {
    text(r)?.trim().parse().map_err(|_| {
        bad(
            "not an IP address and port",
            "write an address such as 127.0.0.1:7700, 0.0.0.0:7700 or [::1]:7700",
        )
    })
}

fn url(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?;
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains(char::is_whitespace) => {
            Ok(s.trim_end_matches('/').to_owned())
        }
        _ => Err(bad(
            "not an http:// or https:// URL",
            "write the URL clients use, such as https://agentbus.example.com",
        )),
    }
}

fn version(r: &Raw) -> Result<String, Bad> {
    let s = text(r)?;
    let parts: Vec<&str> = s.split('.').collect();
    if parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        Ok(s)
    } else {
        Err(bad(
            "not a version MAJOR.MINOR.PATCH",
            "write a version such as 0.1.0",
        ))
    }
}

fn path(r: &Raw) -> Result<PathBuf, Bad> {
    let s = text(r)?;
    if s.trim().is_empty() {
        return Err(bad("the path is empty", "write a directory path"));
    }
    Ok(PathBuf::from(s))
}

fn days(r: &Raw) -> Result<i64, Bad> {
    let d = duration_in(r, DAY, LONGEST)?;
    if !d.as_millis().is_multiple_of(DAY.as_millis()) {
        return Err(bad(
            "not a whole number of days",
            "write it in days, such as 90d",
        ));
    }
    Ok((d.as_secs() / 86_400) as i64)
}

/// The parse-and-store and the show function of a setting, for a field of [`Config`] of one
/// value form: one arm per form, so a setting's entry names only its field and bounds.
macro_rules! field {
    (secs $f:ident, $min:expr, $max:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = seconds(r, $min, $max)? as _;
                Ok(())
            },
            |c: &Config| show_duration(Duration::from_secs(c.$f as u64)),
        )
    };
    (millis $f:ident, $min:expr, $max:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = duration_in(r, $min, $max)?.as_millis() as u64;
                Ok(())
            },
            |c: &Config| show_duration(Duration::from_millis(c.$f)),
        )
    };
    (time $f:ident, $min:expr, $max:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = duration_in(r, $min, $max)?;
                Ok(())
            },
            |c: &Config| show_duration(c.$f),
        )
    };
    (days $f:ident) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = days(r)?;
                Ok(())
            },
            |c: &Config| format!("{}d", c.$f),
        )
    };
    (bytes $f:ident, $min:expr, $max:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = bytes_in(r, $min, $max)? as _;
                Ok(())
            },
            |c: &Config| show_bytes(c.$f as u64),
        )
    };
    (whole $f:ident, $min:expr, $max:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = count(r, $min, $max)? as _;
                Ok(())
            },
            |c: &Config| c.$f.to_string(),
        )
    };
    (rate $f:ident, $min:expr) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = rate(r, $min)?;
                Ok(())
            },
            |c: &Config| c.$f.to_string(),
        )
    };
    (parsed $f:ident, $parse:ident) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = $parse(r)?;
                Ok(())
            },
            |c: &Config| c.$f.to_string(),
        )
    };
    (text $f:ident, $parse:ident) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = $parse(r)?;
                Ok(())
            },
            |c: &Config| c.$f.clone(),
        )
    };
    (dir $f:ident) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = path(r)?;
                Ok(())
            },
            |c: &Config| c.$f.display().to_string(),
        )
    };
    (switch $f:ident) => {
        (
            |c: &mut Config, r: &Raw| {
                c.$f = switch(r)?;
                Ok(())
            },
            |c: &Config| c.$f.to_string(),
        )
    };
}

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);
const DAY: Duration = Duration::from_secs(86_400);
const YEAR: Duration = Duration::from_secs(10 * 365 * 86_400);
/// Ten years, the longest any window or lifetime may be: longer ones are typos, and every
/// instant the gateway computes from them must stay far inside an `i64` of milliseconds.
const LONGEST: Duration = YEAR;

/// Every setting, in the order `--print-config` and `docs/settings.md` show them.
pub static SETTINGS: &[Setting] = &[
    Setting {
        name: "listen",
        flag: "listen",
        env: Some("AGENTBUS_LISTEN"),
        value_name: "ADDR",
        default: "",
        default_doc: "`127.0.0.1:7700`",
        help: "The address to listen on (port 0 picks a free port, printed at start).",
        reason: "Loopback: exposing the gateway to a network is a decision to make, not a default.",
        field: field!(parsed listen, address),
    },
    Setting {
        name: "data",
        flag: "data",
        env: Some("AGENTBUS_DATA"),
        value_name: "DIR",
        default: "",
        default_doc: "`$XDG_DATA_HOME/agentbus/gateway`, else `~/.local/share/agentbus/gateway`",
        help: "The data directory: database, keys and blobs.",
        reason: "The XDG base directory convention for a user's application data.",
        field: field!(dir data_dir),
    },
    Setting {
        name: "store",
        flag: "store",
        env: Some("AGENTBUS_STORE"),
        value_name: "URL",
        default: "sqlite",
        default_doc: "",
        help: "The database: `sqlite` (the file `agentbus.db` in `data`) or a `postgres://` URL of a database several replicas share (docs/deploy.md). Its schema is migrated at start; a newer one is refused.",
        reason: "An embedded file needs no server and is durable and fast on one machine; PostgreSQL is for more than one gateway process.",
        field: field!(parsed store, store_setting),
    },
    Setting {
        name: "store_pool",
        flag: "store-pool",
        env: Some("AGENTBUS_STORE_POOL"),
        value_name: "N",
        default: "16",
        default_doc: "",
        help: "PostgreSQL connections this process holds at most (one more is held for replica signals).",
        reason: "Enough for the publishes two cores verify at once with room for long-polls' leases; PostgreSQL's default `max_connections` of 100 fits several replicas.",
        field: field!(whole store_pool, 1, 1000),
    },
    Setting {
        name: "store_wait",
        flag: "store-wait",
        env: Some("AGENTBUS_STORE_WAIT"),
        value_name: "DURATION",
        default: "5s",
        default_doc: "",
        help: "How long a request waits for a free PostgreSQL connection; then it is answered AB-9010 (503, retry).",
        reason: "Longer than any healthy operation queues, shorter than a client's timeout: a pool that ran dry answers rather than hangs.",
        field: field!(time store_wait, Duration::from_millis(10), Duration::from_secs(120)),
    },
    Setting {
        name: "public_url",
        flag: "public-url",
        env: Some("AGENTBUS_PUBLIC_URL"),
        value_name: "URL",
        default: "",
        default_doc: "`http://<the bound address>`",
        help: "The URL clients reach this gateway at, for links in error bodies and the printed connect command.",
        reason: "Without a proxy in front, clients reach the gateway at the address it is bound to.",
        field: field!(parsed public_url, url),
    },
    Setting {
        name: "max_skew",
        flag: "max-skew",
        env: Some("AGENTBUS_MAX_SKEW"),
        value_name: "DURATION",
        default: "5m",
        default_doc: "",
        help: "How far an envelope's `time` may be from the gateway clock (AB-3005).",
        reason: "§3.2 gives 300 s.",
        field: field!(secs max_skew_s, SECOND, DAY),
    },
    Setting {
        name: "replay_window",
        flag: "replay-window",
        env: Some("AGENTBUS_REPLAY_WINDOW"),
        value_name: "DURATION",
        default: "24h",
        default_doc: "",
        help: "How long a `(source, id)` is remembered: a repeat returns the receipt, other content is AB-3006.",
        reason: "§3.2 gives 24 h.",
        field: field!(secs replay_window_s, SECOND, LONGEST),
    },
    Setting {
        name: "idempotency_window",
        flag: "idempotency-window",
        env: Some("AGENTBUS_IDEMPOTENCY_WINDOW"),
        value_name: "DURATION",
        default: "7d",
        default_doc: "",
        help: "How long an `idempotency_key` returns the original receipt.",
        reason: "§8 gives 7 days.",
        field: field!(secs idempotency_window_s, SECOND, LONGEST),
    },
    Setting {
        name: "default_expiry",
        flag: "default-expiry",
        env: Some("AGENTBUS_DEFAULT_EXPIRY"),
        value_name: "DURATION",
        default: "24h",
        default_doc: "",
        help: "`expires_at` of a message that sets none.",
        reason: "§2.1 gives 24 h.",
        field: field!(secs default_expiry_s, SECOND, LONGEST),
    },
    Setting {
        name: "visibility_timeout",
        flag: "visibility-timeout",
        env: Some("AGENTBUS_VISIBILITY_TIMEOUT"),
        value_name: "DURATION",
        default: "60s",
        default_doc: "",
        help: "How long a delivery waits for its ack before it is delivered again.",
        reason: "Long enough for a sidecar to persist and ack a burst over a slow link; short enough that a crashed receiver's messages come back within a minute.",
        field: field!(secs visibility_timeout_s, SECOND, DAY),
    },
    Setting {
        name: "max_attempts",
        flag: "max-attempts",
        env: Some("AGENTBUS_MAX_ATTEMPTS"),
        value_name: "N",
        default: "10",
        default_doc: "",
        help: "Deliveries of a copy before it is dead-lettered (`system.undeliverable`).",
        reason: "Ten visibility timeouts ride out a receiver's restart loop of several minutes, yet a copy that crashes its receiver every time stops within about ten minutes.",
        field: field!(whole max_attempts, 1, 1000),
    },
    Setting {
        name: "inbox_max_depth",
        flag: "inbox-max-depth",
        env: Some("AGENTBUS_INBOX_MAX_DEPTH"),
        value_name: "N",
        default: "10000",
        default_doc: "",
        help: "Unacknowledged copies an inbox may hold; one more is AB-4040 (§13.6).",
        reason: "A day of an agent's traffic at several messages a minute, while one stuck receiver cannot fill the disk.",
        field: field!(whole inbox_max_depth, 1, 100_000_000),
    },
    Setting {
        name: "rate_per_agent",
        flag: "rate-per-agent",
        env: Some("AGENTBUS_RATE_PER_AGENT"),
        value_name: "N",
        default: "20000",
        default_doc: "",
        help: "Publishes per second one agent may make (token bucket; AB-5001 above it, §13.6).",
        reason: "Above what one gateway on two cores sustains (about 10,000 msg/s, docs/benchmarks.md): the limit stops a runaway agent, not normal bursts.",
        field: field!(rate rate_per_agent, 0.001),
    },
    Setting {
        name: "rate_burst",
        flag: "rate-burst",
        env: Some("AGENTBUS_RATE_BURST"),
        value_name: "N",
        default: "40000",
        default_doc: "",
        help: "The size of that bucket: publishes an idle agent may make at once.",
        reason: "Two seconds of the rate, so a batch job's burst passes.",
        field: field!(rate rate_burst, 1.0),
    },
    Setting {
        name: "max_wait",
        flag: "max-wait",
        env: Some("AGENTBUS_MAX_WAIT"),
        value_name: "DURATION",
        default: "60s",
        default_doc: "",
        help: "The longest `wait` a long-poll may ask for.",
        reason: "Below the idle timeouts of common proxies and load balancers (60 s or more), so a waiting poll is not cut by one.",
        field: field!(secs max_wait_s, Duration::ZERO, Duration::from_secs(3600)),
    },
    Setting {
        name: "key_lifetime",
        flag: "key-lifetime",
        env: Some("AGENTBUS_KEY_LIFETIME"),
        value_name: "DURATION",
        default: "365d",
        default_doc: "",
        help: "A key's lifetime when its registration gives no `expires_at` (whole days).",
        reason: "§3.3 gives 365 days.",
        field: field!(days key_lifetime_days),
    },
    Setting {
        name: "min_sidecar_version",
        flag: "min-sidecar-version",
        env: Some("AGENTBUS_MIN_SIDECAR_VERSION"),
        value_name: "VERSION",
        default: "0.1.0",
        default_doc: "",
        help: "The oldest sidecar version served; older ones get AB-6002 (§11.4).",
        reason: "Every released agentbus speaks this gateway's protocol; raise it when a release must be retired.",
        field: field!(parsed min_sidecar_version, version),
    },
    Setting {
        name: "reaper_interval",
        flag: "reaper-interval",
        env: Some("AGENTBUS_REAPER_INTERVAL"),
        value_name: "DURATION",
        default: "5s",
        default_doc: "",
        help: "How often task timers, dead letters and expiries are swept; 0s turns the sweep off.",
        reason: "The task timers' resolution (`agentbus_protocol::task::REAPER_INTERVAL_S`, 5 s): finer costs a database scan more often for nothing.",
        field: field!(millis reaper_interval_ms, Duration::ZERO, DAY),
    },
    Setting {
        name: "blob_inline_max",
        flag: "blob-inline-max",
        env: Some("AGENTBUS_BLOB_INLINE_MAX"),
        value_name: "BYTES",
        default: "8MiB",
        default_doc: "",
        help: "The largest inline blob upload (`PUT /v1/blobs/{id}/content`); more is AB-3040.",
        reason: "§9 gives 8 MiB, and names this variable.",
        field: field!(bytes blob_inline_max, 1, 1 << 40),
    },
    Setting {
        name: "plan_blob_bytes",
        flag: "plan-blob-bytes",
        env: Some("AGENTBUS_PLAN_BLOB_BYTES"),
        value_name: "BYTES",
        default: "64MiB",
        default_doc: "",
        help: "The plan's largest blob (§9 `blob_bytes`); a larger declared size is AB-3040.",
        reason: "What an object store would take; inline uploads are capped lower by `blob_inline_max`.",
        field: field!(bytes plan_blob_bytes, 1, 1 << 40),
    },
    Setting {
        name: "tenant_blob_quota",
        flag: "tenant-blob-quota",
        env: Some("AGENTBUS_TENANT_BLOB_QUOTA"),
        value_name: "BYTES",
        default: "1GiB",
        default_doc: "",
        help: "A tenant's unexpired blob bytes; more is AB-5005 (§13.6).",
        reason: "Over a hundred full-size inline blobs, while one tenant cannot fill a small disk.",
        field: field!(bytes tenant_blob_quota, 1, 1 << 50),
    },
    Setting {
        name: "blob_ttl",
        flag: "blob-ttl",
        env: Some("AGENTBUS_BLOB_TTL"),
        value_name: "DURATION",
        default: "30d",
        default_doc: "",
        help: "How long a blob lives; after it, reads are AB-4009.",
        reason: "§9 gives 30 days, and names this variable.",
        field: field!(secs blob_ttl_s, SECOND, LONGEST),
    },
    Setting {
        name: "s3_endpoint",
        flag: "s3-endpoint",
        env: Some("AGENTBUS_S3_ENDPOINT"),
        value_name: "URL",
        default: "",
        default_doc: "none (blob content in `data`)",
        help: "An S3-compatible object store for blob content (§9): uploads go to pre-signed PUTs and `POST /v1/blobs/{id}/complete`. Checked at start by writing and deleting a probe object.",
        reason: "Off: the inline store needs nothing more than the data directory; an object store is an operator's choice (replicas sharing files, attachments above the inline cap).",
        field: field!(text s3_endpoint, endpoint),
    },
    Setting {
        name: "s3_bucket",
        flag: "s3-bucket",
        env: Some("AGENTBUS_S3_BUCKET"),
        value_name: "NAME",
        default: "",
        default_doc: "none (required with `s3_endpoint`)",
        help: "The bucket blob objects are written to.",
        reason: "No bucket can be guessed; the gateway never creates one.",
        field: field!(text s3_bucket, word),
    },
    Setting {
        name: "s3_region",
        flag: "s3-region",
        env: Some("AGENTBUS_S3_REGION"),
        value_name: "REGION",
        default: "us-east-1",
        default_doc: "",
        help: "The region the store's signatures name.",
        reason: "AWS's first region, which MinIO, moto and most S3-compatible stores accept whatever their location.",
        field: field!(text s3_region, word),
    },
    Setting {
        name: "s3_access_key_id",
        flag: "s3-access-key-id",
        env: Some("AGENTBUS_S3_ACCESS_KEY_ID"),
        value_name: "ID",
        default: "",
        default_doc: "none (required with `s3_endpoint`)",
        help: "The access key id the gateway signs with.",
        reason: "A credential is the operator's; the gateway reads no ambient AWS configuration, so which one it uses is always written down.",
        field: field!(text s3_access_key_id, word),
    },
    Setting {
        name: "s3_secret_access_key_file",
        flag: "s3-secret-access-key-file",
        env: Some("AGENTBUS_S3_SECRET_ACCESS_KEY_FILE"),
        value_name: "PATH",
        default: "",
        default_doc: "none (required with `s3_endpoint`)",
        help: "A file holding the secret access key (one line; read at start, never printed).",
        reason: "A file, so the secret is in no command line, no environment a child inherits and no `--print-config` output.",
        field: field!(text s3_secret_access_key_file, text),
    },
    Setting {
        name: "s3_path_style",
        flag: "s3-path-style",
        env: Some("AGENTBUS_S3_PATH_STYLE"),
        value_name: "BOOL",
        default: "true",
        default_doc: "",
        help: "Path-style addressing (`endpoint/bucket/key`); false for virtual-hosted (`bucket.endpoint/key`).",
        reason: "MinIO, moto and other self-hosted stores serve one host name; AWS accepts both.",
        field: field!(parsed s3_path_style, switch),
    },
    Setting {
        name: "s3_prefix",
        flag: "s3-prefix",
        env: Some("AGENTBUS_S3_PREFIX"),
        value_name: "PREFIX",
        default: "agentbus/blobs/",
        default_doc: "",
        help: "The prefix of every object key; the rest is the gateway-minted blob id, never a declared name.",
        reason: "A bucket shared with other data keeps the gateway's objects under one folder a lifecycle rule or a policy can name.",
        field: field!(text s3_prefix, key_prefix),
    },
    Setting {
        name: "s3_download",
        flag: "s3-download",
        env: Some("AGENTBUS_S3_DOWNLOAD"),
        value_name: "MODE",
        default: "presigned",
        default_doc: "",
        help: "How parties download from the S3 store: `presigned` (a pre-signed GET of the sealed object, valid 15 minutes) or `gateway` (`GET /v1/blobs/{id}/content` through the gateway).",
        reason: "Pre-signed: large attachments then cost the gateway no bandwidth; `gateway` for clients that cannot reach the store.",
        field: field!(parsed s3_download, s3_download),
    },
    Setting {
        name: "header_timeout",
        flag: "header-timeout",
        env: Some("AGENTBUS_HEADER_TIMEOUT"),
        value_name: "DURATION",
        default: "10s",
        default_doc: "",
        help: "How long a request's headers may take, from their first byte or from the connection's accept; then the connection is closed.",
        reason: "Headers are a few hundred bytes: 10 s is generous on any link, and a slowloris client holds a connection no longer.",
        field: field!(time header_timeout, MS, Duration::from_secs(600)),
    },
    Setting {
        name: "body_timeout",
        flag: "body-timeout",
        env: Some("AGENTBUS_BODY_TIMEOUT"),
        value_name: "DURATION",
        default: "60s",
        default_doc: "",
        help: "How long a request body may take to arrive in full, from its headers (then AB-3031, 408, and the connection is closed), and how long a response may wait for its reader.",
        reason: "An 8 MiB upload needs 1.2 Mbit/s to finish in 60 s; a slow-body client holds a connection no longer than that.",
        field: field!(time body_timeout, MS, Duration::from_secs(3600)),
    },
    Setting {
        name: "idle_timeout",
        flag: "idle-timeout",
        env: Some("AGENTBUS_IDLE_TIMEOUT"),
        value_name: "DURATION",
        default: "75s",
        default_doc: "",
        help: "How long a kept-alive connection may wait for its next request.",
        reason: "Longer than `max_wait`, so a sidecar's next long-poll finds its connection open; nginx's default keep-alive is also 75 s.",
        field: field!(time idle_timeout, MS, Duration::from_secs(3600)),
    },
    Setting {
        name: "max_connections",
        flag: "max-connections",
        env: Some("AGENTBUS_MAX_CONNECTIONS"),
        value_name: "N",
        default: "1024",
        default_doc: "",
        help: "Concurrent connections, WebSockets included; one more gets a 503 with AB-9002 and is closed.",
        reason: "Several hundred agents, each with a sidecar's WebSocket and a few HTTP connections; each connection costs a file descriptor (the gateway raises its soft open-file limit to fit) and some 50 KiB.",
        field: field!(whole max_connections, 1, 1_000_000),
    },
    Setting {
        name: "ws_per_agent",
        flag: "ws-per-agent",
        env: Some("AGENTBUS_WS_PER_AGENT"),
        value_name: "N",
        default: "4",
        default_doc: "",
        help: "WebSockets one agent may hold open; one more is refused with AB-5002 (429).",
        reason: "One sidecar per agent, with room for a restart overlapping the old socket and for a second machine joining the agent.",
        field: field!(whole ws_per_agent, 1, 10_000),
    },
    Setting {
        name: "ws_send_buffer",
        flag: "ws-send-buffer",
        env: Some("AGENTBUS_WS_SEND_BUFFER"),
        value_name: "BYTES",
        default: "256KiB",
        default_doc: "",
        help: "Delivery bytes a WebSocket may have waiting in the gateway for its reader (one frame beyond it always fits).",
        reason: "Some hundred typical deliveries, enough for full-rate pushing (docs/benchmarks.md); 100 sockets that never read then pin at most about 130 MiB.",
        field: field!(bytes ws_send_buffer, 1024, 1 << 30),
    },
    Setting {
        name: "ws_send_timeout",
        flag: "ws-send-timeout",
        env: Some("AGENTBUS_WS_SEND_TIMEOUT"),
        value_name: "DURATION",
        default: "30s",
        default_doc: "",
        help: "How long deliveries may wait for a WebSocket's reader; then it is closed (1008, AB-5003) and its deliveries return to the inbox.",
        reason: "A reader that takes 30 s to accept a few hundred KiB is not reading; its messages go to the next connection instead of waiting out the visibility timeout.",
        field: field!(time ws_send_timeout, MS, Duration::from_secs(3600)),
    },
    Setting {
        name: "card_max_bytes",
        flag: "card-max-bytes",
        env: Some("AGENTBUS_CARD_MAX_BYTES"),
        value_name: "BYTES",
        default: "64KiB",
        default_doc: "",
        help: "The largest agent card body (`POST /v1/agents`, `PATCH /v1/agents/{id}`); more is AB-3041 (413).",
        reason: "Cards travel in every directory listing (§10): a generous card is a few KiB, and a listing of a thousand stays a few MiB.",
        field: field!(bytes card_max_bytes, 1024, 1 << 20),
    },
    Setting {
        name: "shutdown_grace",
        flag: "shutdown-grace",
        env: Some("AGENTBUS_SHUTDOWN_GRACE"),
        value_name: "DURATION",
        default: "10s",
        default_doc: "",
        help: "How long SIGTERM or SIGINT waits for in-flight requests before the gateway exits anyway.",
        reason: "A publish finishes in milliseconds; 10 s is inside the stop timeouts of systemd (90 s) and Kubernetes (30 s), so the gateway exits on its own.",
        field: field!(time shutdown_grace, MS, Duration::from_secs(600)),
    },
    Setting {
        name: "public_discovery",
        flag: "public-discovery",
        env: Some("AGENTBUS_PUBLIC_DISCOVERY"),
        value_name: "",
        default: "false",
        default_doc: "",
        help: "Let anyone read `public` cards: a credential of any tenant, or none (A2A discovery at `/v1/agents/{id}/.well-known/agent-card.json`). Off, `public` behaves as `tenant`.",
        reason: "§10: `public` behaves as `tenant` until the marketplace ships; an operator opts in to being discoverable, and then no caller sees more by dropping its credential.",
        field: field!(switch public_discovery),
    },
    Setting {
        name: "search_index",
        flag: "search-index",
        env: Some("AGENTBUS_SEARCH_INDEX"),
        value_name: "BOOL",
        default: "true",
        default_doc: "",
        help: "Index each message for `GET /v1/search` and `agentbus search`, as keyed hashes of its words (docs/security.md, \"The search index at rest\"). `false` indexes nothing new: what was indexed before stays findable.",
        reason: "On: search is part of the bus. An operator who would rather the database hold no word hashes, or who measures what indexing costs a publish, turns it off.",
        field: field!(parsed search_index, switch),
    },
    Setting {
        name: "log",
        flag: "log",
        env: Some("AGENTBUS_LOG"),
        value_name: "FILTER",
        default: "info",
        default_doc: "",
        help: "What is logged: a level (error, warn, info, debug) or target=level directives, comma-separated; each HTTP request is a debug line. RUST_LOG is read when this is not set.",
        reason: "Info keeps starts, stops and failures an operator acts on; a line per request (a worker long-polls every second) would bury them.",
        field: field!(text log, log_filter),
    },
    Setting {
        name: "log_format",
        flag: "log-format",
        env: Some("AGENTBUS_LOG_FORMAT"),
        value_name: "FORMAT",
        default: "auto",
        default_doc: "",
        help: "How log lines are written on stderr: auto (text on a terminal, JSON lines otherwise), text or json.",
        reason: "A person at a terminal reads text; a supervisor or container runtime collecting stderr feeds a log pipeline, which wants JSON.",
        field: field!(parsed log_format, log_format),
    },
    Setting {
        name: "otel_endpoint",
        flag: "otel-endpoint",
        env: Some("OTEL_EXPORTER_OTLP_ENDPOINT"),
        value_name: "URL",
        default: "",
        default_doc: "none (telemetry off)",
        help: "The OTLP/HTTP base URL of a collector (`/v1/traces` and `/v1/metrics` are appended): spans of every publish, delivery and timer, and the `/metrics` counters, are exported there (docs/observability.md).",
        reason: "Off: with no endpoint no exporter is built and no connection is made; where telemetry goes is the operator's choice.",
        field: field!(text otel_endpoint, otel_endpoint),
    },
    Setting {
        name: "otel_protocol",
        flag: "otel-protocol",
        env: Some("OTEL_EXPORTER_OTLP_PROTOCOL"),
        value_name: "PROTOCOL",
        default: "http/protobuf",
        default_doc: "",
        help: "The OTLP protocol: `http/protobuf` is the one built in.",
        reason: "Every collector and vendor endpoint takes it, over the HTTP client the gateway already has; gRPC would add a second HTTP stack.",
        field: field!(text otel_protocol, otel_protocol),
    },
    Setting {
        name: "otel_service_name",
        flag: "otel-service-name",
        env: Some("OTEL_SERVICE_NAME"),
        value_name: "NAME",
        default: "agentbus-gateway",
        default_doc: "",
        help: "The `service.name` of the gateway's spans and metrics.",
        reason: "Tells the gateway's spans from the sidecars' (`agentbus-sidecar`), workers' (`agentbus-worker`) and MCP servers' (`agentbus-mcp`) in one trace.",
        field: field!(text otel_service_name, service_name),
    },
    Setting {
        name: "otel_resource_attributes",
        flag: "otel-resource-attributes",
        env: Some("OTEL_RESOURCE_ATTRIBUTES"),
        value_name: "PAIRS",
        default: "",
        default_doc: "none",
        help: "Further resource attributes: `key=value` pairs, comma-separated, values percent-encoded (such as `deployment.environment.name=prod`).",
        reason: "The deployment is the operator's to name.",
        field: field!(text otel_resource_attributes, otel_resource_attributes),
    },
    Setting {
        name: "otel_traces_sampler",
        flag: "otel-traces-sampler",
        env: Some("OTEL_TRACES_SAMPLER"),
        value_name: "SAMPLER",
        default: "parentbased_always_on",
        default_doc: "",
        help: "Which traces are kept: `always_on`, `always_off`, `traceidratio`, `parentbased_always_on`, `parentbased_always_off` or `parentbased_traceidratio`.",
        reason: "The OpenTelemetry default: a trace its sender sampled (the envelope's `traceparent` flags) is kept whole, so no hop drops a middle span.",
        field: field!(text otel_traces_sampler, otel_sampler),
    },
    Setting {
        name: "otel_traces_sampler_arg",
        flag: "otel-traces-sampler-arg",
        env: Some("OTEL_TRACES_SAMPLER_ARG"),
        value_name: "RATIO",
        default: "",
        default_doc: "none (a ratio of 1)",
        help: "The ratio of the ratio samplers, from 0 to 1 (`0.01` keeps one new trace in a hundred).",
        reason: "The OpenTelemetry default: every trace when no ratio is given.",
        field: field!(text otel_traces_sampler_arg, otel_sampler_arg),
    },
    Setting {
        name: "otel_sdk_disabled",
        flag: "otel-sdk-disabled",
        env: Some("OTEL_SDK_DISABLED"),
        value_name: "BOOL",
        default: "false",
        default_doc: "",
        help: "`true` turns telemetry off whatever the endpoint says.",
        reason: "The OpenTelemetry default; the switch lets an operator silence a process without removing its endpoint.",
        field: field!(parsed otel_sdk_disabled, otel_switch),
    },
    Setting {
        name: "otel_subject",
        flag: "otel-subject",
        env: Some("AGENTBUS_OTEL_SUBJECT"),
        value_name: "BOOL",
        default: "false",
        default_doc: "",
        help: "Add each message's subject to its spans (`agentbus.message.subject`); no message text or attachment name is ever exported.",
        reason: "Off: a subject is the sender's text, and a collector is often run by other people than the agents' owners.",
        field: field!(parsed otel_subject, switch),
    },
    Setting {
        name: "trace_url",
        flag: "trace-url",
        env: Some("AGENTBUS_TRACE_URL"),
        value_name: "URL",
        default: "",
        default_doc: "none (no link)",
        help: "The operator's trace viewer, such as `https://jaeger.example/trace/{trace_id}`: the console's task and conversation pages link each trace there, as `agentbus trace` does with the same variable.",
        reason: "No link: which viewer an operator runs, if any, is theirs to say.",
        field: field!(text trace_url, trace_url),
    },
    Setting {
        name: "unsafe_test_clock",
        flag: "unsafe-test-clock",
        env: None,
        value_name: "",
        default: "false",
        default_doc: "",
        help: "UNSAFE, for black-box tests only: time an admin can move forward over HTTP (`POST /v1/test/clock`). Refused on a data directory created without it.",
        reason: "Off, and only a flag can turn it on: an environment variable or a file line left behind must never move a production gateway's clock.",
        field: field!(switch unsafe_test_clock),
    },
];

/// The setting named `name` (a TOML key).
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name == name)
}

/// A value that could not be used, on one line: where it came from and why; its fix is the
/// catalogue entry's (AB-9020), filled with what to do about this value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {cause}")]
pub struct SettingError {
    /// The value as given: `--flag VALUE`, `AGENTBUS_X=VALUE`, or `key = VALUE in FILE`.
    pub what: String,
    /// What is wrong with it.
    pub cause: String,
    /// What to do.
    pub fix: String,
}

impl agentbus_protocol::errors::Catalogued for SettingError {
    fn code(&self) -> agentbus_protocol::Code {
        agentbus_protocol::Code::SettingUnusable
    }

    fn fix_values(&self) -> Vec<(&'static str, String)> {
        vec![("fix", self.fix.clone())]
    }
}

/// What the settings are read from.
#[derive(Debug, Default)]
pub struct Sources {
    /// Values given on the command line, by setting name (switches as `"true"`).
    pub flags: Vec<(String, String)>,
    /// The process environment (only `AGENTBUS_*`, `OTEL_*`, `XDG_DATA_HOME` and `HOME` are read).
    pub env: BTreeMap<String, String>,
    /// The `--config` file.
    pub file: Option<PathBuf>,
}

impl Sources {
    /// The flags given and this process's environment.
    pub fn from_process(flags: Vec<(String, String)>, file: Option<PathBuf>) -> Sources {
        Sources {
            flags,
            env: std::env::vars()
                .filter(|(k, _)| {
                    k.starts_with("AGENTBUS_")
                        || k.starts_with("OTEL_")
                        || k == "XDG_DATA_HOME"
                        || k == "HOME"
                })
                .collect(),
            file,
        }
    }
}

/// The effective settings and where each value came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The configuration.
    pub config: Config,
    /// Per setting of [`SETTINGS`], in order, the origin of its value.
    pub origins: Vec<Origin>,
}

impl Resolved {
    /// Where the value of `name` came from.
    pub fn origin(&self, name: &str) -> Option<&Origin> {
        let i = SETTINGS.iter().position(|s| s.name == name)?;
        self.origins.get(i)
    }

    /// Each setting with its effective value and origin, in table order.
    pub fn rows(&self) -> impl Iterator<Item = (&'static Setting, String, &Origin)> {
        SETTINGS
            .iter()
            .zip(&self.origins)
            .map(|(s, o)| (s, s.value(&self.config), o))
    }
}

/// The data directory when none is set: `$XDG_DATA_HOME/agentbus/gateway`, else
/// `$HOME/.local/share/agentbus/gateway`.
pub fn default_data_dir(env: &BTreeMap<String, String>) -> PathBuf {
    if let Some(x) = env.get("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("agentbus/gateway");
    }
    let home = env
        .get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/agentbus/gateway")
}

/// Reads the TOML file into `key → value`; a syntax error is one [`SettingError`].
fn read_file(path: &Path) -> Result<BTreeMap<String, Raw>, SettingError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SettingError {
        what: format!("--config {shown}"),
        cause: e.to_string(),
        fix: "pass the path of a readable TOML file".into(),
    })?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| SettingError {
        what: format!("--config {shown}"),
        cause: format!(
            "not valid TOML: {}",
            e.message().lines().next().unwrap_or_default()
        ),
        fix: match e.span() {
            Some(span) => format!(
                "correct line {} (keys are written `name = value`, see docs/settings.md)",
                1 + text.as_bytes()[..span.start.min(text.len())]
                    .iter()
                    .filter(|b| **b == b'\n')
                    .count()
            ),
            None => "write one `name = value` per line (see docs/settings.md)".into(),
        },
    })?;
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let raw = match v {
            toml::Value::String(s) => Raw::Text(s),
            toml::Value::Integer(i) => Raw::Int(i),
            toml::Value::Float(x) => Raw::Float(x),
            toml::Value::Boolean(b) => Raw::Bool(b),
            other => Raw::Text(format!("<a TOML {}>", other.type_str())),
        };
        out.insert(k, raw);
    }
    Ok(out)
}

/// The known name nearest to `name` (at most two edits away), for "did you mean".
fn nearest(name: &str) -> Option<&'static str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let sub = prev[j] + usize::from(ca != *cb);
                cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    SETTINGS
        .iter()
        .map(|s| (distance(name, s.name), s.name))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

/// Resolves every setting from `sources` (flag > environment > file > default) and checks it;
/// every bad value or unknown file key is one error.
pub fn resolve(sources: &Sources) -> Result<Resolved, Vec<SettingError>> {
    let mut errors = Vec::new();
    let file = match &sources.file {
        Some(p) => match read_file(p) {
            Ok(t) => t,
            Err(e) => return Err(vec![e]),
        },
        None => BTreeMap::new(),
    };
    let file_path = sources.file.clone().unwrap_or_default();
    for key in file.keys() {
        let known = setting(key);
        if known.is_none() {
            errors.push(SettingError {
                what: format!("{key} in {}", file_path.display()),
                cause: "not a setting".into(),
                fix: match nearest(key) {
                    Some(n) => format!("did you mean `{n}`? (docs/settings.md lists them all)"),
                    None => "remove it; docs/settings.md lists every setting".into(),
                },
            });
        } else if known.is_some_and(|s| s.env.is_none()) {
            errors.push(SettingError {
                what: format!("{key} in {}", file_path.display()),
                cause: "this setting is accepted only as a flag".into(),
                fix: known
                    .map(|s| format!("remove the line; pass --{} when it is meant", s.flag))
                    .unwrap_or_default(),
            });
        }
    }
    let mut config = Config::new(DEFAULT_LISTEN, default_data_dir(&sources.env));
    let mut origins = Vec::with_capacity(SETTINGS.len());
    for s in SETTINGS {
        let flag = sources
            .flags
            .iter()
            .rev()
            .find(|(n, _)| n == s.name)
            .map(|(_, v)| (Raw::Text(v.clone()), Origin::Flag(s.flag)));
        let env = s.env.and_then(|e| {
            sources
                .env
                .get(e)
                .map(|v| (Raw::Text(v.clone()), Origin::Env(e)))
        });
        let from_file = s
            .env
            .and(file.get(s.name))
            .map(|v| (v.clone(), Origin::File(file_path.clone())));
        let Some((raw, origin)) = flag.or(env).or(from_file) else {
            origins.push(Origin::Default);
            continue;
        };
        if let Err(b) = (s.field.0)(&mut config, &raw) {
            // A refused database URL is echoed without its password.
            let raw = match &raw {
                Raw::Text(t) if s.name == "store" => Raw::Text(redact_password(t)),
                other => other.clone(),
            };
            errors.push(SettingError {
                what: match &origin {
                    Origin::Flag(f) => format!("--{f} {raw}"),
                    Origin::Env(e) => format!("{e}={raw}"),
                    Origin::File(p) => format!("{} = {raw} in {}", s.name, p.display()),
                    Origin::Default => s.name.to_owned(),
                },
                cause: b.cause,
                fix: b.fix,
            });
        }
        origins.push(origin);
    }
    // The public URL follows the address unless it was set.
    let public_i = SETTINGS.iter().position(|s| s.name == "public_url");
    if public_i.and_then(|i| origins.get(i)) == Some(&Origin::Default)
        && config.listen != DEFAULT_LISTEN
    {
        config.public_url = format!("http://{}", config.listen);
    }
    if errors.is_empty() {
        Ok(Resolved { config, origins })
    } else {
        Err(errors)
    }
}

/// `docs/settings.md`, generated from [`SETTINGS`] (a test keeps the file in step).
pub fn render_markdown() -> String {
    let mut out = String::from(
        "# Gateway settings\n\n\
         <!-- Generated from crates/agentbus-gateway/src/config.rs; a test fails when this file differs \
         (`UPDATE_EXPECT=1 cargo test -p agentbus-gateway --test it settings_doc` rewrites it). -->\n\n\
         Every setting of `agentbus gateway` can be given as a flag, as an environment variable or in a \
         TOML file passed with `--config FILE`, in that precedence: a flag beats the environment, which \
         beats the file, which beats the default. Every value is checked when the gateway starts; each bad \
         one is reported on its own line with its cause and a fix, and the gateway does not start. \
         `agentbus gateway --print-config` shows the effective value of each setting and where it came \
         from (add `--json` for a document).\n\n\
         Durations are written `500ms`, `90s`, `5m`, `24h` or `7d` (a bare number is seconds); byte \
         counts as a number or with `KiB`, `MiB` or `GiB`. In the file, keys are the names below:\n\n\
         ```toml\n\
         listen = \"0.0.0.0:7700\"\n\
         visibility_timeout = \"2m\"\n\
         max_attempts = 5\n\
         blob_inline_max = \"16MiB\"\n\
         ```\n\n\
         `AGENTBUS_BLOB_INLINE_MAX` and `AGENTBUS_BLOB_TTL` are the names the wire protocol gives (§9). \
         The `s3_*` settings (`AGENTBUS_S3_*`, §9) move blob content to an S3-compatible store; \
         docs/api.md describes the upload and download targets, docs/security.md how content stays \
         sealed. The `store*` settings choose the database: the embedded SQLite file, or a \
         PostgreSQL database several replicas share (docs/deploy.md).\n\n\
         | setting | flag | environment | default | what it sets | why this default |\n\
         |---|---|---|---|---|---|\n",
    );
    for s in SETTINGS {
        let env = s
            .env
            .map(|e| format!("`{e}`"))
            .unwrap_or_else(|| "— (flag only)".into());
        let default = if s.default.is_empty() {
            s.default_doc.to_owned()
        } else {
            format!("`{}`", s.default)
        };
        let flag = if s.is_switch() {
            format!("`--{}`", s.flag)
        } else {
            format!("`--{} {}`", s.flag, s.value_name)
        };
        out.push_str(&format!(
            "| `{}` | {flag} | {env} | {default} | {} | {} |\n",
            s.name,
            s.help.replace('|', "\\|"),
            s.reason.replace('|', "\\|"),
        ));
    }
    out.push_str(
        "\n## The test clock\n\n\
         `--unsafe-test-clock` gives black-box tests a clock they can move: the gateway's time is the \
         system time plus an offset that `POST /v1/test/clock` with `{\"advance\": \"25h\"}` (the gateway operator's \
         token) moves forward, then runs one reaper pass, so timers due by the new time have fired when it \
         answers; `GET /v1/test/clock` reads it. The offset is kept in the data directory, so a restart \
         keeps the time. It can never be switched on by accident: it is a flag only (no variable, no \
         file key); a data directory records at its first start whether it was created with it, and a \
         gateway refuses to start when the flag and the directory disagree; it is logged as a warning at \
         start and at every move; every response then carries an `agentbus-test-clock` header with the \
         gateway's time; and its routes exist only while it is on (they are not in `ROUTES` nor in the \
         OpenAPI document).\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every default parses, and every shown value parses back to itself.
    #[test]
    fn defaults_parse_and_values_round_trip() {
        let c = Config::new("127.0.0.1:7700".parse().unwrap(), "/tmp/x".into());
        for s in SETTINGS {
            if !s.default.is_empty() {
                let mut d = c.clone();
                assert!(
                    (s.field.0)(&mut d, &Raw::Text(s.default.into())).is_ok(),
                    "{}",
                    s.name
                );
            }
            if !s.default.is_empty() {
                assert_eq!(
                    s.value(&c),
                    s.default,
                    "{} shows its default as written",
                    s.name
                );
            }
            let shown = s.value(&c);
            let mut again = c.clone();
            assert!(
                (s.field.0)(&mut again, &Raw::Text(shown.clone())).is_ok(),
                "{}",
                s.name
            );
            assert_eq!(s.value(&again), shown, "{}", s.name);
        }
    }

    /// Flags are the names with `-`; variables are `AGENTBUS_` and the name in capitals, except the
    /// switch that only a flag may give and the OpenTelemetry settings, whose variables are the
    /// standard ones (every one of them, in the crate's order).
    #[test]
    fn names_follow_one_rule() {
        let mut otel = Vec::new();
        for s in SETTINGS {
            assert_eq!(s.flag, s.name.replace('_', "-"));
            match s.env {
                Some(e) if e.starts_with("OTEL_") => {
                    assert!(s.name.starts_with("otel_"), "{}", s.name);
                    otel.push(e);
                }
                Some(e) => assert_eq!(e, format!("AGENTBUS_{}", s.name.to_ascii_uppercase())),
                None => {}
            }
        }
        assert_eq!(otel, agentbus_telemetry::VARIABLES);
    }

    #[test]
    fn duration_and_byte_forms() {
        let d = |s: &str| parse_duration(&Raw::Text(s.into()));
        assert_eq!(d("90"), Ok(Duration::from_secs(90)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(d("soon").is_err() && d("5w").is_err() && d("-5s").is_err());
        assert_eq!(show_duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(show_duration(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(show_duration(Duration::from_secs(60)), "60s");
        assert_eq!(show_duration(Duration::ZERO), "0s");
        assert_eq!(show_duration(Duration::from_millis(1500)), "1500ms");
        let b = |s: &str| parse_bytes(&Raw::Text(s.into()));
        assert_eq!(b("8MiB"), Ok(8 << 20));
        assert_eq!(b("1_024"), Ok(1024));
        assert!(b("8MB").is_err());
        assert_eq!(show_bytes(8 << 20), "8MiB");
        assert_eq!(show_bytes(1000), "1000");
    }
}
