//! Workspace policy (§4.2): documents validated against the published schema,
//! glob semantics as a table of cases, canonical addresses, and the documented default.

use serde_json::{Value, json};

use agentbus_gateway::policy::{Effect, glob_matches, unstated_default};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

/// Every line of `tests/data/policy/globs.table`: pattern, address, whether it matches.
#[test]
fn policy_globs_match_as_the_table_says() {
    let table = include_str!("../data/policy/globs.table");
    let mut cases = 0;
    for (n, line) in table.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 3, "globs.table line {}: {line}", n + 1);
        let want = match cols[2] {
            "yes" => true,
            "no" => false,
            other => panic!("globs.table line {}: `{other}` is yes or no", n + 1),
        };
        let got = cols[0] == "*" || glob_matches(cols[0], cols[1]);
        assert_eq!(got, want, "globs.table line {}: {line}", n + 1);
        cases += 1;
    }
    assert!(cases >= 25, "{cases} cases");
}

/// The unstated default is written once, in the schema, and the gateway reads it from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unstated_default_is_the_schemas_and_it_denies() {
    let h = Harness::start().await;
    let (s, schema) = h.get("/schemas/gateway/policy/v1.json", "").await;
    assert_eq!(s, 200);
    assert_eq!(schema["properties"]["default"]["default"], "deny");
    assert_eq!(unstated_default(), Effect::Deny);
    let (_, wk) = h.get("/.well-known/agentbus.json", "").await;
    assert!(
        wk["schemas"]
            .as_array()
            .unwrap()
            .contains(&json!("/schemas/gateway/policy/v1.json"))
    );
}

async fn default_workspace(h: &Harness) -> String {
    let (s, v) = h.get("/v1/workspaces", &h.admin).await;
    assert_eq!(s, 200, "{v}");
    v["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["slug"] == "default")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn put_policy(h: &Harness, ws: &str, doc: Value) -> (u16, Value) {
    h.req(
        reqwest::Method::PUT,
        &format!("/v1/workspaces/{ws}/policy"),
        &h.admin,
        Some(doc),
    )
    .await
}

/// Every case of `tests/data/policy/documents.cases`: stored as sent, or refused with AB-3026
/// listing exactly the violations given, leaving the stored policy as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_documents_are_validated_against_the_schema() {
    let h = Harness::start().await;
    let ws = default_workspace(&h).await;
    let path = format!("/v1/workspaces/{ws}/policy");
    let mut stored = h.get(&path, &h.admin).await.1;
    let mut cases = 0;
    for (n, line) in include_str!("../data/policy/documents.cases")
        .lines()
        .enumerate()
    {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("documents.cases line {}", n + 1);
        let (expect, rest) = line.split_once(' ').unwrap();
        let (paths, doc) = match expect {
            "ok" => (None, rest),
            "err" => {
                let (p, d) = rest.split_once(' ').unwrap();
                (Some(p), d)
            }
            other => panic!("{at}: `{other}` is ok or err"),
        };
        let doc: Value = serde_json::from_str(doc).unwrap_or_else(|e| panic!("{at}: {e}"));
        let (s, v) = put_policy(&h, &ws, doc.clone()).await;
        match paths {
            None => {
                assert_eq!(s, 200, "{at}: {v}");
                stored = doc;
            }
            Some(p) => {
                assert_eq!((s, code(&v)), (422, "AB-3026"), "{at}: {v}");
                assert!(
                    v["error"]["doc_url"]
                        .as_str()
                        .unwrap()
                        .ends_with("/errors/AB-3026")
                );
                let mut want: Vec<String> = p
                    .split(',')
                    .map(|p| {
                        if p == "-" {
                            String::new()
                        } else {
                            p.to_owned()
                        }
                    })
                    .collect();
                let mut got: Vec<String> = v["error"]["details"]["violations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| {
                        assert_eq!(x["code"], "AB-3026", "{at}");
                        x["path"].as_str().unwrap().to_owned()
                    })
                    .collect();
                want.sort();
                got.sort();
                got.dedup();
                assert_eq!(got, want, "{at}: {v}");
            }
        }
        assert_eq!(
            h.get(&path, &h.admin).await.1,
            stored,
            "{at}: stored policy"
        );
        cases += 1;
    }
    assert!(cases >= 20, "{cases} cases");
}

/// Policy sees canonical addresses: a rule about an agent holds whether `to` names it, an alias
/// of it or its `agt_` id; an empty rule list means the default; no default means deny.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_6_2_1_policy_matches_canonical_addresses_and_the_default_decides_the_rest() {
    let h = Harness::start().await;
    let ws = default_workspace(&h).await;
    let a = h.agent("alpha").await;
    let b = h.agent_with("bravo", json!({"aliases": ["bee"]})).await;
    let c = h.agent("charlie").await;
    let deny_bravo = json!({"default": "allow", "rules": [
        {"from": "*", "to": "agent://default/default/brav*", "effect": "deny"}
    ]});
    assert_eq!(put_policy(&h, &ws, deny_bravo).await.0, 200);
    for to in [
        b.address.clone(),
        b.address.replace("bravo", "bee"),
        b.id.clone(),
    ] {
        let (s, v, _) = h.publish(&a, &signed(&h, &a, &to, "x")).await;
        assert_eq!((s, code(&v)), (403, "AB-2001"), "to {to}");
    }
    assert_eq!(h.publish(&a, &signed(&h, &a, &c.address, "x")).await.0, 202);
    // WP-6.2-1: a task.request needs the same permission, and stores no task without it.
    let (s, v, _) = h
        .publish(&a, &sign(&a, request(&h, &a, &b, json!({}))))
        .await;
    assert_eq!((s, code(&v)), (403, "AB-2001"));
    assert_eq!(h.get("/v1/tasks", &a.token).await.1["tasks"], json!([]));
    // The workspace glob the issue found never matching: every agent of the workspace.
    let allow_ws = json!({"default": "deny", "rules": [
        {"from": "agent://default/default/*", "to": "agent://default/default/*", "effect": "allow"}
    ]});
    assert_eq!(put_policy(&h, &ws, allow_ws).await.0, 200);
    assert_eq!(h.publish(&a, &signed(&h, &a, &b.id, "x")).await.0, 202);
    // An empty rule list: the stated default decides; with none stated, deny.
    for (doc, want) in [
        (json!({"default": "allow", "rules": []}), 202),
        (json!({"rules": []}), 403),
        (json!({}), 403),
    ] {
        assert_eq!(put_policy(&h, &ws, doc.clone()).await.0, 200);
        let got = h.publish(&a, &signed(&h, &a, &c.address, "x")).await.0;
        assert_eq!(got, want, "{doc}");
    }
}
