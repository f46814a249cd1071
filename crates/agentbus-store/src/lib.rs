//! The gateway's storage: one interface of plain data, its embedded SQLite backend, and its
//! PostgreSQL backend for several replicas on one database; with the `memory` feature, a strict
//! in-memory backend for tests (the `memory` module).
//!
//! The gateway talks to storage only through [`Store`]; nothing above this crate knows SQL or
//! SQLite. Each operation is one atomic unit the backend must provide: a publish stores the message,
//! allocates each recipient inbox's next `sequence` from a per-inbox counter and records
//! idempotency in one transaction; a lease or an ack changes one inbox atomically. A PostgreSQL
//! backend implements the same operations with row locks on the counter, so sequences stay gap-free
//! there too even though database sequences commit out of order.

mod any;
#[cfg(feature = "memory")]
pub mod memory;
pub mod model;
pub mod postgres;
pub mod sqlite;

use std::future::Future;

pub use any::AnyStore;
#[cfg(feature = "memory")]
pub use memory::MemoryStore;
pub use model::*;
pub use postgres::{PgOptions, PgStore};
pub use sqlite::SqliteStore;

/// Why a storage operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was broken (a name, an alias, a slug).
    #[error("{0} already exists")]
    Conflict(String),
    /// The row to change does not exist.
    #[error("not found")]
    NotFound,
    /// A limit the store enforces atomically (such as three active keys) would be exceeded.
    #[error("limit reached: {0}")]
    Limit(String),
    /// The database failed; nothing of this operation was stored.
    #[error("storage failure: {0}")]
    Backend(String),
    /// Every connection to the database was busy for longer than the store waits for one; nothing
    /// of this operation was stored, and a retry after a moment may succeed.
    #[error("storage busy: {0}")]
    Busy(String),
}

impl agentbus_protocol::errors::Catalogued for StoreError {
    /// The code the gateway answers with (`agentbus_gateway::error`).
    fn code(&self) -> agentbus_protocol::Code {
        use agentbus_protocol::Code;
        match self {
            StoreError::Conflict(_) => Code::NameTaken,
            StoreError::NotFound => Code::NotFound,
            StoreError::Limit(_) => Code::KeyLimit,
            StoreError::Backend(_) => Code::StorageUnavailable,
            StoreError::Busy(_) => Code::StoreBusy,
        }
    }
}

#[cfg(test)]
mod catalogued_tests {
    use super::StoreError;
    use agentbus_protocol::Code;
    use agentbus_protocol::errors::{Catalogued, Kind};

    /// Each variant's code, listed by an exhaustive match so a new variant must be given one; a
    /// database failure is the gateway's own state (unavailable), the others refusals.
    #[test]
    fn every_store_error_has_its_code() {
        let all = [
            StoreError::Conflict("x".into()),
            StoreError::NotFound,
            StoreError::Limit("x".into()),
            StoreError::Backend("x".into()),
            StoreError::Busy("x".into()),
        ];
        for e in all {
            let (code, kind) = match &e {
                StoreError::Conflict(_) => (Code::NameTaken, Kind::Refused),
                StoreError::NotFound => (Code::NotFound, Kind::Refused),
                StoreError::Limit(_) => (Code::KeyLimit, Kind::Refused),
                StoreError::Backend(_) => (Code::StorageUnavailable, Kind::Unavailable),
                StoreError::Busy(_) => (Code::StoreBusy, Kind::Unavailable),
            };
            assert_eq!(e.code(), code, "{e}");
            assert_eq!(code.entry().kind, kind, "{e}");
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Backend(e.to_string())
    }
}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Everything the gateway stores. Implementations must be safe to call concurrently, and cheap
/// to clone (a handle on shared connections).
pub trait Store: Clone + Send + Sync + 'static {
    // Identity.

    /// Creates a tenant with its wrapped data key.
    fn create_tenant(&self, t: TenantRow) -> impl Future<Output = StoreResult<()>> + Send;
    /// The tenant with this id.
    fn tenant(&self, id: &str) -> impl Future<Output = StoreResult<Option<TenantRow>>> + Send;
    /// The tenant with this slug.
    fn tenant_by_slug(
        &self,
        slug: &str,
    ) -> impl Future<Output = StoreResult<Option<TenantRow>>> + Send;
    /// Every tenant (a gateway holds few), in no promised order.
    fn tenants(&self) -> impl Future<Output = StoreResult<Vec<TenantRow>>> + Send;
    /// Creates a workspace; its slug is unique within the tenant.
    fn create_workspace(&self, w: WorkspaceRow) -> impl Future<Output = StoreResult<()>> + Send;
    /// The workspace with this id.
    fn workspace(&self, id: &str)
    -> impl Future<Output = StoreResult<Option<WorkspaceRow>>> + Send;
    /// The workspace with this slug in a tenant.
    fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> impl Future<Output = StoreResult<Option<WorkspaceRow>>> + Send;
    /// Replaces a workspace's policy document.
    fn set_workspace_policy(
        &self,
        id: &str,
        policy: String,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Creates a user.
    fn create_user(&self, u: UserRow) -> impl Future<Output = StoreResult<()>> + Send;
    /// The user with this id.
    fn user(&self, id: &str) -> impl Future<Output = StoreResult<Option<UserRow>>> + Send;
    /// Stores a token's hash.
    fn create_token(&self, t: TokenRow) -> impl Future<Output = StoreResult<()>> + Send;
    /// The live token with this hash.
    fn token(&self, hash: [u8; 32]) -> impl Future<Output = StoreResult<Option<TokenRow>>> + Send;
    /// Suspends (`Some(at)`) or resumes (`None`) a tenant.
    fn set_tenant_suspended(
        &self,
        id: &str,
        at: Option<i64>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Every workspace of a tenant, by slug.
    fn workspaces(
        &self,
        tenant_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<WorkspaceRow>>> + Send;
    /// Every user holding `role`, oldest first (the gateway operator is found this way).
    fn users_with_role(&self, role: Role)
    -> impl Future<Output = StoreResult<Vec<UserRow>>> + Send;
    /// Every user of `tenant_id`, or of the whole gateway (the operator included) when `None`,
    /// oldest first.
    fn users(
        &self,
        tenant_id: Option<&str>,
    ) -> impl Future<Output = StoreResult<Vec<UserRow>>> + Send;
    /// Deletes a user with its tokens and console sessions, in one transaction; answers whether
    /// there was such a user.
    fn delete_user(&self, id: &str) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Every user token (revoked ones included) of the users of `tenant_id`, or of every user when
    /// `None`, oldest first.
    fn user_tokens(
        &self,
        tenant_id: Option<&str>,
    ) -> impl Future<Output = StoreResult<Vec<TokenRow>>> + Send;
    /// Marks the token with this hash revoked at `at` unless it is already; answers whether a
    /// live token was revoked. [`Store::token`] no longer finds it.
    fn revoke_token(
        &self,
        hash: [u8; 32],
        at: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Creates a tenant with its first workspace, its first user and that user's token, all or
    /// nothing; a taken slug is [`StoreError::Conflict`].
    fn provision_tenant(
        &self,
        t: TenantRow,
        w: WorkspaceRow,
        u: UserRow,
        token: TokenRow,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    // Agents, aliases, keys.

    /// Creates an agent and its aliases; names and aliases are unique among live agents of the
    /// workspace.
    fn create_agent(
        &self,
        a: AgentRow,
        aliases: Vec<String>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The agent with this id, deleted or not.
    fn agent(&self, id: &str) -> impl Future<Output = StoreResult<Option<AgentRow>>> + Send;
    /// Resolves a name or alias in a workspace: the live agent, else the most recently deleted one.
    fn agent_by_name(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> impl Future<Output = StoreResult<Option<AgentRow>>> + Send;
    /// Every live agent of a tenant, by workspace, then name.
    fn agents(&self, tenant_id: &str) -> impl Future<Output = StoreResult<Vec<AgentRow>>> + Send;
    /// The agent's aliases, sorted.
    fn aliases(&self, agent_id: &str) -> impl Future<Output = StoreResult<Vec<String>>> + Send;
    /// Replaces the card and, when given, the aliases.
    fn update_agent(
        &self,
        a: AgentRow,
        aliases: Option<Vec<String>>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Marks an agent deleted and dead-letters its pending inbox; returns those entries as they
    /// were, in inbox order. Those whose sender is a live agent are marked in the same
    /// transaction as owing it AB-4003 ([`NoticeKind::Deleted`], see [`Store::pending_notices`]).
    fn delete_agent(
        &self,
        id: &str,
        at: i64,
    ) -> impl Future<Output = StoreResult<Vec<InboxEntry>>> + Send;
    /// Adds a key unless the agent already has `max_active` active keys at `now`.
    fn add_key(
        &self,
        k: KeyRow,
        max_active: usize,
        now: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Revokes a key.
    fn revoke_key(
        &self,
        agent_id: &str,
        key_id: &str,
        at: i64,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Every key of the agent, revoked ones included, oldest first (by creation, then id).
    fn keys(&self, agent_id: &str) -> impl Future<Output = StoreResult<Vec<KeyRow>>> + Send;
    /// One key.
    fn key(&self, key_id: &str) -> impl Future<Output = StoreResult<Option<KeyRow>>> + Send;
    /// Suspends a live agent at `at` (§5.9). Its undelivered inbox entries stay queued; those whose
    /// sender is a live agent are marked in the same transaction as owing it AB-4013
    /// ([`NoticeKind::Held`], see [`Store::pending_notices`]) and returned, in inbox order.
    /// Suspending a suspended agent changes nothing and returns none.
    fn suspend_agent(
        &self,
        id: &str,
        at: i64,
    ) -> impl Future<Output = StoreResult<Vec<InboxEntry>>> + Send;
    /// Lifts a live agent's suspension; its held inbox becomes deliverable.
    fn resume_agent(&self, id: &str) -> impl Future<Output = StoreResult<()>> + Send;

    // Topics.

    /// Subscribes an agent, creating the topic on first subscription (§4.4).
    fn subscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
        at: i64,
    ) -> impl Future<Output = StoreResult<TopicRow>> + Send;
    /// Removes a subscription; the topic stays.
    fn unsubscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The topic and its subscribers (sorted), if the topic exists.
    fn topic(
        &self,
        workspace_id: &str,
        topic: &str,
    ) -> impl Future<Output = StoreResult<Option<(TopicRow, Vec<String>)>>> + Send;
    /// Topics of a workspace with their subscriber counts, by name.
    fn topics(
        &self,
        workspace_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<(TopicRow, u64)>>> + Send;

    // Messages and inboxes.

    /// The message `source` published with `id` at or after `since`, if any.
    fn recent_message(
        &self,
        tenant_id: &str,
        source: &str,
        id: &str,
        since: i64,
    ) -> impl Future<Output = StoreResult<Option<MessageRow>>> + Send;
    /// The message an idempotency key recorded at or after `since`, if any.
    fn idempotent_message(
        &self,
        key: &IdempotencyKey,
        since: i64,
    ) -> impl Future<Output = StoreResult<Option<MessageRow>>> + Send;
    /// Stores a message and one inbox entry per recipient, atomically (see [`NewMessage`]).
    fn publish(&self, m: NewMessage) -> impl Future<Output = StoreResult<PublishOutcome>> + Send;
    /// Messages matching `q` (see [`MessageSearch`]), newest first (`received_at`, then storage
    /// sequence), at most `q.limit`: search candidates the caller opens and checks.
    fn search_messages(
        &self,
        q: MessageSearch,
    ) -> impl Future<Output = StoreResult<Vec<MessageRow>>> + Send;
    /// Unacknowledged entries of an inbox.
    fn pending_count(&self, agent_id: &str) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Leases up to `limit` deliverable entries: never-delivered ones after `after`, any whose
    /// lease expired, and never-delivered ones at or below `after` whose `visible_at` (their
    /// publish, or their giving back) is at least `visibility_ms` ago: their lease was lost, or
    /// they were given back after the receiver's cursor passed them, so they are redelivered
    /// rather than stranded below every cursor until they expire (the receiver may hold them;
    /// one published a visibility timeout before a lost lease comes at once). Each gets a new lease token
    /// and `visible_at = now + visibility_ms`. Answers them in sequence order.
    /// A backend may answer before the lease is durable, but it must be in effect for every
    /// store call made after this one returns (an ack of the delivery finds its token), and no
    /// other lease may hand out the same entry meanwhile.
    fn lease(&self, req: LeaseRequest) -> impl Future<Output = StoreResult<Vec<Delivery>>> + Send;
    /// Acknowledges deliveries; each answer says whether the token was current.
    fn ack(
        &self,
        agent_id: &str,
        acks: Vec<(u64, String)>,
        at: i64,
    ) -> impl Future<Output = StoreResult<Vec<AckOutcome>>> + Send;
    /// Dead-letters leased entries at their maximum attempts whose lease expired, and expires
    /// unacknowledged entries past their message's `expires_at` (each list in no promised order,
    /// the entries as they were). The entries whose sender is owed a notice are marked so in the
    /// same transaction, and stay in [`Store::pending_notices`] until a publish with
    /// [`NewMessage::notice_of`] stores it: a notice is never lost to a failure between the
    /// settling commit and its own.
    fn reap_inboxes(
        &self,
        now: i64,
        max_attempts: u32,
    ) -> impl Future<Output = StoreResult<ReapReport>> + Send;
    /// Inbox entries whose sender is still owed a notice, each with the notice's kind: settled by
    /// the reaper ([`Store::reap_inboxes`]) or an agent's deletion ([`Store::delete_agent`]), or
    /// held for a suspended recipient ([`Store::suspend_agent`], [`NewMessage::recipients`]). At
    /// most `limit` of those past `after` (agent, sequence; `("", 0)` for the first page), in
    /// inbox order, with their messages and states as they are now.
    fn pending_notices(
        &self,
        after: (String, u64),
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<(InboxEntry, NoticeKind)>>> + Send;
    /// Tasks whose parties are still owed a timer's or an admin cancel's notice (see
    /// [`Store::update_task`]), at most `limit` of those whose id sorts after `after` (`""` for
    /// the first page), in id order, each with the owed notices' bits ([`OWED_REQUESTER`],
    /// [`OWED_RECIPIENT`], [`OWED_CANCEL_REQUESTER`], [`OWED_CANCEL_RECIPIENT`]).
    fn pending_task_notices(
        &self,
        after: &str,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<(TaskRow, u8)>>> + Send;
    /// Clears an owed notice that will not be sent (its addressee is gone).
    fn forgo_notice(&self, owed: Owed) -> impl Future<Output = StoreResult<()>> + Send;
    /// The earliest instant at which a leased entry of this inbox becomes deliverable again (its
    /// lease runs out), if any. Ready entries are deliverable already.
    fn next_visible(&self, agent_id: &str)
    -> impl Future<Output = StoreResult<Option<i64>>> + Send;
    /// The messages of a conversation that `viewer` may read (§7), in `received_at` order (storage
    /// order within an instant); `None` when it may read none, exactly as for a conversation that
    /// does not exist.
    fn conversation(
        &self,
        tenant_id: &str,
        conversation_id: &str,
        viewer: &ConversationViewer,
    ) -> impl Future<Output = StoreResult<Option<Vec<MessageRow>>>> + Send;
    /// A message by its storage sequence.
    fn message(&self, seq: i64) -> impl Future<Output = StoreResult<Option<MessageRow>>> + Send;
    /// The conversations of a tenant with messages `viewer` may read (§7, per message as for
    /// [`Store::conversation`]), most recently active first, at most `limit`; with `before`, only
    /// those whose last readable message is older than that `(received_at, seq)`.
    fn conversations(
        &self,
        tenant_id: &str,
        viewer: &ConversationViewer,
        before: Option<(i64, i64)>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<ConversationSummary>>> + Send;
    /// Every inbox copy of these stored messages (by storage sequence), with its delivery state, by
    /// message, then recipient.
    fn copies(
        &self,
        message_seqs: Vec<i64>,
    ) -> impl Future<Output = StoreResult<Vec<CopyState>>> + Send;
    /// The messages of a task (its request and lifecycle messages, notices about it), in
    /// `received_at` order (storage order within an instant).
    fn task_messages(
        &self,
        tenant_id: &str,
        task_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<MessageRow>>> + Send;

    // Tasks.

    /// A task.
    fn task(&self, id: &str) -> impl Future<Output = StoreResult<Option<TaskRow>>> + Send;
    /// A task's timeline, in order.
    fn task_events(&self, id: &str) -> impl Future<Output = StoreResult<Vec<TaskEventRow>>> + Send;
    /// Tasks matching a filter, newest first (by creation, then id, as [`TaskFilter::before`]).
    fn tasks(&self, f: TaskFilter) -> impl Future<Output = StoreResult<Vec<TaskRow>>> + Send;
    /// Non-terminal tasks whose earliest deadline is at or before `now`, earliest deadline first.
    fn due_tasks(
        &self,
        now: i64,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<TaskRow>>> + Send;
    /// Applies a timer's or an admin's change (no message), if the version still matches, and
    /// marks the notices it makes due in `owed` (bits, as [`Store::pending_task_notices`]
    /// answers them) in the same transaction.
    fn update_task(
        &self,
        t: TaskRow,
        expected_version: i64,
        e: TaskEventRow,
        owed: u8,
    ) -> impl Future<Output = StoreResult<()>> + Send;

    // Blobs.

    /// Registers a pending blob.
    fn create_blob(&self, b: BlobRow) -> impl Future<Output = StoreResult<()>> + Send;
    /// A blob.
    fn blob(&self, id: &str) -> impl Future<Output = StoreResult<Option<BlobRow>>> + Send;
    /// Marks a blob's content uploaded and verified; `NotFound` when it is unknown or purged.
    fn complete_blob(&self, id: &str) -> impl Future<Output = StoreResult<()>> + Send;
    /// Whether `agent_id` is a party of a message referencing the blob.
    fn blob_party(
        &self,
        blob_id: &str,
        agent_id: &str,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Bytes of a tenant's live blobs: complete ones not yet expired at `now`, and pending ones
    /// registered after `pending_since` (still inside their upload window).
    fn blob_bytes(
        &self,
        tenant_id: &str,
        now: i64,
        pending_since: i64,
    ) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Up to `limit` blobs whose content is due for deletion and not yet purged: complete ones
    /// expired at `now`, pending ones registered at or before `pending_since`; which ones, and in
    /// what order, is not promised.
    fn due_blobs(
        &self,
        now: i64,
        pending_since: i64,
        limit: usize,
    ) -> impl Future<Output = StoreResult<Vec<BlobRow>>> + Send;
    /// Marks a blob purged if it is still due (by the rule of [`Store::due_blobs`]); whether it
    /// was. A blob completed meanwhile is not due, so its content is never deleted under it.
    fn purge_blob(
        &self,
        id: &str,
        now: i64,
        pending_since: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// The workspaces of the agents a blob concerns: its uploader, and the senders and recipients
    /// of every message referencing it; each once, sorted.
    fn blob_workspaces(
        &self,
        blob_id: &str,
    ) -> impl Future<Output = StoreResult<Vec<String>>> + Send;

    // Usage.

    /// Usage and cost reported by messages (§5.5), summed per agent, capability, day and source;
    /// newest day first, then by agent.
    fn usage(&self, f: UsageFilter) -> impl Future<Output = StoreResult<Vec<UsageTotal>>> + Send;

    // Console sessions.

    /// Stores a new console session.
    fn create_console_session(
        &self,
        s: ConsoleSessionRow,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// The session whose id hashes to `id_hash`, if it exists (expired or not).
    fn console_session(
        &self,
        id_hash: [u8; 32],
    ) -> impl Future<Output = StoreResult<Option<ConsoleSessionRow>>> + Send;
    /// Ends a session (sign-out); ending one that does not exist changes nothing.
    fn delete_console_session(
        &self,
        id_hash: [u8; 32],
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Forgets sessions that expired at or before `now`; answers how many.
    fn purge_console_sessions(&self, now: i64) -> impl Future<Output = StoreResult<u64>> + Send;

    // Running the service.

    /// The first user ever created (the one the first start's bootstrap made), if any.
    fn first_user(&self) -> impl Future<Output = StoreResult<Option<UserRow>>> + Send;
    /// Replaces every token of `token.subject` with `token`, in one transaction; answers how many
    /// tokens it revoked.
    fn replace_tokens(&self, token: TokenRow) -> impl Future<Output = StoreResult<u64>> + Send;
    /// Returns leased entries to the inbox: each `(sequence, token)` whose lease is still current
    /// becomes deliverable at once, its token no longer current. With `uncount` the attempt is
    /// taken back as well (the delivery never left the gateway); otherwise it still counts
    /// towards `max_attempts`.
    fn release(
        &self,
        agent_id: &str,
        leases: Vec<(u64, String)>,
        now: i64,
        uncount: bool,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// Answers when the store is reachable and its schema is the one this build expects
    /// (readiness); `Backend` says what is wrong otherwise.
    fn check_ready(&self) -> impl Future<Output = StoreResult<()>> + Send;
    // Receipts (delivery states a sender reads).

    /// Records that messages of `agent_id`'s inbox were shown in a session's context, each named
    /// by its inbox sequence and message id; the first receipt of a delivery stands.
    fn record_receipts(
        &self,
        agent_id: &str,
        receipts: Vec<ShownReceipt>,
        now: i64,
    ) -> impl Future<Output = StoreResult<Vec<ReceiptOutcome>>> + Send;
    /// The message `source` (an agent's address) sent with `message_id`, and its delivery to
    /// every recipient (by agent id): entry state, lease, transport ack, shown receipt, first
    /// answer and ack.
    fn delivery_states(
        &self,
        tenant_id: &str,
        source: &str,
        message_id: &str,
    ) -> impl Future<Output = StoreResult<Option<(MessageRow, Vec<DeliveryStateRow>)>>> + Send;
    /// The messages the agent `agent_id` of `tenant_id` sent, newest first: at most `limit`,
    /// those stored before the storage sequence `before_seq` when given (a page's cursor).
    fn sent_messages(
        &self,
        tenant_id: &str,
        agent_id: &str,
        before_seq: Option<i64>,
        limit: u32,
    ) -> impl Future<Output = StoreResult<Vec<MessageRow>>> + Send;

    // Several replicas (no-ops where the store has one process).

    /// Tells the other gateway processes on this store what changed (PostgreSQL: `NOTIFY`, sent
    /// after the change committed); a store with one process has nobody to tell. Best effort: a
    /// lost signal delays the others (they poll as a fallback), it never loses a message.
    fn signal(&self, s: Signal) -> impl Future<Output = StoreResult<()>> + Send;
    /// Claims the reaper's turn for `holder` until `now + ttl_ms`: true when no other holder's
    /// claim is current, so task timers and inbox expiries are swept by one replica at a time.
    /// A store with one process always grants it.
    fn claim_reaper(
        &self,
        holder: &str,
        now: i64,
        ttl_ms: i64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;
    /// Stores a blob's sealed content in the database, where every replica reads it (inline
    /// uploads without an object store); replaces what was there.
    fn put_blob_content(
        &self,
        id: &str,
        sealed: Vec<u8>,
    ) -> impl Future<Output = StoreResult<()>> + Send;
    /// A blob's sealed content stored by [`Store::put_blob_content`]; none once purged.
    fn blob_content(&self, id: &str) -> impl Future<Output = StoreResult<Option<Vec<u8>>>> + Send;
}

/// What one gateway process tells the others sharing its store ([`Store::signal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Messages became deliverable in these agents' inboxes: wake their long-polls and sockets.
    Inbox(Vec<String>),
    /// An identity row changed (a token, a key, an agent, a tenant, a policy): drop cached ones.
    Identity,
    /// (Received only.) The connection signals arrive on was lost and made again: signals may
    /// have been missed, so treat every inbox as woken and every cache as stale.
    Resync,
}
