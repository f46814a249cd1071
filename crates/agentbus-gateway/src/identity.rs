//! Tenants, workspaces, users, agents and their cards (§10), keys (§3.3) and topics (§4.4).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use agentbus_api as api;

use agentbus_protocol::Code;
use agentbus_protocol::address::{is_slug, is_topic_name};
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing::PublicKey;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;

use crate::access::bearer;
use crate::auth::{new_token, token_hash};
use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::extract::{Json, Path};
use crate::roles::administers;
use crate::state::{App, Principal};

/// Card fields a PATCH may change (§10); `id`, `name` and `address` never change (§4.1).
const EDITABLE: &[&str] = &[
    "display_name",
    "description",
    "aliases",
    "visibility",
    "capabilities",
    "tags",
    "harness",
    "pricing",
    "status",
];
const IMMUTABLE: &[&str] = &["id", "name", "address", "owner", "created_at", "updated_at"];
const MAX_ALIASES: usize = 5;
const MAX_ACTIVE_KEYS: usize = 3;

/// A request body that must be one JSON object (AB-3001 when it is not I-JSON).
pub(crate) fn body_object(body: &[u8]) -> ApiResult<Map<String, Value>> {
    match agentbus_protocol::json::parse(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::new(
            Code::InvalidRequest,
            "the body must be a JSON object",
        )),
        Err(e) => Err(ApiError::new(Code::MalformedJson, e.to_string())),
    }
}

/// A body object, checked field by field already, read as its `agentbus_api` type: the checks
/// decide each refusal's code (AB-3015 for a malformed slug, AB-3025 for a bad declaration), the
/// type what the handler reads.
pub(crate) fn typed<T: serde::de::DeserializeOwned>(b: Map<String, Value>) -> ApiResult<T> {
    serde_json::from_value(Value::Object(b))
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("the body: {e}")))
}

/// Checked card fields: the stored card object, new aliases, new visibility.
type CardChange = (Map<String, Value>, Option<Vec<String>>, Option<String>);

/// Validates card fields (§10); returns the stored card object and aliases.
fn check_card(fields: &Map<String, Value>, registering: bool) -> ApiResult<CardChange> {
    let mut card = Map::new();
    let mut aliases = None;
    let mut visibility = None;
    for (k, v) in fields {
        match k.as_str() {
            "aliases" => {
                let list: Vec<String> = v
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                if !v.is_array() || list.len() != v.as_array().map_or(0, Vec::len) {
                    return Err(ApiError::new(
                        Code::InvalidRequest,
                        "`aliases` is an array of names",
                    ));
                }
                if list.len() > MAX_ALIASES {
                    return Err(ApiError::new(
                        Code::TooManyAliases,
                        format!("{} aliases; at most {MAX_ALIASES} (§4.3)", list.len()),
                    ));
                }
                if let Some(bad) = list.iter().find(|a| !is_slug(a)) {
                    return Err(ApiError::new(
                        Code::InvalidAddress,
                        format!("alias {bad:?} must be 3-40 characters of a-z, 0-9 and '-'"),
                    ));
                }
                // Listed twice, it would be refused as taken (by itself): say what is wrong.
                if let Some((_, twice)) = list
                    .iter()
                    .enumerate()
                    .find(|(i, a)| list[..*i].contains(a))
                {
                    return Err(ApiError::new(
                        Code::InvalidRequest,
                        format!("alias {twice:?} is listed twice in `aliases`"),
                    ));
                }
                aliases = Some(list);
            }
            "visibility" => match v.as_str() {
                Some(s @ ("private" | "workspace" | "tenant" | "public")) => {
                    visibility = Some(s.to_owned())
                }
                _ => {
                    return Err(ApiError::new(
                        Code::InvalidRequest,
                        "`visibility` is private, workspace, tenant or public (§10)",
                    ));
                }
            },
            "pricing" => {
                if v != &json!({"model": "free"}) {
                    return Err(ApiError::new(
                        Code::InvalidRequest,
                        "only {\"model\": \"free\"} pricing is accepted in v1 (§10)",
                    ));
                }
                card.insert(k.clone(), v.clone());
            }
            "capabilities" => {
                // §10: a declaration is a contract requests are checked against (§5.2).
                crate::capabilities::check_declarations(v).map_err(ApiError::with_violations)?;
                card.insert(k.clone(), v.clone());
            }
            "display_name" | "description" | "tags" | "harness" | "status" => {
                let (ok, what) = match k.as_str() {
                    "display_name" | "description" => (v.is_string(), "a string"),
                    "tags" => (v.is_array(), "an array"),
                    _ => (v.is_object(), "an object"),
                };
                if !ok {
                    return Err(ApiError::new(
                        Code::InvalidRequest,
                        format!("`{k}` is {what}"),
                    ));
                }
                card.insert(k.clone(), v.clone());
            }
            "name" | "public_key" | "workspace" if registering => {}
            k if IMMUTABLE.contains(&k) || k == "workspace" => {
                return Err(ApiError::new(
                    Code::ImmutableField,
                    format!("`{k}` never changes (§4.1)"),
                ));
            }
            "public_key" => {
                return Err(ApiError::new(
                    Code::InvalidRequest,
                    "keys are registered with `agentbus keys rotate` (`POST /v1/agents/{id}/keys`, §3.3)",
                ));
            }
            other => {
                return Err(ApiError::new(
                    Code::InvalidRequest,
                    format!(
                        "unknown card field `{other}`; editable: {}",
                        EDITABLE.join(", ")
                    ),
                ));
            }
        }
    }
    Ok((card, aliases, visibility))
}

/// The full card (§10), with keys (revoked ones carry `revoked_at`, decision 7).
pub async fn card_body(app: &App, a: &AgentRow) -> ApiResult<api::Card> {
    let mut stored: Map<String, Value> = serde_json::from_str(&a.card).unwrap_or_default();
    let mut field = |name: &str| stored.remove(name);
    let mut status = match field("status") {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let display_name = field("display_name");
    let description = field("description");
    let harness = field("harness");
    let capabilities = field("capabilities");
    let pricing = field("pricing");
    let tags = field("tags");
    let depth = app.store.pending_count(&a.id).await?;
    status.insert("queue_depth".into(), json!(depth));
    let (presence, last) = app.presence(&a.id);
    status.insert("presence".into(), json!(presence));
    if let Some(t) = last {
        status.insert("last_heartbeat_at".into(), json!(Timestamp(t).to_string()));
    }
    let keys = app.store.keys(&a.id).await?.iter().map(key_body).collect();
    // The stored card holds only fields `check_card` accepted, each of its documented kind.
    let array = |v: Option<Value>| match v {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    let text = |v: Option<Value>, default: &str| match v {
        Some(Value::String(s)) => s,
        _ => default.to_owned(),
    };
    Ok(api::Card {
        id: a.id.clone(),
        address: app.address_of(a).await?,
        name: a.name.clone(),
        display_name: text(display_name, &a.name),
        description: text(description, ""),
        aliases: app.store.aliases(&a.id).await?,
        harness: match harness {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        },
        owner: a.owner_id.clone(),
        visibility: a.visibility.clone(),
        capabilities: array(capabilities),
        pricing: pricing.unwrap_or_else(|| json!({"model": "free"})),
        status,
        tags: array(tags),
        created_at: Timestamp(a.created_at).to_string(),
        updated_at: Timestamp(a.updated_at).to_string(),
        deleted: a.deleted_at.is_some(),
        suspended: a.suspended_at.is_some(),
        suspended_at: a.suspended_at.map(|t| Timestamp(t).to_string()),
        keys,
    })
}

/// [`card_body`] as a JSON value, for front ends that read it as a document.
pub async fn card_json(app: &App, a: &AgentRow) -> ApiResult<Value> {
    Ok(serde_json::to_value(card_body(app, a).await?).unwrap_or_default())
}

/// A key as cards and `POST /v1/agents/{id}/keys` show it.
fn key_body(k: &KeyRow) -> api::Key {
    api::Key {
        id: k.id.clone(),
        public_key: base64url(&k.public_key),
        created_at: Timestamp(k.created_at).to_string(),
        expires_at: Timestamp(k.expires_at).to_string(),
        revoked_at: k.revoked_at.map(|t| Timestamp(t).to_string()),
    }
}

fn base64url(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

/// `POST /v1/agents` (a user of a tenant): registers an agent in the user's own workspace, or in
/// the `workspace` named when the user administers it (a tenant admin any of its tenant's), and
/// returns its card and credential.
pub async fn register_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::RegisteredAgent>)> {
    let who = bearer(&app, &headers).await?;
    let user = crate::roles::tenant_user(who.clone())?;
    let b = body_object(&body)?;
    let name = b
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::new(Code::InvalidRequest, "`name` is required"))?;
    if !is_slug(name) {
        return Err(ApiError::new(
            Code::InvalidAddress,
            format!("name {name:?} must be 3-40 characters of a-z, 0-9 and '-' (§4.1)"),
        ));
    }
    let ws = match b.get("workspace") {
        Some(v) => {
            let slug = v.as_str().filter(|s| is_slug(s)).ok_or_else(|| {
                ApiError::new(
                    Code::InvalidAddress,
                    "`workspace` must be 3-40 characters of a-z, 0-9 and '-' (§4.1)",
                )
            })?;
            app.store.workspace_by_slug(&user.tenant_id, slug).await?
        }
        None => app.store.workspace(&user.workspace_id).await?,
    }
    .filter(|w| w.id == user.workspace_id || administers(&who, &w.tenant_id, &w.id))
    .ok_or_else(ApiError::not_found)?;
    let tenant = app
        .store
        .tenant(&user.tenant_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    if tenant.slug == "system" {
        return Err(ApiError::new(
            Code::NotPermitted,
            "the tenant slug `system` is reserved for gateway notices",
        ));
    }
    let (card, aliases, visibility) = check_card(&b, true)?;
    // The key is checked before anything is stored: a refused registration leaves no agent behind.
    match b.get("public_key") {
        None | Some(Value::Null) => {}
        Some(Value::String(pk)) => {
            parse_public_key(pk)?;
        }
        Some(_) => {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "`public_key` is the base64url of an Ed25519 public key",
            ));
        }
    }
    let input: api::CardInput = typed(b)?;
    let name = input.name.as_deref().unwrap_or_default();
    let now = app.now();
    let agent = AgentRow {
        id: app.mint(IdKind::Agent),
        tenant_id: user.tenant_id.clone(),
        workspace_id: ws.id.clone(),
        name: name.to_owned(),
        owner_id: Some(user.id.clone()),
        card: Value::Object(card).to_string(),
        visibility: visibility.unwrap_or_else(|| "workspace".into()),
        created_at: now,
        updated_at: now,
        deleted_at: None,
        suspended_at: None,
    };
    app.store
        .create_agent(agent.clone(), aliases.unwrap_or_default())
        .await
        .map_err(|e| match e {
            StoreError::Conflict(what) => ApiError::new(
                Code::NameTaken,
                format!("{what} is taken in workspace {}", ws.slug),
            ),
            e => e.into(),
        })?;
    app.invalidate_directory();
    let token = new_token("aba_");
    app.store
        .create_token(TokenRow {
            hash: token_hash(&token),
            subject: TokenSubject::Agent(agent.id.clone()),
            created_at: now,
            label: None,
            revoked_at: None,
        })
        .await?;
    let agent_card = card_body(&app, &agent).await?;
    let key = match input.public_key.as_deref() {
        Some(pk) => Some(add_key_inner(&app, &agent, pk, None).await?),
        None => None,
    };
    Ok((
        StatusCode::CREATED,
        Json(api::RegisteredAgent {
            agent: agent_card,
            token,
            key,
        }),
    ))
}

/// Whether `who` may see `a` in the directory (§10 visibility; `public` acts as `tenant` in v1):
/// the agent itself, its owner and an admin whose scope covers its workspace always; others as its
/// visibility says, never across tenants. The gateway operator belongs to no tenant and sees none.
pub(crate) fn visible(who: &Principal, a: &AgentRow) -> bool {
    if a.tenant_id != who.tenant_id() {
        return false;
    }
    if may_manage(who, a) {
        return true;
    }
    let my_ws = match who {
        Principal::Agent(x) => x.workspace_id.as_str(),
        Principal::User(u) => u.workspace_id.as_str(),
    };
    match a.visibility.as_str() {
        "private" => false,
        "workspace" => my_ws == a.workspace_id,
        _ => true,
    }
}

/// The directory: every live agent of the caller's tenant that the caller may see (§10).
pub async fn directory(app: &App, who: &Principal) -> ApiResult<Vec<AgentRow>> {
    let mut out = app.store.agents(who.tenant_id()).await?;
    out.retain(|a| visible(who, a));
    Ok(out)
}

/// `GET /v1/agents`: the directory within what the caller may see.
pub async fn list_agents(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::Agents>> {
    let who = bearer(&app, &headers).await?;
    let mut agents = Vec::new();
    for a in directory(&app, &who).await? {
        agents.push(card_body(&app, &a).await?);
    }
    Ok(Json(api::Agents { agents }))
}

/// The agent `id` if `who` may read its card, else exactly what a missing one gets: what the
/// directory shows `who`, and, with public discovery on, any live, active `public` card
/// (docs/protocol.md "Card visibility": a credential never sees less than none does).
pub async fn visible_agent(app: &App, who: &Principal, id: &str) -> ApiResult<AgentRow> {
    let a = app.store.agent(id).await?.ok_or_else(ApiError::not_found)?;
    if visible(who, &a) {
        return Ok(a);
    }
    public_agent(app, a).await
}

/// `a` if the gateway serves public discovery (`public_discovery`) and its card is `public`, live,
/// and neither it nor its tenant is suspended: what anyone may read, with or without a credential;
/// else exactly what a missing agent gets.
pub(crate) async fn public_agent(app: &App, a: AgentRow) -> ApiResult<AgentRow> {
    if !app.config.public_discovery || a.visibility != "public" || a.deleted_at.is_some() {
        return Err(ApiError::not_found());
    }
    // Suspension contains at once: gone from public reading, answered as an unknown agent is.
    match crate::roles::ensure_active(app, &Principal::Agent(a.clone())).await {
        Ok(()) => Ok(a),
        Err(e) if matches!(e.code, Code::AgentSuspended | Code::TenantSuspended) => {
            Err(ApiError::not_found())
        }
        Err(e) => Err(e),
    }
}

/// `GET /v1/agents/{id}`: the card and its keys.
pub async fn get_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Card>> {
    let who = bearer(&app, &headers).await?;
    let a = visible_agent(&app, &who, &id).await?;
    Ok(Json(card_body(&app, &a).await?))
}

/// Whether `who` manages `a`: the agent itself, its owner, or an admin whose scope covers its
/// workspace.
pub fn may_manage(who: &Principal, a: &AgentRow) -> bool {
    match who {
        Principal::Agent(x) => x.id == a.id,
        Principal::User(u) => {
            (u.tenant_id == a.tenant_id && a.owner_id.as_deref() == Some(u.id.as_str()))
                || administers(who, &a.tenant_id, &a.workspace_id)
        }
    }
}

/// The agent `id` if `who` manages it; otherwise exactly what a missing agent gets, so a refusal
/// never tells that the agent exists.
async fn managed_agent(app: &App, who: &Principal, id: &str) -> ApiResult<AgentRow> {
    app.store
        .agent(id)
        .await?
        .filter(|a| a.deleted_at.is_none() && may_manage(who, a))
        .ok_or_else(ApiError::not_found)
}

/// `PATCH /v1/agents/{id}` (the agent, its owner, or an admin whose scope covers it).
pub async fn patch_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<api::Card>> {
    let who = bearer(&app, &headers).await?;
    let mut a = managed_agent(&app, &who, &id).await?;
    let b = body_object(&body)?;
    let (changes, aliases, visibility) = check_card(&b, false)?;
    let mut card: Map<String, Value> = serde_json::from_str(&a.card).unwrap_or_default();
    card.extend(changes);
    a.card = Value::Object(card).to_string();
    if let Some(v) = visibility {
        a.visibility = v;
    }
    a.updated_at = app.now().max(a.updated_at + 1);
    app.store
        .update_agent(a.clone(), aliases)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(what) => {
                ApiError::new(Code::NameTaken, format!("{what} is taken"))
            }
            e => e.into(),
        })?;
    app.invalidate_directory();
    app.forget_agent(&a.id);
    Ok(Json(card_body(&app, &a).await?))
}

/// `DELETE /v1/agents/{id}` (its owner, or an admin whose scope covers it): queued messages are dead-lettered and their senders
/// told (§5.9).
pub async fn delete_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let who = bearer(&app, &headers).await?;
    crate::roles::tenant_user(who.clone())?;
    let a = managed_agent(&app, &who, &id).await?;
    let pending = app.store.delete_agent(&a.id, app.now()).await?;
    app.invalidate_directory();
    app.forget_agent(&a.id);
    // Owed since the deletion's commit: any left unsent here go with the reaper's next pass, and
    // the deletion, which is made, is answered all the same.
    for e in &pending {
        if let Err(err) = app.owed_entry_notice(e, NoticeKind::Deleted).await {
            tracing::warn!(agent = %a.id, code = %err.code(), error = %err.message(), "a deletion's notice was not sent; the reaper's next pass sends it");
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// An agent's Ed25519 public key from its base64url (AB-1014 when it is not one we accept).
fn parse_public_key(public_key: &str) -> ApiResult<PublicKey> {
    PublicKey::from_base64url(public_key).map_err(|e| ApiError::new(e.code(), e.to_string()))
}

async fn add_key_inner(
    app: &App,
    agent: &AgentRow,
    public_key: &str,
    expires_at: Option<&str>,
) -> ApiResult<api::Key> {
    let pk = parse_public_key(public_key)?;
    let now = app.now();
    let expires = match expires_at {
        Some(s) => {
            let at = s
                .parse::<Timestamp>()
                .map_err(|e| ApiError::new(Code::InvalidRequest, format!("`expires_at`: {e}")))?
                .millis();
            // Stored, it would only be refused at its first publish (AB-1012), far from the
            // request that made the mistake.
            if at <= now {
                return Err(ApiError::new(
                    Code::InvalidRequest,
                    format!(
                        "`expires_at` {s} is not in the future: an expired key signs nothing (§3.3)"
                    ),
                ));
            }
            at
        }
        None => now + app.config.key_lifetime_days * 86_400_000,
    };
    let key = KeyRow {
        id: app.mint(IdKind::Key),
        agent_id: agent.id.clone(),
        public_key: pk.to_bytes().to_vec(),
        created_at: now,
        expires_at: expires,
        revoked_at: None,
    };
    app.store
        .add_key(key.clone(), MAX_ACTIVE_KEYS, now)
        .await
        .map_err(|e| match e {
            StoreError::Limit(_) => ApiError::new(
                Code::KeyLimit,
                format!(
                    "{} already has {MAX_ACTIVE_KEYS} active keys (§3.3)",
                    agent.name
                ),
            ),
            e => e.into(),
        })?;
    app.invalidate_directory();
    Ok(key_body(&key))
}

/// `POST /v1/agents/{id}/keys` `{public_key, expires_at?}` (the agent, its owner, or an admin whose
/// scope covers it).
pub async fn add_key(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::Key>)> {
    let who = bearer(&app, &headers).await?;
    let a = managed_agent(&app, &who, &id).await?;
    let b: api::NewKey = crate::extract::parse_json(&body)?;
    let out = add_key_inner(&app, &a, &b.public_key, b.expires_at.as_deref()).await?;
    Ok((StatusCode::CREATED, Json(out)))
}

/// `POST /v1/agents/{id}/keys/{key_id}/revoke`: new publishes with it are refused; history still
/// verifies (§3.3).
pub async fn revoke_key(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((id, key_id)): Path<(String, String)>,
) -> ApiResult<Json<api::RevokedKey>> {
    let who = bearer(&app, &headers).await?;
    let a = managed_agent(&app, &who, &id).await?;
    let now = app.now();
    app.store.revoke_key(&a.id, &key_id, now).await?;
    app.invalidate_directory();
    Ok(Json(api::RevokedKey {
        id: key_id,
        revoked_at: Timestamp(now).to_string(),
    }))
}

/// `PUT /v1/topics/{name}/subscription` (agent): subscribes, creating the topic (§4.4).
pub async fn subscribe(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<api::Subscription>> {
    let a = crate::access::agent(&app, &headers).await?;
    check_topic_name(&name)?;
    app.store
        .subscribe(&a.workspace_id, &name, &a.id, app.now())
        .await?;
    let topic = topic_address(&app, &a, &name).await?;
    Ok(Json(api::Subscription {
        topic,
        subscribed: true,
    }))
}

/// `DELETE /v1/topics/{name}/subscription` (agent): idempotent; a name no topic could have is
/// refused as on subscribe.
pub async fn unsubscribe(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<api::Subscription>> {
    let a = crate::access::agent(&app, &headers).await?;
    check_topic_name(&name)?;
    app.store.unsubscribe(&a.workspace_id, &name, &a.id).await?;
    let topic = topic_address(&app, &a, &name).await?;
    Ok(Json(api::Subscription {
        topic,
        subscribed: false,
    }))
}

/// AB-3015 for a name no topic can have.
fn check_topic_name(name: &str) -> ApiResult<()> {
    if is_topic_name(name) {
        return Ok(());
    }
    Err(ApiError::new(
        Code::InvalidAddress,
        format!("topic {name:?} must be 3-40 characters of a-z, 0-9, '-' and '.'"),
    ))
}

/// `topic://tenant/workspace/name` of the agent's workspace.
async fn topic_address(app: &App, a: &AgentRow, name: &str) -> ApiResult<String> {
    let addr = app.address_of(a).await?;
    let topic = addr.replacen("agent://", "topic://", 1);
    Ok(format!(
        "{}/{name}",
        topic.rsplit_once('/').map(|(h, _)| h).unwrap_or_default()
    ))
}

/// `GET /v1/topics?workspace=`: an agent gets its workspace's topics with subscriber counts; an
/// admin those of the workspaces it administers (one, with `workspace`), each with its
/// subscribers' ids.
pub async fn list_topics(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    crate::extract::Query(q): crate::extract::Query<TopicsQuery>,
) -> ApiResult<Json<api::Topics>> {
    let who = bearer(&app, &headers).await?;
    let agent = matches!(who, Principal::Agent(_));
    let topics = topics_for(&app, &who, q.workspace.as_deref())
        .await?
        .into_iter()
        .map(|t| api::Topic {
            name: t.name,
            subscribers: t.subscribers.len() as u64,
            workspace: (!agent).then_some(api::WorkspaceRef {
                id: t.workspace.id,
                slug: t.workspace.slug,
            }),
            subscriber_ids: (!agent).then_some(t.subscribers),
        })
        .collect();
    Ok(Json(api::Topics { topics }))
}

/// Filters of `GET /v1/topics`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct TopicsQuery {
    /// Only this workspace (`ws_` id); an admin's.
    pub workspace: Option<String>,
}

/// A topic with its subscribers.
#[derive(Debug, Clone)]
pub struct TopicView {
    /// Its workspace.
    pub workspace: WorkspaceRow,
    /// Its name.
    pub name: String,
    /// When it was created (its first subscription).
    pub created_at: i64,
    /// The `agt_` ids subscribed.
    pub subscribers: Vec<String>,
}

/// The topics `who` may list (§4.4): an agent its own workspace's; an admin those of every
/// workspace it administers, or of `workspace` alone. Another workspace answers as a missing one;
/// a member or the operator is refused from its role (AB-1002).
pub async fn topics_for(
    app: &App,
    who: &Principal,
    workspace: Option<&str>,
) -> ApiResult<Vec<TopicView>> {
    let workspaces = match who {
        Principal::Agent(a) => {
            if workspace.is_some_and(|w| w != a.workspace_id) {
                return Err(ApiError::not_found());
            }
            app.workspace_row(&a.workspace_id)
                .await?
                .into_iter()
                .collect()
        }
        Principal::User(_) => {
            let admin = crate::roles::admin(who.clone())?;
            let all = app.store.workspaces(&admin.tenant_id).await?;
            let mine: Vec<WorkspaceRow> = all
                .into_iter()
                .filter(|w| administers(who, &w.tenant_id, &w.id))
                .filter(|w| workspace.is_none_or(|id| id == w.id))
                .collect();
            if workspace.is_some() && mine.is_empty() {
                return Err(ApiError::not_found());
            }
            mine
        }
    };
    let mut out = Vec::new();
    for ws in workspaces {
        for (t, _) in app.store.topics(&ws.id).await? {
            let subscribers = app
                .store
                .topic(&ws.id, &t.name)
                .await?
                .map(|(_, s)| s)
                .unwrap_or_default();
            out.push(TopicView {
                workspace: ws.clone(),
                name: t.name,
                created_at: t.created_at,
                subscribers,
            });
        }
    }
    Ok(out)
}

/// Whose view of conversations `who` reads (§7): an agent its own messages, a workspace admin its
/// workspace's agents', a tenant admin the whole tenant's; anyone else is refused (AB-1002).
pub(crate) fn viewer(who: &Principal) -> ApiResult<ConversationViewer> {
    Ok(match who {
        Principal::Agent(a) => ConversationViewer::Agent(a.id.clone()),
        Principal::User(_) => match crate::roles::admin_scope(who) {
            Some(crate::roles::AdminScope::Tenant(_)) => ConversationViewer::Tenant,
            Some(crate::roles::AdminScope::Workspace(w)) => {
                ConversationViewer::Workspace(w.to_owned())
            }
            None => {
                return Err(ApiError::new(
                    Code::NotPermitted,
                    "conversations are read by their agents and by admins",
                ));
            }
        },
    })
}

/// The messages of conversation `id` that `who` may read, in `received_at` order (§7); with
/// nothing to read, exactly what an unknown id gets.
pub async fn conversation_rows(app: &App, who: &Principal, id: &str) -> ApiResult<Vec<MessageRow>> {
    let viewer = viewer(who)?;
    app.store
        .conversation(who.tenant_id(), id, &viewer)
        .await?
        .ok_or_else(ApiError::not_found)
}

/// A stored message as a conversation shows it: its delivered copy to its recipient, without the
/// per-inbox `sequence`.
pub async fn envelope(app: &App, m: &MessageRow) -> ApiResult<Value> {
    let mut copy = app.delivered_copy(m, &m.to_id, 0).await?;
    if let Some(o) = copy.as_object_mut() {
        o.shift_remove("sequence");
    }
    Ok(copy)
}

/// A delivered copy as the object it always is (the gateway writes every envelope as one).
pub(crate) fn envelope_map(v: Value) -> api::EnvelopeMap {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// `GET /v1/conversations/{id}`: the conversation's envelopes the caller may read, in
/// `received_at` order (§7). An agent reads what it sent or received, message by message (joining
/// someone else's `conversation_id` shows nothing of theirs); a workspace admin what its
/// workspace's agents sent or received; a tenant admin the whole conversation (the console's view).
/// With nothing to read, the answer is exactly what an unknown id gets.
pub async fn conversation(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Conversation>> {
    let who = bearer(&app, &headers).await?;
    let rows = conversation_rows(&app, &who, &id).await?;
    let mut envelopes = Vec::with_capacity(rows.len());
    for m in &rows {
        envelopes.push(envelope_map(envelope(&app, m).await?));
    }
    Ok(Json(api::Conversation {
        conversation_id: id,
        envelopes,
    }))
}

/// The most conversations a list answers at once.
pub const MAX_CONVERSATIONS: u32 = 200;

/// A position in a list of conversations: the last one's `(received_at, storage sequence)`,
/// written `<ms>.<seq>`.
pub fn conversation_cursor(c: &ConversationSummary) -> String {
    format!("{}.{}", c.last_at, c.last.seq)
}

fn parse_cursor(s: &str) -> ApiResult<(i64, i64)> {
    s.split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidRequest,
                "`before` is the `next` cursor of an earlier page",
            )
        })
}

/// The conversations with messages `who` may read (per message, as for one conversation), most
/// recently active first; `before` is a cursor from an earlier page.
pub async fn conversation_list(
    app: &App,
    who: &Principal,
    before: Option<&str>,
    limit: u32,
) -> ApiResult<Vec<ConversationSummary>> {
    let viewer = viewer(who)?;
    let before = before.map(parse_cursor).transpose()?;
    Ok(app
        .store
        .conversations(
            who.tenant_id(),
            &viewer,
            before,
            limit.clamp(1, MAX_CONVERSATIONS),
        )
        .await?)
}

/// Paging of `GET /v1/conversations`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ConversationsQuery {
    /// The `next` cursor of the page before.
    pub before: Option<String>,
    /// Most conversations (default 50, at most 200).
    pub limit: Option<u32>,
}

/// `GET /v1/conversations?before=&limit=`: the conversations the caller may read, most recently
/// active first, each with the count of its messages the caller may read and the last of them.
pub async fn list_conversations(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    crate::extract::Query(q): crate::extract::Query<ConversationsQuery>,
) -> ApiResult<Json<api::Conversations>> {
    let who = bearer(&app, &headers).await?;
    let limit = q.limit.unwrap_or(50);
    let list = conversation_list(&app, &who, q.before.as_deref(), limit).await?;
    let mut out = Vec::with_capacity(list.len());
    for c in &list {
        let attrs: Map<String, Value> = serde_json::from_str(&c.last.attrs).unwrap_or_default();
        out.push(api::ConversationSummary {
            conversation_id: c.conversation_id.clone(),
            messages: c.messages,
            first_received_at: Timestamp(c.first_at).to_string(),
            last_received_at: Timestamp(c.last_at).to_string(),
            last: api::LastMessage {
                id: c.last.id.clone(),
                kind: c.last.kind.clone(),
                source: c.last.source.clone(),
                to: c.last.to_text.clone(),
                subject: attrs.get("subject").cloned(),
            },
        });
    }
    let next = (list.len() as u32 >= limit.clamp(1, MAX_CONVERSATIONS))
        .then(|| list.last().map(conversation_cursor))
        .flatten();
    Ok(Json(api::Conversations {
        conversations: out,
        next,
    }))
}
