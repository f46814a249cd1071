//! `agentbus search --in local`: this machine's log, read with the shared query syntax, over
//! the redacted text only (a secret a message carried is not findable by its value).

use agentbus_local::search::search;
use agentbus_protocol::search::Query;

use crate::*;

#[test]
fn local_search_finds_logged_messages_by_words_and_filters_over_redacted_text() {
    let f = Fixture::new();
    // T0 is 2025-11-30T12:00:00Z. One recipient each: a session's window holds one unshown message.
    for s in ["r1", "r2", "r3"] {
        f.start(s);
    }
    let a = f.tell(
        &engineer(),
        &f.session("r1"),
        "deploy the v2 schema after lunch",
    );
    f.clock.advance_secs(60);
    let b = f.tell(&session("s2"), &f.session("r2"), "schema looks fine to me");
    f.tell(
        &engineer(),
        &f.session("r3"),
        "the token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for the deploy",
    );
    let q = |s: &str| Query::parse(s).unwrap();
    let ids = |s: &str| -> Vec<String> {
        search(&f.store, &q(s), 10)
            .unwrap()
            .into_iter()
            .map(|h| h.doc.id)
            .collect()
    };
    assert_eq!(
        ids("schema"),
        [b.clone(), a.clone()],
        "newest first among equals"
    );
    assert_eq!(ids("\"v2 schema\""), vec![a.clone()]);
    assert_eq!(ids("schema from:s2"), vec![b.clone()]);
    assert_eq!(ids("schema until:2025-11-30T12:00:30Z"), vec![a.clone()]);
    assert!(
        ids("ghp_abcdefghijklmnopqrstuvwxyz0123456789").is_empty(),
        "redacted"
    );
    let hit = &search(&f.store, &q("lunch"), 10).unwrap()[0];
    let marked = &hit.snippet.text[hit.snippet.highlights[0].clone()];
    assert_eq!(marked, "lunch");
}
