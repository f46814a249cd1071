//! Rows: the plain data that crosses the [`crate::Store`] interface. Times are Unix milliseconds.

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRow {
    /// `ten_` id.
    pub id: String,
    /// The slug used in addresses.
    pub slug: String,
    /// The tenant's data key, wrapped (encrypted) under the gateway's master key.
    pub data_key: Vec<u8>,
    /// Creation time.
    pub created_at: i64,
    /// When the gateway operator suspended it; its credentials are refused until it resumes.
    pub suspended_at: Option<i64>,
}

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRow {
    /// `ws_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The slug used in addresses.
    pub slug: String,
    /// The routing policy, a JSON document the gateway interprets.
    pub policy: String,
    /// Creation time.
    pub created_at: i64,
}

/// A user's role, and so the scope it administers (`docs/security.md`, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Administers the gateway's tenants (created at first start); belongs to no tenant.
    Operator,
    /// Administers every workspace of its tenant.
    TenantAdmin,
    /// Administers one workspace.
    Admin,
    /// May register and manage its own agents.
    Member,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 4] = [Role::Operator, Role::TenantAdmin, Role::Admin, Role::Member];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operator => "operator",
            Role::TenantAdmin => "tenant_admin",
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// The role of a wire name, if it is one.
    pub fn from_name(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// A stored name; anything unknown holds the least privilege.
    fn parse(s: &str) -> Role {
        Role::from_name(s).unwrap_or(Role::Member)
    }
}

/// A person (or an integration acting for one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// `usr_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// A display name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Creation time.
    pub created_at: i64,
}

/// What a token authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSubject {
    /// A user's integration token.
    User(String),
    /// An agent's credential.
    Agent(String),
}

impl TokenSubject {
    /// The subject as both backends store it: (kind, id).
    pub(crate) fn stored(&self) -> (&'static str, &str) {
        match self {
            TokenSubject::User(id) => ("user", id.as_str()),
            TokenSubject::Agent(id) => ("agent", id.as_str()),
        }
    }

    /// The subject of a stored (kind, id).
    pub(crate) fn from_stored(kind: &str, id: String) -> TokenSubject {
        if kind == "agent" {
            TokenSubject::Agent(id)
        } else {
            TokenSubject::User(id)
        }
    }
}

/// A bearer token, stored only as its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    /// SHA-256 of the token.
    pub hash: [u8; 32],
    /// Whom it authenticates.
    pub subject: TokenSubject,
    /// Creation time.
    pub created_at: i64,
    /// What its holder called it when it was issued (`agentbus tokens issue --label`), if anything.
    pub label: Option<String>,
    /// When it was revoked; a revoked token authenticates nobody but stays listed.
    pub revoked_at: Option<i64>,
}

/// An agent and its card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRow {
    /// `agt_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// Its name (a slug that never changes).
    pub name: String,
    /// The user that registered it.
    pub owner_id: Option<String>,
    /// The editable card fields, as JSON.
    pub card: String,
    /// `private`, `workspace`, `tenant` or `public`.
    pub visibility: String,
    /// Creation time.
    pub created_at: i64,
    /// Last card change.
    pub updated_at: i64,
    /// Deletion time.
    pub deleted_at: Option<i64>,
    /// When an admin suspended it (§5.9): it cannot publish or receive, its inbox holds.
    pub suspended_at: Option<i64>,
}

/// A registered public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// `key_` id.
    pub id: String,
    /// The agent it belongs to.
    pub agent_id: String,
    /// The 32-byte Ed25519 public key.
    pub public_key: Vec<u8>,
    /// Registration time.
    pub created_at: i64,
    /// Expiry.
    pub expires_at: i64,
    /// Revocation time.
    pub revoked_at: Option<i64>,
}

impl KeyRow {
    /// Whether the key may sign new publishes at `now` (§3.2 step 3).
    pub fn is_active(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at > now
    }
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRow {
    /// Internal id.
    pub id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// Its name.
    pub name: String,
    /// Creation time.
    pub created_at: i64,
}

/// The scope of an idempotency key: (tenant, source, resolved recipient id, key), decision 6.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// Tenant id.
    pub tenant_id: String,
    /// Sender address.
    pub source: String,
    /// The resolved `agt_` id, or the topic's id.
    pub to_id: String,
    /// The key.
    pub key: String,
}

/// A message to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// Sender's tenant.
    pub tenant_id: String,
    /// Envelope `id`.
    pub id: String,
    /// Envelope `source`.
    pub source: String,
    /// The sending agent's id (absent for gateway notices).
    pub source_agent_id: Option<String>,
    /// Envelope `type`.
    pub kind: String,
    /// Envelope `conversation_id`.
    pub conversation_id: String,
    /// Envelope `correlation_id`.
    pub correlation_id: Option<String>,
    /// Envelope `to`, as written.
    pub to_text: String,
    /// The resolved recipient id (agent or topic).
    pub to_id: String,
    /// Sender-set attributes without `data`, as a JSON object text.
    pub attrs: String,
    /// `data`, sealed under the tenant data key.
    pub data: Vec<u8>,
    /// SHA-256 of the signed bytes, to tell a byte-identical retry from a conflicting reuse.
    pub signed_hash: Vec<u8>,
    /// The idempotency key's scope, when the envelope has one.
    pub idempotency: Option<IdempotencyKey>,
    /// `rcp_` receipt.
    pub receipt: String,
    /// Gateway receipt time.
    pub received_at: i64,
    /// Effective expiry.
    pub expires_at: i64,
    /// The task this message belongs to.
    pub task_id: Option<String>,
    /// The task record this message creates or changes, in the same transaction.
    pub task: Option<TaskWrite>,
    /// Agents whose inboxes get a copy. A copy for one suspended when the storing transaction
    /// runs (§5.9; read there, after its inbox's counter row is locked, which a suspension also
    /// locks, so neither misses the other) is held, and marked as owing the sender AB-4013
    /// ([`NoticeKind::Held`]), unless the message has no sending agent (a notice is never sent
    /// about a notice).
    pub recipients: Vec<String>,
    /// Blobs the message references.
    pub blob_refs: Vec<String>,
    /// How far back the `(tenant, source, id)` dedupe looks.
    pub replay_since: i64,
    /// How far back the idempotency key looks.
    pub idempotency_since: i64,
    /// Refuse the message ([`PublishOutcome::InboxFull`]) when a recipient's inbox already holds
    /// this many unacknowledged entries; checked inside the storing transaction, so concurrent
    /// publishers cannot overfill an inbox between a check and the insert.
    pub max_depth: Option<u64>,
    /// The usage and cost the message reported (§5.5), stored in the same transaction.
    pub usage: Option<UsageRow>,
    /// The owed notice this message is ([`crate::Store::pending_notices`],
    /// [`crate::Store::pending_task_notices`]): stored only while it is still owed, which the
    /// storing transaction then clears; otherwise [`crate::StoreError::Conflict`] and nothing is
    /// stored (another gateway replica sent it).
    pub notice_of: Option<Owed>,
    /// The message's search index words (`agentbus_protocol::search`: keyed hashes of its terms,
    /// never the terms) separated by single spaces, stored in the same transaction and deleted
    /// with the message; empty for none. One string, not one per word: a publish hands it to
    /// the store's writer, and a hundred small allocations freed there showed in profiles.
    pub search_tags: String,
}

/// A search over stored messages ([`crate::Store::search_messages`]): candidates for the
/// gateway to open, check and rank. Every condition holds together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSearch {
    /// The caller's tenant.
    pub tenant_id: String,
    /// Whose view: only messages it may read through the conversation routes.
    pub viewer: ConversationViewer,
    /// Groups of index words: each group must have at least one of its words in the message.
    /// Empty: no word condition (filters only).
    pub words: Vec<Vec<String>>,
    /// Envelope type: exactly this, or with a trailing `*` this prefix (`agentbus.task.*`).
    pub kind: Option<String>,
    /// Only this conversation.
    pub conversation_id: Option<String>,
    /// Only from this source address.
    pub source: Option<String>,
    /// Only to this address, as the sender wrote it.
    pub to_text: Option<String>,
    /// Only of a task (`task_id` set).
    pub in_task: bool,
    /// Received at or after (ms).
    pub since: Option<i64>,
    /// Received before (ms).
    pub until: Option<i64>,
    /// Only older than this `(received_at, seq)`: a page's cursor.
    pub before: Option<(i64, i64)>,
    /// The most rows, newest first.
    pub limit: u32,
}

/// A notice the gateway owes, marked in the transaction that made it due and cleared in the one
/// that stores it, so a failure between the two delays it and never loses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owed {
    /// A notice to the sender about an inbox entry: (agent, sequence, which notice). Stored only
    /// while the entry still owes that notice: a hold's mark replaced since by a dead letter's or
    /// an expiry's owes theirs instead.
    Entry(String, u64, NoticeKind),
    /// A task's notice to one party: (task, one of [`OWED_REQUESTER`], [`OWED_RECIPIENT`],
    /// [`OWED_CANCEL_REQUESTER`], [`OWED_CANCEL_RECIPIENT`]).
    Task(String, u8),
}

/// A task timer's notice owed to the requester ([`Owed::Task`]).
pub const OWED_REQUESTER: u8 = 1;
/// A task timer's notice owed to the recipient ([`Owed::Task`]).
pub const OWED_RECIPIENT: u8 = 2;
/// An admin's cancel's `task.cancel` owed to the requester ([`Owed::Task`]): bits of their own,
/// so a timer firing before they are sent (or an admin cancelling a task whose timer's notices
/// are still owed) leaves both owed.
pub const OWED_CANCEL_REQUESTER: u8 = 4;
/// An admin's cancel's `task.cancel` owed to the recipient ([`Owed::Task`]).
pub const OWED_CANCEL_RECIPIENT: u8 = 8;

/// Which notice an inbox entry's sender is owed. A settled entry's is marked in `inbox.notice`
/// (its kind), a held one's in `inbox.hold`, a column of its own: a replica of an earlier
/// release, which reads every `notice` mark as a settled entry's, never meets a hold's during a
/// rolling upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// The reaper settled the entry: a dead letter's `system.undeliverable` (AB-4016), or an
    /// expiry's `system.expired` (§5.9, §5.10), by the entry's state.
    Settled,
    /// The recipient's deletion dead-lettered the entry: `system.undeliverable`, AB-4003.
    Deleted,
    /// The entry is held for a suspended recipient: `system.undeliverable`, AB-4013, not
    /// dead-lettered. A later dead letter or expiry that owes its own notice replaces it; one
    /// that owes none (an expiry after a delivery), or an ack, leaves nothing to report.
    Held,
}

impl NoticeKind {
    /// The value a mark of this kind stores: in `inbox.notice` for a settled entry's, in
    /// `inbox.hold` for a hold's.
    pub(crate) fn code(self) -> i16 {
        match self {
            NoticeKind::Settled | NoticeKind::Held => 1,
            NoticeKind::Deleted => 2,
        }
    }

    /// The kind of an `inbox.notice` mark. Releases before kinds marked a deletion's 1 too;
    /// such a notice still owed at the upgrade goes as AB-4016.
    pub(crate) fn from_code(c: i64) -> NoticeKind {
        match c {
            2 => NoticeKind::Deleted,
            _ => NoticeKind::Settled,
        }
    }
}

/// The `inbox.hold` value a new entry stores, as an SQL expression both backends run in the
/// inserting statement: [`NoticeKind::Held`]'s code when the recipient `agent` (an SQL expression)
/// is suspended as that statement reads it and the message has a sending agent (`source`, an SQL
/// expression; a notice is never sent about a notice), else NULL (§5.9, see
/// [`NewMessage::recipients`]). One expression for every insert path, so they hold alike.
pub(crate) fn hold_if_suspended(agent: &str, source: &str) -> String {
    format!(
        "(SELECT {} FROM agents a WHERE a.id = {agent} AND a.suspended_at IS NOT NULL AND {source} IS NOT NULL)",
        NoticeKind::Held.code()
    )
}

/// Run in the transaction that deletes agent `$1`, on both backends: its replay (`recent_ids`)
/// and idempotency records go with it. Both are keyed by the source address, which a new agent
/// registered under the same name takes again; left behind, they answered that agent's publishes
/// with the deleted agent's receipts (a replay of a message it never sent, its own not stored).
/// Each finds the addresses the agent sent from through its sent messages (`messages_sent`), then
/// deletes by the records' key prefix.
pub(crate) const FORGET_SENT: [&str; 2] = [
    "DELETE FROM recent_ids WHERE tenant_id = (SELECT tenant_id FROM agents WHERE id = $1) \
     AND source IN (SELECT DISTINCT source FROM messages \
     WHERE tenant_id = (SELECT tenant_id FROM agents WHERE id = $1) AND source_agent_id = $1)",
    "DELETE FROM idempotency WHERE tenant_id = (SELECT tenant_id FROM agents WHERE id = $1) \
     AND source IN (SELECT DISTINCT source FROM messages \
     WHERE tenant_id = (SELECT tenant_id FROM agents WHERE id = $1) AND source_agent_id = $1)",
];

/// One page of owed entries from its two reads, the settled entries' marks and the holds, each
/// in inbox order and at most `limit`: merged in inbox order, at most `limit`, an entry in both
/// (not expected: a settled mark clears the hold) counted once, as settled.
pub(crate) fn owed_page(
    settled: Vec<(InboxEntry, NoticeKind)>,
    holds: Vec<InboxEntry>,
    limit: u32,
) -> Vec<(InboxEntry, NoticeKind)> {
    let seen: std::collections::HashSet<(String, u64)> = settled
        .iter()
        .map(|(e, _)| (e.agent_id.clone(), e.sequence))
        .collect();
    let mut page = settled;
    page.extend(
        holds
            .into_iter()
            .filter(|e| !seen.contains(&(e.agent_id.clone(), e.sequence)))
            .map(|e| (e, NoticeKind::Held)),
    );
    page.sort_by(|(a, _), (b, _)| (&a.agent_id, a.sequence).cmp(&(&b.agent_id, b.sequence)));
    page.truncate(limit as usize);
    page
}

/// Whether the sender of `e`'s message is owed a notice once `e` is settled (§5.9, §5.10): a
/// dead letter (or a copy held for a suspended recipient, `dead` too) always, an expiry only for
/// a message never delivered, and never about a notice (a message with no sending agent).
/// Whether the sender still exists is the store's check.
pub(crate) fn notice_due(e: &InboxEntry, dead: bool) -> bool {
    e.message.source_agent_id.is_some() && (dead || e.attempts == 0)
}

impl NewMessage {
    /// The row as stored under storage sequence `seq`, built from what the publish inserted
    /// rather than read back.
    pub(crate) fn stored_row(&self, seq: i64) -> MessageRow {
        MessageRow {
            seq,
            tenant_id: self.tenant_id.clone(),
            id: self.id.clone(),
            source: self.source.clone(),
            source_agent_id: self.source_agent_id.clone(),
            kind: self.kind.clone(),
            conversation_id: self.conversation_id.clone(),
            to_text: self.to_text.clone(),
            to_id: self.to_id.clone(),
            attrs: self.attrs.clone(),
            data: self.data.clone(),
            signed_hash: self.signed_hash.clone(),
            idempotency_key: self.idempotency.as_ref().map(|k| k.key.clone()),
            receipt: self.receipt.clone(),
            received_at: self.received_at,
            expires_at: self.expires_at,
            task_id: self.task_id.clone(),
        }
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRow {
    /// Storage sequence (global, internal).
    pub seq: i64,
    /// Tenant id.
    pub tenant_id: String,
    /// Envelope `id`.
    pub id: String,
    /// Envelope `source`.
    pub source: String,
    /// The sending agent.
    pub source_agent_id: Option<String>,
    /// Envelope `type`.
    pub kind: String,
    /// Envelope `conversation_id`.
    pub conversation_id: String,
    /// Envelope `to`.
    pub to_text: String,
    /// Resolved recipient id.
    pub to_id: String,
    /// Sender attributes without `data`.
    pub attrs: String,
    /// Sealed `data`.
    pub data: Vec<u8>,
    /// SHA-256 of the signed bytes.
    pub signed_hash: Vec<u8>,
    /// Its idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// `rcp_` receipt.
    pub receipt: String,
    /// Gateway receipt time.
    pub received_at: i64,
    /// Effective expiry.
    pub expires_at: i64,
    /// Its task.
    pub task_id: Option<String>,
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Stored: each recipient and the sequence its copy got.
    Stored {
        /// The stored message.
        message: MessageRow,
        /// (agent id, sequence) per copy.
        sequences: Vec<(String, u64)>,
        /// Each recipient's unacknowledged entries after this one was added, in the order of
        /// `sequences` (for the inbox depth metric).
        depths: Vec<u64>,
    },
    /// The `(tenant, source, id)` was already stored within the replay window.
    DuplicateId(MessageRow),
    /// The idempotency key was already used within its window.
    IdempotentReplay(MessageRow),
    /// A recipient's inbox holds `depth` unacknowledged entries, at or over
    /// [`NewMessage::max_depth`]; nothing was stored.
    InboxFull {
        /// The recipient whose inbox is full.
        agent_id: String,
        /// Its unacknowledged entries.
        depth: u64,
    },
}

/// The state of an inbox entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// Waiting for its first delivery.
    Ready,
    /// Delivered, waiting for an ack until its visibility timeout.
    Leased,
    /// Acknowledged.
    Acked,
    /// Given up after the maximum attempts.
    Dead,
    /// Not delivered before its message expired.
    Expired,
}

impl EntryState {
    fn code(self) -> i64 {
        match self {
            EntryState::Ready => 0,
            EntryState::Leased => 1,
            EntryState::Acked => 2,
            EntryState::Dead => 3,
            EntryState::Expired => 4,
        }
    }

    fn from_code(c: i64) -> EntryState {
        match c {
            0 => EntryState::Ready,
            1 => EntryState::Leased,
            2 => EntryState::Acked,
            3 => EntryState::Dead,
            _ => EntryState::Expired,
        }
    }
}

/// One copy of a message in one inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    /// The inbox's agent.
    pub agent_id: String,
    /// The inbox sequence.
    pub sequence: u64,
    /// Its state.
    pub state: EntryState,
    /// Deliveries so far.
    pub attempts: u32,
    /// Last delivery time.
    pub last_attempt_at: Option<i64>,
    /// The message.
    pub message: MessageRow,
}

/// A lease request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    /// The inbox.
    pub agent_id: String,
    /// Never-delivered entries are taken above this sequence at once, at or below it once they
    /// have been visible for `visibility_ms` (see [`crate::Store::lease`]).
    pub after: u64,
    /// The most entries to lease.
    pub limit: u32,
    /// Now.
    pub now: i64,
    /// Lease length.
    pub visibility_ms: i64,
    /// Entries at this many attempts are not leased again.
    pub max_attempts: u32,
}

/// A leased delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The inbox sequence.
    pub sequence: u64,
    /// The lease token an ack must present.
    pub token: String,
    /// Which delivery this is (1 for the first).
    pub attempt: u32,
    /// What the delivered copy is made of.
    pub message: DeliveredMessage,
}

/// The parts of a stored message a delivery is built from: a lease reads only these, since every
/// delivery pays for the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveredMessage {
    /// Sender's tenant (whose data key seals `data`).
    pub tenant_id: String,
    /// Sender-set attributes without `data`, as a JSON object text.
    pub attrs: String,
    /// `data`, sealed under the tenant data key.
    pub data: Vec<u8>,
    /// Gateway receipt time.
    pub received_at: i64,
}

/// The answer to one ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Recorded now.
    Acked,
    /// Already acknowledged with this token; nothing changed.
    AlreadyAcked,
    /// The token is not the entry's current lease (it was redelivered), or no such entry.
    Stale,
}

/// What a reaper pass changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapReport {
    /// Entries dead-lettered after their maximum attempts.
    pub dead: Vec<InboxEntry>,
    /// Entries expired before an ack.
    pub expired: Vec<InboxEntry>,
}

impl ReapReport {
    /// The entries of the report whose sender is owed a notice ([`notice_due`]).
    pub(crate) fn owing(&self) -> impl Iterator<Item = &InboxEntry> {
        let dead = self.dead.iter().filter(|e| notice_due(e, true));
        dead.chain(self.expired.iter().filter(|e| notice_due(e, false)))
    }
}

/// A claim-check blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRow {
    /// `blb_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The uploading agent.
    pub uploader_id: String,
    /// The declared file name.
    pub name: String,
    /// The declared media type.
    pub media_type: Option<String>,
    /// The declared size.
    pub size: u64,
    /// The declared lowercase hex SHA-256.
    pub sha256: String,
    /// Whether the content was uploaded and verified.
    pub complete: bool,
    /// Registration time.
    pub created_at: i64,
    /// Expiry.
    pub expires_at: i64,
}

pub(crate) fn role_from(s: &str) -> Role {
    Role::parse(s)
}

pub(crate) fn state_code(s: EntryState) -> i64 {
    s.code()
}

pub(crate) fn state_from(c: i64) -> EntryState {
    EntryState::from_code(c)
}

/// A task record (§6). `machine` is the state machine's fields as JSON, which only the gateway
/// interprets; the store indexes `state`, `terminal` and `next_deadline`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    /// `tsk_` id.
    pub id: String,
    /// Tenant.
    pub tenant_id: String,
    /// The requester's workspace.
    pub workspace_id: String,
    /// The requesting agent.
    pub requester_id: String,
    /// The recipient agent.
    pub recipient_id: String,
    /// The task.request's message id.
    pub request_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The capability requested.
    pub capability: String,
    /// The state name.
    pub state: String,
    /// Whether the state is terminal.
    pub terminal: bool,
    /// The state machine's fields, JSON.
    pub machine: String,
    /// The earliest timer deadline, for the reaper's index.
    pub next_deadline: Option<i64>,
    /// Creation time.
    pub created_at: i64,
    /// Last change.
    pub updated_at: i64,
    /// Optimistic-concurrency version, bumped by every change.
    pub version: i64,
}

/// One timeline entry of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEventRow {
    /// When.
    pub at: i64,
    /// `agent:<agt_ id>` or `system`.
    pub actor: String,
    /// The envelope that caused it (none for timers).
    pub envelope_id: Option<String>,
    /// The message type, or `timer`.
    pub kind: String,
    /// State before.
    pub from_state: String,
    /// State after.
    pub to_state: String,
    /// `late` or `ignored`.
    pub flag: Option<String>,
    /// The timer that fired.
    pub timer: Option<String>,
    /// Advisory findings about the envelope (a result whose output does not match its output
    /// schema), as a JSON array the gateway writes and reads.
    pub warnings: Option<String>,
    /// The reason an admin gave for a cancel through the console (no envelope carries it), kept
    /// so the notices owed for the cancel can be sent again after a failure.
    pub reason: Option<String>,
}

/// A task change made with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskWrite {
    /// A task.request creates its task.
    Create(TaskRow, TaskEventRow),
    /// A lifecycle message updates it, if nobody changed it since `expected_version`.
    Update(TaskRow, i64, TaskEventRow),
}

impl TaskWrite {
    /// The capability of the task written.
    pub fn capability(&self) -> &str {
        match self {
            TaskWrite::Create(t, _) | TaskWrite::Update(t, _, _) => &t.capability,
        }
    }
}

/// A filter for listing tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Tenant (required).
    pub tenant_id: String,
    /// Only this state.
    pub state: Option<String>,
    /// Only tasks this agent requested.
    pub requester_id: Option<String>,
    /// Only tasks this agent received.
    pub recipient_id: Option<String>,
    /// Only tasks with this agent as either party.
    pub party_id: Option<String>,
    /// Most rows.
    pub limit: u32,
    /// Only tasks for this capability.
    pub capability: Option<String>,
    /// Only tasks of this workspace: requested from it, or received by an agent of it.
    pub workspace_id: Option<String>,
    /// Only tasks listed after this one, newest first: its `(created_at, id)`.
    pub before: Option<(i64, String)>,
}

/// Whose view of a conversation is asked for (§7): nobody reads an envelope it neither sent nor
/// received, except an admin whose scope covers a party's workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConversationViewer {
    /// An agent: the envelopes it sent or has a copy of.
    Agent(String),
    /// A workspace admin: the envelopes sent by, or copied to, an agent of this workspace.
    Workspace(String),
    /// A tenant admin: every envelope of the conversation in its tenant.
    Tenant,
}

/// A recipient's report that a message it received was shown in a session's context (the
/// sidecar's "shown" receipt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownReceipt {
    /// The inbox sequence the message was delivered at.
    pub sequence: u64,
    /// The message's `id`, which must be the one delivered at that sequence.
    pub message_id: String,
    /// When it was first shown (the recipient's clock, kept within the message's life).
    pub shown_at: i64,
    /// Into which harness (`claude`, `codex`, `opencode`, `inbox`, `mcp`, …).
    pub harness: String,
    /// At which harness event.
    pub event: String,
    /// Only pushed to a client that may drop it (an MCP channel notification): the state
    /// `pushed`, between acknowledged and shown, recorded apart from the showing.
    pub pushed: bool,
}

/// The answer to one receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptOutcome {
    /// Recorded now.
    Recorded,
    /// A receipt for this delivery was recorded before; the first stands.
    AlreadyRecorded,
    /// The caller has no delivery at that sequence, or another message is there.
    Unknown,
}

/// The delivery of one message to one recipient, as its sender may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryStateRow {
    /// The recipient.
    pub agent_id: String,
    /// Its inbox sequence.
    pub sequence: u64,
    /// The entry's state.
    pub state: EntryState,
    /// Deliveries so far.
    pub attempts: u32,
    /// When it was last leased.
    pub last_attempt_at: Option<i64>,
    /// When the recipient's sidecar acknowledged it (a transport ack).
    pub acked_at: Option<i64>,
    /// The shown receipt, when reported.
    pub shown: Option<ShownReceipt>,
    /// The pushed receipt, when reported.
    pub pushed: Option<ShownReceipt>,
    /// The recipient's first answer: a message or task envelope correlated to it, not an ack.
    pub answer: Option<AnswerRow>,
    /// The recipient's first `ack.v1` correlated to it.
    pub ack: Option<AnswerRow>,
}

/// An envelope that answers another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerRow {
    /// Its `id`.
    pub id: String,
    /// Its `type`.
    pub kind: String,
    /// When the gateway received it.
    pub received_at: i64,
}

/// Token counts of a usage figure (§5.5, `common/usage/v1.json`); absent counts are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// `input_tokens`.
    pub input: i64,
    /// `output_tokens`.
    pub output: i64,
    /// `cache_read_tokens`.
    pub cache_read: i64,
    /// `cache_write_tokens`.
    pub cache_write: i64,
    /// `reasoning_tokens`.
    pub reasoning: i64,
    /// `requests`.
    pub requests: i64,
    /// `wall_ms`.
    pub wall_ms: i64,
}

/// A usage figure as a message reported it (§5.5): who reported it and the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageFigure {
    /// `reported_by`: `harness`, `agent`, `proxy` or `estimate`.
    pub reported_by: String,
    /// `provider`.
    pub provider: Option<String>,
    /// `model`.
    pub model: Option<String>,
    /// The counts.
    pub tokens: Tokens,
}

/// A reported cost (`common/money/v1.json`), in millionths of the currency unit (the schema's
/// amounts have at most six decimals, so the sum is exact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostFigure {
    /// `currency`, three upper-case letters.
    pub currency: String,
    /// `amount` in millionths.
    pub micros: i64,
    /// `source`, when stated.
    pub source: Option<String>,
}

/// What one message reported about the work behind it (§5.5), stored with the message so usage
/// totals never need to open sealed `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The sender's tenant.
    pub tenant_id: String,
    /// The sender's workspace.
    pub workspace_id: String,
    /// The reporting agent (the sender).
    pub agent_id: String,
    /// The task the message belongs to.
    pub task_id: Option<String>,
    /// The capability: the message's own, or its task's.
    pub capability: Option<String>,
    /// The UTC day of `received_at`, `YYYY-MM-DD`.
    pub day: String,
    /// Where the figure was read: `usage` (the envelope attribute), `data.usage` or
    /// `data.usage_delta`.
    pub field: String,
    /// The usage figure, if the message carried one.
    pub usage: Option<UsageFigure>,
    /// The cost (`data.cost` of a task.result), if the message carried one.
    pub cost: Option<CostFigure>,
}

/// Which usage totals to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    /// Tenant (required).
    pub tenant_id: String,
    /// Only agents of these workspaces; `None` for the whole tenant.
    pub workspace_ids: Option<Vec<String>>,
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only this capability.
    pub capability: Option<String>,
    /// Only days at or after this one (`YYYY-MM-DD`).
    pub since_day: Option<String>,
    /// Only days at or before this one.
    pub until_day: Option<String>,
}

/// Usage summed per agent, capability, day and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageTotal {
    /// The reporting agent.
    pub agent_id: String,
    /// The capability, if the messages named one.
    pub capability: Option<String>,
    /// The UTC day.
    pub day: String,
    /// The usage figures' `reported_by`; `None` for messages that reported only a cost.
    pub reported_by: Option<String>,
    /// The cost's currency, when costs were reported.
    pub currency: Option<String>,
    /// The cost's `source`; `None` when unstated.
    pub cost_source: Option<String>,
    /// Messages summed.
    pub messages: u64,
    /// Summed counts.
    pub tokens: Tokens,
    /// Summed cost, millionths of `currency`.
    pub cost_micros: i64,
}

/// A signed-in console session. The session id is a random secret held in an HttpOnly cookie and
/// stored only as its SHA-256; every request re-checks the user token it was opened with, so a
/// revoked token or a suspended tenant signs the session out on every replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSessionRow {
    /// SHA-256 of the session id.
    pub id_hash: [u8; 32],
    /// The signed-in user.
    pub user_id: String,
    /// SHA-256 of the user token the session was opened with.
    pub token_hash: [u8; 32],
    /// The session's CSRF token, embedded in every form it is shown.
    pub csrf: String,
    /// Sign-in time.
    pub created_at: i64,
    /// When the session ends whatever happens.
    pub expires_at: i64,
}

/// A conversation as a list shows it: the messages of it the viewer may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationSummary {
    /// The `cnv_` id.
    pub conversation_id: String,
    /// Messages the viewer may read.
    pub messages: u64,
    /// The first one's `received_at`.
    pub first_at: i64,
    /// The last one's `received_at`.
    pub last_at: i64,
    /// The last message the viewer may read.
    pub last: MessageRow,
}

/// One inbox copy of a message and how far its delivery got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyState {
    /// The stored message (its storage sequence).
    pub message_seq: i64,
    /// The inbox's agent.
    pub agent_id: String,
    /// The inbox sequence.
    pub sequence: u64,
    /// Its state.
    pub state: EntryState,
    /// Deliveries so far.
    pub attempts: u32,
    /// Last delivery time.
    pub last_attempt_at: Option<i64>,
    /// When the recipient reported it shown in a session's context (its receipt).
    pub shown_at: Option<i64>,
}

/// The grouping of a usage total: agent, capability, day, reported_by, currency, cost source.
pub(crate) type UsageKey = (
    String,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// One stored usage row as both backends read it: its grouping, its seven token counts (in
/// [`Tokens`] field order) and its cost.
pub(crate) type UsageFigures = (UsageKey, [i64; 7], Option<i64>);

/// Sums usage rows per grouping, in Rust rather than SQL: a sender chooses its figures, and SQL
/// sums fail on an overflow (SQLite) or widen to numeric (PostgreSQL), where these saturate.
/// Newest day first; within a day by agent, capability and source.
pub(crate) fn sum_usage(rows: impl IntoIterator<Item = UsageFigures>) -> Vec<UsageTotal> {
    let mut sums: std::collections::BTreeMap<UsageKey, UsageTotal> = Default::default();
    for (key, n, cost) in rows {
        let t = sums.entry(key.clone()).or_insert_with(|| UsageTotal {
            agent_id: key.0,
            capability: key.1,
            day: key.2,
            reported_by: key.3,
            currency: key.4,
            cost_source: key.5,
            messages: 0,
            tokens: Tokens::default(),
            cost_micros: 0,
        });
        t.messages += 1;
        let k = &mut t.tokens;
        k.input = k.input.saturating_add(n[0]);
        k.output = k.output.saturating_add(n[1]);
        k.cache_read = k.cache_read.saturating_add(n[2]);
        k.cache_write = k.cache_write.saturating_add(n[3]);
        k.reasoning = k.reasoning.saturating_add(n[4]);
        k.requests = k.requests.saturating_add(n[5]);
        k.wall_ms = k.wall_ms.saturating_add(n[6]);
        t.cost_micros = t.cost_micros.saturating_add(cost.unwrap_or(0));
    }
    let mut out: Vec<UsageTotal> = sums.into_values().collect();
    out.sort_by(|a, b| b.day.cmp(&a.day).then_with(|| a.agent_id.cmp(&b.agent_id)));
    out
}

/// Gives each recipient's delivery state its first answer and first ack among `answers` (the
/// envelopes correlated to message `id`, oldest first, each with its sender), and names the
/// message in its shown receipt.
pub(crate) fn fill_answers(d: &mut DeliveryStateRow, answers: &[(String, AnswerRow)], id: &str) {
    let mine = || {
        answers
            .iter()
            .filter(|(a, _)| *a == d.agent_id)
            .map(|(_, x)| x)
    };
    d.answer = mine().find(|a| a.kind != "agentbus.ack.v1").cloned();
    d.ack = mine().find(|a| a.kind == "agentbus.ack.v1").cloned();
    if let Some(s) = d.shown.as_mut() {
        s.message_id = id.to_owned();
    }
}
