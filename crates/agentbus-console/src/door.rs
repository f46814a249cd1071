//! The console reaches the gateway only through its front-end facade, `agentbus_gateway::ops`
//! (ARCHITECTURE.md, "Console"): a test build may see the store (`test-support`), so this test
//! reads the console's sources and fails on any other path into the gateway.

fn sources(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().and_then(|e| e.to_str()) == Some("rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.display().to_string(), text));
        }
    }
}

#[test]
fn the_console_uses_the_gateway_only_through_ops() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 5, "no sources under {src:?}");
    let mut found = Vec::new();
    for (path, text) in &files {
        if path.ends_with("door.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            let other_path = code
                .match_indices("agentbus_gateway::")
                .any(|(at, m)| !code[at + m.len()..].starts_with("ops"));
            if other_path || code.contains(".store()") || code.contains("testing::") {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
