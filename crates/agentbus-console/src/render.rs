//! Turning templates into answers: the page frame, the error page, form bodies, and the few
//! formatting helpers templates share. Every value reaches HTML through askama's escaping; nothing
//! here builds markup by hand.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use agentbus_gateway::ops::{ApiError, ApiResult, Caller};
use agentbus_gateway::ops::{ConsoleSession, Role, UserView};
use agentbus_protocol::Code;
use agentbus_protocol::timestamp::Timestamp;

use crate::session::role_label;

/// A link of the navigation bar.
pub(crate) struct NavItem {
    pub href: &'static str,
    pub label: &'static str,
    pub current: bool,
}

/// What every signed-in page shows around its content.
pub(crate) struct Chrome {
    /// The user's name.
    pub user: String,
    /// The user's role, as the console names it.
    pub role: &'static str,
    /// What the role covers: `tenant acme`, `workspace acme/backend`, or the gateway.
    pub scope: String,
    /// The pages this role may open.
    pub nav: Vec<NavItem>,
    /// The session's CSRF token, for the forms of the page.
    pub csrf: String,
}

impl Chrome {
    /// The frame of a page at `path` for `user`, whom `ops` is the caller of.
    pub async fn of(
        ops: Caller<'_>,
        user: &UserView,
        session: &ConsoleSession,
        path: &str,
    ) -> Chrome {
        let (tenant, workspace) = ops.home().await.unwrap_or_default();
        let (tenant, workspace) = (tenant.unwrap_or_default(), workspace.unwrap_or_default());
        let scope = match user.role {
            Role::Operator => "the gateway".to_owned(),
            Role::TenantAdmin => format!("tenant {tenant}"),
            Role::Admin | Role::Member => format!("workspace {tenant}/{workspace}"),
        };
        let pages: &[(&str, &str)] = match user.role {
            Role::Operator => &[
                ("/console/overview", "Overview"),
                ("/console/tenants", "Tenants"),
            ],
            Role::TenantAdmin | Role::Admin => &[
                ("/console/overview", "Overview"),
                ("/console/agents", "Agents"),
                ("/console/conversations", "Conversations"),
                ("/console/tasks", "Tasks"),
                ("/console/attention", "Needs attention"),
                ("/console/search", "Search"),
                ("/console/topics", "Topics"),
                ("/console/policy", "Policy"),
                ("/console/usage", "Usage"),
            ],
            Role::Member => &[
                ("/console/overview", "Overview"),
                ("/console/agents", "Agents"),
            ],
        };
        Chrome {
            user: user.name.clone(),
            role: role_label(user.role),
            scope,
            nav: pages
                .iter()
                .map(|(href, label)| NavItem {
                    href,
                    label,
                    current: path == *href || path.starts_with(&format!("{href}/")),
                })
                .collect(),
            csrf: session.csrf.clone(),
        }
    }
}

/// A form body (`application/x-www-form-urlencoded`), in order.
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    /// Parses a body; anything that is not a pair is ignored.
    pub fn parse(body: &[u8]) -> Fields {
        Fields(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

/// Renders a template as a 200 page.
pub(crate) fn page(t: &impl Template) -> ApiResult<Response> {
    page_with(StatusCode::OK, t)
}

/// Renders a template as a page with `status`.
pub(crate) fn page_with(status: StatusCode, t: &impl Template) -> ApiResult<Response> {
    Ok(html(status, fragment(t)?))
}

/// Renders a template to text (a page, or a live fragment).
pub(crate) fn fragment(t: &impl Template) -> ApiResult<String> {
    t.render().map_err(|e| {
        tracing::error!(error = %e, "a console template failed to render");
        ApiError::new(
            Code::StorageUnavailable,
            "the console could not render this page",
        )
    })
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    chrome: Option<&'a Chrome>,
    status: u16,
    code: String,
    title: &'static str,
    message: &'a str,
    doc: String,
    violations: Vec<(String, String, String)>,
}

/// The page for a refusal: its code, title and message, the violations it lists, and where the
/// code is documented, with the status the catalogue gives it.
pub(crate) fn error_page(chrome: Option<&Chrome>, e: &ApiError) -> Response {
    let status = e.code.http_status();
    html(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        fragment(&ErrorPage {
            chrome,
            status,
            code: e.code.to_string(),
            title: e.code.entry().title,
            message: &e.message,
            doc: e.code.doc_path(),
            violations: violations(e),
        })
        .unwrap_or_else(|_| e.message.clone()),
    )
}

/// `details.violations` of a refusal as (code, path, message), for forms that list them.
pub(crate) fn violations(e: &ApiError) -> Vec<(String, String, String)> {
    e.details
        .as_ref()
        .and_then(|d| d["violations"].as_array())
        .map(|list| {
            list.iter()
                .map(|v| {
                    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
                    (s("code"), s("path"), s("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignIn<'a> {
    chrome: Option<&'a Chrome>,
    token: &'a str,
    next: Option<&'a str>,
    error: Option<(String, &'a str)>,
}

/// The sign-in page, with its form token, where to go after, and why it is shown again.
pub(crate) fn sign_in(
    token: &str,
    next: Option<&str>,
    error: Option<&ApiError>,
    status: StatusCode,
) -> Response {
    let page = SignIn {
        chrome: None,
        token,
        next,
        error: error.map(|e| (e.code.to_string(), e.message.as_str())),
    };
    html(status, fragment(&page).unwrap_or_default())
}

/// An instant as pages show it: `2026-11-28 14:03:07 UTC`.
pub(crate) fn time(ms: i64) -> String {
    let t = Timestamp(ms).to_string();
    let t = t.split('.').next().unwrap_or(&t).trim_end_matches('Z');
    format!("{} UTC", t.replacen('T', " ", 1))
}

/// An RFC 3339 text as pages show it (unchanged when it does not parse).
pub(crate) fn time_text(s: &str) -> String {
    s.parse::<Timestamp>()
        .map(|t| time(t.millis()))
        .unwrap_or_else(|_| s.to_owned())
}

/// A count with thousands separated: `12,345`.
pub(crate) fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A peer's text made visible for a person: control characters (but newlines and tabs) and
/// invisible or reordering characters (bidi controls, zero-width and tag characters) are shown as
/// `\u{…}` escapes, so what an operator reads is what the sender wrote. HTML escaping is the
/// templates'; this is the part escaping does not do.
pub(crate) fn peer(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for (c, hidden) in agentbus_protocol::frame::hidden_marked(text) {
        if (c.is_control() && c != '\n' && c != '\t') || hidden {
            let _ = write!(out, "\\u{{{:04X}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// An address as pages show it: a peer's text (see [`peer`]) in parts that each end after a `/`.
/// Templates write each part as an unbreakable run with a `<wbr>` after it, so a narrow column
/// breaks an address only after a slash, never inside a name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Addr(pub Vec<String>);

impl Addr {
    /// The parts of `text`, made visible with [`peer`].
    pub fn of(text: &str) -> Addr {
        let text = peer(text);
        let mut parts = Vec::new();
        let mut part = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            part.push(c);
            // `agent://` stays whole: a break goes after the last slash of a run.
            if c == '/' && chars.peek() != Some(&'/') {
                parts.push(std::mem::take(&mut part));
            }
        }
        if !part.is_empty() {
            parts.push(part);
        }
        Addr(parts)
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|p| f.write_str(p))
    }
}

/// A line shortened to at most `max` characters for a list: cut at the last space before the
/// limit (inside a long word only when there is none) and ended with `…`.
pub(crate) fn shorten(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    let kept = match cut.rfind(char::is_whitespace) {
        Some(at) if at > 0 => &cut[..at],
        _ => cut.as_str(),
    };
    format!("{}…", kept.trim_end())
}

/// A JSON document pretty-printed for editing: invisible and reordering characters, which valid
/// JSON holds only inside strings, are written as `\uXXXX` escapes, so the text shows them and
/// still parses to the same document.
pub(crate) fn json_for_edit(v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for (c, hidden) in agentbus_protocol::frame::hidden_marked(&text) {
        if hidden {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{:04X}", u);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON value pretty-printed for a `<pre>`.
pub(crate) fn pretty(v: &serde_json::Value) -> String {
    peer(&serde_json::to_string_pretty(v).unwrap_or_default())
}

/// A W3C trace a page's messages carry (§2.1 `traceparent`), with its link to the operator's
/// viewer (the gateway's `trace_url`) when one is set.
pub(crate) struct TraceLink {
    /// The 32-hex trace id.
    pub id: String,
    /// The viewer's URL for it.
    pub href: Option<String>,
}

/// The distinct traces of `envelopes`, in order, linked under `template` (empty: no link). Only a
/// real trace id is put in a link (`agentbus_protocol::tracelink`), so a peer's `traceparent`
/// never writes a URL.
pub(crate) fn traces<'a>(
    envelopes: impl Iterator<Item = &'a serde_json::Value>,
    template: &str,
) -> Vec<TraceLink> {
    let parents =
        envelopes.filter_map(|e| e.get("traceparent").and_then(serde_json::Value::as_str));
    agentbus_protocol::tracelink::trace_ids(parents)
        .into_iter()
        .map(|id| TraceLink {
            href: (!template.is_empty())
                .then(|| agentbus_protocol::tracelink::link(template, &id))
                .flatten(),
            id,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_times() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(-1234567), "-1,234,567");
        assert_eq!(time(1_795_000_000_000), "2026-11-18 11:06:40 UTC");
    }

    #[test]
    fn edited_json_shows_hidden_characters_and_still_parses() {
        let doc = serde_json::json!({"rules": [{"description": "a\u{202E}b\u{E0041}"}]});
        let text = json_for_edit(&doc);
        assert!(
            text.contains("\\u202E") && text.contains("\\uDB40\\uDC41"),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            doc
        );
    }

    #[test]
    fn lines_are_shortened_on_a_word_boundary() {
        assert_eq!(shorten("short enough", 20), "short enough");
        assert_eq!(
            shorten("Review change 482 for concurrency bugs", 20),
            "Review change 482…"
        );
        assert_eq!(shorten("unbreakable_identifier_here", 10), "unbreakab…");
    }

    #[test]
    fn addresses_break_only_after_a_slash() {
        let a = Addr::of("agent://default/backend/release-bot");
        assert_eq!(a.0, ["agent://", "default/", "backend/", "release-bot"]);
        assert_eq!(a.to_string(), "agent://default/backend/release-bot");
    }

    #[test]
    fn peer_text_shows_what_hides() {
        assert_eq!(
            peer("a\u{202E}b\u{200B}c\r\nd\te"),
            "a\\u{202E}b\\u{200B}c\\u{000D}\nd\te"
        );
    }
}
