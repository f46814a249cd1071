//! Self-description: the well-known document (§11.4), schemas (§5), error pages, health, metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};

use agentbus_api as api;

use agentbus_protocol::errors::{Code, render_entry_markdown};
use agentbus_protocol::schema::{KnownType, SCHEMA_FILES, schema_text};
use agentbus_store::Store;

use crate::error::ApiError;
use crate::extract::{Json, Path};
use crate::state::App;

/// The protocol majors this gateway speaks.
pub const PROTOCOL_VERSIONS: &[&str] = &["1"];

/// `GET /.well-known/agentbus.json`.
pub async fn well_known(State(app): State<Arc<App>>) -> Json<api::WellKnown> {
    Json(api::WellKnown {
        protocol_versions: PROTOCOL_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
        gateway_version: env!("CARGO_PKG_VERSION").to_owned(),
        min_sidecar_version: app.config.min_sidecar_version.clone(),
        deprecations: Vec::new(),
        types: KnownType::ALL
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect(),
        schemas: SCHEMA_FILES
            .iter()
            .map(|(p, _)| *p)
            .chain(GATEWAY_SCHEMAS.iter().map(|(p, _)| *p))
            .map(|p| format!("/schemas/{p}"))
            .collect(),
        gateway_keys: vec![api::GatewayKey {
            id: app.gateway_key_id.clone(),
            public_key: app.gateway_key.public().to_base64url(),
            signs: "agent://system/gateway/*".to_owned(),
        }],
        limits: api::Limits {
            envelope_bytes: agentbus_protocol::envelope::MAX_ENVELOPE_BYTES as u64,
            max_skew_s: app.config.max_skew_s,
            visibility_timeout_s: app.config.visibility_timeout_s,
            max_attempts: app.config.max_attempts,
            inbox_max_depth: app.config.inbox_max_depth,
        },
        openapi: "/v1/openapi.json".to_owned(),
    })
}

/// The gateway's own documents' schemas, beside the wire protocol's (`SCHEMA_FILES`).
pub const GATEWAY_SCHEMAS: &[(&str, &str)] =
    &[(crate::policy::SCHEMA_PATH, crate::policy::SCHEMA_TEXT)];

/// `GET /schemas/{path}`: every schema of §5, and the gateway's own (the workspace policy), by
/// registry path.
pub async fn schema(Path(path): Path<String>) -> Response {
    let gateway = GATEWAY_SCHEMAS
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, text)| *text);
    match gateway.or_else(|| schema_text(&path)) {
        Some(text) => ([(header::CONTENT_TYPE, "application/schema+json")], text).into_response(),
        None => ApiError::not_found().into_response(),
    }
}

/// `GET /errors/{code}`: the catalogue entry, as Markdown, or JSON when asked for.
pub async fn error_page(Path(code): Path<String>, headers: HeaderMap) -> Response {
    let Ok(code) = code.parse::<Code>() else {
        return ApiError::not_found().into_response();
    };
    let e = code.entry();
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    if wants_json {
        return Json(api::ErrorPage {
            code: code.to_string(),
            http_status: e.http_status,
            title: e.title.to_owned(),
            cause: e.cause.to_owned(),
            fix: e.fix.to_owned(),
        })
        .into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        render_entry_markdown(e),
    )
        .into_response()
}

/// `GET /healthz`: the process is alive and answering.
pub async fn health() -> Json<api::Health> {
    Json(api::Health {
        status: "alive".to_owned(),
    })
}

/// `GET /readyz`: the store answers and its schema is current, and the gateway is not shutting
/// down; otherwise 503 with the code that says which (AB-9001, AB-9003).
pub async fn ready(State(app): State<Arc<App>>) -> Result<Json<api::Health>, ApiError> {
    if *app.shutting_down.borrow() {
        return Err(ApiError::new(
            Code::ShuttingDown,
            "the gateway is shutting down",
        ));
    }
    app.store.check_ready().await.map_err(|e| {
        tracing::error!(error = %e, "readiness check failed");
        ApiError::new(Code::StorageUnavailable, format!("not ready: {e}"))
    })?;
    Ok(Json(api::Health {
        status: "ready".to_owned(),
    }))
}

/// `GET /metrics`: Prometheus text, for the gateway operator's token only: its series name agents
/// of every tenant (inbox depths), which no tenant may learn about another.
pub async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let allowed = match crate::access::bearer(&app, &headers).await {
        Ok(p) => crate::roles::operator(p).map(|_| ()),
        Err(e) => Err(e),
    };
    match allowed {
        Ok(()) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            crate::metrics::render(),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/openapi.json`.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The OpenAPI 3.1 document of the HTTP API; a test keeps it in step with the router.
pub const OPENAPI: &str = include_str!("../openapi.json");
