//! The harness: a gateway per test, agents with keys, signed envelopes.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use agentbus_gateway::config::StoreSetting;
use agentbus_gateway::{Config, Gateway};
use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::{SigningKey, sign_envelope};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::{ManualClock, mint};

/// A running gateway.
pub struct Harness {
    pub url: String,
    /// The first tenant admin's token (tenant `default`).
    pub admin: String,
    /// The gateway operator's token.
    pub operator: String,
    pub clock: ManualClock,
    pub app: Arc<agentbus_gateway::App>,
    pub http: reqwest::Client,
    pub dir: std::path::PathBuf,
    _tmp: Option<tempfile::TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Whether this run of the suite is on PostgreSQL (`AGENTBUS_TEST_STORE=postgres`).
pub fn on_postgres() -> bool {
    std::env::var("AGENTBUS_TEST_STORE").as_deref() == Ok("postgres")
}

/// The store of a gateway on `dir`: SQLite in it, or on PostgreSQL a database of the test
/// cluster made for `dir` on its first start and found again on a restart (its URL is kept
/// beside the directory).
pub async fn store_for(dir: &std::path::Path) -> StoreSetting {
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

/// An agent with its credential and signing key.
#[derive(Clone)]
pub struct Agent {
    pub id: String,
    pub address: String,
    pub token: String,
    pub key: SigningKey,
    pub key_id: String,
}

pub const T0: i64 = 1_795_000_000_000;

/// The capability test workers declare: `code.review` version 1, no schemas.
pub static CODE_REVIEW: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"name": "code.review", "version": "1", "description": "Review a diff."}),
);

impl Harness {
    pub async fn start() -> Harness {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let mut h = Harness::start_in(dir, None).await;
        h._tmp = Some(tmp);
        h
    }

    /// Starts a gateway on `dir` with changed settings.
    pub async fn start_with(dir: std::path::PathBuf, change: impl FnOnce(&mut Config)) -> Harness {
        Harness::start_full(dir, None, change).await
    }

    /// Starts (or restarts) a gateway on `dir`.
    pub async fn start_in(dir: std::path::PathBuf, clock: Option<ManualClock>) -> Harness {
        Harness::start_full(dir, clock, |_| {}).await
    }

    async fn start_full(
        dir: std::path::PathBuf,
        clock: Option<ManualClock>,
        change: impl FnOnce(&mut Config),
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
        let gw = Gateway::open(config, Arc::new(clock.clone()))
            .await
            .unwrap();
        let admin = gw
            .bootstrap
            .as_ref()
            .map(|b| b.admin_token.clone())
            .unwrap_or_default();
        let operator = gw
            .bootstrap
            .as_ref()
            .map(|b| b.operator_token.clone())
            .unwrap_or_default();
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
            admin,
            operator,
            clock,
            app,
            http: http_client(),
            dir,
            _tmp: None,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the gateway (graceful) and returns its directory and clock, to restart on.
    pub async fn stop(mut self) -> (std::path::PathBuf, ManualClock, Option<tempfile::TempDir>) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
        let dir = self.dir.clone();
        let clock = self.clock.clone();
        let tmp = self._tmp.take();
        drop(self);
        (dir, clock, tmp)
    }

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

    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.req(reqwest::Method::GET, path, token, None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.req(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    /// Registers an agent with a fresh key.
    pub async fn agent(&self, name: &str) -> Agent {
        self.agent_with(name, json!({})).await
    }

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
        let key = SigningKey::from_seed(agentbus_runtime::random_bytes());
        let mut body = json!({"name": name, "public_key": key.public().to_base64url()});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (s, v) = self.post("/v1/agents", admin, body).await;
        assert_eq!(s, 201, "{v}");
        Agent {
            id: v["agent"]["id"].as_str().unwrap().to_owned(),
            address: v["agent"]["address"].as_str().unwrap().to_owned(),
            token: v["token"].as_str().unwrap().to_owned(),
            key,
            key_id: v["key"]["id"].as_str().unwrap().to_owned(),
        }
    }

    /// Publishes raw bytes.
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

    pub async fn ack(&self, a: &Agent, d: &Value) -> (u16, Value) {
        self.post(
            &format!("/v1/inbox/{}/ack", d["sequence"]),
            &a.token,
            json!({"delivery": d["delivery"]}),
        )
        .await
    }

    pub fn now(&self) -> Timestamp {
        agentbus_runtime::Clock::now(&self.clock)
    }
}

/// An unsigned message.v1 from `from` to `to`.
pub fn message(h: &Harness, from: &Agent, to: &str, text: &str) -> Map<String, Value> {
    json!({
        "specversion": "1.0",
        "id": mint(IdKind::Message).to_string(),
        "source": from.address,
        "type": "agentbus.message.v1",
        "time": h.now().to_string(),
        "datacontenttype": "application/json",
        "to": to,
        "conversation_id": mint(IdKind::Conversation).to_string(),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "schema": "https://komsary.agentbus.exchange/schemas/agentbus.message/v1.json",
        "data": {"text": text}
    })
    .as_object()
    .unwrap()
    .clone()
}

/// An unsigned task.request for `code.review` version 1 from `from` to `to`.
pub fn request(h: &Harness, from: &Agent, to: &Agent, constraints: Value) -> Map<String, Value> {
    let mut m = message(h, from, &to.address, "");
    m["type"] = json!("agentbus.task.request.v1");
    m["schema"] = json!("https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json");
    m.insert("capability".into(), json!("code.review"));
    m.insert("capability_version".into(), json!("1"));
    m["data"] = json!({"instructions": "Review change 482 for concurrency bugs.", "constraints": constraints});
    m
}

/// A lifecycle message from `from` about the task of `req`.
pub fn followup(
    h: &Harness,
    from: &Agent,
    to: &Agent,
    req: &Map<String, Value>,
    task: &str,
    kind: &str,
    data: Value,
) -> Map<String, Value> {
    let mut m = message(h, from, &to.address, "");
    m["type"] = json!(format!("agentbus.task.{kind}.v1"));
    m["schema"] = json!(format!(
        "https://komsary.agentbus.exchange/schemas/agentbus.task.{kind}/v1.json"
    ));
    m["conversation_id"] = req["conversation_id"].clone();
    m.insert("correlation_id".into(), req["id"].clone());
    let mut data = data;
    data["task_id"] = json!(task);
    m["data"] = data;
    sign(from, m)
}

/// Signs with the agent's registered key.
pub fn sign(a: &Agent, mut env: Map<String, Value>) -> Map<String, Value> {
    env.shift_remove("sig");
    sign_envelope(&mut env, &a.key, a.key_id.parse::<Id>().unwrap()).unwrap();
    env
}

pub fn signed(h: &Harness, from: &Agent, to: &str, text: &str) -> Map<String, Value> {
    sign(from, message(h, from, to, text))
}

impl Harness {
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

    /// Registers an agent using `admin` (another tenant's admin token).
    pub async fn agent_in(&self, admin: &str, name: &str) -> Agent {
        self.register(admin, name, json!({})).await
    }

    /// Registers and uploads a blob; returns its metadata.
    /// Registers and uploads `bytes` through whichever target the gateway answers with (§9), as
    /// a sidecar does: the inline PUT, or the sealed pre-signed PUT then `complete`.
    pub async fn upload(&self, a: &Agent, name: &str, bytes: &[u8]) -> Value {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(bytes));
        let (s, b) = self.post("/v1/blobs", &a.token, json!({"name": name, "media_type": "text/plain", "size": bytes.len(), "sha256": sha})).await;
        assert_eq!(s, 201, "{b}");
        let (s, v) = self.put_content(a, &b, bytes).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// Puts `bytes` to the upload target of registration `reg` (sealed for a pre-signed one, then
    /// completed): the status and body of the gateway's last answer.
    pub async fn put_content(&self, a: &Agent, reg: &Value, bytes: &[u8]) -> (u16, Value) {
        let up = &reg["upload"];
        let url = up["url"].as_str().unwrap();
        if url.starts_with('/') {
            let resp = self
                .http
                .put(format!("{}{url}", self.url))
                .bearer_auth(&a.token)
                .body(bytes.to_vec())
                .send()
                .await
                .unwrap();
            return (resp.status().as_u16(), resp.json().await.unwrap());
        }
        let sealed = sealing_key(&up["sealing"]).seal(bytes);
        self.put_presigned(url, sealed).await;
        self.complete(a, reg).await
    }

    /// A PUT of `body` to a pre-signed URL; its status.
    pub async fn put_presigned(&self, url: &str, body: Vec<u8>) -> u16 {
        let r = self.http.put(url).body(body).send().await.unwrap();
        r.status().as_u16()
    }

    /// `POST /v1/blobs/{id}/complete` for registration `reg`.
    pub async fn complete(&self, a: &Agent, reg: &Value) -> (u16, Value) {
        let id = reg["id"].as_str().unwrap();
        self.post(&format!("/v1/blobs/{id}/complete"), &a.token, json!({}))
            .await
    }

    /// Downloads blob `id` as `a` through the target `GET /v1/blobs/{id}` names: the status and
    /// the plaintext (opened with the blob's key for a pre-signed GET).
    pub async fn download(&self, a: &Agent, id: &str) -> (u16, Vec<u8>) {
        let (s, meta) = self.get(&format!("/v1/blobs/{id}"), &a.token).await;
        if s != 200 {
            return (s, meta.to_string().into_bytes());
        }
        let url = meta["download"]["url"].as_str().unwrap();
        if url.starts_with('/') {
            let r = self
                .http
                .get(format!("{}{url}", self.url))
                .bearer_auth(&a.token)
                .send()
                .await
                .unwrap();
            return (r.status().as_u16(), r.bytes().await.unwrap().to_vec());
        }
        let r = self.http.get(url).send().await.unwrap();
        let status = r.status().as_u16();
        let sealed = r.bytes().await.unwrap();
        let size = meta["size"].as_u64().unwrap();
        let plain = sealing_key(&meta["download"]["sealing"])
            .open(&sealed, size)
            .expect("the pre-signed download opens under the blob's key");
        (status, plain)
    }

    /// Whether this gateway keeps blob content in an S3 bucket.
    pub fn on_s3(&self) -> bool {
        self.app.blobstore.presigns()
    }
}

/// The content key a `sealing` object of the gateway's answers carries.
pub fn sealing_key(sealing: &Value) -> agentbus_protocol::blobseal::ContentKey {
    use base64::Engine as _;
    assert_eq!(sealing["scheme"], agentbus_protocol::blobseal::SCHEME);
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sealing["key"].as_str().unwrap())
        .unwrap();
    agentbus_protocol::blobseal::ContentKey::from_bytes(raw.try_into().unwrap())
}

/// Where blob content rests in a test: the data directory, or a bucket of the test S3 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Sealed files under `<data>/blobs`.
    Inline,
    /// A fresh bucket on the moto server, downloads pre-signed.
    S3,
    /// A fresh bucket, downloads through the gateway.
    S3ViaGateway,
}

impl Harness {
    /// A gateway whose blob content rests in `target`.
    pub async fn start_target(target: Target) -> Harness {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let mut h = match target {
            Target::Inline => Harness::start_in(dir, None).await,
            Target::S3 | Target::S3ViaGateway => {
                let s3 = crate::s3::bucket(tmp.path()).await;
                Harness::start_with(dir, |c| {
                    s3.configure(c);
                    if target == Target::S3ViaGateway {
                        c.s3_download = agentbus_gateway::config::S3Download::Gateway;
                    }
                })
                .await
            }
        };
        h._tmp = Some(tmp);
        h
    }
}

/// A reqwest client; the workspace builds reqwest without a rustls provider, so `ring` is installed
/// first (a second install is a harmless error).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
