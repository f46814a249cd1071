//! The AgentBus gateway: the trust anchor that verifies, persists and routes every envelope.
//!
//! [`router`] builds the HTTP API over an [`App`]; [`Gateway::open`] prepares a data directory
//! (database, master key, gateway signing key, first-start bootstrap) and [`Gateway::serve`] runs
//! it until shutdown, finishing in-flight requests. All logic sits above the `agentbus_store::Store`
//! interface, so a PostgreSQL backend changes nothing here.

pub mod a2a;
pub mod admin;
pub mod app;
pub mod auth;
pub mod blobs;
pub mod capabilities;
pub mod config;
pub mod crypto;
pub mod error;
pub mod identity;
pub mod inbox;
pub mod meta;
pub mod metrics;
pub mod policy;
pub mod publish;
pub mod receipts;
pub mod roles;
pub mod tasks;
pub mod usage;
pub mod views;

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};

use agentbus_protocol::Code;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::{Clock, keyfile};
use agentbus_store::{SqliteStore, Store};

pub use app::App;
pub use config::Config;
pub use identity::Bootstrap;

use crate::crypto::DataKey;
use crate::error::{ApiError, REQUEST};

/// Every route, with its method: the OpenAPI document must list exactly these (a test checks).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/.well-known/agentbus.json"),
    ("get", "/schemas/{path}"),
    ("get", "/errors/{code}"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/v1/openapi.json"),
    ("post", "/v1/workspaces"),
    ("put", "/v1/workspaces/{id}/policy"),
    ("post", "/v1/users"),
    ("post", "/v1/agents"),
    ("get", "/v1/agents"),
    ("get", "/v1/agents/{id}"),
    ("patch", "/v1/agents/{id}"),
    ("delete", "/v1/agents/{id}"),
    ("post", "/v1/agents/{id}/keys"),
    ("post", "/v1/agents/{id}/keys/{key_id}/revoke"),
    ("get", "/v1/topics"),
    ("put", "/v1/topics/{name}/subscription"),
    ("delete", "/v1/topics/{name}/subscription"),
    ("post", "/v1/messages"),
    ("get", "/v1/inbox"),
    ("get", "/v1/inbox/ws"),
    ("post", "/v1/inbox/acks"),
    ("post", "/v1/inbox/{sequence}/ack"),
    ("get", "/v1/conversations/{id}"),
    ("get", "/v1/tasks"),
    ("get", "/v1/tasks/{id}"),
    ("post", "/v1/tasks/{id}/cancel"),
    ("post", "/v1/blobs"),
    ("get", "/v1/blobs/{id}"),
    ("put", "/v1/blobs/{id}/content"),
    ("get", "/v1/blobs/{id}/content"),
    ("post", "/v1/tenants"),
    ("get", "/v1/tenants"),
    ("post", "/v1/tenants/{id}/suspend"),
    ("post", "/v1/tenants/{id}/resume"),
    ("get", "/v1/workspaces"),
    ("get", "/v1/workspaces/{id}/policy"),
    ("post", "/v1/agents/{id}/suspend"),
    ("post", "/v1/agents/{id}/resume"),
    ("get", "/v1/agents/{id}/a2a"),
    ("get", "/v1/agents/{id}/.well-known/agent-card.json"),
    ("post", "/v1/inbox/receipts"),
    ("get", "/v1/inbox/policy"),
    ("get", "/v1/messages/{id}/delivery"),
    ("get", "/v1/conversations"),
    ("get", "/v1/usage"),
];

/// The HTTP API.
pub fn router<S: Store>(app: Arc<App<S>>) -> Router {
    use admin as adm;
    use identity as id;
    let base = app.config.public_url.clone();
    // One byte over the cap still reaches the handler, which answers AB-3040 with a body.
    let blob_cap = usize::try_from(app.config.blob_inline_max)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    Router::new()
        .route("/.well-known/agentbus.json", get(meta::well_known::<S>))
        .route("/schemas/{*path}", get(meta::schema))
        .route("/errors/{code}", get(meta::error_page))
        .route("/healthz", get(meta::health))
        .route("/metrics", get(meta::metrics::<S>))
        .route("/v1/openapi.json", get(meta::openapi))
        .route(
            "/v1/workspaces",
            post(adm::create_workspace::<S>).get(adm::list_workspaces::<S>),
        )
        .route(
            "/v1/workspaces/{id}/policy",
            put(adm::set_policy::<S>).get(adm::get_policy::<S>),
        )
        .route("/v1/users", post(adm::create_user::<S>))
        .route(
            "/v1/agents",
            post(id::register_agent::<S>).get(id::list_agents::<S>),
        )
        .route(
            "/v1/agents/{id}",
            get(id::get_agent::<S>)
                .patch(id::patch_agent::<S>)
                .delete(id::delete_agent::<S>),
        )
        .route("/v1/agents/{id}/keys", post(id::add_key::<S>))
        .route(
            "/v1/agents/{id}/keys/{key_id}/revoke",
            post(id::revoke_key::<S>),
        )
        .route("/v1/topics", get(id::list_topics::<S>))
        .route(
            "/v1/topics/{name}/subscription",
            put(id::subscribe::<S>).delete(id::unsubscribe::<S>),
        )
        .route("/v1/messages", post(publish::publish::<S>))
        .route("/v1/inbox", get(inbox::poll::<S>))
        .route("/v1/inbox/ws", get(inbox::websocket::<S>))
        .route("/v1/inbox/acks", post(inbox::ack_batch::<S>))
        .route("/v1/inbox/{sequence}/ack", post(inbox::ack_one::<S>))
        .route("/v1/conversations/{id}", get(id::conversation::<S>))
        .route("/v1/tasks", get(tasks::list::<S>))
        .route("/v1/tasks/{id}", get(tasks::get::<S>))
        .route("/v1/tasks/{id}/cancel", post(tasks::admin_cancel::<S>))
        .route("/v1/blobs", post(blobs::create::<S>))
        .route("/v1/blobs/{id}", get(blobs::get::<S>))
        .route(
            "/v1/blobs/{id}/content",
            put(blobs::upload::<S>)
                .get(blobs::download::<S>)
                .layer(DefaultBodyLimit::max(blob_cap)),
        )
        .route(
            "/v1/tenants",
            post(adm::create_tenant::<S>).get(adm::list_tenants::<S>),
        )
        .route("/v1/tenants/{id}/suspend", post(adm::suspend_tenant::<S>))
        .route("/v1/tenants/{id}/resume", post(adm::resume_tenant::<S>))
        .route("/v1/agents/{id}/suspend", post(adm::suspend_agent::<S>))
        .route("/v1/agents/{id}/resume", post(adm::resume_agent::<S>))
        .route("/v1/agents/{id}/a2a", get(a2a::card::<S>))
        .route(
            "/v1/agents/{id}/.well-known/agent-card.json",
            get(a2a::well_known::<S>),
        )
        .route("/v1/inbox/receipts", post(receipts::report::<S>))
        .route("/v1/inbox/policy", get(receipts::policy::<S>))
        .route("/v1/messages/{id}/delivery", get(receipts::delivery::<S>))
        .route("/v1/conversations", get(id::list_conversations::<S>))
        .route("/v1/usage", get(usage::list::<S>))
        .fallback(|| async {
            ApiError::new(Code::NotFound, "no such endpoint; see /v1/openapi.json").into_response()
        })
        // Bodies above 1 MiB are refused before they are read in full (uploads have their own cap).
        .layer(DefaultBodyLimit::max(
            agentbus_protocol::envelope::MAX_ENVELOPE_BYTES + 1,
        ))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let base = base.clone();
            async move { with_request_id(base, req, next).await }
        }))
        .with_state(app)
}

/// Gives every request an id (echoed as `x-request-id` and in error bodies) and logs it with the
/// trace id of its `traceparent`.
async fn with_request_id(base: String, req: Request, next: Next) -> Response {
    let request_id = agentbus_runtime::mint(IdKind::Message)
        .to_string()
        .replacen("msg_", "req_", 1);
    let trace = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.get(3..35))
        .unwrap_or_default()
        .to_owned();
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let started = std::time::Instant::now();
    let mut resp = REQUEST
        .scope((request_id.clone(), base), next.run(req))
        .await;
    tracing::info!(request_id = %request_id, trace_id = %trace, %method, %path, status = resp.status().as_u16(), ms = started.elapsed().as_millis() as u64, "request");
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A gateway on an embedded SQLite store, ready to serve.
pub struct Gateway {
    /// The shared state.
    pub app: Arc<App<SqliteStore>>,
    /// Set on the first start of a data directory: the operator's and the first admin's
    /// credentials, to show once.
    pub bootstrap: Option<Bootstrap>,
    /// Routes served beside the API ([`Gateway::mount`]).
    mounted: Option<Router>,
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be prepared.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The failure.
        source: std::io::Error,
    },
    /// A key file is unusable.
    #[error(transparent)]
    Key(#[from] keyfile::KeyFileError),
    /// The store refused to open.
    #[error("store: {0}")]
    Store(#[from] agentbus_store::StoreError),
    /// Bootstrap failed.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// The listener could not bind.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The failure.
        source: std::io::Error,
    },
}

fn load_or_create_key(path: &Path) -> Result<SigningKey, StartError> {
    if path.exists() {
        return Ok(keyfile::read(path)?);
    }
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    keyfile::write_new(path, &key)?;
    Ok(key)
}

impl Gateway {
    /// Opens the data directory (creating it), the store, the master and gateway keys, and on
    /// first start bootstraps the gateway operator and a tenant with a workspace and its admin.
    pub async fn open(config: Config, clock: Arc<dyn Clock>) -> Result<Gateway, StartError> {
        let dir = config.data_dir.clone();
        std::fs::create_dir_all(&dir).map_err(|source| StartError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        }
        let store = SqliteStore::open(&dir.join("agentbus.db"))?;
        let master = load_or_create_key(&dir.join("master.key"))?;
        let master = DataKey::from_bytes(master.seed());
        let gateway_key = load_or_create_key(&dir.join("gateway.key"))?;
        // The key id is derived from the key, so it is stable across restarts.
        let digest = <sha2::Sha256 as sha2::Digest>::digest(gateway_key.public().to_bytes());
        let mut v = 0u128;
        for b in &digest[..16] {
            v = (v << 8) | u128::from(*b);
        }
        let gateway_key_id =
            agentbus_protocol::ids::Id::from_parts(IdKind::Key, v >> 2).to_string();
        let app = Arc::new(App::new(
            store,
            clock,
            config,
            master,
            gateway_key,
            gateway_key_id,
        ));
        let bootstrap = identity::bootstrap(&app, "default", "default")
            .await
            .map_err(|e| StartError::Bootstrap(e.message))?;
        Ok(Gateway {
            app,
            bootstrap,
            mounted: None,
        })
    }

    /// Serves `routes` beside the API on the same listener; they must not overlap the API's
    /// paths. The binary mounts the console (`/console`) here: the gateway knows no HTML.
    pub fn mount(&mut self, routes: Router) {
        self.mounted = Some(match self.mounted.take() {
            Some(r) => r.merge(routes),
            None => routes,
        });
    }

    /// The API's router with whatever was mounted beside it.
    fn service(&self) -> Router {
        let api = router(self.app.clone());
        match &self.mounted {
            Some(extra) => api.merge(extra.clone()),
            None => api,
        }
    }

    /// Serves until `shutdown` resolves, then finishes in-flight requests. Runs the reaper.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let addr = self.app.config.listen;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Listen {
                addr: addr.to_string(),
                source,
            })?;
        self.serve_on(listener, shutdown).await
    }

    /// Serves on an already bound listener.
    pub async fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let reaper = spawn_reaper(self.app.clone());
        let app = self.app.clone();
        let shutdown = async move {
            shutdown.await;
            app.shutting_down.send_replace(true);
        };
        // Deliveries are small frames pushed as they happen: with Nagle's algorithm a frame
        // waits for the receiver's delayed ACK of the one before (tens of ms at low rates).
        use axum::serve::ListenerExt as _;
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "TCP_NODELAY not set on a connection");
            }
        });
        let result = axum::serve(listener, self.service())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| StartError::Listen { addr, source });
        if let Some(r) = reaper {
            r.abort();
        }
        result
    }
}

/// Runs the reaper every `reaper_interval_ms` (none when 0: tests call `App::reap`).
pub fn spawn_reaper<S: Store>(app: Arc<App<S>>) -> Option<tokio::task::JoinHandle<()>> {
    let every = app.config.reaper_interval_ms;
    if every == 0 {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(every));
        loop {
            tick.tick().await;
            if let Err(e) = app.reap().await {
                tracing::warn!(code = %e.code, error = %e.message, "reaper pass failed");
            }
        }
    }))
}
