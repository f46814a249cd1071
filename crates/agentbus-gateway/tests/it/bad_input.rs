//! Bad input on the routes added for the trust boundaries: every body in
//! `tests/data/bad_input/bodies.txt`, a 64-level-deep one, one over the body limit, and hostile
//! path segments, sent with a credential that may call the route. Never a 5xx, always the one
//! error shape with an `AB-` code, and a refusal stores nothing.

use serde_json::Value;

use crate::support::*;

struct Route {
    method: reqwest::Method,
    path: String,
    token: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_routes_refuse_bad_input_in_the_error_shape_and_store_nothing() {
    let h = Harness::start().await;
    let a = h.worker("alpha").await;
    let (_, ws) = h.get("/v1/workspaces", &h.admin).await;
    let ws = ws["workspaces"][0]["id"].as_str().unwrap().to_owned();
    let (_, t) = h.get("/v1/tenants", &h.operator).await;
    let tenant = t["tenants"][0]["id"].as_str().unwrap().to_owned();
    let post = reqwest::Method::POST;
    let routes = [
        (post.clone(), "/v1/tenants".to_owned(), h.operator.clone()),
        (
            post.clone(),
            format!("/v1/tenants/{tenant}/suspend"),
            h.admin.clone(),
        ),
        (post.clone(), "/v1/workspaces".to_owned(), h.admin.clone()),
        (
            reqwest::Method::PUT,
            format!("/v1/workspaces/{ws}/policy"),
            h.admin.clone(),
        ),
        (post.clone(), "/v1/users".to_owned(), h.admin.clone()),
        (post.clone(), "/v1/agents".to_owned(), h.admin.clone()),
        (
            reqwest::Method::PATCH,
            format!("/v1/agents/{}", a.id),
            a.token.clone(),
        ),
        (
            post.clone(),
            format!("/v1/agents/{}/suspend", a.id),
            a.token.clone(),
        ),
    ]
    .map(|(method, path, token)| Route {
        method,
        path,
        token,
    });
    let mut bodies: Vec<Vec<u8>> = include_str!("../data/bad_input/bodies.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            if l == "<empty>" {
                Vec::new()
            } else {
                l.as_bytes().to_vec()
            }
        })
        .collect();
    bodies.push(format!("{}1{}", "[".repeat(70), "]".repeat(70)).into_bytes());
    bodies.push(format!("{{\"slug\": \"{}\"}}", "x".repeat(2 * 1024 * 1024)).into_bytes());
    let mut sent = 0;
    for r in &routes {
        for body in &bodies {
            let before = h.app.store.dump().await.unwrap();
            let resp = h
                .http
                .request(r.method.clone(), format!("{}{}", h.url, r.path))
                .bearer_auth(&r.token)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            let what = format!(
                "{} {} {:?}",
                r.method,
                r.path,
                String::from_utf8_lossy(&body[..body.len().min(80)])
            );
            assert!(status < 500, "{what}: {status} {text}");
            if !(200..300).contains(&status) {
                let v: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|_| panic!("{what}: not the error shape: {text}"));
                let code = v["error"]["code"].as_str().unwrap_or_default();
                assert!(code.starts_with("AB-") && code.len() == 7, "{what}: {text}");
                assert!(
                    v["error"]["doc_url"].as_str().unwrap().ends_with(code),
                    "{what}"
                );
                assert_eq!(
                    h.app.store.dump().await.unwrap(),
                    before,
                    "{what}: a refusal stored something"
                );
            }
            sent += 1;
        }
    }
    // Hostile ids in paths answer like unknown ones.
    for id in [
        "..",
        "%2e%2e",
        "ten_",
        "ws_%00",
        "agt_%F0%9F%98%80",
        &"z".repeat(5000),
    ] {
        for (method, path, token) in [
            (
                reqwest::Method::POST,
                format!("/v1/tenants/{id}/resume"),
                &h.operator,
            ),
            (
                reqwest::Method::GET,
                format!("/v1/workspaces/{id}/policy"),
                &h.admin,
            ),
            (
                reqwest::Method::POST,
                format!("/v1/agents/{id}/resume"),
                &h.admin,
            ),
        ] {
            let (s, v) = h.req(method, &path, token, None).await;
            assert!((400..500).contains(&s), "{path}: {s} {v}");
            sent += 1;
        }
    }
    assert!(sent > 250, "{sent}");
}
