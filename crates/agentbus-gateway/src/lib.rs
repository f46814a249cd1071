//! The AgentBus gateway: the trust anchor that verifies, persists and routes every envelope.
//!
//! [`router`] builds the HTTP API over an [`App`]; [`Gateway::open`] prepares a data directory
//! (database, master key, gateway signing key, first-start bootstrap) and [`Gateway::serve`] runs
//! it until shutdown, finishing in-flight requests. All logic sits above the `agentbus_store::Store`
//! interface, so a PostgreSQL backend changes nothing here.

mod a2a;
mod access;
mod admin;
mod auth;
mod blobs;
mod blobstore;
mod capabilities;
mod clockapi;
pub mod config;
mod copies;
mod crypto;
mod directory;
mod error;
mod extract;
mod identity;
mod inbox;
#[cfg(test)]
mod layers;
mod meta;
mod metrics;
mod notice;
pub mod ops;
mod owed;
mod people;
mod policy;
mod publish;
mod reaper;
mod receipts;
mod roles;
mod search;
mod serve;
mod sigv4;
mod state;
mod tasks;
mod testclock;
mod usage;
mod views;
mod wake;

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post, put};

use agentbus_protocol::Code;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::{Clock, keyfile};
use agentbus_store::{
    AnyStore, PgOptions, PgStore, Signal, SqliteStore, Store, TokenRow, TokenSubject,
};

pub use admin::Bootstrap;
pub use config::Config;
pub use notice::BackgroundError;
pub use state::{App, Principal};
pub use testclock::Mismatch;

use crate::crypto::DataKey;
use crate::error::REQUEST;
use crate::extract::BodyPolicy;

/// What the crate's own tests and the test kit drive beyond the public surface: a few internals
/// their cases call directly. Compiled only for tests (`test-support`), never for a front end.
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod testing {
    pub use crate::access::bearer;
    pub use crate::crypto::DataKey;
    pub use crate::policy::{Effect, glob_matches, unstated_default};
    pub use crate::sigv4::date_of;
    pub use crate::tasks::{apply_admin_cancel, fire_due};
}

/// Every route, with its method: the OpenAPI document must list exactly these (a test checks).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/.well-known/agentbus.json"),
    ("get", "/schemas/{path}"),
    ("get", "/errors/{code}"),
    ("get", "/healthz"),
    ("get", "/readyz"),
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
    ("post", "/v1/blobs/{id}/complete"),
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
    ("get", "/v1/messages/sent"),
    ("get", "/v1/users"),
    ("delete", "/v1/users/{id}"),
    ("post", "/v1/tokens"),
    ("get", "/v1/tokens"),
    ("post", "/v1/tokens/{id}/revoke"),
    ("get", "/v1/search"),
];

/// Routes served only by a gateway started with `--unsafe-test-clock` (`docs/settings.md`): not
/// part of the API, so neither in [`ROUTES`] nor in the OpenAPI document.
pub const TEST_CLOCK_ROUTES: &[(&str, &str)] =
    &[("get", "/v1/test/clock"), ("post", "/v1/test/clock")];

/// The HTTP API.
pub fn router(app: Arc<App>) -> Router {
    use admin as adm;
    use identity as id;
    let base = app.config.public_url.clone();
    // Blob content is any bytes, up to the inline cap (§9); cards are bounded so that directory
    // listings stay small (§10); every other body is JSON of at most 1 MiB (BodyPolicy::ENVELOPE).
    let blob_content = BodyPolicy {
        limit: usize::try_from(app.config.blob_inline_max).unwrap_or(usize::MAX),
        code: Code::BlobTooLarge,
        json: false,
        what: "AGENTBUS_BLOB_INLINE_MAX, the inline upload cap (§9)",
    };
    let card = BodyPolicy {
        limit: app.config.card_max_bytes,
        code: Code::CardTooLarge,
        json: true,
        what: "card_max_bytes, the agent card limit",
    };
    let mut r = Router::new()
        .route("/.well-known/agentbus.json", get(meta::well_known))
        .route("/schemas/{*path}", get(meta::schema))
        .route("/errors/{code}", get(meta::error_page))
        .route("/healthz", get(meta::health))
        .route("/readyz", get(meta::ready))
        .route("/metrics", get(meta::metrics))
        .route("/v1/openapi.json", get(meta::openapi))
        .route(
            "/v1/workspaces",
            post(adm::create_workspace).get(adm::list_workspaces),
        )
        .route(
            "/v1/workspaces/{id}/policy",
            put(adm::set_policy).get(adm::get_policy),
        )
        .route("/v1/users", post(adm::create_user).get(people::list_users))
        .route("/v1/users/{id}", delete(people::remove_user))
        .route(
            "/v1/tokens",
            post(people::issue_token).get(people::list_tokens),
        )
        .route("/v1/tokens/{id}/revoke", post(people::revoke_token))
        .route(
            "/v1/agents",
            post(id::register_agent)
                .get(id::list_agents)
                .layer(Extension(card)),
        )
        .route(
            "/v1/agents/{id}",
            get(id::get_agent)
                .patch(id::patch_agent)
                .delete(id::delete_agent)
                .layer(Extension(card)),
        )
        .route("/v1/agents/{id}/keys", post(id::add_key))
        .route("/v1/agents/{id}/keys/{key_id}/revoke", post(id::revoke_key))
        .route("/v1/topics", get(id::list_topics))
        .route(
            "/v1/topics/{name}/subscription",
            put(id::subscribe).delete(id::unsubscribe),
        )
        .route("/v1/messages", post(publish::publish))
        .route("/v1/inbox", get(inbox::poll))
        .route("/v1/inbox/ws", get(inbox::websocket))
        .route("/v1/inbox/acks", post(inbox::ack_batch))
        .route("/v1/inbox/{sequence}/ack", post(inbox::ack_one))
        .route("/v1/conversations/{id}", get(id::conversation))
        .route("/v1/tasks", get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::get))
        .route("/v1/tasks/{id}/cancel", post(tasks::admin_cancel))
        .route("/v1/blobs", post(blobs::create))
        .route("/v1/blobs/{id}", get(blobs::get))
        .route("/v1/blobs/{id}/complete", post(blobs::complete))
        .route(
            "/v1/blobs/{id}/content",
            put(blobs::upload)
                .get(blobs::download)
                .layer(Extension(blob_content)),
        )
        .route(
            "/v1/tenants",
            post(adm::create_tenant).get(adm::list_tenants),
        )
        .route("/v1/tenants/{id}/suspend", post(adm::suspend_tenant))
        .route("/v1/tenants/{id}/resume", post(adm::resume_tenant))
        .route("/v1/agents/{id}/suspend", post(adm::suspend_agent))
        .route("/v1/agents/{id}/resume", post(adm::resume_agent))
        .route("/v1/agents/{id}/a2a", get(a2a::card))
        .route(
            "/v1/agents/{id}/.well-known/agent-card.json",
            get(a2a::well_known),
        )
        .route("/v1/inbox/receipts", post(receipts::report))
        .route("/v1/inbox/policy", get(receipts::policy))
        .route("/v1/messages/{id}/delivery", get(receipts::delivery))
        .route("/v1/conversations", get(id::list_conversations))
        .route("/v1/usage", get(usage::list))
        .route("/v1/messages/sent", get(receipts::sent))
        .route("/v1/search", get(search::search));
    let test_clock = app.test_clock.clone();
    if test_clock.is_some() {
        r = r.route(
            "/v1/test/clock",
            get(clockapi::read).post(clockapi::advance),
        );
    }
    let mut r = r
        .fallback(extract::no_route)
        .method_not_allowed_fallback(extract::no_method)
        .layer(middleware::from_fn(extract::close_after_unread_body))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let base = base.clone();
            async move { with_request_id(base, req, next).await }
        }));
    if let Some(clock) = test_clock {
        // Every answer says the clock is a test clock, and what time it shows.
        r = r.layer(middleware::from_fn(move |req: Request, next: Next| {
            let clock = clock.clone();
            async move {
                let mut resp = next.run(req).await;
                if let Ok(v) = HeaderValue::from_str(&clock.now().to_string()) {
                    resp.headers_mut().insert(testclock::HEADER, v);
                }
                resp
            }
        }));
    }
    r.with_state(app)
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
    tracing::debug!(request_id = %request_id, trace_id = %trace, %method, %path, status = resp.status().as_u16(), ms = started.elapsed().as_millis() as u64, "request");
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// A gateway on its store (the embedded SQLite file, or PostgreSQL), ready to serve.
pub struct Gateway {
    /// The shared state.
    pub app: Arc<App>,
    /// Set on the first start of a data directory: the operator's and the first admin's
    /// credentials, to show once.
    pub bootstrap: Option<Bootstrap>,
    /// Routes served beside the API ([`Gateway::mount`]).
    mounted: Option<Router>,
    /// The data directory's lock, held while this gateway lives: a second gateway, or
    /// `admin-token`, on the same directory is refused.
    _lock: std::fs::File,
    /// The task applying the other replicas' signals (PostgreSQL only); stopped with the gateway.
    signals: Option<tokio::task::JoinHandle<()>>,
}

/// Why the gateway could not start (or `admin-token` could not run).
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
    /// Another gateway (or `admin-token`) holds the data directory.
    #[error("data directory {0} is in use by another gateway")]
    Locked(String),
    /// The directory holds no gateway data (`admin-token` on a directory never started).
    #[error("{0} holds no gateway data")]
    NoData(String),
    /// The data directory and `--unsafe-test-clock` disagree.
    #[error(transparent)]
    TestClock(#[from] testclock::Mismatch),
    /// A key file is unusable.
    #[error(transparent)]
    Key(#[from] keyfile::KeyFileError),
    /// The store refused to open.
    #[error("store: {0}")]
    Store(#[from] agentbus_store::StoreError),
    /// The PostgreSQL database could not be used (`store`): its cause and the fix.
    #[error("the database (--store): {cause}")]
    Database {
        /// What went wrong, in a line.
        cause: String,
        /// What to do about it.
        fix: String,
        /// Whether the server could not be reached at all (as opposed to refusing us).
        unreachable: bool,
    },
    /// The master key does not open the tenant keys in the database: another replica's database
    /// with this data directory's own key (docs/deploy.md).
    #[error("master.key in {0} does not open the tenant keys stored in the database")]
    MasterKeyMismatch(String),
    /// Bootstrap failed.
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// The S3 settings do not give a usable bucket (checked at start, §9).
    #[error(transparent)]
    BlobStore(#[from] blobstore::S3Unusable),
    /// The listener could not bind.
    #[error("listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The failure.
        source: std::io::Error,
    },
}

impl agentbus_protocol::errors::Catalogued for StartError {
    fn code(&self) -> Code {
        use testclock::Mismatch;
        match self {
            StartError::Listen { .. } => Code::ListenUnusable,
            StartError::Locked(_) => Code::DataDirLocked,
            StartError::NoData(_) => Code::NoGatewayData,
            StartError::TestClock(Mismatch::NotATestDirectory(_)) => Code::NotATestDirectory,
            StartError::TestClock(Mismatch::TestDirectory(_)) => Code::TestDirectory,
            StartError::Database {
                unreachable: true, ..
            } => Code::DatabaseUnreachable,
            StartError::Database { .. } => Code::DatabaseUnusable,
            StartError::MasterKeyMismatch(_) => Code::MasterKeyMismatch,
            StartError::BlobStore(_) => Code::BlobStoreUnusable,
            // The gateway's own key files (master.key, gateway.key) live in its data directory.
            StartError::DataDir { .. }
            | StartError::Key(_)
            | StartError::Store(_)
            | StartError::Bootstrap(_)
            | StartError::TestClock(Mismatch::Io { .. }) => Code::DataDirUnusable,
        }
    }

    /// The fix a database or object store check worked out, and the data directory where the
    /// error knows it (the front end fills `{dir}` otherwise).
    fn fix_values(&self) -> Vec<(&'static str, String)> {
        match self {
            StartError::Database { fix, .. } => vec![("fix", fix.clone())],
            StartError::BlobStore(u) => vec![("fix", u.fix.clone())],
            StartError::DataDir { path, .. } => vec![("dir", path.clone())],
            _ => Vec::new(),
        }
    }
}

fn load_or_create_key(path: &Path) -> Result<SigningKey, StartError> {
    if path.exists() {
        return Ok(keyfile::read(path)?);
    }
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    keyfile::write_new(path, &key)?;
    Ok(key)
}

/// Binds `config.listen`, before anything touches the data directory, and records the address
/// bound (the real port for `:0`) in `config`, and in its public URL unless that was set apart.
pub async fn bind(config: &mut Config) -> Result<tokio::net::TcpListener, StartError> {
    let asked = config.listen;
    let listener = tokio::net::TcpListener::bind(asked)
        .await
        .map_err(|source| StartError::Listen {
            addr: asked.to_string(),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| StartError::Listen {
        addr: asked.to_string(),
        source,
    })?;
    if config.public_url == format!("http://{asked}") {
        config.public_url = format!("http://{bound}");
    }
    config.listen = bound;
    Ok(listener)
}

/// Creates the data directory (0700) and takes its lock.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File, StartError> {
    let shown = || dir.display().to_string();
    std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
        path: shown(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("gateway.lock"))
        .map_err(|source| StartError::DataDir {
            path: shown(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StartError::Locked(shown())),
        Err(std::fs::TryLockError::Error(source)) => Err(StartError::DataDir {
            path: shown(),
            source,
        }),
    }
}

impl Gateway {
    /// Opens the data directory (creating it), the store, the master and gateway keys, and on
    /// first start bootstraps a tenant, a workspace and an admin credential. With
    /// `config.unsafe_test_clock` the gateway runs on the test clock instead of `clock`.
    pub async fn open(config: Config, clock: Arc<dyn Clock>) -> Result<Gateway, StartError> {
        let dir = config.data_dir.clone();
        // Decided before anything is created, so a refusal leaves the directory as it was.
        let test_clock = testclock::check(&dir, config.unsafe_test_clock)?;
        let lock = lock_data_dir(&dir)?;
        let store = open_store(&config).await?;
        remember_store(&config)?;
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
        let clock: Arc<dyn Clock> = match &test_clock {
            Some(t) => {
                tracing::warn!(
                    data = %dir.display(),
                    offset_ms = t.offset_ms(),
                    "UNSAFE TEST CLOCK: this gateway's time is moved by POST /v1/test/clock; never run it in production"
                );
                t.clone()
            }
            None => clock,
        };
        let blobstore = blobstore::BlobStore::open(&config, &store).await?;
        let signals = store.signals();
        let mut app = App::new(store, clock, config, master, gateway_key, gateway_key_id);
        app.test_clock = test_clock;
        app.blobstore = blobstore;
        app.peers = signals.is_some();
        app.telemetry = Arc::new(start_telemetry(&app.config));
        app.tracer = app.telemetry.tracer();
        let app = Arc::new(app);
        // Replicas share one database and so must share one master key.
        if app.peers
            && let Some(t) = app.store.tenants().await?.first()
            && app.tenant_key(&t.id).await.is_err()
        {
            return Err(StartError::MasterKeyMismatch(dir.display().to_string()));
        }
        let bootstrap = match admin::bootstrap(&app, "default", "default").await {
            Ok(b) => b,
            // Another replica starting at the same moment bootstrapped first: join it.
            Err(_) if app.peers && !app.store.tenants().await?.is_empty() => {
                admin::bootstrap(&app, "default", "default")
                    .await
                    .map_err(|e| StartError::Bootstrap(e.message))?
            }
            Err(e) => return Err(StartError::Bootstrap(e.message)),
        };
        let signals =
            signals.map(|rx| tokio::spawn(serve_signals(app.clone(), rx, IDENTITY_REFRESH)));
        Ok(Gateway {
            app,
            bootstrap,
            mounted: None,
            _lock: lock,
            signals,
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

    /// Binds `config.listen` and serves until `shutdown` resolves (see [`Gateway::serve_on`]).
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let mut config = self.app.config.clone();
        let listener = bind(&mut config).await?;
        self.serve_on(listener, shutdown).await
    }

    /// Serves on an already bound listener until `shutdown` resolves; then accepts nothing more,
    /// lets in-flight requests finish, closes WebSockets with a close frame, and returns within
    /// the shutdown grace. Runs the reaper meanwhile.
    pub async fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let config = &self.app.config;
        if let Some(limit) = serve::raise_open_files(config.max_connections)
            && (limit as usize) < config.max_connections + 64
        {
            tracing::warn!(
                open_files = limit,
                max_connections = config.max_connections,
                "the open-file limit is below max_connections: connections past it fail to be accepted"
            );
        }
        let reaper = reaper::spawn_reaper(self.app.clone());
        serve::run(
            listener,
            self.service(),
            serve::Bounds::of(config),
            config.public_url.clone(),
            Arc::new(serve::Connections::default()),
            self.app.shutting_down.clone(),
            shutdown,
        )
        .await;
        if let Some(r) = reaper {
            r.abort();
        }
        // The exporters' flush blocks on their threads: off the runtime's workers.
        let telemetry = self.app.telemetry.clone();
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        Ok(())
    }
}

/// The telemetry `config` asks for. An exporter that cannot be built leaves the gateway serving
/// with telemetry off, said in the log: traces are no reason to refuse messages.
fn start_telemetry(config: &Config) -> agentbus_telemetry::Telemetry {
    let settings = config.telemetry();
    match agentbus_telemetry::Telemetry::start(&settings, "agentbus-gateway") {
        Ok(t) => {
            if let Some(meter) = t.meter() {
                metrics::export_to(&meter);
                tracing::info!(endpoint = %settings.endpoint, "exporting traces and metrics over OTLP");
            }
            t
        }
        Err(e) => {
            tracing::warn!(error = %e, "telemetry is off");
            agentbus_telemetry::Telemetry::off()
        }
    }
}

/// The signals' task ends with the gateway (served or not), and with it the listening
/// connection.
impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(s) = self.signals.take() {
            s.abort();
        }
    }
}

/// Opens the store `config` names: the SQLite file in the data directory, or the PostgreSQL
/// database (migrated, its durability checked), with a cause and fix for each way that fails.
pub async fn open_store(config: &Config) -> Result<AnyStore, StartError> {
    match &config.store {
        config::StoreSetting::Sqlite => Ok(AnyStore::Sqlite(SqliteStore::open(
            &config.data_dir.join("agentbus.db"),
        )?)),
        config::StoreSetting::Postgres(url) => {
            let opts = PgOptions {
                max_connections: config.store_pool,
                wait: config.store_wait,
                ..PgOptions::default()
            };
            PgStore::open_with(url, opts)
                .await
                .map(AnyStore::Postgres)
                .map_err(|e| {
                    let f = agentbus_store::postgres::open_failure(&e);
                    StartError::Database {
                        cause: f.cause,
                        fix: f.fix,
                        unreachable: f.unreachable,
                    }
                })
        }
    }
}

/// Applies the migrations the store `config` names lacks, and answers its backend and the
/// schema version it is at now (`agentbus gateway migrate`). Replicas migrate at start anyway;
/// this lets an operator do it first, alone, before rolling a new release out.
pub async fn migrate(config: &Config) -> Result<(&'static str, i64), StartError> {
    let _lock = match config.store {
        config::StoreSetting::Sqlite => Some(lock_data_dir(&config.data_dir)?),
        config::StoreSetting::Postgres(_) => None,
    };
    let store = open_store(config).await?;
    let version = store.schema_version();
    Ok((store.backend(), version))
}

/// The file in the data directory naming the PostgreSQL database a gateway on it last used, so
/// `agentbus gateway admin-token --data DIR` (what the first start prints) finds that database.
const STORE_FILE: &str = "store.url";

/// Records, on PostgreSQL, which database this data directory's gateway uses (0600: the URL may
/// hold a password, beside the master key the directory already keeps).
fn remember_store(config: &Config) -> Result<(), StartError> {
    let config::StoreSetting::Postgres(url) = &config.store else {
        return Ok(());
    };
    let path = config.data_dir.join(STORE_FILE);
    let failed = |source| StartError::DataDir {
        path: path.display().to_string(),
        source,
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(&path).map_err(failed)?;
    std::io::Write::write_all(&mut f, format!("{url}\n").as_bytes()).map_err(failed)
}

/// The store `admin-token` acts on: the one `config` names, or, when that is the SQLite default
/// and the data directory holds no SQLite file, the PostgreSQL database a gateway on the
/// directory recorded.
fn admin_store(config: &Config) -> Config {
    let mut config = config.clone();
    if config.store == config::StoreSetting::Sqlite
        && !config.data_dir.join("agentbus.db").exists()
        && let Ok(url) = std::fs::read_to_string(config.data_dir.join(STORE_FILE))
        && !url.trim().is_empty()
    {
        config.store = config::StoreSetting::Postgres(url.trim().to_owned());
    }
    config
}

/// The admin whose token `admin-token` reissues: the gateway operator, or else the first user
/// the first start's bootstrap made (the first tenant's admin).
async fn reissued(store: &AnyStore, operator: bool) -> Result<agentbus_store::UserRow, StartError> {
    let found = if operator {
        store
            .users_with_role(agentbus_store::Role::Operator)
            .await?
            .into_iter()
            .next()
    } else {
        store.first_user().await?
    };
    found.ok_or_else(|| StartError::Bootstrap("the data directory has no such admin yet".into()))
}

/// A reissued admin credential.
#[derive(Debug, Clone)]
pub struct AdminToken {
    /// The admin's tenant slug.
    pub tenant: String,
    /// The admin's workspace slug.
    pub workspace: String,
    /// The new integration token, shown once.
    pub token: String,
    /// How many tokens of the admin it revoked.
    pub revoked: u64,
}

/// Issues a new integration token for the gateway's first tenant admin (or, with `operator`, the
/// gateway operator) and revokes its others. On SQLite, offline: refused while a gateway holds
/// the data directory (a running gateway keeps tokens cached). On PostgreSQL, while replicas
/// run: they are told to drop their cached tokens ([`Signal::Identity`]).
pub async fn reissue_admin_token(
    config: &Config,
    operator: bool,
) -> Result<AdminToken, StartError> {
    let config = &admin_store(config);
    let data_dir = &config.data_dir;
    let (store, _lock) = match &config.store {
        config::StoreSetting::Sqlite => {
            if !data_dir.join("agentbus.db").exists() {
                return Err(StartError::NoData(data_dir.display().to_string()));
            }
            let lock = lock_data_dir(data_dir)?;
            (open_store(config).await?, Some(lock))
        }
        config::StoreSetting::Postgres(_) => (open_store(config).await?, None),
    };
    let admin = reissued(&store, operator).await?;
    let tenant = store
        .tenant(&admin.tenant_id)
        .await?
        .map(|t| t.slug)
        .unwrap_or_default();
    let workspace = store
        .workspace(&admin.workspace_id)
        .await?
        .map(|w| w.slug)
        .unwrap_or_default();
    let token = auth::new_token("abu_");
    let revoked = store
        .replace_tokens(TokenRow {
            hash: auth::token_hash(&token),
            subject: TokenSubject::User(admin.id),
            created_at: agentbus_runtime::SystemClock.now().millis(),
            label: None,
            revoked_at: None,
        })
        .await?;
    store.signal(Signal::Identity).await?;
    Ok(AdminToken {
        tenant,
        workspace,
        token,
        revoked,
    })
}

/// How long a replica keeps identity rows cached at most while other replicas share its store:
/// the bound on a revocation whose signal was lost (a `NOTIFY` that failed to send, a listening
/// connection that died unnoticed), which signals alone leave unbounded.
const IDENTITY_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// Applies the other replicas' signals as they arrive, and forgets every cached identity row
/// each `refresh` besides, until the signals' channel closes.
async fn serve_signals(
    app: Arc<App>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Signal>,
    refresh: std::time::Duration,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + refresh, refresh);
    loop {
        tokio::select! {
            s = rx.recv() => match s {
                Some(s) => app.on_signal(s),
                None => return,
            },
            _ = tick.tick() => app.on_signal(Signal::Identity),
        }
    }
}

/// A gateway on an SQLite store in a new temporary directory (kept while the handle lives), for
/// the unit tests that need an [`App`].
#[cfg(test)]
pub(crate) async fn test_gateway() -> (tempfile::TempDir, Gateway) {
    let tmp = tempfile::tempdir().unwrap();
    let config = Config::new("127.0.0.1:0".parse().unwrap(), tmp.path().to_path_buf());
    let gw = Gateway::open(config, Arc::new(agentbus_runtime::SystemClock))
        .await
        .unwrap();
    (tmp, gw)
}

#[cfg(test)]
mod signal_tests {
    use super::*;

    /// With replicas, cached identity rows last one refresh at most, signal or none: a revocation
    /// whose signal was lost is refused after that long. Tokio's paused clock steps the time.
    #[tokio::test(flavor = "current_thread")]
    async fn cached_identity_rows_are_forgotten_each_refresh_without_a_signal() {
        let (_tmp, gw) = test_gateway().await;
        let app = gw.app.clone();
        tokio::time::pause();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let refresh = std::time::Duration::from_secs(5);
        let served = tokio::spawn(serve_signals(app.clone(), rx, refresh));
        tokio::task::yield_now().await;
        let before = app.identity_generation();
        tokio::time::advance(refresh - std::time::Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(app.identity_generation(), before, "forgotten early");
        tokio::time::advance(std::time::Duration::from_millis(2)).await;
        tokio::task::yield_now().await;
        assert_eq!(app.identity_generation(), before + 1, "not forgotten");
        // A signal is applied as before, and the task ends with its channel.
        tx.send(Signal::Identity).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(app.identity_generation(), before + 2);
        drop(tx);
        served.await.unwrap();
    }
}
