//! People (`docs/api.md`, "Users and tokens"): listing and removing users, and issuing, listing
//! and revoking their integration tokens. A tenant admin acts on its tenant's users, a workspace
//! admin on its workspace's, the gateway operator on every user; anyone else is refused (AB-1002)
//! whatever the request names, and a user or token outside the caller's scope answers exactly
//! like one that does not exist (`crate::roles`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{Role, Store as _, TokenRow, TokenSubject, UserRow};

use crate::access::bearer;
use crate::auth::{new_token, token_hash};
use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Json, Path, parse_json};
use crate::roles::{AdminScope, admin_scope};
use crate::state::{App, Principal};

/// The users a caller administers.
enum Scope {
    /// Every user of the gateway (the operator).
    All,
    /// The users of a tenant, or of one workspace of it.
    Admin {
        tenant_id: String,
        workspace_id: Option<String>,
    },
}

/// The caller, when it administers people, and its scope; AB-1002 for anyone else.
fn scope_of(who: &Principal) -> ApiResult<(UserRow, Scope)> {
    let refuse = || {
        ApiError::new(
            Code::NotPermitted,
            "an admin's or the gateway operator's integration token is required",
        )
    };
    let Principal::User(u) = who else {
        return Err(refuse());
    };
    let scope = match admin_scope(who) {
        Some(AdminScope::Tenant(t)) => Scope::Admin {
            tenant_id: t.to_owned(),
            workspace_id: None,
        },
        Some(AdminScope::Workspace(w)) => Scope::Admin {
            tenant_id: u.tenant_id.clone(),
            workspace_id: Some(w.to_owned()),
        },
        None if u.role == Role::Operator => Scope::All,
        None => return Err(refuse()),
    };
    Ok((u.clone(), scope))
}

impl Scope {
    /// The tenant whose rows the store is asked for (`None`: every tenant's).
    fn tenant(&self) -> Option<&str> {
        match self {
            Scope::All => None,
            Scope::Admin { tenant_id, .. } => Some(tenant_id),
        }
    }

    fn covers(&self, u: &UserRow) -> bool {
        match self {
            Scope::All => true,
            Scope::Admin {
                tenant_id,
                workspace_id,
            } => {
                &u.tenant_id == tenant_id
                    && workspace_id.as_ref().is_none_or(|w| &u.workspace_id == w)
            }
        }
    }
}

/// A tenant admin's user and tokens are changed only by a tenant admin or the operator: a
/// workspace admin sees them in its lists but may not act on them (AB-1002).
fn may_act_on(caller: &UserRow, target: &UserRow, what: &str) -> ApiResult<()> {
    if target.role == Role::TenantAdmin
        && !matches!(caller.role, Role::TenantAdmin | Role::Operator)
    {
        return Err(ApiError::new(
            Code::NotPermitted,
            format!("only a tenant admin {what} a tenant admin"),
        ));
    }
    Ok(())
}

fn ts(t: i64) -> String {
    Timestamp(t).to_string()
}

/// A token's public id: `tok_` and the first 128 bits of its hash, so it names the token without
/// storing anything more and opens nothing.
pub(crate) fn token_id(hash: &[u8; 32]) -> String {
    let mut head = [0u8; 16];
    head.copy_from_slice(&hash[..16]);
    format!(
        "tok_{}",
        agentbus_protocol::ids::encode(u128::from_be_bytes(head))
    )
}

/// Tenant and workspace slugs by id, for the tenants `scope` covers.
async fn slugs(app: &App, scope: &Scope) -> ApiResult<HashMap<String, String>> {
    let tenants = match scope.tenant() {
        Some(t) => app.store.tenant(t).await?.into_iter().collect(),
        None => app.store.tenants().await?,
    };
    let mut out = HashMap::new();
    for t in tenants {
        for w in app.store.workspaces(&t.id).await? {
            out.insert(w.id, w.slug);
        }
        out.insert(t.id, t.slug);
    }
    Ok(out)
}

fn user_body(u: &UserRow, slugs: &HashMap<String, String>) -> api::User {
    api::User {
        id: u.id.clone(),
        name: u.name.clone(),
        role: u.role.as_str().to_owned(),
        tenant: slugs.get(&u.tenant_id).cloned(),
        workspace: slugs.get(&u.workspace_id).cloned(),
        created_at: ts(u.created_at),
    }
}

fn token_body(t: &TokenRow, u: &UserRow) -> api::TokenInfo {
    api::TokenInfo {
        id: token_id(&t.hash),
        user: u.id.clone(),
        user_name: u.name.clone(),
        role: u.role.as_str().to_owned(),
        label: t.label.clone(),
        created_at: ts(t.created_at),
        revoked_at: t.revoked_at.map(ts),
    }
}

/// The user `id` if the caller's scope covers it, else exactly what a missing one gets.
async fn scoped_user(app: &App, scope: &Scope, id: &str) -> ApiResult<UserRow> {
    app.store
        .user(id)
        .await?
        .filter(|u| scope.covers(u))
        .ok_or_else(ApiError::not_found)
}

/// `GET /v1/users` (an admin, or the operator): the users the caller administers, oldest first.
pub async fn list_users(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::Users>> {
    let who = bearer(&app, &headers).await?;
    let (_, scope) = scope_of(&who)?;
    let slugs = slugs(&app, &scope).await?;
    let users = app
        .store
        .users(scope.tenant())
        .await?
        .iter()
        .filter(|u| scope.covers(u))
        .map(|u| user_body(u, &slugs))
        .collect();
    Ok(Json(api::Users { users }))
}

/// `DELETE /v1/users/{id}` (an admin whose scope covers the user, or the operator): the user, its
/// tokens and its console sessions are gone at once. Nobody removes itself, and only a tenant
/// admin removes a tenant admin. Agents the user registered stay, with their own credentials.
pub async fn remove_user(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::User>> {
    let who = bearer(&app, &headers).await?;
    let (caller, scope) = scope_of(&who)?;
    let target = scoped_user(&app, &scope, &id).await?;
    if target.id == caller.id {
        return Err(ApiError::new(
            Code::NotPermitted,
            "an admin does not remove itself; another admin of its scope can",
        ));
    }
    may_act_on(&caller, &target, "removes")?;
    let slugs = slugs(&app, &scope).await?;
    if !app.store.delete_user(&target.id).await? {
        return Err(ApiError::not_found());
    }
    app.invalidate_directory();
    Ok(Json(user_body(&target, &slugs)))
}

/// A label: 1-100 characters, not blank (AB-3016 otherwise).
fn label(l: Option<String>) -> ApiResult<Option<String>> {
    match l {
        Some(s) if s.trim().is_empty() || s.chars().count() > 100 => Err(ApiError::new(
            Code::InvalidRequest,
            "`label` is a string of 1-100 characters",
        )),
        l => Ok(l),
    }
}

/// `POST /v1/tokens` `{user?, label?}` (an admin whose scope covers the user, or the operator): a
/// new integration token for the user (the caller when `user` is absent). Its secret is in this
/// answer only; the user's other tokens keep working.
pub async fn issue_token(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::IssuedToken>)> {
    let who = bearer(&app, &headers).await?;
    let (caller, scope) = scope_of(&who)?;
    // Read after the role check: a caller who may not issue tokens learns nothing from its body.
    // An object, not just anything serde would read as one (an empty array is).
    let body: serde_json::Map<String, serde_json::Value> = parse_json(&body)?;
    let body: api::NewToken = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("the body: {e}")))?;
    let label = label(body.label)?;
    let target = match &body.user {
        Some(id) => scoped_user(&app, &scope, id).await?,
        None => caller.clone(),
    };
    may_act_on(&caller, &target, "issues tokens for")?;
    let token = new_token("abu_");
    let row = TokenRow {
        hash: token_hash(&token),
        subject: TokenSubject::User(target.id.clone()),
        created_at: app.now(),
        label,
        revoked_at: None,
    };
    app.store.create_token(row.clone()).await?;
    Ok((
        StatusCode::CREATED,
        Json(api::IssuedToken {
            info: token_body(&row, &target),
            token,
        }),
    ))
}

/// The tokens of the users `scope` covers, each with its user, oldest first.
async fn scoped_tokens(app: &App, scope: &Scope) -> ApiResult<Vec<(TokenRow, UserRow)>> {
    let users: HashMap<String, UserRow> = app
        .store
        .users(scope.tenant())
        .await?
        .into_iter()
        .filter(|u| scope.covers(u))
        .map(|u| (u.id.clone(), u))
        .collect();
    Ok(app
        .store
        .user_tokens(scope.tenant())
        .await?
        .into_iter()
        .filter_map(|t| match &t.subject {
            TokenSubject::User(id) => users.get(id).cloned().map(|u| (t, u)),
            TokenSubject::Agent(_) => None,
        })
        .collect())
}

/// `GET /v1/tokens` (an admin, or the operator): the tokens of the users the caller administers,
/// revoked ones included, oldest first; never a secret.
pub async fn list_tokens(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::TokenList>> {
    let who = bearer(&app, &headers).await?;
    let (_, scope) = scope_of(&who)?;
    let tokens = scoped_tokens(&app, &scope)
        .await?
        .iter()
        .map(|(t, u)| token_body(t, u))
        .collect();
    Ok(Json(api::TokenList { tokens }))
}

/// `POST /v1/tokens/{id}/revoke` (an admin whose scope covers the token's user, or the operator):
/// the token is refused from now on, on every replica; revoking it again changes nothing.
pub async fn revoke_token(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::TokenInfo>> {
    let who = bearer(&app, &headers).await?;
    let (caller, scope) = scope_of(&who)?;
    let (mut token, user) = scoped_tokens(&app, &scope)
        .await?
        .into_iter()
        .find(|(t, _)| token_id(&t.hash) == id)
        .ok_or_else(ApiError::not_found)?;
    may_act_on(&caller, &user, "revokes tokens of")?;
    if token.revoked_at.is_none() {
        let now = app.now();
        app.store.revoke_token(token.hash, now).await?;
        token.revoked_at = Some(now);
        app.invalidate_directory();
    }
    Ok(Json(token_body(&token, &user)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token's id is stable, shaped like every other id, and differs between tokens.
    #[test]
    fn token_ids_name_tokens_by_their_hash() {
        let a = token_id(&[1; 32]);
        assert_eq!(a, token_id(&[1; 32]));
        assert_ne!(a, token_id(&[2; 32]));
        assert!(a.starts_with("tok_") && a.len() == 4 + 26, "{a}");
    }
}
