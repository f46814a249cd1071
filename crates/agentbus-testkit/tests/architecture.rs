//! ARCHITECTURE.md's dependency invariants, read off every crate's `Cargo.toml`: which crate may
//! know SQL, HTTP, clap or another transport. A rule broken here is a layer crossed, whatever the
//! code does with it, so the check is on declared dependencies rather than on `use` lines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each workspace crate's normal (not dev, not build) dependencies, by crate name. The kit itself
/// is left out: it is test support, only ever a dev-dependency, and may reach anything.
fn dependencies() -> BTreeMap<String, Vec<String>> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = BTreeMap::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        let manifest: toml::Table = toml::from_str(&text).expect("a manifest");
        let name = manifest["package"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        if name == env!("CARGO_PKG_NAME") {
            continue;
        }
        let deps = manifest
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        out.insert(name, deps);
    }
    assert!(
        out.len() >= 12,
        "expected every workspace crate, found {:?}",
        out.keys()
    );
    out
}

/// The crates (of `deps`) that declare any of `names`.
fn users<'a>(deps: &'a BTreeMap<String, Vec<String>>, names: &[&str]) -> Vec<&'a str> {
    deps.iter()
        .filter(|(_, d)| d.iter().any(|x| names.contains(&x.as_str())))
        .map(|(k, _)| k.as_str())
        .collect()
}

fn declared<'a>(deps: &'a BTreeMap<String, Vec<String>>, krate: &str) -> &'a [String] {
    deps.get(krate)
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("no crate {krate}"))
}

/// "Nothing outside this crate knows SQL": only the store links a database driver.
#[test]
fn only_the_store_knows_sql() {
    let deps = dependencies();
    let sql = [
        "rusqlite",
        "tokio-postgres",
        "deadpool-postgres",
        "postgres",
        "sqlx",
    ];
    assert_eq!(users(&deps, &sql), ["agentbus-store"]);
}

/// "The protocol crate does no IO": no runtime, no network, no entropy, no other workspace crate.
#[test]
fn the_protocol_crate_does_no_io() {
    let deps = dependencies();
    let io = [
        "tokio",
        "reqwest",
        "axum",
        "hyper",
        "getrandom",
        "rand",
        "keyring-core",
        "rusqlite",
    ];
    for d in declared(&deps, "agentbus-protocol") {
        assert!(
            !io.contains(&d.as_str()),
            "agentbus-protocol depends on {d}"
        );
        assert!(
            !d.starts_with("agentbus"),
            "agentbus-protocol depends on {d}"
        );
    }
}

/// "Only this crate knows clap; only its edge uses anyhow."
#[test]
fn only_the_binary_knows_clap_and_anyhow() {
    let deps = dependencies();
    assert_eq!(users(&deps, &["clap", "clap_complete"]), ["agentbus"]);
    assert_eq!(users(&deps, &["anyhow"]), ["agentbus"]);
}

/// "agentbus-local does not know HTTP, git or clap"; "agentbus-share depends on no other
/// transport and not on the binary".
#[test]
fn transports_do_not_know_each_other() {
    let deps = dependencies();
    for d in declared(&deps, "agentbus-local") {
        let banned = [
            "reqwest",
            "axum",
            "hyper",
            "clap",
            "tokio",
            "agentbus-share",
        ];
        assert!(
            !banned.contains(&d.as_str()),
            "agentbus-local depends on {d}"
        );
        assert!(!d.starts_with("agentbus-client") && !d.starts_with("agentbus-gateway"));
    }
    for d in declared(&deps, "agentbus-share") {
        assert!(
            ![
                "agentbus-local",
                "agentbus-client",
                "agentbus-gateway",
                "agentbus",
                "reqwest"
            ]
            .contains(&d.as_str()),
            "agentbus-share depends on {d}"
        );
    }
}

/// "No front end reads the store": the console, the MCP server, the worker and the binary reach
/// stored data only through the gateway's `ops` door or its HTTP API, never the store crate.
#[test]
fn no_front_end_depends_on_the_store() {
    let deps = dependencies();
    let readers = users(&deps, &["agentbus-store"]);
    for front in [
        "agentbus",
        "agentbus-console",
        "agentbus-mcp",
        "agentbus-work",
        "agentbus-client",
    ] {
        assert!(
            !readers.contains(&front),
            "{front} depends on agentbus-store"
        );
    }
}

/// Layers import downward: no library depends on a front end or the binary, and the gateway
/// knows none of the agent side.
#[test]
fn layers_point_downward() {
    let deps = dependencies();
    let front_ends = [
        "agentbus",
        "agentbus-console",
        "agentbus-mcp",
        "agentbus-work",
    ];
    for (krate, d) in &deps {
        for dep in d {
            if front_ends.contains(&dep.as_str()) {
                assert_eq!(krate, "agentbus", "{krate} depends on the front end {dep}");
            }
        }
    }
    for d in declared(&deps, "agentbus-gateway") {
        assert!(
            !["agentbus-client", "agentbus-local", "agentbus-share"].contains(&d.as_str()),
            "the gateway depends on {d}"
        );
    }
    for d in declared(&deps, "agentbus-client") {
        assert!(
            d != "agentbus-gateway" && d != "agentbus-store",
            "the client depends on {d}"
        );
    }
}

/// The API bodies are plain data shared by server and clients: serde and the protocol crate only,
/// so any front end (and the gateway) can depend on them without pulling a runtime in.
#[test]
fn the_api_bodies_are_plain_data() {
    let deps = dependencies();
    for d in declared(&deps, "agentbus-api") {
        assert!(
            ["agentbus-protocol", "serde", "serde_json", "schemars"].contains(&d.as_str()),
            "agentbus-api depends on {d}"
        );
    }
}
