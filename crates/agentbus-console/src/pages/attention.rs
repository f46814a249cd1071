//! What needs an operator's attention, in the viewer's scope: failed tasks, tasks waiting for
//! input, tasks whose next deadline falls within [`SOON`] of now (the gateway's clock), and
//! dead-lettered copies of messages. Every list is read through the same scoped functions as the
//! tasks and conversations pages.

use askama::Template;
use axum::response::Response;

use agentbus_gateway::ops::{ApiResult, ListQuery, TaskSummary};
use agentbus_protocol::task::TaskState;

use super::conversations::short_kind;
use super::tasks::{self, Row};
use crate::render::{self, Addr, Chrome, page};
use crate::session::Viewer;

/// How near a deadline must be for its task to be listed as expiring soon, ms.
pub(crate) const SOON_MS: i64 = SOON_MINUTES * 60_000;
/// [`SOON_MS`] as the page states it.
pub(crate) const SOON_MINUTES: i64 = 15;
/// Rows per list.
const LIMIT: u32 = 50;
/// Open tasks looked at per state for a near deadline.
const OPEN_SCAN: u32 = 500;

/// A task whose deadline is near.
struct Due {
    row: Row,
    timer: &'static str,
    at: String,
    /// Minutes left, rounded up; 0 when due now.
    minutes: i64,
}

/// A dead-lettered copy.
struct Dead {
    id: String,
    conversation: String,
    kind: String,
    from: Addr,
    to: Addr,
    attempts: u32,
    at: String,
}

#[derive(Template)]
#[template(path = "attention.html")]
struct AttentionPage<'a> {
    chrome: Option<&'a Chrome>,
    failed: Vec<Row>,
    needs_input: Vec<Row>,
    due: Vec<Due>,
    dead: Vec<Dead>,
    soon_minutes: i64,
}

async fn in_state(v: &Viewer, state: TaskState, limit: u32) -> ApiResult<Vec<TaskSummary>> {
    v.ops()
        .task_list(&ListQuery {
            state: Some(state.as_str().to_owned()),
            limit: Some(limit),
            ..ListQuery::default()
        })
        .await
}

async fn rows(v: &Viewer, list: &[TaskSummary]) -> ApiResult<Vec<Row>> {
    let mut out = Vec::with_capacity(list.len());
    for t in list {
        out.push(tasks::row(v, t).await?);
    }
    Ok(out)
}

/// Open tasks whose next deadline is within [`SOON_MS`] of `now`, the nearest first.
async fn due_soon(v: &Viewer, now: i64) -> ApiResult<Vec<Due>> {
    let mut found = Vec::new();
    for state in TaskState::ALL.iter().filter(|s| !s.is_terminal()) {
        // Instructions are read only for the tasks listed: the scan reads the tasks alone.
        let open = v
            .ops()
            .tasks(&ListQuery {
                state: Some(state.as_str().to_owned()),
                limit: Some(OPEN_SCAN),
                ..ListQuery::default()
            })
            .await?;
        for t in open {
            let next = t
                .machine
                .deadlines()
                .into_iter()
                .min_by_key(|(at, _)| at.millis());
            if let Some((at, timer)) = next
                && at.millis() <= now + SOON_MS
            {
                found.push((at.millis(), timer.as_str(), t));
            }
        }
    }
    found.sort_by(|a, b| (a.0, &a.2.id).cmp(&(b.0, &b.2.id)));
    found.truncate(LIMIT as usize);
    let mut out = Vec::with_capacity(found.len());
    for (at, timer, t) in found {
        out.push(Due {
            row: tasks::row(v, &v.ops().task_summary(&t.id).await?).await?,
            timer,
            at: render::time(at),
            minutes: ((at - now).max(0) + 59_999) / 60_000,
        });
    }
    Ok(out)
}

/// `GET /console/attention`: what needs attention in the viewer's scope.
pub(crate) async fn page_of(v: Viewer) -> Response {
    let r = async {
        let now = v.console.app.now();
        let failed = in_state(&v, TaskState::Failed, LIMIT).await?;
        let needs_input = in_state(&v, TaskState::NeedsInput, LIMIT).await?;
        let mut dead = Vec::new();
        for d in v.ops().dead_letters(LIMIT as usize).await? {
            let to = match v.ops().agent_label(&d.recipient_id).await? {
                Some(a) => a,
                None => d.recipient_id.clone(),
            };
            dead.push(Dead {
                id: d.message.id.clone(),
                conversation: d.message.conversation_id.clone(),
                kind: short_kind(&d.message.kind),
                from: Addr::of(&d.message.source),
                to: Addr::of(&to),
                attempts: d.attempts,
                at: render::time(d.last_attempt_at.unwrap_or(d.message.received_at)),
            });
        }
        page(&AttentionPage {
            chrome: Some(&v.chrome),
            failed: rows(&v, &failed).await?,
            needs_input: rows(&v, &needs_input).await?,
            due: due_soon(&v, now).await?,
            dead,
            soon_minutes: SOON_MINUTES,
        })
    }
    .await;
    v.respond(r)
}
