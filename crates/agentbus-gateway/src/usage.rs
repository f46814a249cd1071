//! Usage and cost (§5.5): what each message reports about the work behind it, recorded with the
//! message when it is stored, and the totals admins read (`GET /v1/usage`, the console's usage
//! page). Every figure keeps its source (`reported_by` for usage, `source` for money), since
//! "billing and analytics display the source next to every number" (§5.5, WP-5.5-2).
//!
//! One figure per message: `data.usage` of a task.result or `data.usage_delta` of a
//! task.progress when present (they describe the work of that step), else the envelope's `usage`
//! attribute; a message carrying both reports the same work twice, so only the first is counted.
//! The cost is a task.result's `data.cost`.

use std::sync::Arc;

use crate::extract::Query;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;

use crate::access::bearer;
use crate::error::{ApiError, ApiResult};
use crate::roles::{self, AdminScope};
use crate::state::{App, Principal};

/// The usage figure of `field` in `obj`, if it reads as the usage schema (`reported_by` set).
fn figure(obj: Option<&Value>) -> Option<UsageFigure> {
    let u = obj?.as_object()?;
    let reported_by = u.get("reported_by")?.as_str()?.to_owned();
    let n = |k: &str| {
        u.get(k)
            .and_then(Value::as_i64)
            .filter(|n| *n >= 0)
            .unwrap_or(0)
    };
    let s = |k: &str| u.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(UsageFigure {
        reported_by,
        provider: s("provider"),
        model: s("model"),
        tokens: Tokens {
            input: n("input_tokens"),
            output: n("output_tokens"),
            cache_read: n("cache_read_tokens"),
            cache_write: n("cache_write_tokens"),
            reasoning: n("reasoning_tokens"),
            requests: n("requests"),
            wall_ms: n("wall_ms"),
        },
    })
}

/// A decimal amount as the money schema writes it (`-?[0-9]+(\.[0-9]{1,6})?`) in millionths;
/// `None` when it does not read or does not fit.
pub fn micros(amount: &str) -> Option<i64> {
    if !agentbus_protocol::envelope::is_decimal_amount(amount) {
        return None;
    }
    let (neg, body) = match amount.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, amount),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let int: i64 = int.parse().ok()?;
    let frac: i64 = format!("{frac:0<6}").parse().ok()?;
    let v = int.checked_mul(1_000_000)?.checked_add(frac)?;
    Some(if neg { -v } else { v })
}

/// Millionths written back as a decimal string with six places (`"0.420000"`).
pub fn amount(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06}", m / 1_000_000, m % 1_000_000)
}

/// What an envelope reports: the field the usage figure was read from, the figure, and the
/// cost. `attrs` are the envelope's attributes, `data` its `data`, `kind` its `type`.
pub fn figures(
    attrs: &Map<String, Value>,
    data: &Value,
    kind: &str,
) -> (&'static str, Option<UsageFigure>, Option<CostFigure>) {
    let (field, usage) = match kind {
        "agentbus.task.result.v1" if data.get("usage").is_some() => {
            ("data.usage", figure(data.get("usage")))
        }
        "agentbus.task.progress.v1" if data.get("usage_delta").is_some() => {
            ("data.usage_delta", figure(data.get("usage_delta")))
        }
        _ => ("usage", figure(attrs.get("usage"))),
    };
    let cost = (kind == "agentbus.task.result.v1")
        .then(|| data.get("cost"))
        .flatten()
        .and_then(|c| {
            Some(CostFigure {
                currency: c.get("currency")?.as_str()?.to_owned(),
                micros: micros(c.get("amount")?.as_str()?)?,
                source: c.get("source").and_then(Value::as_str).map(str::to_owned),
            })
        });
    (field, usage, cost)
}

/// The row a publish stores with its message, if the message reports usage or a cost.
/// `task` is the message's task and that task's capability.
pub fn row(
    sender: &AgentRow,
    attrs: &Map<String, Value>,
    data: &Value,
    task: Option<(&str, &str)>,
    received_at: i64,
) -> Option<UsageRow> {
    let kind = attrs
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (field, usage, cost) = figures(attrs, data, kind);
    if usage.is_none() && cost.is_none() {
        return None;
    }
    let capability = attrs
        .get("capability")
        .and_then(Value::as_str)
        .or(task.map(|t| t.1))
        .filter(|c| !c.is_empty())
        .map(str::to_owned);
    Some(UsageRow {
        tenant_id: sender.tenant_id.clone(),
        workspace_id: sender.workspace_id.clone(),
        agent_id: sender.id.clone(),
        task_id: task.map(|t| t.0.to_owned()),
        capability,
        day: day_of(received_at),
        field: field.to_owned(),
        usage,
        cost,
    })
}

/// The UTC day of an instant, `YYYY-MM-DD`.
pub fn day_of(ms: i64) -> String {
    Timestamp(ms).to_string().chars().take(10).collect()
}

/// `YYYY-MM-DD`, a day of the calendar (not 2026-13-45).
fn is_day(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && format!("{s}T00:00:00.000Z").parse::<Timestamp>().is_ok()
}

/// Filters of `GET /v1/usage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UsageQuery {
    /// Only this `agt_` id.
    pub agent: Option<String>,
    /// Only this capability.
    pub capability: Option<String>,
    /// Only days at or after this one (`YYYY-MM-DD`, UTC).
    pub since: Option<String>,
    /// Only days at or before this one.
    pub until: Option<String>,
}

/// The usage totals `who` may read, summed per agent, capability, day and source: an agent its
/// own, a workspace admin its workspace's agents', a tenant admin its tenant's. Anyone else is
/// refused from its role alone (AB-1002).
pub async fn totals(app: &App, who: &Principal, q: &UsageQuery) -> ApiResult<Vec<UsageTotal>> {
    let (workspace_ids, own) = match who {
        Principal::Agent(a) => (Some(vec![a.workspace_id.clone()]), Some(a.id.clone())),
        Principal::User(_) => match roles::admin_scope(who) {
            Some(AdminScope::Tenant(_)) => (None, None),
            Some(AdminScope::Workspace(w)) => (Some(vec![w.to_owned()]), None),
            None => {
                return Err(ApiError::new(
                    Code::NotPermitted,
                    "usage is read by agents (their own) and by admins",
                ));
            }
        },
    };
    for (name, v) in [("since", &q.since), ("until", &q.until)] {
        if v.as_deref().is_some_and(|d| !is_day(d)) {
            return Err(ApiError::new(
                Code::InvalidRequest,
                format!("`{name}` is a UTC day, YYYY-MM-DD"),
            ));
        }
    }
    // An agent asking for another agent's figures gets none, as for an agent that reported none.
    let agent_id = match (own, &q.agent) {
        (Some(me), Some(asked)) if &me != asked => return Ok(Vec::new()),
        (Some(me), _) => Some(me),
        (None, asked) => asked.clone(),
    };
    Ok(app
        .store
        .usage(UsageFilter {
            tenant_id: who.tenant_id().to_owned(),
            workspace_ids,
            agent_id,
            capability: q.capability.clone(),
            since_day: q.since.clone(),
            until_day: q.until.clone(),
        })
        .await?)
}

/// The largest integer I-JSON carries exactly (RFC 7493 §2.2): what the gateway itself accepts.
const MAX_EXACT: i64 = (1 << 53) - 1;

/// A summed figure as the API writes it: at most [`MAX_EXACT`], so a client that reads numbers as
/// doubles (every JavaScript one) never gets a rounded total; sums that large are saturated.
fn exact(n: i64) -> i64 {
    n.clamp(-MAX_EXACT, MAX_EXACT)
}

/// One total as the API writes it: each figure beside its source.
pub fn total_body(t: &UsageTotal, address: Option<&str>) -> api::UsageTotal {
    let usage = t.reported_by.as_ref().map(|r| api::Tokens {
        reported_by: r.clone(),
        input_tokens: exact(t.tokens.input),
        output_tokens: exact(t.tokens.output),
        cache_read_tokens: exact(t.tokens.cache_read),
        cache_write_tokens: exact(t.tokens.cache_write),
        reasoning_tokens: exact(t.tokens.reasoning),
        requests: exact(t.tokens.requests),
        wall_ms: exact(t.tokens.wall_ms),
    });
    let cost = t.currency.as_ref().map(|c| api::Cost {
        currency: c.clone(),
        amount: amount(t.cost_micros),
        source: t.cost_source.clone(),
    });
    api::UsageTotal {
        agent: api::AgentRef {
            id: t.agent_id.clone(),
            address: address.map(str::to_owned),
        },
        capability: t.capability.clone(),
        day: t.day.clone(),
        messages: t.messages,
        usage,
        cost,
    }
}

/// `GET /v1/usage?agent=&capability=&since=&until=`: usage and cost reported by messages (§5.5),
/// per agent, capability, day and source, within the caller's scope.
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<UsageQuery>,
) -> ApiResult<Json<api::UsageList>> {
    let who = bearer(&app, &headers).await?;
    let rows = totals(&app, &who, &q).await?;
    let mut out = Vec::with_capacity(rows.len());
    for t in &rows {
        let address = match app.agent_row(&t.agent_id).await? {
            Some(a) => Some(app.address_of(&a).await?),
            None => None,
        };
        out.push(total_body(t, address.as_deref()));
    }
    Ok(Json(api::UsageList { usage: out }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Two reports of 2^53−1 tokens sum past what I-JSON carries: the total is written as the
    /// largest exact integer, never one a double would round.
    #[test]
    fn totals_stay_within_i_json() {
        let mut t = UsageTotal {
            agent_id: "agt_1".into(),
            capability: None,
            day: "2026-12-05".into(),
            reported_by: Some("agent".into()),
            currency: None,
            cost_source: None,
            messages: 2,
            tokens: agentbus_store::Tokens::default(),
            cost_micros: 0,
        };
        t.tokens.input = 2 * MAX_EXACT;
        let v = total_body(&t, None);
        assert_eq!(v.usage.map(|u| u.input_tokens), Some(MAX_EXACT));
        t.tokens.input = 42;
        let v = total_body(&t, None);
        assert_eq!(v.usage.map(|u| u.input_tokens), Some(42));
    }

    #[test]
    fn amounts_are_exact_millionths() {
        for (text, m) in [
            ("0.42", 420_000),
            ("-3", -3_000_000),
            ("12.000001", 12_000_001),
            ("0", 0),
        ] {
            assert_eq!(micros(text), Some(m), "{text}");
        }
        for bad in ["1.", ".5", "1.1234567", "1e3", "99999999999999999999"] {
            assert_eq!(micros(bad), None, "{bad}");
        }
        assert_eq!(amount(420_000), "0.420000");
        assert_eq!(amount(-3_000_001), "-3.000001");
    }

    #[test]
    fn one_figure_per_message_the_step_s_own_first() {
        let attrs: Map<String, Value> =
            serde_json::from_value(json!({"usage": {"reported_by": "agent", "input_tokens": 5}}))
                .unwrap_or_default();
        let data = json!({"usage": {"reported_by": "harness", "input_tokens": 7},
                          "cost": {"currency": "USD", "amount": "0.42", "source": "proxy"}});
        let (field, u, c) = figures(&attrs, &data, "agentbus.task.result.v1");
        assert_eq!(field, "data.usage");
        assert_eq!(
            u.map(|u| (u.reported_by, u.tokens.input)),
            Some(("harness".into(), 7))
        );
        assert_eq!(c.map(|c| c.micros), Some(420_000));
        let (field, u, c) = figures(&attrs, &json!({"text": "hi"}), "agentbus.message.v1");
        assert_eq!(field, "usage");
        assert_eq!(u.map(|u| u.tokens.input), Some(5));
        assert!(c.is_none(), "only a task.result reports a cost");
    }
}
