//! The bad-request corpus: every line of `tests/data/bad_requests/*.jsonl`
//! is one request a client gets wrong, over every route of `ROUTES`, each naming its method, path,
//! credential role, headers and body, and the exact status and `AB-` code it must get. One runner
//! sends them to a real gateway on loopback: never a 5xx, always the one error shape (JSON, the
//! code, its doc URL, a request id, a message), and a refusal stores nothing.
//!
//! `{{name}}` in a path, header or body is an object of the fixture below ("not yours" objects
//! belong to a second tenant); a body may be the string itself, or `{"repeat": S, "times": N}`
//! for a large one.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;

use serde_json::{Value, json};

use crate::support::*;

/// One line of the corpus.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    why: String,
    method: String,
    path: String,
    role: String,
    headers: BTreeMap<String, String>,
    body: Option<Value>,
    status: u16,
    code: String,
}

/// The objects and credentials the corpus names.
struct Fixture {
    vars: BTreeMap<&'static str, String>,
    tokens: BTreeMap<&'static str, String>,
}

impl Fixture {
    async fn build(h: &Harness) -> Fixture {
        let alpha = h.worker("alpha").await;
        let bravo = h.agent("bravo").await;
        let sierra = h.agent("sierra").await;
        let (s, v) = h
            .post(
                &format!("/v1/agents/{}/suspend", sierra.id),
                &h.admin,
                json!({}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        let ws_admin = h.user(&h.admin, "admin", "default").await;
        let member = h.user(&h.admin, "member", "default").await;
        let other_admin = h.second_tenant().await;
        let omega = h.agent_in(&other_admin, "omega").await;
        let blob = h.upload(&alpha, "notes.txt", b"release notes").await;
        let other_blob = h.upload(&omega, "secret.txt", b"not yours").await;
        let msg = signed(h, &alpha, &bravo.address, "hello");
        let (s, _, _) = h.publish(&alpha, &msg).await;
        assert_eq!(s, 202);
        let other_msg = signed(h, &omega, &omega.address, "to myself");
        let (s, _, _) = h.publish(&omega, &other_msg).await;
        assert_eq!(s, 202);
        let req = sign(&bravo, request(h, &bravo, &alpha, json!({})));
        let (s, receipt, _) = h.publish(&bravo, &req).await;
        assert_eq!(s, 202, "{receipt}");
        let (_, t) = h.get("/v1/tenants", &h.operator).await;
        let tenant_of = |slug: &str| {
            t["tenants"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["slug"] == slug)
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .unwrap()
        };
        let (_, ws) = h.get("/v1/workspaces", &h.admin).await;
        let (_, other_ws) = h.get("/v1/workspaces", &other_admin).await;
        let first = |v: &Value| v["workspaces"][0]["id"].as_str().unwrap().to_owned();
        let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
        // Users and their tokens, as the operator sees them: every tenant's.
        let (_, users) = h.get("/v1/users", &h.operator).await;
        let (_, tokens) = h.get("/v1/tokens", &h.operator).await;
        let user_where = |tenant: &str, role: &str| {
            users["users"]
                .as_array()
                .unwrap()
                .iter()
                .find(|u| u["tenant"] == tenant && u["role"] == role)
                .map(id)
                .unwrap_or_else(|| panic!("no {role} in {tenant}: {users}"))
        };
        let (admin_user, member_user, other_user) = (
            user_where("default", "tenant_admin"),
            user_where("default", "member"),
            user_where("other", "tenant_admin"),
        );
        let token_of = |user: &str| {
            tokens["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["user"] == user)
                .map(id)
                .unwrap_or_else(|| panic!("no token of {user}: {tokens}"))
        };
        let vars = BTreeMap::from([
            ("admin_token", token_of(&admin_user)),
            ("member_token", token_of(&member_user)),
            ("other_token", token_of(&other_user)),
            ("admin_user", admin_user),
            ("member_user", member_user),
            ("other_user", other_user),
            ("alpha", alpha.id.clone()),
            ("alpha_addr", alpha.address.clone()),
            ("alpha_key", alpha.key_id.clone()),
            ("bravo", bravo.id.clone()),
            ("bravo_addr", bravo.address.clone()),
            ("bravo_key", bravo.key_id.clone()),
            ("sierra", sierra.id.clone()),
            ("omega", omega.id.clone()),
            ("omega_addr", omega.address.clone()),
            ("omega_key", omega.key_id.clone()),
            ("blob", id(&blob)),
            ("other_blob", id(&other_blob)),
            ("msg", msg["id"].as_str().unwrap().to_owned()),
            ("conv", msg["conversation_id"].as_str().unwrap().to_owned()),
            ("other_msg", other_msg["id"].as_str().unwrap().to_owned()),
            (
                "other_conv",
                other_msg["conversation_id"].as_str().unwrap().to_owned(),
            ),
            ("task", receipt["task_id"].as_str().unwrap().to_owned()),
            ("tenant", tenant_of("default")),
            ("other_tenant", tenant_of("other")),
            ("ws", first(&ws)),
            ("other_ws", first(&other_ws)),
            ("now", h.now().to_string()),
            (
                "fresh_key",
                agentbus_protocol::signing::SigningKey::from_seed(agentbus_runtime::random_bytes())
                    .public()
                    .to_base64url(),
            ),
        ]);
        let tokens = BTreeMap::from([
            ("none", String::new()),
            ("garbage", "abu_not-a-token".to_owned()),
            ("operator", h.operator.clone()),
            ("tenant_admin", h.admin.clone()),
            ("ws_admin", ws_admin),
            ("member", member),
            ("agent", alpha.token.clone()),
            ("peer", bravo.token.clone()),
            ("suspended", sierra.token.clone()),
            ("other_admin", other_admin),
            ("other_agent", omega.token.clone()),
        ]);
        Fixture { vars, tokens }
    }

    /// `text` with every `{{name}}` replaced; an unknown name fails the case.
    fn fill(&self, text: &str, why: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("{{") {
            out.push_str(&rest[..at]);
            let end = rest[at..]
                .find("}}")
                .unwrap_or_else(|| panic!("{why}: unclosed {{{{ in {text}"));
            let name = &rest[at + 2..at + end];
            out.push_str(
                self.vars
                    .get(name)
                    .unwrap_or_else(|| panic!("{why}: no fixture object {name}")),
            );
            rest = &rest[at + end + 2..];
        }
        out.push_str(rest);
        out
    }
}

/// The corpus, every file under `tests/data/bad_requests/`, in file and line order.
fn corpus() -> Vec<(String, Case)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/bad_requests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut cases = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for (n, line) in std::fs::read_to_string(&f).unwrap().lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let case: Case =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", n + 1));
            cases.push((format!("{name}:{}", n + 1), case));
        }
    }
    cases
}

/// The routes of `ROUTES` a case is a bad request for: the route its method and concrete path
/// name (`{x}` matches one segment, `{path}` the rest), or, for a method the path does not take
/// (405), every route of that path.
fn routes_of(method: &str, path: &str, status: u16) -> Vec<(&'static str, &'static str)> {
    let path = path.split('?').next().unwrap_or_default();
    let segs: Vec<&str> = path.split('/').collect();
    agentbus_gateway::ROUTES
        .iter()
        .copied()
        .filter(|(m, r)| {
            let want: Vec<&str> = r.split('/').collect();
            (m.eq_ignore_ascii_case(method) || status == 405)
                && (want.len() == segs.len() || (r.ends_with("{path}") && segs.len() >= want.len()))
                && want
                    .iter()
                    .zip(&segs)
                    .all(|(w, s)| w.starts_with('{') || w == s)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_request_corpus_gets_its_exact_code_and_stores_nothing() {
    let h = Harness::start().await;
    let fx = Fixture::build(&h).await;
    let cases = corpus();
    let mut wrong = Vec::new();
    let mut covered = BTreeSet::new();
    let mut codes = BTreeSet::new();
    for (at, c) in &cases {
        let what = format!("{at} ({}) {} {}", c.why, c.method, c.path);
        let path = fx.fill(&c.path, &what);
        covered.extend(routes_of(&c.method, &path, c.status));
        let method = reqwest::Method::from_bytes(c.method.as_bytes()).unwrap();
        let mut r = h.http.request(method, format!("{}{path}", h.url));
        let token = fx
            .tokens
            .get(c.role.as_str())
            .unwrap_or_else(|| panic!("{what}: no role {}", c.role));
        if !token.is_empty() {
            r = r.bearer_auth(token);
        }
        for (k, v) in &c.headers {
            r = r.header(k, fx.fill(v, &what));
        }
        match &c.body {
            None | Some(Value::Null) => {}
            Some(Value::String(b)) => r = r.body(fx.fill(b, &what)),
            Some(Value::Object(big)) => {
                let unit = big["repeat"].as_str().unwrap();
                r = r.body(unit.repeat(big["times"].as_u64().unwrap() as usize));
            }
            Some(other) => panic!("{what}: a body is a string or a repeat: {other}"),
        }
        let before = h.app.store().dump().await.unwrap();
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = resp.text().await.unwrap_or_default();
        assert!(status < 500, "{what}: a 5xx: {status} {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let e = &v["error"];
        let code = e["code"].as_str().unwrap_or_default();
        if status != c.status || code != c.code {
            wrong.push(format!(
                "{what}: want {} {}, got {status} {code} {text:.200}",
                c.status, c.code
            ));
            continue;
        }
        assert_eq!(ctype, "application/json", "{what}: not the error shape");
        assert!(
            e["doc_url"]
                .as_str()
                .is_some_and(|u| u.ends_with(&format!("/errors/{code}")))
                && e["request_id"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("req_"))
                && e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: not the error shape: {text}"
        );
        let after = h.app.store().dump().await.unwrap();
        let changed: Vec<&String> = after.iter().filter(|r| !before.contains(r)).collect();
        if !changed.is_empty() {
            wrong.push(format!(
                "{what}: the refusal stored {:.300}",
                format!("{changed:?}")
            ));
        }
        codes.insert(code.to_owned());
    }
    let missing: Vec<_> = agentbus_gateway::ROUTES
        .iter()
        .filter(|r| !covered.contains(*r))
        .collect();
    // Written past the test harness's capture, so CI's log shows the count.
    let _ = writeln!(
        std::io::stderr(),
        "bad-request corpus: {} requests over {} of {} routes, {} distinct codes, 0 5xx; {} wrong",
        cases.len(),
        covered.len(),
        agentbus_gateway::ROUTES.len(),
        codes.len(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "{} cases got another answer:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(
        missing.is_empty(),
        "routes with no bad request: {missing:?}"
    );
    assert!(cases.len() >= 300, "{}", cases.len());
}
