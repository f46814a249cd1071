//! `GET /v1/search`: what the caller may read and nothing else, ranked with snippets, paged,
//! with message text never at rest in the clear (a blind index), and hostile queries refused.

use serde_json::{Value, json};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

async fn search(h: &Harness, token: &str, q: &str) -> (u16, Value) {
    // Percent-encoded byte by byte: every query reaches the gateway exactly as written.
    let q: String = q.bytes().map(|b| format!("%{b:02X}")).collect();
    h.get(&format!("/v1/search?q={q}"), token).await
}

fn ids(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|h| h["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn send(h: &Harness, from: &Agent, to: &Agent, text: &str, subject: Option<&str>) -> String {
    let mut m = message(h, from, &to.address, text);
    if let Some(s) = subject {
        m.insert("subject".into(), json!(s));
    }
    let m = sign(from, m);
    let id = m["id"].as_str().unwrap().to_owned();
    assert_eq!(h.publish(from, &m).await.0, 202);
    id
}

/// A party finds its messages by their words, ranked (a subject's words count more), with a
/// snippet whose highlights are the words; nobody else's messages are candidates: another
/// agent of the tenant, another tenant, a word only they wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_only_what_the_caller_may_read() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let carol = h.agent("carol").await;
    let a1 = send(
        &h,
        &alpha,
        &bravo,
        "The reviewer said the v2 schema needs a version field.",
        None,
    )
    .await;
    h.clock.advance_secs(1);
    let a2 = send(&h, &bravo, &alpha, "Fixed the schema.", Some("v2 schema")).await;
    h.clock.advance_secs(1);
    let c1 = send(
        &h,
        &carol,
        &carol,
        "carol's private schema notes zebra",
        None,
    )
    .await;
    let (s, v) = search(&h, &alpha.token, "schema v2").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        ids(&v),
        [a2.clone(), a1.clone()],
        "the subject ranks it first: {v}"
    );
    let first = &v["hits"][0];
    assert_eq!(first["from"], json!(bravo.address));
    assert_eq!(first["subject"], "v2 schema");
    let snippet = &v["hits"][1]["snippet"];
    let text = snippet["text"].as_str().unwrap();
    let marked: Vec<&str> = snippet["highlights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &text[r[0].as_u64().unwrap() as usize..r[1].as_u64().unwrap() as usize])
        .collect();
    assert_eq!(marked, ["v2", "schema"], "{snippet}");
    // Every word must occur; a phrase in order.
    assert_eq!(
        ids(&search(&h, &alpha.token, "schema zebra").await.1),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(&search(&h, &alpha.token, "\"version field\"").await.1),
        vec![a1.clone()]
    );
    assert!(ids(&search(&h, &alpha.token, "\"field version\"").await.1).is_empty());
    // Not yours: no hit, no count, no snippet; exactly what a word nobody wrote gets.
    let (_, theirs) = search(&h, &alpha.token, "zebra").await;
    let (_, nobody) = search(&h, &alpha.token, "quokka").await;
    assert_eq!(theirs, nobody);
    assert_eq!(ids(&search(&h, &carol.token, "zebra").await.1), [c1]);
    // A tenant admin reads the tenant's; another tenant's admin nothing of it.
    assert_eq!(ids(&search(&h, &h.admin, "schema").await.1).len(), 3);
    let other = h.second_tenant().await;
    assert_eq!(
        search(&h, &other, "schema").await.1,
        search(&h, &other, "quokka").await.1
    );
    // Filters: from a bare name of the caller's workspace, a type, a time.
    assert_eq!(
        ids(&search(&h, &alpha.token, "schema from:bravo").await.1),
        vec![a2.clone()]
    );
    assert_eq!(
        ids(
            &search(&h, &alpha.token, &format!("from:{}", alpha.address))
                .await
                .1
        ),
        vec![a1.clone()]
    );
    assert_eq!(
        ids(&search(&h, &alpha.token, "schema type:task").await.1),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(&search(&h, &alpha.token, "schema since:1m").await.1).len(),
        2
    );
    let (s, v) = search(&h, &alpha.token, "schema until:2000-01-01").await;
    assert_eq!((s, ids(&v).len()), (200, 0));
}

/// Pages: `limit` hits each, `next` continues the same ranking until none is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_pages_by_cursor() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(send(&h, &alpha, &bravo, &format!("deploy note {i}"), None).await);
        h.clock.advance_secs(1);
    }
    let mut seen = Vec::new();
    let mut path = "/v1/search?q=deploy&limit=2".to_owned();
    loop {
        let (s, v) = h.get(&path, &bravo.token).await;
        assert_eq!(s, 200, "{v}");
        seen.extend(ids(&v));
        // A message sent meanwhile does not shift the pages of a query already begun.
        send(&h, &alpha, &bravo, "deploy later", None).await;
        match v["next"].as_str() {
            Some(next) => path = format!("/v1/search?q=deploy&limit=2&cursor={next}"),
            None => break,
        }
    }
    sent.reverse();
    assert_eq!(seen, sent, "newest first among equals, each once");
}

/// WP-13.4-2 for the index: a word of a message's text is nowhere in the store's file, in the
/// message or in its search terms; the message is found all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_index_keeps_no_text_at_rest() {
    if agentbus_testkit::gateway::on_postgres() {
        return; // The file to read is SQLite's.
    }
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let id = send(&h, &alpha, &bravo, "the word xylophonicity", None).await;
    assert_eq!(
        ids(&search(&h, &bravo.token, "xylophonicity").await.1),
        [id]
    );
    let (dir, _, _tmp) = h.stop().await;
    let mut found = false;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            found |= bytes.windows(13).any(|w| w == b"xylophonicity");
        }
    }
    assert!(
        !found,
        "a message's word is stored in the clear in {}",
        dir.display()
    );
}

/// `search_index = false`: a publish writes no index, so its message is never found; what was
/// indexed while the setting was on stays findable after a restart with it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_index_off_indexes_nothing_new() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let before = send(&h, &alpha, &bravo, "quokka before the switch", None).await;
    let (dir, clock, tmp) = h.stop().await;
    let mut h = Harness::start_full(dir, Some(clock), |c| c.search_index = false, |_| {}).await;
    if let Some(tmp) = tmp {
        h.hold(tmp);
    }
    let after = send(&h, &alpha, &bravo, "quokka after the switch", None).await;
    let (s, v) = search(&h, &bravo.token, "quokka").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(ids(&v), [before], "{v}");
    // The unindexed message is stored as any other.
    let (s, m) = h
        .get(&format!("/v1/messages/{after}/delivery"), &alpha.token)
        .await;
    assert_eq!(s, 200, "{m}");
}

/// Hostile and malformed queries: a documented 4xx (AB-3080) before any work, never a 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_refuses_hostile_queries() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let long = "a".repeat(600);
    let many = (0..40)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    for q in [
        "",
        long.as_str(),
        many.as_str(),
        "\"unclosed",
        "color:red",
        "since:yesterday",
        "\" OR 1=1 --",
    ] {
        let (s, v) = search(&h, &alpha.token, q).await;
        if q == "\" OR 1=1 --" {
            assert_eq!(s, 400, "{q}: {v}");
        }
        assert!(s == 400 || s == 200, "{q}: {s} {v}");
        if s == 400 {
            assert_eq!(code(&v), "AB-3080", "{q}: {v}");
        }
    }
    // FTS syntax in words is only words.
    let (s, v) = search(&h, &alpha.token, "NEAR(a b) OR * AND -x ^y").await;
    assert_eq!(s, 200, "{v}");
    for path in [
        "/v1/search?q=x&cursor=nonsense",
        "/v1/search?q=x&limit=0",
        "/v1/search?q=x&cursor=1.2.-3",
    ] {
        let (s, v) = h.get(path, &alpha.token).await;
        assert_eq!((s, code(&v)), (400, "AB-3080"), "{path}: {v}");
    }
    let (s, _) = h.get("/v1/search?q=x", "abu_not-a-token").await;
    assert_eq!(s, 401);
}
