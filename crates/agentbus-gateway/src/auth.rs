//! The auth layer: who a bearer token is ([`App::authenticate`], the token cache), and the
//! tenant data keys (the tenant-key cache). Above the state layer only; who may do what, and the
//! request's bearer check, sit above the directory in `roles`.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use agentbus_protocol::Code;
use agentbus_store::{Signal, Store, TokenSubject};

use crate::crypto::DataKey;
use crate::error::{ApiError, ApiResult};
use crate::state::App;
pub(crate) use crate::state::Principal;

/// SHA-256 of a bearer token, the only form tokens are stored in.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new bearer token: a kind prefix and 32 random bytes, base64url.
pub fn new_token(prefix: &str) -> String {
    let raw: [u8; 32] = agentbus_runtime::random_bytes();
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}

impl App {
    /// The tenant's data key.
    pub async fn tenant_key(&self, tenant_id: &str) -> ApiResult<DataKey> {
        if let Some(k) = self
            .tenant_keys
            .lock()
            .ok()
            .and_then(|m| m.get(tenant_id).cloned())
        {
            return Ok(k);
        }
        let t = self
            .store
            .tenant(tenant_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        let raw = self
            .master
            .open(&t.data_key)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                ApiError::new(
                    Code::StorageUnavailable,
                    "a tenant key does not open under the master key",
                )
            })?;
        let key = DataKey::from_bytes(raw);
        if let Ok(mut m) = self.tenant_keys.lock() {
            m.insert(tenant_id.to_owned(), key.clone());
        }
        Ok(key)
    }

    /// Resolves a bearer token (cached; tokens are never re-pointed).
    pub async fn authenticate(&self, token: &str) -> ApiResult<Principal> {
        self.authenticate_hash(token_hash(token)).await
    }

    /// Resolves a token by its SHA-256, as [`App::authenticate`] does: for a caller that keeps
    /// only the hash (a console session re-checks the token it was opened with this way).
    pub async fn authenticate_hash(&self, hash: [u8; 32]) -> ApiResult<Principal> {
        if let Some(p) = self.tokens.lock().ok().and_then(|m| m.get(&hash).cloned()) {
            if let Principal::Agent(a) = &p
                && a.deleted_at.is_some()
            {
                return Err(ApiError::new(
                    Code::MissingCredential,
                    "this agent was deleted",
                ));
            }
            return Ok(p);
        }
        let generation = self.identity_generation();
        let row = self
            .store
            .token(hash)
            .await?
            .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown bearer token"))?;
        let p = match row.subject {
            TokenSubject::User(id) => Principal::User(
                self.store
                    .user(&id)
                    .await?
                    .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown user"))?,
            ),
            TokenSubject::Agent(id) => {
                let a = self
                    .store
                    .agent(&id)
                    .await?
                    .ok_or_else(|| ApiError::new(Code::MissingCredential, "unknown agent"))?;
                if a.deleted_at.is_some() {
                    return Err(ApiError::new(
                        Code::MissingCredential,
                        "this agent was deleted",
                    ));
                }
                Principal::Agent(a)
            }
        };
        self.if_current(generation, || {
            if let Ok(mut m) = self.tokens.lock() {
                m.insert(hash, p.clone());
            }
        });
        Ok(p)
    }

    /// Forgets cached principals of an agent (after a delete or a card change), here and on
    /// the other replicas.
    pub fn forget_agent(&self, agent_id: &str) {
        if let Ok(mut m) = self.tokens.lock() {
            m.retain(|_, p| !matches!(p, Principal::Agent(a) if a.id == agent_id));
        }
        self.tell_peers(Signal::Identity);
    }
}
