//! Tenants, for the gateway operator: the list, suspension and resumption
//! (`admin::tenants_for`, `admin::set_tenant_suspended`, the API's functions).

use askama::Template;
use axum::extract::{Path, RawForm};
use axum::http::HeaderMap;
use axum::response::Response;

use agentbus_gateway::admin;

use crate::render::{self, Chrome, page};
use crate::session::Viewer;

struct Row {
    id: String,
    slug: String,
    created: String,
    suspended: String,
}

#[derive(Template)]
#[template(path = "tenants.html")]
struct TenantsPage<'a> {
    chrome: Option<&'a Chrome>,
    tenants: Vec<Row>,
}

/// `GET /console/tenants`: every tenant (the operator's view; AB-1002 for anyone else).
pub(crate) async fn list(v: Viewer) -> Response {
    let r = async {
        let tenants = admin::tenants_for(&v.console.app, &v.who)
            .await?
            .into_iter()
            .map(|t| Row {
                id: t.id,
                slug: t.slug,
                created: render::time(t.created_at),
                suspended: t.suspended_at.map(render::time).unwrap_or_default(),
            })
            .collect();
        page(&TenantsPage {
            chrome: Some(&v.chrome),
            tenants,
        })
    }
    .await;
    v.respond(r)
}

async fn set(v: Viewer, headers: HeaderMap, id: String, body: &[u8], suspend: bool) -> Response {
    super::change(&v, &headers, body, |_| async {
        admin::set_tenant_suspended(&v.console.app, &v.who, &id, suspend).await?;
        super::back("/console/tenants")
    })
    .await
}

/// `POST /console/tenants/{id}/suspend` `csrf`.
pub(crate) async fn suspend(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    set(v, headers, id, &body, true).await
}

/// `POST /console/tenants/{id}/resume` `csrf`.
pub(crate) async fn resume(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    set(v, headers, id, &body, false).await
}
