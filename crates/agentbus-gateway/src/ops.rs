//! The one door for front ends (the console, and any later one): a [`Caller`] is the app seen by
//! one principal, and every read or change it offers is scoped to what that principal may see or
//! do, as the HTTP routes scope them. Front ends never reach the store ([`App`]'s store handle is
//! private to this crate) or the feature modules (private too): what they need is here.
//!
//! Sessions of a front end (sign-in) come before there is a caller: [`Door`] holds those.

use serde_json::Value;

use agentbus_store::Store;

pub use crate::error::{ApiError, ApiResult};
// The stored rows the door hands out, named here so a front end needs no dependency on the store
// crate (the architecture test `no_front_end_depends_on_the_store` holds it to that).
pub use crate::identity::TopicView;
pub use crate::metrics::Counters;
pub use crate::roles::AdminScope;
pub use crate::state::{App, Principal};
pub use crate::tasks::ListQuery;
pub use crate::usage::UsageQuery;
pub use crate::views::{CopyProgress, RecipientState, Verification};
pub use agentbus_store::{
    AgentRow, BlobRow, ConsoleSessionRow, ConversationSummary, MessageRow, Role, TaskEventRow,
    TaskRow, TenantRow, Tokens, UsageFigure, UsageTotal, UserRow, WorkspaceRow,
};

/// SHA-256 of a bearer token, the form a session keeps it in.
pub fn token_hash(token: &str) -> [u8; 32] {
    crate::auth::token_hash(token)
}

/// The figures of one usage or cost field of a message (see the usage report).
pub use crate::usage::{amount, day_of, figures};

/// A task's state machine as stored, for drawing its timeline.
pub use crate::tasks::machine_of;

/// The paging cursors of the task and conversation lists.
pub use crate::identity::conversation_cursor;
pub use crate::tasks::task_cursor;

/// A blob's bytes as a download, with its headers.
pub use crate::blobs::attachment;

/// Whether a principal administers a workspace, and what it administers.
pub use crate::roles::{admin_scope, administers};

/// Whether a principal may manage (suspend, edit) an agent.
pub use crate::identity::may_manage;

/// The gateway's counters, all of them or those of the workspaces `only` accepts.
pub fn counters(only: Option<&dyn Fn(&str) -> bool>) -> Counters {
    crate::metrics::counters(only)
}

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
    pub async fn sign_in(&self, token: &str) -> ApiResult<Principal> {
        let who = self.app.authenticate(token).await?;
        crate::roles::ensure_active(self.app, &who).await?;
        Ok(who)
    }

    /// The principal a token hash (kept by a session) authenticates, if it still does, and its
    /// tenant and agent are active.
    pub async fn resume(&self, token_hash: [u8; 32]) -> ApiResult<Principal> {
        let who = self.app.authenticate_hash(token_hash).await?;
        crate::roles::ensure_active(self.app, &who).await?;
        Ok(who)
    }

    /// A console session by the hash of its id, unless it has ended.
    pub async fn console_session(&self, id_hash: [u8; 32]) -> ApiResult<Option<ConsoleSessionRow>> {
        let now = self.app.now();
        Ok(self
            .app
            .store
            .console_session(id_hash)
            .await?
            .filter(|s| s.expires_at > now))
    }

    /// Ends a console session.
    pub async fn end_console_session(&self, id_hash: [u8; 32]) -> ApiResult<()> {
        Ok(self.app.store.delete_console_session(id_hash).await?)
    }

    /// Stores a new console session, forgetting those that ended.
    pub async fn open_console_session(&self, row: ConsoleSessionRow) -> ApiResult<()> {
        self.app
            .store
            .purge_console_sessions(self.app.now())
            .await?;
        Ok(self.app.store.create_console_session(row).await?)
    }
}

/// An agent a caller manages, as an overview lists it.
#[derive(Debug, Clone)]
pub struct ManagedAgent {
    /// The agent.
    pub agent: AgentRow,
    /// Its canonical address.
    pub address: String,
    /// `online` or `offline`.
    pub presence: &'static str,
    /// How many entries its inbox holds that were not acknowledged.
    pub pending: u64,
}

/// The app as one principal may use it.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    app: &'a App,
    who: &'a Principal,
}

impl<'a> Caller<'a> {
    /// `who` at `app`: `who` was authenticated (a [`Door`] gives it).
    pub fn new(app: &'a App, who: &'a Principal) -> Caller<'a> {
        Caller { app, who }
    }

    /// The principal.
    pub fn who(&self) -> &Principal {
        self.who
    }

    /// The canonical address of agent `id` when the caller's tenant holds it (every tenant's for
    /// the gateway operator), else `None`: a label for an id the caller was shown.
    pub async fn agent_label(&self, id: &str) -> ApiResult<Option<String>> {
        let operator = matches!(self.who, Principal::User(u) if u.role == Role::Operator);
        match self.app.agent_row(id).await? {
            Some(a) if operator || a.tenant_id == self.who.tenant_id() => {
                Ok(Some(self.app.address_of(&a).await?))
            }
            _ => Ok(None),
        }
    }

    /// The canonical address of an agent the caller was shown (of its tenant; any for the
    /// operator, whose rows are every tenant's).
    pub async fn address(&self, a: &AgentRow) -> ApiResult<String> {
        let operator = matches!(self.who, Principal::User(u) if u.role == Role::Operator);
        if !operator && a.tenant_id != self.who.tenant_id() {
            return Err(ApiError::not_found());
        }
        self.app.address_of(a).await
    }

    /// The slug of workspace `id` when the caller's tenant holds it (any for the operator).
    pub async fn workspace_label(&self, id: &str) -> ApiResult<Option<String>> {
        let operator = matches!(self.who, Principal::User(u) if u.role == Role::Operator);
        Ok(self
            .app
            .workspace_row(id)
            .await?
            .filter(|w| operator || w.tenant_id == self.who.tenant_id())
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
    pub async fn directory(&self) -> ApiResult<Vec<AgentRow>> {
        crate::identity::directory(self.app, self.who).await
    }

    /// An agent the caller may see.
    pub async fn agent(&self, id: &str) -> ApiResult<AgentRow> {
        crate::identity::visible_agent(self.app, self.who, id).await
    }

    /// The card of an agent the caller was shown, with its status (§10).
    pub async fn card(&self, a: &AgentRow) -> ApiResult<Value> {
        crate::identity::card_json(self.app, a).await
    }

    /// The agents the caller manages, with their address, presence and inbox depth.
    pub async fn managed_agents(&self) -> ApiResult<Vec<ManagedAgent>> {
        let mut out = Vec::new();
        for a in self.directory().await? {
            if !may_manage(self.who, &a) {
                continue;
            }
            let (presence, _) = self.app.presence(&a.id);
            out.push(ManagedAgent {
                pending: self.app.store.pending_count(&a.id).await?,
                address: self.app.address_of(&a).await?,
                presence,
                agent: a,
            });
        }
        Ok(out)
    }

    /// The topics the caller may see, of one workspace or all.
    pub async fn topics(&self, workspace: Option<&str>) -> ApiResult<Vec<TopicView>> {
        crate::identity::topics_for(self.app, self.who, workspace).await
    }

    // Tenants, workspaces, policy.

    /// The tenants (the gateway operator's).
    pub async fn tenants(&self) -> ApiResult<Vec<TenantRow>> {
        crate::admin::tenants_for(self.app, self.who).await
    }

    /// Suspends or resumes a tenant (the gateway operator).
    pub async fn set_tenant_suspended(&self, id: &str, suspend: bool) -> ApiResult<TenantRow> {
        crate::admin::set_tenant_suspended(self.app, self.who, id, suspend).await
    }

    /// Suspends or resumes an agent the caller administers.
    pub async fn set_agent_suspended(&self, id: &str, suspend: bool) -> ApiResult<AgentRow> {
        crate::admin::set_agent_suspended(self.app, self.who, id, suspend).await
    }

    /// The workspaces the caller may see.
    pub async fn workspaces(&self) -> ApiResult<Vec<WorkspaceRow>> {
        crate::admin::workspaces_for(self.app, self.who).await
    }

    /// The workspaces the caller administers; a caller who is no admin is refused (AB-1002).
    pub async fn administered_workspaces(&self) -> ApiResult<Vec<WorkspaceRow>> {
        crate::roles::admin(self.who.clone())?;
        let mut list = self.workspaces().await?;
        list.retain(|w| administers(self.who, &w.tenant_id, &w.id));
        Ok(list)
    }

    /// A workspace the caller administers, and its policy document.
    pub async fn policy(&self, workspace_id: &str) -> ApiResult<(WorkspaceRow, Value)> {
        crate::admin::policy_of(self.app, self.who, workspace_id).await
    }

    /// Replaces the policy of a workspace the caller administers; answers the stored document.
    pub async fn replace_policy(&self, workspace_id: &str, document: &[u8]) -> ApiResult<Value> {
        crate::admin::replace_policy(self.app, self.who, workspace_id, document).await
    }

    // Tasks.

    /// The tasks the caller may see, filtered.
    pub async fn tasks(&self, q: &ListQuery) -> ApiResult<Vec<TaskRow>> {
        crate::tasks::visible(self.app, self.who, q).await
    }

    /// A task the caller may see, and its messages with their envelopes.
    pub async fn task(&self, id: &str) -> ApiResult<(TaskRow, Vec<(MessageRow, Value)>)> {
        crate::tasks::messages_of(self.app, self.who, id).await
    }

    /// The timeline of a task the caller may see.
    pub async fn task_events(&self, id: &str) -> ApiResult<Vec<TaskEventRow>> {
        let row = crate::tasks::readable(self.app, self.who, id).await?;
        Ok(self.app.store.task_events(&row.id).await?)
    }

    /// Cancels a task as an admin (§6.1); answers the task and whether this cancel applied.
    pub async fn cancel_task(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> ApiResult<(TaskRow, bool)> {
        crate::tasks::cancel(self.app, self.who, id, reason).await
    }

    // Conversations.

    /// The conversations the caller takes part in or oversees, newest first, before a cursor.
    pub async fn conversations(
        &self,
        before: Option<&str>,
        limit: u32,
    ) -> ApiResult<Vec<ConversationSummary>> {
        crate::identity::conversation_list(self.app, self.who, before, limit).await
    }

    /// The messages of a conversation the caller may read.
    pub async fn conversation(&self, id: &str) -> ApiResult<Vec<MessageRow>> {
        crate::identity::conversation_rows(self.app, self.who, id).await
    }

    /// The envelope of a message of [`Caller::conversation`], as delivered.
    pub async fn envelope(&self, m: &MessageRow) -> ApiResult<Value> {
        self.readable(m)?;
        crate::identity::envelope(self.app, m).await
    }

    /// Whether the signature of a message of [`Caller::conversation`] verifies.
    pub async fn verification(&self, m: &MessageRow, envelope: &Value) -> ApiResult<Verification> {
        self.readable(m)?;
        crate::views::verification(self.app, m, envelope).await
    }

    /// Where each copy of each message of [`Caller::conversation`] is.
    pub async fn delivery_states(
        &self,
        rows: &[MessageRow],
    ) -> ApiResult<Vec<Vec<RecipientState>>> {
        for m in rows {
            self.readable(m)?;
        }
        crate::views::delivery_states(self.app, rows).await
    }

    /// A blob the caller may download, and its bytes.
    pub async fn blob(&self, id: &str) -> ApiResult<(BlobRow, Vec<u8>)> {
        crate::blobs::content_for(self.app, self.who, id).await
    }

    // Usage.

    /// The usage totals the caller may see.
    pub async fn usage(&self, q: &UsageQuery) -> ApiResult<Vec<UsageTotal>> {
        crate::usage::totals(self.app, self.who, q).await
    }

    /// A message row given back to the facade is one of the caller's tenant (the scoped reads
    /// above give no other); a row of another tenant is answered as missing.
    fn readable(&self, m: &MessageRow) -> ApiResult<()> {
        let operator = matches!(self.who, Principal::User(u) if u.role == Role::Operator);
        if operator || m.tenant_id == self.who.tenant_id() {
            Ok(())
        } else {
            Err(ApiError::not_found())
        }
    }
}
