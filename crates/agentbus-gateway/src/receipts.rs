//! "Seen in context" receipts and the delivery states a sender reads (`docs/delivery.md`,
//! "Delivery states and receipts").
//!
//! - `POST /v1/inbox/receipts` (the recipient): its sidecar reports that messages it received
//!   were shown in a session's context, each named by the inbox sequence and id it was delivered
//!   with. Only the inbox's own agent reports on it; a sequence it has no delivery at answers
//!   exactly as one that does not exist (AB-4050).
//! - `GET /v1/messages/{id}/delivery` (the sender): per recipient, how far the message got:
//!   `persisted` → `leased` → `acknowledged` (the recipient's sidecar stored it) → `pushed` (sent
//!   to a client that may drop it) → `shown` (a session's context) → `answered` (an envelope from the recipient correlated to it). Only the
//!   sender may read it; anyone else gets what an unknown id gets (AB-4051).
//! - `GET /v1/messages/sent` (the sender): its own sent messages, newest first, a page at a time
//!   (`limit`, default 20, at most 100; `before`, the `next` cursor of the page before), each
//!   with the same per-recipient states. Only the caller's own messages are listed: no filter
//!   names another agent, so another's messages are never reachable.
//! - `GET /v1/inbox/policy` (any agent): the flags of its own workspace's policy a receiver acts
//!   on: `require_verified_inbound` (§13.1) and `read_receipts` (§5.8).

use std::sync::Arc;

use crate::extract::{Json, Path, Query};
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use agentbus_api as api;

use agentbus_protocol::Code;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;

use crate::access;
use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::state::{App, Principal};

/// The most receipts one report may carry.
const MAX_RECEIPTS: usize = 1000;

/// A harness or event name as a receipt may carry it: short, printable, no markup.
fn plain(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.chars().count() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ' ' | ':'))
}

/// `POST /v1/inbox/receipts`.
pub async fn report(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Json<api::ItemResults>> {
    let agent = access::agent(&app, &headers).await?;
    let body: api::ShownReceipts = crate::extract::parse_json(&body)?;
    if body.receipts.is_empty() || body.receipts.len() > MAX_RECEIPTS {
        return Err(ApiError::new(
            Code::InvalidRequest,
            format!("send 1 to {MAX_RECEIPTS} receipts"),
        ));
    }
    let mut receipts = Vec::with_capacity(body.receipts.len());
    for (i, r) in body.receipts.into_iter().enumerate() {
        let at: Timestamp = r.shown_at.parse().map_err(|_| {
            ApiError::new(
                Code::InvalidRequest,
                format!("receipts[{i}].shown_at is not an RFC 3339 instant"),
            )
        })?;
        if !plain(&r.harness, 32) || !(r.event.is_empty() || plain(&r.event, 64)) {
            return Err(ApiError::new(
                Code::InvalidRequest,
                format!(
                    "receipts[{i}]: harness (1-32) and event (0-64) are letters, digits and . _ - / : space"
                ),
            ));
        }
        let pushed = match r.state.as_deref() {
            None | Some("shown") => false,
            Some("pushed") => true,
            Some(_) => {
                return Err(ApiError::new(
                    Code::InvalidRequest,
                    format!("receipts[{i}].state is `shown` or `pushed`"),
                ));
            }
        };
        receipts.push(ShownReceipt {
            sequence: r.sequence,
            message_id: r.id,
            shown_at: at.millis(),
            harness: r.harness,
            event: r.event,
            pushed,
        });
    }
    let seqs: Vec<u64> = receipts.iter().map(|r| r.sequence).collect();
    let outcomes = app
        .store
        .record_receipts(&agent.id, receipts, app.now())
        .await?;
    if outcomes.iter().all(|o| *o == ReceiptOutcome::Unknown) {
        return Err(unknown_delivery());
    }
    let results = seqs
        .into_iter()
        .zip(outcomes)
        .map(|(sequence, o)| {
            let (status, code) = match o {
                ReceiptOutcome::Recorded => ("recorded", None),
                ReceiptOutcome::AlreadyRecorded => ("already_recorded", None),
                ReceiptOutcome::Unknown => ("refused", Some(Code::UnknownDelivery.to_string())),
            };
            api::ItemResult {
                sequence,
                status: status.to_owned(),
                code,
            }
        })
        .collect();
    Ok(Json(api::ItemResults { results }))
}

fn unknown_delivery() -> ApiError {
    ApiError::new(
        Code::UnknownDelivery,
        "no receipt names a delivery of your inbox (sequence and id as delivered)",
    )
}

/// The furthest state a delivery reached.
fn state_name(d: &DeliveryStateRow) -> &'static str {
    if d.answer.is_some() {
        return "answered";
    }
    if d.shown.is_some() {
        return "shown";
    }
    // Sent to a client that may drop it: further than the sidecar's ack, short of a showing.
    if d.pushed.is_some() {
        return "pushed";
    }
    match d.state {
        EntryState::Ready => "persisted",
        EntryState::Leased => "leased",
        EntryState::Acked => "acknowledged",
        EntryState::Dead => "dead_lettered",
        EntryState::Expired => "expired",
    }
}

fn at(ms: i64) -> String {
    Timestamp(ms).to_string()
}

fn answer(a: &AnswerRow) -> api::Answer {
    api::Answer {
        id: a.id.clone(),
        kind: a.kind.clone(),
        at: at(a.received_at),
    }
}

fn shown(s: &ShownReceipt) -> api::Shown {
    api::Shown {
        at: at(s.shown_at),
        harness: s.harness.clone(),
        event: s.event.clone(),
    }
}

/// `GET /v1/messages/{id}/delivery`.
pub async fn delivery(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::DeliveryStates>> {
    let agent = access::agent(&app, &headers).await?;
    let source = app.address_of(&agent).await?;
    let unknown = || {
        ApiError::new(
            Code::UnknownMessage,
            format!("no message {id} was sent by {source}"),
        )
    };
    let (message, rows) = app
        .store
        .delivery_states(&agent.tenant_id, &source, &id)
        .await?
        .ok_or_else(unknown)?;
    if message.source_agent_id.as_deref() != Some(agent.id.as_str()) {
        return Err(unknown());
    }
    let who = Principal::Agent(agent);
    Ok(Json(delivery_states(&app, &who, &message, &rows).await?))
}

/// One sent message and how far it got with each recipient: the document of
/// `GET /v1/messages/{id}/delivery`, and one entry of `GET /v1/messages/sent`. `sender` sees the
/// recipient it addressed and those whose cards it may see; a topic's other subscribers (private
/// ones, or of another workspace) are only counted, in `hidden_recipients`, as `GET /v1/topics`
/// counts them: who they are, and when they read, is not the sender's to know.
async fn delivery_states(
    app: &App,
    sender: &Principal,
    message: &MessageRow,
    rows: &[DeliveryStateRow],
) -> ApiResult<api::DeliveryStates> {
    let mut recipients = Vec::with_capacity(rows.len());
    let mut hidden = 0;
    for d in rows {
        let row = app.agent_row(&d.agent_id).await?;
        let addressed = d.agent_id == message.to_id;
        if !addressed
            && !row
                .as_ref()
                .is_some_and(|a| crate::identity::visible(sender, a))
        {
            hidden += 1;
            continue;
        }
        let address = match row {
            Some(a) => Some(app.address_of(&a).await?),
            None => None,
        };
        recipients.push(api::RecipientState {
            agent: api::AgentRef {
                id: d.agent_id.clone(),
                address,
            },
            sequence: d.sequence,
            state: state_name(d).to_owned(),
            persisted_at: at(message.received_at),
            leased_at: d.last_attempt_at.map(at),
            attempts: u64::from(d.attempts),
            acknowledged_at: d.acked_at.map(at),
            shown: d.shown.as_ref().map(shown),
            pushed: d.pushed.as_ref().map(shown),
            read_receipt: d.ack.as_ref().map(answer),
            answered: d.answer.as_ref().map(answer),
        });
    }
    Ok(api::DeliveryStates {
        id: message.id.clone(),
        kind: message.kind.clone(),
        conversation_id: message.conversation_id.clone(),
        to: message.to_text.clone(),
        task_id: message.task_id.clone(),
        persisted_at: at(message.received_at),
        recipients,
        hidden_recipients: hidden,
    })
}

/// Query of `GET /v1/messages/sent`.
#[derive(Debug, Default, Deserialize)]
pub struct SentQuery {
    /// Most messages (default 20, at most 100).
    pub limit: Option<u32>,
    /// Only messages sent before this cursor: the `next` of the page before.
    pub before: Option<String>,
}

/// `GET /v1/messages/sent`: the caller's sent messages, newest first, with their delivery states.
pub async fn sent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<SentQuery>,
) -> ApiResult<Json<api::SentMessages>> {
    let agent = access::agent(&app, &headers).await?;
    let source = app.address_of(&agent).await?;
    let limit = q.limit.unwrap_or(20).clamp(1, 100);
    // The cursor is the storage sequence of the page's last message, as `next` gave it.
    let before = match &q.before {
        None => None,
        Some(c) => Some(c.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                "`before` is the `next` cursor of an earlier page",
            )
        })?),
    };
    let rows = app
        .store
        .sent_messages(&agent.tenant_id, &agent.id, before, limit)
        .await?;
    let who = Principal::Agent(agent.clone());
    let mut out = Vec::with_capacity(rows.len());
    for m in &rows {
        let states = app
            .store
            .delivery_states(&agent.tenant_id, &source, &m.id)
            .await?
            .filter(|(found, _)| found.seq == m.seq)
            .map(|(_, s)| s)
            .unwrap_or_default();
        out.push(delivery_states(&app, &who, m, &states).await?);
    }
    let next = (rows.len() as u32 >= limit)
        .then(|| rows.last().map(|m| m.seq.to_string()))
        .flatten();
    Ok(Json(api::SentMessages {
        messages: out,
        next,
    }))
}

/// The policy flags a receiver acts on, from a workspace's policy document.
pub fn inbound_flags(policy: &str) -> (bool, bool) {
    let v: Value = serde_json::from_str(policy).unwrap_or(Value::Null);
    (
        v.get("require_verified_inbound") == Some(&Value::Bool(true)),
        v.get("read_receipts") == Some(&Value::Bool(true)),
    )
}

/// `GET /v1/inbox/policy`.
pub async fn policy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::InboxPolicy>> {
    let agent = access::agent(&app, &headers).await?;
    let ws = app
        .workspace_row(&agent.workspace_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let (require_verified_inbound, read_receipts) = inbound_flags(&ws.policy);
    Ok(Json(api::InboxPolicy {
        workspace: ws.id,
        require_verified_inbound,
        read_receipts,
    }))
}
