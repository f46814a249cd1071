//! Identity: registration, cards (§10), aliases (§4.3), keys (§3.3), policy, limits, tenants.

use serde_json::{Value, json};

use agentbus_store::Store as _;

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_cards_aliases_and_slugs() {
    let h = Harness::start().await;
    let a = h
        .agent_with(
            "reviewer",
            json!({"aliases": ["code-reviewer"], "display_name": "Backend Code Reviewer"}),
        )
        .await;
    let (_, card) = h.get(&format!("/v1/agents/{}", a.id), &a.token).await;
    for k in [
        "id",
        "address",
        "name",
        "display_name",
        "description",
        "aliases",
        "harness",
        "owner",
        "visibility",
        "capabilities",
        "pricing",
        "status",
        "tags",
        "created_at",
        "updated_at",
    ] {
        assert!(card.get(k).is_some(), "WP-10-2: {k}");
    }
    // WP-4.1-4: names are unique in a workspace; WP-4.1-5: slugs never change.
    let (s, v) = h
        .post("/v1/agents", &h.admin, json!({"name": "reviewer"}))
        .await;
    assert_eq!((s, code(&v)), (409, "AB-4005"));
    let agent_path = format!("/v1/agents/{}", a.id);
    let patch = |body: Value| h.req(reqwest::Method::PATCH, &agent_path, &a.token, Some(body));
    assert_eq!(code(&patch(json!({"name": "other"})).await.1), "AB-4007");
    let (s, v) = patch(json!({"display_name": "Renamed"})).await;
    assert_eq!((s, v["display_name"].as_str()), (200, Some("Renamed")));
    assert_ne!(v["updated_at"], card["updated_at"]);
    assert_eq!(
        code(
            &patch(json!({"aliases": ["a-1", "a-2", "a-3", "a-4", "a-5", "a-6"]}))
                .await
                .1
        ),
        "AB-4006"
    );
    assert_eq!(
        code(&patch(json!({"visibility": "everyone"})).await.1),
        "AB-3016"
    );
    assert_eq!(
        code(&patch(json!({"pricing": {"model": "per_call"}})).await.1),
        "AB-3016"
    );
    // WP-4.3-2: an alias resolves like the name; WP-4.3-3: an alias in `source` is AB-2002.
    let bot = h.agent("release-bot").await;
    let alias = a.address.replace("/reviewer", "/code-reviewer");
    assert_eq!(
        h.publish(&bot, &signed(&h, &bot, &alias, "via alias"))
            .await
            .0,
        202
    );
    assert_eq!(h.poll(&a, 0, 0).await[0]["envelope"]["to"], json!(alias));
    let mut m = message(&h, &a, &bot.address, "from alias");
    m["source"] = json!(alias);
    assert_eq!(code(&h.publish(&a, &sign(&a, m)).await.1), "AB-2002");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_3_3_keys_limit_revoke_and_expiry() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let new_key =
        || agentbus_protocol::signing::SigningKey::from_seed(agentbus_runtime::random_bytes());
    let keys_path = format!("/v1/agents/{}/keys", a.id);
    let add = |k: &agentbus_protocol::signing::SigningKey| {
        h.post(
            &keys_path,
            &a.token,
            json!({"public_key": k.public().to_base64url()}),
        )
    };
    let (s, k2) = add(&new_key()).await;
    assert_eq!(s, 201);
    // WP-3.3-7: 365 days by default.
    let created: agentbus_protocol::timestamp::Timestamp =
        k2["created_at"].as_str().unwrap().parse().unwrap();
    let expires: agentbus_protocol::timestamp::Timestamp =
        k2["expires_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(expires.since(created), 365 * 86_400_000);
    assert_eq!(add(&new_key()).await.0, 201);
    let (s, v) = add(&new_key()).await;
    assert_eq!(
        (s, code(&v)),
        (409, "AB-1013"),
        "WP-3.3-4: a 4th active key"
    );
    // A weak (small-order) key is refused.
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let weak = base64_url(&identity);
    let (_, v) = h
        .post(
            &format!("/v1/agents/{}/keys", a.id),
            &a.token,
            json!({"public_key": weak}),
        )
        .await;
    assert_eq!(code(&v), "AB-1014");
    // Revoke the original; new publishes with it are AB-1012, history still lists it (decision 7).
    let (s, _) = h
        .post(
            &format!("/v1/agents/{}/keys/{}/revoke", a.id, a.key_id),
            &a.token,
            json!({}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, &b.address, "x")).await.1),
        "AB-1012"
    );
    let (_, card) = h.get(&format!("/v1/agents/{}", a.id), &b.token).await;
    let listed = card["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == json!(a.key_id))
        .unwrap()
        .clone();
    assert!(listed["revoked_at"].is_string());
    // After revoking, a fourth registration fits again.
    assert_eq!(add(&new_key()).await.0, 201);
    // A key past expires_at is AB-1012.
    let c = h.agent("charlie").await;
    let k = new_key();
    let (_, reg) = h.post(&format!("/v1/agents/{}/keys", c.id), &c.token, json!({"public_key": k.public().to_base64url(), "expires_at": h.now().plus_secs(10).to_string()})).await;
    let short = Agent {
        key: k,
        key_id: reg["id"].as_str().unwrap().to_owned(),
        ..c.clone()
    };
    h.clock.advance_secs(11);
    assert_eq!(
        code(
            &h.publish(&short, &signed(&h, &short, &b.address, "x"))
                .await
                .1
        ),
        "AB-1012"
    );
}

fn base64_url(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_4_2_7_policy_after_resolution_rate_limit_and_inbox_depth() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let ws = h
        .app
        .store()
        .workspace_by_slug(
            &h.app
                .store()
                .tenant_by_slug("default")
                .await
                .unwrap()
                .unwrap()
                .id,
            "default",
        )
        .await
        .unwrap()
        .unwrap();
    let (s, _) = h
        .req(
            reqwest::Method::PUT,
            &format!("/v1/workspaces/{}/policy", ws.id),
            &h.admin,
            Some(json!({"default": "deny"})),
        )
        .await;
    assert_eq!(s, 200);
    let base = a.address.rsplit_once('/').unwrap().0.to_owned();
    assert_eq!(
        code(
            &h.publish(&a, &signed(&h, &a, &format!("{base}/nobody"), "x"))
                .await
                .1
        ),
        "AB-4001"
    );
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, &b.address, "x")).await.1),
        "AB-2001"
    );
    let rule =
        json!({"default": "deny", "rules": [{"from": a.address, "to": "*", "effect": "allow"}]});
    h.req(
        reqwest::Method::PUT,
        &format!("/v1/workspaces/{}/policy", ws.id),
        &h.admin,
        Some(rule),
    )
    .await;
    assert_eq!(h.publish(&a, &signed(&h, &a, &b.address, "x")).await.0, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_tenant_reads_and_sends_answer_as_unknown() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let other = h.agent_in(&h.second_tenant().await, "outsider").await;
    // Sending across tenants: the same answer as an agent that does not exist.
    let (s1, v1, _) = h
        .publish(&other, &signed(&h, &other, &a.address, "x"))
        .await;
    let (s2, v2, _) = h
        .publish(
            &other,
            &signed(&h, &other, &a.address.replace("alpha", "nobody"), "x"),
        )
        .await;
    assert_eq!((s1, code(&v1)), (s2, code(&v2)));
    let (s1, v1, _) = h.publish(&other, &signed(&h, &other, &a.id, "x")).await;
    let (s2, v2, _) = h
        .publish(
            &other,
            &signed(&h, &other, "agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", "x"),
        )
        .await;
    assert_eq!((s1, code(&v1)), (s2, code(&v2)));
    // Reading a card of another tenant: as for an id that does not exist.
    let (s1, v1) = h.get(&format!("/v1/agents/{}", a.id), &other.token).await;
    let (s2, v2) = h
        .get("/v1/agents/agt_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", &other.token)
        .await;
    assert_eq!((s1, code(&v1)), (s2, code(&v2)));
    let (_, list) = h.get("/v1/agents", &other.token).await;
    assert!(
        list["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"] != json!(a.id))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_11_4_2_an_older_sidecar_is_refused_with_an_upgrade_hint() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let ask = |v: &'static str| {
        h.http
            .get(format!("{}/v1/inbox", h.url))
            .bearer_auth(&a.token)
            .header("agentbus-sidecar-version", v)
            .send()
    };
    let old = ask("0.0.9").await.unwrap();
    assert_eq!(old.status().as_u16(), 426);
    let body: Value = old.json().await.unwrap();
    assert_eq!(code(&body), "AB-6002");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upgrade")
    );
    assert_eq!(ask("0.1.0").await.unwrap().status().as_u16(), 200);
    assert_eq!(ask("0.10.0").await.unwrap().status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_follows_inbox_reads() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let path = format!("/v1/agents/{}", a.id);
    // Registered by an admin, never heard from: no heartbeat yet.
    let card = h.get(&path, &h.admin).await.1;
    assert!(card["status"].get("last_heartbeat_at").is_none(), "{card}");
    // Any request under its own credential (as `agentbus connect` makes) is a heartbeat (WP-10-2);
    // presence stays with inbox reads.
    let card = h.get(&path, &a.token).await.1;
    assert_eq!(card["status"]["presence"], "offline");
    assert!(card["status"]["last_heartbeat_at"].is_string(), "{card}");
    h.poll(&a, 0, 0).await;
    let card = h.get(&path, &a.token).await.1;
    assert_eq!(card["status"]["presence"], "online");
    assert!(card["status"]["last_heartbeat_at"].is_string());
    h.clock.advance_secs(31);
    assert_eq!(
        h.get(&path, &a.token).await.1["status"]["presence"],
        "offline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_topic_scope_and_blob_ttl() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    // WP-2.3-1: over 1 MiB is AB-3007 (refused before it is parsed).
    let mut big = message(&h, &a, &b.address, "");
    big["data"]["text"] = json!("x".repeat(1_048_600));
    let (s, v, _) = h.publish(&a, &big).await;
    assert_eq!((s, code(&v)), (413, "AB-3007"));
    // WP-4.4-2: another workspace's topic is AB-4011.
    let (s, _) = h
        .post("/v1/workspaces", &h.admin, json!({"slug": "frontend"}))
        .await;
    assert_eq!(s, 201);
    let topic = "topic://default/frontend/deploys";
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, topic, "x")).await.1),
        "AB-4011"
    );
    // WP-9-13: blobs expire after 30 days.
    let blob = h.upload(&a, "n.txt", b"short-lived").await;
    h.clock.advance_secs(30 * 24 * 3600 + 1);
    let (s, v) = h
        .get(
            &format!("/v1/blobs/{}", blob["id"].as_str().unwrap()),
            &a.token,
        )
        .await;
    assert_eq!((s, code(&v)), (410, "AB-4009"));
}
