//! The wake-up layer: what wakes an inbox's long-polls and WebSockets (here and on the other
//! replicas), presence, and the per-agent rate buckets. Above the directory, whose caches a
//! replica's signal may forget.

use std::sync::Arc;

use agentbus_protocol::Code;
use agentbus_store::Signal;

use crate::error::{ApiError, ApiResult};
use crate::state::{App, InboxWaker};

impl App {
    /// Applies a signal another replica sent: wakes the inboxes it names, or forgets every
    /// cached identity row; after a lost connection (signals may be missing) both, for all.
    pub(crate) fn on_signal(&self, s: Signal) {
        match s {
            Signal::Inbox(ids) => self.wake_here(ids),
            Signal::Identity => self.forget_identities(),
            Signal::Resync => {
                self.forget_identities();
                let m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
                for n in m.values() {
                    n.wake();
                }
            }
        }
    }

    /// The waker of an inbox.
    pub(crate) fn waker(&self, agent_id: &str) -> Arc<InboxWaker> {
        let mut m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(agent_id.to_owned()).or_default().clone()
    }

    /// Wakes every long-poll and WebSocket waiting on these inboxes, here and on the other
    /// replicas.
    pub(crate) fn wake(&self, agent_ids: impl IntoIterator<Item = impl AsRef<str>>) {
        if !self.peers {
            // One process: no copy of the ids on the publish path.
            return self.wake_here(agent_ids);
        }
        let ids: Vec<String> = agent_ids
            .into_iter()
            .map(|id| id.as_ref().to_owned())
            .collect();
        self.wake_here(&ids);
        self.tell_peers(Signal::Inbox(ids));
    }

    fn wake_here(&self, agent_ids: impl IntoIterator<Item = impl AsRef<str>>) {
        let m = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        for id in agent_ids {
            if let Some(n) = m.get(id.as_ref()) {
                n.wake();
            }
        }
    }

    /// Takes one token from the agent's bucket (§13.6); the error says when to retry.
    pub(crate) fn rate_limit(&self, agent_id: &str) -> ApiResult<()> {
        let now = self.now();
        let mut m = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = m
            .entry(agent_id.to_owned())
            .or_insert((self.config.rate_burst, now));
        let refill = (now - *at).max(0) as f64 / 1000.0 * self.config.rate_per_agent;
        *tokens = (*tokens + refill).min(self.config.rate_burst);
        *at = now;
        if *tokens < 1.0 {
            let wait = ((1.0 - *tokens) / self.config.rate_per_agent)
                .ceil()
                .max(1.0) as u64;
            let mut e = ApiError::new(
                Code::RateLimited,
                format!(
                    "more than {} publishes per second",
                    self.config.rate_per_agent
                ),
            );
            e.retry_after = Some(wait);
            return Err(e);
        }
        *tokens -= 1.0;
        Ok(())
    }

    /// Records that an agent is reading its inbox now (presence, §10 `status`).
    pub(crate) fn mark_seen(&self, agent_id: &str) {
        let now = self.now();
        if let Ok(mut m) = self.seen.lock() {
            m.insert(agent_id.to_owned(), now);
        }
    }

    /// `online` when the agent read its inbox within the last visibility timeout, else `offline`,
    /// and when it was last heard from (an inbox read, or any request under its credential).
    pub(crate) fn presence(&self, agent_id: &str) -> (&'static str, Option<i64>) {
        let read = self.seen.lock().ok().and_then(|m| m.get(agent_id).copied());
        let heard = self
            .heard
            .lock()
            .ok()
            .and_then(|m| m.get(agent_id).copied());
        let online =
            read.is_some_and(|t| self.now() - t <= self.config.visibility_timeout_s * 1000);
        (if online { "online" } else { "offline" }, read.max(heard))
    }
}
