//! Agent cards in the A2A form (§10: "A2A-compatible so an A2A client can consume it with a field
//! mapping"), for A2A 1.0's `AgentCard`.
//!
//! The mapping (§10, checklist WP-10-5 and G-WP-31): `name`, `description` and `capabilities[]`
//! become `name`, `description` and `skills[]` (input and output modes `application/json`, plus
//! the media types a capability accepts as attachments); the agent's endpoint on this gateway
//! (`<public url>/v1/agents/<id>`) is the interface `url` (and the top-level `url` older A2A
//! clients read), and the `agent://` address, which is not an HTTP URL, rides in an AgentBus
//! extension with everything an A2A card has no field for (schemas, aliases, visibility).
//!
//! The gateway does not speak A2A's JSON-RPC or HTTP+JSON bindings: the interface declares the
//! AgentBus binding, so an A2A client discovers the agent and reaches it through AgentBus.
//!
//! Routes:
//! - `GET /v1/agents/{id}/a2a`: with a credential, under the directory's visibility rules;
//! - `GET /v1/agents/{id}/.well-known/agent-card.json`: A2A discovery (the well-known path under
//!   the agent's URL, where an A2A card resolver looks). Without a credential only a card whose
//!   visibility is `public` is served; anything else answers exactly like an unknown agent.

use std::sync::Arc;

use crate::extract::{Json, Path};
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use agentbus_api as api;

use agentbus_protocol::Code;
use agentbus_store::Store;

use crate::access::bearer;
use crate::error::{ApiError, ApiResult};
use crate::identity::{card_body, visible_agent};
use crate::state::App;

/// The A2A extension that carries what A2A's card has no field for.
pub const EXTENSION_URI: &str = "https://komsary.agentbus.exchange/a2a/agentbus/v1";
/// The protocol binding the interface declares: AgentBus Wire Protocol v1, not an A2A binding.
pub const BINDING: &str = "AGENTBUS";

/// Maps a full card to an A2A `AgentCard`; `base` is the gateway's public URL. The A2A card is
/// A2A's document, not a body of this API, so it stays a JSON value.
pub fn to_a2a(card: &api::Card, tenant: &str, base: &str) -> Value {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let url = format!("{base}/v1/agents/{}", card.id);
    let tags = &card.tags;
    let capabilities = &card.capabilities;
    let skills: Vec<Value> = capabilities
        .iter()
        .map(|c| {
            let name = s(&c["name"]);
            let version = c["version"].as_str().unwrap_or("1");
            let mut input = vec![json!("application/json")];
            for m in c["accepts_attachments"].as_array().into_iter().flatten() {
                if !input.contains(m) {
                    input.push(m.clone());
                }
            }
            let mut skill_tags = vec![json!(name)];
            skill_tags.extend(tags.iter().cloned());
            json!({
                "id": format!("{name}/v{version}"),
                "name": name,
                "description": c["description"].as_str().unwrap_or(""),
                "tags": skill_tags,
                "inputModes": input,
                "outputModes": ["application/json"],
            })
        })
        .collect();
    let schemas: Vec<Value> = capabilities
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "version": c["version"],
                "input_schema": c["input_schema"], "output_schema": c["output_schema"],
                "accepts_attachments": c["accepts_attachments"], "typical_duration_s": c["typical_duration_s"],
            })
        })
        .collect();
    json!({
        "name": card.name,
        "description": card.description,
        "version": card.updated_at,
        "url": url,
        "supportedInterfaces": [{"url": url, "protocolBinding": BINDING, "protocolVersion": "1"}],
        "provider": {"organization": tenant, "url": base},
        "documentationUrl": format!("{base}/v1/openapi.json"),
        "capabilities": {
            "streaming": false,
            "pushNotifications": false,
            "extensions": [{
                "uri": EXTENSION_URI,
                "description": "Reached through AgentBus: sign envelopes (wire protocol §3) and POST them to `messages`; `address` is the agent's agent:// address.",
                "required": true,
                "params": {
                    "address": card.address,
                    "id": card.id,
                    "display_name": card.display_name,
                    "aliases": card.aliases,
                    "visibility": card.visibility,
                    "gateway": base,
                    "messages": format!("{base}/v1/messages"),
                    "capabilities": schemas,
                },
            }],
        },
        "securitySchemes": {"agentbus": {"httpAuthSecurityScheme": {
            "scheme": "bearer",
            "description": "An AgentBus agent credential (aba_…); every message is a signed envelope.",
        }}},
        "securityRequirements": [{"schemes": {"agentbus": {"list": []}}}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills,
    })
}

async fn a2a_of(app: &App, a: &agentbus_store::AgentRow) -> ApiResult<Value> {
    let card = card_body(app, a).await?;
    let tenant = app
        .tenant_row(&a.tenant_id)
        .await?
        .map(|t| t.slug)
        .unwrap_or_default();
    let base = app.config.public_url.trim_end_matches('/');
    Ok(to_a2a(&card, &tenant, base))
}

/// `GET /v1/agents/{id}/a2a`: the card of an agent the caller may see, in the A2A form.
pub async fn card(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let who = bearer(&app, &headers).await?;
    let a = visible_agent(&app, &who, &id).await?;
    if a.deleted_at.is_some() {
        return Err(ApiError::new(
            Code::AgentDeleted,
            format!("agent {id} was deleted"),
        ));
    }
    Ok(Json(a2a_of(&app, &a).await?))
}

/// `GET /v1/agents/{id}/.well-known/agent-card.json`: A2A discovery. A caller with a credential
/// gets what `/a2a` gives it; without one, only a live card of visibility `public` whose agent and
/// tenant are not suspended, and only when the gateway serves public discovery.
pub async fn well_known(
    state: State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    if headers.contains_key(axum::http::header::AUTHORIZATION) {
        return card(state, headers, Path(id)).await;
    }
    let State(app) = state;
    let a = app
        .store
        .agent(&id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let a = crate::identity::public_agent(&app, a).await?;
    Ok(Json(a2a_of(&app, &a).await?))
}
