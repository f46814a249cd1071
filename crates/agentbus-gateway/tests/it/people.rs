//! People administered through the API: users listed and removed, tokens issued, listed and
//! revoked, each in the caller's scope (`docs/api.md`, "Users and tokens").

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::*;

fn ids(v: &Value, list: &str) -> Vec<String> {
    v[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_owned())
        .collect()
}

/// A tenant admin sees its tenant's users, a workspace admin its workspace's, the operator all;
/// a removed user's token stops working at once and its id is gone from every list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_are_listed_by_scope_and_removed_with_their_tokens() {
    let h = Harness::start().await;
    assert_eq!(
        h.post("/v1/workspaces", &h.admin, json!({"slug": "ops"}))
            .await
            .0,
        201
    );
    let ops_admin = h.user(&h.admin, "admin", "ops").await;
    let (s, created) = h
        .post(
            "/v1/users",
            &ops_admin,
            json!({"name": "Ada", "role": "member", "workspace": "ops"}),
        )
        .await;
    assert_eq!(s, 201, "{created}");
    let ada = created["id"].as_str().unwrap().to_owned();
    let ada_token = created["token"].as_str().unwrap().to_owned();
    let other = h.second_tenant().await;

    let (s, all) = h.get("/v1/users", &h.operator).await;
    assert_eq!(s, 200, "{all}");
    let roles: Vec<(&str, Option<&str>)> = all["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["role"].as_str().unwrap(), u["tenant"].as_str()))
        .collect();
    assert!(roles.contains(&("operator", None)), "{all}");
    assert!(roles.contains(&("tenant_admin", Some("other"))), "{all}");
    let (_, tenant) = h.get("/v1/users", &h.admin).await;
    assert!(ids(&tenant, "users").contains(&ada));
    assert!(
        tenant["users"]
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["tenant"] == "default"),
        "{tenant}"
    );
    let (_, ws) = h.get("/v1/users", &ops_admin).await;
    assert_eq!(ws["users"].as_array().unwrap().len(), 2, "{ws}");
    assert!(
        ws["users"]
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["workspace"] == "ops"),
        "{ws}"
    );
    let (s, _) = h.get("/v1/users", &other).await;
    assert_eq!(s, 200);

    // Another tenant's admin gets exactly what a missing user gets.
    let (s, v) = h
        .req(Method::DELETE, &format!("/v1/users/{ada}"), &other, None)
        .await;
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("AB-4004")));
    let (s, removed) = h
        .req(
            Method::DELETE,
            &format!("/v1/users/{ada}"),
            &ops_admin,
            None,
        )
        .await;
    assert_eq!(s, 200, "{removed}");
    assert_eq!(removed["name"], "Ada");
    let (s, v) = h.get("/v1/agents", &ada_token).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (401, Some("AB-1001")),
        "{v}"
    );
    let (_, tenant) = h.get("/v1/users", &h.admin).await;
    assert!(!ids(&tenant, "users").contains(&ada));
}

/// A token issued is shown once and works; the list never holds a secret; a revoked token is
/// refused at once, stays listed with its revocation, and revoking it again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_issued_once_listed_without_secrets_and_revoked() {
    let h = Harness::start().await;
    let member = h.user(&h.admin, "member", "default").await;
    let (_, users) = h.get("/v1/users", &h.admin).await;
    let member_id = users["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["role"] == "member")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, issued) = h
        .post(
            "/v1/tokens",
            &h.admin,
            json!({"user": member_id, "label": "ci runner"}),
        )
        .await;
    assert_eq!(s, 201, "{issued}");
    assert_eq!(issued["user"], member_id.as_str());
    assert_eq!(issued["label"], "ci runner");
    assert_eq!(issued["revoked_at"], Value::Null);
    let secret = issued["token"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("abu_"));
    assert_eq!(h.get("/v1/agents", &secret).await.0, 200);
    assert_eq!(
        h.get("/v1/agents", &member).await.0,
        200,
        "the old one works"
    );

    let (_, listed) = h.get("/v1/tokens", &h.admin).await;
    let text = listed.to_string();
    assert!(!text.contains(&secret) && !text.contains(&member), "{text}");
    assert!(ids(&listed, "tokens").contains(&issued["id"].as_str().unwrap().to_owned()));

    let id = issued["id"].as_str().unwrap();
    let (s, revoked) = h
        .post(&format!("/v1/tokens/{id}/revoke"), &h.admin, json!({}))
        .await;
    assert_eq!(s, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    let (s, v) = h.get("/v1/agents", &secret).await;
    assert_eq!((s, v["error"]["code"].as_str()), (401, Some("AB-1001")));
    let (s, again) = h
        .post(&format!("/v1/tokens/{id}/revoke"), &h.admin, json!({}))
        .await;
    assert_eq!((s, &again["revoked_at"]), (200, &revoked["revoked_at"]));
    let (_, listed) = h.get("/v1/tokens", &h.admin).await;
    let row = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap()
        .clone();
    assert_eq!(row["revoked_at"], revoked["revoked_at"]);

    // The operator issues its own, and sees every tenant's tokens.
    let (s, own) = h.post("/v1/tokens", &h.operator, json!({})).await;
    assert_eq!((s, own["role"].as_str()), (201, Some("operator")), "{own}");
    let (_, all) = h.get("/v1/tokens", &h.operator).await;
    assert!(ids(&all, "tokens").contains(&own["id"].as_str().unwrap().to_owned()));
}
