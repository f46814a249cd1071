//! `openapi.json` cannot drift from the bodies the gateway serves: every route's request and
//! response schema in the document names exactly the fields of its `agentbus_api` type, at every
//! depth (a field added to a type and not to the document fails, and the other way round).
//! Types that are open documents (policies, envelopes, A2A cards) constrain nothing here.

use std::collections::BTreeMap;

use agentbus_api as api;
use agentbus_api::schema;
use serde_json::Value;

const DOCUMENT: &str = include_str!("../../openapi.json");

/// What each route takes and answers as JSON: `(method, path, request, response)`; `None` where
/// the body is not JSON of this API (bytes, text, a WebSocket, a protocol or policy document).
fn bodies() -> Vec<(&'static str, &'static str, Option<Value>, Option<Value>)> {
    use api::*;
    vec![
        (
            "get",
            "/.well-known/agentbus.json",
            None,
            Some(schema::<WellKnown>()),
        ),
        ("get", "/schemas/{path}", None, None),
        ("get", "/errors/{code}", None, Some(schema::<ErrorPage>())),
        ("get", "/healthz", None, Some(schema::<Health>())),
        ("get", "/readyz", None, Some(schema::<Health>())),
        ("get", "/metrics", None, None),
        ("get", "/v1/openapi.json", None, None),
        (
            "post",
            "/v1/workspaces",
            Some(schema::<NewWorkspace>()),
            Some(schema::<Workspace>()),
        ),
        ("put", "/v1/workspaces/{id}/policy", None, None),
        (
            "post",
            "/v1/users",
            Some(schema::<NewUser>()),
            Some(schema::<CreatedUser>()),
        ),
        (
            "post",
            "/v1/agents",
            Some(schema::<CardInput>()),
            Some(schema::<RegisteredAgent>()),
        ),
        ("get", "/v1/agents", None, Some(schema::<Agents>())),
        ("get", "/v1/agents/{id}", None, Some(schema::<Card>())),
        (
            "patch",
            "/v1/agents/{id}",
            Some(schema::<CardInput>()),
            Some(schema::<Card>()),
        ),
        ("delete", "/v1/agents/{id}", None, None),
        (
            "post",
            "/v1/agents/{id}/keys",
            Some(schema::<NewKey>()),
            Some(schema::<Key>()),
        ),
        (
            "post",
            "/v1/agents/{id}/keys/{key_id}/revoke",
            None,
            Some(schema::<RevokedKey>()),
        ),
        ("get", "/v1/topics", None, Some(schema::<Topics>())),
        (
            "put",
            "/v1/topics/{name}/subscription",
            None,
            Some(schema::<Subscription>()),
        ),
        (
            "delete",
            "/v1/topics/{name}/subscription",
            None,
            Some(schema::<Subscription>()),
        ),
        ("post", "/v1/messages", None, Some(schema::<Receipt>())),
        ("get", "/v1/inbox", None, Some(schema::<Deliveries>())),
        ("get", "/v1/inbox/ws", None, None),
        (
            "post",
            "/v1/inbox/acks",
            Some(schema::<Acks>()),
            Some(schema::<ItemResults>()),
        ),
        (
            "post",
            "/v1/inbox/{sequence}/ack",
            Some(schema::<AckOne>()),
            Some(schema::<ItemResult>()),
        ),
        (
            "get",
            "/v1/conversations/{id}",
            None,
            Some(schema::<Conversation>()),
        ),
        ("get", "/v1/tasks", None, Some(schema::<Tasks>())),
        ("get", "/v1/tasks/{id}", None, Some(schema::<TaskView>())),
        (
            "post",
            "/v1/tasks/{id}/cancel",
            Some(schema::<CancelTask>()),
            Some(schema::<TaskView>()),
        ),
        (
            "post",
            "/v1/blobs",
            Some(schema::<NewBlob>()),
            Some(schema::<CreatedBlob>()),
        ),
        (
            "get",
            "/v1/blobs/{id}",
            None,
            Some(schema::<BlobDownload>()),
        ),
        (
            "put",
            "/v1/blobs/{id}/content",
            None,
            Some(schema::<Blob>()),
        ),
        ("get", "/v1/blobs/{id}/content", None, None),
        (
            "post",
            "/v1/blobs/{id}/complete",
            None,
            Some(schema::<Blob>()),
        ),
        (
            "post",
            "/v1/tenants",
            Some(schema::<NewTenant>()),
            Some(schema::<CreatedTenant>()),
        ),
        ("get", "/v1/tenants", None, Some(schema::<Tenants>())),
        (
            "post",
            "/v1/tenants/{id}/suspend",
            None,
            Some(schema::<Tenant>()),
        ),
        (
            "post",
            "/v1/tenants/{id}/resume",
            None,
            Some(schema::<Tenant>()),
        ),
        ("get", "/v1/workspaces", None, Some(schema::<Workspaces>())),
        ("get", "/v1/workspaces/{id}/policy", None, None),
        (
            "post",
            "/v1/agents/{id}/suspend",
            None,
            Some(schema::<Card>()),
        ),
        (
            "post",
            "/v1/agents/{id}/resume",
            None,
            Some(schema::<Card>()),
        ),
        ("get", "/v1/agents/{id}/a2a", None, None),
        (
            "get",
            "/v1/agents/{id}/.well-known/agent-card.json",
            None,
            None,
        ),
        (
            "post",
            "/v1/inbox/receipts",
            Some(schema::<ShownReceipts>()),
            Some(schema::<ItemResults>()),
        ),
        (
            "get",
            "/v1/inbox/policy",
            None,
            Some(schema::<InboxPolicy>()),
        ),
        (
            "get",
            "/v1/messages/{id}/delivery",
            None,
            Some(schema::<DeliveryStates>()),
        ),
        (
            "get",
            "/v1/conversations",
            None,
            Some(schema::<Conversations>()),
        ),
        ("get", "/v1/usage", None, Some(schema::<UsageList>())),
        (
            "get",
            "/v1/messages/sent",
            None,
            Some(schema::<SentMessages>()),
        ),
        ("get", "/v1/users", None, Some(schema::<Users>())),
        ("delete", "/v1/users/{id}", None, Some(schema::<User>())),
        (
            "post",
            "/v1/tokens",
            Some(schema::<NewToken>()),
            Some(schema::<IssuedToken>()),
        ),
        ("get", "/v1/tokens", None, Some(schema::<TokenList>())),
        (
            "post",
            "/v1/tokens/{id}/revoke",
            None,
            Some(schema::<TokenInfo>()),
        ),
    ]
}

/// The fields a schema describes, at every depth.
#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// An object with these properties.
    Object(BTreeMap<String, Shape>),
    /// An array of these.
    Array(Box<Shape>),
    /// A string, number or boolean.
    Leaf,
    /// Anything: an object or value whose fields are not listed.
    Open,
    /// `null` (one branch of an optional value).
    Null,
}

/// The shape of `schema`, its `$ref`s resolved in `root`.
fn shape(schema: &Value, root: &Value) -> Shape {
    let Some(obj) = schema.as_object() else {
        return Shape::Open; // `true`
    };
    if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
        let target = root
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{r} does not resolve"));
        return shape(target, root);
    }
    let branches: Vec<Shape> = ["allOf", "anyOf", "oneOf"]
        .iter()
        .filter_map(|k| obj.get(*k).and_then(Value::as_array))
        .flatten()
        .map(|b| shape(b, root))
        .collect();
    let mut own = Shape::Open;
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        own = Shape::Object(
            props
                .iter()
                .map(|(k, v)| (k.clone(), shape(v, root)))
                .collect(),
        );
    } else if let Some(items) = obj.get("items") {
        own = Shape::Array(Box::new(shape(items, root)));
    } else {
        let types: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let real: Vec<&&str> = types.iter().filter(|t| **t != "null").collect();
        if !types.is_empty() && real.is_empty() {
            own = Shape::Null;
        } else if real == [&"array"] {
            own = Shape::Array(Box::new(Shape::Open));
        } else if (!real.is_empty() && real.iter().all(|t| !matches!(**t, "object" | "array")))
            || obj.contains_key("enum")
            || obj.contains_key("const")
        {
            own = Shape::Leaf;
        }
    }
    branches.into_iter().fold(own, merge)
}

/// One shape of two branches of a schema (`allOf`, `anyOf`, or a `$ref` beside properties).
fn merge(a: Shape, b: Shape) -> Shape {
    match (a, b) {
        (Shape::Object(mut x), Shape::Object(y)) => {
            for (k, v) in y {
                let merged = match x.remove(&k) {
                    Some(old) => merge(old, v),
                    None => v,
                };
                x.insert(k, merged);
            }
            Shape::Object(x)
        }
        (Shape::Array(x), Shape::Array(y)) => Shape::Array(Box::new(merge(*x, *y))),
        (Shape::Null, s) | (s, Shape::Null) => s,
        (Shape::Open, s) | (s, Shape::Open) => s,
        (s, _) => s,
    }
}

/// Where the document and the type disagree, each as `path: what`.
fn differences(doc: &Shape, ty: &Shape, at: &str, out: &mut Vec<String>) {
    match (ty, doc) {
        (Shape::Open | Shape::Null, _) => {}
        (Shape::Leaf, Shape::Object(_) | Shape::Array(_)) => out.push(format!(
            "{at}: the type has a plain value, the document {doc:?}"
        )),
        (Shape::Leaf, _) => {}
        (Shape::Array(t), Shape::Array(d)) => differences(d, t, &format!("{at}[]"), out),
        (Shape::Array(_), _) => out.push(format!("{at}: the type has an array, the document not")),
        (Shape::Object(t), Shape::Object(d)) => {
            for k in t.keys().filter(|k| !d.contains_key(*k)) {
                out.push(format!("{at}.{k}: in the type, not in the document"));
            }
            for k in d.keys().filter(|k| !t.contains_key(*k)) {
                out.push(format!("{at}.{k}: in the document, not in the type"));
            }
            for (k, t) in t {
                if let Some(d) = d.get(k) {
                    differences(d, t, &format!("{at}.{k}"), out);
                }
            }
        }
        (Shape::Object(t), _) => out.push(format!(
            "{at}: the type has fields {:?}, the document lists none",
            t.keys().collect::<Vec<_>>()
        )),
    }
}

/// The JSON schema of an operation's request body or of its responses with a 2xx status.
fn documented(op: &Value, doc: &Value) -> (Option<Value>, Vec<(String, Value)>) {
    let json = |content: &Value| content["application/json"]["schema"].clone();
    let request = op
        .get("requestBody")
        .map(|b| json(&b["content"]))
        .filter(|s| !s.is_null());
    let mut responses = Vec::new();
    for (status, r) in op["responses"].as_object().into_iter().flatten() {
        let r = match r.get("$ref").and_then(Value::as_str) {
            Some(p) => doc
                .pointer(p.trim_start_matches('#'))
                .cloned()
                .unwrap_or_default(),
            None => r.clone(),
        };
        let s = json(&r["content"]);
        if status.starts_with('2') && !s.is_null() {
            responses.push((status.clone(), s));
        }
    }
    (request, responses)
}

#[test]
fn openapi_schemas_name_exactly_the_fields_of_the_api_types() {
    let doc: Value = serde_json::from_str(DOCUMENT).unwrap();
    let table = bodies();
    let listed: Vec<(&str, &str)> = table.iter().map(|(m, p, _, _)| (*m, *p)).collect();
    assert_eq!(
        listed,
        agentbus_gateway::ROUTES.to_vec(),
        "every route of ROUTES has a row here, in the same order"
    );
    let mut problems = Vec::new();
    for (method, path, request, response) in table {
        let op = &doc["paths"][path][method];
        let (doc_request, doc_responses) = documented(op, &doc);
        let route = format!("{} {path}", method.to_uppercase());
        match (&request, &doc_request) {
            (Some(t), Some(d)) => differences(
                &shape(d, &doc),
                &shape(t, t),
                &format!("{route} request"),
                &mut problems,
            ),
            (Some(_), None) => {
                problems.push(format!("{route}: the request body is not documented"))
            }
            _ => {}
        }
        if let Some(t) = &response {
            if doc_responses.is_empty() {
                problems.push(format!("{route}: no JSON response is documented"));
            }
            for (status, d) in &doc_responses {
                differences(
                    &shape(d, &doc),
                    &shape(t, t),
                    &format!("{route} {status}"),
                    &mut problems,
                );
            }
        }
        // Every rejection has the one error body.
        let default = match op["responses"]["default"]
            .get("$ref")
            .and_then(Value::as_str)
        {
            Some(p) => doc
                .pointer(p.trim_start_matches('#'))
                .cloned()
                .unwrap_or_default(),
            None => op["responses"]["default"].clone(),
        };
        let error = default["content"]["application/json"]["schema"].clone();
        let t = schema::<api::ErrorBody>();
        differences(
            &shape(&error, &doc),
            &shape(&t, &t),
            &format!("{route} default"),
            &mut problems,
        );
    }
    assert!(
        problems.is_empty(),
        "openapi.json and the agentbus-api types disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_comparison_sees_a_field_on_either_side() {
    let ty = schema::<api::Subscription>();
    let doc = serde_json::json!({"type": "object", "properties": {"topic": {"type": "string"}}});
    let mut out = Vec::new();
    differences(&shape(&doc, &doc), &shape(&ty, &ty), "x", &mut out);
    assert_eq!(out, ["x.subscribed: in the type, not in the document"]);
    let doc = serde_json::json!({"type": "object", "properties": {
        "topic": {}, "subscribed": {}, "extra": {}}});
    let mut out = Vec::new();
    differences(&shape(&doc, &doc), &shape(&ty, &ty), "x", &mut out);
    assert_eq!(out, ["x.extra: in the document, not in the type"]);
}
