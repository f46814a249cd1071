//! The directory (`GET /v1/agents` as the viewer would read it), an agent's card with its keys,
//! presence and queue depth, and suspension (§5.9) for the admins whose scope covers it.

use askama::Template;
use axum::extract::{Path, RawForm};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use agentbus_gateway::ops::{self, ApiResult};

use crate::render::{self, Chrome, page};
use crate::session::Viewer;

/// One agent as the pages show it, read from its card as the API writes it.
pub(crate) struct AgentView {
    pub id: String,
    pub display_name: String,
    pub address: String,
    pub workspace: String,
    pub description: String,
    pub visibility: String,
    pub presence: String,
    pub last_seen: String,
    pub depth: i64,
    pub keys_active: usize,
    pub keys_revoked: usize,
    pub suspended: bool,
    pub suspended_at: String,
    pub capabilities: Vec<CapabilityView>,
    pub tags: Vec<String>,
    pub aliases: Vec<String>,
    pub keys: Vec<KeyView>,
    pub harness: String,
    pub status: String,
    pub owner: String,
    pub created_at: String,
    /// Whether the viewer administers the agent's workspace (suspend, resume).
    pub administered: bool,
}

/// A declared capability (§10).
pub(crate) struct CapabilityView {
    pub name: String,
    pub version: String,
    pub description: String,
    pub input_schema: String,
    pub output_schema: String,
}

/// A registered key (§3.3; revoked ones stay listed, decision 7).
pub(crate) struct KeyView {
    pub id: String,
    pub created_at: String,
    pub expires_at: String,
    pub revoked_at: String,
    pub state: &'static str,
}

fn text(v: &Value, k: &str) -> String {
    match &v[k] {
        Value::String(s) => render::peer(s),
        Value::Null => String::new(),
        other => render::peer(&other.to_string()),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| render::peer(&x.as_str().map_or_else(|| x.to_string(), str::to_owned)))
                .collect()
        })
        .unwrap_or_default()
}

/// An agent's view from its card (`Caller::card`, exactly what the API answers).
pub(crate) async fn view(v: &Viewer, a: &ops::AgentView) -> ApiResult<AgentView> {
    let card = v.ops().card(a).await?;
    let now = v.console.app.now();
    let keys: Vec<KeyView> = card["keys"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|k| {
                    let revoked = !k["revoked_at"].is_null();
                    let expired = k["expires_at"]
                        .as_str()
                        .and_then(|t| t.parse::<agentbus_protocol::timestamp::Timestamp>().ok())
                        .is_some_and(|t| t.millis() <= now);
                    KeyView {
                        id: text(k, "id"),
                        created_at: render::time_text(&text(k, "created_at")),
                        expires_at: render::time_text(&text(k, "expires_at")),
                        revoked_at: render::time_text(&text(k, "revoked_at")),
                        state: if revoked {
                            "revoked"
                        } else if expired {
                            "expired"
                        } else {
                            "active"
                        },
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let capabilities = card["capabilities"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|c| CapabilityView {
                    name: text(c, "name"),
                    version: text(c, "version"),
                    description: text(c, "description"),
                    input_schema: c
                        .get("input_schema")
                        .map(render::pretty)
                        .unwrap_or_default(),
                    output_schema: c
                        .get("output_schema")
                        .map(render::pretty)
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let workspace = v
        .ops()
        .workspace_label(&a.workspace_id)
        .await?
        .unwrap_or_default();
    let status = &card["status"];
    Ok(AgentView {
        id: a.id.clone(),
        display_name: text(&card, "display_name"),
        address: text(&card, "address"),
        workspace,
        description: text(&card, "description"),
        visibility: a.visibility.clone(),
        presence: text(status, "presence"),
        last_seen: render::time_text(&text(status, "last_heartbeat_at")),
        depth: status["queue_depth"].as_i64().unwrap_or(0),
        keys_active: keys.iter().filter(|k| k.state == "active").count(),
        keys_revoked: keys.iter().filter(|k| k.state == "revoked").count(),
        suspended: a.suspended_at.is_some(),
        suspended_at: a.suspended_at.map(render::time).unwrap_or_default(),
        capabilities,
        tags: strings(&card["tags"]),
        aliases: strings(&card["aliases"]),
        keys,
        harness: render::pretty(&card["harness"]),
        status: render::pretty(status),
        owner: text(&card, "owner"),
        created_at: render::time_text(&text(&card, "created_at")),
        administered: v.ops().administers(&a.tenant_id, &a.workspace_id),
    })
}

#[derive(Template)]
#[template(path = "agents.html")]
struct ListPage<'a> {
    chrome: Option<&'a Chrome>,
    agents: Vec<AgentView>,
}

/// `GET /console/agents`: the directory as the viewer may see it.
pub(crate) async fn list(v: Viewer) -> Response {
    let r = async {
        let mut agents = Vec::new();
        for a in v.ops().directory().await? {
            agents.push(view(&v, &a).await?);
        }
        page(&ListPage {
            chrome: Some(&v.chrome),
            agents,
        })
    }
    .await;
    v.respond(r)
}

#[derive(Template)]
#[template(path = "agent.html")]
struct OnePage<'a> {
    chrome: Option<&'a Chrome>,
    a: AgentView,
}

/// `GET /console/agents/{id}`: the card, keys, presence and depth of an agent the viewer may see.
pub(crate) async fn one(v: Viewer, Path(id): Path<String>) -> Response {
    let r = async {
        let a = v.ops().agent(&id).await?;
        page(&OnePage {
            chrome: Some(&v.chrome),
            a: view(&v, &a).await?,
        })
    }
    .await;
    v.respond(r)
}

async fn set(v: Viewer, headers: HeaderMap, id: String, body: &[u8], suspend: bool) -> Response {
    super::change(&v, &headers, body, |_| async {
        let a = v.ops().set_agent_suspended(&id, suspend).await?;
        super::back(&format!("/console/agents/{}", a.id))
    })
    .await
}

/// `POST /console/agents/{id}/suspend` `csrf`: `POST /v1/agents/{id}/suspend`'s function.
pub(crate) async fn suspend(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    set(v, headers, id, &body, true).await
}

/// `POST /console/agents/{id}/resume` `csrf`: `POST /v1/agents/{id}/resume`'s function.
pub(crate) async fn resume(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    set(v, headers, id, &body, false).await
}
