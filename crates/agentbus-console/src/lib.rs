//! The AgentBus web console, served by the gateway under `/console` (`docs/console.md`).
//!
//! Pages are rendered on the server from askama templates (compiled with the crate, escaping every
//! value in HTML text and attribute context); the only script is one embedded file that swaps in
//! server-rendered fragments pushed over server-sent events. Every asset is in the binary.
//!
//! Authorisation is the gateway's: every page reads through its door, `agentbus_gateway::ops`,
//! whose `Caller` runs the scoped functions the HTTP API calls with the signed-in user's
//! principal and hands out views, never stored rows; so a page shows exactly what the API shows
//! that user, and an object outside the user's scope renders the same "not found" page as one
//! that does not exist. Sessions live in
//! the gateway's store (any replica serves any request) and re-check the user's token on every
//! request.

mod assets;
mod live;
mod pages;
mod render;
mod session;

#[cfg(test)]
mod door;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;

use agentbus_gateway::ops::App;

pub use session::SESSION_COOKIE;

/// Settings of the console.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// How often live views (overview, a task's page) look for changes, and the overview's
    /// sampler samples the counters (one bar of its charts per interval).
    pub live_interval: Duration,
    /// How long a session lasts after sign-in, seconds.
    pub session_ttl_s: i64,
}

impl Default for ConsoleConfig {
    fn default() -> ConsoleConfig {
        ConsoleConfig {
            live_interval: Duration::from_secs(2),
            session_ttl_s: 8 * 3600,
        }
    }
}

/// The console's state: the gateway it shows, its settings, and the overview's samples.
pub struct Console {
    app: Arc<App>,
    config: ConsoleConfig,
    sampler: live::Sampler,
}

impl Console {
    /// The console of `app`: takes the first sample of the gateway's counters and starts sampling
    /// them every `live_interval` until the gateway shuts down, so the overview's charts have
    /// history whoever loads them. Call it within a Tokio runtime.
    pub fn new(app: Arc<App>, config: ConsoleConfig) -> Arc<Console> {
        let console = Arc::new(Console {
            sampler: live::Sampler::new(config.live_interval),
            app,
            config,
        });
        console.sample_now();
        live::sample_every_interval(&console);
        console
    }

    /// Its routes, to mount beside the gateway's API (`agentbus_gateway::Gateway::mount`).
    pub fn router(self: &Arc<Console>) -> Router {
        routes()
            .method_not_allowed_fallback(pages::wrong_method)
            // A policy document is at most an envelope's size; forms are far smaller.
            .layer(DefaultBodyLimit::max(
                agentbus_protocol::envelope::MAX_ENVELOPE_BYTES + 4096,
            ))
            .layer(middleware::from_fn(security_headers))
            .with_state(self.clone())
    }

    /// Takes a sample of the counters now, as the sampler does every interval: tests call it
    /// instead of waiting for the timer.
    pub fn sample_now(&self) {
        self.sampler.sample(self.app.now());
    }
}

/// The Content-Security-Policy of every page: scripts, styles and images from the console's own
/// assets only (no inline script or style, no `eval`), nothing framed, forms posted to itself.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

macro_rules! console_routes {
    ($($method:ident $path:literal => $($handler:ident)::+;)*) => {
        /// Every route of the console, with its method (the cross-scope refusal test walks it).
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path),)*];

        fn routes() -> Router<Arc<Console>> {
            Router::new()$(.route($path, axum::routing::$method($($handler)::+)))*
        }
    };
}

console_routes! {
    get "/console" => pages::home;
    get "/console/" => pages::home;
    get "/console/sign-in" => session::sign_in_form;
    post "/console/sign-in" => session::sign_in;
    post "/console/sign-out" => session::sign_out;
    get "/console/overview" => pages::overview::page_of;
    get "/console/live/overview" => live::overview;
    get "/console/agents" => pages::agents::list;
    get "/console/agents/{id}" => pages::agents::one;
    post "/console/agents/{id}/suspend" => pages::agents::suspend;
    post "/console/agents/{id}/resume" => pages::agents::resume;
    get "/console/conversations" => pages::conversations::list;
    get "/console/conversations/{id}" => pages::conversations::thread;
    get "/console/attachments/{id}" => pages::conversations::attachment;
    get "/console/tasks" => pages::tasks::list;
    get "/console/tasks/{id}" => pages::tasks::one;
    get "/console/live/tasks/{id}" => live::task;
    post "/console/tasks/{id}/cancel" => pages::tasks::cancel;
    get "/console/attention" => pages::attention::page_of;
    get "/console/search" => pages::search::page_of;
    get "/console/topics" => pages::topics::list;
    get "/console/policy" => pages::policy::view;
    post "/console/policy/{id}" => pages::policy::save;
    get "/console/usage" => pages::usage::page_of;
    get "/console/tenants" => pages::tenants::list;
    post "/console/tenants/{id}/suspend" => pages::tenants::suspend;
    post "/console/tenants/{id}/resume" => pages::tenants::resume;
    get "/console/assets/{file}" => assets::serve;
    get "/console/{*rest}" => pages::not_found;
}

/// The console's routes over `app`, to mount beside the gateway's API
/// (`agentbus_gateway::Gateway::mount`): [`Console::new`] and its router. Call it within a Tokio
/// runtime.
pub fn router(app: Arc<App>, config: ConsoleConfig) -> Router {
    Console::new(app, config).router()
}

/// Headers every console answer carries unless the handler set its own (an attachment sets a
/// sandboxing CSP; assets their cache policy). The referrer policy is `same-origin`, not
/// `no-referrer`: under `no-referrer` browsers send `Origin: null` with the console's own forms,
/// which the CSRF check must then refuse.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    let fixed: [(HeaderName, &str); 8] = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("permissions-policy"),
            "camera=(), microphone=(), geolocation=(), payment=()",
        ),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        if !h.contains_key(&name) {
            h.insert(name, HeaderValue::from_static(value));
        }
    }
    resp
}
