//! `agentbus search --in local`: this machine's messages (the log's redacted text), read with the
//! one query syntax every front end shares (`agentbus_protocol::search`).

use agentbus_protocol::search::{Doc, Found, Query};

use crate::line::Message;
use crate::store::{Store, StoreError};

/// A logged message as a search document: an imported one keeps its transport's type, subject,
/// conversation and sender address.
pub fn doc(m: &Message) -> Doc {
    let via = m.via.as_ref();
    Doc {
        id: m.id.clone(),
        kind: via.map_or_else(|| m.kind.as_str().to_owned(), |v| v.kind.clone()),
        from: m.by.clone(),
        to: m.to.clone(),
        subject: via.and_then(|v| v.subject.clone()).unwrap_or_default(),
        text: m.text.clone(),
        at_ms: m.ms,
        conversation: via
            .and_then(|v| v.conversation.clone())
            .or_else(|| m.re.clone())
            .unwrap_or_default(),
        attachments: via
            .map(|v| {
                v.attachments
                    .iter()
                    .map(|p| p.rsplit(['/', '\\']).next().unwrap_or(p).to_owned())
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The messages of this machine's log matching `q`, best first, at most `limit`.
pub fn search(store: &Store, q: &Query, limit: usize) -> Result<Vec<Found>, StoreError> {
    let now = store.now();
    Ok(q.find(store.read()?.iter().map(doc), now, limit))
}
