//! The one door for front ends (the console, and any later one): a [`Caller`] is the app seen by
//! one signed-in principal, and every read or change it offers is scoped to what that principal
//! may see or do, as the HTTP routes scope them. Front ends never reach the store ([`App`]'s store
//! handle is private to this crate) or the feature modules (private too): what they need is here.
//!
//! What the door hands out are views, defined here: what a front end shows, decoded and typed
//! (task states, state machines, timelines' warnings), never a stored row with its storage
//! encodings (sealed bytes, attribute and card text, row versions). The kit's architecture test
//! `the_door_hands_out_views_not_rows` holds this module to that.
//!
//! Sessions of a front end (sign-in) come before there is a caller: [`Door`] holds those.

use axum::response::Response;
use serde_json::{Map, Value};

use agentbus_protocol::task::{Task, TaskState};
use agentbus_store as store;
use agentbus_store::Store;

use crate::state::Principal;

pub use crate::error::{ApiError, ApiResult};
pub use crate::metrics::Counters;
pub use crate::state::App;
pub use crate::tasks::ListQuery;
pub use crate::usage::UsageQuery;
pub use crate::views::{CopyProgress, RecipientState, Verification};

/// SHA-256 of a bearer token, the form a session keeps it in.
pub fn token_hash(token: &str) -> [u8; 32] {
    crate::auth::token_hash(token)
}

/// Millionths of a currency unit written as a decimal with six places (`"0.420000"`).
pub use crate::usage::amount;

/// The UTC day of an instant, `YYYY-MM-DD`.
pub use crate::usage::day_of;

/// The gateway's counters, all of them or those of the workspaces `only` accepts.
pub fn counters(only: Option<&dyn Fn(&str) -> bool>) -> Counters {
    crate::metrics::counters(only)
}

/// Calls `each` with the counters of every workspace the gateway has counted for (one pass, one
/// lock), for a front end that samples them all at once.
pub fn each_workspace_counters(each: impl FnMut(&str, &Counters)) {
    crate::metrics::each_workspace(each)
}

// Views.

/// A user's role (docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Administers the gateway's tenants; belongs to no tenant.
    Operator,
    /// Administers every workspace of its tenant.
    TenantAdmin,
    /// Administers one workspace.
    Admin,
    /// May register and manage its own agents.
    Member,
}

impl From<store::Role> for Role {
    fn from(r: store::Role) -> Role {
        match r {
            store::Role::Operator => Role::Operator,
            store::Role::TenantAdmin => Role::TenantAdmin,
            store::Role::Admin => Role::Admin,
            store::Role::Member => Role::Member,
        }
    }
}

/// A user (a person with an integration token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserView {
    /// Its `usr_` id.
    pub id: String,
    /// Its tenant (empty for the gateway operator).
    pub tenant_id: String,
    /// Its home workspace (empty for the gateway operator).
    pub workspace_id: String,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// When it was created (ms).
    pub created_at: i64,
}

impl From<&store::UserRow> for UserView {
    fn from(u: &store::UserRow) -> UserView {
        UserView {
            id: u.id.clone(),
            tenant_id: u.tenant_id.clone(),
            workspace_id: u.workspace_id.clone(),
            name: u.name.clone(),
            role: u.role.into(),
            created_at: u.created_at,
        }
    }
}

/// A principal a [`Door`] authenticated, active when it was: what a [`Caller`] is built from.
/// What it is stays inside the gateway; a front end asks it only for its user.
#[derive(Debug, Clone)]
pub struct SignedIn(Principal);

impl SignedIn {
    /// The user, when a user's token signed in (`None` for an agent's credential).
    pub fn user(&self) -> Option<UserView> {
        match &self.0 {
            Principal::User(u) => Some(u.into()),
            Principal::Agent(_) => None,
        }
    }
}

/// A front end's session (a console sign-in), as stored by the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// SHA-256 of the session id (the cookie holds the id itself).
    pub id_hash: [u8; 32],
    /// The signed-in user.
    pub user_id: String,
    /// SHA-256 of the token the session was opened with, authenticated again on each request.
    pub token_hash: [u8; 32],
    /// The session's CSRF token.
    pub csrf: String,
    /// When it was opened (ms).
    pub created_at: i64,
    /// When it ends (ms).
    pub expires_at: i64,
}

impl From<store::ConsoleSessionRow> for ConsoleSession {
    fn from(s: store::ConsoleSessionRow) -> ConsoleSession {
        ConsoleSession {
            id_hash: s.id_hash,
            user_id: s.user_id,
            token_hash: s.token_hash,
            csrf: s.csrf,
            created_at: s.created_at,
            expires_at: s.expires_at,
        }
    }
}

impl ConsoleSession {
    /// The row the store keeps it as.
    fn into_row(self) -> store::ConsoleSessionRow {
        store::ConsoleSessionRow {
            id_hash: self.id_hash,
            user_id: self.user_id,
            token_hash: self.token_hash,
            csrf: self.csrf,
            created_at: self.created_at,
            expires_at: self.expires_at,
        }
    }
}

/// An agent of the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentView {
    /// Its `agt_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// Its name in its workspace.
    pub name: String,
    /// Its canonical address (§4.1).
    pub address: String,
    /// Who may see it (`workspace`, `tenant`, …).
    pub visibility: String,
    /// The `usr_` id of the user who owns it, if one does.
    pub owner_id: Option<String>,
    /// When it was registered (ms).
    pub created_at: i64,
    /// When it was suspended (ms), while it is.
    pub suspended_at: Option<i64>,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantView {
    /// Its `ten_` id.
    pub id: String,
    /// Its slug.
    pub slug: String,
    /// When it was created (ms).
    pub created_at: i64,
    /// When it was suspended (ms), while it is.
    pub suspended_at: Option<i64>,
}

impl From<store::TenantRow> for TenantView {
    fn from(t: store::TenantRow) -> TenantView {
        TenantView {
            id: t.id,
            slug: t.slug,
            created_at: t.created_at,
            suspended_at: t.suspended_at,
        }
    }
}

/// A workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceView {
    /// Its `wsp_` id.
    pub id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Its slug.
    pub slug: String,
    /// When it was created (ms).
    pub created_at: i64,
}

impl From<store::WorkspaceRow> for WorkspaceView {
    fn from(w: store::WorkspaceRow) -> WorkspaceView {
        WorkspaceView {
            id: w.id,
            tenant_id: w.tenant_id,
            slug: w.slug,
            created_at: w.created_at,
        }
    }
}

/// A topic (§4.4) and its subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    /// Its workspace.
    pub workspace: WorkspaceView,
    /// Its name.
    pub name: String,
    /// When it was created (ms).
    pub created_at: i64,
    /// The `agt_` ids of its subscribers.
    pub subscribers: Vec<String>,
}

/// An agent a caller manages, as an overview lists it.
#[derive(Debug, Clone)]
pub struct ManagedAgent {
    /// The agent.
    pub agent: AgentView,
    /// `online` or `offline`.
    pub presence: &'static str,
    /// How many entries its inbox holds that were not acknowledged.
    pub pending: u64,
}

/// A task (§6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    /// Its `tsk_` id.
    pub id: String,
    /// The requester's workspace.
    pub workspace_id: String,
    /// The requester's `agt_` id.
    pub requester_id: String,
    /// The worker's `agt_` id.
    pub recipient_id: String,
    /// The `msg_` id of its `task.request`.
    pub request_id: String,
    /// Its conversation.
    pub conversation_id: String,
    /// The capability requested.
    pub capability: String,
    /// Its state.
    pub state: TaskState,
    /// Whether the state is final.
    pub terminal: bool,
    /// Its state machine: limits, timers and deadlines.
    pub machine: Task,
    /// When it was requested (ms).
    pub created_at: i64,
    /// When it last changed (ms).
    pub updated_at: i64,
    /// Its position in a task list: the `before` of the page after it.
    pub cursor: String,
}

impl From<&store::TaskRow> for TaskView {
    fn from(t: &store::TaskRow) -> TaskView {
        let machine = crate::tasks::machine_of(t);
        TaskView {
            id: t.id.clone(),
            workspace_id: t.workspace_id.clone(),
            requester_id: t.requester_id.clone(),
            recipient_id: t.recipient_id.clone(),
            request_id: t.request_id.clone(),
            conversation_id: t.conversation_id.clone(),
            capability: t.capability.clone(),
            state: machine.state,
            terminal: t.terminal,
            machine,
            created_at: t.created_at,
            updated_at: t.updated_at,
            cursor: crate::tasks::task_cursor(t),
        }
    }
}

/// An entry of a task's timeline: a transition, a timer, a late or ignored envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEventView {
    /// When (ms).
    pub at: i64,
    /// Who: `agent:<agt_ id>`, `user:<usr_ id>` (an admin) or `system` (a timer).
    pub actor: String,
    /// The envelope that made the change, if one did.
    pub envelope_id: Option<String>,
    /// The envelope's type, or `timer`.
    pub kind: String,
    /// The state before.
    pub from: String,
    /// The state after.
    pub to: String,
    /// The envelope came after the task ended (§6.1).
    pub late: bool,
    /// The envelope changed nothing.
    pub ignored: bool,
    /// The timer that fired, if one did.
    pub timer: Option<String>,
    /// The warnings recorded with the change (each `{code, message, …}`).
    pub warnings: Vec<Value>,
    /// The reason an admin gave for a cancel.
    pub reason: Option<String>,
}

impl From<store::TaskEventRow> for TaskEventView {
    fn from(e: store::TaskEventRow) -> TaskEventView {
        TaskEventView {
            late: e.flag.as_deref() == Some("late"),
            ignored: e.flag.as_deref() == Some("ignored"),
            warnings: e
                .warnings
                .as_deref()
                .and_then(|w| serde_json::from_str::<Vec<Value>>(w).ok())
                .unwrap_or_default(),
            at: e.at,
            actor: e.actor,
            envelope_id: e.envelope_id,
            kind: e.kind,
            from: e.from_state,
            to: e.to_state,
            timer: e.timer,
            reason: e.reason,
        }
    }
}

/// A stored message, as lists show it (its envelope is read apart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    /// Its `msg_` id.
    pub id: String,
    /// Its type.
    pub kind: String,
    /// Its sender's address.
    pub source: String,
    /// Its sender's `agt_` id; `None` for a notice of the gateway.
    pub source_agent_id: Option<String>,
    /// Its recipient as addressed.
    pub to: String,
    /// Its conversation.
    pub conversation_id: String,
    /// Its task, if it belongs to one.
    pub task_id: Option<String>,
    /// When the gateway received it (ms).
    pub received_at: i64,
    /// When it expires (ms).
    pub expires_at: i64,
}

impl From<&store::MessageRow> for MessageView {
    fn from(m: &store::MessageRow) -> MessageView {
        MessageView {
            id: m.id.clone(),
            kind: m.kind.clone(),
            source: m.source.clone(),
            source_agent_id: m.source_agent_id.clone(),
            to: m.to_text.clone(),
            conversation_id: m.conversation_id.clone(),
            task_id: m.task_id.clone(),
            received_at: m.received_at,
            expires_at: m.expires_at,
        }
    }
}

/// A conversation in a list: its extent and its last message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationView {
    /// Its `cnv_` id.
    pub id: String,
    /// How many messages the caller may read in it.
    pub messages: u64,
    /// Its first message's time (ms).
    pub first_at: i64,
    /// Its last message's time (ms).
    pub last_at: i64,
    /// Its last message.
    pub last: MessageView,
    /// The last message's `subject`, if it has one.
    pub last_subject: Option<String>,
    /// The first line of the last message's text (a request's instructions), if it has any.
    pub last_line: Option<String>,
    /// The addresses that sent or were sent the messages the caller may read in it, each once,
    /// in the order they first appear.
    pub participants: Vec<String>,
    /// Its position in the list: the `before` of the page after it.
    pub cursor: String,
}

impl From<&store::ConversationSummary> for ConversationView {
    fn from(c: &store::ConversationSummary) -> ConversationView {
        let attrs: Map<String, Value> = serde_json::from_str(&c.last.attrs).unwrap_or_default();
        ConversationView {
            id: c.conversation_id.clone(),
            messages: c.messages,
            first_at: c.first_at,
            last_at: c.last_at,
            last: (&c.last).into(),
            last_subject: attrs
                .get("subject")
                .and_then(Value::as_str)
                .map(str::to_owned),
            last_line: None,
            participants: Vec::new(),
            cursor: crate::identity::conversation_cursor(c),
        }
    }
}

/// A message of a thread, opened: its envelope as delivered, whether its signature verifies,
/// and where each copy of it is.
#[derive(Debug, Clone)]
pub struct ThreadMessage {
    /// The message.
    pub message: MessageView,
    /// Its envelope as delivered (`data` opened).
    pub envelope: Value,
    /// Whether its signature verifies now.
    pub verification: Verification,
    /// Each recipient's copy and how far it got.
    pub recipients: Vec<RecipientState>,
}

/// One page of a conversation's messages, in `received_at` order.
#[derive(Debug, Clone)]
pub struct ThreadView {
    /// How many messages the caller may read in it.
    pub total: usize,
    /// This page's number, from 1 (the asked one, within the pages there are).
    pub page: usize,
    /// How many pages there are (at least 1).
    pub pages: usize,
    /// This page's messages.
    pub messages: Vec<ThreadMessage>,
}

/// A message of a task, with its envelope as delivered (`data` opened).
#[derive(Debug, Clone)]
pub struct TaskMessage {
    /// The message.
    pub message: MessageView,
    /// Its envelope.
    pub envelope: Value,
}

/// A task in a list, with the first line of its instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSummary {
    /// The task.
    pub task: TaskView,
    /// The first line of its request's `instructions`, if it has any.
    pub instructions: Option<String>,
}

/// A copy of a message that was dead-lettered: delivered as often as allowed, never acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterView {
    /// The message.
    pub message: MessageView,
    /// The `agt_` id of the recipient whose copy it was.
    pub recipient_id: String,
    /// Deliveries tried.
    pub attempts: u32,
    /// The last delivery (ms), if one was made.
    pub last_attempt_at: Option<i64>,
}

/// The first non-blank line of a text, trimmed.
fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

/// The first line of what an opened envelope says: its `text`, a request's `instructions`, or
/// else the body a harness is shown.
fn first_line_of(envelope: &Value) -> Option<String> {
    let data = &envelope["data"];
    if let Some(t) = data["text"].as_str().or(data["instructions"].as_str()) {
        return first_line(t);
    }
    let map = envelope.as_object().cloned().unwrap_or_default();
    first_line(&agentbus_protocol::frame::envelope_body(
        &agentbus_protocol::envelope::Envelope::from_map(map),
    ))
}

/// Token counts of a usage report (§5.5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Input tokens.
    pub input: i64,
    /// Output tokens.
    pub output: i64,
    /// Tokens read from a cache.
    pub cache_read: i64,
    /// Tokens written to a cache.
    pub cache_write: i64,
    /// Reasoning tokens.
    pub reasoning: i64,
    /// Model requests.
    pub requests: i64,
    /// Wall time (ms).
    pub wall_ms: i64,
}

impl From<&store::Tokens> for Tokens {
    fn from(t: &store::Tokens) -> Tokens {
        Tokens {
            input: t.input,
            output: t.output,
            cache_read: t.cache_read,
            cache_write: t.cache_write,
            reasoning: t.reasoning,
            requests: t.requests,
            wall_ms: t.wall_ms,
        }
    }
}

/// A usage total: one agent's, capability's and day's figures of one source and currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageView {
    /// The reporting agent.
    pub agent_id: String,
    /// The capability, if the messages named one.
    pub capability: Option<String>,
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// Who measured the tokens (`reported_by`).
    pub reported_by: Option<String>,
    /// The cost's currency, if a cost was reported.
    pub currency: Option<String>,
    /// Where the cost figure came from (`source`).
    pub cost_source: Option<String>,
    /// Messages summed.
    pub messages: u64,
    /// Tokens summed.
    pub tokens: Tokens,
    /// Cost summed, in millionths of the currency.
    pub cost_micros: i64,
}

impl From<store::UsageTotal> for UsageView {
    fn from(t: store::UsageTotal) -> UsageView {
        UsageView {
            tokens: (&t.tokens).into(),
            agent_id: t.agent_id,
            capability: t.capability,
            day: t.day,
            reported_by: t.reported_by,
            currency: t.currency,
            cost_source: t.cost_source,
            messages: t.messages,
            cost_micros: t.cost_micros,
        }
    }
}

/// The usage one envelope reports (§5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Who measured it.
    pub reported_by: String,
    /// The model's provider, if named.
    pub provider: Option<String>,
    /// The model, if named.
    pub model: Option<String>,
    /// The counts.
    pub tokens: Tokens,
}

/// The cost one task result reports (§5.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedCost {
    /// Its currency.
    pub currency: String,
    /// The amount, in millionths.
    pub micros: i64,
    /// Where the figure came from, if said.
    pub source: Option<String>,
}

/// What an envelope reports, as the usage report reads it: its usage figure and its cost.
/// `attrs` are the envelope's attributes, `data` its `data`, `kind` its `type`.
pub fn reported(
    attrs: &Map<String, Value>,
    data: &Value,
    kind: &str,
) -> (Option<ReportedUsage>, Option<ReportedCost>) {
    let (_, usage, cost) = crate::usage::figures(attrs, data, kind);
    (
        usage.map(|u| ReportedUsage {
            tokens: (&u.tokens).into(),
            reported_by: u.reported_by,
            provider: u.provider,
            model: u.model,
        }),
        cost.map(|c| ReportedCost {
            currency: c.currency,
            micros: c.micros,
            source: c.source,
        }),
    )
}

// The door.

/// Operations before a caller is known: authenticating a token, and a front end's sessions.
#[derive(Clone, Copy)]
pub struct Door<'a> {
    app: &'a App,
}

impl<'a> Door<'a> {
    /// The door of `app`.
    pub fn new(app: &'a App) -> Door<'a> {
        Door { app }
    }

    /// The active principal `token` authenticates, as the API checks a bearer token.
    pub async fn sign_in(&self, token: &str) -> ApiResult<SignedIn> {
        let who = self.app.authenticate(token).await?;
        crate::roles::ensure_active(self.app, &who).await?;
        Ok(SignedIn(who))
    }

    /// The principal a token hash (kept by a session) authenticates, if it still does, and its
    /// tenant and agent are active.
    pub async fn resume(&self, token_hash: [u8; 32]) -> ApiResult<SignedIn> {
        let who = self.app.authenticate_hash(token_hash).await?;
        crate::roles::ensure_active(self.app, &who).await?;
        Ok(SignedIn(who))
    }

    /// A console session by the hash of its id, unless it has ended.
    pub async fn console_session(&self, id_hash: [u8; 32]) -> ApiResult<Option<ConsoleSession>> {
        let now = self.app.now();
        Ok(self
            .app
            .store
            .console_session(id_hash)
            .await?
            .filter(|s| s.expires_at > now)
            .map(ConsoleSession::from))
    }

    /// Ends a console session.
    pub async fn end_console_session(&self, id_hash: [u8; 32]) -> ApiResult<()> {
        Ok(self.app.store.delete_console_session(id_hash).await?)
    }

    /// Stores a new console session, forgetting those that ended.
    pub async fn open_console_session(&self, session: ConsoleSession) -> ApiResult<()> {
        self.app
            .store
            .purge_console_sessions(self.app.now())
            .await?;
        Ok(self
            .app
            .store
            .create_console_session(session.into_row())
            .await?)
    }
}

// The caller.

/// The app as one principal may use it.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    app: &'a App,
    who: &'a Principal,
}

impl<'a> Caller<'a> {
    /// `who` at `app`: a [`Door`] signed `who` in.
    pub fn new(app: &'a App, who: &'a SignedIn) -> Caller<'a> {
        Caller { app, who: &who.0 }
    }

    fn operator(&self) -> bool {
        matches!(self.who, Principal::User(u) if u.role == store::Role::Operator)
    }

    /// The view of an agent row a scoped read gave.
    async fn agent_view(&self, a: store::AgentRow) -> ApiResult<AgentView> {
        Ok(AgentView {
            address: self.app.address_of(&a).await?,
            id: a.id,
            tenant_id: a.tenant_id,
            workspace_id: a.workspace_id,
            name: a.name,
            visibility: a.visibility,
            owner_id: a.owner_id,
            created_at: a.created_at,
            suspended_at: a.suspended_at,
        })
    }

    /// Whether the caller administers a workspace of a tenant (an admin's scope covers it).
    pub fn administers(&self, tenant_id: &str, workspace_id: &str) -> bool {
        crate::roles::administers(self.who, tenant_id, workspace_id)
    }

    /// Whether the caller is an admin of any scope (may cancel tasks, edit policies).
    pub fn is_admin(&self) -> bool {
        crate::roles::admin_scope(self.who).is_some()
    }

    /// The canonical address of agent `id` when the caller's tenant holds it (every tenant's for
    /// the gateway operator), else `None`: a label for an id the caller was shown.
    pub async fn agent_label(&self, id: &str) -> ApiResult<Option<String>> {
        match self.app.agent_row(id).await? {
            Some(a) if self.operator() || a.tenant_id == self.who.tenant_id() => {
                Ok(Some(self.app.address_of(&a).await?))
            }
            _ => Ok(None),
        }
    }

    /// The slug of workspace `id` when the caller's tenant holds it (any for the operator).
    pub async fn workspace_label(&self, id: &str) -> ApiResult<Option<String>> {
        Ok(self
            .app
            .workspace_row(id)
            .await?
            .filter(|w| self.operator() || w.tenant_id == self.who.tenant_id())
            .map(|w| w.slug))
    }

    /// The slugs of the caller's own tenant and workspace (`None` where it has none).
    pub async fn home(&self) -> ApiResult<(Option<String>, Option<String>)> {
        let (tenant, workspace) = match self.who {
            Principal::User(u) => (&u.tenant_id, &u.workspace_id),
            Principal::Agent(a) => (&a.tenant_id, &a.workspace_id),
        };
        let tenant = self.app.tenant_row(tenant).await?.map(|t| t.slug);
        let workspace = self.app.workspace_row(workspace).await?.map(|w| w.slug);
        Ok((tenant, workspace))
    }

    // Directory.

    /// The agents the caller may see.
    pub async fn directory(&self) -> ApiResult<Vec<AgentView>> {
        let mut out = Vec::new();
        for a in crate::identity::directory(self.app, self.who).await? {
            out.push(self.agent_view(a).await?);
        }
        Ok(out)
    }

    /// An agent the caller may see.
    pub async fn agent(&self, id: &str) -> ApiResult<AgentView> {
        let a = crate::identity::visible_agent(self.app, self.who, id).await?;
        self.agent_view(a).await
    }

    /// The card of an agent the caller may see, with its status, as the API answers it (§10).
    pub async fn card(&self, a: &AgentView) -> ApiResult<Value> {
        let row = self
            .app
            .agent_row(&a.id)
            .await?
            .filter(|row| crate::identity::visible(self.who, row))
            .ok_or_else(ApiError::not_found)?;
        crate::identity::card_json(self.app, &row).await
    }

    /// The agents the caller manages, with their presence and inbox depth.
    pub async fn managed_agents(&self) -> ApiResult<Vec<ManagedAgent>> {
        let mut out = Vec::new();
        for a in crate::identity::directory(self.app, self.who).await? {
            if !crate::identity::may_manage(self.who, &a) {
                continue;
            }
            let (presence, _) = self.app.presence(&a.id);
            out.push(ManagedAgent {
                pending: self.app.store.pending_count(&a.id).await?,
                presence,
                agent: self.agent_view(a).await?,
            });
        }
        Ok(out)
    }

    /// The topics the caller may see, of one workspace or all.
    pub async fn topics(&self, workspace: Option<&str>) -> ApiResult<Vec<TopicView>> {
        Ok(crate::identity::topics_for(self.app, self.who, workspace)
            .await?
            .into_iter()
            .map(|t| TopicView {
                workspace: t.workspace.into(),
                name: t.name,
                created_at: t.created_at,
                subscribers: t.subscribers,
            })
            .collect())
    }

    // Tenants, workspaces, policy.

    /// The tenants (the gateway operator's).
    pub async fn tenants(&self) -> ApiResult<Vec<TenantView>> {
        let list = crate::admin::tenants_for(self.app, self.who).await?;
        Ok(list.into_iter().map(TenantView::from).collect())
    }

    /// Suspends or resumes a tenant (the gateway operator).
    pub async fn set_tenant_suspended(&self, id: &str, suspend: bool) -> ApiResult<TenantView> {
        crate::admin::set_tenant_suspended(self.app, self.who, id, suspend)
            .await
            .map(TenantView::from)
    }

    /// Suspends or resumes an agent the caller administers.
    pub async fn set_agent_suspended(&self, id: &str, suspend: bool) -> ApiResult<AgentView> {
        let a = crate::admin::set_agent_suspended(self.app, self.who, id, suspend).await?;
        self.agent_view(a).await
    }

    /// The workspaces the caller may see.
    pub async fn workspaces(&self) -> ApiResult<Vec<WorkspaceView>> {
        let list = crate::admin::workspaces_for(self.app, self.who).await?;
        Ok(list.into_iter().map(WorkspaceView::from).collect())
    }

    /// The workspaces the caller administers; a caller who is no admin is refused (AB-1002).
    pub async fn administered_workspaces(&self) -> ApiResult<Vec<WorkspaceView>> {
        crate::roles::admin(self.who.clone())?;
        let mut list = self.workspaces().await?;
        list.retain(|w| self.administers(&w.tenant_id, &w.id));
        Ok(list)
    }

    /// A workspace the caller administers, and its policy document.
    pub async fn policy(&self, workspace_id: &str) -> ApiResult<(WorkspaceView, Value)> {
        let (ws, doc) = crate::admin::policy_of(self.app, self.who, workspace_id).await?;
        Ok((ws.into(), doc))
    }

    /// Replaces the policy of a workspace the caller administers; answers the stored document.
    pub async fn replace_policy(&self, workspace_id: &str, document: &[u8]) -> ApiResult<Value> {
        crate::admin::replace_policy(self.app, self.who, workspace_id, document).await
    }

    // Tasks.

    /// The tasks the caller may see, filtered.
    pub async fn tasks(&self, q: &ListQuery) -> ApiResult<Vec<TaskView>> {
        let list = crate::tasks::visible(self.app, self.who, q).await?;
        Ok(list.iter().map(TaskView::from).collect())
    }

    /// The tasks the caller may see, filtered as [`Caller::tasks`], each with the first line of
    /// its instructions (read from its request, which the caller may read with the task).
    pub async fn task_list(&self, q: &ListQuery) -> ApiResult<Vec<TaskSummary>> {
        let list = crate::tasks::visible(self.app, self.who, q).await?;
        let mut out = Vec::with_capacity(list.len());
        for t in &list {
            out.push(self.summary_of(t).await?);
        }
        Ok(out)
    }

    /// A task the caller may see, as [`Caller::task_list`] lists it.
    pub async fn task_summary(&self, id: &str) -> ApiResult<TaskSummary> {
        let row = crate::tasks::readable(self.app, self.who, id).await?;
        self.summary_of(&row).await
    }

    /// A task row a scoped read gave, with the first line of its request's instructions.
    async fn summary_of(&self, t: &store::TaskRow) -> ApiResult<TaskSummary> {
        let messages = self.app.store.task_messages(&t.tenant_id, &t.id).await?;
        let instructions = match messages.iter().find(|m| m.id == t.request_id) {
            Some(m) => first_line(
                crate::identity::envelope(self.app, m).await?["data"]["instructions"]
                    .as_str()
                    .unwrap_or_default(),
            ),
            None => None,
        };
        Ok(TaskSummary {
            task: t.into(),
            instructions,
        })
    }

    /// A task the caller may see, and its messages (its request, lifecycle messages and
    /// notices) in `received_at` order, each with its envelope.
    pub async fn task(&self, id: &str) -> ApiResult<(TaskView, Vec<TaskMessage>)> {
        let (row, messages) = crate::tasks::messages_of(self.app, self.who, id).await?;
        let messages = messages
            .into_iter()
            .map(|(m, envelope)| TaskMessage {
                message: (&m).into(),
                envelope,
            })
            .collect();
        Ok(((&row).into(), messages))
    }

    /// The timeline of a task the caller may see.
    pub async fn task_events(&self, id: &str) -> ApiResult<Vec<TaskEventView>> {
        let row = crate::tasks::readable(self.app, self.who, id).await?;
        let events = self.app.store.task_events(&row.id).await?;
        Ok(events.into_iter().map(TaskEventView::from).collect())
    }

    /// Cancels a task as an admin (§6.1); answers the task and whether this cancel applied.
    pub async fn cancel_task(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> ApiResult<(TaskView, bool)> {
        let (row, applied) = crate::tasks::cancel(self.app, self.who, id, reason).await?;
        Ok(((&row).into(), applied))
    }

    // Conversations.

    /// The conversations the caller takes part in or oversees, newest first, before a cursor.
    pub async fn conversations(
        &self,
        before: Option<&str>,
        limit: u32,
    ) -> ApiResult<Vec<ConversationView>> {
        let list = crate::identity::conversation_list(self.app, self.who, before, limit).await?;
        let mut out = Vec::with_capacity(list.len());
        for c in &list {
            let mut view = ConversationView::from(c);
            // The same messages the caller may read in the thread, so no address shows that the
            // thread would not.
            let rows =
                crate::identity::conversation_rows(self.app, self.who, &c.conversation_id).await?;
            for m in &rows {
                for address in [&m.source, &m.to_text] {
                    if !view.participants.contains(address) {
                        view.participants.push(address.clone());
                    }
                }
            }
            view.last_line = first_line_of(&crate::identity::envelope(self.app, &c.last).await?);
            out.push(view);
        }
        Ok(out)
    }

    /// The dead-lettered copies of messages the caller may read, among the most recently active
    /// conversations it may read (as many as one list page of the API holds), newest first, at
    /// most `limit`.
    pub async fn dead_letters(&self, limit: usize) -> ApiResult<Vec<DeadLetterView>> {
        let list = crate::identity::conversation_list(
            self.app,
            self.who,
            None,
            crate::identity::MAX_CONVERSATIONS,
        )
        .await?;
        let mut out = Vec::new();
        for c in &list {
            let rows =
                crate::identity::conversation_rows(self.app, self.who, &c.conversation_id).await?;
            let states = crate::views::delivery_states(self.app, &rows).await?;
            for (m, copies) in rows.iter().zip(states) {
                for s in copies {
                    if s.progress == CopyProgress::DeadLettered {
                        out.push(DeadLetterView {
                            message: m.into(),
                            recipient_id: s.agent_id,
                            attempts: s.attempts,
                            last_attempt_at: s.last_attempt_at,
                        });
                    }
                }
            }
        }
        out.sort_by(|a, b| {
            b.message
                .received_at
                .cmp(&a.message.received_at)
                .then_with(|| a.message.id.cmp(&b.message.id))
        });
        out.truncate(limit);
        Ok(out)
    }

    /// Page `page` (from 1, kept within the pages there are) of `per_page` messages of a
    /// conversation the caller may read, each opened: its envelope, its verification, and the
    /// delivery states of its copies, whose replies are found among every message the caller
    /// may read in the conversation, not only this page's.
    pub async fn thread(&self, id: &str, page: usize, per_page: usize) -> ApiResult<ThreadView> {
        let rows = crate::identity::conversation_rows(self.app, self.who, id).await?;
        let per_page = per_page.max(1);
        let pages = rows.len().div_ceil(per_page).max(1);
        let page = page.clamp(1, pages);
        let from = (page - 1) * per_page;
        let shown = &rows[from.min(rows.len())..rows.len().min(page * per_page)];
        let mut states = crate::views::delivery_states(self.app, &rows).await?;
        let mut messages = Vec::with_capacity(shown.len());
        for (i, m) in shown.iter().enumerate() {
            let envelope = crate::identity::envelope(self.app, m).await?;
            let verification = crate::views::verification(self.app, m, &envelope).await?;
            let recipients = states
                .get_mut(from + i)
                .map(std::mem::take)
                .unwrap_or_default();
            messages.push(ThreadMessage {
                message: m.into(),
                envelope,
                verification,
                recipients,
            });
        }
        Ok(ThreadView {
            total: rows.len(),
            page,
            pages,
            messages,
        })
    }

    /// A blob the caller may download, as a download: its bytes, `Content-Disposition:
    /// attachment` and the headers the API gives its parties.
    pub async fn attachment(&self, id: &str) -> ApiResult<Response> {
        let (b, bytes) = crate::blobs::content_for(self.app, self.who, id).await?;
        Ok(crate::blobs::attachment(&b, bytes))
    }

    // Search.

    /// What the caller may read matching `query` (`GET /v1/search`'s function): a page of hits,
    /// best first, and the cursor of the next.
    pub async fn search(
        &self,
        query: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> ApiResult<agentbus_api::SearchResults> {
        let p = crate::search::SearchParams {
            q: Some(query.to_owned()),
            cursor: cursor.map(str::to_owned),
            limit: Some(limit),
        };
        crate::search::run(self.app, self.who, &p).await
    }

    // Usage.

    /// The usage totals the caller may see.
    pub async fn usage(&self, q: &UsageQuery) -> ApiResult<Vec<UsageView>> {
        let list = crate::usage::totals(self.app, self.who, q).await?;
        Ok(list.into_iter().map(UsageView::from).collect())
    }
}
