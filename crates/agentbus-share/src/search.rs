//! `agentbus search --in share`: a checkout's messages, broadcasts and publications (frontmatter
//! and body), read with the one query syntax every front end shares (`agentbus_protocol::search`).
//! A share is plain files every member holds: nothing here is more private than the checkout.

use agentbus_protocol::search::{Doc, Found, Query};

use crate::frontmatter::{Message, Publication};
use crate::share::{Located, Snapshot};
use crate::views::subject;

/// A message or broadcast as a search document: its id, type, parties, thread and body; the
/// subject is the body's first line, as every other view shows it.
pub fn message_doc(m: &Located<Message>) -> Doc {
    let d = &m.doc;
    Doc {
        id: d.id.clone(),
        kind: d.kind.as_str().to_owned(),
        from: format!("share:{}", d.from.short()),
        to: format!("share:{}", d.to.short()),
        subject: subject(&d.body).unwrap_or_default(),
        text: d.body.clone(),
        at_ms: d.created.as_ref().and_then(|c| c.at).map_or(0, |t| t.0),
        conversation: d.thread.clone(),
        attachments: Vec::new(),
    }
}

/// A publication as a search document: its topic is its conversation, `publication` its type.
pub fn publication_doc(p: &Located<Publication>) -> Doc {
    let d = &p.doc;
    Doc {
        id: d.id.clone(),
        kind: "publication".into(),
        from: format!("share:{}", d.publisher.short()),
        to: String::new(),
        subject: subject(&d.body).unwrap_or_default(),
        text: d.body.clone(),
        at_ms: d.created.as_ref().and_then(|c| c.at).map_or(0, |t| t.0),
        conversation: d.topic.clone(),
        attachments: Vec::new(),
    }
}

/// What of `snap` matches `q` (the time `now_ms`), best first, at most `limit`: each message
/// once, however many recipients it was copied to.
pub fn search(snap: &Snapshot, q: &Query, now_ms: i64, limit: usize) -> Vec<Found> {
    let mut seen = std::collections::HashSet::new();
    let messages = snap
        .all_messages()
        .filter(|m| seen.insert(m.doc.id.clone()))
        .map(message_doc);
    let publications = snap.publications.iter().map(publication_doc);
    q.find(messages.chain(publications), now_ms, limit)
}
