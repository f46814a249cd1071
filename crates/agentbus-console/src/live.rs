//! Live views over server-sent events: the overview's figures and charts, and a task's state and
//! timeline. Each stream re-checks the session on every interval (an ended session gets a
//! `signed-out` event and the stream ends), re-reads through the same scoped functions as the
//! page, and sends the re-rendered fragment when it changed. Streams end when the gateway begins
//! to shut down, so they never hold a graceful shutdown up.
//!
//! The overview's charts come from the console's [`Sampler`]: from the moment the console is
//! built until the gateway shuts down, it takes a snapshot of the gateway's counters every
//! interval, whether or not anyone watches, per workspace and for the gateway as a whole; a
//! chart of any scope sums the snapshots of its workspaces, so every page load and every stream
//! starts with the recent intervals' history. A page load takes a snapshot as well, so its charts
//! reach the moment it was drawn. Counters are per gateway process (like `/metrics`): behind a
//! load balancer each replica charts its own traffic, and nothing before the process started.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};

use agentbus_gateway::ops::{self, Counters};

use crate::Console;
use crate::pages::{overview, tasks};
use crate::session::Viewer;

/// Snapshots kept (one more than the bars a chart draws).
pub(crate) const SAMPLES: usize = 61;

/// Whose counters a chart shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The gateway's own totals (the operator's).
    Gateway,
    /// The sum over these workspaces.
    Workspaces(BTreeSet<String>),
}

/// What the charts draw of a scope's counters, as of one instant (totals since the process
/// started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Point {
    /// Publishes accepted.
    pub accepted: u64,
    /// Deliveries handed out.
    pub deliveries: u64,
    /// Publishes refused (any `AB-` code).
    pub refused: u64,
}

impl Point {
    pub(crate) fn of(c: &Counters) -> Point {
        Point {
            accepted: c.publishes.get("accepted").copied().unwrap_or(0),
            deliveries: c.deliveries,
            refused: c
                .publishes
                .iter()
                .filter(|(k, _)| k.starts_with("AB-"))
                .map(|(_, n)| n)
                .sum(),
        }
    }

    fn add(&mut self, other: Point) {
        self.accepted += other.accepted;
        self.deliveries += other.deliveries;
        self.refused += other.refused;
    }
}

/// Whether a sample of `slot` replaces the newest of `len` samples, in `last`: a later sample in
/// the same interval does, so sampling more often than once an interval (page loads, a clock
/// that stands still in tests) never adds a bar nor loses a count; the first sample, the
/// baseline of all the others, always stays.
fn replaces(len: usize, last: Option<i64>, slot: i64) -> bool {
    len > 1 && last == Some(slot)
}

/// The counters at one instant: the gateway's totals and each workspace's.
struct Snapshot {
    /// The interval of the gateway's clock it was taken in (its time over the interval).
    slot: i64,
    gateway: Point,
    /// By the index [`Samples::index`] gives each workspace; a workspace first counted after
    /// this snapshot has no entry (it had counted nothing).
    workspaces: Vec<Point>,
}

#[derive(Default)]
struct Samples {
    /// Every workspace the counters have seen, in the order first seen.
    index: HashMap<String, usize>,
    snapshots: VecDeque<Snapshot>,
}

/// The overview's samples of the counters, shared by every scope. It samples for as long as the
/// gateway runs, watched or not, so its memory must not grow with time: at most [`SAMPLES`]
/// snapshots, each holding only the three numbers the charts draw per workspace this process has
/// counted for (workspaces × `SAMPLES` points, not each workspace's whole counters).
pub(crate) struct Sampler {
    interval_ms: i64,
    samples: Mutex<Samples>,
}

/// A scope's samples, for a chart: the interval of the gateway's clock it is drawn up to, and
/// the slot and counts of each sample, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Series {
    pub now: i64,
    pub points: Vec<(i64, Point)>,
}

impl Series {
    /// The series continued by `point`, the scope's counts now, as a sample taken now would
    /// continue it.
    pub(crate) fn then(mut self, point: Point) -> Series {
        let last = self.points.last().map(|(slot, _)| *slot);
        if replaces(self.points.len(), last, self.now) {
            self.points.pop();
        }
        self.points.push((self.now, point));
        self
    }
}

impl Sampler {
    pub(crate) fn new(interval: Duration) -> Sampler {
        Sampler {
            interval_ms: (interval.as_millis() as i64).max(1),
            samples: Mutex::default(),
        }
    }

    fn slot(&self, now_ms: i64) -> i64 {
        now_ms.div_euclid(self.interval_ms)
    }

    /// Takes a snapshot of the counters, as of `now_ms` on the gateway's clock.
    pub(crate) fn sample(&self, now_ms: i64) {
        let slot = self.slot(now_ms);
        // The counters are read under the samples' lock, so snapshots are kept in the order
        // they were read and a chart never sees the counts go back.
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let Samples { index, snapshots } = &mut *s;
        let mut workspaces = vec![Point::default(); index.len()];
        ops::each_workspace_counters(|ws, c| {
            let i = match index.get(ws) {
                Some(i) => *i,
                None => {
                    index.insert(ws.to_owned(), workspaces.len());
                    workspaces.push(Point::default());
                    workspaces.len() - 1
                }
            };
            workspaces[i] = Point::of(c);
        });
        let snapshot = Snapshot {
            slot,
            gateway: Point::of(&ops::counters(None)),
            workspaces,
        };
        let last = snapshots.back().map(|s| s.slot);
        if replaces(snapshots.len(), last, slot) {
            snapshots.pop_back();
        }
        snapshots.push_back(snapshot);
        while snapshots.len() > SAMPLES {
            snapshots.pop_front();
        }
    }

    /// The samples of `scope`, for a chart drawn as of `now_ms` on the gateway's clock.
    pub(crate) fn series(&self, scope: &Scope, now_ms: i64) -> Series {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let points = match scope {
            Scope::Gateway => s.snapshots.iter().map(|x| (x.slot, x.gateway)).collect(),
            Scope::Workspaces(ids) => {
                let at: Vec<usize> = ids
                    .iter()
                    .filter_map(|id| s.index.get(id))
                    .copied()
                    .collect();
                s.snapshots
                    .iter()
                    .map(|x| {
                        let mut sum = Point::default();
                        for i in &at {
                            sum.add(x.workspaces.get(*i).copied().unwrap_or_default());
                        }
                        (x.slot, sum)
                    })
                    .collect()
            }
        };
        Series {
            now: self.slot(now_ms),
            points,
        }
    }
}

/// Samples `console`'s counters every interval until the gateway begins to shut down (or the
/// console is dropped).
pub(crate) fn sample_every_interval(console: &Arc<Console>) {
    every(
        console.config.live_interval,
        console.app.shutting_down.subscribe(),
        Arc::downgrade(console),
        Console::sample_now,
    );
}

/// Runs `each` on `target` every `period`, from one period on, until `stop` turns true (or its
/// sender is gone) or `target` is dropped.
fn every<T: Send + Sync + 'static>(
    period: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
    target: Weak<T>,
    each: fn(&T),
) -> tokio::task::JoinHandle<()> {
    let period = period.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.wait_for(|down| *down) => break,
            }
            let Some(target) = target.upgrade() else {
                break;
            };
            each(&target);
        }
    })
}

/// The state a stream carries from one interval to the next.
struct Live {
    console: Arc<Console>,
    headers: HeaderMap,
    path: String,
    last: String,
    tick: tokio::time::Interval,
    stop: tokio::sync::watch::Receiver<bool>,
    done: bool,
    kind: Kind,
}

enum Kind {
    /// The overview, of this scope's counters (none for a member).
    Overview(Option<Scope>),
    Task(String),
}

/// What one interval of a stream produced.
enum Step {
    Send(Event),
    End(Option<Event>),
    Quiet,
}

impl Live {
    async fn step(&mut self) -> Step {
        tokio::select! {
            _ = self.tick.tick() => {}
            _ = self.stop.wait_for(|down| *down) => return Step::End(None),
        }
        let Ok(v) = Viewer::from_headers(&self.console, &self.headers, &self.path).await else {
            return Step::End(Some(
                Event::default().event("signed-out").data("signed out"),
            ));
        };
        let (name, html) = match &self.kind {
            Kind::Overview(scope) => (
                "overview-live",
                overview::live_part(&v, scope.as_ref()).await,
            ),
            Kind::Task(id) => {
                let read = v.ops().task(id).await;
                let html = match read {
                    Ok((row, messages)) => tasks::live_part(&v, &row, &messages).await,
                    Err(e) => Err(e),
                };
                ("task-live", html)
            }
        };
        match html {
            Ok(html) if html == self.last => Step::Quiet,
            Ok(html) => {
                self.last.clone_from(&html);
                Step::Send(Event::default().event(name).data(html))
            }
            // The object left the viewer's scope, or the store failed: the stream ends.
            Err(_) => Step::End(None),
        }
    }
}

fn events(live: Live) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(live, |mut live| async move {
        if live.done {
            return None;
        }
        loop {
            match live.step().await {
                Step::Quiet => continue,
                Step::Send(e) => return Some((Ok(e), live)),
                Step::End(Some(e)) => {
                    live.done = true;
                    return Some((Ok(e), live));
                }
                Step::End(None) => return None,
            }
        }
    })
}

fn stream_of(v: &Viewer, headers: HeaderMap, path: String, first: String, kind: Kind) -> Response {
    let period = v.console.config.live_interval;
    // The page was just rendered: the first look is one interval away.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let live = Live {
        console: v.console.clone(),
        headers,
        path,
        last: first,
        tick,
        stop: v.console.app.shutting_down.subscribe(),
        done: false,
        kind,
    };
    Sse::new(events(live))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /console/live/overview`: the overview's figures, pushed as `overview-live` events.
pub(crate) async fn overview(v: Viewer, headers: HeaderMap) -> Response {
    let r = async {
        let scope = overview::scope(&v).await?;
        let first = overview::live_part(&v, scope.as_ref()).await?;
        Ok(stream_of(
            &v,
            headers,
            "/console/live/overview".into(),
            first,
            Kind::Overview(scope),
        ))
    }
    .await;
    v.respond(r)
}

/// `GET /console/live/tasks/{id}`: a task's state, progress and timeline, pushed as `task-live`
/// events while the viewer may read the task.
pub(crate) async fn task(v: Viewer, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let r = async {
        let (row, messages) = v.ops().task(&id).await?;
        let first = tasks::live_part(&v, &row, &messages).await?;
        let path = format!("/console/live/tasks/{}", row.id);
        Ok(stream_of(&v, headers, path, first, Kind::Task(row.id)))
    }
    .await;
    v.respond(r)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// The sampler's timer: once a period whoever watches, until the gateway shuts down.
    #[tokio::test(start_paused = true)]
    async fn the_timer_runs_every_period_until_shutdown() {
        let (down, stop) = tokio::sync::watch::channel(false);
        let ticks = Arc::new(AtomicUsize::new(0));
        let task = every(
            Duration::from_secs(2),
            stop,
            Arc::downgrade(&ticks),
            |t: &AtomicUsize| {
                t.fetch_add(1, Ordering::SeqCst);
            },
        );
        tokio::time::sleep(Duration::from_millis(6_500)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 3);
        down.send_replace(true);
        task.await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_ends_with_its_target() {
        let (_down, stop) = tokio::sync::watch::channel(false);
        let target = Arc::new(AtomicUsize::new(0));
        let task = every(
            Duration::from_secs(2),
            stop,
            Arc::downgrade(&target),
            |_| {},
        );
        drop(target);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(task.is_finished());
    }

    fn p(accepted: u64) -> Point {
        Point {
            accepted,
            ..Point::default()
        }
    }

    /// A sample taken now continues a series as the sampler would: in the newest sample's
    /// interval it replaces it, unless that is the baseline.
    #[test]
    fn now_continues_a_series_like_a_sample() {
        let only_baseline = Series {
            now: 5,
            points: vec![(5, p(1))],
        };
        assert_eq!(only_baseline.then(p(4)).points, [(5, p(1)), (5, p(4))]);
        let same_interval = Series {
            now: 5,
            points: vec![(3, p(1)), (5, p(2))],
        };
        assert_eq!(same_interval.then(p(4)).points, [(3, p(1)), (5, p(4))]);
        let later = Series {
            now: 6,
            points: vec![(3, p(1)), (5, p(2))],
        };
        assert_eq!(later.then(p(4)).points, [(3, p(1)), (5, p(2)), (6, p(4))]);
    }
}
