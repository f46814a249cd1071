//! A request's caller (§3.2 step 1): its bearer token authenticated (the auth layer), then its
//! tenant and agent checked active (`roles`, over the directory). Every route starts here.

use axum::http::HeaderMap;

use agentbus_protocol::Code;

use crate::error::{ApiError, ApiResult};
use crate::state::{App, Principal};

/// The header a sidecar announces its version in (§11.4).
pub const SIDECAR_VERSION_HEADER: &str = "agentbus-sidecar-version";

/// Compares dotted versions numerically (`0.10.0` > `0.9.1`); non-numeric parts count as 0.
pub fn version_lt(a: &str, b: &str) -> bool {
    let parse = |v: &str| {
        v.split('.')
            .map(|p| p.parse::<u64>().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    parse(a) < parse(b)
}

/// The principal of the request's `Authorization: Bearer` token. A sidecar that announces a version
/// below `min_sidecar_version` is refused with AB-6002 before anything else (§11.4); a credential of
/// a suspended tenant (AB-1003) or agent (AB-1004) after it.
pub async fn bearer(app: &App, headers: &HeaderMap) -> ApiResult<Principal> {
    if let Some(v) = headers
        .get(SIDECAR_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        && version_lt(v, &app.config.min_sidecar_version)
    {
        return Err(ApiError::new(
            Code::SidecarTooOld,
            format!(
                "sidecar {v} is older than this gateway's minimum {}; upgrade agentbus",
                app.config.min_sidecar_version
            ),
        ));
    }
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| ApiError::new(Code::MissingCredential, "no Authorization: Bearer header"))?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty() && t.len() <= 256)
        .ok_or_else(|| {
            ApiError::new(
                Code::MissingCredential,
                "the Authorization header is not `Bearer <token>`",
            )
        })?;
    let principal = app.authenticate(token).await?;
    crate::roles::ensure_active(app, &principal).await?;
    if let Principal::Agent(a) = &principal {
        app.mark_heard(&a.id);
    }
    Ok(principal)
}

/// The calling agent, refusing user tokens.
pub async fn agent(app: &App, headers: &HeaderMap) -> ApiResult<agentbus_store::AgentRow> {
    match bearer(app, headers).await? {
        Principal::Agent(a) => Ok(a),
        Principal::User(_) => Err(ApiError::new(
            Code::NotPermitted,
            "this endpoint takes an agent credential",
        )),
    }
}
