//! Tasks (§6): the list filtered by state, capability, requester or worker; a task's page with its
//! timeline (every transition, timer, late and ignored envelope), progress, budget, and the usage
//! and cost it reported with their sources; and the console's cancel (§6.2), which is
//! `POST /v1/tasks/{id}/cancel`'s function.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Path, Query, RawForm};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};

use agentbus_gateway::ops::{self, ApiResult, ListQuery};
use agentbus_gateway::ops::{ReportedUsage, TaskMessage, TaskSummary, TaskView, Tokens};
use agentbus_protocol::envelope::Envelope;
use agentbus_protocol::frame;
use agentbus_protocol::task::TaskState;

use super::conversations::short_kind;
use crate::render::{self, Addr, Chrome, fragment, page, peer};
use crate::session::Viewer;

/// Tasks per page of the list.
const PAGE: u32 = 50;

async fn address(v: &Viewer, agent_id: &str) -> ApiResult<String> {
    Ok(match v.ops().agent_label(agent_id).await? {
        Some(address) => peer(&address),
        None => agent_id.to_owned(),
    })
}

pub(crate) struct Row {
    pub id: String,
    pub state: String,
    /// The first line of its instructions, shortened.
    pub instructions: String,
    pub capability: String,
    pub requester: Addr,
    pub worker: Addr,
    pub created: String,
    pub updated: String,
}

/// A task as lists show it (the tasks page, the agent's page, needs attention).
pub(crate) async fn row(v: &Viewer, t: &TaskSummary) -> ApiResult<Row> {
    Ok(Row {
        id: t.task.id.clone(),
        state: t.task.state.to_string(),
        instructions: peer(&render::shorten(
            t.instructions.as_deref().unwrap_or_default(),
            super::conversations::LINE,
        )),
        capability: peer(&t.task.capability),
        requester: Addr::of(&address(v, &t.task.requester_id).await?),
        worker: Addr::of(&address(v, &t.task.recipient_id).await?),
        created: render::time(t.task.created_at),
        updated: render::time(t.task.updated_at),
    })
}

/// An agent the filters offer.
struct Choice {
    id: String,
    label: String,
    selected_requester: bool,
    selected_worker: bool,
}

#[derive(Template)]
#[template(path = "tasks.html")]
struct ListPage<'a> {
    chrome: Option<&'a Chrome>,
    rows: Vec<Row>,
    states: Vec<(&'static str, bool)>,
    capability: String,
    agents: Vec<Choice>,
    next: Option<String>,
    filters: String,
}

/// The query of a filter form: empty fields mean "any".
fn filled(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `GET /console/tasks?state=&capability=&requester=&recipient=&before=`: `GET /v1/tasks` as the
/// viewer reads it.
pub(crate) async fn list(v: Viewer, Query(q): Query<ListQuery>) -> Response {
    let r = async {
        let q = ListQuery {
            state: filled(&q.state),
            requester: filled(&q.requester),
            recipient: filled(&q.recipient),
            capability: filled(&q.capability),
            before: filled(&q.before),
            limit: Some(PAGE),
        };
        let list = v.ops().task_list(&q).await?;
        let next = (list.len() as u32 >= PAGE)
            .then(|| list.last().map(|t| t.task.cursor.clone()))
            .flatten();
        let mut rows = Vec::with_capacity(list.len());
        for t in &list {
            rows.push(row(&v, t).await?);
        }
        let mut agents = Vec::new();
        for a in v.ops().directory().await? {
            agents.push(Choice {
                label: peer(&a.address),
                selected_requester: q.requester.as_deref() == Some(a.id.as_str()),
                selected_worker: q.recipient.as_deref() == Some(a.id.as_str()),
                id: a.id,
            });
        }
        let mut filters = form_urlencoded::Serializer::new(String::new());
        for (k, val) in [
            ("state", &q.state),
            ("capability", &q.capability),
            ("requester", &q.requester),
            ("recipient", &q.recipient),
        ] {
            if let Some(x) = val {
                filters.append_pair(k, x);
            }
        }
        page(&ListPage {
            chrome: Some(&v.chrome),
            rows,
            states: TaskState::ALL
                .iter()
                .map(|s| (s.as_str(), q.state.as_deref() == Some(s.as_str())))
                .collect(),
            capability: peer(q.capability.as_deref().unwrap_or_default()),
            agents,
            next,
            filters: filters.finish(),
        })
    }
    .await;
    v.respond(r)
}

/// One timeline entry, with what its envelope said.
struct Entry {
    time: String,
    actor: String,
    kind: String,
    from: String,
    to: String,
    late: bool,
    ignored: bool,
    timer: String,
    warnings: Vec<String>,
    envelope: String,
    detail: String,
    usage: String,
    cost: String,
    position: u32,
}

/// Usage summed per source.
struct SourceTotal {
    source: String,
    messages: u32,
    tokens: Tokens,
}

/// A deadline still pending.
struct Deadline {
    timer: &'static str,
    at: String,
}

#[derive(Template)]
#[template(path = "task_live.html")]
struct Live {
    state: String,
    cancel_requested: String,
    terminal: bool,
    percent: Option<f64>,
    percent_text: String,
    stage: String,
    note: String,
    deadlines: Vec<Deadline>,
    entries: Vec<Entry>,
    usage: Vec<SourceTotal>,
    costs: Vec<(String, String, String)>,
    notices: Vec<(String, String, String)>,
}

fn usage_text(f: &ReportedUsage) -> String {
    let t = &f.tokens;
    let mut parts = vec![
        format!("{} in", render::count(t.input)),
        format!("{} out", render::count(t.output)),
    ];
    if t.cache_read > 0 {
        parts.push(format!("{} cache read", render::count(t.cache_read)));
    }
    if t.reasoning > 0 {
        parts.push(format!("{} reasoning", render::count(t.reasoning)));
    }
    let model = match (&f.provider, &f.model) {
        (Some(p), Some(m)) => format!(" · {p}/{m}"),
        (None, Some(m)) => format!(" · {m}"),
        _ => String::new(),
    };
    peer(&format!(
        "{} tokens{model} (reported_by: {})",
        parts.join(", "),
        f.reported_by
    ))
}

fn actor<'a>(a: &'a str, names: &'a BTreeMap<String, String>) -> String {
    if a == "system" {
        return "gateway timer".into();
    }
    if let Some(agent) = a.strip_prefix("agent:") {
        return names
            .get(agent)
            .cloned()
            .unwrap_or_else(|| agent.to_owned());
    }
    if let Some(user) = a.strip_prefix("user:") {
        return format!("admin {user} (console)");
    }
    peer(a)
}

/// The live part of a task's page (state, progress, deadlines, timeline, usage), rendered for
/// the page and for every update its stream pushes: one function serves both. `row` and
/// `messages` are what `Caller::task` gave the viewer.
pub(crate) async fn live_part(
    v: &Viewer,
    row: &TaskView,
    messages: &[TaskMessage],
) -> ApiResult<String> {
    let machine = &row.machine;
    let mut names = BTreeMap::new();
    for party in [&row.requester_id, &row.recipient_id] {
        names.insert(party.clone(), address(v, party).await?);
    }
    let by_id: BTreeMap<&str, &Value> = messages
        .iter()
        .map(|t| (t.message.id.as_str(), &t.envelope))
        .collect();
    let mut usage_by_source: BTreeMap<String, SourceTotal> = BTreeMap::new();
    let mut costs: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut progress = (None, String::new(), String::new());
    let mut entries = Vec::new();
    for (n, e) in v.ops().task_events(&row.id).await?.into_iter().enumerate() {
        let env = e.envelope_id.as_deref().and_then(|i| by_id.get(i).copied());
        let mut entry = Entry {
            time: render::time(e.at),
            actor: actor(&e.actor, &names),
            kind: if e.kind == "timer" {
                "timer".into()
            } else {
                short_kind(&e.kind)
            },
            from: e.from.clone(),
            to: e.to.clone(),
            late: e.late,
            ignored: e.ignored,
            timer: e.timer.clone().unwrap_or_default(),
            warnings: e
                .warnings
                .iter()
                .map(|w| peer(w["message"].as_str().unwrap_or(&w.to_string())))
                .collect(),
            envelope: e.envelope_id.clone().unwrap_or_default(),
            // An admin's cancel has no envelope: its reason is the entry's detail.
            detail: e
                .reason
                .as_deref()
                .map(|r| peer(&format!("Reason: {r}")))
                .unwrap_or_default(),
            usage: String::new(),
            cost: String::new(),
            position: n as u32 + 1,
        };
        if let Some(env) = env {
            let map: Map<String, Value> = env.as_object().cloned().unwrap_or_default();
            let data = map.get("data").cloned().unwrap_or(Value::Null);
            entry.detail = peer(&frame::envelope_body(&Envelope::from_map(map.clone())));
            let (figure, cost) = ops::reported(&map, &data, &e.kind);
            if let Some(f) = &figure {
                entry.usage = usage_text(f);
                let t = usage_by_source
                    .entry(f.reported_by.clone())
                    .or_insert_with(|| SourceTotal {
                        source: peer(&f.reported_by),
                        messages: 0,
                        tokens: Tokens::default(),
                    });
                t.messages += 1;
                let k = &mut t.tokens;
                k.input = k.input.saturating_add(f.tokens.input);
                k.output = k.output.saturating_add(f.tokens.output);
                k.cache_read = k.cache_read.saturating_add(f.tokens.cache_read);
                k.cache_write = k.cache_write.saturating_add(f.tokens.cache_write);
                k.reasoning = k.reasoning.saturating_add(f.tokens.reasoning);
                k.requests = k.requests.saturating_add(f.tokens.requests);
                k.wall_ms = k.wall_ms.saturating_add(f.tokens.wall_ms);
            }
            if let Some(c) = &cost {
                let source = c.source.clone().unwrap_or_else(|| "unstated".into());
                entry.cost = peer(&format!(
                    "{} {} (source: {source})",
                    ops::amount(c.micros),
                    c.currency
                ));
                let sum = costs.entry((c.currency.clone(), source)).or_default();
                *sum = sum.saturating_add(c.micros);
            }
            if e.kind == "agentbus.task.progress.v1" {
                progress = (
                    data["percent"].as_f64(),
                    peer(data["stage"].as_str().unwrap_or_default()),
                    peer(data["note"].as_str().unwrap_or_default()),
                );
            }
        }
        entries.push(entry);
    }
    let notices = messages
        .iter()
        .filter(|t| t.message.source_agent_id.is_none())
        .map(
            |TaskMessage {
                 message: m,
                 envelope,
             }| {
                let map = envelope.as_object().cloned().unwrap_or_default();
                (
                    render::time(m.received_at),
                    format!("{} → {}", short_kind(&m.kind), peer(&m.to)),
                    peer(&frame::envelope_body(&Envelope::from_map(map))),
                )
            },
        )
        .collect();
    let live = Live {
        state: row.state.to_string(),
        cancel_requested: machine
            .cancel_requested_at
            .map(|t| render::time(t.millis()))
            .unwrap_or_default(),
        terminal: row.terminal,
        percent: progress.0.map(|p| p.clamp(0.0, 100.0)),
        percent_text: progress
            .0
            .map(|p| format!("{:.0}%", p.clamp(0.0, 100.0)))
            .unwrap_or_default(),
        stage: progress.1,
        note: progress.2,
        deadlines: machine
            .deadlines()
            .into_iter()
            .map(|(t, timer)| Deadline {
                timer: timer.as_str(),
                at: render::time(t.millis()),
            })
            .collect(),
        entries,
        usage: usage_by_source.into_values().collect(),
        costs: costs
            .into_iter()
            .map(|((currency, source), micros)| (ops::amount(micros), currency, source))
            .collect(),
        notices,
    };
    fragment(&live)
}

#[derive(Template)]
#[template(path = "task.html")]
struct OnePage<'a> {
    chrome: Option<&'a Chrome>,
    id: String,
    capability: String,
    requester: String,
    requester_id: String,
    worker: String,
    worker_id: String,
    conversation: String,
    created: String,
    constraints: Vec<(&'static str, String)>,
    budget: String,
    instructions: String,
    live: String,
    may_cancel: bool,
    traces: Vec<render::TraceLink>,
}

/// `GET /console/tasks/{id}`: `GET /v1/tasks/{id}` as the viewer reads it, with the timeline drawn,
/// and the cancel form for an admin while the task is open.
pub(crate) async fn one(v: Viewer, Path(id): Path<String>) -> Response {
    let r = async {
        let (row, messages) = v.ops().task(&id).await?;
        let live = live_part(&v, &row, &messages).await?;
        let request = messages
            .iter()
            .find(|t| t.message.id == row.request_id)
            .map(|t| t.envelope.clone())
            .unwrap_or(Value::Null);
        // A task's trace is its request's: every message in answer continues it.
        let traces = render::traces(std::iter::once(&request), &v.console.app.config.trace_url);
        let limits = &row.machine.limits;
        let budget = match &request["budget"] {
            Value::Null => String::new(),
            b => peer(&format!(
                "{} {} (advisory, §2.1)",
                b["max"].as_str().unwrap_or("?"),
                b["currency"].as_str().unwrap_or("")
            )),
        };
        page(&OnePage {
            chrome: Some(&v.chrome),
            id: row.id.clone(),
            capability: peer(&row.capability),
            requester: address(&v, &row.requester_id).await?,
            requester_id: row.requester_id.clone(),
            worker: address(&v, &row.recipient_id).await?,
            worker_id: row.recipient_id.clone(),
            conversation: row.conversation_id.clone(),
            created: render::time(row.created_at),
            constraints: vec![
                ("accept_timeout_s", limits.accept_timeout_s.to_string()),
                ("progress_timeout_s", limits.progress_timeout_s.to_string()),
                (
                    "max_duration_s",
                    limits
                        .max_duration_s
                        .map_or_else(|| "unset".to_owned(), |m| m.to_string()),
                ),
                ("expires_at", render::time(limits.expires_at.millis())),
            ],
            budget,
            instructions: peer(request["data"]["instructions"].as_str().unwrap_or_default()),
            live,
            may_cancel: !row.terminal && v.ops().is_admin(),
            traces,
        })
    }
    .await;
    v.respond(r)
}

/// `POST /console/tasks/{id}/cancel` `csrf`, `reason?`: the admin cancel of §6.2, through
/// `Caller::cancel_task` (the function `POST /v1/tasks/{id}/cancel` calls).
pub(crate) async fn cancel(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    let v = &v;
    super::change(v, &headers, &body, |f| async move {
        let reason = f
            .get("reason")
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_owned);
        let (row, _) = v.ops().cancel_task(&id, reason).await?;
        super::back(&format!("/console/tasks/{}", row.id))
    })
    .await
}
