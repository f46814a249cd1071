//! Push, not polling: when a message arrives for the session, the server tells the
//! client without being asked.
//!
//! - Any client: `notifications/resources/updated` for [`crate::INBOX_URI`], to whoever
//!   subscribed: `resources/subscribe` (protocol revisions up to 2025-11-25) or a
//!   `subscriptions/listen` stream (2026-07-28). The notification carries no content; reading
//!   the resource claims nothing, and `read_inbox` shows the messages.
//! - Claude Code's channel (`notifications/claude/channel`), where the client declared
//!   `experimental["claude/channel"]` (in `initialize`, or in a `subscriptions/listen` request's
//!   `_meta` on 2026-07-28, where it goes on that stream) or the server was started with
//!   `--channel`: the content is the frames `read_inbox` would show. The client may drop it, so
//!   it claims nothing and counts as `pushed`, never shown: the message waits for `read_inbox` or
//!   the hook, which show it.
//!
//! Arrival is noticed two ways: the server's own receive loop wakes the watcher as soon as it has
//! imported a gateway message (when no sidecar holds the agent's receive lock), and the watcher
//! compares the local log's talk mark on a short interval (local tells, a sidecar's imports).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CustomNotification, RequestId, ResourceUpdatedNotificationParam, ServerNotification,
};
use rmcp::service::SubscriptionSink;
use rmcp::{Peer, RoleServer};
use serde_json::json;
use tokio::sync::{Mutex, Notify};

use agentbus_client::{Agent, ClientError};
use agentbus_local::Message;
use agentbus_local::deliver::{AnswerWith, render_block_for, select};

use crate::INBOX_URI;
use crate::error::ToolResult;
use crate::tools::Session;

/// The method of Claude Code's channel notification.
pub const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// The experimental capability that names Claude Code's channel.
pub const CHANNEL_CAPABILITY: &str = "claude/channel";
/// Below a channel notification's frames: a push is not a reading, so the messages stay unread.
const PUSH_NOTE: &str =
    "AgentBus: pushed as they arrived and still unread; read_inbox takes them.\n";

/// Who is told, and what they were told about.
#[derive(Default)]
struct Targets {
    /// A client that sent `resources/subscribe` for the inbox.
    subscribed: Option<Peer<RoleServer>>,
    /// Open `subscriptions/listen` streams that accepted the inbox.
    sinks: Vec<(u64, SubscriptionSink)>,
    /// A client whose context takes channel notifications, and the `subscriptions/listen`
    /// stream they go on (2026-07-28: a connection has no other path for them).
    channel: Option<(Peer<RoleServer>, Option<RequestId>)>,
    /// Ids already announced, so an update goes out once per arrival.
    announced: HashSet<String>,
    /// The next sink's handle.
    next: u64,
}

/// The push side of one server.
pub struct Push {
    session: Arc<Session>,
    targets: Mutex<Targets>,
    /// Wakes the watcher at once (the receive loop stored something, a client subscribed).
    pub wake: Notify,
}

impl Push {
    /// The push side for `session`.
    pub fn new(session: Arc<Session>) -> Push {
        Push {
            session,
            targets: Mutex::new(Targets::default()),
            wake: Notify::new(),
        }
    }

    /// A client subscribed to the inbox with `resources/subscribe`.
    pub async fn subscribe(&self, peer: Peer<RoleServer>) {
        let mut t = self.targets.lock().await;
        t.subscribed = Some(peer);
        t.announced.clear();
        self.wake.notify_one();
    }

    /// The client unsubscribed.
    pub async fn unsubscribe(&self) {
        self.targets.lock().await.subscribed = None;
    }

    /// A `subscriptions/listen` stream accepted the inbox; returns its handle.
    pub async fn add_sink(&self, sink: SubscriptionSink) -> u64 {
        let mut t = self.targets.lock().await;
        t.next += 1;
        let handle = t.next;
        t.sinks.push((handle, sink));
        t.announced.clear();
        self.wake.notify_one();
        handle
    }

    /// The stream `handle` ended.
    pub async fn remove_sink(&self, handle: u64) {
        self.targets
            .lock()
            .await
            .sinks
            .retain(|(h, _)| *h != handle);
    }

    /// The client takes Claude Code's channel notifications, on the listen stream `stream` when
    /// one is named.
    pub async fn enable_channel(&self, peer: Peer<RoleServer>, stream: Option<RequestId>) {
        self.targets.lock().await.channel = Some((peer, stream));
        self.wake.notify_one();
    }

    /// The listen stream `stream` ended: channel notifications it carried stop.
    pub async fn end_channel_stream(&self, stream: &RequestId) {
        let mut t = self.targets.lock().await;
        if t.channel
            .as_ref()
            .is_some_and(|(_, s)| s.as_ref() == Some(stream))
        {
            t.channel = None;
        }
    }

    /// Pushes `fresh` (arrivals not announced yet) as one channel notification, framed as
    /// `read_inbox` frames them, and records each as `pushed`: the client may drop it, so nothing
    /// is claimed and the messages wait for a surface that shows them. Returns whether it sent.
    async fn push_channel(
        &self,
        peer: &Peer<RoleServer>,
        stream: Option<&RequestId>,
        fresh: &[&Message],
    ) -> bool {
        let s = &self.session;
        let now = s.store.now();
        let sel = select(fresh, s.answerer(), s.harness.context_chars(), now);
        if sel.shown.is_empty() {
            return true;
        }
        let mut content = render_block_for(&sel, AnswerWith::Tools);
        content.push_str(PUSH_NOTE);
        let ids: Vec<&str> = sel.shown.iter().map(|x| x.message.id.as_str()).collect();
        let params = json!({
            "content": content,
            "meta": {"source": "agentbus", "session": s.id, "pushed": ids.join(",")},
        });
        let mut n = ServerNotification::CustomNotification(CustomNotification::new(
            CHANNEL_METHOD,
            Some(params),
        ));
        if let Some(id) = stream {
            rmcp::model::GetMeta::get_meta_mut(&mut n).set_subscription_id(id.clone());
        }
        match peer.send_notification(n).await {
            Ok(()) => {
                for x in &sel.shown {
                    let _ = s
                        .store
                        .record_pushed(x.message, &s.id, "mcp", CHANNEL_METHOD);
                }
                true
            }
            Err(e) => {
                eprintln!("agentbus mcp: the channel notification was not sent: {e}");
                false
            }
        }
    }

    /// Tells every target about messages that arrived since the last announcement.
    pub async fn announce(&self) -> ToolResult<()> {
        let mut t = self.targets.lock().await;
        if t.subscribed.is_none() && t.sinks.is_empty() && t.channel.is_none() {
            return Ok(());
        }
        let (waiting, _) = self.session.store.waiting_for(&self.session.id)?;
        let fresh: Vec<String> = waiting
            .iter()
            .map(|m| m.id.clone())
            .filter(|id| !t.announced.contains(id))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        if let Some((peer, stream)) = t.channel.clone() {
            let arrivals: Vec<&Message> =
                waiting.iter().filter(|m| fresh.contains(&m.id)).collect();
            if !self.push_channel(&peer, stream.as_ref(), &arrivals).await {
                t.channel = None;
            }
        }
        if let Some(peer) = t.subscribed.clone() {
            let param = ResourceUpdatedNotificationParam::new(INBOX_URI);
            if peer.notify_resource_updated(param).await.is_err() {
                t.subscribed = None;
            }
        }
        let mut open = Vec::new();
        for (h, sink) in std::mem::take(&mut t.sinks) {
            if sink.notify_resource_updated(INBOX_URI).await.is_ok() {
                open.push((h, sink));
            }
        }
        t.sinks = open;
        t.announced.extend(fresh);
        Ok(())
    }
}

/// Watches for arrivals until the process ends: on a wake, or when the local log's talk mark
/// moved since the last look (checked every `poll`).
pub async fn watch(push: Arc<Push>, poll: Duration) {
    let mut last = None;
    loop {
        let woken = tokio::select! {
            () = tokio::time::sleep(poll) => false,
            () = push.wake.notified() => true,
        };
        let talk = push.session.store.talk();
        if !woken && talk == last {
            continue;
        }
        last = talk;
        if let Err(e) = push.announce().await {
            eprintln!("agentbus mcp: {e}");
        }
    }
}

/// Receives for the agent while no sidecar does (the same receive path: persist, import, ack),
/// and wakes the watcher as soon as something was stored. The receive lock is tried again every
/// second, so a sidecar that stops is taken over.
pub async fn receive(agent: Arc<Agent>, push: Arc<Push>) {
    let inbox = agent.inbox();
    let mut held = None;
    loop {
        if held.is_none()
            && let Ok(Some(lock)) = inbox.try_lock()
        {
            held = Some((lock, agent.receiver(push.session.store.clone())));
        }
        let Some((_lock, receiver)) = held.as_mut() else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        match receiver.pull(5).await {
            Ok(report) if !report.stored.is_empty() => push.wake.notify_one(),
            Ok(_) => {}
            Err(e) => {
                if !matches!(e, ClientError::Unreachable { .. }) {
                    eprintln!("agentbus mcp: receiving: {e}");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
