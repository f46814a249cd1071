//! `GET /console/search?q=&cursor=`: `GET /v1/search` as the viewer reads it, hits with their
//! snippets, the query's words marked. Every snippet, subject and address is a peer's words: each
//! piece goes through the template's escaping, and only the marks are the console's.

use askama::Template;
use axum::extract::Query;
use axum::response::Response;
use serde::Deserialize;

use crate::render::{Addr, Chrome, page, peer};
use crate::session::Viewer;

/// Hits per page.
const PAGE: u32 = 25;

/// The query string.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SearchQuery {
    q: Option<String>,
    cursor: Option<String>,
}

/// One piece of a snippet: text, and whether it is one of the query's words.
struct Piece {
    text: String,
    hit: bool,
}

struct Hit {
    id: String,
    conversation: String,
    kind: String,
    from: Addr,
    to: Addr,
    subject: String,
    at: String,
    task: Option<(String, String)>,
    snippet: Vec<Piece>,
}

#[derive(Template)]
#[template(path = "search.html")]
struct SearchPage<'a> {
    chrome: Option<&'a Chrome>,
    q: String,
    hits: Vec<Hit>,
    searched: bool,
    next: Option<String>,
}

/// A snippet cut into plain and marked pieces at its highlight ranges (byte offsets on character
/// boundaries; a range that is not one is shown plain).
fn pieces(text: &str, highlights: &[[usize; 2]]) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut at = 0;
    for [s, e] in highlights {
        let (Some(before), Some(word)) = (text.get(at..*s), text.get(*s..*e)) else {
            continue;
        };
        out.push(Piece {
            text: peer(before),
            hit: false,
        });
        out.push(Piece {
            text: peer(word),
            hit: true,
        });
        at = *e;
    }
    out.push(Piece {
        text: peer(text.get(at..).unwrap_or_default()),
        hit: false,
    });
    out
}

/// `GET /console/search`: the form, and with `q` its hits.
pub(crate) async fn page_of(v: Viewer, Query(q): Query<SearchQuery>) -> Response {
    let r = async {
        let text = q.q.unwrap_or_default();
        let (hits, next, searched) = if text.trim().is_empty() {
            (Vec::new(), None, false)
        } else {
            let r = v.ops().search(&text, q.cursor.as_deref(), PAGE).await?;
            let hits = r
                .hits
                .into_iter()
                .map(|h| Hit {
                    id: h.id,
                    conversation: h.conversation_id,
                    kind: super::conversations::short_kind(&h.message_type),
                    from: Addr::of(&h.from),
                    to: Addr::of(&h.to),
                    subject: h.subject.as_deref().map(peer).unwrap_or_default(),
                    at: h.received_at,
                    task: h.task.map(|t| (t.id, t.state)),
                    snippet: pieces(&h.snippet.text, &h.snippet.highlights),
                })
                .collect();
            (hits, r.next, true)
        };
        page(&SearchPage {
            chrome: Some(&v.chrome),
            q: text,
            hits,
            searched,
            next,
        })
    }
    .await;
    v.respond(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_mark_only_the_ranges_on_character_boundaries() {
        let p = pieces("the v2 schéma", &[[4, 6], [7, 14], [8, 9]]);
        let shown: Vec<(&str, bool)> = p.iter().map(|p| (p.text.as_str(), p.hit)).collect();
        assert_eq!(
            shown,
            [
                ("the ", false),
                ("v2", true),
                (" ", false),
                ("schéma", true),
                ("", false)
            ]
        );
    }
}
