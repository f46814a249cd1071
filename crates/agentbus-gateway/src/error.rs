//! One error type for every rejection, one JSON shape (`agentbus_api::ErrorBody`: `{"error":
//! {code, message, doc_url, request_id, details?}}`), with the status the catalogue gives the code.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use agentbus_protocol::Code;
use agentbus_store::StoreError;

/// A rejection.
#[derive(Debug)]
pub struct ApiError {
    /// The catalogue code.
    pub code: Code,
    /// What went wrong, specifically.
    pub message: String,
    /// Further detail (for example every validation violation).
    pub details: Option<serde_json::Value>,
    /// Seconds to wait before retrying, for rate and depth limits.
    pub retry_after: Option<u64>,
    /// Whether the answer closes the connection (`Connection: close`): after a body that was not
    /// read to its end, the connection cannot carry another request.
    pub close: bool,
}

impl ApiError {
    /// A rejection with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: None,
            retry_after: None,
            close: false,
        }
    }

    /// Makes the answer close the connection.
    pub fn closing(mut self) -> ApiError {
        self.close = true;
        self
    }

    /// Adds details.
    pub fn details(mut self, d: serde_json::Value) -> ApiError {
        self.details = Some(d);
        self
    }

    /// The answer for a resource the caller may not know exists: exactly what a missing one gets.
    pub fn not_found() -> ApiError {
        ApiError::new(Code::NotFound, "no such resource")
    }

    /// A refusal listing every violation (`details.violations`), with the first one's code and
    /// place as the message; `violations` must not be empty.
    pub fn with_violations(violations: Vec<agentbus_protocol::envelope::Violation>) -> ApiError {
        let (code, message) = violations
            .first()
            .map_or((Code::InvalidRequest, String::from("invalid")), |v| {
                (v.code, format!("{}: {}", v.path, v.message))
            });
        let details = serde_json::to_value(&violations).unwrap_or(serde_json::Value::Null);
        ApiError::new(code, message).details(json!({"violations": details}))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound => ApiError::not_found(),
            StoreError::Conflict(what) => {
                ApiError::new(Code::NameTaken, format!("{what} is already taken"))
            }
            StoreError::Limit(what) => ApiError::new(Code::KeyLimit, what),
            StoreError::Busy(msg) => {
                tracing::warn!(error = %msg, "store busy");
                let mut e = ApiError::new(
                    Code::StoreBusy,
                    "the database stayed busy (every connection of this gateway, or a row this needs, was held); nothing was stored",
                );
                e.retry_after = Some(1);
                e
            }
            StoreError::Backend(msg) => {
                tracing::error!(error = %msg, "storage failure");
                ApiError::new(
                    Code::StorageUnavailable,
                    "the gateway could not reach its store; nothing was stored unless it failed while committing (retrying with the same id is safe either way)",
                )
            }
        }
    }
}

tokio::task_local! {
    /// The current request's id and the gateway's public URL, for error bodies.
    pub static REQUEST: (String, String);
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (request_id, base) = REQUEST
            .try_with(|r| r.clone())
            .unwrap_or_else(|_| (String::new(), String::new()));
        let status =
            StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
        let body = agentbus_api::ErrorBody {
            error: agentbus_api::ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
                doc_url: format!("{base}{}", self.code.doc_path()),
                request_id,
                details: self.details,
            },
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert("retry-after", v);
        }
        if self.close {
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        resp
    }
}

/// Handler result.
pub type ApiResult<T> = Result<T, ApiError>;
