//! `POST /v1/messages`: the checks of §3.2, in order, then routing (§4) and the durable store.
//!
//! Order: bearer → `source` (AB-2002) → key (AB-1012) → signature (AB-1011) → clock skew
//! (AB-3005) → replay window with idempotent replay (AB-3006 / 200) → schema and limits → resolution
//! (AB-4001/4002/4003) → policy (AB-2001) → rate limit (AB-5001) → inbox depth (AB-4040) →
//! attachments (AB-4008/4021/4022) → persist → 202.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_protocol::address::Address;
use agentbus_protocol::envelope::{Envelope, GATEWAY_SET, MAX_ENVELOPE_BYTES, ValidateOptions};
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;
use agentbus_telemetry::{KeyValue, Parent, Span, SpanKind, semconv as sc};

use crate::access::bearer;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Json};
use crate::state::{App, Principal};

/// Where a message goes, once resolved.
struct Route {
    /// The resolved id: the agent's, or the topic's.
    to_id: String,
    /// The recipient's canonical address (aliases and `agt_` ids resolved), which policy matches.
    address: String,
    /// Inboxes that get a copy.
    recipients: Vec<AgentRow>,
    /// The workspace whose policy applies.
    workspace_id: String,
}

/// The handler.
pub async fn publish(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> Response {
    let started = Instant::now();
    let mut workspace = None;
    let mut span = Span::none();
    let result = publish_inner(&app, &headers, &body, &mut workspace, &mut span).await;
    match &result {
        Ok((StatusCode::ACCEPTED, _)) => span.event("stored", Vec::new()),
        Ok(_) => span.event("replayed", Vec::new()),
        Err(e) => span.fail(&e.code.to_string(), &e.message),
    }
    span.end();
    let label = match &result {
        Ok((StatusCode::ACCEPTED, _)) => "accepted".to_owned(),
        Ok(_) => "replay".to_owned(),
        Err(e) => e.code.to_string(),
    };
    crate::metrics::count_publish(&label, started.elapsed().as_secs_f64());
    if let Some(ws) = &workspace {
        crate::metrics::count_publish_in(ws, &label);
    }
    match result {
        Ok((status, body)) => {
            let mut resp = (status, Json(body)).into_response();
            if status == StatusCode::OK {
                resp.headers_mut().insert(
                    "agentbus-idempotent-replay",
                    axum::http::HeaderValue::from_static("true"),
                );
            }
            resp
        }
        Err(e) => e.into_response(),
    }
}

fn receipt_body(m: &MessageRow) -> api::Receipt {
    let attrs: Map<String, Value> = serde_json::from_str(&m.attrs).unwrap_or_default();
    let trace = attrs
        .get("traceparent")
        .and_then(Value::as_str)
        .map(trace_id)
        .unwrap_or_default();
    receipt_with_trace(m, trace)
}

/// The trace id inside a `traceparent` (`00-<trace id>-<span id>-<flags>`).
fn trace_id(traceparent: &str) -> &str {
    traceparent.get(3..35).unwrap_or_default()
}

/// The receipt, when the trace id is already known (an accepted publish: no need to parse the
/// stored attributes again).
fn receipt_with_trace(m: &MessageRow, trace: &str) -> api::Receipt {
    api::Receipt {
        receipt: m.receipt.clone(),
        id: m.id.clone(),
        state: "persisted".to_owned(),
        trace_id: trace.to_owned(),
        task_id: m.task_id.clone(),
        task_state: None,
        late: None,
        ignored: None,
    }
}

/// The refusal for a required string attribute that `env` lacks: AB-3002 when it is absent,
/// AB-3003 when it is there with another JSON type (a `time` sent as a number is not missing).
fn missing(env: &Envelope, name: &str) -> ApiError {
    match env.attrs().get(name) {
        None => ApiError::new(
            Code::MissingAttribute,
            format!("`{name}` is required (§2.1)"),
        ),
        Some(v) => {
            let kind = match v {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
                Value::String(_) => "a string",
            };
            ApiError::new(
                Code::InvalidAttribute,
                format!("`{name}` must be a string (§2.1), not {kind}"),
            )
        }
    }
}

/// The span of one publish, child of the envelope's `traceparent` (docs/observability.md): no
/// message text, and the subject only when `otel_subject` is set.
fn publish_span(app: &App, env: &Envelope, agent: &AgentRow, size: usize) -> Span {
    let mut attrs = vec![
        KeyValue::new(sc::MESSAGING_SYSTEM, sc::SYSTEM),
        KeyValue::new(sc::MESSAGING_OPERATION_TYPE, "send"),
        KeyValue::new(sc::MESSAGING_OPERATION_NAME, "publish"),
        KeyValue::new(sc::MESSAGING_BODY_SIZE, size as i64),
        KeyValue::new(sc::WORKSPACE, agent.workspace_id.clone()),
    ];
    for (key, name) in [
        (sc::MESSAGING_MESSAGE_ID, "id"),
        (sc::MESSAGING_DESTINATION_NAME, "to"),
        (sc::MESSAGING_CONVERSATION_ID, "conversation_id"),
        (sc::GEN_AI_CONVERSATION_ID, "conversation_id"),
        (sc::MESSAGING_CLIENT_ID, "source"),
        (sc::MESSAGE_TYPE, "type"),
        (sc::TASK_ID, "task_id"),
    ] {
        if let Some(v) = env.str_attr(name) {
            attrs.push(KeyValue::new(key, v.to_owned()));
        }
    }
    if app.tracer.with_subject()
        && let Some(v) = env.str_attr("subject")
    {
        attrs.push(KeyValue::new(sc::MESSAGE_SUBJECT, v.to_owned()));
    }
    let parent = env.traceparent().map_or(Parent::Root, Parent::Traceparent);
    app.tracer.start("publish", SpanKind::Server, parent, attrs)
}

/// `workspace` is set to the sender's once it is known, for the per-workspace counters; `span`
/// to the publish's span once the envelope is parsed (what fails before has no trace to join).
async fn publish_inner(
    app: &App,
    headers: &HeaderMap,
    body: &[u8],
    workspace: &mut Option<String>,
    span: &mut Span,
) -> ApiResult<(StatusCode, api::Receipt)> {
    // 1. Bearer.
    let agent = match bearer(app, headers).await? {
        Principal::Agent(a) => a,
        Principal::User(_) => {
            return Err(ApiError::new(
                Code::NotPermitted,
                "publish with the agent's own credential, not a user token",
            ));
        }
    };
    *workspace = Some(agent.workspace_id.clone());
    if body.len() > MAX_ENVELOPE_BYTES {
        return Err(ApiError::new(
            Code::EnvelopeTooLarge,
            format!("the envelope is {} bytes; the limit is 1 MiB", body.len()),
        ));
    }
    let env = Envelope::parse(body).map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    if app.tracer.is_on() {
        *span = publish_span(app, &env, &agent, body.len());
        span.event("authenticated", Vec::new());
    }
    // 2. source.
    let source = env.source().ok_or_else(|| missing(&env, "source"))?;
    let my_address = app.address_of(&agent).await?;
    if source != my_address {
        return Err(ApiError::new(
            Code::SourceMismatch,
            format!("source {source:?} is not your address {my_address}"),
        ));
    }
    span.event("source_checked", Vec::new());
    // 3. Key.
    let sig =
        signing::envelope_sig(env.attrs()).map_err(|e| ApiError::new(e.code(), e.to_string()))?;
    let now = app.now();
    let key_id = sig.key_id.to_string();
    let key = app
        .agent_keys(&agent.id)
        .await?
        .into_iter()
        .find(|k| k.id == key_id && k.is_active(now))
        .ok_or_else(|| {
            ApiError::new(
                Code::UnknownKey,
                format!("{} is not an active key of {my_address}", sig.key_id),
            )
        })?;
    let public = app
        .public_key(&key)
        .ok_or_else(|| ApiError::new(Code::UnknownKey, "the registered key is unusable"))?;
    // 4. Signature over the recomputed canonical bytes.
    let signed = signing::signing_bytes(env.attrs())
        .map_err(|e| ApiError::new(Code::MalformedJson, e.to_string()))?;
    if !public.verify(&signed, &sig.signature) {
        return Err(ApiError::new(
            Code::BadSignature,
            "the signature does not verify over the canonical envelope bytes",
        ));
    }
    span.event("signature_verified", Vec::new());
    let signed_hash = Sha256::digest(&signed).to_vec();
    // 5. Clock skew.
    let time = env.str_attr("time").ok_or_else(|| missing(&env, "time"))?;
    let time: Timestamp =
        time.parse()
            .map_err(|e: agentbus_protocol::timestamp::TimestampError| {
                ApiError::new(Code::InvalidAttribute, format!("`time`: {e}"))
            })?;
    let skew = (time.millis() - now).abs();
    if skew > app.config.max_skew_s * 1000 {
        return Err(ApiError::new(
            Code::ClockSkew,
            format!(
                "`time` is {} s from the gateway clock; at most {} s",
                skew / 1000,
                app.config.max_skew_s
            ),
        ));
    }
    span.event("clock_checked", Vec::new());
    // 6. Replay window, and idempotent replay. The authoritative check runs inside the storing
    // transaction (a repeat comes back as `DuplicateId`), so an accepted publish pays no read for
    // it here; only when a later check refuses the envelope is the window consulted first, so a
    // repeat still answers as a repeat whatever changed since (§3.2 puts this check before them).
    let id = env.id().ok_or_else(|| missing(&env, "id"))?.to_owned();
    let idem_key = env.idempotency_key().map(str::to_owned);
    let replay_since = now - app.config.replay_window_s * 1000;
    let source = source.to_owned();
    let checked = Checked {
        agent: &agent,
        source: &source,
        my_address: &my_address,
        id: &id,
        idem_key: idem_key.as_deref(),
        signed_hash: &signed_hash,
        now,
        replay_since,
        received_bytes: body.len(),
    };
    match store_checked(app, &checked, env, span).await {
        Err(e) if (400..500).contains(&e.code.http_status()) => {
            match app
                .store
                .recent_message(&agent.tenant_id, &source, &id, replay_since)
                .await?
            {
                Some(existing) => replayed(existing, &signed_hash, idem_key.as_deref()),
                None => Err(e),
            }
        }
        other => other,
    }
}

/// What steps 1–5 established about an envelope.
struct Checked<'a> {
    agent: &'a AgentRow,
    source: &'a str,
    my_address: &'a str,
    id: &'a str,
    idem_key: Option<&'a str>,
    signed_hash: &'a [u8],
    now: i64,
    replay_since: i64,
    received_bytes: usize,
}

/// Steps 6 (idempotency key) to 13, then the store, which re-checks the replay window and the
/// inbox depth inside its transaction.
async fn store_checked(
    app: &App,
    c: &Checked<'_>,
    env: Envelope,
    span: &mut Span,
) -> ApiResult<(StatusCode, api::Receipt)> {
    let (agent, now) = (c.agent, c.now);
    let early_route = resolve(app, agent, env.to().unwrap_or_default()).await;
    let idempotency = match (c.idem_key, &early_route) {
        (Some(k), Ok(r)) => Some(IdempotencyKey {
            tenant_id: agent.tenant_id.clone(),
            source: c.source.to_owned(),
            to_id: r.to_id.clone(),
            key: k.to_owned(),
        }),
        _ => None,
    };
    let idempotency_since = now - app.config.idempotency_window_s * 1000;
    if let Some(k) = &idempotency
        && let Some(existing) = app.store.idempotent_message(k, idempotency_since).await?
    {
        return Ok((StatusCode::OK, receipt_body(&existing)));
    }
    // 7. Schema and limits. Sender-supplied gateway attributes are overwritten, never trusted.
    let mut env = env;
    env.strip_gateway_attrs();
    let violations = env.validate(ValidateOptions {
        received_bytes: Some(c.received_bytes),
        ..ValidateOptions::default()
    });
    if !violations.is_empty() {
        return Err(ApiError::with_violations(violations));
    }
    span.event("schema_checked", Vec::new());
    // 8. Resolution.
    let route = early_route?;
    span.event(
        "routed",
        vec![KeyValue::new(
            sc::MESSAGING_BATCH_COUNT,
            route.recipients.len() as i64,
        )],
    );
    // 9. Policy.
    check_policy(app, c.my_address, &route).await?;
    span.event("policy_allowed", Vec::new());
    // 10. Rate limit.
    app.rate_limit(&agent.id)?;
    // 11. Inbox depth: checked by the store inside the transaction that would add the entry
    // (`max_depth` below), so it holds under concurrent publishers too.
    // 12. Attachments.
    let blob_refs = crate::blobs::check_attachments(app, agent, env.data()).await?;
    // 13. Tasks (§6.2): the record a task.request creates, or the transition a lifecycle message
    // makes; refusals (AB-2004, AB-4020, AB-4012, AB-3017) store nothing.
    let single = (route.recipients.len() == 1
        && !env.to().unwrap_or_default().starts_with("topic://"))
    .then(|| &route.recipients[0]);
    let task = crate::tasks::effect(app, agent, &env, single, now).await?;
    // Kept to decide the message again should its task change under it (`store_deciding_again`).
    let again =
        matches!(task.as_ref().map(|t| &t.write), Some(TaskWrite::Update(..))).then(|| env.clone());
    // Persist.
    let receipt = app.mint(IdKind::Receipt);
    let expires_at = env
        .expires_at()
        .map(|t| t.millis())
        .unwrap_or(now + app.config.default_expiry_s * 1000);
    let trace = env
        .str_attr("traceparent")
        .map(trace_id)
        .unwrap_or_default()
        .to_owned();
    let mut attrs = env.into_map();
    let data = attrs.shift_remove("data").unwrap_or(Value::Null);
    for name in GATEWAY_SET {
        attrs.shift_remove(*name);
    }
    let usage = crate::usage::row(
        agent,
        &attrs,
        &data,
        task.as_ref()
            .map(|t| (t.task_id.as_str(), t.write.capability())),
        now,
    );
    attrs.insert("tenant".into(), json!(agent.tenant_id));
    attrs.insert("workspace".into(), json!(agent.workspace_id));
    attrs.insert("received_at".into(), json!(Timestamp(now).to_string()));
    attrs.insert("receipt".into(), json!(receipt));
    let key = app.tenant_key(&agent.tenant_id).await?;
    // Indexed in the publish's own transaction, as keyed hashes (`crate::search`), unless the
    // operator turned the index off.
    let search_tags = match app.config.search_index {
        true => crate::search::index_tags(&key, &attrs, &data),
        false => String::new(),
    };
    let s = |name: &str| attrs.get(name).and_then(Value::as_str).map(str::to_owned);
    let msg = NewMessage {
        tenant_id: agent.tenant_id.clone(),
        id: c.id.to_owned(),
        source: source_owned(&attrs),
        source_agent_id: Some(agent.id.clone()),
        kind: s("type").unwrap_or_default(),
        conversation_id: s("conversation_id").unwrap_or_default(),
        correlation_id: s("correlation_id"),
        to_text: s("to").unwrap_or_default(),
        to_id: route.to_id.clone(),
        attrs: Value::Object(attrs).to_string(),
        data: key.seal(data.to_string().as_bytes()),
        signed_hash: c.signed_hash.to_vec(),
        idempotency,
        receipt,
        received_at: now,
        expires_at,
        task_id: task.as_ref().map(|t| t.task_id.clone()),
        task: task.as_ref().map(|t| t.write.clone()),
        recipients: route.recipients.iter().map(|r| r.id.clone()).collect(),
        blob_refs,
        replay_since: c.replay_since,
        idempotency_since,
        max_depth: Some(app.config.inbox_max_depth),
        usage,
        notice_of: None,
        search_tags,
    };
    let (stored, task) =
        store_deciding_again(app, agent, again.as_ref(), single, msg, task).await?;
    // What the message did to its task, for the receipt: a late or ignored lifecycle message is
    // stored and recorded (§6.3, G-WP-7) but changed nothing, and its sender is told so.
    let task_outcome = task.map(|t| match t.write {
        TaskWrite::Create(row, ev) | TaskWrite::Update(row, _, ev) => (row.state, ev.flag),
    });
    match stored {
        PublishOutcome::Stored {
            message,
            sequences,
            depths,
        } => {
            for ((agent_id, _), depth) in sequences.iter().zip(depths) {
                crate::metrics::set_depth(agent_id, depth);
            }
            app.wake(route.recipients.iter().map(|r| r.id.as_str()));
            held_for_suspended(app, &route, &message, &sequences).await;
            let mut body = receipt_with_trace(&message, &trace);
            if let Some((state, flag)) = task_outcome {
                body.task_state = Some(state.to_string());
                body.late = Some(flag.as_deref() == Some("late"));
                body.ignored = Some(flag.as_deref() == Some("ignored"));
            }
            Ok((StatusCode::ACCEPTED, body))
        }
        PublishOutcome::DuplicateId(existing) => replayed(existing, c.signed_hash, c.idem_key),
        PublishOutcome::IdempotentReplay(existing) => Ok((StatusCode::OK, receipt_body(&existing))),
        PublishOutcome::InboxFull { agent_id, depth } => {
            crate::metrics::set_depth(&agent_id, depth);
            let name = route
                .recipients
                .iter()
                .find(|r| r.id == agent_id)
                .map_or(agent_id.as_str(), |r| r.name.as_str());
            let mut e = ApiError::new(
                Code::InboxFull,
                format!("the inbox of {name} holds {depth} unacknowledged messages"),
            );
            e.retry_after = Some(5);
            Err(e)
        }
    }
}

/// Stores `msg` with its task's change. A lifecycle message (`env`, kept for this) whose task
/// another replica changed between this gateway's read and its write (each replica's task lock
/// covers only its own requests; the store's version check catches the rest) is decided again on
/// the task as it is now (§6.2, §6.3), up to [`crate::tasks::DECIDE_TRIES`] times, and then
/// answers AB-9010 with nothing stored. Returns the task effect that was stored, holding its lock.
async fn store_deciding_again(
    app: &App,
    agent: &AgentRow,
    env: Option<&Envelope>,
    single: Option<&AgentRow>,
    mut msg: NewMessage,
    mut task: Option<crate::tasks::TaskEffect>,
) -> ApiResult<(PublishOutcome, Option<crate::tasks::TaskEffect>)> {
    let Some(env) = env else {
        return Ok((app.store.publish(msg).await?, task));
    };
    for tried in 1..=crate::tasks::DECIDE_TRIES {
        match app.store.publish(msg.clone()).await {
            Err(StoreError::Conflict(_)) if tried < crate::tasks::DECIDE_TRIES => {}
            Err(StoreError::Conflict(_)) => break,
            stored => return Ok((stored?, task)),
        }
        // Released first: deciding again takes the task's lock. Decided at the time it is
        // decided, so the task's timeline never goes back in time behind the other change.
        drop(task);
        task = crate::tasks::effect(app, agent, env, single, app.now()).await?;
        msg.task = task.as_ref().map(|t| t.write.clone());
    }
    Err(crate::tasks::kept_changing(
        msg.task_id.as_deref().unwrap_or_default(),
    ))
}

/// §5.9: a copy stored for a suspended recipient is held in its inbox, and the sender is told so
/// (`system.undeliverable`, AB-4013, not dead-lettered). The store decides which copies are held,
/// in the storing transaction, and marks their notices owed ([`NewMessage::recipients`]); this
/// sends at once those of the recipients the route read suspended. A notice this does not send
/// (it fails, or the route read the agent live before a suspension that the store saw) goes with
/// the reaper's next pass; one for a copy the store did not hold (the route read a suspension
/// lifted since) stores nothing. The publish, which is stored, is answered all the same.
async fn held_for_suspended(
    app: &App,
    route: &Route,
    message: &MessageRow,
    sequences: &[(String, u64)],
) {
    for r in route.recipients.iter().filter(|r| r.suspended_at.is_some()) {
        let Some((_, sequence)) = sequences.iter().find(|(id, _)| *id == r.id) else {
            continue;
        };
        let entry = InboxEntry {
            agent_id: r.id.clone(),
            sequence: *sequence,
            state: EntryState::Ready,
            attempts: 0,
            last_attempt_at: None,
            message: message.clone(),
        };
        if let Err(e) = app.owed_entry_notice(&entry, NoticeKind::Held).await {
            tracing::warn!(agent = %r.id, code = %e.code(), error = %e.message(), "a held message's notice was not sent; the reaper's next pass sends it");
        }
    }
}

fn source_owned(attrs: &Map<String, Value>) -> String {
    attrs
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A repeated `(source, id)`: the identical signed bytes, or a matching idempotency key, get the
/// original receipt (decision 4); anything else is AB-3006.
fn replayed(
    existing: MessageRow,
    signed_hash: &[u8],
    idem_key: Option<&str>,
) -> ApiResult<(StatusCode, api::Receipt)> {
    if existing.signed_hash == signed_hash
        || (idem_key.is_some() && existing.idempotency_key.as_deref() == idem_key)
    {
        return Ok((StatusCode::OK, receipt_body(&existing)));
    }
    Err(ApiError::new(
        Code::DuplicateId,
        format!(
            "{} was already published by this source with different content",
            existing.id
        ),
    ))
}

/// Resolves `to` within the sender's tenant (§4.2). Other tenants answer exactly as unknown.
async fn resolve(app: &App, sender: &AgentRow, to: &str) -> ApiResult<Route> {
    let unknown = || ApiError::new(Code::UnknownAgent, format!("no agent {to}"));
    let addr: Address = to
        .parse()
        .map_err(|e: agentbus_protocol::address::AddressError| {
            ApiError::new(Code::InvalidAddress, e.to_string())
        })?;
    let tenant = app
        .tenant_row(&sender.tenant_id)
        .await?
        .ok_or_else(unknown)?;
    let live = |a: AgentRow| -> ApiResult<AgentRow> {
        if a.deleted_at.is_some() {
            Err(ApiError::new(
                Code::AgentDeleted,
                format!("{to} was deleted"),
            ))
        } else {
            Ok(a)
        }
    };
    match addr {
        Address::Agent(a) => {
            if a.tenant != tenant.slug {
                return Err(unknown());
            }
            let ws = app
                .workspace_by_slug(&tenant.id, &a.workspace)
                .await?
                .ok_or_else(unknown)?;
            let agent = live(
                app.agent_by_name(&ws.id, &a.name)
                    .await?
                    .ok_or_else(unknown)?,
            )?;
            Ok(Route {
                to_id: agent.id.clone(),
                address: format!("agent://{}/{}/{}", tenant.slug, ws.slug, agent.name),
                workspace_id: agent.workspace_id.clone(),
                recipients: vec![agent],
            })
        }
        Address::AgentId(id) => {
            let agent = app
                .agent_row(&id.to_string())
                .await?
                .filter(|a| a.tenant_id == sender.tenant_id)
                .ok_or_else(unknown)?;
            let agent = live(agent)?;
            Ok(Route {
                to_id: agent.id.clone(),
                address: app.address_of(&agent).await?,
                workspace_id: agent.workspace_id.clone(),
                recipients: vec![agent],
            })
        }
        Address::Topic(t) => {
            let unknown_topic = || ApiError::new(Code::UnknownTopic, format!("no topic {to}"));
            if t.tenant != tenant.slug {
                return Err(unknown_topic());
            }
            let ws = app
                .workspace_by_slug(&tenant.id, &t.workspace)
                .await?
                .ok_or_else(unknown_topic)?;
            if ws.id != sender.workspace_id {
                return Err(ApiError::new(
                    Code::TopicScope,
                    "topics are workspace-scoped: publish to your own workspace's topics",
                ));
            }
            let (topic, subscribers) = app
                .store
                .topic(&ws.id, &t.topic)
                .await?
                .ok_or_else(unknown_topic)?;
            let mut recipients = Vec::new();
            for id in subscribers {
                // G-WP-35: the publisher gets no copy of its own topic message.
                if id == sender.id {
                    continue;
                }
                if let Some(a) = app.agent_row(&id).await?.filter(|a| a.deleted_at.is_none()) {
                    recipients.push(a);
                }
            }
            Ok(Route {
                to_id: topic.id,
                address: format!("topic://{}/{}/{}", tenant.slug, ws.slug, t.topic),
                recipients,
                workspace_id: ws.id,
            })
        }
    }
}

/// §4.2, after resolution: the recipient workspace's policy (`crate::policy`) decides on the
/// sender's and the recipient's canonical addresses, so an alias or an `agt_` id is matched like
/// the name it stands for.
async fn check_policy(app: &App, from: &str, route: &Route) -> ApiResult<()> {
    let policy = app
        .policy_of_workspace(&route.workspace_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    match policy.decide(from, &route.address) {
        crate::policy::Effect::Allow => Ok(()),
        crate::policy::Effect::Deny => Err(ApiError::new(
            Code::PolicyDenied,
            format!("policy does not allow {from} to message {}", route.address),
        )),
    }
}
