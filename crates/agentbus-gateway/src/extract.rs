//! The extractors every handler uses, named like axum's (`Json`, `Query`, `Path`) so a handler
//! changes only its `use` line, and `Body`: each rejects in the one error shape with an `AB-` code
//! (axum's own rejections are plain text without one).
//!
//! A body is read against its route's [`BodyPolicy`]: its byte limit, the code an oversized body
//! gets, and whether it must be JSON. An oversized body is read to its end and discarded before
//! the 413 is sent, so the client has finished writing when it gets its answer: closing on a client
//! that is still sending made its write fail with a broken pipe, which the client reported instead
//! of the 413 (about 2 in 100 2 MiB publishes).

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;

use agentbus_protocol::Code;

use crate::error::ApiError;

/// How a route's request body is read: set per route as a request extension (the router's
/// default is the envelope limit, 1 MiB, AB-3007, JSON).
#[derive(Debug, Clone, Copy)]
pub struct BodyPolicy {
    /// The most bytes accepted.
    pub limit: usize,
    /// The code a larger body is refused with (413).
    pub code: Code,
    /// Whether the body must be JSON: a `Content-Type` other than JSON is AB-3030 (415); none at
    /// all is read as JSON.
    pub json: bool,
    /// What the limit is, for the refusal's message.
    pub what: &'static str,
}

impl BodyPolicy {
    /// Envelopes and every other JSON body: 1 MiB (§2.3).
    pub const ENVELOPE: BodyPolicy = BodyPolicy {
        limit: agentbus_protocol::envelope::MAX_ENVELOPE_BYTES,
        code: Code::EnvelopeTooLarge,
        json: true,
        what: "1 MiB, the envelope limit (§2.3)",
    };
}

/// Marks an error produced by the body deadline (`serve`'s request body timeout).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body timeout")]
pub struct BodyTimeout;

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<BodyTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Whether a `Content-Type` names JSON (`application/json`, `application/…+json`).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return true;
    };
    let essence = v
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn too_large(policy: &BodyPolicy) -> ApiError {
    ApiError::new(
        policy.code,
        format!(
            "the body is larger than this endpoint accepts: {}",
            policy.what
        ),
    )
}

/// Reads `req`'s body under `policy`.
pub async fn read_body(req: Request) -> Result<Bytes, ApiError> {
    let policy = req
        .extensions()
        .get::<BodyPolicy>()
        .copied()
        .unwrap_or(BodyPolicy::ENVELOPE);
    if policy.json && !is_json(req.headers()) {
        return Err(ApiError::new(
            Code::UnsupportedMediaType,
            "this endpoint takes a JSON body: send `Content-Type: application/json`",
        ));
    }
    let declared = declared_length(req.headers());
    let mut over = declared.is_some_and(|n| n > policy.limit as u64);
    let waits_for_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if over && waits_for_continue {
        // The client sends nothing until told to continue, so refusing now loses nothing.
        return Err(too_large(&policy).closing());
    }
    let capacity = declared.unwrap_or(0).min(policy.limit as u64) as usize;
    let mut buf = BytesMut::with_capacity(capacity);
    let mut body = req.into_body();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) if is_timeout(&e) && over => return Err(too_large(&policy).closing()),
            Err(e) if is_timeout(&e) => {
                return Err(ApiError::new(
                    Code::BodyTimeout,
                    "the request body did not arrive in full within the gateway's body timeout",
                )
                .closing());
            }
            Err(e) => {
                return Err(ApiError::new(
                    Code::InvalidRequest,
                    format!("the body could not be read: {e}"),
                )
                .closing());
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        // Past the limit the rest is read and dropped, never kept (see the module comment).
        if !over && buf.len() + data.len() > policy.limit {
            over = true;
            buf = BytesMut::new();
        }
        if !over {
            buf.extend_from_slice(&data);
        }
    }
    if over {
        return Err(too_large(&policy));
    }
    Ok(buf.freeze())
}

/// A request body, read in full under the route's [`BodyPolicy`].
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Body, ApiError> {
        read_body(req).await.map(Body)
    }
}

/// A JSON body parsed as strict I-JSON (`agentbus_protocol::json`) into `T`; as a response, `T`
/// serialised as JSON (like `axum::Json`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Json<T>, ApiError> {
        let bytes = read_body(req).await?;
        parse_json(&bytes).map(Json)
    }
}

/// Parses a JSON body: AB-3001 when it is not I-JSON, AB-3016 when it is not the documented shape.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = agentbus_protocol::json::parse(bytes)
        .map_err(|e| ApiError::new(Code::MalformedJson, e.to_string()))?;
    serde_json::from_value(value)
        .map_err(|e| ApiError::new(Code::InvalidRequest, format!("the body: {e}")))
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Query parameters; a parameter that does not parse is AB-3016 naming it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Query<T>, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Query(v)),
            Err(e) => Err(ApiError::new(
                Code::InvalidRequest,
                format!(
                    "the query string: {}",
                    e.body_text()
                        .trim_start_matches("Failed to deserialize query string: ")
                ),
            )),
        }
    }
}

/// Path parameters; a segment that does not parse (a sequence that is not a number) is AB-3016.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Path<T>, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(Path(v)),
            Err(e) => Err(ApiError::new(
                Code::InvalidRequest,
                format!("the path: {}", e.body_text()),
            )),
        }
    }
}

/// The answer for a path no route has (AB-4004).
pub async fn no_route() -> ApiError {
    ApiError::new(Code::NotFound, "no such endpoint; see /v1/openapi.json")
}

/// The answer for a method a path does not take (AB-4041, 405). axum adds the `Allow` header.
pub async fn no_method(method: axum::http::Method) -> ApiError {
    ApiError::new(
        Code::MethodNotAllowed,
        format!("this endpoint does not take {method}; the Allow header lists what it takes"),
    )
}

/// The most unread request body the gateway reads and discards before it answers (8 MiB, past
/// every body limit): a larger rest closes the connection instead.
const DRAIN_LIMIT: usize = 8 * 1024 * 1024;

/// Reads to its end, before answering, a request body the handler did not read (a route that
/// takes no body, or one refused at its limit): hyper clients still writing it would otherwise
/// see a broken pipe instead of the answer, and on a reused connection the unread rest would be
/// parsed as the next request. A rest past [`DRAIN_LIMIT`], or one that fails or stalls (the
/// body timeout still applies), closes the connection after the answer instead.
pub async fn close_after_unread_body(req: Request, next: axum::middleware::Next) -> Response {
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    let declared = declared_length(req.headers()).unwrap_or(0);
    if !chunked && declared == 0 {
        return next.run(req).await;
    }
    let rest = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (parts, body) = req.into_parts();
    let body = axum::body::Body::new(Watched {
        inner: Some(body),
        done: false,
        rest: rest.clone(),
    });
    let mut resp = next.run(Request::from_parts(parts, body)).await;
    let unread = rest.lock().map(|mut r| r.take()).unwrap_or_default();
    let drained = match unread {
        None => true,
        Some(_) if declared > DRAIN_LIMIT as u64 => false,
        Some(body) => drain(body).await,
    };
    if !drained {
        resp.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Reads and drops a body to its end; false when it fails or passes [`DRAIN_LIMIT`].
async fn drain(mut body: axum::body::Body) -> bool {
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                seen += f.data_ref().map_or(0, |d| d.len());
                if seen > DRAIN_LIMIT {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// A request body that hands what its reader left unread back to [`close_after_unread_body`]
/// when it is dropped.
struct Watched {
    inner: Option<axum::body::Body>,
    done: bool,
    rest: std::sync::Arc<std::sync::Mutex<Option<axum::body::Body>>>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.done
            && let Some(body) = self.inner.take()
            && let Ok(mut rest) = self.rest.lock()
        {
            *rest = Some(body);
        }
    }
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let polled = std::pin::Pin::new(&mut *inner).poll_frame(cx);
        let ended = matches!(polled, std::task::Poll::Ready(None)) || inner.is_end_stream();
        // A failed body (timeout, reset) is not worth draining either.
        if ended || matches!(polled, std::task::Poll::Ready(Some(Err(_)))) {
            self.done = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}
