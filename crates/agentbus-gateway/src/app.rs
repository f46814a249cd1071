//! The gateway's shared state and the operations handlers call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use agentbus_protocol::address::AgentAddress;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing::{self, PublicKey, SigningKey};
use agentbus_protocol::timestamp::Timestamp;
use agentbus_runtime::{Clock, mint_at};
use agentbus_store::*;

use crate::config::Config;
use crate::crypto::DataKey;
use crate::error::{ApiError, ApiResult};
use agentbus_protocol::Code;

/// Who a bearer token authenticates.
#[derive(Debug, Clone)]
pub enum Principal {
    /// A user (integration token).
    User(UserRow),
    /// An agent (agent credential).
    Agent(AgentRow),
}

impl Principal {
    /// The principal's tenant (empty for the gateway operator, who belongs to none).
    pub fn tenant_id(&self) -> &str {
        match self {
            Principal::User(u) => &u.tenant_id,
            Principal::Agent(a) => &a.tenant_id,
        }
    }
}

/// Read-mostly identity data, cached so a publish needs no database read to authenticate, resolve
/// and check policy. Every identity write in this process clears it. (A gateway with several
/// replicas would clear it on a change notification from the database as well.)
#[derive(Default)]
struct Directory {
    tenants: HashMap<String, Option<TenantRow>>,
    workspaces: HashMap<String, Option<WorkspaceRow>>,
    ws_by_slug: HashMap<(String, String), Option<WorkspaceRow>>,
    agents: HashMap<String, Option<AgentRow>>,
    by_name: HashMap<(String, String), Option<AgentRow>>,
    keys: HashMap<String, Vec<KeyRow>>,
    /// Registered public keys by key id, decoded once (decoding is a point decompression, a
    /// noticeable part of each publish's verification).
    decoded: HashMap<String, Option<PublicKey>>,
    /// How many times the identity caches were forgotten: a row read before a change may be
    /// cached only if they were not forgotten while it was read ([`App::cached`]).
    generation: u64,
}

/// What wakes the long-polls and WebSockets of one inbox: a notification, and a count of the
/// wake-ups so far, so a reader whose last lease took everything deliverable can tell whether
/// anything arrived since without leasing again.
#[derive(Debug, Default)]
pub struct InboxWaker {
    notify: Notify,
    wakes: AtomicU64,
}

impl InboxWaker {
    /// The next wake-up (enable it before reading [`InboxWaker::wakes`] so none is missed).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// The wake-ups so far. A publish counts after it commits, so a lease that began after
    /// reading this sees every publish counted up to it.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::SeqCst)
    }

    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The gateway.
pub struct App<S: Store> {
    /// Storage.
    pub store: S,
    /// Time, injectable.
    pub clock: Arc<dyn Clock>,
    /// Settings.
    pub config: Config,
    master: DataKey,
    tenant_keys: Mutex<HashMap<String, DataKey>>,
    wakers: Mutex<HashMap<String, Arc<InboxWaker>>>,
    tokens: Mutex<HashMap<[u8; 32], Principal>>,
    buckets: Mutex<HashMap<String, (f64, i64)>>,
    seen: Mutex<HashMap<String, i64>>,
    directory: Mutex<Directory>,
    /// Set when shutdown begins: long-polls and WebSockets return at once, so a graceful shutdown
    /// waits only for requests that are doing work.
    pub shutting_down: tokio::sync::watch::Sender<bool>,
    /// Per-task locks for lifecycle messages and timers.
    pub task_locks: crate::tasks::TaskLocks,
    /// The key system notices are signed with (decision 8).
    pub gateway_key: SigningKey,
    /// Its `key_` id, published in the well-known document.
    pub gateway_key_id: String,
    /// Open WebSockets per agent (`ws_per_agent`).
    pub sockets: crate::inbox::Sockets,
    /// The black-box test clock, when the gateway runs on it (`--unsafe-test-clock`).
    pub test_clock: Option<Arc<crate::testclock::TestClock>>,
    /// Parsed workspace policies, cleared with the directory.
    pub policies: crate::policy::PolicyCache,
    /// Where blob content rests: files under the data directory, or an S3 bucket (§9).
    pub blobstore: crate::blobstore::BlobStore,
    /// Whether other gateway processes share the store (PostgreSQL): then wake-ups and identity
    /// changes are signalled to them as well ([`Store::signal`]).
    pub peers: bool,
}

/// SHA-256 of a bearer token, the only form tokens are stored in.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new bearer token: a kind prefix and 32 random bytes, base64url.
pub fn new_token(prefix: &str) -> String {
    use base64::Engine as _;
    let raw: [u8; 32] = agentbus_runtime::random_bytes();
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}

/// How many owed notices a reaper pass reads at a time.
pub(crate) const OWED_PAGE: u32 = 1000;

impl<S: Store> App<S> {
    /// Assembles the gateway from its parts.
    pub fn new(
        store: S,
        clock: Arc<dyn Clock>,
        config: Config,
        master: DataKey,
        gateway_key: SigningKey,
        gateway_key_id: String,
    ) -> App<S> {
        let config_blobs = config.data_dir.join("blobs");
        App {
            store,
            clock,
            config,
            master,
            tenant_keys: Mutex::default(),
            wakers: Mutex::default(),
            tokens: Mutex::default(),
            buckets: Mutex::default(),
            seen: Mutex::default(),
            directory: Mutex::default(),
            task_locks: Default::default(),
            shutting_down: tokio::sync::watch::Sender::new(false),
            gateway_key,
            gateway_key_id,
            sockets: Default::default(),
            test_clock: None,
            policies: Default::default(),
            blobstore: crate::blobstore::BlobStore::Files(config_blobs),
            peers: false,
        }
    }

    /// Now, in Unix milliseconds.
    pub fn now(&self) -> i64 {
        self.clock.now().millis()
    }

    /// Mints an id as of the gateway clock.
    pub fn mint(&self, kind: IdKind) -> String {
        mint_at(kind, self.now()).to_string()
    }

    /// Wraps a fresh tenant data key under the master key.
    pub fn wrap_new_tenant_key(&self) -> Vec<u8> {
        self.master.seal(&DataKey::generate().to_bytes())
    }

    /// The tenant's data key.
    pub async fn tenant_key(&self, tenant_id: &str) -> ApiResult<DataKey> {
        if let Some(k) = self
            .tenant_keys
            .lock()
            .ok()
            .and_then(|m| m.get(tenant_id).cloned())
        {
            return Ok(k);
        }
        let t = self
            .store
            .tenant(tenant_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        let raw = self
            .master
            .open(&t.data_key)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                ApiError::new(
                    Code::StorageUnavailable,
                    "a tenant key does not open under the master key",
                )
            })?;
        let key = DataKey::from_bytes(raw);
        if let Ok(mut m) = self.tenant_keys.lock() {
            m.insert(tenant_id.to_owned(), key.clone());
        }
        Ok(key)
    }

    /// Resolves a bearer token (cached; tokens are never re-pointed).
    pub async fn authenticate(&self, token: &str) -> ApiResult<Principal> {
        self.authenticate_hash(token_hash(token)).await
    }

    /// Resolves a token by its SHA-256, as [`App::authenticate`] does: for a caller that keeps
    /// only the hash (a console session re-checks the token it was opened with this way).
    pub async fn authenticate_hash(&self, hash: [u8; 32]) -> ApiResult<Principal> {
        if let Some(p) = self.tokens.lock().ok().and_then(|m| m.get(&hash).cloned()) {
            if let Principal::Agent(a) = &p
                && a.deleted_at.is_some()
            {
                return Err(ApiError::new(
                    Code::MissingCredential,
                    "this agent was deleted",
                ));
            }
            return Ok(p);
        }
        let generation = self.identity_generation();
        let row = self
            .store
            .token(hash)
            .await?
            .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown bearer token"))?;
        let p = match row.subject {
            TokenSubject::User(id) => Principal::User(
                self.store
                    .user(&id)
                    .await?
                    .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown user"))?,
            ),
            TokenSubject::Agent(id) => {
                let a = self
                    .store
                    .agent(&id)
                    .await?
                    .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown agent"))?;
                if a.deleted_at.is_some() {
                    return Err(ApiError::new(
                        Code::MissingCredential,
                        "this agent was deleted",
                    ));
                }
                Principal::Agent(a)
            }
        };
        self.if_current(generation, || {
            if let Ok(mut m) = self.tokens.lock() {
                m.insert(hash, p.clone());
            }
        });
        Ok(p)
    }

    /// Forgets cached principals of an agent (after a delete or a card change), here and on
    /// the other replicas.
    pub fn forget_agent(&self, agent_id: &str) {
        if let Ok(mut m) = self.tokens.lock() {
            m.retain(|_, p| !matches!(p, Principal::Agent(a) if a.id == agent_id));
        }
        self.tell_peers(Signal::Identity);
    }

    /// Sends `s` to the other gateway processes on the store, if there are any, without waiting:
    /// a publish never waits for its wake-up (the replicas poll as a fallback); a failure, which
    /// for an identity change leaves their caches as they were, is logged.
    fn tell_peers(&self, s: Signal) {
        if !self.peers {
            return;
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.signal(s).await {
                tracing::warn!(error = %e, "a signal to the other replicas was not sent");
            }
        });
    }

    /// Applies a signal another replica sent: wakes the inboxes it names, or forgets every
    /// cached identity row; after a lost connection (signals may be missing) both, for all.
    pub fn on_signal(&self, s: Signal) {
        match s {
            Signal::Inbox(ids) => self.wake_here(ids),
            Signal::Identity => self.forget_identities(),
            Signal::Resync => {
                self.forget_identities();
                let m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
                for n in m.values() {
                    n.wake();
                }
            }
        }
    }

    /// The waker of an inbox.
    pub fn waker(&self, agent_id: &str) -> Arc<InboxWaker> {
        let mut m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(agent_id.to_owned()).or_default().clone()
    }

    /// Wakes every long-poll and WebSocket waiting on these inboxes, here and on the other
    /// replicas.
    pub fn wake(&self, agent_ids: impl IntoIterator<Item = impl AsRef<str>>) {
        if !self.peers {
            // One process: no copy of the ids on the publish path.
            return self.wake_here(agent_ids);
        }
        let ids: Vec<String> = agent_ids
            .into_iter()
            .map(|id| id.as_ref().to_owned())
            .collect();
        self.wake_here(&ids);
        self.tell_peers(Signal::Inbox(ids));
    }

    fn wake_here(&self, agent_ids: impl IntoIterator<Item = impl AsRef<str>>) {
        let m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        for id in agent_ids {
            if let Some(n) = m.get(id.as_ref()) {
                n.wake();
            }
        }
    }

    /// Takes one token from the agent's bucket (§13.6); the error says when to retry.
    pub fn rate_limit(&self, agent_id: &str) -> ApiResult<()> {
        let now = self.now();
        let mut m = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = m
            .entry(agent_id.to_owned())
            .or_insert((self.config.rate_burst, now));
        let refill = (now - *at).max(0) as f64 / 1000.0 * self.config.rate_per_agent;
        *tokens = (*tokens + refill).min(self.config.rate_burst);
        *at = now;
        if *tokens < 1.0 {
            let wait = ((1.0 - *tokens) / self.config.rate_per_agent)
                .ceil()
                .max(1.0) as u64;
            let mut e = ApiError::new(
                Code::RateLimited,
                format!(
                    "more than {} publishes per second",
                    self.config.rate_per_agent
                ),
            );
            e.retry_after = Some(wait);
            return Err(e);
        }
        *tokens -= 1.0;
        Ok(())
    }

    fn dir(&self) -> std::sync::MutexGuard<'_, Directory> {
        self.directory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every cached identity row, here and on the other replicas; called after any
    /// identity write.
    pub fn invalidate_directory(&self) {
        self.forget_identities();
        self.tell_peers(Signal::Identity);
    }

    fn forget_identities(&self) {
        {
            let mut d = self.dir();
            let generation = d.generation + 1;
            *d = Directory {
                generation,
                ..Directory::default()
            };
        }
        // After the generation moved: an answer still being read either sees it moved and
        // caches nothing, or cached before, and is cleared here.
        self.policies.clear();
        if let Ok(mut m) = self.tokens.lock() {
            m.clear();
        }
    }

    /// The identity generation now: an answer read after this may be cached with
    /// [`App::if_current`].
    pub(crate) fn identity_generation(&self) -> u64 {
        self.dir().generation
    }

    /// Runs `cache` (which stores an answer read since `generation`) only if no identity change
    /// was forgotten meanwhile, and under the directory's lock, so a change forgotten at the same
    /// moment clears what it stored. A row read before a revocation and cached after the
    /// revocation cleared the caches would otherwise be served with no end.
    pub(crate) fn if_current(&self, generation: u64, cache: impl FnOnce()) {
        let d = self.dir();
        if d.generation == generation {
            cache();
        }
        drop(d);
    }

    /// The cached answer `get` finds, or `read`'s, cached by `put` unless the identity caches
    /// were forgotten while it was read.
    async fn cached<T: Clone>(
        &self,
        get: impl Fn(&Directory) -> Option<T>,
        read: impl Future<Output = ApiResult<T>>,
        put: impl FnOnce(&mut Directory, T),
    ) -> ApiResult<T> {
        let generation = {
            let d = self.dir();
            if let Some(v) = get(&d) {
                return Ok(v);
            }
            d.generation
        };
        let v = read.await?;
        let mut d = self.dir();
        if d.generation == generation {
            put(&mut d, v.clone());
        }
        Ok(v)
    }

    /// A tenant, cached.
    pub async fn tenant_row(&self, id: &str) -> ApiResult<Option<TenantRow>> {
        self.cached(
            |d| d.tenants.get(id).cloned(),
            async { Ok(self.store.tenant(id).await?) },
            |d, t| {
                d.tenants.insert(id.to_owned(), t);
            },
        )
        .await
    }

    /// A workspace, cached.
    pub async fn workspace_row(&self, id: &str) -> ApiResult<Option<WorkspaceRow>> {
        self.cached(
            |d| d.workspaces.get(id).cloned(),
            async { Ok(self.store.workspace(id).await?) },
            |d, w| {
                d.workspaces.insert(id.to_owned(), w);
            },
        )
        .await
    }

    /// A workspace by tenant and slug, cached.
    pub async fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> ApiResult<Option<WorkspaceRow>> {
        let k = (tenant_id.to_owned(), slug.to_owned());
        self.cached(
            |d| d.ws_by_slug.get(&k).cloned(),
            async { Ok(self.store.workspace_by_slug(tenant_id, slug).await?) },
            |d, w| {
                d.ws_by_slug.insert(k.clone(), w);
            },
        )
        .await
    }

    /// An agent by id, cached.
    pub async fn agent_row(&self, id: &str) -> ApiResult<Option<AgentRow>> {
        self.cached(
            |d| d.agents.get(id).cloned(),
            async { Ok(self.store.agent(id).await?) },
            |d, a| {
                d.agents.insert(id.to_owned(), a);
            },
        )
        .await
    }

    /// An agent by name or alias in a workspace, cached.
    pub async fn agent_by_name(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> ApiResult<Option<AgentRow>> {
        let k = (workspace_id.to_owned(), name.to_owned());
        self.cached(
            |d| d.by_name.get(&k).cloned(),
            async { Ok(self.store.agent_by_name(workspace_id, name).await?) },
            |d, a| {
                d.by_name.insert(k.clone(), a);
            },
        )
        .await
    }

    /// An agent's keys, revoked ones included, cached.
    pub async fn agent_keys(&self, agent_id: &str) -> ApiResult<Vec<KeyRow>> {
        self.cached(
            |d| d.keys.get(agent_id).cloned(),
            async { Ok(self.store.keys(agent_id).await?) },
            |d, k| {
                d.keys.insert(agent_id.to_owned(), k);
            },
        )
        .await
    }

    /// The decoded public key of a registered key row (`None` when the stored bytes are not a
    /// usable Ed25519 key), cached with the directory.
    pub fn public_key(&self, key: &KeyRow) -> Option<PublicKey> {
        if let Some(k) = self.dir().decoded.get(&key.id) {
            return *k;
        }
        let decoded = <[u8; 32]>::try_from(key.public_key.as_slice())
            .ok()
            .and_then(|b| PublicKey::from_bytes(&b).ok());
        self.dir().decoded.insert(key.id.clone(), decoded);
        decoded
    }

    /// Records that an agent is reading its inbox now (presence, §10 `status`).
    pub fn mark_seen(&self, agent_id: &str) {
        let now = self.now();
        if let Ok(mut m) = self.seen.lock() {
            m.insert(agent_id.to_owned(), now);
        }
    }

    /// `online` when the agent read its inbox within the last visibility timeout, else `offline`,
    /// and when it last did.
    pub fn presence(&self, agent_id: &str) -> (&'static str, Option<i64>) {
        let last = self.seen.lock().ok().and_then(|m| m.get(agent_id).copied());
        let online =
            last.is_some_and(|t| self.now() - t <= self.config.visibility_timeout_s * 1000);
        (if online { "online" } else { "offline" }, last)
    }

    /// The canonical address of an agent.
    pub async fn address_of(&self, agent: &AgentRow) -> ApiResult<String> {
        let t = self
            .tenant_row(&agent.tenant_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        let w = self
            .workspace_row(&agent.workspace_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        Ok(AgentAddress {
            tenant: t.slug,
            workspace: w.slug,
            name: agent.name.clone(),
        }
        .to_string())
    }

    /// The delivered copy of a stored message for one inbox: the stored attributes, `data`
    /// opened, and the per-copy `to_id` and `sequence`.
    pub async fn delivered_copy(
        &self,
        m: &MessageRow,
        to_id: &str,
        sequence: u64,
    ) -> ApiResult<Value> {
        let raw = self
            .delivered_copy_raw(&m.tenant_id, &m.attrs, &m.data, to_id, sequence)
            .await?;
        Ok(serde_json::from_str(raw.get()).unwrap_or(Value::Null))
    }

    /// [`App::delivered_copy`] as JSON text, built by appending `data`, `to_id` and `sequence` to
    /// the stored attribute text: every delivery pays for this, and parsing the attributes and
    /// `data` only to print them again cost more than the rest of the delivery.
    /// `attrs` and `sealed` are the stored attribute text and sealed `data` of a message of
    /// `tenant_id`.
    pub async fn delivered_copy_raw(
        &self,
        tenant_id: &str,
        attrs: &str,
        sealed: &[u8],
        to_id: &str,
        sequence: u64,
    ) -> ApiResult<Box<serde_json::value::RawValue>> {
        let key = self.tenant_key(tenant_id).await?;
        let unusable = || {
            ApiError::new(
                Code::StorageUnavailable,
                "stored data does not open under its tenant key",
            )
        };
        let data = key.open(sealed).ok_or_else(unusable)?;
        let data = std::str::from_utf8(&data).map_err(|_| unusable())?;
        let text = delivered_text(attrs, data, to_id, sequence);
        serde_json::value::RawValue::from_string(text).map_err(|_| unusable())
    }

    /// Builds, signs and stores a notice from `agent://system/gateway/<service>` to an agent
    /// (decision 8: signed by the gateway key; conversation and trace copied from the original,
    /// correlation = the original id).
    pub async fn notify_agent(
        &self,
        to: &AgentRow,
        service: &str,
        kind: &str,
        data: Value,
        original: Option<&MessageRow>,
    ) -> ApiResult<()> {
        self.notify_owed(to, service, kind, data, original, None)
            .await
    }

    /// [`App::notify_agent`]; with `owed`, a notice the store holds as owed ([`Owed`]): stored
    /// with the clearing of its mark, and not at all (no error) when another replica stored it
    /// first.
    pub(crate) async fn notify_owed(
        &self,
        to: &AgentRow,
        service: &str,
        kind: &str,
        data: Value,
        original: Option<&MessageRow>,
        owed: Option<Owed>,
    ) -> ApiResult<()> {
        let now = self.now();
        let to_address = self.address_of(to).await?;
        let (conversation, trace) = match original {
            Some(m) => {
                let attrs: Map<String, Value> = serde_json::from_str(&m.attrs).unwrap_or_default();
                (
                    m.conversation_id.clone(),
                    attrs
                        .get("traceparent")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                )
            }
            None => (self.mint(IdKind::Conversation), None),
        };
        let trace = trace.unwrap_or_else(|| {
            let t: [u8; 16] = agentbus_runtime::random_bytes();
            let s: [u8; 8] = agentbus_runtime::random_bytes();
            format!("00-{}-{}-01", hex::encode(t), hex::encode(s))
        });
        let short = kind.trim_start_matches("agentbus.").trim_end_matches(".v1");
        let mut env = Map::new();
        env.insert("specversion".into(), json!("1.0"));
        env.insert("id".into(), json!(self.mint(IdKind::Message)));
        env.insert(
            "source".into(),
            json!(format!("agent://system/gateway/{service}")),
        );
        env.insert("type".into(), json!(kind));
        env.insert("time".into(), json!(Timestamp(now).to_string()));
        env.insert("datacontenttype".into(), json!("application/json"));
        env.insert("to".into(), json!(to_address));
        env.insert("conversation_id".into(), json!(conversation));
        if let Some(m) = original {
            env.insert("correlation_id".into(), json!(m.id));
        }
        env.insert("traceparent".into(), json!(trace));
        env.insert(
            "schema".into(),
            json!(format!(
                "{}{short}/v1.json",
                agentbus_protocol::schema::REGISTRY_BASE
            )),
        );
        env.insert("data".into(), data);
        let id = agentbus_protocol::ids::Id::parse_kind(&self.gateway_key_id, IdKind::Key)
            .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?;
        signing::sign_envelope(&mut env, &self.gateway_key, id)
            .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?;
        let signed_hash = Sha256::digest(signing::signing_bytes(&env).unwrap_or_default()).to_vec();
        let data = env.shift_remove("data").unwrap_or(Value::Null);
        let receipt = self.mint(IdKind::Receipt);
        env.insert("tenant".into(), json!(to.tenant_id));
        env.insert("workspace".into(), json!(to.workspace_id));
        env.insert("received_at".into(), json!(Timestamp(now).to_string()));
        env.insert("receipt".into(), json!(receipt));
        let key = self.tenant_key(&to.tenant_id).await?;
        let msg = NewMessage {
            tenant_id: to.tenant_id.clone(),
            id: env["id"].as_str().unwrap_or_default().to_owned(),
            source: env["source"].as_str().unwrap_or_default().to_owned(),
            source_agent_id: None,
            kind: kind.to_owned(),
            conversation_id: conversation,
            correlation_id: original.map(|m| m.id.clone()),
            to_text: to_address,
            to_id: to.id.clone(),
            attrs: Value::Object(env).to_string(),
            data: key.seal(data.to_string().as_bytes()),
            signed_hash,
            idempotency: None,
            receipt,
            received_at: now,
            expires_at: now + self.config.default_expiry_s * 1000,
            task_id: original.and_then(|m| m.task_id.clone()),
            task: None,
            recipients: vec![to.id.clone()],
            blob_refs: vec![],
            replay_since: now - self.config.replay_window_s * 1000,
            idempotency_since: now,
            // A notice to the sender is never refused for a full inbox: it reports a failure.
            max_depth: None,
            usage: None,
            notice_of: owed,
        };
        match self.store.publish(msg).await {
            Err(StoreError::Conflict(_)) => {}
            stored => {
                stored?;
                self.wake([&to.id]);
            }
        }
        Ok(())
    }

    /// One reaper pass: task timers (§6.1), then inbox dead letters and expiries, each with its
    /// notice (§5.9, §5.10).
    pub async fn reap(&self) -> ApiResult<ReapReport> {
        crate::tasks::fire_due(self).await?;
        crate::blobs::reap(self).await?;
        let now = self.now();
        let report = self
            .store
            .reap_inboxes(now, self.config.max_attempts)
            .await?;
        crate::metrics::count_reaped(report.dead.len(), report.expired.len());
        for (entries, dead) in [(&report.dead, true), (&report.expired, false)] {
            for e in entries {
                if let Some(a) = self.agent_row(&e.agent_id).await? {
                    crate::metrics::count_reaped_in(&a.workspace_id, dead);
                }
            }
        }
        // Last: settling never waits on a notice.
        crate::tasks::send_owed_notices(self).await?;
        self.send_owed_notices().await?;
        Ok(report)
    }

    /// The outcome of sending one owed notice, as a pass takes it: the store's failure stops the
    /// pass (every other notice would fail alike), any other failure is logged and leaves that
    /// notice owed for the next pass, so one notice that cannot be built (say, unreadable stored
    /// data) never holds back the others.
    pub(crate) fn owed_failed(&self, sent: ApiResult<()>) -> ApiResult<()> {
        match sent {
            Err(e) if matches!(e.code, Code::StorageUnavailable | Code::StoreBusy) => Err(e),
            Err(e) => {
                tracing::warn!(code = %e.code, error = %e.message, "an owed notice was not sent; the next pass tries again");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// Sends the notices owed about inbox entries (§5.9, §5.10; marked in the transaction that
    /// made each due: the reaper's, an agent's deletion, a suspension or a publish to a suspended
    /// agent), each stored with the clearing of its mark: notices a pass or a route could not send
    /// (the gateway stopped, the store failed after the marking commit) go with a later pass of
    /// any replica, and none goes twice.
    async fn send_owed_notices(&self) -> ApiResult<()> {
        // A page at a time past the last one: a notice left owed (it failed) is met once a
        // pass, never in front of the others.
        let mut after = (String::new(), 0);
        loop {
            let owed = self.store.pending_notices(after.clone(), OWED_PAGE).await?;
            let Some((last, _)) = owed.last() else {
                return Ok(());
            };
            after = (last.agent_id.clone(), last.sequence);
            for (e, kind) in &owed {
                let sent = self.owed_entry_notice(e, *kind).await;
                self.owed_failed(sent)?;
            }
        }
    }

    /// Sends the notice `kind` owed about entry `e` as it stands now, stored with the clearing of
    /// its mark (nothing is stored if the mark was cleared or replaced since, say a hold's by a
    /// dead letter's, which then stays owed): a dead letter's AB-4010 or an expiry's
    /// `system.expired` (the reaper's), AB-4003 (the recipient's deletion), AB-4013 not
    /// dead-lettered (held for a suspended recipient; forgone once the entry was acknowledged, or
    /// settled owing no notice of its own).
    pub(crate) async fn owed_entry_notice(
        &self,
        e: &InboxEntry,
        kind: NoticeKind,
    ) -> ApiResult<()> {
        let owed = Owed::Entry(e.agent_id.clone(), e.sequence, kind);
        match (kind, e.state) {
            (NoticeKind::Settled, EntryState::Dead) => {
                self.undeliverable(e, "AB-4010", true, owed).await
            }
            (NoticeKind::Settled, _) => self.expired_notice(e, owed).await,
            (NoticeKind::Deleted, _) => self.undeliverable(e, "AB-4003", true, owed).await,
            (NoticeKind::Held, EntryState::Ready | EntryState::Leased) => {
                let code = Code::RecipientSuspended.to_string();
                self.undeliverable(e, &code, false, owed).await
            }
            (NoticeKind::Held, _) => Ok(self.store.forgo_notice(owed).await?),
        }
    }

    /// Sends `system.expired` for an entry never delivered to its message's sender (§5.10;
    /// the store owes no other), `owed` as [`App::notify_owed`] takes it.
    async fn expired_notice(&self, e: &InboxEntry, owed: Owed) -> ApiResult<()> {
        let Some(sender) = self.sender_of(&e.message).await? else {
            return Ok(self.store.forgo_notice(owed).await?);
        };
        let data = json!({
            "original_message_id": e.message.id,
            "expired_at": Timestamp(e.message.expires_at).to_string(),
            "last_state": "persisted",
            "reason": "expires_at",
        });
        let kind = "agentbus.system.expired.v1";
        self.notify_owed(&sender, "router", kind, data, Some(&e.message), Some(owed))
            .await
    }

    /// Sends `system.undeliverable` for an entry to its message's sender, the notice `owed` for
    /// it (see [`App::notify_owed`]; a sender gone since is owed nothing).
    async fn undeliverable(
        &self,
        e: &InboxEntry,
        code: &str,
        dead_lettered: bool,
        owed: Owed,
    ) -> ApiResult<()> {
        let Some(sender) = self.sender_of(&e.message).await? else {
            return Ok(self.store.forgo_notice(owed).await?);
        };
        let mut data = json!({
            "original_message_id": e.message.id,
            "code": code,
            "attempts": e.attempts,
            "dead_lettered": dead_lettered,
        });
        if let Some(at) = e.last_attempt_at {
            data["last_attempt_at"] = json!(Timestamp(at).to_string());
        }
        let kind = "agentbus.system.undeliverable.v1";
        self.notify_owed(&sender, "router", kind, data, Some(&e.message), Some(owed))
            .await
    }

    async fn sender_of(&self, m: &MessageRow) -> ApiResult<Option<AgentRow>> {
        // Notices are never sent about notices.
        let Some(id) = &m.source_agent_id else {
            return Ok(None);
        };
        Ok(self
            .store
            .agent(id)
            .await?
            .filter(|a| a.deleted_at.is_none()))
    }
}

/// The delivered copy's text: the stored attribute object `attrs` with `data` (JSON text),
/// `to_id` and `sequence` appended. The stored attributes never hold those three names (the
/// publish path strips them); a text that might (a name appears anywhere in it) is parsed and
/// rebuilt instead, which gives the same document.
fn delivered_text(attrs: &str, data: &str, to_id: &str, sequence: u64) -> String {
    let to_id = Value::from(to_id).to_string();
    let head = attrs.trim_end().strip_suffix('}').filter(|_| {
        !["\"data\"", "\"to_id\"", "\"sequence\""]
            .iter()
            .any(|k| attrs.contains(k))
    });
    match head {
        Some(head) => {
            let mut s = String::with_capacity(attrs.len() + data.len() + to_id.len() + 48);
            s.push_str(head);
            if head.trim_end() != "{" {
                s.push(',');
            }
            s.push_str("\"data\":");
            s.push_str(data);
            s.push_str(",\"to_id\":");
            s.push_str(&to_id);
            s.push_str(",\"sequence\":");
            s.push_str(&sequence.to_string());
            s.push('}');
            s
        }
        None => {
            let mut map: Map<String, Value> = serde_json::from_str(attrs).unwrap_or_default();
            map.insert(
                "data".into(),
                serde_json::from_str(data).unwrap_or(Value::Null),
            );
            map.insert(
                "to_id".into(),
                serde_json::from_str(&to_id).unwrap_or_default(),
            );
            map.insert("sequence".into(), json!(sequence));
            Value::Object(map).to_string()
        }
    }
}

#[cfg(test)]
mod delivered_text_tests {
    use super::*;

    /// The splice gives the same document, key order included, as parsing the stored attributes
    /// and inserting the three names; attribute texts that mention them take the parse path.
    #[test]
    fn splicing_matches_rebuilding() {
        let cases = [
            r#"{}"#,
            r#"{"specversion":"1.0","id":"msg_1","source":"agent://a/b/c","subject":"x"}"#,
            r#"{"subject":"mentions \"data\": inside a value"}"#,
            r#"{"to_id":"agt_stale","sequence":9,"a":1}"#,
        ];
        for attrs in cases {
            for data in [
                r#"{"text":"hi \u2028 \"q\""}"#,
                "null",
                r#"{"n":1.5,"l":[1,2]}"#,
            ] {
                // `data` is stored as serde_json prints it.
                let data = &serde_json::from_str::<Value>(data).unwrap().to_string();
                let mut want: Map<String, Value> = serde_json::from_str(attrs).unwrap();
                want.insert("data".into(), serde_json::from_str(data).unwrap());
                want.insert("to_id".into(), json!("agt_01\"x"));
                want.insert("sequence".into(), json!(42));
                let got = delivered_text(attrs, data, "agt_01\"x", 42);
                assert_eq!(got, Value::Object(want).to_string(), "{attrs} + {data}");
            }
        }
    }
}

#[cfg(test)]
mod identity_cache_tests {
    use agentbus_store::Store as _;

    /// A row read before an identity change and answered after the change forgot the caches is
    /// served to its caller but not cached: cached, it would outlive the change with no end (a
    /// revoked key still accepted). Read after it, a row is cached as before.
    #[tokio::test]
    async fn a_row_read_across_a_forgotten_change_is_not_cached() {
        let (_tmp, gw) = crate::test_gateway().await;
        let app = &gw.app;
        let tenant = app.store.tenants().await.unwrap().remove(0);
        let stale = app
            .cached(
                |d| d.tenants.get(&tenant.id).cloned(),
                async {
                    let row = app.store.tenant(&tenant.id).await?;
                    // The change lands, and is forgotten, while this read is on its way.
                    app.forget_identities();
                    Ok(row)
                },
                |d, t| {
                    d.tenants.insert(tenant.id.clone(), t);
                },
            )
            .await
            .unwrap();
        assert_eq!(stale.as_ref().map(|t| &t.id), Some(&tenant.id));
        assert!(!app.dir().tenants.contains_key(&tenant.id), "cached");
        // The same for the token cache and the policy cache, which stand beside the directory.
        let generation = app.identity_generation();
        app.forget_identities();
        let mut ran = false;
        app.if_current(generation, || ran = true);
        assert!(!ran, "cached across a forgotten change");
        app.tenant_row(&tenant.id).await.unwrap();
        assert!(app.dir().tenants.contains_key(&tenant.id), "not cached");
    }
}
