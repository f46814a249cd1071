//! A real gateway in the test process: its own data directory, a loopback port, real HTTP, and a
//! `ManualClock`, with the reaper driven by hand (`reaper_interval_ms = 0`), so no test sleeps for
//! a timer. On SQLite in its directory, or, with `AGENTBUS_TEST_STORE=postgres`, on a database of
//! the test cluster ([`store_for`]).
//!
//! What every suite needs lives here (start, restart, stop, calls, agents, tenants, publishing,
//! the inbox); what one crate's tests need (the console's sessions, the gateway's blob targets)
//! stays in that crate's `tests/it/support.rs`, built on [`Harness`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use agentbus_gateway::config::StoreSetting;
use agentbus_gateway::{App, Config, Gateway};
use agentbus_protocol::signing::SigningKey;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::{Clock as _, ManualClock};

pub use crate::Agent;
use crate::envelope;

/// The instant every test gateway's clock starts at.
pub const T0: i64 = 1_795_000_000_000;

/// The capability test workers declare: `code.review` version 1, no schemas.
pub static CODE_REVIEW: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(envelope::code_review);

/// Whether this run puts the gateway suites on PostgreSQL (`AGENTBUS_TEST_STORE=postgres`).
pub fn on_postgres() -> bool {
    std::env::var("AGENTBUS_TEST_STORE").as_deref() == Ok("postgres")
}

/// The store of a gateway on `dir`: SQLite in it, or on PostgreSQL a database of the test
/// cluster made for `dir` on its first start and found again on a restart (its URL is kept
/// beside the directory).
pub async fn store_for(dir: &Path) -> StoreSetting {
    if !on_postgres() {
        return StoreSetting::Sqlite;
    }
    let kept = dir.with_extension("pgurl");
    if let Ok(url) = std::fs::read_to_string(&kept) {
        return StoreSetting::Postgres(url);
    }
    let url = crate::pg::Cluster::shared().database().await;
    std::fs::write(&kept, &url).unwrap();
    StoreSetting::Postgres(url)
}

/// A running gateway.
pub struct Harness {
    /// Its base URL.
    pub url: String,
    /// The first tenant admin's token (tenant `default`, workspace `default`).
    pub admin: String,
    /// The gateway operator's token.
    pub operator: String,
    /// Its clock.
    pub clock: ManualClock,
    /// The app behind the router, for what a test checks below the HTTP API.
    pub app: Arc<App>,
    /// A client for calls to it.
    pub http: reqwest::Client,
    /// Its data directory.
    pub dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Harness {
    /// A gateway on a fresh temporary directory.
    pub async fn start() -> Harness {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let mut h = Harness::start_in(dir, None).await;
        h.tmp = Some(tmp);
        h
    }

    /// Starts a gateway on `dir` with changed settings.
    pub async fn start_with(dir: PathBuf, change: impl FnOnce(&mut Config)) -> Harness {
        Harness::start_full(dir, None, change, |_| {}).await
    }

    /// Starts (or restarts) a gateway on `dir`.
    pub async fn start_in(dir: PathBuf, clock: Option<ManualClock>) -> Harness {
        Harness::start_full(dir, clock, |_| {}, |_| {}).await
    }

    /// Starts (or restarts) a gateway on `dir`, on `clock` (a new one at [`T0`] if none), with
    /// the test settings changed by `change`, and `mount` given the gateway before it serves (to
    /// mount more routes, as the console does).
    pub async fn start_full(
        dir: PathBuf,
        clock: Option<ManualClock>,
        change: impl FnOnce(&mut Config),
        mount: impl FnOnce(&mut Gateway),
    ) -> Harness {
        let clock = clock.unwrap_or_else(|| ManualClock::new(Timestamp(T0)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = Config::new(addr, dir.clone());
        config.store = store_for(&dir).await;
        config.reaper_interval_ms = 0;
        config.visibility_timeout_s = 30;
        config.max_attempts = 3;
        change(&mut config);
        let mut gw = Gateway::open(config, Arc::new(clock.clone()))
            .await
            .unwrap();
        mount(&mut gw);
        let boot = gw.bootstrap.clone();
        let app = gw.app.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            gw.serve_on(listener, async move {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Harness {
            url: format!("http://{addr}"),
            admin: boot
                .as_ref()
                .map(|b| b.admin_token.clone())
                .unwrap_or_default(),
            operator: boot.map(|b| b.operator_token).unwrap_or_default(),
            clock,
            app,
            http: crate::http_client(),
            dir,
            tmp: None,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Keeps `tmp` (the folder holding the data directory) until the gateway is stopped.
    pub fn hold(&mut self, tmp: tempfile::TempDir) {
        self.tmp = Some(tmp);
    }

    /// Stops the gateway (graceful) and returns its directory, clock and temporary folder, to
    /// restart on.
    pub async fn stop(mut self) -> (PathBuf, ManualClock, Option<tempfile::TempDir>) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
        (self.dir.clone(), self.clock.clone(), self.tmp.take())
    }

    /// The gateway's time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// One call of the HTTP API with `token` (none when empty): the status and the body (a
    /// JSON string of the text when it is not JSON).
    pub async fn req(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if !token.is_empty() {
            r = r.bearer_auth(token);
        }
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `GET path`.
    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.req(reqwest::Method::GET, path, token, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.req(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    /// Registers an agent with a fresh key.
    pub async fn agent(&self, name: &str) -> Agent {
        self.agent_with(name, json!({})).await
    }

    /// Registers an agent with a fresh key and extra card fields.
    pub async fn agent_with(&self, name: &str, extra: Value) -> Agent {
        self.register(&self.admin, name, extra).await
    }

    /// Registers an agent that declares the capability `code.review` version 1 (§10), so task
    /// requests for it are accepted (§5.2).
    pub async fn worker(&self, name: &str) -> Agent {
        self.agent_with(name, json!({"capabilities": [CODE_REVIEW.clone()]}))
            .await
    }

    /// Registers an agent with a fresh key, using `admin`'s token, with extra card fields.
    pub async fn register(&self, admin: &str, name: &str, extra: Value) -> Agent {
        let (key, body) = registration(name, &extra);
        let (s, v) = self.post("/v1/agents", admin, body).await;
        assert_eq!(s, 201, "{v}");
        Agent::from_registration(&v, key)
    }

    /// Registers an agent using `admin` (another tenant's admin token).
    pub async fn agent_in(&self, admin: &str, name: &str) -> Agent {
        self.register(admin, name, json!({})).await
    }

    /// Publishes raw bytes: the status, the body and the `agentbus-idempotent-replay` header.
    pub async fn publish_raw(&self, token: &str, body: Vec<u8>) -> (u16, Value, Option<String>) {
        let resp = self
            .http
            .post(format!("{}/v1/messages", self.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let replay = resp
            .headers()
            .get("agentbus-idempotent-replay")
            .map(|v| v.to_str().unwrap().to_owned());
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        (status, v, replay)
    }

    /// Publishes `env` as it is (signed or not) with `from`'s token.
    pub async fn publish(
        &self,
        from: &Agent,
        env: &Map<String, Value>,
    ) -> (u16, Value, Option<String>) {
        self.publish_raw(
            &from.token,
            Value::Object(env.clone()).to_string().into_bytes(),
        )
        .await
    }

    /// Publishes a task request and answers the id of the task it created (202 expected).
    pub async fn publish_task(&self, from: &Agent, env: &Map<String, Value>) -> String {
        let (status, receipt, _) = self.publish(from, env).await;
        assert_eq!(status, 202, "{receipt}");
        receipt["task_id"].as_str().expect("a task id").to_owned()
    }

    /// Long-polls an inbox.
    pub async fn poll(&self, a: &Agent, after: u64, wait: u64) -> Vec<Value> {
        let (s, v) = self
            .get(&format!("/v1/inbox?after={after}&wait={wait}"), &a.token)
            .await;
        assert_eq!(s, 200, "{v}");
        v["deliveries"].as_array().unwrap().clone()
    }

    /// Acks delivery `d` (an entry of [`Self::poll`]).
    pub async fn ack(&self, a: &Agent, d: &Value) -> (u16, Value) {
        self.post(
            &format!("/v1/inbox/{}/ack", d["sequence"]),
            &a.token,
            json!({"delivery": d["delivery"]}),
        )
        .await
    }

    /// Creates a second tenant (`other`) with a workspace and an admin, through the operator's
    /// `POST /v1/tenants`; returns the admin token.
    pub async fn second_tenant(&self) -> String {
        self.tenant("other").await["admin"]["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Creates a tenant with the operator's token; returns the answer (its admin's token at
    /// `admin.token`).
    pub async fn tenant(&self, slug: &str) -> Value {
        let (s, v) = self
            .post("/v1/tenants", &self.operator, json!({"slug": slug}))
            .await;
        assert_eq!(s, 201, "{v}");
        v
    }

    /// A user of `workspace` (a slug) with `role`, made by `admin`; returns its token.
    pub async fn user(&self, admin: &str, role: &str, workspace: &str) -> String {
        let (s, v) = self
            .post(
                "/v1/users",
                admin,
                json!({"role": role, "workspace": workspace}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v["token"].as_str().unwrap().to_owned()
    }
}

/// An unsigned message.v1 from `from` to `to`, stamped with the gateway's time.
pub fn message(h: &Harness, from: &Agent, to: &str, text: &str) -> Map<String, Value> {
    envelope::message(&from.address, to, text, h.now())
}

/// An unsigned task.request for `code.review` version 1 from `from` to `to`.
pub fn request(h: &Harness, from: &Agent, to: &Agent, constraints: Value) -> Map<String, Value> {
    envelope::request(&from.address, &to.address, h.now(), constraints)
}

/// A signed lifecycle message from `from` about the task of `req`.
pub fn followup(
    h: &Harness,
    from: &Agent,
    to: &Agent,
    req: &Map<String, Value>,
    task: &str,
    kind: &str,
    data: Value,
) -> Map<String, Value> {
    let m = envelope::followup(&from.address, &to.address, req, task, kind, h.now(), data);
    sign(from, m)
}

/// Signs with the agent's registered key.
pub fn sign(a: &Agent, env: Map<String, Value>) -> Map<String, Value> {
    envelope::sign(a, env)
}

/// A signed message.v1 from `from` to `to`.
pub fn signed(h: &Harness, from: &Agent, to: &str, text: &str) -> Map<String, Value> {
    sign(from, message(h, from, to, text))
}

/// A fresh key and the `POST /v1/agents` body registering `name` with it, `extra`'s card fields
/// added: what every harness sends to register an agent.
pub fn registration(name: &str, extra: &Value) -> (SigningKey, Value) {
    let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
    let mut body = json!({"name": name, "public_key": key.public().to_base64url()});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    (key, body)
}
