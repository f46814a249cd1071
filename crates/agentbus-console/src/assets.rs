//! The console's static files, compiled into the binary: nothing is fetched from a CDN or any
//! network, so the console works air-gapped.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::Console;

/// Every asset: name, media type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console.js"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_str!("../assets/icon.svg"),
    ),
];

/// `GET /console/assets/{file}`: an embedded file, revalidated by its ETag.
pub(crate) async fn serve(
    _: State<Arc<Console>>,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((_, media, body)) = ASSETS.iter().find(|(name, _, _)| *name == file) else {
        return crate::pages::missing();
    };
    let etag = format!("\"{}\"", hex_prefix(body));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (*body).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    resp
}

fn hex_prefix(body: &str) -> String {
    Sha256::digest(body.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}
