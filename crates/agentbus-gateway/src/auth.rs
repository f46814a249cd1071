//! Bearer authentication (§3.2 step 1).

use axum::http::HeaderMap;

use agentbus_protocol::Code;
use agentbus_store::Store;

use crate::app::{App, Principal};
use crate::error::{ApiError, ApiResult};

/// The principal of the request's `Authorization: Bearer` token.
pub async fn bearer<S: Store>(app: &App<S>, headers: &HeaderMap) -> ApiResult<Principal> {
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
    app.authenticate(token).await
}

/// The calling agent, refusing user tokens.
pub async fn agent<S: Store>(
    app: &App<S>,
    headers: &HeaderMap,
) -> ApiResult<agentbus_store::AgentRow> {
    match bearer(app, headers).await? {
        Principal::Agent(a) => Ok(a),
        Principal::User(_) => Err(ApiError::new(
            Code::NotPermitted,
            "this endpoint takes an agent credential",
        )),
    }
}
