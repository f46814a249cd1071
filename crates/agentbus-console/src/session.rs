//! Sign-in, sessions and CSRF.
//!
//! Signing in exchanges a user integration token for a session: a random id in an HttpOnly,
//! `SameSite=Strict` cookie (`Secure` behind HTTPS), stored by the gateway's store only as its
//! SHA-256, with the SHA-256 of the token it was opened with. Every request looks the session up
//! and authenticates that token hash again, so sign-out, the session's end, a revoked token or a
//! suspended tenant end it on every replica at once. Every change is a POST carrying the
//! session's CSRF token, from the console's own origin; the sign-in form carries a token bound to
//! a short-lived cookie of its own, so another site cannot sign a browser in either.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Query, RawForm, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use agentbus_gateway::ops::{ApiError, ApiResult, Caller, Door, SignedIn, token_hash};
use agentbus_gateway::ops::{ConsoleSession, Role, UserView};
use agentbus_protocol::Code;

use crate::Console;
use crate::render::{self, Chrome};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "agentbus_console";
/// The sign-in form's cookie (its CSRF token's other half).
const SIGN_IN_COOKIE: &str = "agentbus_console_sign_in";
/// How long a sign-in form stays usable, seconds.
const SIGN_IN_TTL_S: i64 = 3600;

fn random_token() -> String {
    let raw: [u8; 32] = agentbus_runtime::random_bytes();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Constant-time equality of two secrets.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the console is reached over HTTPS (its public URL, or a TLS-terminating proxy's
/// `X-Forwarded-Proto`): its cookies are then `Secure`.
fn is_https(console: &Console, headers: &HeaderMap) -> bool {
    console.app.config.public_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn set_cookie(name: &str, value: &str, max_age: i64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path=/console; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    );
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Why a request has no usable session.
#[derive(Debug)]
pub(crate) enum NoSession {
    /// No cookie, or a session that ended (AB-1021).
    Ended,
    /// The user's credential is refused now (AB-1001, AB-1003): the session ends with it.
    Refused(ApiError),
}

impl NoSession {
    pub(crate) fn error(self) -> ApiError {
        match self {
            NoSession::Ended => ApiError::new(
                Code::ConsoleSignedOut,
                "no console session: sign in with a user token",
            ),
            NoSession::Refused(e) => e,
        }
    }
}

/// The session of a request and its user, checked now: the session exists and has not ended,
/// and the token it was opened with still authenticates that user, whose tenant is active.
pub(crate) async fn resolve(
    console: &Console,
    headers: &HeaderMap,
) -> Result<(ConsoleSession, UserView, SignedIn), NoSession> {
    let id = cookie(headers, SESSION_COOKIE).ok_or(NoSession::Ended)?;
    let door = Door::new(&console.app);
    let hash = sha256(id);
    let session = door
        .console_session(hash)
        .await
        .map_err(NoSession::Refused)?
        .ok_or(NoSession::Ended)?;
    let who = match door.resume(session.token_hash).await {
        Ok(who) => who,
        Err(e) if e.code == Code::MissingCredential => {
            // The token was revoked since sign-in: the session goes with it.
            let _ = door.end_console_session(hash).await;
            return Err(NoSession::Ended);
        }
        Err(e) => return Err(NoSession::Refused(e)),
    };
    match who.user() {
        Some(u) if u.id == session.user_id => Ok((session, u, who)),
        _ => Err(NoSession::Ended),
    }
}

/// A signed-in user, as every page handler receives it.
pub(crate) struct Viewer {
    /// The console.
    pub console: Arc<Console>,
    /// The user, as the gateway's door signed it in.
    pub who: SignedIn,
    /// The user.
    pub user: UserView,
    /// The session.
    pub session: ConsoleSession,
    /// The page frame: who is signed in, navigation, the CSRF token.
    pub chrome: Chrome,
}

impl Viewer {
    /// The gateway as this user may use it: every read and change of a page goes through it.
    pub fn ops(&self) -> Caller<'_> {
        Caller::new(&self.console.app, &self.who)
    }

    /// Refuses a change whose form lacks the session's CSRF token or that came from another site
    /// (AB-1020). Called before anything else a POST handler does.
    pub fn check_csrf(&self, headers: &HeaderMap, fields: &render::Fields) -> ApiResult<()> {
        check_origin(&self.console.app.config.public_url, headers)?;
        match fields.get("csrf") {
            Some(t) if same(t, &self.session.csrf) => Ok(()),
            _ => Err(csrf_refused()),
        }
    }

    /// The page for `result`: the rendered page, or the error page for its refusal.
    pub fn respond(&self, result: ApiResult<Response>) -> Response {
        result.unwrap_or_else(|e| render::error_page(Some(&self.chrome), &e))
    }
}

fn csrf_refused() -> ApiError {
    ApiError::new(
        Code::ConsoleCsrf,
        "this change carries no valid CSRF token for your session; reload the page and submit it again",
    )
}

/// A change must come from the console's own pages: a browser names the page's origin in
/// `Origin` (the gateway's public URL, or the host the request was sent to) and says
/// `Sec-Fetch-Site: cross-site` or `same-site` for another site's; either refuses.
fn check_origin(public_url: &str, headers: &HeaderMap) -> ApiResult<()> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if text("sec-fetch-site").is_some_and(|s| s == "cross-site" || s == "same-site") {
        return Err(csrf_refused());
    }
    if let Some(origin) = text("origin") {
        let public = public_url.trim_end_matches('/');
        let to_host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .zip(text("host"))
            .is_some_and(|(o, host)| o == host);
        if origin != public && !to_host {
            return Err(csrf_refused());
        }
    }
    Ok(())
}

impl Viewer {
    /// The signed-in user of a request with `headers` to `path`, checked now (see [`resolve`]).
    pub(crate) async fn from_headers(
        console: &Arc<Console>,
        headers: &HeaderMap,
        path: &str,
    ) -> Result<Viewer, NoSession> {
        let (session, user, who) = resolve(console, headers).await?;
        let chrome = Chrome::of(Caller::new(&console.app, &who), &user, &session, path).await;
        Ok(Viewer {
            console: console.clone(),
            who,
            user,
            session,
            chrome,
        })
    }
}

impl FromRequestParts<Arc<Console>> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Viewer, Response> {
        Viewer::from_headers(console, &parts.headers, parts.uri.path())
            .await
            .map_err(|why| signed_out(console, &parts.headers, parts, why))
    }
}

/// The answer without a session: a page is redirected to the sign-in form (coming back after);
/// a live stream or a change gets the error itself.
fn signed_out(console: &Console, headers: &HeaderMap, parts: &Parts, why: NoSession) -> Response {
    let error = why.error();
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if parts.method != axum::http::Method::GET || wants_stream {
        return render::error_page(None, &error);
    }
    let mut url = String::from("/console/sign-in");
    let next = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| safe_next(p));
    let mut query = form_urlencoded::Serializer::new(String::new());
    if let Some(n) = next {
        query.append_pair("next", n);
    }
    if error.code != Code::ConsoleSignedOut || cookie(headers, SESSION_COOKIE).is_some() {
        query.append_pair("reason", &error.code.to_string());
    }
    let query = query.finish();
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query);
    }
    let mut resp = Redirect::to(&url).into_response();
    if cookie(headers, SESSION_COOKIE).is_some() {
        resp.headers_mut().append(
            header::SET_COOKIE,
            set_cookie(SESSION_COOKIE, "", 0, is_https(console, headers)),
        );
    }
    resp
}

/// Where sign-in may return to: a console path of plain characters, never another site.
fn safe_next(p: &str) -> bool {
    p.starts_with("/console/")
        && !p.contains("//")
        && !p.contains('\\')
        && p.len() <= 512
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.?=&%".contains(&b))
}

/// Query of the sign-in form.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct SignInQuery {
    next: Option<String>,
    reason: Option<String>,
}

/// `GET /console/sign-in`: the form, with a fresh sign-in token in the form and in a cookie.
pub(crate) async fn sign_in_form(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(q): Query<SignInQuery>,
) -> Response {
    let reason = q
        .reason
        .as_deref()
        .and_then(|r| r.parse::<Code>().ok())
        .map(|c| ApiError::new(c, reason_text(c)));
    sign_in_page(&console, &headers, q.next.as_deref(), reason.as_ref())
}

fn reason_text(c: Code) -> &'static str {
    match c {
        Code::TenantSuspended => "your tenant is suspended by the gateway operator",
        Code::MissingCredential => "that token is unknown or revoked",
        _ => "your session ended; sign in again",
    }
}

fn sign_in_page(
    console: &Console,
    headers: &HeaderMap,
    next: Option<&str>,
    error: Option<&ApiError>,
) -> Response {
    let token = random_token();
    let status = error.map_or(StatusCode::OK, |e| {
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST)
    });
    let mut resp = render::sign_in(&token, next.filter(|n| safe_next(n)), error, status);
    resp.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            SIGN_IN_COOKIE,
            &token,
            SIGN_IN_TTL_S,
            is_https(console, headers),
        ),
    );
    resp
}

/// `POST /console/sign-in` `token`, `sign_in` (the form's token), `next?`: exchanges a user
/// token for a session.
pub(crate) async fn sign_in(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    RawForm(body): RawForm,
) -> Response {
    let fields = render::Fields::parse(&body);
    let next = fields
        .get("next")
        .filter(|n| safe_next(n))
        .map(str::to_owned);
    let form_ok = check_origin(&console.app.config.public_url, &headers).is_ok()
        && match (cookie(&headers, SIGN_IN_COOKIE), fields.get("sign_in")) {
            (Some(c), Some(f)) => same(c, f),
            _ => false,
        };
    if !form_ok {
        return sign_in_page(&console, &headers, next.as_deref(), Some(&csrf_refused()));
    }
    match open_session(&console, fields.get("token").unwrap_or_default().trim()).await {
        Ok(id) => {
            let mut resp =
                Redirect::to(next.as_deref().unwrap_or("/console/overview")).into_response();
            let h = resp.headers_mut();
            let secure = is_https(&console, &headers);
            h.append(
                header::SET_COOKIE,
                set_cookie(SESSION_COOKIE, &id, console.config.session_ttl_s, secure),
            );
            h.append(
                header::SET_COOKIE,
                set_cookie(SIGN_IN_COOKIE, "", 0, secure),
            );
            resp
        }
        Err(e) => sign_in_page(&console, &headers, next.as_deref(), Some(&e)),
    }
}

/// Checks `token` as the API would and stores a session for its user; returns the session id.
async fn open_session(console: &Console, token: &str) -> ApiResult<String> {
    let app = &console.app;
    if token.is_empty() || token.len() > 256 {
        return Err(ApiError::new(
            Code::MissingCredential,
            "paste a user integration token (abu_…)",
        ));
    }
    let door = Door::new(app);
    let Some(user) = door.sign_in(token).await?.user() else {
        return Err(ApiError::new(
            Code::NotPermitted,
            "this is an agent credential; the console takes a user integration token (abu_…)",
        ));
    };
    let now = app.now();
    let id = random_token();
    // Sessions that ended are forgotten as new ones begin.
    door.open_console_session(ConsoleSession {
        id_hash: sha256(&id),
        user_id: user.id,
        token_hash: token_hash(token),
        csrf: random_token(),
        created_at: now,
        expires_at: now + console.config.session_ttl_s * 1000,
    })
    .await?;
    Ok(id)
}

/// `POST /console/sign-out` `csrf`: ends the session everywhere and clears its cookie.
pub(crate) async fn sign_out(v: Viewer, headers: HeaderMap, RawForm(body): RawForm) -> Response {
    let fields = render::Fields::parse(&body);
    if let Err(e) = v.check_csrf(&headers, &fields) {
        return v.respond(Err(e));
    }
    if let Err(e) = Door::new(&v.console.app)
        .end_console_session(v.session.id_hash)
        .await
    {
        return v.respond(Err(e));
    }
    let mut resp = Redirect::to("/console/sign-in").into_response();
    resp.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", 0, is_https(&v.console, &headers)),
    );
    resp
}

/// The role as the console names it.
pub(crate) fn role_label(r: Role) -> &'static str {
    match r {
        Role::Operator => "gateway operator",
        Role::TenantAdmin => "tenant admin",
        Role::Admin => "workspace admin",
        Role::Member => "member",
    }
}
