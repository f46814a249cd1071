//! Rows the conformance tests store.

use agentbus_store::*;

/// A fixed start time (ms); tests move their own clock from here.
pub const T0: i64 = 1_800_000_000_000;
/// One day in ms.
pub const DAY: i64 = 86_400_000;

pub fn tenant(id: &str, slug: &str) -> TenantRow {
    TenantRow {
        id: id.into(),
        slug: slug.into(),
        data_key: vec![1, 2, 3],
        created_at: T0,
        suspended_at: None,
    }
}

pub fn workspace(id: &str, tenant_id: &str, slug: &str) -> WorkspaceRow {
    WorkspaceRow {
        id: id.into(),
        tenant_id: tenant_id.into(),
        slug: slug.into(),
        policy: "{}".into(),
        created_at: T0,
    }
}

pub fn user(id: &str, role: Role, at: i64) -> UserRow {
    UserRow {
        id: id.into(),
        tenant_id: "ten_1".into(),
        workspace_id: "ws_1".into(),
        name: id.into(),
        role,
        created_at: at,
    }
}

pub fn token(n: u8, subject: TokenSubject) -> TokenRow {
    TokenRow {
        hash: [n; 32],
        subject,
        created_at: T0,
        label: None,
        revoked_at: None,
    }
}

pub fn agent(id: &str, name: &str) -> AgentRow {
    AgentRow {
        id: id.into(),
        tenant_id: "ten_1".into(),
        workspace_id: "ws_1".into(),
        name: name.into(),
        owner_id: None,
        card: "{}".into(),
        visibility: "workspace".into(),
        created_at: T0,
        updated_at: T0,
        deleted_at: None,
        suspended_at: None,
    }
}

/// An agent of another workspace than `ws_1`.
pub fn agent_in(workspace_id: &str, id: &str, name: &str) -> AgentRow {
    AgentRow {
        workspace_id: workspace_id.into(),
        ..agent(id, name)
    }
}

/// Registers agents `(id, name)` of `ws_1`, without aliases.
pub async fn agents(store: &impl Store, rows: &[AgentRow]) {
    for a in rows {
        store.create_agent(a.clone(), vec![]).await.expect("agent");
    }
}

pub fn key(id: &str, agent_id: &str, expires_at: i64) -> KeyRow {
    KeyRow {
        id: id.into(),
        agent_id: agent_id.into(),
        public_key: vec![7; 32],
        created_at: T0,
        expires_at,
        revoked_at: None,
    }
}

/// A message from agent `from` with envelope id `id` to the inboxes `to`, received at `at`.
pub fn msg(from: &str, id: &str, to: &[&str], at: i64) -> NewMessage {
    NewMessage {
        tenant_id: "ten_1".into(),
        id: id.into(),
        source: format!("agent://acme/main/{from}"),
        source_agent_id: Some(from.into()),
        kind: "agentbus.message.v1".into(),
        conversation_id: "cnv_1".into(),
        correlation_id: None,
        to_text: to.first().map(|s| s.to_string()).unwrap_or_default(),
        to_id: to.first().map(|s| s.to_string()).unwrap_or_default(),
        attrs: format!("{{\"id\":\"{id}\"}}"),
        data: id.as_bytes().to_vec(),
        signed_hash: vec![9; 32],
        idempotency: None,
        receipt: format!("rcp_{id}"),
        received_at: at,
        expires_at: at + DAY,
        task_id: None,
        task: None,
        recipients: to.iter().map(|s| s.to_string()).collect(),
        blob_refs: Vec::new(),
        replay_since: at - DAY,
        idempotency_since: at - 7 * DAY,
        max_depth: None,
        usage: None,
        notice_of: None,
        search_tags: String::new(),
    }
}

/// Stores `m`, which must be stored; answers its message and its (agent, sequence) pairs.
pub async fn stored(store: &impl Store, m: NewMessage) -> (MessageRow, Vec<(String, u64)>) {
    match store.publish(m).await.expect("publish") {
        PublishOutcome::Stored {
            message, sequences, ..
        } => (message, sequences),
        other => panic!("not stored: {other:?}"),
    }
}

pub fn lease_req(agent: &str, after: u64, limit: u32, now: i64) -> LeaseRequest {
    LeaseRequest {
        agent_id: agent.into(),
        after,
        limit,
        now,
        visibility_ms: 30_000,
        max_attempts: 5,
    }
}

pub fn task_row(id: &str, version: i64, deadline: Option<i64>) -> TaskRow {
    TaskRow {
        id: id.into(),
        tenant_id: "ten_1".into(),
        workspace_id: "ws_1".into(),
        requester_id: "agt_a".into(),
        recipient_id: "agt_b".into(),
        request_id: format!("msg_{id}"),
        conversation_id: "cnv_1".into(),
        capability: "review".into(),
        state: "submitted".into(),
        terminal: false,
        machine: "{}".into(),
        next_deadline: deadline,
        created_at: T0,
        updated_at: T0,
        version,
    }
}

pub fn event(kind: &str, from: &str, to: &str, at: i64) -> TaskEventRow {
    TaskEventRow {
        at,
        actor: "system".into(),
        envelope_id: None,
        kind: kind.into(),
        from_state: from.into(),
        to_state: to.into(),
        flag: None,
        timer: None,
        warnings: None,
        reason: None,
    }
}
