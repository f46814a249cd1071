//! The state layer: the [`App`] every other module works on — its store handle, clock, settings,
//! keys, and the maps the layers above keep their caches and counters in. It imports no module
//! above it (the `layers` test checks), so the caches' types live here and their behaviour in
//! the layer that owns them (`auth`, `directory`, `wake`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard};

use agentbus_protocol::ids::IdKind;
use agentbus_protocol::signing::{PublicKey, SigningKey};
use agentbus_runtime::{Clock, mint_at};
use agentbus_store::{AgentRow, AnyStore, KeyRow, Signal, Store, TenantRow, UserRow, WorkspaceRow};

use crate::blobstore::BlobStore;
use crate::config::Config;
use crate::crypto::DataKey;
use crate::policy::Policy;
use crate::testclock::TestClock;

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
    pub(crate) fn tenant_id(&self) -> &str {
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
pub(crate) struct Directory {
    pub(crate) tenants: HashMap<String, Option<TenantRow>>,
    pub(crate) workspaces: HashMap<String, Option<WorkspaceRow>>,
    pub(crate) ws_by_slug: HashMap<(String, String), Option<WorkspaceRow>>,
    pub(crate) agents: HashMap<String, Option<AgentRow>>,
    pub(crate) by_name: HashMap<(String, String), Option<AgentRow>>,
    pub(crate) keys: HashMap<String, Vec<KeyRow>>,
    /// Registered public keys by key id, decoded once (decoding is a point decompression, a
    /// noticeable part of each publish's verification).
    pub(crate) decoded: HashMap<String, Option<PublicKey>>,
    /// How many times the identity caches were forgotten: a row read before a change may be
    /// cached only if they were not forgotten while it was read ([`App::cached`]).
    pub(crate) generation: u64,
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
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// The wake-ups so far. A publish counts after it commits, so a lease that began after
    /// reading this sees every publish counted up to it.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::SeqCst)
    }

    pub(crate) fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// Per-task locks, so two lifecycle messages of one task never race.
#[derive(Default)]
pub(crate) struct TaskLocks(Mutex<HashMap<String, Arc<AsyncMutex<()>>>>);

impl TaskLocks {
    /// Locks a task.
    pub(crate) async fn lock(&self, id: &str) -> OwnedMutexGuard<()> {
        let m = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(id.to_owned()).or_default().clone()
        };
        m.lock_owned().await
    }
}

/// Open WebSockets per agent (`ws_per_agent`, AB-5002 above it).
#[derive(Debug, Default)]
pub struct Sockets(Arc<Mutex<HashMap<String, usize>>>);

impl Sockets {
    /// Takes one of `agent_id`'s `max` places, if one is free.
    pub(crate) fn open(&self, agent_id: &str, max: usize) -> Option<SocketSlot> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(agent_id.to_owned()).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(SocketSlot {
            map: self.0.clone(),
            agent: agent_id.to_owned(),
        })
    }
}

/// One open WebSocket's place among its agent's; given back when the socket ends.
#[derive(Debug)]
pub struct SocketSlot {
    map: Arc<Mutex<HashMap<String, usize>>>,
    agent: String,
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.agent);
            }
        }
    }
}

/// Parsed workspace policies by workspace id, so a publish does not parse its recipient's policy
/// again. Cleared with the directory on every identity write.
#[derive(Default)]
pub(crate) struct PolicyCache(pub(crate) Mutex<HashMap<String, Arc<Policy>>>);

impl PolicyCache {
    /// Forgets every parsed policy.
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// The gateway.
pub struct App {
    /// Storage: private to the gateway, so a front end reads and changes only through
    /// [`crate::ops`] (the `layers` test and the compiler keep it so).
    pub(crate) store: AnyStore,
    /// Time, injectable.
    pub(crate) clock: Arc<dyn Clock>,
    /// Settings.
    pub config: Config,
    pub(crate) master: DataKey,
    pub(crate) tenant_keys: Mutex<HashMap<String, DataKey>>,
    pub(crate) wakers: Mutex<HashMap<String, Arc<InboxWaker>>>,
    pub(crate) tokens: Mutex<HashMap<[u8; 32], Principal>>,
    pub(crate) buckets: Mutex<HashMap<String, (f64, i64)>>,
    pub(crate) seen: Mutex<HashMap<String, i64>>,
    /// When each agent was last heard from at all: any request under its own credential (a
    /// card's `last_heartbeat_at`; presence keeps to inbox reads).
    pub(crate) heard: Mutex<HashMap<String, i64>>,
    pub(crate) directory: Mutex<Directory>,
    /// Set when shutdown begins: long-polls and WebSockets return at once, so a graceful shutdown
    /// waits only for requests that are doing work.
    pub shutting_down: tokio::sync::watch::Sender<bool>,
    /// Per-task locks for lifecycle messages and timers.
    pub(crate) task_locks: TaskLocks,
    /// The key system notices are signed with (decision 8).
    pub(crate) gateway_key: SigningKey,
    /// Its `key_` id, published in the well-known document.
    pub gateway_key_id: String,
    /// Open WebSockets per agent (`ws_per_agent`).
    pub(crate) sockets: Sockets,
    /// The black-box test clock, when the gateway runs on it (`--unsafe-test-clock`).
    pub(crate) test_clock: Option<Arc<TestClock>>,
    /// Parsed workspace policies, cleared with the directory.
    pub(crate) policies: PolicyCache,
    /// Where blob content rests: files under the data directory, or an S3 bucket (§9).
    pub(crate) blobstore: BlobStore,
    /// Whether other gateway processes share the store (PostgreSQL): then wake-ups and identity
    /// changes are signalled to them as well ([`Store::signal`]).
    pub(crate) peers: bool,
    /// Traces and metrics over OTLP when `otel_endpoint` is set; off (and free) otherwise.
    pub(crate) telemetry: Arc<agentbus_telemetry::Telemetry>,
    /// Its tracer, which the publish, delivery and timer spans start from.
    pub(crate) tracer: agentbus_telemetry::Tracer,
    /// While tracing is on, what an ack's span needs of each leased copy (its `traceparent` and
    /// attributes), by lease token; bounded by [`TRACED_LEASES`].
    pub(crate) traced_leases: Mutex<HashMap<String, TracedLease>>,
}

/// What a lease remembers for the span of its ack.
pub(crate) struct TracedLease {
    /// The message's `traceparent`.
    pub traceparent: String,
    /// The delivery's attributes (message id, destination, conversation).
    pub attrs: Vec<agentbus_telemetry::KeyValue>,
}

/// The most leases remembered for ack spans; past it the oldest are forgotten wholesale (their
/// acks then make no span), so a receiver that never acks cannot grow the map.
pub(crate) const TRACED_LEASES: usize = 100_000;

impl App {
    /// Assembles the gateway from its parts.
    pub fn new(
        store: AnyStore,
        clock: Arc<dyn Clock>,
        config: Config,
        master: DataKey,
        gateway_key: SigningKey,
        gateway_key_id: String,
    ) -> App {
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
            heard: Mutex::default(),
            directory: Mutex::default(),
            task_locks: Default::default(),
            shutting_down: tokio::sync::watch::Sender::new(false),
            gateway_key,
            gateway_key_id,
            sockets: Default::default(),
            test_clock: None,
            policies: Default::default(),
            blobstore: BlobStore::Files(config_blobs),
            peers: false,
            telemetry: Arc::new(agentbus_telemetry::Telemetry::off()),
            tracer: agentbus_telemetry::Tracer::off(),
            traced_leases: Mutex::default(),
        }
    }

    /// The store, for tests that compare it before and after a refused request: compiled only
    /// for tests (`test-support`), never for a front end.
    #[cfg(any(test, feature = "test-support"))]
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// Where blob content rests, for tests that look at pre-signed uploads (`test-support`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn blobstore(&self) -> &BlobStore {
        &self.blobstore
    }

    /// Now, in Unix milliseconds.
    pub fn now(&self) -> i64 {
        self.clock.now().millis()
    }

    /// Records that an agent was heard from now: a request under its own credential. On every
    /// request, so an agent already known costs no allocation.
    pub(crate) fn mark_heard(&self, agent_id: &str) {
        let now = self.now();
        if let Ok(mut m) = self.heard.lock() {
            match m.get_mut(agent_id) {
                Some(at) => *at = now,
                None => {
                    m.insert(agent_id.to_owned(), now);
                }
            }
        }
    }

    /// Mints an id as of the gateway clock.
    pub fn mint(&self, kind: IdKind) -> String {
        mint_at(kind, self.now()).to_string()
    }

    /// Wraps a fresh tenant data key under the master key.
    pub(crate) fn wrap_new_tenant_key(&self) -> Vec<u8> {
        self.master.seal(&DataKey::generate().to_bytes())
    }

    /// Sends `s` to the other gateway processes on the store, if there are any, without waiting:
    /// a publish never waits for its wake-up (the replicas poll as a fallback); a failure, which
    /// for an identity change leaves their caches as they were, is logged.
    pub(crate) fn tell_peers(&self, s: Signal) {
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

    pub(crate) fn dir(&self) -> std::sync::MutexGuard<'_, Directory> {
        self.directory.lock().unwrap_or_else(|p| p.into_inner())
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
}
