//! Live views over server-sent events: the overview's figures and charts, and a task's state and
//! timeline. Each stream re-checks the session on every interval (an ended session gets a
//! `signed-out` event and the stream ends), re-reads through the same scoped functions as the
//! page, and sends the re-rendered fragment when it changed. Streams end when the gateway begins
//! to shut down, so they never hold a graceful shutdown up.
//!
//! The overview's charts come from samples of the gateway's counters, taken once per interval
//! per scope while someone watches it. Counters are per gateway process (like `/metrics`): behind a
//! load balancer, each replica charts its own traffic. So that a chart does not start empty, a
//! page loaded while nobody follows its scope starts the publishes chart from the stored messages
//! of the recent intervals (`Caller::recent_publishes`); the samples continue it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};

use agentbus_gateway::ops::Counters;

use crate::Console;
use crate::pages::{overview, tasks};
use crate::session::Viewer;

/// Samples kept per scope (one more than the bars a chart draws).
pub(crate) const SAMPLES: usize = 61;

/// Whose counters a chart shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The gateway's own totals (the operator's).
    Gateway,
    /// The sum over these workspaces.
    Workspaces(BTreeSet<String>),
}

impl Scope {
    fn key(&self) -> String {
        match self {
            Scope::Gateway => "gateway".into(),
            Scope::Workspaces(ids) => {
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                format!("ws:{}", ids.join(","))
            }
        }
    }
}

/// The counters of a scope at one instant.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// What they were.
    pub counters: Counters,
}

#[derive(Default)]
struct Series {
    samples: Mutex<VecDeque<Sample>>,
    /// Publishes per interval before the first sample, oldest first, from the store.
    history: Mutex<Vec<u64>>,
    watchers: AtomicUsize,
    /// Whether a sampler runs for this series.
    sampling: AtomicBool,
}

impl Series {
    fn push(&self, scope: &Scope) {
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.push_back(Sample {
            counters: overview::counters_of(scope),
        });
        while s.len() > SAMPLES {
            s.pop_front();
        }
    }

    fn all(&self) -> Vec<Sample> {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        s.iter().cloned().collect()
    }

    fn history(&self) -> Vec<u64> {
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What a chart of this series draws from: its samples and the history before them.
    pub(crate) fn view(&self) -> (Vec<Sample>, Vec<u64>) {
        (self.all(), self.history())
    }
}

/// The overview's samples, per scope.
#[derive(Default)]
pub(crate) struct History {
    series: Mutex<HashMap<String, Arc<Series>>>,
}

impl History {
    fn series(&self, scope: &Scope) -> Arc<Series> {
        let mut m = self.series.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(scope.key()).or_default().clone()
    }

    /// Whether someone follows `scope` live, so its samples are current.
    pub(crate) fn is_live(&self, scope: &Scope) -> bool {
        self.series(scope).sampling.load(Ordering::SeqCst)
    }

    /// The samples of `scope` and the history before them, for a page. With `fresh` (the recent
    /// history, read because nobody follows the scope and its samples are stale), the series
    /// starts again from it and one sample taken now; otherwise one is taken now only if there
    /// were none, as a baseline.
    pub(crate) fn page(&self, scope: &Scope, fresh: Option<Vec<u64>>) -> (Vec<Sample>, Vec<u64>) {
        let series = self.series(scope);
        if let Some(history) = fresh {
            series
                .samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear();
            *series.history.lock().unwrap_or_else(|p| p.into_inner()) = history;
        }
        if series.all().is_empty() {
            series.push(scope);
        }
        series.view()
    }
}

/// Counts one watcher of a scope while it lives; the first starts the scope's sampler, which
/// stops once nobody watches.
struct Watch(Arc<Series>);

impl Watch {
    fn begin(console: &Console, scope: &Scope) -> Watch {
        let series = console.history.series(scope);
        series.watchers.fetch_add(1, Ordering::SeqCst);
        if !series.sampling.swap(true, Ordering::SeqCst) {
            let (series, scope) = (series.clone(), scope.clone());
            let mut stop = console.app.shutting_down.subscribe();
            let mut tick = tokio::time::interval(console.config.live_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = stop.wait_for(|down| *down) => break,
                    }
                    if series.watchers.load(Ordering::SeqCst) == 0 {
                        series.sampling.store(false, Ordering::SeqCst);
                        // A watcher that came in meanwhile found the sampler still running: the
                        // sampler goes on for it, unless another one took over.
                        if series.watchers.load(Ordering::SeqCst) == 0
                            || series.sampling.swap(true, Ordering::SeqCst)
                        {
                            break;
                        }
                    }
                    series.push(&scope);
                }
            });
        }
        Watch(series)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::SeqCst);
    }
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
    Overview(Option<Watch>),
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
            Kind::Overview(watch) => {
                let (samples, history) = watch.as_ref().map(|w| w.0.view()).unwrap_or_default();
                (
                    "overview-live",
                    overview::live_part(&v, &samples, &history).await,
                )
            }
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
        let watch = overview::scope(&v)
            .await?
            .map(|scope| Watch::begin(&v.console, &scope));
        let (samples, history) = watch.as_ref().map(|w| w.0.view()).unwrap_or_default();
        let first = overview::live_part(&v, &samples, &history).await?;
        Ok(stream_of(
            &v,
            headers,
            "/console/live/overview".into(),
            first,
            Kind::Overview(watch),
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
