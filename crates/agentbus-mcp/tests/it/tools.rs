//! The tool definitions: what `tools/list` serves, and its size against the bound.

use agentbus_mcp::DEFINITIONS;
use serde_json::Value;

/// Every definition together stays under 3,000 tokens, counted as characters / 4 (a
/// fraction of what a server with dozens of tools costs).
pub const TOKENS_MAX: usize = 3_000;

/// The definitions as one compact JSON document, as `tools/list` carries them.
fn served() -> String {
    let v: Value = serde_json::from_str(DEFINITIONS).unwrap();
    v.to_string()
}

#[test]
fn the_tool_definitions_stay_under_3000_tokens() {
    let chars = served().chars().count();
    let tokens = chars / 4;
    assert!(
        tokens < TOKENS_MAX,
        "tools/list is {chars} characters, {tokens} tokens (bound {TOKENS_MAX})"
    );
}

#[test]
fn every_definition_is_an_mcp_tool_with_a_description_and_an_object_schema() {
    let tools = agentbus_mcp::tools::definitions();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "send",
            "read_inbox",
            "reply",
            "delegate",
            "task",
            "trace",
            "directory",
            "search"
        ]
    );
    for t in &tools {
        assert!(
            t.description.as_ref().is_some_and(|d| !d.is_empty()),
            "{}",
            t.name
        );
        assert_eq!(
            t.input_schema.get("type"),
            Some(&Value::from("object")),
            "{}",
            t.name
        );
    }
}

#[test]
fn wp_9_14_attachments_are_a_list_of_paths() {
    let v: Value = serde_json::from_str(DEFINITIONS).unwrap();
    for name in ["send", "delegate", "task"] {
        let tool = v
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        let a = &tool["inputSchema"]["properties"]["attachments"];
        assert_eq!(a["type"], "array", "{name}");
        assert_eq!(
            a["items"]["required"],
            serde_json::json!(["path"]),
            "{name}"
        );
    }
}
