//! Self-description: the well-known document, error pages, health, the error body.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /.well-known/agentbus.json` (§11.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WellKnown {
    /// The protocol majors spoken.
    pub protocol_versions: Vec<String>,
    /// The gateway's version.
    pub gateway_version: String,
    /// The oldest sidecar accepted (empty: any).
    pub min_sidecar_version: String,
    /// Deprecations announced.
    pub deprecations: Vec<Value>,
    /// The message types known.
    pub types: Vec<String>,
    /// The schema documents served.
    pub schemas: Vec<String>,
    /// The keys system notices are signed with.
    pub gateway_keys: Vec<GatewayKey>,
    /// The limits a sender or receiver meets.
    pub limits: Limits,
    /// Where the OpenAPI document is.
    pub openapi: String,
}

/// A key the gateway signs its notices with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GatewayKey {
    /// Its `key_` id.
    pub id: String,
    /// The Ed25519 public key, base64url.
    pub public_key: String,
    /// The sources it signs for.
    pub signs: String,
}

/// The limits of the well-known document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Limits {
    /// The largest envelope accepted, in bytes.
    pub envelope_bytes: u64,
    /// The clock skew tolerated.
    pub max_skew_s: i64,
    /// How long a lease lasts.
    pub visibility_timeout_s: i64,
    /// Deliveries before a copy is dead-lettered.
    pub max_attempts: u32,
    /// The most pending copies an inbox holds.
    pub inbox_max_depth: u64,
}

/// `GET /errors/{code}` as JSON: a catalogue entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorPage {
    /// The `AB-` code.
    pub code: String,
    /// The HTTP status it answers.
    pub http_status: u16,
    /// Its title.
    pub title: String,
    /// What causes it.
    pub cause: String,
    /// What to do.
    pub fix: String,
}

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Health {
    /// `alive` or `ready`.
    pub status: String,
}

/// Every rejection's body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorDetail {
    /// The `AB-` code.
    pub code: String,
    /// What went wrong, for a person.
    pub message: String,
    /// The catalogue page of the code.
    pub doc_url: String,
    /// The request's id, as logged.
    pub request_id: String,
    /// More, for some codes (`violations`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// `GET` and `POST /v1/test/clock`: the test clock's time. Served only by a gateway started with
/// `--unsafe-test-clock`, so not part of the API's document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClockReading {
    /// The time the clock shows.
    pub now: String,
    /// How far it is ahead of the system clock, in milliseconds.
    pub offset_ms: i64,
    /// What the reaper pass after a move did (`POST` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaped: Option<Reaped>,
}

/// What a reaper pass did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Reaped {
    /// Copies dead-lettered.
    pub dead_lettered: u64,
    /// Inbox entries expired.
    pub expired: u64,
}

/// `POST /v1/test/clock` `{advance}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AdvanceClock {
    /// How far to move forward, as a duration (`90s`, `25h`, `31d`).
    pub advance: String,
}
