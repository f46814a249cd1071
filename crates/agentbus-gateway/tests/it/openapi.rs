//! `openapi.json` cannot drift from the bodies the gateway serves: every route's request and
//! response schema in the document names exactly the fields of its `agentbus_api` type, at every
//! depth (a field added to a type and not to the document fails, and the other way round).
//! Types that are open documents (policies, envelopes, A2A cards) constrain nothing here.

use std::collections::BTreeMap;

use agentbus_api as api;
use agentbus_api::schema;
use serde_json::Value;

const DOCUMENT: &str = include_str!("../../openapi.json");

/// A body's `agentbus_api` type: its JSON Schema, and a check that a body is exactly what the
/// type writes back (`tests/it/bodies.rs` runs it on every route's real answer).
pub struct Typed {
    /// The type's JSON Schema.
    pub schema: Value,
    /// Reads a body as the type and writes it again: `Err` unless the bytes come back the same.
    pub same: fn(&[u8]) -> Result<(), String>,
}

/// `Some(Typed)` for an `agentbus_api` type.
macro_rules! typed {
    ($t:ty) => {
        Some(Typed {
            schema: schema::<$t>(),
            same: same_bytes::<$t>,
        })
    };
}

/// Whether `raw` reads as a `T` that writes back exactly `raw`: a field the type lacks, a field
/// in another order, or `null` where the type leaves a field out (or the other way round) fails.
pub fn same_bytes<T: serde::Serialize + serde::de::DeserializeOwned>(
    raw: &[u8],
) -> Result<(), String> {
    let text = String::from_utf8_lossy(raw);
    let value: T = serde_json::from_slice(raw).map_err(|e| format!("{e} in {text}"))?;
    let again = serde_json::to_string(&value).map_err(|e| e.to_string())?;
    if again == text {
        Ok(())
    } else {
        Err(format!(
            "the gateway wrote\n  {text}\nthe type writes\n  {again}"
        ))
    }
}

/// What each route takes and answers as JSON: `(method, path, request, response)`; `None` where
/// the body is not JSON of this API (bytes, text, a WebSocket, a protocol or policy document).
pub fn bodies() -> Vec<(&'static str, &'static str, Option<Typed>, Option<Typed>)> {
    use api::*;
    vec![
        ("get", "/.well-known/agentbus.json", None, typed!(WellKnown)),
        ("get", "/schemas/{path}", None, None),
        ("get", "/errors/{code}", None, typed!(ErrorPage)),
        ("get", "/healthz", None, typed!(Health)),
        ("get", "/readyz", None, typed!(Health)),
        ("get", "/metrics", None, None),
        ("get", "/v1/openapi.json", None, None),
        (
            "post",
            "/v1/workspaces",
            typed!(NewWorkspace),
            typed!(Workspace),
        ),
        ("put", "/v1/workspaces/{id}/policy", None, None),
        ("post", "/v1/users", typed!(NewUser), typed!(CreatedUser)),
        (
            "post",
            "/v1/agents",
            typed!(CardInput),
            typed!(RegisteredAgent),
        ),
        ("get", "/v1/agents", None, typed!(Agents)),
        ("get", "/v1/agents/{id}", None, typed!(Card)),
        ("patch", "/v1/agents/{id}", typed!(CardInput), typed!(Card)),
        ("delete", "/v1/agents/{id}", None, None),
        ("post", "/v1/agents/{id}/keys", typed!(NewKey), typed!(Key)),
        (
            "post",
            "/v1/agents/{id}/keys/{key_id}/revoke",
            None,
            typed!(RevokedKey),
        ),
        ("get", "/v1/topics", None, typed!(Topics)),
        (
            "put",
            "/v1/topics/{name}/subscription",
            None,
            typed!(Subscription),
        ),
        (
            "delete",
            "/v1/topics/{name}/subscription",
            None,
            typed!(Subscription),
        ),
        ("post", "/v1/messages", None, typed!(Receipt)),
        ("get", "/v1/inbox", None, typed!(Deliveries)),
        ("get", "/v1/inbox/ws", None, None),
        ("post", "/v1/inbox/acks", typed!(Acks), typed!(ItemResults)),
        (
            "post",
            "/v1/inbox/{sequence}/ack",
            typed!(AckOne),
            typed!(ItemResult),
        ),
        ("get", "/v1/conversations/{id}", None, typed!(Conversation)),
        ("get", "/v1/tasks", None, typed!(Tasks)),
        ("get", "/v1/tasks/{id}", None, typed!(TaskView)),
        (
            "post",
            "/v1/tasks/{id}/cancel",
            typed!(CancelTask),
            typed!(TaskView),
        ),
        ("post", "/v1/blobs", typed!(NewBlob), typed!(CreatedBlob)),
        ("get", "/v1/blobs/{id}", None, typed!(BlobDownload)),
        ("put", "/v1/blobs/{id}/content", None, typed!(Blob)),
        ("get", "/v1/blobs/{id}/content", None, None),
        ("post", "/v1/blobs/{id}/complete", None, typed!(Blob)),
        (
            "post",
            "/v1/tenants",
            typed!(NewTenant),
            typed!(CreatedTenant),
        ),
        ("get", "/v1/tenants", None, typed!(Tenants)),
        ("post", "/v1/tenants/{id}/suspend", None, typed!(Tenant)),
        ("post", "/v1/tenants/{id}/resume", None, typed!(Tenant)),
        ("get", "/v1/workspaces", None, typed!(Workspaces)),
        ("get", "/v1/workspaces/{id}/policy", None, None),
        ("post", "/v1/agents/{id}/suspend", None, typed!(Card)),
        ("post", "/v1/agents/{id}/resume", None, typed!(Card)),
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
            typed!(ShownReceipts),
            typed!(ItemResults),
        ),
        ("get", "/v1/inbox/policy", None, typed!(InboxPolicy)),
        (
            "get",
            "/v1/messages/{id}/delivery",
            None,
            typed!(DeliveryStates),
        ),
        ("get", "/v1/conversations", None, typed!(Conversations)),
        ("get", "/v1/usage", None, typed!(UsageList)),
        ("get", "/v1/messages/sent", None, typed!(SentMessages)),
        ("get", "/v1/users", None, typed!(Users)),
        ("delete", "/v1/users/{id}", None, typed!(User)),
        ("post", "/v1/tokens", typed!(NewToken), typed!(IssuedToken)),
        ("get", "/v1/tokens", None, typed!(TokenList)),
        ("post", "/v1/tokens/{id}/revoke", None, typed!(TokenInfo)),
        ("get", "/v1/search", None, typed!(SearchResults)),
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
        match (request.as_ref().map(|t| &t.schema), &doc_request) {
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
        if let Some(t) = response.as_ref().map(|t| &t.schema) {
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
