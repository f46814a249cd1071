//! The pages, one module per area. Each handler takes the signed-in [`Viewer`], reads through the
//! gateway's scoped functions with the viewer's principal, and renders a template; a refusal
//! renders the error page with the code and status the API would answer.

pub(crate) mod agents;
pub(crate) mod attention;
pub(crate) mod conversations;
pub(crate) mod overview;
pub(crate) mod policy;
pub(crate) mod search;
pub(crate) mod tasks;
pub(crate) mod tenants;
pub(crate) mod topics;
pub(crate) mod usage;

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use agentbus_gateway::ops::{ApiError, ApiResult};
use agentbus_protocol::Code;

use crate::Console;
use crate::render::{self, Fields};
use crate::session::Viewer;

/// `GET /console`: the overview, or the sign-in form without a session.
pub(crate) async fn home(_v: Viewer) -> Response {
    Redirect::to("/console/overview").into_response()
}

/// Any other path under `/console`: the not-found page, the same whether signed in or not.
pub(crate) async fn not_found(_: State<Arc<Console>>) -> Response {
    missing()
}

/// The page of a console path that does not exist.
pub(crate) fn missing() -> Response {
    render::error_page(None, &ApiError::new(Code::NotFound, "no such console page"))
}

/// The page of a console path asked with a method it does not take (a POST to a page), with the
/// `AB-` code the API gives the same mistake.
pub(crate) async fn wrong_method() -> Response {
    let e = ApiError::new(
        Code::MethodNotAllowed,
        "this console page does not take that method",
    );
    render::error_page(None, &e)
}

/// Runs a change submitted from a form: refuses it without the session's CSRF token (nothing
/// else is looked at then), and otherwise answers with `change`'s page.
pub(crate) async fn change<F>(
    v: &Viewer,
    headers: &HeaderMap,
    body: &[u8],
    change: impl FnOnce(Fields) -> F,
) -> Response
where
    F: Future<Output = ApiResult<Response>>,
{
    let fields = Fields::parse(body);
    if let Err(e) = v.check_csrf(headers, &fields) {
        return v.respond(Err(e));
    }
    v.respond(change(fields).await)
}

/// After a change, back to the page that shows its effect.
pub(crate) fn back(to: &str) -> ApiResult<Response> {
    Ok(Redirect::to(to).into_response())
}
