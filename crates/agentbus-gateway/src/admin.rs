//! Administration (`docs/api.md`, "Administration"): tenants (the gateway operator's), workspaces
//! and their policies, users, and agent suspension (§5.9). Each route checks the caller's role
//! first and then whether its scope covers the object (`crate::roles`); an object outside the
//! scope answers exactly like one that does not exist.

use std::sync::Arc;

use crate::extract::{Json, Path};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use agentbus_api as api;

use agentbus_protocol::Code;
use agentbus_protocol::address::is_slug;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::*;

use crate::access::bearer;
use crate::auth::{new_token, token_hash};
use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::identity::{body_object, card_body, typed};
use crate::roles::{self, administers};
use crate::state::{App, Principal};

/// The slug reserved for the gateway's own notices (decision 8).
pub const RESERVED_TENANT: &str = "system";

fn ts(t: i64) -> String {
    Timestamp(t).to_string()
}

/// A slug field of a request body: `default` when absent, AB-3015 when malformed.
fn slug_field<'a>(
    b: &'a Map<String, Value>,
    name: &str,
    default: Option<&'a str>,
) -> ApiResult<&'a str> {
    let bad = || {
        ApiError::new(
            Code::InvalidAddress,
            format!("`{name}` must be 3-40 characters of a-z, 0-9 and '-' (§4.1)"),
        )
    };
    match b.get(name) {
        None => default.ok_or_else(bad),
        Some(v) => v.as_str().filter(|s| is_slug(s)).ok_or_else(bad),
    }
}

/// A display-name field: `default` when absent, AB-3016 unless a string of 1-100 characters.
fn name_field(b: &Map<String, Value>, name: &str, default: &str) -> ApiResult<String> {
    match b.get(name) {
        None => Ok(default.to_owned()),
        Some(Value::String(s)) if !s.trim().is_empty() && s.chars().count() <= 100 => Ok(s.clone()),
        Some(_) => Err(ApiError::new(
            Code::InvalidRequest,
            format!("`{name}` is a string of 1-100 characters"),
        )),
    }
}

/// Refuses fields a body does not take, so a misspelt field is never silently ignored.
fn only_fields(b: &Map<String, Value>, allowed: &[&str]) -> ApiResult<()> {
    match b.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(ApiError::new(
            Code::InvalidRequest,
            format!(
                "unknown field `{k}`; this body takes {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// A new user with its integration token (stored hashed, returned once).
async fn add_user(app: &App, user: &UserRow) -> ApiResult<String> {
    app.store.create_user(user.clone()).await?;
    let token = new_token("abu_");
    app.store
        .create_token(TokenRow {
            hash: token_hash(&token),
            subject: TokenSubject::User(user.id.clone()),
            created_at: user.created_at,
            label: None,
            revoked_at: None,
        })
        .await?;
    Ok(token)
}

/// What a new tenant is made of, with its first admin's token.
pub struct Provisioned {
    /// The tenant.
    pub tenant: TenantRow,
    /// Its first workspace.
    pub workspace: WorkspaceRow,
    /// Its tenant admin.
    pub admin: UserRow,
    /// That admin's integration token, shown once.
    pub token: String,
}

/// Creates a tenant, its first workspace and its tenant admin with a token, all or nothing.
pub async fn provision(
    app: &App,
    tenant_slug: &str,
    workspace_slug: &str,
    admin_name: &str,
) -> ApiResult<Provisioned> {
    let now = app.now();
    let tenant = TenantRow {
        id: app.mint(IdKind::Tenant),
        slug: tenant_slug.to_owned(),
        data_key: app.wrap_new_tenant_key(),
        created_at: now,
        suspended_at: None,
    };
    let workspace = WorkspaceRow {
        id: app.mint(IdKind::Workspace),
        tenant_id: tenant.id.clone(),
        slug: workspace_slug.to_owned(),
        policy: crate::policy::NEW_WORKSPACE_POLICY.into(),
        created_at: now,
    };
    let admin = UserRow {
        id: app.mint(IdKind::User),
        tenant_id: tenant.id.clone(),
        workspace_id: workspace.id.clone(),
        name: admin_name.to_owned(),
        role: Role::TenantAdmin,
        created_at: now,
    };
    let token = new_token("abu_");
    app.store
        .provision_tenant(
            tenant.clone(),
            workspace.clone(),
            admin.clone(),
            TokenRow {
                hash: token_hash(&token),
                subject: TokenSubject::User(admin.id.clone()),
                created_at: now,
                label: None,
                revoked_at: None,
            },
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                ApiError::new(Code::NameTaken, format!("tenant {tenant_slug} exists"))
            }
            e => e.into(),
        })?;
    app.invalidate_directory();
    Ok(Provisioned {
        tenant,
        workspace,
        admin,
        token,
    })
}

/// Makes sure the gateway has its operator (`role: operator`, in no tenant), creating it when
/// missing; returns the new operator's token when one was made and `with_token` asks for it.
/// A data directory from before roles were scoped gets a token-less operator, so a command that
/// mints tokens for it finds it with `Store::users_with_role(Role::Operator)`.
pub async fn ensure_operator(app: &App, with_token: bool) -> ApiResult<Option<String>> {
    if !app.store.users_with_role(Role::Operator).await?.is_empty() {
        return Ok(None);
    }
    let operator = UserRow {
        id: app.mint(IdKind::User),
        tenant_id: String::new(),
        workspace_id: String::new(),
        name: "operator".into(),
        role: Role::Operator,
        created_at: app.now(),
    };
    if with_token {
        return add_user(app, &operator).await.map(Some);
    }
    app.store.create_user(operator).await?;
    Ok(None)
}

/// Result of the first start.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// Tenant slug.
    pub tenant: String,
    /// Workspace slug.
    pub workspace: String,
    /// The first tenant admin's integration token, shown once.
    pub admin_token: String,
    /// The gateway operator's integration token (tenants: create, list, suspend), shown once.
    pub operator_token: String,
}

/// On the first start (no tenant yet), creates the gateway operator and the first tenant with its
/// workspace and tenant admin. On any later start, creates the operator if the data directory has
/// none (one from before roles were scoped), without a token; `Ok(None)` then.
pub async fn bootstrap(
    app: &App,
    tenant_slug: &str,
    workspace_slug: &str,
) -> ApiResult<Option<Bootstrap>> {
    if !app.store.tenants().await?.is_empty() {
        ensure_operator(app, false).await?;
        return Ok(None);
    }
    let first = provision(app, tenant_slug, workspace_slug, "admin").await?;
    let operator_token = ensure_operator(app, true).await?.unwrap_or_default();
    Ok(Some(Bootstrap {
        tenant: first.tenant.slug,
        workspace: first.workspace.slug,
        admin_token: first.token,
        operator_token,
    }))
}

fn tenant_body(t: &TenantRow) -> api::Tenant {
    api::Tenant {
        id: t.id.clone(),
        slug: t.slug.clone(),
        created_at: ts(t.created_at),
        suspended_at: t.suspended_at.map(ts),
    }
}

/// `POST /v1/tenants` `{slug, workspace?, admin_name?}` (operator): a tenant, its first workspace
/// (`default` unless named) and its tenant admin, whose token is returned once.
pub async fn create_tenant(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::CreatedTenant>)> {
    roles::operator(bearer(&app, &headers).await?)?;
    let b = body_object(&body)?;
    only_fields(&b, &["slug", "workspace", "admin_name"])?;
    slug_field(&b, "slug", None)?;
    slug_field(&b, "workspace", Some("default"))?;
    name_field(&b, "admin_name", "admin")?;
    let t: api::NewTenant = typed(b)?;
    let (slug, workspace) = (t.slug.as_str(), t.workspace.as_deref().unwrap_or("default"));
    let admin_name = t.admin_name.as_deref().unwrap_or("admin");
    if slug == RESERVED_TENANT {
        return Err(ApiError::new(
            Code::NameTaken,
            "the tenant slug `system` is reserved for the gateway's notices",
        ));
    }
    let p = provision(&app, slug, workspace, admin_name).await?;
    Ok((
        StatusCode::CREATED,
        Json(api::CreatedTenant {
            tenant: tenant_body(&p.tenant),
            workspace: api::WorkspaceRef {
                id: p.workspace.id,
                slug: p.workspace.slug,
            },
            admin: api::TenantAdmin {
                id: p.admin.id,
                name: p.admin.name,
                role: p.admin.role.as_str().to_owned(),
                token: p.token,
            },
        }),
    ))
}

/// Every tenant, for the gateway operator (AB-1002 for anyone else).
pub async fn tenants_for(app: &App, who: &Principal) -> ApiResult<Vec<TenantRow>> {
    roles::operator(who.clone())?;
    Ok(app.store.tenants().await?)
}

/// `GET /v1/tenants` (operator).
pub async fn list_tenants(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::Tenants>> {
    let who = bearer(&app, &headers).await?;
    let tenants = tenants_for(&app, &who)
        .await?
        .iter()
        .map(tenant_body)
        .collect();
    Ok(Json(api::Tenants { tenants }))
}

async fn set_tenant(
    app: &App,
    headers: &HeaderMap,
    id: &str,
    suspend: bool,
) -> ApiResult<Json<api::Tenant>> {
    let who = bearer(app, headers).await?;
    Ok(Json(tenant_body(
        &set_tenant_suspended(app, &who, id, suspend).await?,
    )))
}

/// Suspends (`suspend`) or resumes tenant `id`, as the gateway operator (AB-1002 for anyone else).
pub async fn set_tenant_suspended(
    app: &App,
    who: &Principal,
    id: &str,
    suspend: bool,
) -> ApiResult<TenantRow> {
    roles::operator(who.clone())?;
    let mut t = app
        .store
        .tenant(id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    t.suspended_at = if suspend {
        t.suspended_at.or(Some(app.now()))
    } else {
        None
    };
    app.store
        .set_tenant_suspended(&t.id, t.suspended_at)
        .await?;
    app.invalidate_directory();
    Ok(t)
}

/// `POST /v1/tenants/{id}/suspend` (operator): every credential of the tenant is refused
/// (AB-1003) until it is resumed; nothing stored changes.
pub async fn suspend_tenant(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Tenant>> {
    set_tenant(&app, &headers, &id, true).await
}

/// `POST /v1/tenants/{id}/resume` (operator).
pub async fn resume_tenant(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Tenant>> {
    set_tenant(&app, &headers, &id, false).await
}

fn workspace_body(w: &WorkspaceRow) -> api::Workspace {
    api::Workspace {
        id: w.id.clone(),
        slug: w.slug.clone(),
        created_at: ts(w.created_at),
    }
}

/// `POST /v1/workspaces` `{slug}` (tenant admin): a new workspace in the admin's tenant.
pub async fn create_workspace(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::Workspace>)> {
    let admin = roles::tenant_admin(bearer(&app, &headers).await?)?;
    let b = body_object(&body)?;
    only_fields(&b, &["slug"])?;
    slug_field(&b, "slug", None)?;
    let new: api::NewWorkspace = typed(b)?;
    let slug = new.slug.as_str();
    let ws = WorkspaceRow {
        id: app.mint(IdKind::Workspace),
        tenant_id: admin.tenant_id.clone(),
        slug: slug.to_owned(),
        policy: crate::policy::NEW_WORKSPACE_POLICY.into(),
        created_at: app.now(),
    };
    app.store
        .create_workspace(ws.clone())
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                ApiError::new(Code::NameTaken, format!("workspace {slug} exists"))
            }
            e => e.into(),
        })?;
    app.invalidate_directory();
    Ok((StatusCode::CREATED, Json(workspace_body(&ws))))
}

/// `GET /v1/workspaces`: the workspaces the caller belongs to or administers (a tenant admin all of
/// its tenant's), with the `ws_` ids the policy routes take.
pub async fn list_workspaces(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::Workspaces>> {
    let who = bearer(&app, &headers).await?;
    let workspaces = workspaces_for(&app, &who)
        .await?
        .iter()
        .map(workspace_body)
        .collect();
    Ok(Json(api::Workspaces { workspaces }))
}

/// The workspaces `who` belongs to or administers: a tenant admin all of its tenant's, anyone
/// else its own; the operator, who belongs to no tenant, is refused (AB-1002).
pub async fn workspaces_for(app: &App, who: &Principal) -> ApiResult<Vec<WorkspaceRow>> {
    let (tenant, home, all) = match who {
        Principal::Agent(a) => (a.tenant_id.clone(), a.workspace_id.clone(), false),
        user => {
            let u = roles::tenant_user(user.clone())?;
            let all = u.role == Role::TenantAdmin;
            (u.tenant_id, u.workspace_id, all)
        }
    };
    let mut list = app.store.workspaces(&tenant).await?;
    list.retain(|w| all || w.id == home);
    Ok(list)
}

/// The workspace `id` if the caller (an admin) administers it, else exactly what a missing one
/// gets.
async fn administered(app: &App, who: &Principal, id: &str) -> ApiResult<WorkspaceRow> {
    app.store
        .workspace(id)
        .await?
        .filter(|w| administers(who, &w.tenant_id, &w.id))
        .ok_or_else(ApiError::not_found)
}

/// Workspace `id` and its policy document, for an admin whose scope covers it.
pub async fn policy_of(app: &App, who: &Principal, id: &str) -> ApiResult<(WorkspaceRow, Value)> {
    roles::admin(who.clone())?;
    let ws = administered(app, who, id).await?;
    let doc = serde_json::from_str(&ws.policy).unwrap_or_else(|_| json!({}));
    Ok((ws, doc))
}

/// Replaces workspace `id`'s policy with the document `body`, for an admin whose scope covers
/// it: the document must match `/schemas/gateway/policy/v1.json`, or nothing changes and every
/// violation is listed (AB-3026).
pub async fn replace_policy(app: &App, who: &Principal, id: &str, body: &[u8]) -> ApiResult<Value> {
    roles::admin(who.clone())?;
    let ws = administered(app, who, id).await?;
    let doc = agentbus_protocol::json::parse(body)
        .map_err(|e| ApiError::new(Code::MalformedJson, e.to_string()))?;
    crate::policy::check(&doc).map_err(ApiError::with_violations)?;
    app.store
        .set_workspace_policy(&ws.id, doc.to_string())
        .await?;
    app.invalidate_directory();
    Ok(doc)
}

/// `GET /v1/workspaces/{id}/policy` (an admin whose scope covers it).
pub async fn get_policy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let who = bearer(&app, &headers).await?;
    Ok(Json(policy_of(&app, &who, &id).await?.1))
}

/// `PUT /v1/workspaces/{id}/policy` (an admin whose scope covers it): see [`replace_policy`].
pub async fn set_policy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Value>> {
    let who = bearer(&app, &headers).await?;
    Ok(Json(replace_policy(&app, &who, &id, &body).await?))
}

/// `POST /v1/users` `{name?, role?, workspace?}` (an admin): a user of a workspace the admin
/// administers (its own unless named) and its integration token, returned once. Only a tenant
/// admin creates tenant admins.
pub async fn create_user(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::CreatedUser>)> {
    let who = bearer(&app, &headers).await?;
    let admin = roles::admin(who.clone())?;
    let b = body_object(&body)?;
    only_fields(&b, &["name", "role", "workspace"])?;
    name_field(&b, "name", "user")?;
    let role = match b.get("role") {
        None => Role::Member,
        Some(v) => v
            .as_str()
            .and_then(Role::from_name)
            .filter(|r| *r != Role::Operator)
            .ok_or_else(|| {
                ApiError::new(
                    Code::InvalidRequest,
                    "`role` is tenant_admin, admin (of a workspace) or member",
                )
            })?,
    };
    if role == Role::TenantAdmin && admin.role != Role::TenantAdmin {
        return Err(ApiError::new(
            Code::NotPermitted,
            "only a tenant admin creates tenant admins",
        ));
    }
    if b.contains_key("workspace") {
        slug_field(&b, "workspace", None)?;
    }
    let new: api::NewUser = typed(b)?;
    let ws = match new.workspace.as_deref() {
        Some(slug) => app.store.workspace_by_slug(&admin.tenant_id, slug).await?,
        None => app.store.workspace(&admin.workspace_id).await?,
    }
    .filter(|w| administers(&who, &w.tenant_id, &w.id))
    .ok_or_else(ApiError::not_found)?;
    let user = UserRow {
        id: app.mint(IdKind::User),
        tenant_id: admin.tenant_id.clone(),
        workspace_id: ws.id.clone(),
        name: new.name.unwrap_or_else(|| "user".to_owned()),
        role,
        created_at: app.now(),
    };
    let token = add_user(&app, &user).await?;
    Ok((
        StatusCode::CREATED,
        Json(api::CreatedUser {
            id: user.id,
            name: user.name,
            role: role.as_str().to_owned(),
            workspace: ws.slug,
            token,
        }),
    ))
}

/// The live agent `id` if the caller (an admin) administers its workspace.
async fn administered_agent(app: &App, who: &Principal, id: &str) -> ApiResult<AgentRow> {
    app.store
        .agent(id)
        .await?
        .filter(|a| a.deleted_at.is_none() && administers(who, &a.tenant_id, &a.workspace_id))
        .ok_or_else(ApiError::not_found)
}

async fn set_agent(
    app: &App,
    headers: &HeaderMap,
    id: &str,
    suspend: bool,
) -> ApiResult<Json<api::Card>> {
    let who = bearer(app, headers).await?;
    let a = set_agent_suspended(app, &who, id, suspend).await?;
    Ok(Json(card_body(app, &a).await?))
}

/// Suspends (`suspend`) or resumes agent `id`, for an admin whose scope covers it (§5.9): see
/// [`suspend_agent`] and [`resume_agent`]. Returns the agent as it is now.
pub async fn set_agent_suspended(
    app: &App,
    who: &Principal,
    id: &str,
    suspend: bool,
) -> ApiResult<AgentRow> {
    roles::admin(who.clone())?;
    let a = administered_agent(app, who, id).await?;
    if suspend {
        // The entries whose senders are owed AB-4013, marked in the suspension's commit (none
        // when it was suspended already: a second suspension tells nobody again).
        let owed = app.store.suspend_agent(&a.id, app.now()).await?;
        app.invalidate_directory();
        // The suspension is made: a notice that fails now stays owed for the reaper's next pass.
        for e in &owed {
            if let Err(err) = app.owed_entry_notice(e, NoticeKind::Held).await {
                tracing::warn!(agent = %a.id, code = %err.code(), error = %err.message(), "a suspension's notice was not sent; the reaper's next pass sends it");
            }
        }
    } else {
        app.store.resume_agent(&a.id).await?;
        app.invalidate_directory();
        app.wake([&a.id]);
    }
    app.store
        .agent(&a.id)
        .await?
        .ok_or_else(ApiError::not_found)
}

/// `POST /v1/agents/{id}/suspend` (an admin whose scope covers the agent): its credential is
/// refused (AB-1004) and its inbox holds; the sender of every message waiting in it, and of every
/// message sent to it while suspended, gets `system.undeliverable` with AB-4013 (§5.9).
pub async fn suspend_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Card>> {
    set_agent(&app, &headers, &id, true).await
}

/// `POST /v1/agents/{id}/resume` (an admin whose scope covers the agent): its credential works
/// again and its held inbox is delivered.
pub async fn resume_agent(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Card>> {
    set_agent(&app, &headers, &id, false).await
}
