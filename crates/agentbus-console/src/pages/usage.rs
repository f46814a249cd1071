//! Usage (§5.5): tokens and cost per agent, capability and day, each figure beside its source
//! (`reported_by`, the money's `source`), from `Caller::usage` (the
//! function `GET /v1/usage` answers from).

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::Query;
use axum::response::Response;

use agentbus_gateway::ops::{self, Tokens, UsageQuery, UsageView};

use crate::render::{Chrome, count, page, peer};
use crate::session::Viewer;

/// A line of a table: what it groups, and its figures with their source.
struct Line {
    day: String,
    agent: String,
    agent_id: String,
    capability: String,
    source: String,
    messages: u64,
    tokens: [String; 5],
    cost: String,
    cost_source: String,
}

#[derive(Template)]
#[template(path = "usage.html")]
struct UsagePage<'a> {
    chrome: Option<&'a Chrome>,
    since: String,
    until: String,
    capability: String,
    lines: Vec<Line>,
    by_agent: Vec<Line>,
    by_capability: Vec<Line>,
}

fn tokens(t: &Tokens) -> [String; 5] {
    [t.input, t.output, t.cache_read, t.cache_write, t.reasoning].map(count)
}

fn add(into: &mut UsageView, t: &UsageView) {
    into.messages += t.messages;
    let (a, b) = (&mut into.tokens, &t.tokens);
    a.input = a.input.saturating_add(b.input);
    a.output = a.output.saturating_add(b.output);
    a.cache_read = a.cache_read.saturating_add(b.cache_read);
    a.cache_write = a.cache_write.saturating_add(b.cache_write);
    a.reasoning = a.reasoning.saturating_add(b.reasoning);
    a.requests = a.requests.saturating_add(b.requests);
    a.wall_ms = a.wall_ms.saturating_add(b.wall_ms);
    into.cost_micros = into.cost_micros.saturating_add(t.cost_micros);
}

/// Sums totals under `key`, keeping the sources apart: a figure is never added to one of
/// another source.
fn roll_up(rows: &[UsageView], key: impl Fn(&UsageView) -> UsageView) -> Vec<UsageView> {
    let mut sums: BTreeMap<String, UsageView> = BTreeMap::new();
    for t in rows {
        let k = key(t);
        let id = format!(
            "{}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
            k.agent_id, k.capability, k.reported_by, k.currency, k.cost_source
        );
        add(sums.entry(id).or_insert(k), t);
    }
    sums.into_values().collect()
}

/// `GET /console/usage?since=&until=&capability=`: the viewer's usage totals (the last 30 days
/// unless told).
pub(crate) async fn page_of(v: Viewer, Query(q): Query<UsageQuery>) -> Response {
    let r = async {
        let app = &v.console.app;
        let blank = |s: Option<String>| s.filter(|x| !x.trim().is_empty());
        let q = UsageQuery {
            agent: blank(q.agent),
            capability: blank(q.capability),
            since: Some(blank(q.since).unwrap_or_else(|| ops::day_of(app.now() - 29 * 86_400_000))),
            until: blank(q.until),
        };
        let rows = v.ops().usage(&q).await?;
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for t in &rows {
            if !names.contains_key(&t.agent_id) {
                let label = match v.ops().agent_label(&t.agent_id).await? {
                    Some(address) => peer(&address),
                    None => t.agent_id.clone(),
                };
                names.insert(t.agent_id.clone(), label);
            }
        }
        let line = |t: &UsageView| Line {
            day: t.day.clone(),
            agent: names.get(&t.agent_id).cloned().unwrap_or_default(),
            agent_id: t.agent_id.clone(),
            capability: peer(t.capability.as_deref().unwrap_or("—")),
            source: peer(t.reported_by.as_deref().unwrap_or("—")),
            messages: t.messages,
            tokens: tokens(&t.tokens),
            cost: t
                .currency
                .as_ref()
                .map(|c| format!("{} {c}", ops::amount(t.cost_micros)))
                .unwrap_or_default(),
            cost_source: peer(t.cost_source.as_deref().unwrap_or("unstated")),
        };
        let by_agent = roll_up(&rows, |t| UsageView {
            capability: None,
            day: String::new(),
            messages: 0,
            tokens: Tokens::default(),
            cost_micros: 0,
            ..t.clone()
        });
        let by_capability = roll_up(&rows, |t| UsageView {
            agent_id: String::new(),
            day: String::new(),
            messages: 0,
            tokens: Tokens::default(),
            cost_micros: 0,
            ..t.clone()
        });
        page(&UsagePage {
            chrome: Some(&v.chrome),
            since: q.since.clone().unwrap_or_default(),
            until: q.until.clone().unwrap_or_default(),
            capability: peer(q.capability.as_deref().unwrap_or_default()),
            lines: rows.iter().map(line).collect(),
            by_agent: by_agent.iter().map(line).collect(),
            by_capability: by_capability.iter().map(line).collect(),
        })
    }
    .await;
    v.respond(r)
}
