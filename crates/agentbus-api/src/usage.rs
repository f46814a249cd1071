//! Usage and cost reported by messages (§5.5).

use serde::{Deserialize, Serialize};

use crate::AgentRef;

/// `GET /v1/usage`: totals per agent, capability, day and source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageList {
    /// The totals.
    pub usage: Vec<UsageTotal>,
}

/// One total, each figure beside its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageTotal {
    /// The agent that reported.
    pub agent: AgentRef,
    /// The capability, for task results.
    pub capability: Option<String>,
    /// The day (UTC, `YYYY-MM-DD`).
    pub day: String,
    /// How many messages reported.
    pub messages: u64,
    /// The summed token figures, when any were reported.
    pub usage: Option<Tokens>,
    /// The summed cost, when one was reported.
    pub cost: Option<Cost>,
}

/// Summed token figures (each at most 2^53−1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Tokens {
    /// Who measured: `agent`, `harness` or `proxy`.
    pub reported_by: String,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Tokens read from a cache.
    pub cache_read_tokens: i64,
    /// Tokens written to a cache.
    pub cache_write_tokens: i64,
    /// Reasoning tokens.
    pub reasoning_tokens: i64,
    /// Model requests.
    pub requests: i64,
    /// Wall time in milliseconds.
    pub wall_ms: i64,
}

/// A summed cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cost {
    /// The ISO 4217 currency.
    pub currency: String,
    /// The amount, a decimal string.
    pub amount: String,
    /// Who reported it.
    pub source: Option<String>,
}
