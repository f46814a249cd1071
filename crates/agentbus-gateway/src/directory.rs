//! The directory layer: tenants, workspaces, agents, their keys and workspace policies, read
//! through a cache that every identity write forgets (here and on the other replicas). Above the
//! auth layer, which it clears with the rest.

use std::sync::Arc;

use agentbus_protocol::address::AgentAddress;
use agentbus_protocol::signing::PublicKey;
use agentbus_store::{AgentRow, KeyRow, Signal, Store, TenantRow, WorkspaceRow};

use crate::error::{ApiError, ApiResult};
use crate::policy::Policy;
use crate::state::{App, Directory};

impl App {
    /// Forgets every cached identity row, here and on the other replicas; called after any
    /// identity write.
    pub fn invalidate_directory(&self) {
        self.forget_identities();
        self.tell_peers(Signal::Identity);
    }

    pub(crate) fn forget_identities(&self) {
        {
            let mut d = self.dir();
            let generation = d.generation + 1;
            *d = Directory {
                generation,
                ..Directory::default()
            };
        }
        // After the generation moved: an answer still being read either sees it moved and
        // caches nothing, or cached before, and is cleared here.
        self.policies.clear();
        if let Ok(mut m) = self.tokens.lock() {
            m.clear();
        }
    }

    /// The cached answer `get` finds, or `read`'s, cached by `put` unless the identity caches
    /// were forgotten while it was read.
    pub(crate) async fn cached<T: Clone>(
        &self,
        get: impl Fn(&Directory) -> Option<T>,
        read: impl Future<Output = ApiResult<T>>,
        put: impl FnOnce(&mut Directory, T),
    ) -> ApiResult<T> {
        let generation = {
            let d = self.dir();
            if let Some(v) = get(&d) {
                return Ok(v);
            }
            d.generation
        };
        let v = read.await?;
        let mut d = self.dir();
        if d.generation == generation {
            put(&mut d, v.clone());
        }
        Ok(v)
    }

    /// A tenant, cached.
    pub async fn tenant_row(&self, id: &str) -> ApiResult<Option<TenantRow>> {
        self.cached(
            |d| d.tenants.get(id).cloned(),
            async { Ok(self.store.tenant(id).await?) },
            |d, t| {
                d.tenants.insert(id.to_owned(), t);
            },
        )
        .await
    }

    /// A workspace, cached.
    pub async fn workspace_row(&self, id: &str) -> ApiResult<Option<WorkspaceRow>> {
        self.cached(
            |d| d.workspaces.get(id).cloned(),
            async { Ok(self.store.workspace(id).await?) },
            |d, w| {
                d.workspaces.insert(id.to_owned(), w);
            },
        )
        .await
    }

    /// A workspace by tenant and slug, cached.
    pub async fn workspace_by_slug(
        &self,
        tenant_id: &str,
        slug: &str,
    ) -> ApiResult<Option<WorkspaceRow>> {
        let k = (tenant_id.to_owned(), slug.to_owned());
        self.cached(
            |d| d.ws_by_slug.get(&k).cloned(),
            async { Ok(self.store.workspace_by_slug(tenant_id, slug).await?) },
            |d, w| {
                d.ws_by_slug.insert(k.clone(), w);
            },
        )
        .await
    }

    /// An agent by id, cached.
    pub async fn agent_row(&self, id: &str) -> ApiResult<Option<AgentRow>> {
        self.cached(
            |d| d.agents.get(id).cloned(),
            async { Ok(self.store.agent(id).await?) },
            |d, a| {
                d.agents.insert(id.to_owned(), a);
            },
        )
        .await
    }

    /// An agent by name or alias in a workspace, cached.
    pub async fn agent_by_name(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> ApiResult<Option<AgentRow>> {
        let k = (workspace_id.to_owned(), name.to_owned());
        self.cached(
            |d| d.by_name.get(&k).cloned(),
            async { Ok(self.store.agent_by_name(workspace_id, name).await?) },
            |d, a| {
                d.by_name.insert(k.clone(), a);
            },
        )
        .await
    }

    /// An agent's keys, revoked ones included, cached.
    pub async fn agent_keys(&self, agent_id: &str) -> ApiResult<Vec<KeyRow>> {
        self.cached(
            |d| d.keys.get(agent_id).cloned(),
            async { Ok(self.store.keys(agent_id).await?) },
            |d, k| {
                d.keys.insert(agent_id.to_owned(), k);
            },
        )
        .await
    }

    /// The decoded public key of a registered key row (`None` when the stored bytes are not a
    /// usable Ed25519 key), cached with the directory.
    pub fn public_key(&self, key: &KeyRow) -> Option<PublicKey> {
        if let Some(k) = self.dir().decoded.get(&key.id) {
            return *k;
        }
        let decoded = <[u8; 32]>::try_from(key.public_key.as_slice())
            .ok()
            .and_then(|b| PublicKey::from_bytes(&b).ok());
        self.dir().decoded.insert(key.id.clone(), decoded);
        decoded
    }

    /// The canonical address of an agent.
    pub async fn address_of(&self, agent: &AgentRow) -> ApiResult<String> {
        let t = self
            .tenant_row(&agent.tenant_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        let w = self
            .workspace_row(&agent.workspace_id)
            .await?
            .ok_or_else(ApiError::not_found)?;
        Ok(AgentAddress {
            tenant: t.slug,
            workspace: w.slug,
            name: agent.name.clone(),
        }
        .to_string())
    }

    /// The policy of a workspace (`None` when the workspace does not exist), parsed once and
    /// cached with the directory.
    pub(crate) async fn policy_of_workspace(
        &self,
        workspace_id: &str,
    ) -> ApiResult<Option<Arc<Policy>>> {
        if let Some(p) = self
            .policies
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(workspace_id)
        {
            return Ok(Some(p.clone()));
        }
        let generation = self.identity_generation();
        let Some(ws) = self.workspace_row(workspace_id).await? else {
            return Ok(None);
        };
        let policy = Arc::new(Policy::from_stored(&ws.policy));
        self.if_current(generation, || {
            self.policies
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(workspace_id.to_owned(), policy.clone());
        });
        Ok(Some(policy))
    }
}

#[cfg(test)]
mod identity_cache_tests {
    use agentbus_store::Store as _;

    /// A row read before an identity change and answered after the change forgot the caches is
    /// served to its caller but not cached: cached, it would outlive the change with no end (a
    /// revoked key still accepted). Read after it, a row is cached as before.
    #[tokio::test]
    async fn a_row_read_across_a_forgotten_change_is_not_cached() {
        let (_tmp, gw) = crate::test_gateway().await;
        let app = &gw.app;
        let tenant = app.store.tenants().await.unwrap().remove(0);
        let stale = app
            .cached(
                |d| d.tenants.get(&tenant.id).cloned(),
                async {
                    let row = app.store.tenant(&tenant.id).await?;
                    // The change lands, and is forgotten, while this read is on its way.
                    app.forget_identities();
                    Ok(row)
                },
                |d, t| {
                    d.tenants.insert(tenant.id.clone(), t);
                },
            )
            .await
            .unwrap();
        assert_eq!(stale.as_ref().map(|t| &t.id), Some(&tenant.id));
        assert!(!app.dir().tenants.contains_key(&tenant.id), "cached");
        // The same for the token cache and the policy cache, which stand beside the directory.
        let generation = app.identity_generation();
        app.forget_identities();
        let mut ran = false;
        app.if_current(generation, || ran = true);
        assert!(!ran, "cached across a forgotten change");
        app.tenant_row(&tenant.id).await.unwrap();
        assert!(app.dir().tenants.contains_key(&tenant.id), "not cached");
    }
}
