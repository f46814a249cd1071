//! The directory (`GET /v1/agents` as the viewer would read it), an agent's card with its keys,
//! presence and queue depth, and suspension (§5.9) for the admins whose scope covers it.

use askama::Template;
use axum::extract::{Path, RawForm};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use agentbus_gateway::ops::{self, ApiResult, ListQuery};
use agentbus_protocol::Code;

use super::{conversations, tasks};
use crate::render::{self, Addr, Chrome, page};
use crate::session::Viewer;

/// One agent as the pages show it, read from its card as the API writes it.
pub(crate) struct AgentView {
    pub id: String,
    pub display_name: String,
    pub address: Addr,
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
    /// The harness the card names, field by field (`name`, `version`, …).
    pub harness: Vec<(String, String)>,
    /// What else the card's status says, field by field.
    pub status: Vec<(String, String)>,
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

/// The fields of a card's object as (name, text) pairs, those in `known` left out (the page
/// shows them apart): a nested value is written as compact JSON, never as a dump of the object.
fn fields(v: &Value, known: &[&str]) -> Vec<(String, String)> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, x)| !known.contains(&k.as_str()) && !x.is_null())
                .map(|(k, _)| (render::peer(k), text(v, k)))
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
        address: Addr::of(card["address"].as_str().unwrap_or(&a.address)),
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
        harness: fields(&card["harness"], &[]),
        status: fields(
            status,
            &["presence", "last_heartbeat_at", "queue_depth", "suspended"],
        ),
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

/// A conversation the agent took part in, as its page lists it.
struct ConversationRow {
    id: String,
    title: String,
    messages: u64,
    last_at: String,
}

#[derive(Template)]
#[template(path = "agent.html")]
struct OnePage<'a> {
    chrome: Option<&'a Chrome>,
    a: AgentView,
    /// Its recent tasks, as requester or worker; `None` when the viewer reads no task lists.
    tasks: Option<Vec<tasks::Row>>,
    /// Its recent conversations; `None` when the viewer reads no conversations.
    conversations: Option<Vec<ConversationRow>>,
}

/// Tasks and conversations an agent's page lists.
const RECENT: usize = 10;

/// What a list read answers a viewer whose role does not read such lists (a member): nothing to
/// show rather than a refused page, since the card itself is theirs to read.
fn unless_refused<T>(r: ApiResult<T>) -> ApiResult<Option<T>> {
    match r {
        Ok(x) => Ok(Some(x)),
        Err(e) if e.code == Code::NotPermitted => Ok(None),
        Err(e) => Err(e),
    }
}

/// The agent's most recent tasks, as requester or as worker, newest first.
async fn recent_tasks(v: &Viewer, a: &ops::AgentView) -> ApiResult<Option<Vec<tasks::Row>>> {
    let of = |requester: bool| ListQuery {
        requester: requester.then(|| a.id.clone()),
        recipient: (!requester).then(|| a.id.clone()),
        limit: Some(RECENT as u32),
        ..ListQuery::default()
    };
    let Some(mut list) = unless_refused(v.ops().task_list(&of(true)).await)? else {
        return Ok(None);
    };
    for t in v.ops().task_list(&of(false)).await? {
        if !list.iter().any(|x| x.task.id == t.task.id) {
            list.push(t);
        }
    }
    list.sort_by(|x, y| (y.task.created_at, &y.task.id).cmp(&(x.task.created_at, &x.task.id)));
    list.truncate(RECENT);
    let mut rows = Vec::with_capacity(list.len());
    for t in &list {
        rows.push(tasks::row(v, t).await?);
    }
    Ok(Some(rows))
}

/// The agent's most recently active conversations among those the viewer may read.
async fn recent_conversations(
    v: &Viewer,
    a: &ops::AgentView,
) -> ApiResult<Option<Vec<ConversationRow>>> {
    let Some(list) = unless_refused(v.ops().conversations(None, 50).await)? else {
        return Ok(None);
    };
    Ok(Some(
        list.iter()
            .filter(|c| c.participants.contains(&a.address))
            .take(RECENT)
            .map(|c| ConversationRow {
                id: c.id.clone(),
                title: conversations::title(c),
                messages: c.messages,
                last_at: render::time(c.last_at),
            })
            .collect(),
    ))
}

/// `GET /console/agents/{id}`: the card (harness, capabilities, presence), keys and depth of an
/// agent the viewer may see, with its recent tasks and conversations.
pub(crate) async fn one(v: Viewer, Path(id): Path<String>) -> Response {
    let r = async {
        let a = v.ops().agent(&id).await?;
        page(&OnePage {
            chrome: Some(&v.chrome),
            tasks: recent_tasks(&v, &a).await?,
            conversations: recent_conversations(&v, &a).await?,
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
