//! Roles scoped where they act: the gateway operator and tenants, tenant and
//! workspace admins, members; suspension of tenants and agents (§5.9); the directory's visibility
//! (§10).

use serde_json::{Value, json};

use agentbus_store::{Role, Store as _};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

async fn workspace_id(h: &Harness, token: &str, slug: &str) -> String {
    let (s, v) = h.get("/v1/workspaces", token).await;
    assert_eq!(s, 200, "{v}");
    v["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["slug"] == slug)
        .unwrap_or_else(|| panic!("no workspace {slug} in {v}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The takeover, tried by the admin of workspace B against workspace A of its tenant:
/// every attempt answers as for a workspace that does not exist, and A works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_workspace_admin_cannot_take_over_another() {
    let h = Harness::start().await;
    for slug in ["team-a", "team-b"] {
        let (s, v) = h
            .post("/v1/workspaces", &h.admin, json!({"slug": slug}))
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let admin_a = h.user(&h.admin, "admin", "team-a").await;
    let admin_b = h.user(&h.admin, "admin", "team-b").await;
    let a1 = h.register(&admin_a, "a-one", json!({})).await;
    let a2 = h.register(&admin_a, "a-two", json!({})).await;
    let ws_a = workspace_id(&h, &h.admin, "team-a").await;
    let nowhere = "ws_01J9ZK6Q8R2M3N4P5Q6R7S8T9V";
    // B's admin learns only its own workspace's id.
    let (_, listed) = h.get("/v1/workspaces", &admin_b).await;
    assert_eq!(listed["workspaces"].as_array().unwrap().len(), 1);
    assert_eq!(listed["workspaces"][0]["slug"], "team-b");
    // Policy of A: read or replace, as for a workspace that does not exist.
    for (m, body) in [
        (reqwest::Method::GET, None),
        (reqwest::Method::PUT, Some(json!({"default": "deny"}))),
    ] {
        let (s1, v1) = h
            .req(
                m.clone(),
                &format!("/v1/workspaces/{ws_a}/policy"),
                &admin_b,
                body.clone(),
            )
            .await;
        let (s2, v2) = h
            .req(
                m,
                &format!("/v1/workspaces/{nowhere}/policy"),
                &admin_b,
                body,
            )
            .await;
        assert_eq!((s1, code(&v1)), (s2, code(&v2)));
        assert_eq!((s1, code(&v1)), (404, "AB-4004"));
    }
    assert_eq!(
        h.publish(&a1, &signed(&h, &a1, &a2.address, "still flowing"))
            .await
            .0,
        202
    );
    // Agents and admin users in A: refused as for a workspace that does not exist.
    for (path, body) in [
        (
            "/v1/agents",
            json!({"name": "planted", "workspace": "team-a"}),
        ),
        ("/v1/users", json!({"role": "admin", "workspace": "team-a"})),
    ] {
        let (s1, v1) = h.post(path, &admin_b, body.clone()).await;
        let mut elsewhere = body;
        elsewhere["workspace"] = json!("no-such-team");
        let (s2, v2) = h.post(path, &admin_b, elsewhere).await;
        assert_eq!((s1, code(&v1)), (s2, code(&v2)), "{path}");
        assert_eq!(s1, 404, "{path}: {v1}");
    }
    // B's admin sees none of A's agents (workspace visibility) and manages none.
    let (_, agents) = h.get("/v1/agents", &admin_b).await;
    assert!(
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["id"] != json!(a1.id))
    );
    let (s, _) = h
        .req(
            reqwest::Method::PATCH,
            &format!("/v1/agents/{}", a1.id),
            &admin_b,
            Some(json!({"description": "mine"})),
        )
        .await;
    assert_eq!(s, 404);
    // Roles: a workspace admin creates no workspace and no tenant admin; a member no user.
    let (s, v) = h
        .post("/v1/workspaces", &admin_b, json!({"slug": "team-c"}))
        .await;
    assert_eq!((s, code(&v)), (403, "AB-1002"));
    let (s, v) = h
        .post("/v1/users", &admin_b, json!({"role": "tenant_admin"}))
        .await;
    assert_eq!((s, code(&v)), (403, "AB-1002"));
    let member_b = h.user(&admin_b, "member", "team-b").await;
    let (s, v) = h.post("/v1/users", &member_b, json!({})).await;
    assert_eq!((s, code(&v)), (403, "AB-1002"));
    // A's own admin still administers A, and the tenant admin everything.
    assert_eq!(
        h.req(
            reqwest::Method::GET,
            &format!("/v1/workspaces/{ws_a}/policy"),
            &admin_a,
            None
        )
        .await
        .0,
        200
    );
    let (_, all) = h.get("/v1/workspaces", &h.admin).await;
    assert_eq!(all["workspaces"].as_array().unwrap().len(), 3);
}

/// The operator creates, lists, suspends and resumes tenants; nobody else may; a suspended
/// tenant's credentials are refused with AB-1003 and nothing it stored is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_created_listed_and_suspended_by_the_operator() {
    let h = Harness::start().await;
    let created = h.tenant("globex").await;
    assert_eq!(created["admin"]["role"], "tenant_admin");
    assert_eq!(created["workspace"]["slug"], "default");
    let globex_admin = created["admin"]["token"].as_str().unwrap().to_owned();
    let tenant_id = created["id"].as_str().unwrap().to_owned();
    let g1 = h.register(&globex_admin, "g-one", json!({})).await;
    let g2 = h.register(&globex_admin, "g-two", json!({})).await;
    assert!(g1.address.starts_with("agent://globex/default/"));
    // Refusals of the tenant routes: slugs, duplicates, the reserved slug, unknown fields, roles.
    for (body, status, c) in [
        (json!({"slug": "globex"}), 409, "AB-4005"),
        (json!({"slug": "system"}), 409, "AB-4005"),
        (json!({"slug": "No Caps"}), 400, "AB-3015"),
        (json!({}), 400, "AB-3015"),
        (json!({"slug": "initech", "plan": "gold"}), 400, "AB-3016"),
    ] {
        let (s, v) = h.post("/v1/tenants", &h.operator, body.clone()).await;
        assert_eq!((s, code(&v)), (status, c), "{body}");
    }
    for token in [&h.admin, &globex_admin, &g1.token] {
        let (s, v) = h
            .post("/v1/tenants", token, json!({"slug": "initech"}))
            .await;
        assert_eq!((s, code(&v)), (403, "AB-1002"));
        let (s, v) = h.get("/v1/tenants", token).await;
        assert_eq!((s, code(&v)), (403, "AB-1002"));
        let (s, v) = h
            .post(
                &format!("/v1/tenants/{tenant_id}/suspend"),
                token,
                json!({}),
            )
            .await;
        assert_eq!((s, code(&v)), (403, "AB-1002"));
    }
    // The operator belongs to no tenant: it reads no tenant's data.
    let (s, v) = h.get("/v1/agents", &h.operator).await;
    assert!(s == 200 && v["agents"] == json!([]), "{v}");
    assert_eq!(
        h.get(&format!("/v1/agents/{}", g1.id), &h.operator).await.0,
        404
    );
    let (_, list) = h.get("/v1/tenants", &h.operator).await;
    let slugs: Vec<&str> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["default", "globex"]);
    // Suspended: every credential of globex is refused; the default tenant is untouched.
    assert_eq!(
        h.publish(&g1, &signed(&h, &g1, &g2.address, "before"))
            .await
            .0,
        202
    );
    let (s, t) = h
        .post(
            &format!("/v1/tenants/{tenant_id}/suspend"),
            &h.operator,
            json!({}),
        )
        .await;
    assert!(s == 200 && t["suspended_at"].is_string(), "{t}");
    let (s, v, _) = h
        .publish(&g1, &signed(&h, &g1, &g2.address, "during"))
        .await;
    assert_eq!((s, code(&v)), (403, "AB-1003"));
    let (s, v) = h.get("/v1/inbox", &g2.token).await;
    assert_eq!((s, code(&v)), (403, "AB-1003"));
    let (s, v) = h.get("/v1/agents", &globex_admin).await;
    assert_eq!((s, code(&v)), (403, "AB-1003"));
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "unaffected"))
            .await
            .0,
        202
    );
    // Resumed: what was stored before is delivered.
    let (s, t) = h
        .post(
            &format!("/v1/tenants/{tenant_id}/resume"),
            &h.operator,
            json!({}),
        )
        .await;
    assert!(s == 200 && t["suspended_at"].is_null(), "{t}");
    let got = h.poll(&g2, 0, 0).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["envelope"]["data"]["text"], "before");
    assert_eq!(
        h.post(
            "/v1/tenants/ten_01J9ZK6Q8R2M3N4P5Q6R7S8T9V/suspend",
            &h.operator,
            json!({})
        )
        .await
        .0,
        404
    );
}

/// WP-5.9-1 for suspension: a suspended agent cannot publish or read, its inbox holds, and the
/// sender of every held message gets system.undeliverable with AB-4013; resumed, it gets them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_9_1_a_suspended_agent_holds_its_inbox_and_senders_are_told() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let first = signed(&h, &alpha, &bravo.address, "queued before");
    assert_eq!(h.publish(&alpha, &first).await.0, 202);
    // Open a WebSocket for bravo before the suspension: it must stop delivering too.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut req = format!("{}/v1/inbox/ws?after=1", h.url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", bravo.token).parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    // Roles: a member may not suspend; another workspace's admin finds no such agent.
    let (_, member) = h.post("/v1/users", &h.admin, json!({})).await;
    let member = member["token"].as_str().unwrap();
    let suspend = format!("/v1/agents/{}/suspend", bravo.id);
    let (s, v) = h.post(&suspend, member, json!({})).await;
    assert_eq!((s, code(&v)), (403, "AB-1002"));
    let (s, v) = h.post(&suspend, &alpha.token, json!({})).await;
    assert_eq!((s, code(&v)), (403, "AB-1002"));
    h.post("/v1/workspaces", &h.admin, json!({"slug": "elsewhere"}))
        .await;
    let far_admin = h.user(&h.admin, "admin", "elsewhere").await;
    assert_eq!(h.post(&suspend, &far_admin, json!({})).await.0, 404);
    let (s, card) = h.post(&suspend, &h.admin, json!({})).await;
    assert!(s == 200 && card["suspended"] == json!(true), "{card}");
    // Its credential is refused everywhere.
    let (s, v, _) = h
        .publish(&bravo, &signed(&h, &bravo, &alpha.address, "x"))
        .await;
    assert_eq!((s, code(&v)), (403, "AB-1004"));
    let (s, v) = h.get("/v1/inbox", &bravo.token).await;
    assert_eq!((s, code(&v)), (403, "AB-1004"));
    // A message to it is held, and its sender told, like the one already waiting.
    let second = signed(&h, &alpha, &bravo.id, "sent during");
    assert_eq!(h.publish(&alpha, &second).await.0, 202);
    let notices: Vec<Value> = h
        .poll(&alpha, 0, 0)
        .await
        .into_iter()
        .map(|d| d["envelope"].clone())
        .filter(|e| e["type"] == "agentbus.system.undeliverable.v1")
        .collect();
    let about: Vec<&Value> = notices
        .iter()
        .map(|n| &n["data"]["original_message_id"])
        .collect();
    assert_eq!(about, [&first["id"], &second["id"]]);
    for n in &notices {
        assert_eq!(n["source"], "agent://system/gateway/router");
        assert_eq!(n["data"]["code"], "AB-4013");
        assert_eq!(n["data"]["dead_lettered"], false);
        assert_eq!(n["correlation_id"], n["data"]["original_message_id"]);
    }
    // Each was owed and is sent once: the reaper's pass finds none left.
    h.app.reap().await.unwrap();
    assert!(h.poll(&alpha, 0, 0).await.is_empty(), "sent once");
    // The WebSocket opened before the suspension closes without delivering the new message (the
    // timeout only bounds a hang; what is checked is that nothing was delivered).
    use futures_util::StreamExt as _;
    while let Ok(Some(Ok(frame))) =
        tokio::time::timeout(std::time::Duration::from_secs(30), ws.next()).await
    {
        if frame.is_close() {
            break;
        }
        let text = frame.into_text().unwrap_or_default();
        assert!(
            !text.contains("sent during"),
            "delivered while suspended: {text}"
        );
    }
    // Resumed: both held messages are delivered, nothing was lost.
    let (s, card) = h
        .post(
            &format!("/v1/agents/{}/resume", bravo.id),
            &h.admin,
            json!({}),
        )
        .await;
    assert!(s == 200 && card["suspended"] == json!(false), "{card}");
    let texts: Vec<Value> = h
        .poll(&bravo, 0, 0)
        .await
        .into_iter()
        .map(|d| d["envelope"]["data"]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("queued before"), json!("sent during")]);
}

/// WP-10-3: visibility is one of four values; `public` acts as `tenant`, never across tenants;
/// a private card is seen by itself, its owner and the admins whose scope covers it, only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_10_3_visibility_holds_within_roles_and_tenants() {
    let h = Harness::start().await;
    h.post("/v1/workspaces", &h.admin, json!({"slug": "elsewhere"}))
        .await;
    let owner = h.user(&h.admin, "member", "default").await;
    let ws_admin = h.user(&h.admin, "admin", "default").await;
    let far_admin = h.user(&h.admin, "admin", "elsewhere").await;
    let other_member = h.user(&h.admin, "member", "default").await;
    let hidden = h
        .register(&owner, "hidden", json!({"visibility": "private"}))
        .await;
    let open = h
        .register(&owner, "open", json!({"visibility": "public"}))
        .await;
    let peer = h.agent("peer").await;
    let outsider_admin = h.second_tenant().await;
    let outsider = h.agent_in(&outsider_admin, "outsider").await;
    let sees = |token: String, id: String| {
        let h = &h;
        async move { h.get(&format!("/v1/agents/{id}"), &token).await.0 == 200 }
    };
    for (who, token, private, public) in [
        ("itself", hidden.token.clone(), true, true),
        ("owner", owner.clone(), true, true),
        ("workspace admin", ws_admin.clone(), true, true),
        ("tenant admin", h.admin.clone(), true, true),
        ("admin of another workspace", far_admin.clone(), false, true),
        ("another member", other_member.clone(), false, true),
        ("an agent of the workspace", peer.token.clone(), false, true),
        (
            "another tenant's agent",
            outsider.token.clone(),
            false,
            false,
        ),
        (
            "another tenant's admin",
            outsider_admin.clone(),
            false,
            false,
        ),
        ("the operator", h.operator.clone(), false, false),
    ] {
        assert_eq!(
            sees(token.clone(), hidden.id.clone()).await,
            private,
            "{who}: private card"
        );
        assert_eq!(
            sees(token, open.id.clone()).await,
            public,
            "{who}: public card"
        );
    }
    let (s, v) = h
        .req(
            reqwest::Method::PATCH,
            &format!("/v1/agents/{}", open.id),
            &owner,
            Some(json!({"visibility": "everyone"})),
        )
        .await;
    assert_eq!((s, code(&v)), (400, "AB-3016"));
}

/// The first start makes the operator (found by its role) beside the first tenant admin; a data
/// directory from before roles were scoped gets a token-less operator at its next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_makes_the_operator_and_upgrades_keep_one() {
    let h = Harness::start().await;
    let operators = h.app.store.users_with_role(Role::Operator).await.unwrap();
    assert_eq!(operators.len(), 1);
    assert!(operators[0].tenant_id.is_empty());
    assert!(!h.operator.is_empty() && h.operator != h.admin);
    let admins = h
        .app
        .store
        .users_with_role(Role::TenantAdmin)
        .await
        .unwrap();
    assert_eq!(admins.len(), 1);
    drop(h);
    if crate::support::on_postgres() {
        // What follows is an SQLite data directory of a release before PostgreSQL existed.
        return;
    }
    // A directory from before roles were scoped: a tenant, and no operator.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    std::fs::create_dir_all(&dir).unwrap();
    let store = agentbus_store::SqliteStore::open(&dir.join("agentbus.db")).unwrap();
    store
        .create_tenant(agentbus_store::TenantRow {
            id: "ten_01J9ZK6Q8R2M3N4P5Q6R7S8T9V".into(),
            slug: "default".into(),
            data_key: vec![0; 72],
            created_at: T0,
            suspended_at: None,
        })
        .await
        .unwrap();
    drop(store);
    let h = Harness::start_in(dir, None).await;
    assert!(h.operator.is_empty(), "no first start: nothing to show");
    let operators = h.app.store.users_with_role(Role::Operator).await.unwrap();
    assert_eq!(
        operators.len(),
        1,
        "a token-less operator for an admin-token command to mint for"
    );
    drop(tmp);
}

/// The credential is decided before the body (docs/security.md, "How a request is decided"): a
/// caller without one, or with a garbage one, hears AB-1001 however wrong its body is, on the
/// routes whose body was once parsed first (the admin's task cancel and the test clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_is_checked_before_the_body() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.unsafe_test_clock = true).await;
    let routes = [
        "/v1/tasks/tsk_01J9ZK6Q8R2M3N4P5Q6R7S8T9V/cancel",
        "/v1/test/clock",
    ];
    for path in routes {
        for token in ["", "abu_garbage"] {
            for body in [json!({"bogus": 1}), json!({"advance": 5, "reason": 5})] {
                let (s, v) = h.post(path, token, body.clone()).await;
                assert_eq!((s, code(&v)), (401, "AB-1001"), "{path} {token:?} {body}");
            }
        }
    }
    // With the credential, the body is then checked as before.
    let (s, v) = h.post(routes[1], &h.operator, json!({"bogus": 1})).await;
    assert_eq!((s, code(&v)), (400, "AB-3016"), "{v}");
}
