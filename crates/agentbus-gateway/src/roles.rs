//! Roles and the scopes they act in (`docs/security.md`, "Roles").
//!
//! Every route asks two questions in this order. First, may the caller's role do this at all?
//! That is answered from the credential alone (AB-1002), so it is the same answer whatever object
//! the request names, one that exists or not. Second, does the caller's scope cover the object?
//! An object outside it is answered exactly like one that does not exist.

use agentbus_protocol::Code;
use agentbus_store::{AgentRow, Role, UserRow};

use crate::error::{ApiError, ApiResult};
use crate::state::{App, Principal};

/// What an admin administers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminScope<'a> {
    /// Every workspace of this tenant (a tenant admin).
    Tenant(&'a str),
    /// This one workspace (a workspace admin).
    Workspace(&'a str),
}

impl AdminScope<'_> {
    /// Whether the scope covers the workspace `workspace_id` of tenant `tenant_id`.
    pub fn covers(self, tenant_id: &str, workspace_id: &str) -> bool {
        match self {
            AdminScope::Tenant(t) => t == tenant_id,
            AdminScope::Workspace(w) => w == workspace_id,
        }
    }
}

/// The scope a principal administers, if it is a tenant or workspace admin.
pub fn admin_scope(p: &Principal) -> Option<AdminScope<'_>> {
    match p {
        Principal::User(u) if u.role == Role::TenantAdmin => {
            Some(AdminScope::Tenant(u.tenant_id.as_str()))
        }
        Principal::User(u) if u.role == Role::Admin => {
            Some(AdminScope::Workspace(u.workspace_id.as_str()))
        }
        _ => None,
    }
}

/// Whether `p` administers the workspace `workspace_id` of tenant `tenant_id`.
pub fn administers(p: &Principal, tenant_id: &str, workspace_id: &str) -> bool {
    admin_scope(p).is_some_and(|s| s.covers(tenant_id, workspace_id))
}

fn refuse(what: &str) -> ApiError {
    ApiError::new(Code::NotPermitted, what.to_owned())
}

/// The gateway operator, or AB-1002.
pub fn operator(p: Principal) -> ApiResult<UserRow> {
    match p {
        Principal::User(u) if u.role == Role::Operator => Ok(u),
        _ => Err(refuse(
            "only the gateway operator's integration token manages tenants",
        )),
    }
}

/// A tenant admin, or AB-1002.
pub fn tenant_admin(p: Principal) -> ApiResult<UserRow> {
    match p {
        Principal::User(u) if u.role == Role::TenantAdmin => Ok(u),
        _ => Err(refuse("a tenant admin's integration token is required")),
    }
}

/// A tenant or workspace admin, or AB-1002.
pub fn admin(p: Principal) -> ApiResult<UserRow> {
    match p {
        Principal::User(u) if matches!(u.role, Role::TenantAdmin | Role::Admin) => Ok(u),
        _ => Err(refuse(
            "a tenant or workspace admin's integration token is required",
        )),
    }
}

/// A user of a tenant (any role but the operator, who belongs to none), or AB-1002.
pub fn tenant_user(p: Principal) -> ApiResult<UserRow> {
    match p {
        Principal::User(u) if u.role != Role::Operator => Ok(u),
        Principal::User(_) => Err(refuse(
            "the gateway operator administers tenants; use a user token of the tenant",
        )),
        Principal::Agent(_) => Err(refuse("this endpoint takes a user's integration token")),
    }
}

/// Refuses a principal whose tenant (AB-1003) or agent (AB-1004) is suspended.
pub async fn ensure_active(app: &App, p: &Principal) -> ApiResult<()> {
    if let Principal::User(u) = p
        && u.role == Role::Operator
    {
        return Ok(());
    }
    if app
        .tenant_row(p.tenant_id())
        .await?
        .is_some_and(|t| t.suspended_at.is_some())
    {
        return Err(ApiError::new(
            Code::TenantSuspended,
            "this tenant is suspended by the gateway operator; nothing is lost, and its credentials work again once it is resumed",
        ));
    }
    if let Principal::Agent(a) = p
        && a.suspended_at.is_some()
    {
        return Err(suspended());
    }
    Ok(())
}

fn suspended() -> ApiError {
    ApiError::new(
        Code::AgentSuspended,
        "this agent is suspended; messages to it are held until an admin of its workspace resumes it",
    )
}

/// Refuses to go on delivering to an agent that was suspended or deleted, or whose tenant was
/// suspended, since its connection began (a long-poll or WebSocket outlives the check at connect).
pub async fn still_receives(app: &App, agent: &AgentRow) -> ApiResult<()> {
    let current = app.agent_row(&agent.id).await?;
    match current {
        Some(a) if a.deleted_at.is_some() => Err(ApiError::new(
            Code::MissingCredential,
            "this agent was deleted",
        )),
        Some(a) if a.suspended_at.is_some() => Err(suspended()),
        Some(a) => ensure_active(app, &Principal::Agent(a)).await,
        None => Err(ApiError::not_found()),
    }
}
