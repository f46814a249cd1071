//! A strict in-memory [`Store`](crate::Store) for tests (the `memory` feature, off by default, so a
//! production build never carries it).
//!
//! [`MemoryStore`] keeps every row in one map behind one lock, and each operation takes that lock
//! once, so it is atomic exactly as the trait's documentation asks (a publish stores the message,
//! its inbox copies with their gap-free sequences and its idempotency record at once; a lease or
//! an ack changes one inbox at once). Its semantics are the two database backends': it passes the
//! same conformance suite (`tests/it`). Nothing persists and nothing is shared between processes,
//! so [`Store::signal`](crate::Store::signal) and [`Store::claim_reaper`](crate::Store::claim_reaper)
//! are no-ops as on SQLite, and blob content lives in the store.
//!
//! It exists to catch what a caller assumes and the trait does not promise. Its rules:
//!
//! - **Order.** A list whose order the trait documents comes back in that order; rows that tie
//!   under it, and every list whose order the trait leaves open (`tenants`, `due_blobs`, the
//!   entries a reaper pass reports, …), come back in an order that varies from call to call. The
//!   variation is drawn from a seed ([`MemoryStore::with_seed`]; [`MemoryStore::new`] uses a fixed
//!   one), so a run is deterministic and a failure can be replayed.
//! - **Opaque values.** What the trait calls internal is not what a database would give: storage
//!   sequences start at an arbitrary value and grow by uneven steps (they are ordered, never
//!   counted), topic ids and lease tokens have a shape of their own. Inbox sequences, which the
//!   trait promises gap-free from 1, are exactly that.
//! - **Copies.** Every row returned is a copy: changing it never changes the store.
//! - **Limits are exact.** A `limit` of 0 answers nothing (a database backend may answer one).
//! - **Preconditions.** An operation whose documented precondition fails answers the documented
//!   error and stores nothing: a taken id, slug, name, alias, hash or key is
//!   [`StoreError::Conflict`]; a change to a row that does not exist (or is no longer live) is
//!   [`StoreError::NotFound`]; a workspace of an unknown tenant is [`StoreError::Backend`].
//! - **Failures.** A test makes the next call of an operation fail ([`MemoryStore::fail_next`]),
//!   with [`StoreError::Busy`] or [`StoreError::Backend`] as a database would, and that call
//!   stores nothing.
//! - **Interleaving.** Every operation yields to the runtime before it runs, so concurrent callers
//!   interleave at every call rather than in the order they were spawned.

mod ops;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::*;
use crate::{StoreError, StoreResult};

/// The seed [`MemoryStore::new`] uses.
const DEFAULT_SEED: u64 = 0x5EED_0A6E_27B0_5000;

/// The strict in-memory store; cheap to clone (clones share the rows). See the module
/// documentation for what it checks.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("seed", &self.inner.seed)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// The seed the order variations are drawn from.
    seed: u64,
    /// The generator's state (splitmix64), advanced by every draw.
    draws: AtomicU64,
    /// Every row.
    state: Mutex<State>,
    /// Failures to answer, each for the next call of one operation (or of any, `"*"`).
    faults: Mutex<VecDeque<(String, StoreError)>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store whose order variations come from a fixed seed.
    pub fn new() -> MemoryStore {
        MemoryStore::with_seed(DEFAULT_SEED)
    }

    /// An empty store whose order variations come from `seed`: two stores given the same seed
    /// and the same calls answer alike.
    pub fn with_seed(seed: u64) -> MemoryStore {
        let mut state = State::default();
        // An arbitrary start, so nobody counts storage sequences from 1.
        let mut first = seed;
        state.next_seq = 1_000 + (splitmix(&mut first) % 9_000) as i64;
        MemoryStore {
            inner: Arc::new(Inner {
                seed,
                draws: AtomicU64::new(seed),
                state: Mutex::new(state),
                faults: Mutex::default(),
            }),
        }
    }

    /// The seed this store's order variations come from (to replay a failing run).
    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// Makes the next call of the [`Store`](crate::Store) method named `op` (`"publish"`,
    /// `"ack"`, …; `"*"` for whichever comes first) answer `error` without storing anything, as a
    /// database that failed or stayed busy would. Failures queue: each is answered once, in the
    /// order given. Meant for [`StoreError::Busy`] and [`StoreError::Backend`].
    pub fn fail_next(&self, op: &str, error: StoreError) {
        if let Ok(mut faults) = self.inner.faults.lock() {
            faults.push_back((op.to_owned(), error));
        }
    }

    /// Every stored row, one line each, sorted: what tests compare to prove that a refused
    /// request changed nothing stored (as [`crate::SqliteStore::dump`]).
    pub async fn dump(&self) -> StoreResult<Vec<String>> {
        let s = self.state()?;
        let mut lines = s.dump();
        lines.sort();
        Ok(lines)
    }

    /// The rows, locked for one operation.
    fn state(&self) -> StoreResult<MutexGuard<'_, State>> {
        self.inner
            .state
            .lock()
            .map_err(|_| StoreError::Backend("the memory store's lock is poisoned".into()))
    }

    /// Starts operation `op`: lets other tasks run first, then answers the failure a test queued
    /// for it, if any.
    async fn enter(&self, op: &str) -> StoreResult<()> {
        tokio::task::yield_now().await;
        let mut faults = self
            .inner
            .faults
            .lock()
            .map_err(|_| StoreError::Backend("the memory store's lock is poisoned".into()))?;
        if let Some(i) = faults.iter().position(|(o, _)| o == op || o == "*")
            && let Some((_, e)) = faults.remove(i)
        {
            return Err(e);
        }
        Ok(())
    }

    /// The next draw of the store's generator.
    fn draw(&self) -> u64 {
        let mut x = self
            .inner
            .draws
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        splitmix(&mut x)
    }

    /// `rows` in a varied order: for lists whose order the trait leaves open.
    fn unordered<T>(&self, mut rows: Vec<T>) -> Vec<T> {
        for i in (1..rows.len()).rev() {
            let j = (self.draw() % (i as u64 + 1)) as usize;
            rows.swap(i, j);
        }
        rows
    }

    /// `rows` in the order `cmp` documents, ties in a varied order.
    fn ordered<T>(&self, rows: Vec<T>, cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) -> Vec<T> {
        let mut rows = self.unordered(rows);
        rows.sort_by(cmp);
        rows
    }
}

/// splitmix64: advances `x` and answers a well-mixed value of it.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One inbox copy of a message.
#[derive(Debug, Clone)]
struct Entry {
    message_seq: i64,
    state: EntryState,
    attempts: u32,
    visible_at: i64,
    lease: Option<String>,
    expires_at: i64,
    last_attempt_at: Option<i64>,
    acked_at: Option<i64>,
    /// The notice a settled entry's sender is owed (never [`NoticeKind::Held`]).
    notice: Option<NoticeKind>,
    /// Whether the sender is owed a hold's notice.
    hold: bool,
}

/// A stored message and what the row type does not carry.
#[derive(Debug, Clone)]
struct Message {
    row: MessageRow,
    correlation_id: Option<String>,
    /// Its search index words.
    search_tags: HashSet<String>,
}

/// A shown or pushed receipt as stored.
#[derive(Debug, Clone)]
struct Receipt {
    at: i64,
    harness: String,
    event: String,
}

/// Every row of the store.
#[derive(Debug, Default)]
struct State {
    tenants: BTreeMap<String, TenantRow>,
    workspaces: BTreeMap<String, WorkspaceRow>,
    /// Users in creation order (the first ever created is found by it).
    users: Vec<UserRow>,
    tokens: HashMap<[u8; 32], TokenRow>,
    agents: BTreeMap<String, AgentRow>,
    /// (workspace, alias) → agent.
    aliases: BTreeMap<(String, String), String>,
    keys: BTreeMap<String, KeyRow>,
    /// (workspace, name) → topic.
    topics: BTreeMap<(String, String), TopicRow>,
    /// Topic id → subscribers.
    subscriptions: BTreeMap<String, BTreeSet<String>>,
    topics_made: u64,
    messages: BTreeMap<i64, Message>,
    /// Every message's `rcp_` receipt, each unique.
    receipt_ids: HashSet<String>,
    next_seq: i64,
    /// (tenant, source, id) → (message, received at).
    recent_ids: HashMap<(String, String, String), (i64, i64)>,
    idempotency: HashMap<IdempotencyKey, (i64, i64)>,
    /// (agent, sequence) → entry.
    inbox: BTreeMap<(String, u64), Entry>,
    /// Message → its copies (agent, sequence).
    copies: HashMap<i64, Vec<(String, u64)>>,
    /// Agent → (last sequence, unacknowledged entries).
    counters: HashMap<String, (u64, u64)>,
    leases_made: u64,
    /// Task → (row, owed notices' bits).
    tasks: BTreeMap<String, (TaskRow, u8)>,
    task_events: HashMap<String, Vec<TaskEventRow>>,
    /// Blob → (row, purged).
    blobs: BTreeMap<String, (BlobRow, bool)>,
    blob_refs: BTreeSet<(String, i64)>,
    blob_contents: HashMap<String, Vec<u8>>,
    /// Message → its usage report.
    usage: BTreeMap<i64, UsageRow>,
    sessions: HashMap<[u8; 32], ConsoleSessionRow>,
    receipts: HashMap<(String, u64), Receipt>,
    pushes: HashMap<(String, u64), Receipt>,
}

impl State {
    /// Every row as a line (unsorted).
    fn dump(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |table: &str, row: String| out.push(format!("{table}: {row}"));
        self.tenants
            .values()
            .for_each(|r| add("tenants", format!("{r:?}")));
        self.workspaces
            .values()
            .for_each(|r| add("workspaces", format!("{r:?}")));
        self.users
            .iter()
            .for_each(|r| add("users", format!("{r:?}")));
        self.tokens
            .values()
            .for_each(|r| add("tokens", format!("{r:?}")));
        self.agents
            .values()
            .for_each(|r| add("agents", format!("{r:?}")));
        self.aliases
            .iter()
            .for_each(|r| add("aliases", format!("{r:?}")));
        self.keys
            .values()
            .for_each(|r| add("keys", format!("{r:?}")));
        self.topics
            .values()
            .for_each(|r| add("topics", format!("{r:?}")));
        self.subscriptions
            .iter()
            .for_each(|r| add("subscriptions", format!("{r:?}")));
        self.messages
            .values()
            .for_each(|r| add("messages", format!("{r:?}")));
        self.recent_ids
            .iter()
            .for_each(|r| add("recent_ids", format!("{r:?}")));
        self.idempotency
            .iter()
            .for_each(|r| add("idempotency", format!("{r:?}")));
        self.inbox
            .iter()
            .for_each(|r| add("inbox", format!("{r:?}")));
        self.counters
            .iter()
            .for_each(|r| add("inbox_counters", format!("{r:?}")));
        self.tasks
            .values()
            .for_each(|r| add("tasks", format!("{r:?}")));
        self.task_events
            .iter()
            .for_each(|r| add("task_events", format!("{r:?}")));
        self.blobs
            .values()
            .for_each(|r| add("blobs", format!("{r:?}")));
        self.blob_refs
            .iter()
            .for_each(|r| add("blob_refs", format!("{r:?}")));
        self.blob_contents
            .iter()
            .for_each(|r| add("blob_contents", format!("{r:?}")));
        self.usage
            .iter()
            .for_each(|r| add("usage", format!("{r:?}")));
        self.sessions
            .values()
            .for_each(|r| add("console_sessions", format!("{r:?}")));
        self.receipts
            .iter()
            .for_each(|r| add("receipts", format!("{r:?}")));
        self.pushes
            .iter()
            .for_each(|r| add("pushes", format!("{r:?}")));
        out
    }
}

#[cfg(test)]
mod tests;
