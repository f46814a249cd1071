//! [`Store`] for [`MemoryStore`]: each operation checks what it must under the store's one lock,
//! then changes the rows, so a refusal stores nothing.

use std::cmp::Reverse;
use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeSet, HashSet};

use super::{Entry, MemoryStore, Message, Receipt, State};
use crate::model::{fill_answers, notice_due, owed_page, sum_usage};
use crate::*;

fn conflict(what: impl Into<String>) -> StoreError {
    StoreError::Conflict(what.into())
}

/// Whether a blob is due for deletion at `now` (its upload window starting at `pending_since`):
/// the rule of [`Store::due_blobs`].
fn blob_due(b: &BlobRow, now: i64, pending_since: i64) -> bool {
    if b.complete {
        b.expires_at <= now
    } else {
        b.created_at <= pending_since
    }
}

/// The first `limit` of `rows` (a `u32` limit).
fn first<T>(mut rows: Vec<T>, limit: u32) -> Vec<T> {
    rows.truncate(limit as usize);
    rows
}

impl State {
    fn live_agent(&self, id: &str) -> bool {
        self.agents.get(id).is_some_and(|a| a.deleted_at.is_none())
    }

    fn message_row(&self, seq: i64) -> Option<MessageRow> {
        self.messages.get(&seq).map(|m| m.row.clone())
    }

    /// The entry at `key` as the trait answers it, with its message.
    fn inbox_entry(&self, key: &(String, u64)) -> Option<InboxEntry> {
        let e = self.inbox.get(key)?;
        Some(InboxEntry {
            agent_id: key.0.clone(),
            sequence: key.1,
            state: e.state,
            attempts: e.attempts,
            last_attempt_at: e.last_attempt_at,
            message: self.message_row(e.message_seq)?,
        })
    }

    /// The unsettled entries of an agent's inbox, in inbox order.
    fn pending_of(&self, agent: &str) -> Vec<InboxEntry> {
        let from = (agent.to_owned(), 0);
        self.inbox
            .range(from..)
            .take_while(|(k, _)| k.0 == agent)
            .filter(|(_, e)| matches!(e.state, EntryState::Ready | EntryState::Leased))
            .filter_map(|(k, _)| self.inbox_entry(k))
            .collect()
    }

    /// An inbox's unacknowledged entries.
    fn depth(&self, agent: &str) -> u64 {
        self.counters.get(agent).map_or(0, |c| c.1)
    }

    /// Moves `entries` to `state` (settled), their leases gone, and counts them settled.
    fn settle(&mut self, entries: &[InboxEntry], state: EntryState) {
        for e in entries {
            if let Some(row) = self.inbox.get_mut(&(e.agent_id.clone(), e.sequence)) {
                row.state = state;
                row.lease = None;
            }
            if let Some(c) = self.counters.get_mut(&e.agent_id) {
                c.1 = c.1.saturating_sub(1);
            }
        }
    }

    /// Marks the settled entries `owing` as owing their sender the notice `kind`, replacing a
    /// hold's, those whose sender is a live agent.
    fn flag_owed<'e>(&mut self, owing: impl Iterator<Item = &'e InboxEntry>, kind: NoticeKind) {
        for e in owing {
            let sender_live = e
                .message
                .source_agent_id
                .as_deref()
                .is_some_and(|a| self.live_agent(a));
            if let (true, Some(row)) = (
                sender_live,
                self.inbox.get_mut(&(e.agent_id.clone(), e.sequence)),
            ) {
                row.notice = Some(kind);
                row.hold = false;
            }
        }
    }

    /// Whether `owed` is still owed.
    fn owes(&self, owed: &Owed) -> bool {
        match owed {
            Owed::Entry(agent, sequence, kind) => self
                .inbox
                .get(&(agent.clone(), *sequence))
                .is_some_and(|e| match kind {
                    NoticeKind::Held => e.hold,
                    k => e.notice.is_some_and(|n| n.code() == k.code()),
                }),
            Owed::Task(task, bit) => self.tasks.get(task).is_some_and(|t| t.1 & bit != 0),
        }
    }

    /// Clears the mark of `owed`, which [`State::owes`] found set.
    fn clear_owed(&mut self, owed: &Owed) {
        match owed {
            Owed::Entry(agent, sequence, kind) => {
                if let Some(e) = self.inbox.get_mut(&(agent.clone(), *sequence)) {
                    if *kind == NoticeKind::Held {
                        e.hold = false;
                    } else {
                        e.notice = None;
                    }
                }
            }
            Owed::Task(task, bit) => {
                if let Some(t) = self.tasks.get_mut(task) {
                    t.1 &= !bit;
                }
            }
        }
    }

    /// Whether `viewer` may read `m` (§7, per message).
    fn readable(&self, m: &MessageRow, viewer: &ConversationViewer) -> bool {
        let copies = || {
            self.copies
                .get(&m.seq)
                .into_iter()
                .flatten()
                .map(|(agent, _)| agent)
        };
        let in_workspace =
            |agent: &str, ws: &str| self.agents.get(agent).is_some_and(|a| a.workspace_id == ws);
        match viewer {
            ConversationViewer::Agent(id) => {
                m.source_agent_id.as_deref() == Some(id.as_str()) || copies().any(|a| a == id)
            }
            ConversationViewer::Workspace(ws) => {
                m.source_agent_id
                    .as_deref()
                    .is_some_and(|a| in_workspace(a, ws))
                    || copies().any(|a| in_workspace(a, ws))
            }
            ConversationViewer::Tenant => true,
        }
    }

    /// The checks of setting `aliases` for `agent_id` in `workspace_id`, its own aliases gone:
    /// an alias may not be another live agent's name, nor taken.
    fn check_aliases(
        &self,
        workspace_id: &str,
        agent_id: &str,
        aliases: &[String],
    ) -> StoreResult<()> {
        let mut seen = HashSet::new();
        for alias in aliases {
            let name_clash = self.agents.values().any(|a| {
                a.workspace_id == workspace_id
                    && a.name == *alias
                    && a.deleted_at.is_none()
                    && a.id != agent_id
            });
            let taken = self
                .aliases
                .get(&(workspace_id.to_owned(), alias.clone()))
                .is_some_and(|owner| owner != agent_id);
            if name_clash || taken || !seen.insert(alias) {
                return Err(conflict(format!("alias {alias}")));
            }
        }
        Ok(())
    }

    fn set_aliases(&mut self, workspace_id: &str, agent_id: &str, aliases: Vec<String>) {
        self.aliases.retain(|_, owner| owner != agent_id);
        for alias in aliases {
            self.aliases
                .insert((workspace_id.to_owned(), alias), agent_id.to_owned());
        }
    }

    fn check_tenant(&self, t: &TenantRow) -> StoreResult<()> {
        if self.tenants.contains_key(&t.id) || self.tenants.values().any(|x| x.slug == t.slug) {
            return Err(conflict("tenant"));
        }
        Ok(())
    }

    fn check_workspace(&self, w: &WorkspaceRow, new_tenant: Option<&str>) -> StoreResult<()> {
        if !self.tenants.contains_key(&w.tenant_id) && new_tenant != Some(w.tenant_id.as_str()) {
            return Err(StoreError::Backend(format!(
                "workspace {} names no tenant ({})",
                w.id, w.tenant_id
            )));
        }
        let slug_taken = self
            .workspaces
            .values()
            .any(|x| x.tenant_id == w.tenant_id && x.slug == w.slug);
        if self.workspaces.contains_key(&w.id) || slug_taken {
            return Err(conflict("workspace"));
        }
        Ok(())
    }

    fn check_user(&self, u: &UserRow) -> StoreResult<()> {
        if self.users.iter().any(|x| x.id == u.id) {
            return Err(conflict(format!("user {}", u.id)));
        }
        Ok(())
    }

    fn check_token(&self, t: &TokenRow) -> StoreResult<()> {
        if self.tokens.contains_key(&t.hash) {
            return Err(conflict("token"));
        }
        Ok(())
    }

    /// Checks a task write of a publish; changes nothing.
    fn check_task(&self, w: &TaskWrite) -> StoreResult<()> {
        match w {
            TaskWrite::Create(t, _) if self.tasks.contains_key(&t.id) => {
                Err(conflict(format!("task {}", t.id)))
            }
            TaskWrite::Create(..) => Ok(()),
            TaskWrite::Update(t, expected, _) => {
                if self
                    .tasks
                    .get(&t.id)
                    .is_some_and(|x| x.0.version == *expected)
                {
                    Ok(())
                } else {
                    Err(conflict(format!("task {} changed concurrently", t.id)))
                }
            }
        }
    }

    /// Applies a task write [`State::check_task`] passed.
    fn write_task(&mut self, w: TaskWrite) {
        match w {
            TaskWrite::Create(t, e) => {
                self.task_events.insert(t.id.clone(), vec![e]);
                self.tasks.insert(t.id.clone(), (t, 0));
            }
            TaskWrite::Update(t, _, e) => {
                if let Some((row, _)) = self.tasks.get_mut(&t.id) {
                    row.state = t.state;
                    row.terminal = t.terminal;
                    row.machine = t.machine;
                    row.next_deadline = t.next_deadline;
                    row.updated_at = t.updated_at;
                    row.version += 1;
                }
                self.task_events.entry(t.id).or_default().push(e);
            }
        }
    }

    fn recent(&self, tenant: &str, source: &str, id: &str, since: i64) -> Option<MessageRow> {
        let key = (tenant.to_owned(), source.to_owned(), id.to_owned());
        let (seq, at) = self.recent_ids.get(&key)?;
        (*at >= since).then(|| self.message_row(*seq)).flatten()
    }

    fn idempotent(&self, key: &IdempotencyKey, since: i64) -> Option<MessageRow> {
        let (seq, at) = self.idempotency.get(key)?;
        (*at >= since).then(|| self.message_row(*seq)).flatten()
    }

    /// The publish of `m`, decided and stored (see [`Store::publish`]).
    fn publish(&mut self, m: NewMessage, seq_step: i64) -> StoreResult<PublishOutcome> {
        if let Some(owed) = &m.notice_of
            && !self.owes(owed)
        {
            return Err(conflict(format!("{owed:?}, sent already,")));
        }
        // As on the database backends, an owed mark is cleared even when the publish then turns
        // out to be a duplicate: the earlier copy was the notice.
        let clear = |s: &mut State| {
            if let Some(owed) = &m.notice_of {
                s.clear_owed(owed);
            }
        };
        if let Some(existing) = self.recent(&m.tenant_id, &m.source, &m.id, m.replay_since) {
            clear(self);
            return Ok(PublishOutcome::DuplicateId(existing));
        }
        if let Some(k) = &m.idempotency
            && let Some(existing) = self.idempotent(k, m.idempotency_since)
        {
            clear(self);
            return Ok(PublishOutcome::IdempotentReplay(existing));
        }
        if let Some(max) = m.max_depth {
            for agent in &m.recipients {
                let depth = self.depth(agent);
                if depth >= max {
                    return Ok(PublishOutcome::InboxFull {
                        agent_id: agent.clone(),
                        depth,
                    });
                }
            }
        }
        if let Some(w) = &m.task {
            self.check_task(w)?;
        }
        if self.receipt_ids.contains(&m.receipt) {
            return Err(conflict(format!("receipt {}", m.receipt)));
        }
        // Everything checked: from here on the publish stores.
        clear(self);
        let seq = self.next_seq;
        self.next_seq += seq_step;
        let row = m.stored_row(seq);
        self.receipt_ids.insert(m.receipt.clone());
        self.messages.insert(
            seq,
            Message {
                row: row.clone(),
                correlation_id: m.correlation_id.clone(),
                search_tags: m
                    .search_tags
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect(),
            },
        );
        self.recent_ids.insert(
            (m.tenant_id.clone(), m.source.clone(), m.id.clone()),
            (seq, m.received_at),
        );
        if let Some(k) = &m.idempotency {
            self.idempotency.insert(k.clone(), (seq, m.received_at));
        }
        let mut sequences = Vec::with_capacity(m.recipients.len());
        let mut depths = Vec::with_capacity(m.recipients.len());
        for agent in &m.recipients {
            let counter = self.counters.entry(agent.clone()).or_insert((0, 0));
            counter.0 += 1;
            counter.1 += 1;
            let (sequence, depth) = *counter;
            // A copy for a suspended recipient is held, owing the sender AB-4013, unless the
            // message is a notice (no sending agent).
            let hold = m.source_agent_id.is_some()
                && self
                    .agents
                    .get(agent)
                    .is_some_and(|a| a.suspended_at.is_some());
            self.inbox.insert(
                (agent.clone(), sequence),
                Entry {
                    message_seq: seq,
                    state: EntryState::Ready,
                    attempts: 0,
                    visible_at: m.received_at,
                    lease: None,
                    expires_at: m.expires_at,
                    last_attempt_at: None,
                    acked_at: None,
                    notice: None,
                    hold,
                },
            );
            self.copies
                .entry(seq)
                .or_default()
                .push((agent.clone(), sequence));
            sequences.push((agent.clone(), sequence));
            depths.push(depth);
        }
        if let Some(w) = m.task {
            self.write_task(w);
        }
        for blob in m.blob_refs {
            self.blob_refs.insert((blob, seq));
        }
        if let Some(u) = m.usage {
            self.usage.insert(seq, u);
        }
        Ok(PublishOutcome::Stored {
            message: row,
            sequences,
            depths,
        })
    }
}

impl Store for MemoryStore {
    async fn create_tenant(&self, t: TenantRow) -> StoreResult<()> {
        self.enter("create_tenant").await?;
        let mut s = self.state()?;
        s.check_tenant(&t)?;
        s.tenants.insert(t.id.clone(), t);
        Ok(())
    }

    async fn tenant(&self, id: &str) -> StoreResult<Option<TenantRow>> {
        self.enter("tenant").await?;
        Ok(self.state()?.tenants.get(id).cloned())
    }

    async fn tenant_by_slug(&self, slug: &str) -> StoreResult<Option<TenantRow>> {
        self.enter("tenant_by_slug").await?;
        let s = self.state()?;
        Ok(s.tenants.values().find(|t| t.slug == slug).cloned())
    }

    async fn tenants(&self) -> StoreResult<Vec<TenantRow>> {
        self.enter("tenants").await?;
        let rows = self.state()?.tenants.values().cloned().collect();
        Ok(self.unordered(rows))
    }

    async fn create_workspace(&self, w: WorkspaceRow) -> StoreResult<()> {
        self.enter("create_workspace").await?;
        let mut s = self.state()?;
        s.check_workspace(&w, None)?;
        s.workspaces.insert(w.id.clone(), w);
        Ok(())
    }

    async fn workspace(&self, id: &str) -> StoreResult<Option<WorkspaceRow>> {
        self.enter("workspace").await?;
        Ok(self.state()?.workspaces.get(id).cloned())
    }

    async fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> StoreResult<Option<WorkspaceRow>> {
        self.enter("workspace_by_slug").await?;
        let s = self.state()?;
        Ok(s.workspaces
            .values()
            .find(|w| w.tenant_id == tenant_id && w.slug == slug)
            .cloned())
    }

    async fn set_workspace_policy(&self, id: &str, policy: String) -> StoreResult<()> {
        self.enter("set_workspace_policy").await?;
        let mut s = self.state()?;
        let w = s.workspaces.get_mut(id).ok_or(StoreError::NotFound)?;
        w.policy = policy;
        Ok(())
    }

    async fn create_user(&self, u: UserRow) -> StoreResult<()> {
        self.enter("create_user").await?;
        let mut s = self.state()?;
        s.check_user(&u)?;
        s.users.push(u);
        Ok(())
    }

    async fn user(&self, id: &str) -> StoreResult<Option<UserRow>> {
        self.enter("user").await?;
        let s = self.state()?;
        Ok(s.users.iter().find(|u| u.id == id).cloned())
    }

    async fn create_token(&self, t: TokenRow) -> StoreResult<()> {
        self.enter("create_token").await?;
        let mut s = self.state()?;
        s.check_token(&t)?;
        s.tokens.insert(t.hash, t);
        Ok(())
    }

    async fn token(&self, hash: [u8; 32]) -> StoreResult<Option<TokenRow>> {
        self.enter("token").await?;
        Ok(self
            .state()?
            .tokens
            .get(&hash)
            .filter(|t| t.revoked_at.is_none())
            .cloned())
    }

    async fn set_tenant_suspended(&self, id: &str, at: Option<i64>) -> StoreResult<()> {
        self.enter("set_tenant_suspended").await?;
        let mut s = self.state()?;
        s.tenants
            .get_mut(id)
            .ok_or(StoreError::NotFound)?
            .suspended_at = at;
        Ok(())
    }

    async fn workspaces(&self, tenant_id: &str) -> StoreResult<Vec<WorkspaceRow>> {
        self.enter("workspaces").await?;
        let s = self.state()?;
        let rows = s
            .workspaces
            .values()
            .filter(|w| w.tenant_id == tenant_id)
            .cloned()
            .collect();
        Ok(self.ordered(rows, |a: &WorkspaceRow, b| a.slug.cmp(&b.slug)))
    }

    async fn users_with_role(&self, role: Role) -> StoreResult<Vec<UserRow>> {
        self.enter("users_with_role").await?;
        let s = self.state()?;
        let rows = s.users.iter().filter(|u| u.role == role).cloned().collect();
        Ok(self.ordered(rows, |a: &UserRow, b| a.created_at.cmp(&b.created_at)))
    }

    async fn users(&self, tenant_id: Option<&str>) -> StoreResult<Vec<UserRow>> {
        self.enter("users").await?;
        let s = self.state()?;
        let rows = s
            .users
            .iter()
            .filter(|u| tenant_id.is_none_or(|t| u.tenant_id == t))
            .cloned()
            .collect();
        Ok(self.ordered(rows, |a: &UserRow, b| a.created_at.cmp(&b.created_at)))
    }

    async fn delete_user(&self, id: &str) -> StoreResult<bool> {
        self.enter("delete_user").await?;
        let mut s = self.state()?;
        let before = s.users.len();
        s.users.retain(|u| u.id != id);
        if s.users.len() == before {
            return Ok(false);
        }
        let subject = TokenSubject::User(id.to_owned());
        s.tokens.retain(|_, t| t.subject != subject);
        s.sessions.retain(|_, c| c.user_id != id);
        Ok(true)
    }

    async fn user_tokens(&self, tenant_id: Option<&str>) -> StoreResult<Vec<TokenRow>> {
        self.enter("user_tokens").await?;
        let s = self.state()?;
        let rows = s
            .tokens
            .values()
            .filter(|t| match &t.subject {
                TokenSubject::User(u) => s
                    .users
                    .iter()
                    .any(|x| &x.id == u && tenant_id.is_none_or(|t| x.tenant_id == t)),
                TokenSubject::Agent(_) => false,
            })
            .cloned()
            .collect();
        Ok(self.ordered(rows, |a: &TokenRow, b| {
            (a.created_at, a.hash).cmp(&(b.created_at, b.hash))
        }))
    }

    async fn revoke_token(&self, hash: [u8; 32], at: i64) -> StoreResult<bool> {
        self.enter("revoke_token").await?;
        let mut s = self.state()?;
        match s.tokens.get_mut(&hash) {
            Some(t) if t.revoked_at.is_none() => {
                t.revoked_at = Some(at);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn provision_tenant(
        &self,
        t: TenantRow,
        w: WorkspaceRow,
        u: UserRow,
        token: TokenRow,
    ) -> StoreResult<()> {
        self.enter("provision_tenant").await?;
        let mut s = self.state()?;
        s.check_tenant(&t)?;
        s.check_workspace(&w, Some(&t.id))?;
        s.check_user(&u)?;
        s.check_token(&token)?;
        s.tenants.insert(t.id.clone(), t);
        s.workspaces.insert(w.id.clone(), w);
        s.users.push(u);
        s.tokens.insert(token.hash, token);
        Ok(())
    }

    async fn create_agent(&self, a: AgentRow, aliases: Vec<String>) -> StoreResult<()> {
        self.enter("create_agent").await?;
        let mut s = self.state()?;
        let name = || conflict(format!("name {}", a.name));
        // A name may not equal a live agent's name or alias in the workspace (§4.1, §4.3).
        if s.aliases
            .contains_key(&(a.workspace_id.clone(), a.name.clone()))
        {
            return Err(name());
        }
        let live_name = a.deleted_at.is_none()
            && s.agents.values().any(|x| {
                x.workspace_id == a.workspace_id && x.name == a.name && x.deleted_at.is_none()
            });
        if live_name || s.agents.contains_key(&a.id) {
            return Err(name());
        }
        s.check_aliases(&a.workspace_id, &a.id, &aliases)?;
        s.set_aliases(&a.workspace_id, &a.id, aliases);
        s.agents.insert(a.id.clone(), a);
        Ok(())
    }

    async fn agent(&self, id: &str) -> StoreResult<Option<AgentRow>> {
        self.enter("agent").await?;
        Ok(self.state()?.agents.get(id).cloned())
    }

    async fn agent_by_name(&self, workspace_id: &str, name: &str) -> StoreResult<Option<AgentRow>> {
        self.enter("agent_by_name").await?;
        let s = self.state()?;
        if let Some(id) = s.aliases.get(&(workspace_id.to_owned(), name.to_owned())) {
            return Ok(s.agents.get(id).cloned());
        }
        let named: Vec<AgentRow> = s
            .agents
            .values()
            .filter(|a| a.workspace_id == workspace_id && a.name == name)
            .cloned()
            .collect();
        // The live agent first, else the latest deleted one (AB-4003 rather than AB-4001).
        let named = self.ordered(named, |a: &AgentRow, b| {
            (a.deleted_at.is_some(), Reverse(a.deleted_at))
                .cmp(&(b.deleted_at.is_some(), Reverse(b.deleted_at)))
        });
        Ok(named.into_iter().next())
    }

    async fn agents(&self, tenant_id: &str) -> StoreResult<Vec<AgentRow>> {
        self.enter("agents").await?;
        let s = self.state()?;
        let rows = s
            .agents
            .values()
            .filter(|a| a.tenant_id == tenant_id && a.deleted_at.is_none())
            .cloned()
            .collect();
        Ok(self.ordered(rows, |a: &AgentRow, b| {
            (&a.workspace_id, &a.name).cmp(&(&b.workspace_id, &b.name))
        }))
    }

    async fn aliases(&self, agent_id: &str) -> StoreResult<Vec<String>> {
        self.enter("aliases").await?;
        let s = self.state()?;
        let rows = s
            .aliases
            .iter()
            .filter(|(_, owner)| *owner == agent_id)
            .map(|((_, alias), _)| alias.clone())
            .collect();
        Ok(self.ordered(rows, |a: &String, b| a.cmp(b)))
    }

    async fn update_agent(&self, a: AgentRow, aliases: Option<Vec<String>>) -> StoreResult<()> {
        self.enter("update_agent").await?;
        let mut s = self.state()?;
        if !s.live_agent(&a.id) {
            return Err(StoreError::NotFound);
        }
        if let Some(aliases) = &aliases {
            s.check_aliases(&a.workspace_id, &a.id, aliases)?;
        }
        if let Some(row) = s.agents.get_mut(&a.id) {
            row.card = a.card;
            row.visibility = a.visibility;
            row.updated_at = a.updated_at;
        }
        if let Some(aliases) = aliases {
            s.set_aliases(&a.workspace_id, &a.id, aliases);
        }
        Ok(())
    }

    async fn delete_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        self.enter("delete_agent").await?;
        let mut s = self.state()?;
        let tenant = match s.agents.get_mut(id) {
            Some(a) if a.deleted_at.is_none() => {
                a.deleted_at = Some(at);
                a.tenant_id.clone()
            }
            _ => return Err(StoreError::NotFound),
        };
        s.aliases.retain(|_, owner| owner != id);
        for subscribers in s.subscriptions.values_mut() {
            subscribers.remove(id);
        }
        // Its replay and idempotency records go with it: a new agent of the same name sends from
        // the same address (see `model::FORGET_SENT`).
        let sources: HashSet<String> = s
            .messages
            .values()
            .filter(|m| m.row.tenant_id == tenant && m.row.source_agent_id.as_deref() == Some(id))
            .map(|m| m.row.source.clone())
            .collect();
        s.recent_ids
            .retain(|(t, source, _), _| !(*t == tenant && sources.contains(source)));
        s.idempotency
            .retain(|k, _| !(k.tenant_id == tenant && sources.contains(&k.source)));
        let pending = s.pending_of(id);
        s.settle(&pending, EntryState::Dead);
        s.flag_owed(
            pending.iter().filter(|e| notice_due(e, true)),
            NoticeKind::Deleted,
        );
        Ok(pending)
    }

    async fn add_key(&self, k: KeyRow, max_active: usize, now: i64) -> StoreResult<()> {
        self.enter("add_key").await?;
        let mut s = self.state()?;
        let active = s
            .keys
            .values()
            .filter(|x| x.agent_id == k.agent_id && x.is_active(now))
            .count();
        if active >= max_active {
            return Err(StoreError::Limit(format!("{active} active keys")));
        }
        if s.keys.contains_key(&k.id) {
            return Err(conflict("key"));
        }
        s.keys.insert(k.id.clone(), k);
        Ok(())
    }

    async fn revoke_key(&self, agent_id: &str, key_id: &str, at: i64) -> StoreResult<()> {
        self.enter("revoke_key").await?;
        let mut s = self.state()?;
        match s.keys.get_mut(key_id) {
            Some(k) if k.agent_id == agent_id => {
                k.revoked_at = k.revoked_at.or(Some(at));
                Ok(())
            }
            _ => Err(StoreError::NotFound),
        }
    }

    async fn keys(&self, agent_id: &str) -> StoreResult<Vec<KeyRow>> {
        self.enter("keys").await?;
        let s = self.state()?;
        let rows = s
            .keys
            .values()
            .filter(|k| k.agent_id == agent_id)
            .cloned()
            .collect();
        Ok(self.ordered(rows, |a: &KeyRow, b| {
            (a.created_at, &a.id).cmp(&(b.created_at, &b.id))
        }))
    }

    async fn key(&self, key_id: &str) -> StoreResult<Option<KeyRow>> {
        self.enter("key").await?;
        Ok(self.state()?.keys.get(key_id).cloned())
    }

    async fn suspend_agent(&self, id: &str, at: i64) -> StoreResult<Vec<InboxEntry>> {
        self.enter("suspend_agent").await?;
        let mut s = self.state()?;
        match s.agents.get_mut(id) {
            Some(a) if a.deleted_at.is_none() && a.suspended_at.is_none() => {
                a.suspended_at = Some(at);
            }
            Some(a) if a.deleted_at.is_none() => return Ok(Vec::new()),
            _ => return Err(StoreError::NotFound),
        }
        let mut held = Vec::new();
        for e in s.pending_of(id) {
            let sender_live = e
                .message
                .source_agent_id
                .as_deref()
                .is_some_and(|a| s.live_agent(a));
            let key = (e.agent_id.clone(), e.sequence);
            if let (true, true, Some(row)) =
                (notice_due(&e, true), sender_live, s.inbox.get_mut(&key))
                && row.notice.is_none()
            {
                row.hold = true;
                held.push(e);
            }
        }
        Ok(held)
    }

    async fn resume_agent(&self, id: &str) -> StoreResult<()> {
        self.enter("resume_agent").await?;
        let mut s = self.state()?;
        match s.agents.get_mut(id) {
            Some(a) if a.deleted_at.is_none() => {
                a.suspended_at = None;
                Ok(())
            }
            _ => Err(StoreError::NotFound),
        }
    }

    async fn subscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
        at: i64,
    ) -> StoreResult<TopicRow> {
        self.enter("subscribe").await?;
        let mut s = self.state()?;
        let key = (workspace_id.to_owned(), topic.to_owned());
        let row = match s.topics.get(&key) {
            Some(row) => row.clone(),
            None => {
                // An id of the memory store's own shape: nobody may build one from the names.
                s.topics_made += 1;
                let row = TopicRow {
                    id: format!("mem-topic-{}", s.topics_made),
                    workspace_id: workspace_id.to_owned(),
                    name: topic.to_owned(),
                    created_at: at,
                };
                s.topics.insert(key, row.clone());
                row
            }
        };
        s.subscriptions
            .entry(row.id.clone())
            .or_default()
            .insert(agent_id.to_owned());
        Ok(row)
    }

    async fn unsubscribe(
        &self,
        workspace_id: &str,
        topic: &str,
        agent_id: &str,
    ) -> StoreResult<()> {
        self.enter("unsubscribe").await?;
        let mut s = self.state()?;
        let key = (workspace_id.to_owned(), topic.to_owned());
        if let Some(id) = s.topics.get(&key).map(|t| t.id.clone())
            && let Some(subscribers) = s.subscriptions.get_mut(&id)
        {
            subscribers.remove(agent_id);
        }
        Ok(())
    }

    async fn topic(
        &self,
        workspace_id: &str,
        topic: &str,
    ) -> StoreResult<Option<(TopicRow, Vec<String>)>> {
        self.enter("topic").await?;
        let s = self.state()?;
        let key = (workspace_id.to_owned(), topic.to_owned());
        let Some(row) = s.topics.get(&key).cloned() else {
            return Ok(None);
        };
        let subscribers = s
            .subscriptions
            .get(&row.id)
            .map(|x| x.iter().cloned().collect())
            .unwrap_or_default();
        let subscribers = self.ordered(subscribers, |a: &String, b| a.cmp(b));
        Ok(Some((row, subscribers)))
    }

    async fn topics(&self, workspace_id: &str) -> StoreResult<Vec<(TopicRow, u64)>> {
        self.enter("topics").await?;
        let s = self.state()?;
        let rows = s
            .topics
            .values()
            .filter(|t| t.workspace_id == workspace_id)
            .map(|t| {
                let n = s.subscriptions.get(&t.id).map_or(0, |x| x.len() as u64);
                (t.clone(), n)
            })
            .collect();
        Ok(self.ordered(rows, |a: &(TopicRow, u64), b| a.0.name.cmp(&b.0.name)))
    }

    async fn recent_message(
        &self,
        tenant_id: &str,
        source: &str,
        id: &str,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        self.enter("recent_message").await?;
        Ok(self.state()?.recent(tenant_id, source, id, since))
    }

    async fn idempotent_message(
        &self,
        key: &IdempotencyKey,
        since: i64,
    ) -> StoreResult<Option<MessageRow>> {
        self.enter("idempotent_message").await?;
        Ok(self.state()?.idempotent(key, since))
    }

    async fn publish(&self, m: NewMessage) -> StoreResult<PublishOutcome> {
        self.enter("publish").await?;
        // Uneven steps: storage sequences are ordered, never counted.
        let step = 1 + (self.draw() % 3) as i64;
        self.state()?.publish(m, step)
    }

    async fn search_messages(&self, q: MessageSearch) -> StoreResult<Vec<MessageRow>> {
        self.enter("search_messages").await?;
        let s = self.state()?;
        let kind_ok = |k: &str| match &q.kind {
            Some(want) => match want.strip_suffix('*') {
                Some(prefix) => k.starts_with(prefix),
                None => k == want,
            },
            None => true,
        };
        let mut rows: Vec<MessageRow> = s
            .messages
            .values()
            .filter(|m| m.row.tenant_id == q.tenant_id && s.readable(&m.row, &q.viewer))
            .filter(|m| {
                q.words
                    .iter()
                    .all(|g| g.iter().any(|w| m.search_tags.contains(w)))
            })
            .map(|m| &m.row)
            .filter(|r| kind_ok(&r.kind))
            .filter(|r| {
                q.conversation_id
                    .as_ref()
                    .is_none_or(|c| &r.conversation_id == c)
            })
            .filter(|r| q.source.as_ref().is_none_or(|x| &r.source == x))
            .filter(|r| q.to_text.as_ref().is_none_or(|x| &r.to_text == x))
            .filter(|r| !q.in_task || r.task_id.is_some())
            .filter(|r| q.since.is_none_or(|t| r.received_at >= t))
            .filter(|r| q.until.is_none_or(|t| r.received_at < t))
            .filter(|r| q.before.is_none_or(|b| (r.received_at, r.seq) < b))
            .cloned()
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse((r.received_at, r.seq)));
        rows.truncate(q.limit as usize);
        Ok(rows)
    }

    async fn pending_count(&self, agent_id: &str) -> StoreResult<u64> {
        self.enter("pending_count").await?;
        Ok(self.state()?.depth(agent_id))
    }

    async fn lease(&self, req: LeaseRequest) -> StoreResult<Vec<Delivery>> {
        self.enter("lease").await?;
        let mut s = self.state()?;
        let now = req.now;
        let lost_since = req.now - req.visibility_ms;
        let from = (req.agent_id.clone(), 0);
        // Leases that ran out, never-delivered entries above `after`, and those at or below it
        // visible for a lease's length (their lease was lost, or they were given back).
        let mut due: Vec<u64> = s
            .inbox
            .range(from..)
            .take_while(|(k, _)| k.0 == req.agent_id)
            .filter(|(k, e)| {
                e.expires_at > now
                    && match e.state {
                        EntryState::Leased => e.visible_at <= now && e.attempts < req.max_attempts,
                        EntryState::Ready => k.1 > req.after || e.visible_at <= lost_since,
                        _ => false,
                    }
            })
            .map(|(k, _)| k.1)
            .collect();
        due.truncate(req.limit as usize);
        let mut out = Vec::with_capacity(due.len());
        for sequence in due {
            s.leases_made += 1;
            let made = s.leases_made;
            let key = (req.agent_id.clone(), sequence);
            let Some(e) = s.inbox.get_mut(&key) else {
                continue;
            };
            e.attempts += 1;
            e.state = EntryState::Leased;
            e.visible_at = now + req.visibility_ms;
            e.last_attempt_at = Some(now);
            // A shape of its own, unique per entry and attempt: only its equality matters.
            let token = format!("mem-lease-{made}-{}", e.attempts);
            e.lease = Some(token.clone());
            let (attempt, message_seq) = (e.attempts, e.message_seq);
            let Some(m) = s.messages.get(&message_seq) else {
                continue;
            };
            out.push(Delivery {
                sequence,
                token,
                attempt,
                message: DeliveredMessage {
                    tenant_id: m.row.tenant_id.clone(),
                    attrs: m.row.attrs.clone(),
                    data: m.row.data.clone(),
                    received_at: m.row.received_at,
                },
            });
        }
        Ok(out)
    }

    async fn ack(
        &self,
        agent_id: &str,
        acks: Vec<(u64, String)>,
        at: i64,
    ) -> StoreResult<Vec<AckOutcome>> {
        self.enter("ack").await?;
        let mut s = self.state()?;
        let mut out = Vec::with_capacity(acks.len());
        let mut settled = 0;
        for (sequence, token) in acks {
            let outcome = match s.inbox.get_mut(&(agent_id.to_owned(), sequence)) {
                Some(e) if e.lease.as_deref() == Some(token.as_str()) => match e.state {
                    EntryState::Leased => {
                        e.state = EntryState::Acked;
                        e.acked_at = Some(at);
                        settled += 1;
                        AckOutcome::Acked
                    }
                    EntryState::Acked => AckOutcome::AlreadyAcked,
                    _ => AckOutcome::Stale,
                },
                _ => AckOutcome::Stale,
            };
            out.push(outcome);
        }
        if let Some(c) = s.counters.get_mut(agent_id) {
            c.1 = c.1.saturating_sub(settled);
        }
        Ok(out)
    }

    async fn reap_inboxes(&self, now: i64, max_attempts: u32) -> StoreResult<ReapReport> {
        self.enter("reap_inboxes").await?;
        let mut s = self.state()?;
        let dead_keys: Vec<(String, u64)> = s
            .inbox
            .iter()
            .filter(|(_, e)| {
                e.state == EntryState::Leased && e.visible_at <= now && e.attempts >= max_attempts
            })
            .map(|(k, _)| k.clone())
            .collect();
        let dead: Vec<InboxEntry> = dead_keys.iter().filter_map(|k| s.inbox_entry(k)).collect();
        s.settle(&dead, EntryState::Dead);
        let expired_keys: Vec<(String, u64)> = s
            .inbox
            .iter()
            .filter(|(_, e)| {
                matches!(e.state, EntryState::Ready | EntryState::Leased) && e.expires_at <= now
            })
            .map(|(k, _)| k.clone())
            .collect();
        let expired: Vec<InboxEntry> = expired_keys
            .iter()
            .filter_map(|k| s.inbox_entry(k))
            .collect();
        s.settle(&expired, EntryState::Expired);
        let report = ReapReport {
            dead: self.unordered(dead),
            expired: self.unordered(expired),
        };
        s.flag_owed(report.owing(), NoticeKind::Settled);
        Ok(report)
    }

    async fn pending_notices(
        &self,
        after: (String, u64),
        limit: u32,
    ) -> StoreResult<Vec<(InboxEntry, NoticeKind)>> {
        self.enter("pending_notices").await?;
        let s = self.state()?;
        let past = |k: &(String, u64)| (&k.0, k.1) > (&after.0, after.1);
        let settled = s
            .inbox
            .iter()
            .filter(|(k, e)| past(k) && e.notice.is_some())
            .filter_map(|(k, e)| Some((s.inbox_entry(k)?, e.notice?)))
            .take(limit as usize)
            .collect();
        let holds = s
            .inbox
            .iter()
            .filter(|(k, e)| past(k) && e.hold)
            .filter_map(|(k, _)| s.inbox_entry(k))
            .take(limit as usize)
            .collect();
        Ok(owed_page(settled, holds, limit))
    }

    async fn pending_task_notices(
        &self,
        after: &str,
        limit: u32,
    ) -> StoreResult<Vec<(TaskRow, u8)>> {
        self.enter("pending_task_notices").await?;
        let s = self.state()?;
        let rows = s
            .tasks
            .values()
            .filter(|(t, owed)| *owed != 0 && t.id.as_str() > after)
            .cloned()
            .collect();
        Ok(first(rows, limit))
    }

    async fn forgo_notice(&self, owed: Owed) -> StoreResult<()> {
        self.enter("forgo_notice").await?;
        let mut s = self.state()?;
        if s.owes(&owed) {
            s.clear_owed(&owed);
        }
        Ok(())
    }

    async fn next_visible(&self, agent_id: &str) -> StoreResult<Option<i64>> {
        self.enter("next_visible").await?;
        let s = self.state()?;
        let from = (agent_id.to_owned(), 0);
        Ok(s.inbox
            .range(from..)
            .take_while(|(k, _)| k.0 == agent_id)
            .filter(|(_, e)| e.state == EntryState::Leased)
            .map(|(_, e)| e.visible_at)
            .min())
    }

    async fn conversation(
        &self,
        tenant_id: &str,
        conversation_id: &str,
        viewer: &ConversationViewer,
    ) -> StoreResult<Option<Vec<MessageRow>>> {
        self.enter("conversation").await?;
        let s = self.state()?;
        // Storage order is (received_at, seq) order within an instant.
        let mut rows: Vec<MessageRow> = s
            .messages
            .values()
            .filter(|m| m.row.tenant_id == tenant_id && m.row.conversation_id == conversation_id)
            .filter(|m| s.readable(&m.row, viewer))
            .map(|m| m.row.clone())
            .collect();
        rows.sort_by_key(|m| (m.received_at, m.seq));
        Ok(if rows.is_empty() { None } else { Some(rows) })
    }

    async fn message(&self, seq: i64) -> StoreResult<Option<MessageRow>> {
        self.enter("message").await?;
        Ok(self.state()?.message_row(seq))
    }

    async fn conversations(
        &self,
        tenant_id: &str,
        viewer: &ConversationViewer,
        before: Option<(i64, i64)>,
        limit: u32,
    ) -> StoreResult<Vec<ConversationSummary>> {
        self.enter("conversations").await?;
        let s = self.state()?;
        let mut groups: std::collections::BTreeMap<&str, ConversationSummary> = Default::default();
        for m in s.messages.values() {
            let m = &m.row;
            if m.tenant_id != tenant_id || !s.readable(m, viewer) {
                continue;
            }
            let g =
                groups
                    .entry(m.conversation_id.as_str())
                    .or_insert_with(|| ConversationSummary {
                        conversation_id: m.conversation_id.clone(),
                        messages: 0,
                        first_at: m.received_at,
                        last_at: m.received_at,
                        last: m.clone(),
                    });
            g.messages += 1;
            g.first_at = g.first_at.min(m.received_at);
            g.last_at = g.last_at.max(m.received_at);
            if m.seq > g.last.seq {
                g.last = m.clone();
            }
        }
        let mut rows: Vec<ConversationSummary> = groups
            .into_values()
            .filter(|g| before.is_none_or(|b| (g.last_at, g.last.seq) < b))
            .collect();
        rows.sort_by_key(|g| Reverse((g.last_at, g.last.seq)));
        Ok(first(rows, limit))
    }

    async fn copies(&self, message_seqs: Vec<i64>) -> StoreResult<Vec<CopyState>> {
        self.enter("copies").await?;
        let s = self.state()?;
        let seqs: BTreeSet<i64> = message_seqs.into_iter().collect();
        let mut rows = Vec::new();
        for seq in seqs {
            for key in s.copies.get(&seq).into_iter().flatten() {
                let Some(e) = s.inbox.get(key) else { continue };
                rows.push(CopyState {
                    message_seq: seq,
                    agent_id: key.0.clone(),
                    sequence: key.1,
                    state: e.state,
                    attempts: e.attempts,
                    last_attempt_at: e.last_attempt_at,
                    shown_at: s.receipts.get(key).map(|r| r.at),
                });
            }
        }
        Ok(self.ordered(rows, |a: &CopyState, b| {
            (a.message_seq, &a.agent_id).cmp(&(b.message_seq, &b.agent_id))
        }))
    }

    async fn task_messages(&self, tenant_id: &str, task_id: &str) -> StoreResult<Vec<MessageRow>> {
        self.enter("task_messages").await?;
        let s = self.state()?;
        let mut rows: Vec<MessageRow> = s
            .messages
            .values()
            .filter(|m| m.row.tenant_id == tenant_id && m.row.task_id.as_deref() == Some(task_id))
            .map(|m| m.row.clone())
            .collect();
        rows.sort_by_key(|m| (m.received_at, m.seq));
        Ok(rows)
    }

    async fn task(&self, id: &str) -> StoreResult<Option<TaskRow>> {
        self.enter("task").await?;
        Ok(self.state()?.tasks.get(id).map(|t| t.0.clone()))
    }

    async fn task_events(&self, id: &str) -> StoreResult<Vec<TaskEventRow>> {
        self.enter("task_events").await?;
        Ok(self
            .state()?
            .task_events
            .get(id)
            .cloned()
            .unwrap_or_default())
    }

    async fn tasks(&self, f: TaskFilter) -> StoreResult<Vec<TaskRow>> {
        self.enter("tasks").await?;
        let s = self.state()?;
        let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        let mut rows: Vec<TaskRow> = s
            .tasks
            .values()
            .map(|t| &t.0)
            .filter(|t| t.tenant_id == f.tenant_id)
            .filter(|t| is(&f.state, &t.state) && is(&f.capability, &t.capability))
            .filter(|t| is(&f.requester_id, &t.requester_id))
            .filter(|t| is(&f.recipient_id, &t.recipient_id))
            .filter(|t| {
                f.party_id
                    .as_deref()
                    .is_none_or(|p| t.requester_id == p || t.recipient_id == p)
            })
            .filter(|t| {
                f.workspace_id.as_deref().is_none_or(|ws| {
                    t.workspace_id == ws
                        || s.agents
                            .get(&t.recipient_id)
                            .is_some_and(|a| a.workspace_id == ws)
                })
            })
            .filter(|t| {
                f.before
                    .as_ref()
                    .is_none_or(|(at, id)| (t.created_at, &t.id) < (*at, id))
            })
            .cloned()
            .collect();
        rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(first(rows, f.limit))
    }

    async fn due_tasks(&self, now: i64, limit: u32) -> StoreResult<Vec<TaskRow>> {
        self.enter("due_tasks").await?;
        let s = self.state()?;
        let rows = s
            .tasks
            .values()
            .map(|t| &t.0)
            .filter(|t| !t.terminal && t.next_deadline.is_some_and(|d| d <= now))
            .cloned()
            .collect();
        let rows = self.ordered(rows, |a: &TaskRow, b| a.next_deadline.cmp(&b.next_deadline));
        Ok(first(rows, limit))
    }

    async fn update_task(
        &self,
        t: TaskRow,
        expected_version: i64,
        e: TaskEventRow,
        owed: u8,
    ) -> StoreResult<()> {
        self.enter("update_task").await?;
        let mut s = self.state()?;
        let id = t.id.clone();
        let w = TaskWrite::Update(t, expected_version, e);
        s.check_task(&w)?;
        s.write_task(w);
        if let Some(task) = s.tasks.get_mut(&id) {
            task.1 |= owed;
        }
        Ok(())
    }

    async fn create_blob(&self, b: BlobRow) -> StoreResult<()> {
        self.enter("create_blob").await?;
        let mut s = self.state()?;
        if s.blobs.contains_key(&b.id) {
            return Err(conflict(format!("blob {}", b.id)));
        }
        s.blobs.insert(b.id.clone(), (b, false));
        Ok(())
    }

    async fn blob(&self, id: &str) -> StoreResult<Option<BlobRow>> {
        self.enter("blob").await?;
        Ok(self.state()?.blobs.get(id).map(|b| b.0.clone()))
    }

    async fn complete_blob(&self, id: &str) -> StoreResult<()> {
        self.enter("complete_blob").await?;
        let mut s = self.state()?;
        match s.blobs.get_mut(id) {
            Some((b, false)) => {
                b.complete = true;
                Ok(())
            }
            _ => Err(StoreError::NotFound),
        }
    }

    async fn blob_party(&self, blob_id: &str, agent_id: &str) -> StoreResult<bool> {
        self.enter("blob_party").await?;
        let s = self.state()?;
        let from = (blob_id.to_owned(), i64::MIN);
        Ok(s.blob_refs
            .range(from..)
            .take_while(|(b, _)| b == blob_id)
            .any(|(_, seq)| {
                let sent = s
                    .messages
                    .get(seq)
                    .is_some_and(|m| m.row.source_agent_id.as_deref() == Some(agent_id));
                let got = s
                    .copies
                    .get(seq)
                    .is_some_and(|c| c.iter().any(|(a, _)| a == agent_id));
                sent || got
            }))
    }

    async fn blob_bytes(&self, tenant_id: &str, now: i64, pending_since: i64) -> StoreResult<u64> {
        self.enter("blob_bytes").await?;
        let s = self.state()?;
        Ok(s.blobs
            .values()
            .map(|b| &b.0)
            .filter(|b| b.tenant_id == tenant_id && !blob_due(b, now, pending_since))
            .map(|b| b.size)
            .sum())
    }

    async fn due_blobs(
        &self,
        now: i64,
        pending_since: i64,
        limit: usize,
    ) -> StoreResult<Vec<BlobRow>> {
        self.enter("due_blobs").await?;
        let s = self.state()?;
        let rows = s
            .blobs
            .values()
            .filter(|(b, purged)| !purged && blob_due(b, now, pending_since))
            .map(|b| b.0.clone())
            .collect();
        let mut rows = self.unordered(rows);
        rows.truncate(limit);
        Ok(rows)
    }

    async fn purge_blob(&self, id: &str, now: i64, pending_since: i64) -> StoreResult<bool> {
        self.enter("purge_blob").await?;
        let mut s = self.state()?;
        match s.blobs.get_mut(id) {
            Some((b, purged)) if !*purged && blob_due(b, now, pending_since) => {
                *purged = true;
                s.blob_contents.remove(id);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn blob_workspaces(&self, blob_id: &str) -> StoreResult<Vec<String>> {
        self.enter("blob_workspaces").await?;
        let s = self.state()?;
        let workspace = |agent: &str| s.agents.get(agent).map(|a| a.workspace_id.clone());
        let mut found = BTreeSet::new();
        if let Some((b, _)) = s.blobs.get(blob_id) {
            found.extend(workspace(&b.uploader_id));
        }
        let from = (blob_id.to_owned(), i64::MIN);
        for (_, seq) in s.blob_refs.range(from..).take_while(|(b, _)| b == blob_id) {
            if let Some(m) = s.messages.get(seq) {
                found.extend(m.row.source_agent_id.as_deref().and_then(workspace));
            }
            for (agent, _) in s.copies.get(seq).into_iter().flatten() {
                found.extend(workspace(agent));
            }
        }
        Ok(found.into_iter().collect())
    }

    async fn usage(&self, f: UsageFilter) -> StoreResult<Vec<UsageTotal>> {
        self.enter("usage").await?;
        let s = self.state()?;
        let is = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == have)
        };
        let figures = s
            .usage
            .values()
            .filter(|u| u.tenant_id == f.tenant_id)
            .filter(|u| {
                f.workspace_ids
                    .as_ref()
                    .is_none_or(|ws| ws.contains(&u.workspace_id))
            })
            .filter(|u| is(&f.agent_id, Some(u.agent_id.as_str())))
            .filter(|u| is(&f.capability, u.capability.as_deref()))
            .filter(|u| f.since_day.as_ref().is_none_or(|d| u.day >= *d))
            .filter(|u| f.until_day.as_ref().is_none_or(|d| u.day <= *d))
            .map(|u| {
                let n = u.usage.as_ref().map(|x| x.tokens).unwrap_or_default();
                let key = (
                    u.agent_id.clone(),
                    u.capability.clone(),
                    u.day.clone(),
                    u.usage.as_ref().map(|x| x.reported_by.clone()),
                    u.cost.as_ref().map(|c| c.currency.clone()),
                    u.cost.as_ref().and_then(|c| c.source.clone()),
                );
                let counts = [
                    n.input,
                    n.output,
                    n.cache_read,
                    n.cache_write,
                    n.reasoning,
                    n.requests,
                    n.wall_ms,
                ];
                (key, counts, u.cost.as_ref().map(|c| c.micros))
            });
        let totals = sum_usage(figures);
        Ok(self.ordered(totals, |a: &UsageTotal, b| {
            (Reverse(&a.day), &a.agent_id).cmp(&(Reverse(&b.day), &b.agent_id))
        }))
    }

    async fn create_console_session(&self, c: ConsoleSessionRow) -> StoreResult<()> {
        self.enter("create_console_session").await?;
        let mut s = self.state()?;
        if s.sessions.contains_key(&c.id_hash) {
            return Err(conflict("console session"));
        }
        s.sessions.insert(c.id_hash, c);
        Ok(())
    }

    async fn console_session(&self, id_hash: [u8; 32]) -> StoreResult<Option<ConsoleSessionRow>> {
        self.enter("console_session").await?;
        Ok(self.state()?.sessions.get(&id_hash).cloned())
    }

    async fn delete_console_session(&self, id_hash: [u8; 32]) -> StoreResult<()> {
        self.enter("delete_console_session").await?;
        self.state()?.sessions.remove(&id_hash);
        Ok(())
    }

    async fn purge_console_sessions(&self, now: i64) -> StoreResult<u64> {
        self.enter("purge_console_sessions").await?;
        let mut s = self.state()?;
        let before = s.sessions.len();
        s.sessions.retain(|_, c| c.expires_at > now);
        Ok((before - s.sessions.len()) as u64)
    }

    async fn first_user(&self) -> StoreResult<Option<UserRow>> {
        self.enter("first_user").await?;
        let s = self.state()?;
        // The earliest `created_at`, the earliest stored among equals (`min_by_key` keeps the
        // first of equal keys).
        Ok(s.users.iter().min_by_key(|u| u.created_at).cloned())
    }

    async fn replace_tokens(&self, t: TokenRow) -> StoreResult<u64> {
        self.enter("replace_tokens").await?;
        let mut s = self.state()?;
        if s.tokens
            .get(&t.hash)
            .is_some_and(|x| x.subject != t.subject)
        {
            return Err(conflict("token"));
        }
        let mut revoked = 0;
        for x in s.tokens.values_mut() {
            if x.subject == t.subject && x.revoked_at.is_none() {
                x.revoked_at = Some(t.created_at);
                revoked += 1;
            }
        }
        s.tokens.insert(t.hash, t);
        Ok(revoked)
    }

    async fn release(
        &self,
        agent_id: &str,
        leases: Vec<(u64, String)>,
        now: i64,
        uncount: bool,
    ) -> StoreResult<()> {
        self.enter("release").await?;
        let mut s = self.state()?;
        for (sequence, token) in leases {
            let Some(e) = s.inbox.get_mut(&(agent_id.to_owned(), sequence)) else {
                continue;
            };
            if e.state != EntryState::Leased || e.lease.as_deref() != Some(token.as_str()) {
                continue;
            }
            if uncount {
                // Never delivered after all: a first delivery again when it was the first.
                if e.attempts <= 1 {
                    e.state = EntryState::Ready;
                }
                e.attempts = e.attempts.saturating_sub(1);
            }
            e.lease = None;
            e.visible_at = now;
        }
        Ok(())
    }

    async fn check_ready(&self) -> StoreResult<()> {
        self.enter("check_ready").await
    }

    async fn record_receipts(
        &self,
        agent_id: &str,
        receipts: Vec<ShownReceipt>,
        now: i64,
    ) -> StoreResult<Vec<ReceiptOutcome>> {
        self.enter("record_receipts").await?;
        let mut s = self.state()?;
        let mut out = Vec::with_capacity(receipts.len());
        for r in receipts {
            let key = (agent_id.to_owned(), r.sequence);
            let found = s
                .inbox
                .get(&key)
                .and_then(|e| s.messages.get(&e.message_seq))
                .filter(|m| m.row.id == r.message_id)
                .map(|m| m.row.received_at);
            let Some(received_at) = found else {
                out.push(ReceiptOutcome::Unknown);
                continue;
            };
            let table = if r.pushed {
                &mut s.pushes
            } else {
                &mut s.receipts
            };
            // A push and a showing are recorded apart: the first of each stands.
            out.push(match table.entry(key) {
                Slot::Occupied(_) => ReceiptOutcome::AlreadyRecorded,
                Slot::Vacant(v) => {
                    v.insert(Receipt {
                        at: r.shown_at.clamp(received_at, now.max(received_at)),
                        harness: r.harness,
                        event: r.event,
                    });
                    ReceiptOutcome::Recorded
                }
            });
        }
        Ok(out)
    }

    async fn delivery_states(
        &self,
        tenant_id: &str,
        source: &str,
        message_id: &str,
    ) -> StoreResult<Option<(MessageRow, Vec<DeliveryStateRow>)>> {
        self.enter("delivery_states").await?;
        let s = self.state()?;
        let key = (
            tenant_id.to_owned(),
            source.to_owned(),
            message_id.to_owned(),
        );
        let Some(message) = s
            .recent_ids
            .get(&key)
            .and_then(|(seq, _)| s.message_row(*seq))
        else {
            return Ok(None);
        };
        // The recipients' envelopes that answer it, in its conversation, oldest first.
        let mut answers: Vec<(i64, i64, String, AnswerRow)> = s
            .messages
            .values()
            .filter(|m| {
                m.row.tenant_id == tenant_id
                    && m.row.conversation_id == message.conversation_id
                    && m.correlation_id.as_deref() == Some(message_id)
            })
            .filter_map(|m| {
                let agent = m.row.source_agent_id.clone()?;
                let a = AnswerRow {
                    id: m.row.id.clone(),
                    kind: m.row.kind.clone(),
                    received_at: m.row.received_at,
                };
                Some((m.row.received_at, m.row.seq, agent, a))
            })
            .collect();
        answers.sort_by_key(|a| (a.0, a.1));
        let answers: Vec<(String, AnswerRow)> =
            answers.into_iter().map(|(_, _, who, a)| (who, a)).collect();
        let receipt = |r: Option<&Receipt>, sequence: u64, pushed: bool| {
            r.map(|r| ShownReceipt {
                sequence,
                message_id: String::new(),
                shown_at: r.at,
                harness: r.harness.clone(),
                event: r.event.clone(),
                pushed,
            })
        };
        let mut rows = Vec::new();
        for key in s.copies.get(&message.seq).into_iter().flatten() {
            let Some(e) = s.inbox.get(key) else { continue };
            let mut d = DeliveryStateRow {
                agent_id: key.0.clone(),
                sequence: key.1,
                state: e.state,
                attempts: e.attempts,
                last_attempt_at: e.last_attempt_at,
                acked_at: e.acked_at,
                shown: receipt(s.receipts.get(key), key.1, false),
                pushed: receipt(s.pushes.get(key), key.1, true),
                answer: None,
                ack: None,
            };
            fill_answers(&mut d, &answers, message_id);
            rows.push(d);
        }
        let rows = self.ordered(rows, |a: &DeliveryStateRow, b| a.agent_id.cmp(&b.agent_id));
        Ok(Some((message, rows)))
    }

    async fn sent_messages(
        &self,
        tenant_id: &str,
        agent_id: &str,
        before_seq: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<MessageRow>> {
        self.enter("sent_messages").await?;
        let s = self.state()?;
        let rows = s
            .messages
            .range(..before_seq.unwrap_or(i64::MAX))
            .rev()
            .map(|(_, m)| &m.row)
            .filter(|m| m.tenant_id == tenant_id && m.source_agent_id.as_deref() == Some(agent_id))
            .take(limit as usize)
            .cloned()
            .collect();
        Ok(rows)
    }

    async fn signal(&self, _s: Signal) -> StoreResult<()> {
        // One process holds the rows: nobody else to tell.
        self.enter("signal").await
    }

    async fn claim_reaper(&self, _holder: &str, _now: i64, _ttl_ms: i64) -> StoreResult<bool> {
        self.enter("claim_reaper").await?;
        Ok(true)
    }

    async fn put_blob_content(&self, id: &str, sealed: Vec<u8>) -> StoreResult<()> {
        self.enter("put_blob_content").await?;
        self.state()?.blob_contents.insert(id.to_owned(), sealed);
        Ok(())
    }

    async fn blob_content(&self, id: &str) -> StoreResult<Option<Vec<u8>>> {
        self.enter("blob_content").await?;
        Ok(self.state()?.blob_contents.get(id).cloned())
    }
}
