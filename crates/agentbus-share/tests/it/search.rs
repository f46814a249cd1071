//! `agentbus search --in share`: a checkout's files read with the shared query syntax, each
//! message once however many recipients it was copied to.

use agentbus_protocol::search::Query;
use agentbus_share::frontmatter::MessageType;
use agentbus_share::search::search;

use crate::*;

#[test]
fn share_search_finds_messages_by_words_parties_and_type_once_each() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    fx.member("b", "globex", "bots", &["architect", "tester"]);
    send(
        &a,
        &["globex/architect", "globex/tester"],
        MessageType::Handoff,
        "# Schema migration\n\nPlease take over the v2 schema migration.\n",
    );
    fx.clock.advance_secs(60);
    send(
        &a,
        &["globex/tester"],
        MessageType::Fyi,
        "the schema tests pass",
    );
    let snap = a.snapshot().unwrap();
    let now = agentbus_runtime::Clock::now(&fx.clock).0;
    let find = |q: &str| -> Vec<String> {
        search(&snap, &Query::parse(q).unwrap(), now, 10)
            .into_iter()
            .map(|f| f.doc.subject)
            .collect()
    };
    assert_eq!(
        find("schema"),
        ["Schema migration", "the schema tests pass"],
        "the subject ranks first; the handoff copied twice is one hit"
    );
    assert_eq!(find("schema to:tester type:fyi"), ["the schema tests pass"]);
    assert_eq!(find("schema from:reviewer"), find("schema"));
    assert!(find("schema from:architect").is_empty());
    assert_eq!(find("\"v2 schema migration\""), ["Schema migration"]);
}
