//! Agent cards in the A2A form (§10, WP-10-5): the mapping, and who may fetch a card where.

use serde_json::{Value, json};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_5_the_a2a_card_maps_name_description_capabilities_and_address() {
    let h = Harness::start().await;
    let cap = json!({
        "name": "code.review", "version": "2", "description": "Review a diff and return findings.",
        "input_schema": {"type": "object", "properties": {"artifact_id": {"type": "string"}}},
        "output_schema": {"type": "object"},
        "accepts_attachments": ["text/x-diff"],
    });
    let a = h
        .agent_with(
            "reviewer",
            json!({"description": "Reviews changes.", "capabilities": [cap], "tags": ["go"]}),
        )
        .await;
    let (s, card) = h.get(&format!("/v1/agents/{}/a2a", a.id), &a.token).await;
    assert_eq!(s, 200, "{card}");
    assert_eq!(card["name"], "reviewer");
    assert_eq!(card["description"], "Reviews changes.");
    let endpoint = format!("{}/v1/agents/{}", h.url, a.id);
    assert_eq!(card["supportedInterfaces"][0]["url"], json!(endpoint));
    assert_eq!(card["url"], json!(endpoint));
    let skill = &card["skills"][0];
    assert_eq!(skill["id"], "code.review/v2");
    assert_eq!(skill["name"], "code.review");
    assert_eq!(
        skill["inputModes"],
        json!(["application/json", "text/x-diff"])
    );
    assert_eq!(skill["outputModes"], json!(["application/json"]));
    assert_eq!(skill["tags"], json!(["code.review", "go"]));
    let ext = &card["capabilities"]["extensions"][0];
    assert_eq!(ext["params"]["address"], json!(a.address));
    assert_eq!(
        ext["params"]["capabilities"][0]["input_schema"],
        cap["input_schema"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_5_a_card_not_yours_to_see_answers_like_no_card() {
    let h = Harness::start().await;
    let a = h.agent("reviewer").await;
    let hidden = h
        .agent_with("hermit", json!({"visibility": "private"}))
        .await;
    let other_admin = h.second_tenant().await;
    let stranger = h.agent_in(&other_admin, "stranger").await;
    let unknown = "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";
    let (s0, v0) = h.get(&format!("/v1/agents/{unknown}/a2a"), &a.token).await;
    assert_eq!((s0, code(&v0)), (404, "AB-4004"));
    for id in [&hidden.id, &stranger.id] {
        let (s, v) = h.get(&format!("/v1/agents/{id}/a2a"), &a.token).await;
        assert_eq!((s, code(&v)), (s0, code(&v0)), "{id}");
    }
    // The well-known path: nothing without a credential.
    let wk = |id: &str| format!("/v1/agents/{id}/.well-known/agent-card.json");
    let (s1, v1) = h.get(&wk(unknown), "").await;
    assert_eq!((s1, code(&v1)), (404, "AB-4004"));
    let (s, v) = h.get(&wk(&a.id), "").await;
    assert_eq!((s, code(&v)), (s1, code(&v1)));
    assert_eq!(h.get(&wk(&a.id), &a.token).await.0, 200);
    let path = format!("/v1/agents/{}", a.id);
    let publish = |token: String, path: String| {
        let h = &h;
        async move {
            let body = Some(json!({"visibility": "public"}));
            h.req(reqwest::Method::PATCH, &path, &token, body).await.0
        }
    };
    assert_eq!(publish(a.token.clone(), path.clone()).await, 200);
    // Without public discovery a public card behaves as `tenant` (§10, DECISIONS 15): no caller
    // sees it from outside, with a credential or without one.
    let spath = format!("/v1/agents/{}", stranger.id);
    assert_eq!(publish(stranger.token.clone(), spath.clone()).await, 200);
    assert_eq!(h.get(&wk(&a.id), "").await.0, 404);
    for p in [wk(&stranger.id), format!("{spath}/a2a"), spath.clone()] {
        assert_eq!(h.get(&p, &a.token).await.0, 404, "{p}");
    }
    assert_eq!(h.get(&wk(&a.id), &a.token).await.0, 200);
}

/// With public discovery on, anyone reads a public card: a credential of any tenant on every card
/// route, and no credential at the well-known path (docs/protocol.md "Card visibility"); the
/// directory listing stays within the tenant, and other cards stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_5_public_discovery_shows_a_public_card_to_anyone_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.public_discovery = true).await;
    let a = h.agent("reviewer").await;
    let hidden = h
        .agent_with("hermit", json!({"visibility": "private"}))
        .await;
    let other_admin = h.second_tenant().await;
    let stranger = h.agent_in(&other_admin, "stranger").await;
    let wk = |id: &str| format!("/v1/agents/{id}/.well-known/agent-card.json");
    let spath = format!("/v1/agents/{}", stranger.id);
    assert_eq!(h.get(&wk(&stranger.id), "").await.0, 404, "not public yet");
    assert_eq!(h.get(&wk(&stranger.id), &a.token).await.0, 404);
    let (s, _) = h
        .req(
            reqwest::Method::PATCH,
            &spath,
            &stranger.token,
            Some(json!({"visibility": "public"})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, card) = h.get(&wk(&stranger.id), "").await;
    assert_eq!((s, card["name"].as_str()), (200, Some("stranger")));
    for path in [wk(&stranger.id), format!("{spath}/a2a"), spath.clone()] {
        assert_eq!(h.get(&path, &a.token).await.0, 200, "{path}");
        assert_eq!(h.get(&path, &hidden.token).await.0, 200, "{path}");
    }
    assert_eq!(
        h.get(&format!("/v1/agents/{}", hidden.id), &stranger.token)
            .await
            .0,
        404
    );
    let (_, dir) = h.get("/v1/agents", &a.token).await;
    assert!(
        dir["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"] != json!(stranger.id)),
        "{dir}"
    );
}

/// Suspension contains at once (docs/security.md): a public card is gone from anonymous discovery
/// while its agent, or its tenant, is suspended, answered as an unknown agent is, and back once
/// resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_5_a_suspended_agent_or_tenant_is_not_discoverable() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.public_discovery = true).await;
    let other = h.tenant("globex").await;
    let (tenant, admin) = (
        other["id"].as_str().unwrap().to_owned(),
        other["admin"]["token"].as_str().unwrap().to_owned(),
    );
    let public = json!({"visibility": "public"});
    let one = h.register(&admin, "pubbot", public.clone()).await;
    let two = h.register(&admin, "pubbot2", public).await;
    let wk = |id: &str| format!("/v1/agents/{id}/.well-known/agent-card.json");
    let unknown = h.get(&wk("agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V"), "").await;
    assert_eq!((unknown.0, code(&unknown.1)), (404, "AB-4004"));
    assert_eq!(h.get(&wk(&two.id), "").await.0, 200);
    let (s, v) = h
        .post(&format!("/v1/agents/{}/suspend", two.id), &admin, json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = h.get(&wk(&two.id), "").await;
    assert_eq!((s, code(&v)), (unknown.0, code(&unknown.1)), "{v}");
    assert_eq!(h.get(&wk(&one.id), "").await.0, 200);
    let suspend = format!("/v1/tenants/{tenant}/suspend");
    let (s, v) = h.post(&suspend, &h.operator, json!({})).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = h.get(&wk(&one.id), "").await;
    assert_eq!((s, code(&v)), (unknown.0, code(&unknown.1)), "{v}");
    let resume = format!("/v1/tenants/{tenant}/resume");
    let (s, v) = h.post(&resume, &h.operator, json!({})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(h.get(&wk(&one.id), "").await.0, 200);
}
