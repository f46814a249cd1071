//! [`AnyStore`]: the store a gateway runs on, chosen by its `store` setting at start (or, in tests
//! with the `memory` feature, the strict in-memory store).

use crate::*;

/// SQLite (the default) or PostgreSQL; implements [`Store`] by handing each call to the backend.
/// Code outside this crate should ask the methods below rather than match on the variants: the
/// `memory` feature adds one.
#[derive(Clone, Debug)]
pub enum AnyStore {
    /// The embedded SQLite file.
    Sqlite(SqliteStore),
    /// A PostgreSQL database several replicas may share.
    Postgres(PgStore),
    /// The strict in-memory store, for tests ([`crate::memory`]).
    #[cfg(feature = "memory")]
    Memory(crate::MemoryStore),
}

impl AnyStore {
    /// Every stored row, one line each, sorted (see [`SqliteStore::dump`]): what tests compare
    /// to prove that a refused request changed nothing stored.
    pub async fn dump(&self) -> StoreResult<Vec<String>> {
        match self {
            AnyStore::Sqlite(s) => s.dump().await,
            AnyStore::Postgres(s) => s.dump().await,
            #[cfg(feature = "memory")]
            AnyStore::Memory(s) => s.dump().await,
        }
    }

    /// Signals from the other gateway processes on this store (never this one's own), for as
    /// long as the receiver lives; none for a store only one process opens (SQLite).
    pub fn signals(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Signal>> {
        match self {
            AnyStore::Sqlite(_) => None,
            AnyStore::Postgres(s) => Some(s.listen()),
            #[cfg(feature = "memory")]
            AnyStore::Memory(_) => None,
        }
    }

    /// Which backend this is, for logs and readiness (`sqlite`, `postgres`, or `memory` in tests).
    pub fn backend(&self) -> &'static str {
        match self {
            AnyStore::Sqlite(_) => "sqlite",
            AnyStore::Postgres(_) => "postgres",
            #[cfg(feature = "memory")]
            AnyStore::Memory(_) => "memory",
        }
    }

    /// The schema version this build's backend migrates to (`agentbus gateway migrate` reports
    /// it); 0 for the in-memory store, which has no schema.
    pub fn schema_version(&self) -> i64 {
        match self {
            AnyStore::Sqlite(_) => crate::sqlite::current_version() as i64,
            AnyStore::Postgres(_) => crate::postgres::current_version(),
            #[cfg(feature = "memory")]
            AnyStore::Memory(_) => 0,
        }
    }

    /// Whether blob content, without an object store, belongs in the store itself
    /// ([`Store::put_blob_content`]) rather than in files beside it: where replicas share the
    /// store (PostgreSQL), and in the in-memory store, which has no data directory.
    pub fn keeps_blob_content(&self) -> bool {
        match self {
            AnyStore::Sqlite(_) => false,
            AnyStore::Postgres(_) => true,
            #[cfg(feature = "memory")]
            AnyStore::Memory(_) => true,
        }
    }
}

/// Implements [`Store`] for [`AnyStore`] from the trait's signatures: each call goes to the
/// backend the value holds.
macro_rules! dispatch {
    ($( fn $name:ident(&self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        impl Store for AnyStore {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> StoreResult<$ret> {
                    match self {
                        AnyStore::Sqlite(s) => s.$name($($arg),*).await,
                        AnyStore::Postgres(s) => s.$name($($arg),*).await,
                        #[cfg(feature = "memory")]
                        AnyStore::Memory(s) => s.$name($($arg),*).await,
                    }
                }
            )*
        }
    };
}

dispatch! {
    fn create_tenant(&self, t: TenantRow) -> ();
    fn tenant(&self, id: &str) -> Option<TenantRow>;
    fn tenant_by_slug(&self, slug: &str) -> Option<TenantRow>;
    fn tenants(&self) -> Vec<TenantRow>;
    fn create_workspace(&self, w: WorkspaceRow) -> ();
    fn workspace(&self, id: &str) -> Option<WorkspaceRow>;
    fn workspace_by_slug(&self, tenant_id: &str, slug: &str) -> Option<WorkspaceRow>;
    fn set_workspace_policy(&self, id: &str, policy: String) -> ();
    fn create_user(&self, u: UserRow) -> ();
    fn user(&self, id: &str) -> Option<UserRow>;
    fn create_token(&self, t: TokenRow) -> ();
    fn token(&self, hash: [u8; 32]) -> Option<TokenRow>;
    fn set_tenant_suspended(&self, id: &str, at: Option<i64>) -> ();
    fn workspaces(&self, tenant_id: &str) -> Vec<WorkspaceRow>;
    fn users_with_role(&self, role: Role) -> Vec<UserRow>;
    fn users(&self, tenant_id: Option<&str>) -> Vec<UserRow>;
    fn delete_user(&self, id: &str) -> bool;
    fn user_tokens(&self, tenant_id: Option<&str>) -> Vec<TokenRow>;
    fn revoke_token(&self, hash: [u8; 32], at: i64) -> bool;
    fn provision_tenant(&self, t: TenantRow, w: WorkspaceRow, u: UserRow, token: TokenRow) -> ();
    fn create_agent(&self, a: AgentRow, aliases: Vec<String>) -> ();
    fn agent(&self, id: &str) -> Option<AgentRow>;
    fn agent_by_name(&self, workspace_id: &str, name: &str) -> Option<AgentRow>;
    fn agents(&self, tenant_id: &str) -> Vec<AgentRow>;
    fn aliases(&self, agent_id: &str) -> Vec<String>;
    fn update_agent(&self, a: AgentRow, aliases: Option<Vec<String>>) -> ();
    fn delete_agent(&self, id: &str, at: i64) -> Vec<InboxEntry>;
    fn add_key(&self, k: KeyRow, max_active: usize, now: i64) -> ();
    fn revoke_key(&self, agent_id: &str, key_id: &str, at: i64) -> ();
    fn keys(&self, agent_id: &str) -> Vec<KeyRow>;
    fn key(&self, key_id: &str) -> Option<KeyRow>;
    fn suspend_agent(&self, id: &str, at: i64) -> Vec<InboxEntry>;
    fn resume_agent(&self, id: &str) -> ();
    fn subscribe(&self, workspace_id: &str, topic: &str, agent_id: &str, at: i64) -> TopicRow;
    fn unsubscribe(&self, workspace_id: &str, topic: &str, agent_id: &str) -> ();
    fn topic(&self, workspace_id: &str, topic: &str) -> Option<(TopicRow, Vec<String>)>;
    fn topics(&self, workspace_id: &str) -> Vec<(TopicRow, u64)>;
    fn recent_message(&self, tenant_id: &str, source: &str, id: &str, since: i64) -> Option<MessageRow>;
    fn idempotent_message(&self, key: &IdempotencyKey, since: i64) -> Option<MessageRow>;
    fn publish(&self, m: NewMessage) -> PublishOutcome;
    fn search_messages(&self, q: MessageSearch) -> Vec<MessageRow>;
    fn pending_count(&self, agent_id: &str) -> u64;
    fn lease(&self, req: LeaseRequest) -> Vec<Delivery>;
    fn ack(&self, agent_id: &str, acks: Vec<(u64, String)>, at: i64) -> Vec<AckOutcome>;
    fn reap_inboxes(&self, now: i64, max_attempts: u32) -> ReapReport;
    fn pending_notices(&self, after: (String, u64), limit: u32) -> Vec<(InboxEntry, NoticeKind)>;
    fn pending_task_notices(&self, after: &str, limit: u32) -> Vec<(TaskRow, u8)>;
    fn forgo_notice(&self, owed: Owed) -> ();
    fn next_visible(&self, agent_id: &str) -> Option<i64>;
    fn conversation(&self, tenant_id: &str, conversation_id: &str, viewer: &ConversationViewer) -> Option<Vec<MessageRow>>;
    fn message(&self, seq: i64) -> Option<MessageRow>;
    fn conversations(&self, tenant_id: &str, viewer: &ConversationViewer, before: Option<(i64, i64)>, limit: u32) -> Vec<ConversationSummary>;
    fn copies(&self, message_seqs: Vec<i64>) -> Vec<CopyState>;
    fn task_messages(&self, tenant_id: &str, task_id: &str) -> Vec<MessageRow>;
    fn task(&self, id: &str) -> Option<TaskRow>;
    fn task_events(&self, id: &str) -> Vec<TaskEventRow>;
    fn tasks(&self, f: TaskFilter) -> Vec<TaskRow>;
    fn due_tasks(&self, now: i64, limit: u32) -> Vec<TaskRow>;
    fn update_task(&self, t: TaskRow, expected_version: i64, e: TaskEventRow, owed: u8) -> ();
    fn create_blob(&self, b: BlobRow) -> ();
    fn blob(&self, id: &str) -> Option<BlobRow>;
    fn complete_blob(&self, id: &str) -> ();
    fn blob_party(&self, blob_id: &str, agent_id: &str) -> bool;
    fn blob_bytes(&self, tenant_id: &str, now: i64, pending_since: i64) -> u64;
    fn due_blobs(&self, now: i64, pending_since: i64, limit: usize) -> Vec<BlobRow>;
    fn purge_blob(&self, id: &str, now: i64, pending_since: i64) -> bool;
    fn blob_workspaces(&self, blob_id: &str) -> Vec<String>;
    fn usage(&self, f: UsageFilter) -> Vec<UsageTotal>;
    fn create_console_session(&self, s: ConsoleSessionRow) -> ();
    fn console_session(&self, id_hash: [u8; 32]) -> Option<ConsoleSessionRow>;
    fn delete_console_session(&self, id_hash: [u8; 32]) -> ();
    fn purge_console_sessions(&self, now: i64) -> u64;
    fn first_user(&self) -> Option<UserRow>;
    fn replace_tokens(&self, token: TokenRow) -> u64;
    fn release(&self, agent_id: &str, leases: Vec<(u64, String)>, now: i64, uncount: bool) -> ();
    fn check_ready(&self) -> ();
    fn record_receipts(&self, agent_id: &str, receipts: Vec<ShownReceipt>, now: i64) -> Vec<ReceiptOutcome>;
    fn delivery_states(&self, tenant_id: &str, source: &str, message_id: &str) -> Option<(MessageRow, Vec<DeliveryStateRow>)>;
    fn sent_messages(&self, tenant_id: &str, agent_id: &str, before_seq: Option<i64>, limit: u32) -> Vec<MessageRow>;
    fn signal(&self, s: Signal) -> ();
    fn claim_reaper(&self, holder: &str, now: i64, ttl_ms: i64) -> bool;
    fn put_blob_content(&self, id: &str, sealed: Vec<u8>) -> ();
    fn blob_content(&self, id: &str) -> Option<Vec<u8>>;
}
