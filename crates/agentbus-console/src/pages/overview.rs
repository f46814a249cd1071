//! The overview: agents online, inbox depths, publish and delivery rates, dead letters and
//! refusals by code, within the viewer's scope, drawn from the gateway's own counters
//! (`agentbus_gateway::ops::counters`) and kept live over server-sent events.

use std::collections::BTreeSet;

use askama::Template;
use axum::response::Response;

use agentbus_gateway::ops::{self, ApiResult, Counters, Role};
use agentbus_protocol::Code;

use crate::live::{Point, Scope, Series};
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

/// A chart of `pick` per interval of the gateway's clock over `series`, the newest intervals that
/// fit: each sample's difference from the one before counts in the interval it was taken in.
/// Intervals before the first sample (before this process counted) draw no bar.
fn chart(
    label: &'static str,
    series: &Series,
    interval_s: f64,
    pick: impl Fn(&Point) -> u64,
) -> Chart {
    let slots_n = crate::live::SAMPLES.saturating_sub(1).max(1);
    let first = series.now - slots_n as i64 + 1;
    let mut values: Vec<Option<u64>> = vec![None; slots_n];
    if let Some((start, _)) = series.points.first() {
        for slot in (*start).max(first)..=series.now {
            values[(slot - first) as usize] = Some(0);
        }
    }
    for w in series.points.windows(2) {
        let ((_, before), (slot, after)) = (w[0], w[1]);
        if (first..=series.now).contains(&slot)
            && let Some(v) = values[(slot - first) as usize].as_mut()
        {
            *v += pick(&after).saturating_sub(pick(&before));
        }
    }
    let max = values.iter().flatten().copied().max().unwrap_or(0).max(1);
    let width = CHART_W / slots_n as f64;
    let bars = values
        .iter()
        .enumerate()
        .filter_map(|(i, d)| Some((i, (*d)?)))
        .map(|(i, d)| {
            let height =
                (d as f64 / max as f64 * (CHART_H - 2.0)).max(if d > 0 { 1.0 } else { 0.0 });
            Bar {
                x: (i as f64 * width * 100.0).round() / 100.0,
                width: (width * 0.8 * 100.0).round() / 100.0,
                y: ((CHART_H - height) * 100.0).round() / 100.0,
                height: (height * 100.0).round() / 100.0,
                value: d,
            }
        })
        .collect();
    // The rate of the newest whole interval; of the current one while it is the only one.
    let last = values[..slots_n - 1]
        .last()
        .copied()
        .flatten()
        .or(values[slots_n - 1])
        .unwrap_or(0);
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

/// The live part of the overview of `scope` (none for a member), for the page and for each update
/// its stream pushes: the figures as of now, the charts from the console's samples up to now.
pub(crate) async fn live_part(v: &Viewer, scope: Option<&Scope>) -> ApiResult<String> {
    let interval_s = v.console.config.live_interval.as_secs_f64().max(0.001);
    let counters = match scope {
        Some(scope) if v.user.role != Role::Member => {
            // The samples first, then the counters: the counts now are never older than them.
            let series = v.console.sampler.series(scope, v.console.app.now());
            let c = &counters_of(scope);
            let series = series.then(Point::of(c));
            let n = |k: &str| c.publishes.get(k).copied().unwrap_or(0);
            let refused = Point::of(c).refused;
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
                    chart("publishes accepted", &series, interval_s, |p| p.accepted),
                    chart("deliveries", &series, interval_s, |p| p.deliveries),
                    chart("refused", &series, interval_s, |p| p.refused),
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
        let scope = scope(&v).await?;
        // The page is a sample too, so its charts reach the moment it is drawn and the traffic
        // before it keeps to the interval it happened in.
        if scope.is_some() {
            v.console.sample_now();
        }
        let live = live_part(&v, scope.as_ref()).await?;
        page(&OverviewPage {
            chrome: Some(&v.chrome),
            live,
            interval: every(v.console.config.live_interval),
        })
    }
    .await;
    v.respond(r)
}

/// An interval as the page says it: seconds, or milliseconds below one.
fn every(d: std::time::Duration) -> String {
    match d.as_millis() {
        ms if ms < 1000 => format!("{ms} ms"),
        _ => format!("{:.0} s", d.as_secs_f64()),
    }
}

/// The counters of a scope now.
pub(crate) fn counters_of(scope: &Scope) -> Counters {
    match scope {
        Scope::Gateway => ops::counters(None),
        Scope::Workspaces(ids) => ops::counters(Some(&|ws: &str| ids.contains(ws))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short test interval reads as milliseconds, never "every 0 s".
    #[test]
    fn the_refresh_interval_is_said_in_its_unit() {
        use std::time::Duration;
        assert_eq!(every(Duration::from_millis(200)), "200 ms");
        assert_eq!(every(Duration::from_secs(2)), "2 s");
    }

    fn p(accepted: u64) -> Point {
        Point {
            accepted,
            ..Point::default()
        }
    }

    /// Each difference counts in the interval of the later sample; intervals since the first
    /// sample draw a bar (zero when nothing happened), those before it none.
    #[test]
    fn bars_are_the_differences_per_interval_since_the_first_sample() {
        let series = Series {
            now: 100,
            points: vec![(95, p(10)), (95, p(13)), (97, p(20)), (100, p(21))],
        };
        let c = chart("publishes accepted", &series, 2.0, |p| p.accepted);
        let values: Vec<u64> = c.bars.iter().map(|b| b.value).collect();
        assert_eq!(values, [3, 0, 7, 0, 0, 1]);
        assert_eq!(c.max, 7);
        // Right-aligned: the current interval is the last slot.
        let slots = (crate::live::SAMPLES - 1) as f64;
        assert_eq!(
            c.bars[5].x,
            ((slots - 1.0) * CHART_W / slots * 100.0).round() / 100.0
        );
        // Samples older than the chart's window draw nothing, but still start its bars.
        let old = Series {
            now: 1_000,
            points: vec![(95, p(10)), (1_000, p(12))],
        };
        let c = chart("publishes accepted", &old, 2.0, |p| p.accepted);
        let values: Vec<u64> = c.bars.iter().map(|b| b.value).collect();
        assert_eq!(values.len(), crate::live::SAMPLES - 1);
        assert_eq!(values.iter().sum::<u64>(), 2);
        // The rate is the newest whole interval's; the current one's while it is the only one.
        let rate = |points: Vec<(i64, Point)>| {
            chart(
                "publishes accepted",
                &Series { now: 11, points },
                2.0,
                |p| p.accepted,
            )
            .rate
        };
        assert_eq!(rate(vec![(10, p(0)), (10, p(4)), (11, p(5))]), "2.0/s");
        assert_eq!(rate(vec![(11, p(0)), (11, p(3))]), "1.5/s");
    }
}
