//! Every JSON answer of the API is its `agentbus_api` type, byte for byte: one scenario calls each
//! route of the table in `openapi.rs` that answers a typed body, as a client would, and reads
//! each real answer as the route's type and writes it again; the bytes must come back the same
//! (`same_bytes`). A field the type lacks, a field out of order, `null` where the type leaves a
//! field out or the other way round, or a route answered with another type than the table (and
//! so `openapi.json`) names, fails. Every typed route must be called: a new one needs a call here.
//! The request bodies sent are each written in their type's form too, and rejections are checked
//! against `ErrorBody`.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use sha2::Digest as _;

use agentbus_protocol::signing::SigningKey;

use crate::openapi::{Typed, bodies, same_bytes};
use crate::support::*;

/// What a call sends.
enum Send {
    Nothing,
    Json(Value),
    Bytes(Vec<u8>),
}

struct Calls<'a> {
    h: &'a Harness,
    table: Vec<(&'static str, &'static str, Option<Typed>, Option<Typed>)>,
    called: BTreeSet<(&'static str, &'static str)>,
}

impl Calls<'_> {
    /// Sends `method path` (an instance of `route`) with `token`; the answer must be a 2xx whose
    /// body is exactly the route's response type. Returns it as JSON.
    async fn call(
        &mut self,
        method: &'static str,
        route: &'static str,
        path: &str,
        token: &str,
        send: Send,
    ) -> Value {
        let row = self
            .table
            .iter()
            .find(|(m, p, _, _)| *m == method && *p == route)
            .unwrap_or_else(|| panic!("{method} {route} is not a route of the table"));
        let (status, raw) = raw_call(self.h, method, path, token, &send).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {text}"
        );
        if let (Send::Json(b), Some(t)) = (&send, &row.2) {
            (t.same)(b.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{method} {route}: the request sent here: {e}"));
        }
        let t = row
            .3
            .as_ref()
            .unwrap_or_else(|| panic!("{method} {route} answers no typed body in the table"));
        (t.same)(&raw).unwrap_or_else(|e| panic!("{method} {route}: {e}"));
        self.called.insert((method, route));
        serde_json::from_slice(&raw).unwrap()
    }
}

async fn raw_call(
    h: &Harness,
    method: &str,
    path: &str,
    token: &str,
    send: &Send,
) -> (u16, Vec<u8>) {
    let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut r = h
        .http
        .request(m, format!("{}{path}", h.url))
        .header("accept", "application/json");
    if !token.is_empty() {
        r = r.bearer_auth(token);
    }
    r = match send {
        Send::Nothing => r,
        Send::Json(v) => r
            .header("content-type", "application/json")
            .body(v.to_string()),
        Send::Bytes(b) => r.body(b.clone()),
    };
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

fn text(v: &Value) -> String {
    v.as_str().unwrap().to_owned()
}

fn key() -> SigningKey {
    SigningKey::from_seed(agentbus_runtime::random_bytes())
}

#[tokio::test]
async fn every_answer_is_its_api_type_byte_for_byte() {
    let h = Harness::start().await;
    let mut c = Calls {
        h: &h,
        table: bodies(),
        called: BTreeSet::new(),
    };
    let (admin, operator) = (h.admin.clone(), h.operator.clone());
    use Send::{Bytes, Json, Nothing};

    // Self-description.
    let wk = "/.well-known/agentbus.json";
    c.call("get", wk, wk, "", Nothing).await;
    let page = "/errors/AB-4004";
    c.call("get", "/errors/{code}", page, "", Nothing).await;
    c.call("get", "/healthz", "/healthz", "", Nothing).await;
    c.call("get", "/readyz", "/readyz", "", Nothing).await;

    // Workspaces and users.
    let ws = c
        .call(
            "post",
            "/v1/workspaces",
            "/v1/workspaces",
            &admin,
            Json(json!({"slug": "ops"})),
        )
        .await;
    c.call("get", "/v1/workspaces", "/v1/workspaces", &admin, Nothing)
        .await;
    let user = json!({"name": "rita", "role": "member", "workspace": "ops"});
    let rita = c
        .call("post", "/v1/users", "/v1/users", &admin, Json(user))
        .await;
    let rita = text(&rita["id"]);
    c.call("get", "/v1/users", "/v1/users", &admin, Nothing)
        .await;
    let issue = json!({"user": rita, "label": "ci"});
    let t = c
        .call("post", "/v1/tokens", "/v1/tokens", &admin, Json(issue))
        .await;
    c.call("get", "/v1/tokens", "/v1/tokens", &admin, Nothing)
        .await;
    let path = format!("/v1/tokens/{}/revoke", text(&t["id"]));
    c.call("post", "/v1/tokens/{id}/revoke", &path, &admin, Nothing)
        .await;
    let path = format!("/v1/users/{rita}");
    c.call("delete", "/v1/users/{id}", &path, &admin, Nothing)
        .await;

    // Agents: with a key, and without one (no `key` in the answer).
    let mut agents = Vec::new();
    for name in ["alpha", "bravo"] {
        let k = key();
        let body = json!({"name": name, "public_key": k.public().to_base64url(),
                          "capabilities": [CODE_REVIEW.clone()]});
        let v = c
            .call("post", "/v1/agents", "/v1/agents", &admin, Json(body))
            .await;
        agents.push(Agent::from_registration(&v, k));
    }
    let (alpha, bravo) = (agents[0].clone(), agents[1].clone());
    let v = c
        .call(
            "post",
            "/v1/agents",
            "/v1/agents",
            &admin,
            Json(json!({"name": "charlie"})),
        )
        .await;
    let charlie = text(&v["agent"]["id"]);
    let charlie_token = text(&v["token"]);
    c.call("get", "/v1/agents", "/v1/agents", &admin, Nothing)
        .await;
    let one = format!("/v1/agents/{}", alpha.id);
    c.call("get", "/v1/agents/{id}", &one, &admin, Nothing)
        .await;
    let patch = json!({"description": "reviews changes", "tags": ["ci"]});
    let path = format!("/v1/agents/{charlie}");
    c.call("patch", "/v1/agents/{id}", &path, &admin, Json(patch))
        .await;
    let path = format!("/v1/agents/{charlie}/keys");
    let pk = json!({"public_key": key().public().to_base64url()});
    let k = c
        .call("post", "/v1/agents/{id}/keys", &path, &admin, Json(pk))
        .await;
    let path = format!("/v1/agents/{charlie}/keys/{}/revoke", text(&k["id"]));
    let route = "/v1/agents/{id}/keys/{key_id}/revoke";
    c.call("post", route, &path, &admin, Nothing).await;
    for verb in ["suspend", "resume"] {
        let path = format!("/v1/agents/{charlie}/{verb}");
        let route = if verb == "suspend" {
            "/v1/agents/{id}/suspend"
        } else {
            "/v1/agents/{id}/resume"
        };
        c.call("post", route, &path, &admin, Nothing).await;
    }

    // Topics: an agent's view, and an admin's (with workspaces and subscribers).
    let sub = "/v1/topics/releases/subscription";
    let route = "/v1/topics/{name}/subscription";
    c.call("put", route, sub, &bravo.token, Nothing).await;
    c.call("delete", route, sub, &charlie_token, Nothing).await;
    c.call("get", "/v1/topics", "/v1/topics", &bravo.token, Nothing)
        .await;
    c.call("get", "/v1/topics", "/v1/topics", &admin, Nothing)
        .await;

    // Messages and a task worked to its result, with usage and cost.
    let msg = signed(&h, &alpha, &bravo.address, "hello");
    let sent_id = text(&msg["id"]);
    let m = "/v1/messages";
    c.call("post", m, m, &alpha.token, Json(Value::Object(msg)))
        .await;
    let req = sign(&bravo, request(&h, &bravo, &alpha, json!({})));
    let r = c
        .call("post", m, m, &bravo.token, Json(Value::Object(req.clone())))
        .await;
    let task = text(&r["task_id"]);
    for (kind, data) in [
        ("accept", json!({"estimated_duration_s": 60})),
        (
            "result",
            json!({"status": "succeeded", "summary": "fine", "output": {"findings": []},
                   "usage": {"reported_by": "agent", "input_tokens": 5, "output_tokens": 7},
                   "cost": {"currency": "USD", "amount": "0.42", "source": "agent"}}),
        ),
    ] {
        let f = followup(&h, &alpha, &bravo, &req, &task, kind, data);
        let r = c
            .call("post", m, m, &alpha.token, Json(Value::Object(f)))
            .await;
        assert!(r.get("task_state").is_some(), "{r}");
    }
    let req2 = sign(&bravo, request(&h, &bravo, &alpha, json!({})));
    let r = c
        .call("post", m, m, &bravo.token, Json(Value::Object(req2)))
        .await;
    let task2 = text(&r["task_id"]);

    // The inbox: a lease, acks both ways, shown receipts, the policy flags.
    let v = c
        .call(
            "get",
            "/v1/inbox",
            "/v1/inbox?wait=0",
            &bravo.token,
            Nothing,
        )
        .await;
    let d = v["deliveries"].as_array().unwrap().clone();
    assert!(d.len() >= 2, "{v}");
    let acks = json!({"acks": [{"sequence": d[0]["sequence"], "delivery": d[0]["delivery"]}]});
    let route = "/v1/inbox/acks";
    c.call("post", route, route, &bravo.token, Json(acks)).await;
    let path = format!("/v1/inbox/{}/ack", d[1]["sequence"]);
    let one = json!({"delivery": d[1]["delivery"]});
    c.call(
        "post",
        "/v1/inbox/{sequence}/ack",
        &path,
        &bravo.token,
        Json(one),
    )
    .await;
    let receipts = json!({"receipts": [{"sequence": d[0]["sequence"], "id": d[0]["envelope"]["id"],
        "shown_at": h.now().to_string(), "harness": "claude-code", "event": "UserPromptSubmit"}]});
    let route = "/v1/inbox/receipts";
    c.call("post", route, route, &bravo.token, Json(receipts))
        .await;
    let route = "/v1/inbox/policy";
    c.call("get", route, route, &bravo.token, Nothing).await;

    // What a sender reads, conversations, tasks, usage.
    let path = format!("/v1/messages/{sent_id}/delivery");
    c.call(
        "get",
        "/v1/messages/{id}/delivery",
        &path,
        &alpha.token,
        Nothing,
    )
    .await;
    let route = "/v1/messages/sent";
    c.call("get", route, route, &alpha.token, Nothing).await;
    // A page with a hit, a snippet with highlights, a task and a `next`.
    let path = "/v1/search?q=review&limit=1";
    c.call("get", "/v1/search", path, &alpha.token, Nothing)
        .await;
    let route = "/v1/conversations";
    let list = c.call("get", route, route, &alpha.token, Nothing).await;
    let cnv = text(&list["conversations"][0]["conversation_id"]);
    let path = format!("/v1/conversations/{cnv}");
    c.call(
        "get",
        "/v1/conversations/{id}",
        &path,
        &alpha.token,
        Nothing,
    )
    .await;
    c.call("get", "/v1/tasks", "/v1/tasks", &bravo.token, Nothing)
        .await;
    let path = format!("/v1/tasks/{task}");
    c.call("get", "/v1/tasks/{id}", &path, &bravo.token, Nothing)
        .await;
    let path = format!("/v1/tasks/{task2}/cancel");
    let why = json!({"reason": "no longer needed"});
    c.call("post", "/v1/tasks/{id}/cancel", &path, &admin, Json(why))
        .await;
    c.call("get", "/v1/usage", "/v1/usage", &admin, Nothing)
        .await;

    // Blobs: one with a media type, uploaded and read; one without (`media_type: null`).
    let content = b"release notes".to_vec();
    let sha = hex::encode(sha2::Sha256::digest(&content));
    let reg = json!({"name": "notes.txt", "media_type": "text/plain", "size": content.len(), "sha256": sha});
    let b = c
        .call("post", "/v1/blobs", "/v1/blobs", &alpha.token, Json(reg))
        .await;
    let id = text(&b["id"]);
    let path = format!("/v1/blobs/{id}/content");
    c.call(
        "put",
        "/v1/blobs/{id}/content",
        &path,
        &alpha.token,
        Bytes(content),
    )
    .await;
    let path = format!("/v1/blobs/{id}/complete");
    c.call(
        "post",
        "/v1/blobs/{id}/complete",
        &path,
        &alpha.token,
        Nothing,
    )
    .await;
    let path = format!("/v1/blobs/{id}");
    c.call("get", "/v1/blobs/{id}", &path, &alpha.token, Nothing)
        .await;
    let sha = hex::encode(sha2::Sha256::digest(b"abc"));
    let reg = json!({"name": "raw.bin", "size": 3, "sha256": sha});
    c.call("post", "/v1/blobs", "/v1/blobs", &alpha.token, Json(reg))
        .await;

    // Tenants (the operator's).
    let body = json!({"slug": "acme", "workspace": "main", "admin_name": "ada"});
    let t = c
        .call("post", "/v1/tenants", "/v1/tenants", &operator, Json(body))
        .await;
    c.call("get", "/v1/tenants", "/v1/tenants", &operator, Nothing)
        .await;
    for (verb, route) in [
        ("suspend", "/v1/tenants/{id}/suspend"),
        ("resume", "/v1/tenants/{id}/resume"),
    ] {
        let path = format!("/v1/tenants/{}/{verb}", text(&t["id"]));
        c.call("post", route, &path, &operator, Nothing).await;
    }

    let typed: BTreeSet<(&str, &str)> = c
        .table
        .iter()
        .filter(|row| row.3.is_some())
        .map(|(m, p, _, _)| (*m, *p))
        .collect();
    let missed: Vec<_> = typed.difference(&c.called).collect();
    assert!(
        missed.is_empty(),
        "routes with a typed answer never called here: {missed:?}"
    );

    // Rejections: a plain one, and one with details.
    let (s, raw) = raw_call(&h, "get", "/v1/agents/agt_none", &admin, &Nothing).await;
    assert_eq!(s, 404);
    same_bytes::<agentbus_api::ErrorBody>(&raw).unwrap();
    let path = format!("/v1/workspaces/{}/policy", text(&ws["id"]));
    let bad = Json(json!({"version": "nine", "surprise": true}));
    let (s, raw) = raw_call(&h, "put", &path, &admin, &bad).await;
    assert_eq!(s, 422, "{}", String::from_utf8_lossy(&raw));
    let e: Value = serde_json::from_slice(&raw).unwrap();
    assert!(e["error"]["details"]["violations"].is_array(), "{e}");
    same_bytes::<agentbus_api::ErrorBody>(&raw).unwrap();
}
