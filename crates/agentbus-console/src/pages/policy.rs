//! The workspace policy, read and replaced through the API's functions
//! (`admin::policy_of`, `admin::replace_policy`): the same schema check and the same errors
//! (AB-3026 with every violation, AB-3001 for text that is not JSON), nothing stored on refusal.
//!
//! The policy is edited field by field (the default, the two switches, each rule's `from`, `to`,
//! `effect` and `description`), and each violation the gateway reports is shown beside the field
//! its path names; the whole document can still be edited as JSON, through the same save.

use askama::Template;
use axum::extract::{Path, Query, RawForm};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use serde_json::{Map, Value};

use agentbus_gateway::ops::{ApiError, ApiResult, WorkspaceView};

use crate::render::{self, Chrome, Fields, page_with, peer};

/// Empty rule rows the form offers for new rules.
const BLANK_RULES: usize = 2;
/// The most rule rows a submitted form is read for (the schema allows 1,000 rules).
const MAX_RULE_ROWS: usize = 1000 + BLANK_RULES;

/// A problem the gateway found, as shown beside its field: the path it names and its message.
pub(crate) struct FieldError {
    pub path: String,
    pub message: String,
}

/// One rule of the form.
#[derive(Default)]
pub(crate) struct RuleRow {
    pub from: String,
    pub to: String,
    pub effect: String,
    pub description: String,
    /// Problems of the rule as a whole (a missing or unknown field).
    pub errors: Vec<FieldError>,
    pub from_errors: Vec<FieldError>,
    pub to_errors: Vec<FieldError>,
    pub effect_errors: Vec<FieldError>,
    pub description_errors: Vec<FieldError>,
}

/// The policy as the form shows it, with each violation beside its field.
#[derive(Default)]
pub(crate) struct PolicyForm {
    pub default: String,
    pub default_errors: Vec<FieldError>,
    pub verified: bool,
    pub verified_errors: Vec<FieldError>,
    pub receipts: bool,
    pub receipts_errors: Vec<FieldError>,
    pub rules: Vec<RuleRow>,
    /// Problems of the document as a whole, or of a field the form has no place for.
    pub errors: Vec<FieldError>,
}

/// A value of the document as a field shows it: a string as it is, anything else as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => peer(s),
        other => peer(&other.to_string()),
    }
}

impl PolicyForm {
    /// The form of `doc` (as stored, or as submitted and refused), with `violations`
    /// ((code, path, message), as the refusal lists them) placed beside their fields.
    fn of(doc: &Value, violations: &[(String, String, String)]) -> PolicyForm {
        let rules = doc["rules"].as_array().cloned().unwrap_or_default();
        let mut form = PolicyForm {
            default: match &doc["default"] {
                Value::Null => "deny".into(),
                v => shown(v),
            },
            verified: doc["require_verified_inbound"] == Value::Bool(true),
            receipts: doc["read_receipts"] == Value::Bool(true),
            rules: rules
                .iter()
                .map(|r| RuleRow {
                    from: shown(&r["from"]),
                    to: shown(&r["to"]),
                    effect: shown(&r["effect"]),
                    description: shown(&r["description"]),
                    ..RuleRow::default()
                })
                .collect(),
            ..PolicyForm::default()
        };
        let n = form.rules.len();
        let rule = |i: &str| i.parse::<usize>().ok().filter(|i| *i < n);
        for (_, path, message) in violations {
            let e = FieldError {
                path: peer(path),
                message: peer(message),
            };
            let parts: Vec<&str> = path.split('/').skip(1).collect();
            match parts.as_slice() {
                ["default"] => form.default_errors.push(e),
                ["require_verified_inbound"] => form.verified_errors.push(e),
                ["read_receipts"] => form.receipts_errors.push(e),
                ["rules", i, field, ..] if rule(i).is_some() => {
                    let r = &mut form.rules[rule(i).unwrap_or_default()];
                    match *field {
                        "from" => r.from_errors.push(e),
                        "to" => r.to_errors.push(e),
                        "effect" => r.effect_errors.push(e),
                        "description" => r.description_errors.push(e),
                        _ => r.errors.push(e),
                    }
                }
                ["rules", i] if rule(i).is_some() => {
                    let r = &mut form.rules[rule(i).unwrap_or_default()];
                    // A missing field is the field's problem: shown where it is to be filled in.
                    let missing = |name: &str| {
                        message.starts_with(&format!("\"{name}\" is a required property"))
                    };
                    if missing("effect") {
                        r.effect_errors.push(e);
                    } else if missing("from") {
                        r.from_errors.push(e);
                    } else if missing("to") {
                        r.to_errors.push(e);
                    } else {
                        r.errors.push(e);
                    }
                }
                _ => form.errors.push(e),
            }
        }
        for _ in 0..BLANK_RULES {
            form.rules.push(RuleRow::default());
        }
        form
    }
}

/// The document a submitted form describes: its default, its switches when on, and its rules in
/// order, a row left wholly empty skipped and an empty effect or description left out (so the
/// schema names what is missing).
fn document_of(f: &Fields) -> Value {
    let mut doc = Map::new();
    doc.insert(
        "default".into(),
        Value::String(f.get("default").unwrap_or("deny").to_owned()),
    );
    for name in ["require_verified_inbound", "read_receipts"] {
        if f.get(name).is_some() {
            doc.insert(name.into(), Value::Bool(true));
        }
    }
    let rows = f
        .get("rule-count")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_RULE_ROWS);
    let mut rules = Vec::new();
    for i in 0..rows {
        let field = |name: &str| {
            f.get(&format!("rule-{i}-{name}"))
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        let (from, to, effect, description) = (
            field("from"),
            field("to"),
            field("effect"),
            field("description"),
        );
        if from.is_empty() && to.is_empty() && effect.is_empty() && description.is_empty() {
            continue;
        }
        let mut rule = Map::new();
        rule.insert("from".into(), Value::String(from));
        rule.insert("to".into(), Value::String(to));
        if !effect.is_empty() {
            rule.insert("effect".into(), Value::String(effect));
        }
        if !description.is_empty() {
            rule.insert("description".into(), Value::String(description));
        }
        rules.push(Value::Object(rule));
    }
    doc.insert("rules".into(), Value::Array(rules));
    Value::Object(doc)
}
use crate::session::Viewer;

#[derive(Template)]
#[template(path = "policy.html")]
struct PolicyPage<'a> {
    chrome: Option<&'a Chrome>,
    workspaces: Vec<(String, String, bool)>,
    workspace_id: String,
    workspace: String,
    document: String,
    form: PolicyForm,
    error: Option<(String, String)>,
    /// Whether the JSON editor is shown open (its text was what was refused).
    json_open: bool,
    saved: bool,
}

/// What was submitted and refused, to show again.
enum Refused {
    /// The fields of the form, as the document they describe.
    Form(Value),
    /// The text of the JSON editor, as typed.
    Json(String),
}

/// Which workspace's policy.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct PolicyQuery {
    workspace: Option<String>,
    saved: Option<String>,
}

/// The workspaces whose policy the viewer administers.
async fn administered(v: &Viewer) -> ApiResult<Vec<WorkspaceView>> {
    v.ops().administered_workspaces().await
}

async fn render_page(
    v: &Viewer,
    id: &str,
    refused: Option<Refused>,
    error: Option<&ApiError>,
    saved: bool,
) -> ApiResult<Response> {
    let (ws, doc) = v.ops().policy(id).await?;
    let violations = error.map(render::violations).unwrap_or_default();
    let (form, document, json_open) = match refused {
        None => (
            PolicyForm::of(&doc, &[]),
            render::json_for_edit(&doc),
            false,
        ),
        Some(Refused::Form(submitted)) => (
            PolicyForm::of(&submitted, &violations),
            render::json_for_edit(&doc),
            false,
        ),
        // Text that parses is shown in the form too, each problem beside its field; text that
        // does not is shown as typed, the stored policy in the form.
        Some(Refused::Json(text)) => {
            let form = match serde_json::from_str::<Value>(&text) {
                Ok(parsed) if parsed.is_object() => PolicyForm::of(&parsed, &violations),
                _ => PolicyForm::of(&doc, &[]),
            };
            (form, text, true)
        }
    };
    let workspaces = administered(v)
        .await?
        .into_iter()
        .map(|w| {
            let current = w.id == ws.id;
            (w.id, w.slug, current)
        })
        .collect();
    let status = error.map_or(StatusCode::OK, |e| {
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST)
    });
    page_with(
        status,
        &PolicyPage {
            chrome: Some(&v.chrome),
            workspaces,
            workspace_id: ws.id.clone(),
            workspace: ws.slug.clone(),
            document,
            form,
            error: error.map(|e| (e.code.to_string(), peer(&e.message))),
            json_open,
            saved,
        },
    )
}

/// `GET /console/policy?workspace=ws_…`: the policy of a workspace the viewer administers (its
/// own by default).
pub(crate) async fn view(v: Viewer, Query(q): Query<PolicyQuery>) -> Response {
    let r = async {
        let id = match q.workspace {
            Some(id) => id,
            None => {
                let mine = administered(&v).await?;
                mine.iter()
                    .find(|w| w.id == v.user.workspace_id)
                    .or(mine.first())
                    .map_or_else(|| v.user.workspace_id.clone(), |w| w.id.clone())
            }
        };
        render_page(&v, &id, None, None, q.saved.is_some()).await
    }
    .await;
    v.respond(r)
}

/// `POST /console/policy/{id}` `csrf`, and either `document` (the JSON editor) or the form's
/// fields (`default`, `require_verified_inbound`, `read_receipts`, `rule-count`,
/// `rule-N-from|to|effect|description`): `PUT /v1/workspaces/{id}/policy`'s function. A refused
/// document is shown again, as submitted, each violation beside the field it concerns.
pub(crate) async fn save(
    v: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawForm(body): RawForm,
) -> Response {
    let v = &v;
    super::change(v, &headers, &body, |f| async move {
        let (document, refused) = match f.get("document") {
            Some(text) => (text.to_owned(), Refused::Json(text.to_owned())),
            None => {
                let doc = document_of(&f);
                (doc.to_string(), Refused::Form(doc))
            }
        };
        match v.ops().replace_policy(&id, document.as_bytes()).await {
            Ok(_) => super::back(&format!(
                "/console/policy?workspace={}&saved=1",
                form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
            )),
            // Scope refusals answer as the API does; a document's problems are listed in the form.
            Err(e) if matches!(e.code.http_status(), 400 | 422) => {
                render_page(v, &id, Some(refused), Some(&e), false).await
            }
            Err(e) => Err(e),
        }
    })
    .await
}
