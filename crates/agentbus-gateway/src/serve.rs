//! The accept loop: HTTP/1.1 connections with every resource bounded (docs/settings.md).
//!
//! axum's `serve` exposes none of these bounds, so the gateway runs hyper itself:
//!
//! - at most `max_connections` connections at once, WebSockets included; one more is answered
//!   503 with AB-9002 and closed, without reaching the router;
//! - a new connection has `header_timeout` for its first request's headers; a kept-alive one may
//!   sit idle for `idle_timeout`, then has `header_timeout` from the first byte of its next request;
//! - a request body must arrive within `body_timeout` of its headers (else AB-3031), and a
//!   response may wait no longer than that for its reader;
//! - on shutdown, no connection is accepted, in-flight requests finish and idle connections close,
//!   for at most `shutdown_grace`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse as _;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::time::{Instant, Sleep};

use agentbus_protocol::Code;

use crate::config::Config;
use crate::error::ApiError;
use crate::extract::BodyTimeout;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The bounds of one gateway's connections, from its [`Config`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// See [`Config::header_timeout`].
    pub header: Duration,
    /// See [`Config::body_timeout`].
    pub body: Duration,
    /// See [`Config::idle_timeout`].
    pub idle: Duration,
    /// See [`Config::max_connections`].
    pub max_connections: usize,
    /// See [`Config::shutdown_grace`].
    pub grace: Duration,
}

impl Bounds {
    /// How often a connection's watcher looks at least: a quarter of the shortest timeout, so it
    /// always looks again before a deadline that began since its last look comes.
    fn tick(&self) -> Duration {
        (self.header.min(self.idle).min(self.body) / 4).max(Duration::from_millis(1))
    }

    /// The bounds `config` sets.
    pub fn of(config: &Config) -> Bounds {
        Bounds {
            header: config.header_timeout,
            body: config.body_timeout,
            idle: config.idle_timeout,
            max_connections: config.max_connections,
            grace: config.shutdown_grace,
        }
    }
}

/// The open connections (WebSockets included, since their socket carries the slot).
#[derive(Debug, Default)]
pub struct Connections {
    open: AtomicUsize,
    closed: Notify,
}

impl Connections {
    /// How many are open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn take(self: &Arc<Self>, max: usize) -> Option<Slot> {
        let mut n = self.open.load(Ordering::SeqCst);
        loop {
            if n >= max {
                return None;
            }
            match self
                .open
                .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    crate::metrics::connection_opened();
                    return Some(Slot(self.clone()));
                }
                Err(now) => n = now,
            }
        }
    }

    async fn all_closed(&self) {
        loop {
            let closed = self.closed.notified();
            tokio::pin!(closed);
            closed.as_mut().enable();
            if self.open() == 0 {
                return;
            }
            closed.await;
        }
    }
}

/// One connection's place in [`Connections`], given back when its socket is dropped.
#[derive(Debug)]
struct Slot(Arc<Connections>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        crate::metrics::connection_closed();
        self.0.closed.notify_waiters();
    }
}

/// What a connection has been doing, for its timeouts. The hot path only records instants; the
/// connection's watcher computes its deadline from them when it looks, at least every
/// [`Bounds::tick`], so no request wakes it and every deadline is still exact.
#[derive(Debug)]
struct Activity {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    accepted: Instant,
    /// Requests whose response body has not been dropped yet.
    in_flight: usize,
    /// Whether a request finished: from then on the idle timeout applies between requests.
    served: bool,
    idle_since: Instant,
    /// The first byte read while no request was in flight (a next request's headers begin).
    first_byte: Option<Instant>,
    /// Since when a write has been waiting for the peer to read.
    write_blocked: Option<Instant>,
}

impl Activity {
    fn new() -> Activity {
        let now = Instant::now();
        Activity {
            state: Mutex::new(State {
                accepted: now,
                in_flight: 0,
                served: false,
                idle_since: now,
                first_byte: None,
                write_blocked: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) {
        let mut s = self.lock();
        if s.in_flight == 0 && s.first_byte.is_none() {
            s.first_byte = Some(Instant::now());
        }
    }

    fn wrote(&self, blocked: bool) {
        let mut s = self.lock();
        match (blocked, s.write_blocked) {
            (true, None) => s.write_blocked = Some(Instant::now()),
            (false, Some(_)) => s.write_blocked = None,
            _ => {}
        }
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.lock().in_flight += 1;
        InFlight(self.clone())
    }

    /// When this connection is due to be closed, and why, as things stand.
    fn deadline(&self, b: &Bounds) -> Option<(Instant, &'static str)> {
        let s = self.lock();
        let stalled = s
            .write_blocked
            .map(|t| (t + b.body, "a response waited too long for its reader"));
        let waiting = if s.in_flight > 0 {
            None
        } else if !s.served {
            Some((
                s.accepted + b.header,
                "no request headers within the header timeout",
            ))
        } else if let Some(first) = s.first_byte {
            Some((
                first + b.header,
                "request headers took longer than the header timeout",
            ))
        } else {
            Some((s.idle_since + b.idle, "idle longer than the idle timeout"))
        };
        match (stalled, waiting) {
            (Some(a), Some(w)) => Some(if a.0 < w.0 { a } else { w }),
            (a, w) => a.or(w),
        }
    }
}

/// A request in flight; dropped with its response body, when hyper has written it.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.served = true;
            s.idle_since = Instant::now();
            s.first_byte = None;
        }
    }
}

/// The socket, watched: reads and blocked writes are recorded for the timeouts, and the
/// connection's slot goes with it (into a WebSocket after an upgrade).
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
    _slot: Slot,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl Watched {
    fn note<T>(&self, r: &Poll<std::io::Result<T>>) {
        self.activity.wrote(r.is_pending());
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyTimeout`] once its deadline passes.
struct Deadline<B> {
    inner: B,
    at: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> HttpBody for Deadline<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        // The timer is made only for a body that has to be waited for.
        let at = self.at;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that holds its request's [`InFlight`] until hyper has written it.
struct Tracked<B> {
    inner: B,
    _in_flight: InFlight,
}

impl<B: HttpBody + Unpin> HttpBody for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Raises this process's soft open-file limit so that `connections` sockets fit beside the
/// database, key and blob files; answers the limit in force.
#[cfg(unix)]
pub fn raise_open_files(connections: usize) -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let want = connections as u64 + 256;
    let mut limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current < want {
        let target = limit.maximum.map_or(want, |max| want.min(max));
        limit.current = Some(target);
        if setrlimit(Resource::Nofile, limit).is_ok() {
            return Some(target);
        }
    }
    Some(current)
}

/// Raises this process's soft open-file limit (nothing to do off Unix).
#[cfg(not(unix))]
pub fn raise_open_files(_connections: usize) -> Option<u64> {
    None
}

/// The largest request head (request line and headers) a connection may send.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Refusals answered at once: more than this many unfinished ones are dropped unanswered, so
/// refusing cannot itself use up descriptors.
const REFUSALS: usize = 64;

/// Accepts connections on `listener` and serves `router` on each until `shutdown` resolves, then
/// stops accepting, tells every connection to finish (`stopping` is set for the handlers that
/// wait: long-polls, WebSockets) and waits for them for at most the grace period.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    public_url: String,
    connections: Arc<Connections>,
    stopping: watch::Sender<bool>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let refusals = Arc::new(Semaphore::new(REFUSALS));
    let refusal = Arc::new(refusal_bytes(&public_url).await);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, _peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors, most often: wait for connections to close rather
                        // than spin on the error.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Deliveries are small frames pushed as they happen: with Nagle's algorithm a
                // frame waits for the receiver's delayed ACK of the one before (tens of ms).
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set on a connection");
                }
                match connections.take(bounds.max_connections) {
                    Some(slot) => {
                        tasks.spawn(connection(tcp, slot, router.clone(), bounds, stop_rx.clone()));
                    }
                    None => {
                        crate::metrics::count_refused_connection();
                        if let Ok(permit) = refusals.clone().try_acquire_owned() {
                            let answer = refusal.clone();
                            tokio::spawn(async move {
                                refuse(tcp, &answer).await;
                                drop(permit);
                            });
                        }
                    }
                }
            }
        }
    }
    drop(listener);
    tracing::info!(
        open = connections.open(),
        "shutting down: no new connections"
    );
    stopping.send_replace(true);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(bounds.grace, async {
        while tasks.join_next().await.is_some() {}
        connections.all_closed().await;
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.open(),
            grace_ms = bounds.grace.as_millis() as u64,
            "shutdown grace ran out; closing the remaining connections"
        );
        tasks.abort_all();
    }
}

/// Serves one connection until it ends, times out, or shutdown has let it finish.
async fn connection(
    tcp: TcpStream,
    slot: Slot,
    router: Router,
    bounds: Bounds,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io: tcp,
        activity: activity.clone(),
        _slot: slot,
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let in_flight = activity.begin();
            let at = Instant::now() + bounds.body;
            let req = req.map(|inner| Deadline {
                inner,
                at,
                sleep: None,
            });
            let router = router.clone();
            async move {
                let resp = tower::ServiceExt::oneshot(router, req).await?;
                Ok::<_, std::convert::Infallible>(resp.map(|inner| Tracked {
                    inner,
                    _in_flight: in_flight,
                }))
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // A request head may be at most this large (hyper answers 431 past it): hyper's default,
        // about 400 KiB, would let a thousand connections hold 400 MiB of headers.
        .max_buf_size(MAX_HEAD_BYTES)
        // The watcher below enforces the header and idle timeouts (hyper's one timer would
        // cover both with one value).
        .header_read_timeout(None)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    // One timer, moved to the deadline or the next look, whichever comes first.
    let timer = tokio::time::sleep(bounds.tick());
    tokio::pin!(timer);
    loop {
        let look = Instant::now() + bounds.tick();
        let due = activity.deadline(&bounds).map_or(look, |d| d.0.min(look));
        timer.as_mut().reset(due);
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = &mut timer => {
                if let Some((at, why)) = activity.deadline(&bounds)
                    && at <= Instant::now()
                {
                    tracing::debug!(reason = why, "closing a connection");
                    crate::metrics::count_timed_out_connection();
                    return;
                }
            }
        }
    }
}

/// The bytes of the AB-9002 answer, in the one error shape.
async fn refusal_bytes(public_url: &str) -> Vec<u8> {
    let mut err = ApiError::new(
        Code::AtCapacity,
        "the gateway holds as many connections as it allows; retry shortly",
    );
    err.retry_after = Some(1);
    let resp = crate::error::REQUEST
        .scope((String::new(), public_url.to_owned()), async {
            err.closing().into_response()
        })
        .await;
    let (parts, body) = resp.into_parts();
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    out
}

/// Answers a connection over the cap: reads its request head (briefly), sends the 503, closes the
/// write side and reads what else comes for a moment, so the answer is not reset away.
async fn refuse(mut tcp: TcpStream, answer: &[u8]) {
    let mut buf = [0u8; 4096];
    let mut head = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    if tcp.write_all(answer).await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut seen = 0usize;
        while seen < 1 << 20 {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen += n,
            }
        }
    })
    .await;
}
