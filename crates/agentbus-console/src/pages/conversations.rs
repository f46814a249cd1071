//! Conversations (§7): the list of those the viewer may read, a thread in `received_at` order with
//! each message's sender, verification, delivery states and attachments, and attachment
//! downloads, always as attachments.

use askama::Template;
use axum::extract::{Path, Query};
use axum::response::Response;
use serde_json::{Map, Value};

use agentbus_gateway::ops::{
    ApiResult, ConversationView, CopyProgress, RecipientState, ThreadMessage, Verification,
};
use agentbus_protocol::envelope::Envelope;
use agentbus_protocol::frame;

use crate::render::{self, Addr, Chrome, page, peer};
use crate::session::Viewer;

/// Conversations per page of the list.
const PAGE: u32 = 50;
/// Messages per page of a thread.
const THREAD_PAGE: usize = 200;

/// Paging of the list.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    before: Option<String>,
}

struct Row {
    id: String,
    /// The subject of the last message, else the first line of its text, shortened.
    title: String,
    participants: Vec<Addr>,
    messages: u64,
    last_at: String,
    first_at: String,
    last_from: Addr,
    last_kind: String,
}

/// How long a list's line of text may be, in characters.
pub(crate) const LINE: usize = 90;

/// The title of a conversation in a list: its last subject, else the first line of its last
/// message, shortened on a word boundary.
pub(crate) fn title(c: &ConversationView) -> String {
    let line = c
        .last_subject
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .or(c.last_line.as_deref())
        .unwrap_or_default();
    peer(&render::shorten(line.trim(), LINE))
}

#[derive(Template)]
#[template(path = "conversations.html")]
struct ListPage<'a> {
    chrome: Option<&'a Chrome>,
    rows: Vec<Row>,
    next: Option<String>,
}

/// The short name of a message type: `task.request` for `agentbus.task.request.v1`.
pub(crate) fn short_kind(kind: &str) -> String {
    peer(
        kind.strip_prefix("agentbus.")
            .and_then(|k| k.strip_suffix(".v1"))
            .unwrap_or(kind),
    )
}

fn attr(attrs: &Map<String, Value>, k: &str) -> String {
    attrs
        .get(k)
        .and_then(Value::as_str)
        .map(peer)
        .unwrap_or_default()
}

/// `GET /console/conversations?before=`: `GET /v1/conversations` as the viewer reads it.
pub(crate) async fn list(v: Viewer, Query(q): Query<ListQuery>) -> Response {
    let r = async {
        let list = v.ops().conversations(q.before.as_deref(), PAGE).await?;
        let next = (list.len() as u32 >= PAGE)
            .then(|| list.last().map(|c| c.cursor.clone()))
            .flatten();
        let rows = list
            .iter()
            .map(|c| Row {
                id: c.id.clone(),
                title: title(c),
                participants: c.participants.iter().map(|a| Addr::of(a)).collect(),
                messages: c.messages,
                last_at: render::time(c.last_at),
                first_at: render::time(c.first_at),
                last_from: Addr::of(&c.last.source),
                last_kind: short_kind(&c.last.kind),
            })
            .collect();
        page(&ListPage {
            chrome: Some(&v.chrome),
            rows,
            next,
        })
    }
    .await;
    v.respond(r)
}

/// An attachment of a message (§9).
pub(crate) struct AttachmentView {
    pub name: String,
    pub size: String,
    pub media_type: String,
    pub sha256: String,
    /// The console's download path, when the ref names a blob.
    pub href: Option<String>,
}

/// The attachments `data.attachments` lists.
pub(crate) fn attachments(data: &Value) -> Vec<AttachmentView> {
    data["attachments"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|a| {
                    let r = a["ref"].as_str().unwrap_or_default();
                    let blob = r.rsplit('/').next().filter(|id| {
                        id.starts_with("blb_")
                            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    });
                    AttachmentView {
                        name: peer(a["name"].as_str().unwrap_or_default()),
                        size: render::count(a["size"].as_i64().unwrap_or(0)),
                        media_type: peer(a["media_type"].as_str().unwrap_or_default()),
                        sha256: a["sha256"]
                            .as_str()
                            .unwrap_or_default()
                            .chars()
                            .take(12)
                            .collect(),
                        href: blob.map(|id| format!("/console/attachments/{id}")),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A signature's state as a badge.
pub(crate) struct VerificationView {
    pub ok: bool,
    pub label: String,
    pub detail: String,
}

pub(crate) fn verification_view(v: &Verification) -> VerificationView {
    match v {
        Verification::Verified {
            key_id,
            by_gateway,
            revoked_at,
            ..
        } => VerificationView {
            ok: true,
            label: if *by_gateway {
                "verified · gateway key".into()
            } else {
                "verified".into()
            },
            detail: match revoked_at {
                Some(t) => format!("{key_id}, revoked since {}", render::time(*t)),
                None => key_id.clone(),
            },
        },
        Verification::Failed(why) => VerificationView {
            ok: false,
            label: "does not verify (AB-1303)".into(),
            detail: peer(why),
        },
    }
}

/// One recipient's copy and how far it got.
struct RecipientView {
    address: String,
    progress: &'static str,
    /// The delivery column when not yet delivered: where the copy is instead.
    state: String,
    delivered: bool,
    shown: String,
    answered_by: String,
}

/// Where a copy is, for a person.
fn where_it_is(s: &RecipientState) -> String {
    match s.progress {
        CopyProgress::Persisted => "waiting in the inbox".into(),
        CopyProgress::Leased => format!(
            "handed to the sidecar, not acknowledged ({} attempts)",
            s.attempts
        ),
        CopyProgress::Delivered => "delivered".into(),
        CopyProgress::DeadLettered => format!("dead-lettered after {} attempts", s.attempts),
        CopyProgress::Expired => "expired before delivery".into(),
    }
}

struct MessageView {
    id: String,
    kind: String,
    time: String,
    from: String,
    to: String,
    subject: String,
    body: String,
    correlation: String,
    task: String,
    verification: VerificationView,
    attachments: Vec<AttachmentView>,
    recipients: Vec<RecipientView>,
}

#[derive(Template)]
#[template(path = "conversation.html")]
struct ThreadPage<'a> {
    chrome: Option<&'a Chrome>,
    id: String,
    total: usize,
    messages: Vec<MessageView>,
    page: usize,
    pages: usize,
    traces: Vec<render::TraceLink>,
}

/// Paging of a thread.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ThreadQuery {
    page: Option<usize>,
}

async fn recipient_address(v: &Viewer, id: &str) -> ApiResult<String> {
    Ok(match v.ops().agent_label(id).await? {
        Some(address) => peer(&address),
        None => id.to_owned(),
    })
}

async fn recipients(v: &Viewer, states: Vec<RecipientState>) -> ApiResult<Vec<RecipientView>> {
    let mut out = Vec::with_capacity(states.len());
    for s in states {
        out.push(RecipientView {
            address: recipient_address(v, &s.agent_id).await?,
            progress: s.progress.as_str(),
            state: where_it_is(&s),
            delivered: s.progress == CopyProgress::Delivered,
            shown: s.shown_at.map(render::time).unwrap_or_default(),
            answered_by: s.answered_by.unwrap_or_default(),
        });
    }
    Ok(out)
}

/// A message as the thread shows it.
async fn message_view(v: &Viewer, t: ThreadMessage) -> ApiResult<MessageView> {
    let m = &t.message;
    let map = t.envelope.as_object().cloned().unwrap_or_default();
    let data = map.get("data").cloned().unwrap_or(Value::Null);
    let body = frame::envelope_body(&Envelope::from_map(map.clone()));
    Ok(MessageView {
        id: m.id.clone(),
        kind: short_kind(&m.kind),
        time: render::time(m.received_at),
        from: peer(&m.source),
        to: peer(&m.to),
        subject: attr(&map, "subject"),
        body: peer(&body),
        correlation: attr(&map, "correlation_id"),
        task: m.task_id.clone().unwrap_or_default(),
        verification: verification_view(&t.verification),
        attachments: attachments(&data),
        recipients: recipients(v, t.recipients).await?,
    })
}

/// `GET /console/conversations/{id}?page=`: the thread, as `GET /v1/conversations/{id}` reads it
/// for the viewer, with each message's verification and delivery states.
pub(crate) async fn thread(
    v: Viewer,
    Path(id): Path<String>,
    Query(q): Query<ThreadQuery>,
) -> Response {
    let r = async {
        // Replies are found among every message the viewer may read, not only this page's.
        let thread = v
            .ops()
            .thread(&id, q.page.unwrap_or(1), THREAD_PAGE)
            .await?;
        let traces = render::traces(
            thread.messages.iter().map(|m| &m.envelope),
            &v.console.app.config.trace_url,
        );
        let mut messages = Vec::with_capacity(thread.messages.len());
        for m in thread.messages {
            messages.push(message_view(&v, m).await?);
        }
        page(&ThreadPage {
            chrome: Some(&v.chrome),
            id: peer(&id),
            total: thread.total,
            messages,
            page: thread.page,
            pages: thread.pages,
            traces,
        })
    }
    .await;
    v.respond(r)
}

/// `GET /console/attachments/{id}`: a blob the viewer's scope covers, always as a download
/// (`Content-Disposition: attachment`, `nosniff`), the same answer the API gives its parties.
pub(crate) async fn attachment(v: Viewer, Path(id): Path<String>) -> Response {
    let r = async { v.ops().attachment(&id).await }.await;
    v.respond(r)
}
