//! System notices: envelopes from `agent://system/gateway/<service>`, signed with the gateway key
//! and stored like any message (decision 8): [`App::notify_owed`] builds, signs and stores one,
//! and [`App::owed_entry_notice`] sends the one owed about an inbox entry. Below the features,
//! which send the notices their own transaction marked right after it; the sweeps of those still
//! owed are `owed`'s, above the features with the reaper. Failures are [`BackgroundError`]s,
//! made [`ApiError`]s only at an HTTP edge.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use agentbus_protocol::Code;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::seal;
use agentbus_protocol::signing;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{
    AgentRow, EntryState, InboxEntry, MessageRow, NewMessage, NoticeKind, Owed, Store, StoreError,
};

use crate::error::ApiError;
use crate::state::App;

/// Why background work (a notice, a reaper pass) failed: the store being unavailable stops a
/// pass, since every other step would fail alike; anything else is that one item's failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackgroundError {
    /// The store cannot be used now.
    #[error("{code}: {message}")]
    Unavailable {
        /// The catalogue code (AB-5xxx) the failure maps to.
        code: Code,
        /// What failed.
        message: String,
    },
    /// One item could not be handled (unusable stored data, a row gone); the next pass retries.
    #[error("{code}: {message}")]
    Item {
        /// The catalogue code the failure maps to.
        code: Code,
        /// What failed.
        message: String,
    },
}

/// Background work's outcome.
pub type BackgroundResult<T> = Result<T, BackgroundError>;

impl BackgroundError {
    /// The catalogue code.
    pub(crate) fn code(&self) -> Code {
        match self {
            BackgroundError::Unavailable { code, .. } | BackgroundError::Item { code, .. } => *code,
        }
    }

    /// What failed.
    pub(crate) fn message(&self) -> &str {
        match self {
            BackgroundError::Unavailable { message, .. }
            | BackgroundError::Item { message, .. } => message,
        }
    }

    fn item(code: Code, message: impl Into<String>) -> BackgroundError {
        BackgroundError::Item {
            code,
            message: message.into(),
        }
    }
}

/// A step shared with the routes (a directory read, a tenant key) failed: a store failure stops
/// the pass, anything else is the item's.
impl From<ApiError> for BackgroundError {
    fn from(e: ApiError) -> BackgroundError {
        match e.code {
            Code::StorageUnavailable | Code::StoreBusy => BackgroundError::Unavailable {
                code: e.code,
                message: e.message,
            },
            code => BackgroundError::Item {
                code,
                message: e.message,
            },
        }
    }
}

impl From<StoreError> for BackgroundError {
    fn from(e: StoreError) -> BackgroundError {
        ApiError::from(e).into()
    }
}

/// The HTTP edge: a route that sent a notice (or ran a reaper pass) answers with its code.
impl From<BackgroundError> for ApiError {
    fn from(e: BackgroundError) -> ApiError {
        match e {
            BackgroundError::Unavailable { code, message }
            | BackgroundError::Item { code, message } => ApiError::new(code, message),
        }
    }
}

impl App {
    /// Builds, signs and stores a notice from `agent://system/gateway/<service>` to an agent
    /// (decision 8: signed by the gateway key; conversation and trace copied from the original,
    /// correlation = the original id); with `owed`, a notice the store holds as owed ([`Owed`]):
    /// stored with the clearing of its mark, and not at all (no error) when another replica stored
    /// it first.
    pub(crate) async fn notify_owed(
        &self,
        to: &AgentRow,
        service: &str,
        kind: &str,
        data: Value,
        original: Option<&MessageRow>,
        owed: Option<Owed>,
    ) -> BackgroundResult<()> {
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
            seal::traceparent(
                agentbus_runtime::random_bytes(),
                agentbus_runtime::random_bytes(),
            )
        });
        // The registry's URL for the type (§5: `…/schemas/agentbus.system.expired/v1.json`), the
        // one `/.well-known/agentbus.json` lists, so a notice validates like any message.
        let schema = kind
            .parse::<agentbus_protocol::schema::MessageType>()
            .map_err(|e| BackgroundError::item(Code::StorageUnavailable, e.0))?
            .schema_url();
        let parts = seal::Parts {
            id: self.mint(IdKind::Message),
            source: format!("agent://system/gateway/{service}"),
            kind: kind.to_owned(),
            time: Timestamp(now),
            subject: None,
            to: to_address.clone(),
            conversation_id: conversation.clone(),
            correlation_id: original.map(|m| m.id.clone()),
            traceparent: trace,
            schema,
            idempotency_key: None,
            expires_at: None,
            capability: None,
            usage: None,
            budget: None,
            priority: None,
            data,
        };
        let id = agentbus_protocol::ids::Id::parse_kind(&self.gateway_key_id, IdKind::Key)
            .map_err(|e| BackgroundError::item(Code::StorageUnavailable, e.to_string()))?;
        let mut env = seal::seal(parts, &self.gateway_key, id)
            .map_err(|e| BackgroundError::item(Code::StorageUnavailable, e.to_string()))?;
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
            search_tags: String::new(),
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

    /// Sends the notice `kind` owed about entry `e` as it stands now, stored with the clearing of
    /// its mark (nothing is stored if the mark was cleared or replaced since, say a hold's by a
    /// dead letter's, which then stays owed): a dead letter's AB-4016 or an expiry's
    /// `system.expired` (the reaper's), AB-4003 (the recipient's deletion), AB-4013 not
    /// dead-lettered (held for a suspended recipient; forgone once the entry was acknowledged, or
    /// settled owing no notice of its own).
    pub(crate) async fn owed_entry_notice(
        &self,
        e: &InboxEntry,
        kind: NoticeKind,
    ) -> BackgroundResult<()> {
        let owed = Owed::Entry(e.agent_id.clone(), e.sequence, kind);
        match (kind, e.state) {
            (NoticeKind::Settled, EntryState::Dead) => {
                let code = Code::DeadLettered.to_string();
                self.undeliverable(e, &code, true, owed).await
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
    async fn expired_notice(&self, e: &InboxEntry, owed: Owed) -> BackgroundResult<()> {
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
    ) -> BackgroundResult<()> {
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

    async fn sender_of(&self, m: &MessageRow) -> BackgroundResult<Option<AgentRow>> {
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
