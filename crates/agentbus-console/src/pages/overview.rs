//! The overview: agents online, inbox depths, publish and delivery rates, dead letters and
//! refusals by code, within the viewer's scope, drawn from the gateway's own counters
//! (`agentbus_gateway::ops::counters`) and kept live over server-sent events.

use std::collections::BTreeSet;

use askama::Template;
use axum::response::Response;

use agentbus_gateway::ops::{self, ApiResult, Counters, Role};
use agentbus_protocol::Code;

use crate::live::{Sample, Scope};
use crate::render::{Addr, Chrome, count, fragment, page};
use crate::session::Viewer;

/// The workspaces whose counters the viewer may see: `None` for the gateway's own totals (the
/// operator), no set at all for a member (who administers nothing).
pub(crate) async fn scope(v: &Viewer) -> ApiResult<Option<Scope>> {
    Ok(match v.user.role {
        Role::Operator => Some(Scope::Gateway),
        Role::TenantAdmin | Role::Admin => {
            let ids: BTreeSet<String> = v
                .ops()
                .administered_workspaces()
                .await?
                .into_iter()
                .map(|w| w.id)
                .collect();
            Some(Scope::Workspaces(ids))
        }
        Role::Member => None,
    })
}

/// A bar of a chart: its position, height and what it counts.
pub(crate) struct Bar {
    pub x: f64,
    pub width: f64,
    pub y: f64,
    pub height: f64,
    pub value: u64,
}

/// A chart of per-interval counts.
pub(crate) struct Chart {
    pub label: &'static str,
    pub bars: Vec<Bar>,
    pub max: u64,
    pub rate: String,
}

const CHART_W: f64 = 300.0;
const CHART_H: f64 = 64.0;

/// A chart of the per-interval differences of `pick` over `samples`, after `history` (counts of
/// the intervals before the first sample, oldest first), the newest that fit.
fn chart(
    label: &'static str,
    samples: &[Sample],
    history: &[u64],
    interval_s: f64,
    pick: impl Fn(&Counters) -> u64,
) -> Chart {
    let live = samples
        .windows(2)
        .map(|w| pick(&w[1].counters).saturating_sub(pick(&w[0].counters)));
    let all: Vec<u64> = history.iter().copied().chain(live).collect();
    let slots_n = crate::live::SAMPLES.saturating_sub(1).max(1);
    let deltas = &all[all.len().saturating_sub(slots_n)..];
    let max = deltas.iter().copied().max().unwrap_or(0).max(1);
    let slots = slots_n as f64;
    let width = CHART_W / slots;
    let start = slots - deltas.len() as f64;
    let bars = deltas
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let height =
                (*d as f64 / max as f64 * (CHART_H - 2.0)).max(if *d > 0 { 1.0 } else { 0.0 });
            Bar {
                x: ((start + i as f64) * width * 100.0).round() / 100.0,
                width: (width * 0.8 * 100.0).round() / 100.0,
                y: ((CHART_H - height) * 100.0).round() / 100.0,
                height: (height * 100.0).round() / 100.0,
                value: *d,
            }
        })
        .collect();
    let last = deltas.last().copied().unwrap_or(0);
    Chart {
        label,
        bars,
        max,
        rate: format!("{:.1}/s", last as f64 / interval_s),
    }
}

struct DepthRow {
    id: String,
    address: Addr,
    depth: u64,
    presence: &'static str,
}

#[derive(Template)]
#[template(path = "overview_live.html")]
struct Live {
    counters: Option<Figures>,
    agents: u64,
    online: u64,
    suspended: u64,
    depths: Vec<DepthRow>,
    tenants: Option<(usize, usize)>,
}

struct Figures {
    accepted: String,
    replays: String,
    refused: String,
    deliveries: String,
    redeliveries: String,
    dead_letters: String,
    expired: String,
    errors: Vec<(String, &'static str, String)>,
    charts: Vec<Chart>,
}

/// The live part of the overview, for the page and for each update its stream pushes.
pub(crate) async fn live_part(
    v: &Viewer,
    samples: &[Sample],
    history: &[u64],
) -> ApiResult<String> {
    let interval_s = v.console.config.live_interval.as_secs_f64().max(0.001);
    let counters = match samples.last() {
        Some(now) if v.user.role != Role::Member => {
            let c = &now.counters;
            let n = |k: &str| c.publishes.get(k).copied().unwrap_or(0);
            let refused: u64 = c
                .publishes
                .iter()
                .filter(|(k, _)| k.starts_with("AB-"))
                .map(|(_, n)| n)
                .sum();
            let mut errors: Vec<(String, &'static str, String)> = c
                .publishes
                .iter()
                .filter_map(|(k, n)| {
                    let code = k.parse::<Code>().ok()?;
                    Some((code.to_string(), code.entry().title, count(*n as i64)))
                })
                .collect();
            errors.sort_by(|a, b| a.0.cmp(&b.0));
            Some(Figures {
                accepted: count(n("accepted") as i64),
                replays: count(n("replay") as i64),
                refused: count(refused as i64),
                deliveries: count(c.deliveries as i64),
                redeliveries: count(c.redeliveries as i64),
                dead_letters: count(c.dead_letters as i64),
                expired: count(c.expired as i64),
                errors,
                charts: vec![
                    chart("publishes accepted", samples, history, interval_s, |c| {
                        c.publishes.get("accepted").copied().unwrap_or(0)
                    }),
                    chart("deliveries", samples, &[], interval_s, |c| c.deliveries),
                    chart("refused", samples, &[], interval_s, |c| {
                        c.publishes
                            .iter()
                            .filter(|(k, _)| k.starts_with("AB-"))
                            .map(|(_, n)| n)
                            .sum()
                    }),
                ],
            })
        }
        _ => None,
    };
    let mut depths = Vec::new();
    let (mut online, mut suspended) = (0, 0);
    if v.user.role != Role::Operator {
        for m in v.ops().managed_agents().await? {
            online += u64::from(m.presence == "online");
            suspended += u64::from(m.agent.suspended_at.is_some());
            depths.push(DepthRow {
                depth: m.pending,
                address: Addr::of(&m.agent.address),
                presence: m.presence,
                id: m.agent.id,
            });
        }
    }
    let agents = depths.len() as u64;
    depths.sort_by(|a, b| {
        b.depth
            .cmp(&a.depth)
            .then_with(|| a.address.cmp(&b.address))
    });
    depths.truncate(10);
    let tenants = match v.user.role {
        Role::Operator => {
            let all = v.ops().tenants().await?;
            Some((
                all.len(),
                all.iter().filter(|t| t.suspended_at.is_some()).count(),
            ))
        }
        _ => None,
    };
    fragment(&Live {
        counters,
        agents,
        online,
        suspended,
        depths,
        tenants,
    })
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage<'a> {
    chrome: Option<&'a Chrome>,
    live: String,
    interval: String,
}

/// `GET /console/overview`.
pub(crate) async fn page_of(v: Viewer) -> Response {
    let r = async {
        let (samples, history) = match scope(&v).await? {
            Some(s) => {
                // Nobody follows this scope live: its samples are stale, and the chart starts
                // again from the stored history of the intervals it shows.
                let fresh = match v.console.history.is_live(&s) {
                    true => None,
                    false => Some(
                        v.ops()
                            .recent_publishes(
                                v.console.config.live_interval.as_millis() as i64,
                                crate::live::SAMPLES - 1,
                            )
                            .await?,
                    ),
                };
                v.console.history.page(&s, fresh)
            }
            None => (Vec::new(), Vec::new()),
        };
        let live = live_part(&v, &samples, &history).await?;
        page(&OverviewPage {
            chrome: Some(&v.chrome),
            live,
            interval: format!("{:.0}", v.console.config.live_interval.as_secs_f64()),
        })
    }
    .await;
    v.respond(r)
}

/// The counters of a scope now.
pub(crate) fn counters_of(scope: &Scope) -> Counters {
    match scope {
        Scope::Gateway => ops::counters(None),
        Scope::Workspaces(ids) => ops::counters(Some(&|ws: &str| ids.contains(ws))),
    }
}
