//! The test clock's routes (`GET`/`POST /v1/test/clock`, operator only; see `testclock`). Above
//! the reaper: moving the clock runs a pass, so every timer due by the new time has fired.

use std::sync::Arc;

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_runtime::Clock;
use agentbus_store::Role;
use axum::extract::State;
use axum::http::HeaderMap;

use crate::error::{ApiError, ApiResult};
use crate::extract::Json;
use crate::state::{App, Principal};
use crate::testclock::TestClock;

async fn admin(app: &App, headers: &HeaderMap) -> ApiResult<Arc<TestClock>> {
    match crate::access::bearer(app, headers).await? {
        // The clock is the whole gateway's, every tenant's: only its operator moves it.
        Principal::User(u) if u.role == Role::Operator => {}
        _ => {
            return Err(ApiError::new(
                Code::NotPermitted,
                "the test clock is moved with the gateway operator's integration token",
            ));
        }
    }
    app.test_clock.clone().ok_or_else(ApiError::not_found)
}

fn reading(clock: &TestClock) -> api::ClockReading {
    api::ClockReading {
        now: clock.now().to_string(),
        offset_ms: clock.offset_ms(),
        reaped: None,
    }
}

/// `GET /v1/test/clock` (operator): the test clock's time.
pub async fn read(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<api::ClockReading>> {
    let clock = admin(&app, &headers).await?;
    Ok(Json(reading(&clock)))
}

/// `POST /v1/test/clock` `{"advance": "25h"}` (operator): moves the clock forward, then runs one
/// reaper pass, so every timer due by the new time has fired when this answers.
pub async fn advance(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    crate::extract::Body(body): crate::extract::Body,
) -> ApiResult<Json<api::ClockReading>> {
    let clock = admin(&app, &headers).await?;
    // Parsed after the credential is checked, as every route decides (docs/security.md).
    let body: api::AdvanceClock = crate::extract::parse_json(&body)?;
    let by = crate::config::parse_duration(&crate::config::Raw::Text(body.advance.clone()))
        .map_err(|b| {
            ApiError::new(
                Code::InvalidRequest,
                format!("`advance`: {}; {}", b.cause, b.fix),
            )
        })?;
    let now = clock
        .advance(by.as_millis() as i64)
        .map_err(|e| ApiError::new(Code::StorageUnavailable, format!("the clock's marker: {e}")))?;
    tracing::warn!(advance = %body.advance, now = %now, "UNSAFE TEST CLOCK moved forward");
    let report = app.reap().await?;
    let mut out = reading(&clock);
    out.reaped = Some(api::Reaped {
        dead_lettered: report.dead.len() as u64,
        expired: report.expired.len() as u64,
    });
    Ok(Json(out))
}
