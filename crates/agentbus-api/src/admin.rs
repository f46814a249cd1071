//! The routes of the roles: tenants, workspaces, users.

use serde::{Deserialize, Serialize};

use crate::WorkspaceRef;

/// A tenant (`GET /v1/tenants`, suspend and resume).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Tenant {
    /// Its `ten_` id.
    pub id: String,
    /// Its slug.
    pub slug: String,
    /// When it was created.
    pub created_at: String,
    /// Since when it is suspended.
    pub suspended_at: Option<String>,
}

/// `POST /v1/tenants` `{slug, workspace?, admin_name?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NewTenant {
    /// The tenant's slug.
    pub slug: String,
    /// Its first workspace's slug (`default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Its first admin's name (`admin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_name: Option<String>,
}

/// `POST /v1/tenants`: the tenant, its first workspace and its admin, whose token is shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreatedTenant {
    /// The tenant.
    #[serde(flatten)]
    pub tenant: Tenant,
    /// Its first workspace.
    pub workspace: WorkspaceRef,
    /// Its tenant admin.
    pub admin: TenantAdmin,
}

/// A new tenant's admin, with its token (shown once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TenantAdmin {
    /// Its `usr_` id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `tenant_admin`.
    pub role: String,
    /// Its bearer token (`abu_…`).
    pub token: String,
}

/// `GET /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Tenants {
    /// The tenants.
    pub tenants: Vec<Tenant>,
}

/// A workspace (`POST /v1/workspaces`, each of `GET /v1/workspaces`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workspace {
    /// Its `ws_` id.
    pub id: String,
    /// Its slug.
    pub slug: String,
    /// When it was created.
    pub created_at: String,
}

/// `POST /v1/workspaces` `{slug}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NewWorkspace {
    /// The slug.
    pub slug: String,
}

/// `GET /v1/workspaces`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workspaces {
    /// The workspaces.
    pub workspaces: Vec<Workspace>,
}

/// `POST /v1/users` `{name?, role?, workspace?}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NewUser {
    /// The user's name (`user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `tenant_admin`, `admin` or `member` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The workspace's slug (the admin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// `POST /v1/users`: the user just created, with its token (shown once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreatedUser {
    /// Its `usr_` id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its workspace's slug.
    pub workspace: String,
    /// Its bearer token (`abu_…`).
    pub token: String,
}
