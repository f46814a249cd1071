//! The engineer's and the terminal's views of the store: the inbox (LM-81, LM-45), a whole
//! message (`inbox --show`), the sessions with their unread counts (LM-37, LM-47), and the feed
//! `listen` polls (LM-56).

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::deliver::{Recipient, for_engineer, for_session, paused};
use crate::line::{Kind, Message, engineer_seen_ids};
use crate::session::Presence;
use crate::store::{Store, StoreError, messages};

/// One message in the engineer's inbox.
#[derive(Debug, Clone, Serialize)]
pub struct InboxItem {
    /// The message.
    pub message: Message,
    /// Whether this engineer was shown it before (a Seen of theirs lists it).
    pub seen: bool,
    /// An ask nobody answered yet (G-LM-16).
    pub unanswered: bool,
}

/// One session as `agentbus sessions` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionView {
    /// Its presence record.
    #[serde(flatten)]
    pub presence: Presence,
    /// What its next prompts or tool calls would show (LM-37).
    pub unread: usize,
    /// The ids it has been shown (its claims, LM-47).
    pub shown: Vec<String>,
    /// The engineer's reason, while it is paused.
    pub paused: Option<String>,
}

/// Whose mail from the gateway an engineer view lists, beside the engineer's own: a machine can
/// hold several agents' profiles, and `agentbus --profile X inbox` is X's mail, not theirs all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agents {
    /// Every agent's (`agentbus inbox --all-agents`).
    All,
    /// These identities' (`agent://…`) only; none lists only the engineer's own mail.
    Only(Vec<String>),
}

impl Agents {
    /// Whether `m` is listed: messages not for a gateway identity (the engineer's, a share's)
    /// always are.
    fn lists(&self, m: &Message) -> bool {
        match (self, m.address()) {
            (Agents::Only(ids), Some(crate::Address::Agent(id))) if id.starts_with("agent://") => {
                ids.contains(&id)
            }
            _ => true,
        }
    }
}

/// The `by` a Seen line of an engineer view writes (G-LM-9).
pub fn engineer_by(email: Option<&str>) -> String {
    match email {
        Some(e) => format!("engineer:{e}"),
        None => "engineer".to_owned(),
    }
}

impl Store {
    /// The engineer's messages, newest last, of `agents`' mail; with `all` false only those this
    /// engineer has not been shown (LM-81).
    pub fn inbox(
        &self,
        email: Option<&str>,
        all: bool,
        agents: &Agents,
    ) -> Result<Vec<InboxItem>, StoreError> {
        let node = self.node()?;
        let lines = self.lines()?;
        let seen = engineer_seen_ids(&lines, &node);
        let msgs = messages(lines);
        let answered: HashSet<&str> = msgs.iter().filter_map(|m| m.re.as_deref()).collect();
        let bound: HashSet<String> = self
            .sessions()?
            .into_iter()
            .filter_map(|p| p.agent)
            .collect();
        Ok(for_engineer(&msgs, email, &bound, self.now())
            .into_iter()
            .filter(|m| agents.lists(m))
            .map(|m| InboxItem {
                seen: seen.contains(&m.id),
                unanswered: m.kind == Kind::Ask && !answered.contains(m.id.as_str()),
                message: m.clone(),
            })
            .filter(|i| all || !i.seen)
            .collect())
    }

    /// Acknowledges, as this engineer, the items shown that no Seen of theirs lists yet
    /// (LM: ack_engineer, LM-45): the engineer's own Seen, so the next look lists only what is
    /// new. It records no showing: an engineer's view puts nothing in front of a model, so the
    /// gateway's "shown" receipt (§5.8) is left to a harness's hook.
    pub fn ack_engineer(
        &self,
        email: Option<&str>,
        shown: &[InboxItem],
    ) -> Result<usize, StoreError> {
        let by = engineer_by(email);
        let ids: Vec<String> = shown
            .iter()
            .filter(|i| !i.seen)
            .map(|i| i.message.id.clone())
            .collect();
        self.ack(&by, &ids)
    }

    /// The message `id`, whole, whoever it is for (`agentbus inbox --show`).
    pub fn show(&self, id: &str) -> Result<Option<Message>, StoreError> {
        Ok(self.read()?.into_iter().find(|m| m.id == id))
    }

    /// The sessions known here, with what each would be shown next (LM-37) and has been shown.
    pub fn session_views(&self) -> Result<Vec<SessionView>, StoreError> {
        let node = self.node()?;
        let msgs = self.read()?;
        let now = self.now();
        let mut out = Vec::new();
        for p in self.sessions()? {
            let r = Recipient {
                session: p.session.clone(),
                node: node.clone(),
                started_ms: Some(p.started_ms),
                agent: p.agent.clone(),
            };
            let settled = self.settled(&p.session, p.agent.as_deref())?;
            let (waiting, paused) = state_of(&msgs, &r, &settled, now);
            let unread = waiting.len();
            let mut shown: Vec<String> = self.shown_claims(&p.session)?.into_iter().collect();
            shown.sort();
            out.push(SessionView {
                paused,
                presence: p,
                unread,
                shown,
            });
        }
        Ok(out)
    }

    /// What `session` would be shown next (unclaimed, oldest first) and the engineer's reason
    /// while it is paused. A peek: it claims and acknowledges nothing (the MCP server's inbox
    /// resource and its push notifications; only delivery itself claims).
    pub fn waiting_for(&self, session: &str) -> Result<(Vec<Message>, Option<String>), StoreError> {
        let Some(p) = self.presence(session)? else {
            return Ok((Vec::new(), None));
        };
        let settled = self.settled(session, p.agent.as_deref())?;
        let r = Recipient {
            session: p.session,
            node: self.node()?,
            started_ms: Some(p.started_ms),
            agent: p.agent,
        };
        let msgs = self.read()?;
        let (waiting, paused) = state_of(&msgs, &r, &settled, self.now());
        Ok((waiting.into_iter().cloned().collect(), paused))
    }

    /// Every id shown, with the sessions it was shown to (LM: seen_by, LM-47).
    pub fn seen_by(&self) -> Result<HashMap<String, Vec<String>>, StoreError> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for p in self.sessions()? {
            for id in self.shown_claims(&p.session)? {
                out.entry(id).or_default().push(p.session.clone());
            }
        }
        Ok(out)
    }
}

/// One session's messages not settled (LM-37: claimed by it, or by another session of its
/// identity) and its pause (G-LM-7), from messages already read.
fn state_of<'a>(
    msgs: &'a [Message],
    r: &Recipient,
    settled: &HashSet<String>,
    now: i64,
) -> (Vec<&'a Message>, Option<String>) {
    let waiting = for_session(msgs, r, now)
        .into_iter()
        .filter(|m| !settled.contains(&m.id))
        .collect();
    (waiting, paused(msgs, r, now))
}
