//! The workspace policy, read and replaced through the API's functions
//! (`admin::policy_of`, `admin::replace_policy`): the same schema check and the same errors
//! (AB-3026 with every violation, AB-3001 for text that is not JSON), nothing stored on refusal.

use askama::Template;
use axum::extract::{Path, Query, RawForm};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use agentbus_gateway::ops::{ApiError, ApiResult, WorkspaceView};

use crate::render::{self, Chrome, page_with, peer};
use crate::session::Viewer;

#[derive(Template)]
#[template(path = "policy.html")]
struct PolicyPage<'a> {
    chrome: Option<&'a Chrome>,
    workspaces: Vec<(String, String, bool)>,
    workspace_id: String,
    workspace: String,
    document: String,
    error: Option<(String, String)>,
    violations: Vec<(String, String, String)>,
    saved: bool,
}

/// Which workspace's policy.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct PolicyQuery {
    workspace: Option<String>,
    saved: Option<String>,
}

/// The workspaces whose policy the viewer administers.
async fn administered(v: &Viewer) -> ApiResult<Vec<WorkspaceView>> {
    v.ops().administered_workspaces().await
}

async fn render_page(
    v: &Viewer,
    id: &str,
    document: Option<String>,
    error: Option<&ApiError>,
    saved: bool,
) -> ApiResult<Response> {
    let (ws, doc) = v.ops().policy(id).await?;
    let workspaces = administered(v)
        .await?
        .into_iter()
        .map(|w| {
            let current = w.id == ws.id;
            (w.id, w.slug, current)
        })
        .collect();
    let status = error.map_or(StatusCode::OK, |e| {
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST)
    });
    page_with(
        status,
        &PolicyPage {
            chrome: Some(&v.chrome),
            workspaces,
            workspace_id: ws.id.clone(),
            workspace: ws.slug.clone(),
            document: document.unwrap_or_else(|| render::json_for_edit(&doc)),
            error: error.map(|e| (e.code.to_string(), peer(&e.message))),
            violations: error.map(render::violations).unwrap_or_default(),
            saved,
        },
    )
}

/// `GET /console/policy?workspace=ws_…`: the policy of a workspace the viewer administers (its
/// own by default).
pub(crate) async fn view(v: Viewer, Query(q): Query<PolicyQuery>) -> Response {
    let r = async {
        let id = match q.workspace {
            Some(id) => id,
            None => {
                let mine = administered(&v).await?;
                mine.iter()
                    .find(|w| w.id == v.user.workspace_id)
                    .or(mine.first())
                    .map_or_else(|| v.user.workspace_id.clone(), |w| w.id.clone())
            }
        };
        render_page(&v, &id, None, None, q.saved.is_some()).await
    }
    .await;
    v.respond(r)
}

/// `POST /console/policy/{id}` `csrf`, `document`: `PUT /v1/workspaces/{id}/policy`'s function.
/// A refused document is shown again, as typed, with every violation listed.
pub(crate) async fn save(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    let v = &v;
    super::change(v, &headers, &body, |f| async move {
        let document = f.get("document").unwrap_or_default().to_owned();
        match v.ops().replace_policy(&id, document.as_bytes()).await {
            Ok(_) => super::back(&format!(
                "/console/policy?workspace={}&saved=1",
                form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
            )),
            // Scope refusals answer as the API does; a document's problems are listed in the form.
            Err(e) if matches!(e.code.http_status(), 400 | 422) => {
                render_page(v, &id, Some(document), Some(&e), false).await
            }
            Err(e) => Err(e),
        }
    })
    .await
}
