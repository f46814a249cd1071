//! Capabilities as a contract (§5.2, §10, checklist G-WP-37): declarations are checked when a card
//! is saved, a `task.request` must name a declared capability and version and its `input` must
//! pass that capability's `input_schema`, and a result's `output` is checked against the output
//! schemas advisorily (a warning on the timeline, never a refusal).
//!
//! Card schemas are compiled as draft 2020-12 with nothing to fetch: this crate's `jsonschema` has
//! no HTTP retriever, so a remote `$ref` fails when the card is saved, not at a later request.

use serde_json::{Map, Value, json};

use agentbus_protocol::Code;
use agentbus_protocol::envelope::{Envelope, Violation, is_capability, is_major};
use agentbus_store::AgentRow;

use crate::error::{ApiError, ApiResult};

/// The most capabilities a card declares.
pub const MAX_CAPABILITIES: usize = 64;

fn violation(code: Code, path: String, message: impl Into<String>) -> Violation {
    Violation {
        code,
        path,
        message: message.into(),
    }
}

/// Compiles a card schema; the error says why it is not one.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        return Err("a JSON Schema is an object (or a boolean)".into());
    }
    let meta = jsonschema::draft202012::meta::validator();
    if let Some(e) = meta.iter_errors(schema).next() {
        return Err(format!("not a valid JSON Schema (draft 2020-12): {e}"));
    }
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| format!("the schema does not compile without fetching anything: {e}"))
}

/// Checks the `capabilities` of a card (§10) and lists every problem, pointers under
/// `/capabilities`.
pub fn check_declarations(capabilities: &Value) -> Result<(), Vec<Violation>> {
    let bad = |path: String, m: &str| violation(Code::InvalidCapabilityDeclaration, path, m);
    let Some(items) = capabilities.as_array() else {
        return Err(vec![bad(
            "/capabilities".into(),
            "`capabilities` is an array of {name, version, …} objects",
        )]);
    };
    let mut out = Vec::new();
    if items.len() > MAX_CAPABILITIES {
        out.push(bad(
            "/capabilities".into(),
            &format!("at most {MAX_CAPABILITIES} capabilities"),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, c) in items.iter().enumerate() {
        let at = |field: &str| format!("/capabilities/{i}{field}");
        let Some(c) = c.as_object() else {
            out.push(bad(at(""), "a capability is an object"));
            continue;
        };
        let name = c.get("name").and_then(Value::as_str);
        match name {
            Some(n) if is_capability(n) => {}
            _ => out.push(bad(
                at("/name"),
                "`name` is dot-separated lowercase identifiers, such as code.review",
            )),
        }
        let version = c.get("version").and_then(Value::as_str);
        match version {
            Some(v) if is_major(v) => {}
            _ => out.push(bad(
                at("/version"),
                "`version` is a major version string, such as \"1\"",
            )),
        }
        if let (Some(n), Some(v)) = (name, version)
            && !seen.insert((n, v))
        {
            out.push(bad(at(""), &format!("{n} version {v} is declared twice")));
        }
        for (field, ok, what) in [
            (
                "description",
                c.get("description").is_none_or(Value::is_string),
                "a string",
            ),
            (
                "accepts_attachments",
                c.get("accepts_attachments")
                    .is_none_or(|a| a.as_array().is_some_and(|l| l.iter().all(Value::is_string))),
                "an array of media types",
            ),
            (
                "typical_duration_s",
                c.get("typical_duration_s").is_none_or(|d| d.is_u64()),
                "a non-negative integer",
            ),
        ] {
            if !ok {
                out.push(bad(
                    at(&format!("/{field}")),
                    &format!("`{field}` is {what}"),
                ));
            }
        }
        for field in ["input_schema", "output_schema"] {
            if let Some(schema) = c.get(field)
                && let Err(why) = compile(schema)
            {
                out.push(bad(at(&format!("/{field}")), &why));
            }
        }
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// The capability entry of a stored card that declares `name` at major `version`.
pub fn declared<'a>(card: &'a Map<String, Value>, name: &str, version: &str) -> Option<&'a Value> {
    card.get("capabilities")?.as_array()?.iter().find(|c| {
        c.get("name").and_then(Value::as_str) == Some(name)
            && c.get("version").and_then(Value::as_str) == Some(version)
    })
}

/// Validates `instance` against a card schema, violations with pointers under `prefix`.
fn violations(schema: &Value, instance: &Value, prefix: &str, code: Code) -> Vec<Violation> {
    match compile(schema) {
        Ok(v) => v
            .iter_errors(instance)
            .map(|e| {
                violation(
                    code,
                    format!("{prefix}{}", e.instance_path()),
                    e.to_string(),
                )
            })
            .collect(),
        // Declarations are checked when saved; one that no longer compiles (a card stored before
        // the check) cannot be met, and says why.
        Err(why) => vec![violation(code, prefix.to_owned(), why)],
    }
}

/// §5.2: a `task.request` names a capability and version `recipient` declares, and its `input`
/// (an absent one is `{}`) passes that capability's `input_schema` when it has one.
pub fn check_request(recipient: &AgentRow, env: &Envelope) -> ApiResult<()> {
    let card: Map<String, Value> = serde_json::from_str(&recipient.card).unwrap_or_default();
    let name = env.capability().unwrap_or_default();
    let version = env.str_attr("capability_version").unwrap_or_default();
    let Some(cap) = declared(&card, name, version) else {
        return Err(ApiError::new(
            Code::CapabilityNotDeclared,
            format!(
                "{} does not declare capability {name} version {version} (§5.2); its card lists what it offers",
                recipient.name
            ),
        ));
    };
    let Some(schema) = cap.get("input_schema") else {
        return Ok(());
    };
    let empty = json!({});
    let input = env.data().and_then(|d| d.get("input")).unwrap_or(&empty);
    let found = violations(schema, input, "/data/input", Code::CapabilityInputInvalid);
    if found.is_empty() {
        Ok(())
    } else {
        Err(ApiError::with_violations(found))
    }
}

/// The advisory findings about a result's `output` (G-WP-37): each violation of the capability's
/// `output_schema` and of the request's `constraints.output_schema`, as timeline warnings.
pub fn output_warnings(
    capability: Option<&Value>,
    constraints: Option<&Value>,
    output: Option<&Value>,
) -> Vec<Value> {
    let empty = json!({});
    let output = output.unwrap_or(&empty);
    let mut out = Vec::new();
    for (source, schema) in [
        (
            "capability",
            capability.and_then(|c| c.get("output_schema")),
        ),
        ("request", constraints.and_then(|c| c.get("output_schema"))),
    ] {
        let Some(schema) = schema else { continue };
        for v in violations(schema, output, "/data/output", Code::DataInvalid) {
            out.push(json!({"schema": source, "path": v.path, "message": v.message}));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_list_every_problem_with_its_pointer() {
        let caps = json!([
            {"name": "code.review", "version": "1", "input_schema": {"type": "object"}},
            {"name": "Code Review", "version": 1},
            {"name": "code.review", "version": "1"},
            {"name": "x.y", "version": "2", "input_schema": {"type": "nothing"}},
            {"name": "x.z", "version": "2", "output_schema": {"$ref": "https://example.com/s.json"}},
            "not an object"
        ]);
        let paths: Vec<String> = check_declarations(&caps)
            .unwrap_err()
            .into_iter()
            .map(|v| v.path)
            .collect();
        assert_eq!(
            paths,
            [
                "/capabilities/1/name",
                "/capabilities/1/version",
                "/capabilities/2",
                "/capabilities/3/input_schema",
                "/capabilities/4/output_schema",
                "/capabilities/5"
            ]
        );
        assert!(
            check_declarations(&json!([{"name": "a.b", "version": "1", "input_schema": true}]))
                .is_ok()
        );
    }

    #[test]
    fn output_warnings_name_their_schema() {
        let cap = json!({"output_schema": {"type": "object", "required": ["findings"]}});
        let constraints =
            json!({"output_schema": {"type": "object", "properties": {"n": {"type": "integer"}}}});
        let w = output_warnings(Some(&cap), Some(&constraints), Some(&json!({"n": "x"})));
        let got: Vec<(&str, &str)> = w
            .iter()
            .map(|w| (w["schema"].as_str().unwrap(), w["path"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("capability", "/data/output"),
                ("request", "/data/output/n")
            ]
        );
        assert!(output_warnings(Some(&cap), None, Some(&json!({"findings": []}))).is_empty());
    }
}
