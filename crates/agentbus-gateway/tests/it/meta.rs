//! Self-description: the OpenAPI document matches the router, schemas and error pages are served.

use serde_json::Value;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_lists_exactly_the_routes_the_gateway_serves() {
    let h = Harness::start().await;
    let (s, doc) = h.get("/v1/openapi.json", "").await;
    assert_eq!(s, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = std::collections::BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            documented.insert((method.clone(), path.clone()));
            assert!(
                op["responses"]["default"].is_object(),
                "{method} {path}: every operation documents the error body"
            );
        }
    }
    let served: std::collections::BTreeSet<(String, String)> = agentbus_gateway::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, served);
    // Every route answers something other than the fallback's "no such endpoint" (AB-4004 body
    // with that message), so ROUTES cannot list a route the router lacks.
    for (method, path) in agentbus_gateway::ROUTES {
        let path = path
            .replace("{path}", "agentbus.message/v1.json")
            .replace("{code}", "AB-1011")
            .replace(['{', '}'], "");
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let resp = h
            .http
            .request(m, format!("{}{path}", h.url))
            .send()
            .await
            .unwrap();
        let text = resp.text().await.unwrap();
        assert!(!text.contains("no such endpoint"), "{method} {path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_1_schemas_and_wp_1_8_error_pages_are_served() {
    let h = Harness::start().await;
    let (s, schema) = h.get("/schemas/agentbus.task.request/v1.json", "").await;
    assert_eq!(s, 200);
    assert_eq!(
        schema["$id"],
        "https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json"
    );
    for code in agentbus_protocol::Code::ALL {
        let resp = h
            .http
            .get(format!("{}/errors/{code}", h.url))
            .header("accept", "application/json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["code"], code.to_string());
    }
    let (s, wk) = h.get("/.well-known/agentbus.json", "").await;
    assert_eq!(s, 200);
    assert!(wk["min_sidecar_version"].is_string() && wk["deprecations"].is_array());
    // Metrics name agents of every tenant: the operator's token only.
    assert_eq!(h.get("/metrics", "").await.0, 401);
    assert_eq!(h.get("/metrics", &h.admin).await.0, 403);
    let (s, metrics) = h.get("/metrics", &h.operator).await;
    assert_eq!(s, 200);
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("agentbus_publish_seconds_bucket")
    );
}

/// Observability: `/metrics` reports each inbox's unacknowledged depth as
/// publishes add to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_inbox_depth_after_publishes() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for text in ["one", "two"] {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, text)).await.0,
            202
        );
    }
    let resp = h
        .http
        .get(format!("{}/metrics", h.url))
        .bearer_auth(&h.operator)
        .send()
        .await
        .unwrap();
    let text = resp.text().await.unwrap();
    let line = format!("agentbus_inbox_depth{{agent=\"{}\"}} 2", b.id);
    assert!(text.contains(&line), "{line} missing from:\n{text}");
}
