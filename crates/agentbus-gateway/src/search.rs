//! `GET /v1/search`: messages and tasks the caller may read, found through a blind index
//! (`agentbus_protocol::search`): the store holds keyed hashes of each message's terms, written in
//! the publish's transaction; a query's words are hashed the same way, the store answers the
//! newest candidates the caller may read (the conversation routes' rule, applied in the query),
//! and each candidate is opened here, checked against the words (a hash collision is dropped),
//! ranked and cut into a snippet. Nothing outside the caller's view is ever a candidate, so
//! nothing of it can show as a hit, a count or a snippet.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use agentbus_api as api;
use agentbus_protocol::Code;
use agentbus_protocol::search::{self, Field};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{MessageRow, MessageSearch, Store};

use crate::access::bearer;
use crate::crypto::DataKey;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Query};
use crate::state::App;

/// The most candidates one query opens: it bounds every query's work, whatever it asks.
pub const CANDIDATES: u32 = 400;
/// The most hits a page answers.
pub const MAX_PAGE: u32 = 100;

/// The words of a message its index holds, as text: what a person or agent wrote in its
/// `data` (a message's text, a task's instructions, question, answer, summary, failure), one
/// field a line. The same text is indexed at publish and checked and cut at query time.
pub(crate) fn searchable_text(data: &Value) -> String {
    let mut out = Vec::new();
    for name in [
        "text",
        "instructions",
        "question",
        "answer",
        "summary",
        "note",
        "reason",
        "rejection_reason",
    ] {
        if let Some(s) = data.get(name).and_then(Value::as_str) {
            out.push(s);
        }
    }
    if let Some(m) = data.pointer("/failure/message").and_then(Value::as_str) {
        out.push(m);
    }
    out.join("\n")
}

fn attachment_names(data: &Value) -> Vec<&str> {
    data.get("attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("name").and_then(Value::as_str))
        .collect()
}

fn failure_code(data: &Value) -> Option<&str> {
    data.pointer("/failure/code").and_then(Value::as_str)
}

/// The index words of a message with sender attributes `attrs` and `data`, under the tenant's
/// `key`: its subject, its text, its attachments' names and a failure's code, each a field of
/// its own.
pub(crate) fn index_tags(key: &DataKey, attrs: &Map<String, Value>, data: &Value) -> String {
    let key = key.search_key();
    let subject = attrs.get("subject").and_then(Value::as_str).unwrap_or("");
    let text = searchable_text(data);
    let names = attachment_names(data).join("\n");
    let failure = failure_code(data).unwrap_or("");
    key.tags([
        (Field::Subject, subject),
        (Field::Text, text.as_str()),
        (Field::Attachment, names.as_str()),
        (Field::Failure, failure),
    ])
}

/// The query string of `GET /v1/search`.
#[derive(Debug, Default, Deserialize)]
pub struct SearchParams {
    /// The query (`agentbus search --help`, docs/api.md).
    pub q: Option<String>,
    /// The `next` of the page before.
    pub cursor: Option<String>,
    /// Most hits (default 20, at most 100).
    pub limit: Option<u32>,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::InvalidSearch, message)
}

/// A page's cursor: the newest candidate of the first page (`<ms>.<seq>`), which every page of
/// the query reads at or below so the ranking stays put, and how many hits came before.
fn parse_cursor(s: &str) -> ApiResult<((i64, i64), usize)> {
    let mut parts = s.split('.');
    let mut n = || parts.next().and_then(|p| p.parse::<i64>().ok());
    match (n(), n(), n(), parts.next()) {
        (Some(at), Some(seq), Some(skip), None) if skip >= 0 => {
            Ok(((at, seq), usize::try_from(skip).unwrap_or(usize::MAX)))
        }
        _ => Err(bad("`cursor` is the `next` of an earlier page")),
    }
}

/// What a query's `type:` names: `message`, `task` (every task message, one hit per task) or
/// an envelope type as written.
fn kind_filter(kind: Option<&str>) -> (Option<String>, bool) {
    match kind {
        None => (None, false),
        Some("message") => (Some("agentbus.message.v1".into()), false),
        Some("task") => (Some("agentbus.task.*".into()), true),
        Some(k) => (Some(k.to_owned()), false),
    }
}

/// A bare name in `from:`/`to:` is an agent of the caller's own workspace (an agent caller's);
/// an address is taken as written.
async fn address(app: &App, who: &crate::state::Principal, name: &str) -> ApiResult<String> {
    Ok(match who {
        crate::state::Principal::Agent(a) if !name.contains("://") => {
            let own = app.address_of(a).await?;
            let workspace = own.rsplit_once('/').map_or(own.as_str(), |(w, _)| w);
            format!("{workspace}/{name}")
        }
        _ => name.to_owned(),
    })
}

/// `GET /v1/search?q=&cursor=&limit=` (any agent or admin): see the module's comment.
pub async fn search(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(p): Query<SearchParams>,
) -> ApiResult<Json<api::SearchResults>> {
    let who = bearer(&app, &headers).await?;
    Ok(Json(run(&app, &who, &p).await?))
}

/// The search `p` as `who` may run it: the route's work, which the console's search page shares.
pub(crate) async fn run(
    app: &App,
    who: &crate::state::Principal,
    p: &SearchParams,
) -> ApiResult<api::SearchResults> {
    let viewer = crate::identity::viewer(who)?;
    let q = search::Query::parse(p.q.as_deref().unwrap_or("")).map_err(|e| bad(e.to_string()))?;
    let limit = match p.limit {
        Some(0) => return Err(bad("`limit` is at least 1")),
        Some(n) => n.min(MAX_PAGE),
        None => 20,
    } as usize;
    let cursor = p.cursor.as_deref().map(parse_cursor).transpose()?;
    let data_key = app.tenant_key(who.tenant_id()).await?;
    let key = data_key.search_key();
    let mut words: Vec<Vec<String>> = q
        .text_words()
        .iter()
        .map(|w| vec![key.tag(Field::Text, w), key.tag(Field::Subject, w)])
        .collect();
    words.extend(
        q.attachment
            .iter()
            .map(|w| vec![key.tag(Field::Attachment, w)]),
    );
    if let Some(f) = &q.failure {
        words.push(vec![key.tag(Field::Failure, &f.to_lowercase())]);
    }
    let (kind, per_task) = kind_filter(q.kind.as_deref());
    let now = app.now();
    let source = match &q.from {
        Some(f) => Some(address(app, who, f).await?),
        None => None,
    };
    let to_text = match &q.to {
        Some(t) => Some(address(app, who, t).await?),
        None => None,
    };
    let candidates = app
        .store
        .search_messages(MessageSearch {
            tenant_id: who.tenant_id().to_owned(),
            viewer,
            words,
            kind,
            conversation_id: q.conversation.clone(),
            source,
            to_text,
            in_task: per_task || q.state.is_some() || q.capability.is_some(),
            since: q.since.map(|w| w.resolve(now)),
            until: q.until.map(|w| w.resolve(now)),
            // At or below the first page's newest candidate: `before` is exclusive.
            before: cursor.map(|((at, seq), _)| (at, seq.saturating_add(1))),
            limit: CANDIDATES,
        })
        .await?;
    let anchor = match cursor {
        Some((a, _)) => Some(a),
        None => candidates.first().map(|m| (m.received_at, m.seq)),
    };
    let mut hits: Vec<(api::SearchHit, i64)> = Vec::new();
    let mut tasks_seen = std::collections::HashMap::new();
    for m in &candidates {
        let Some(hit) = hit_of(app, &q, m).await? else {
            continue;
        };
        if per_task && let Some(t) = &hit.task {
            // One hit per task: its best message.
            match tasks_seen.get(&t.id).copied() {
                Some(i) => {
                    let (best, _): &(api::SearchHit, i64) = &hits[i];
                    if hit.score > best.score {
                        hits[i] = (hit, m.seq);
                    }
                    continue;
                }
                None => {
                    tasks_seen.insert(t.id.clone(), hits.len());
                }
            }
        }
        hits.push((hit, m.seq));
    }
    // Best first; among equals the newest (candidates came newest first, and the sort is stable).
    hits.sort_by_key(|h| std::cmp::Reverse(h.0.score));
    let skip = cursor.map_or(0, |(_, s)| s);
    let more = hits.len() > skip.saturating_add(limit);
    let page: Vec<api::SearchHit> = hits
        .into_iter()
        .skip(skip)
        .take(limit)
        .map(|(mut h, _)| {
            if per_task {
                h.kind = "task".into();
            }
            h
        })
        .collect();
    let next = match (more, anchor) {
        (true, Some((at, seq))) => Some(format!("{at}.{seq}.{}", skip + page.len())),
        _ => None,
    };
    Ok(api::SearchResults { hits: page, next })
}

/// The hit candidate `m` makes for `q`, once opened: `None` when its text lacks a word (a hash
/// collision) or its task fails a task filter.
async fn hit_of(app: &App, q: &search::Query, m: &MessageRow) -> ApiResult<Option<api::SearchHit>> {
    let env = crate::identity::envelope(app, m).await?;
    let empty = Value::Null;
    let data = env.get("data").unwrap_or(&empty);
    let subject = env.get("subject").and_then(Value::as_str).unwrap_or("");
    let text = searchable_text(data);
    if !q.matches(subject, &text) {
        return Ok(None);
    }
    let names = search::terms(&attachment_names(data).join("\n"));
    if !q.attachment.iter().all(|w| names.contains(w)) {
        return Ok(None);
    }
    if let Some(f) = &q.failure
        && failure_code(data).is_none_or(|c| !c.eq_ignore_ascii_case(f))
    {
        return Ok(None);
    }
    let task = match &m.task_id {
        Some(id) => app.store.task(id).await?.map(|t| api::SearchTask {
            id: t.id,
            state: t.state,
            capability: t.capability,
        }),
        None => None,
    };
    if let Some(s) = &q.state {
        let want = if s == "input_required" {
            "needs_input"
        } else {
            s
        };
        if task.as_ref().is_none_or(|t| t.state != want) {
            return Ok(None);
        }
    }
    if let Some(c) = &q.capability
        && task.as_ref().is_none_or(|t| &t.capability != c)
    {
        return Ok(None);
    }
    let words = q.text_words();
    let body = if text.is_empty() {
        subject
    } else {
        text.as_str()
    };
    let snip = search::snippet(body, &words, search::SNIPPET_CHARS);
    Ok(Some(api::SearchHit {
        kind: "message".into(),
        id: m.id.clone(),
        message_type: m.kind.clone(),
        conversation_id: m.conversation_id.clone(),
        from: m.source.clone(),
        to: m.to_text.clone(),
        subject: (!subject.is_empty()).then(|| subject.to_owned()),
        received_at: Timestamp(m.received_at).to_string(),
        task,
        score: q.score(subject, &text),
        snippet: api::Snippet {
            text: snip.text,
            highlights: snip.highlights.iter().map(|r| [r.start, r.end]).collect(),
        },
    }))
}
