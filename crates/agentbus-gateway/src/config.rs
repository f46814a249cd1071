//! The gateway's settings: every number of the delivery semantics is here, with its default.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Gateway configuration. Defaults are documented in `docs/gateway.md`.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The data directory (database, master key, blobs).
    pub data_dir: PathBuf,
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
}

impl Config {
    /// The defaults, with data under `data_dir`, listening on `listen`.
    pub fn new(listen: SocketAddr, data_dir: PathBuf) -> Config {
        Config {
            listen,
            data_dir,
            public_url: format!("http://{listen}"),
            max_skew_s: 300,
            replay_window_s: 24 * 3600,
            idempotency_window_s: 7 * 24 * 3600,
            default_expiry_s: 24 * 3600,
            visibility_timeout_s: 60,
            max_attempts: 10,
            inbox_max_depth: 10_000,
            rate_per_agent: 20_000.0,
            rate_burst: 40_000.0,
            max_wait_s: 60,
            key_lifetime_days: 365,
            min_sidecar_version: "0.1.0".to_owned(),
            reaper_interval_ms: (agentbus_protocol::task::REAPER_INTERVAL_S * 1000) as u64,
            blob_inline_max: 8 * 1024 * 1024,
            plan_blob_bytes: 64 * 1024 * 1024,
            tenant_blob_quota: 1024 * 1024 * 1024,
            blob_ttl_s: 30 * 24 * 3600,
        }
    }
}
