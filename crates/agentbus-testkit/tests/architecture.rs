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

/// The code of a Rust source without comments and without its test code (everything from the
/// first `#[cfg(test)]` on).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifiers(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The names of the types the store crate makes public.
fn store_types() -> std::collections::BTreeSet<String> {
    fn walk(dir: &Path, out: &mut std::collections::BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("store sources") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let code = code_of(&std::fs::read_to_string(&path).expect("a source"));
                let words: Vec<&str> = identifiers(&code).collect();
                for w in words.windows(3) {
                    if w[0] == "pub" && ["struct", "enum", "type", "trait"].contains(&w[1]) {
                        out.insert(w[2].to_owned());
                    }
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentbus-store/src"),
        &mut out,
    );
    assert!(out.contains("TaskRow"), "no store types found: {out:?}");
    out
}

/// From `at` (an item's keyword) to the end of its head: the `;` or the `{ … }` that closes
/// it, whichever comes first at depth 0.
fn item_text(code: &str, at: usize) -> &str {
    let mut depth = 0usize;
    for (i, c) in code[at..].char_indices() {
        match c {
            '{' | '(' | '<' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 && c == '}' {
                    return &code[at..=at + i];
                }
            }
            '>' if !code[..at + i].ends_with('-') => depth = depth.saturating_sub(1),
            ';' if depth == 0 => return &code[at..at + i],
            _ => {}
        }
    }
    &code[at..]
}

/// The fields of a struct's body: split at its commas outside brackets.
fn fields(body: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in body.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&body[start..]);
    out
}

/// What a front end sees of item `name` defined in `code`: a function's signature, a type
/// alias, a struct's public fields, an enum's variants. `None` if `code` does not define it.
fn public_face(code: &str, name: &str) -> Option<String> {
    for kind in ["fn", "struct", "enum", "type"] {
        let head = format!("{kind} {name}");
        let Some(at) = code.match_indices(&head).map(|(i, _)| i).find(|&i| {
            let after = code[i + head.len()..].chars().next();
            let before = code[..i].trim_end();
            !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && (before.ends_with("pub") || before.ends_with("pub async"))
        }) else {
            continue;
        };
        let text = item_text(code, at);
        return Some(match kind {
            "fn" => text.split('{').next().unwrap_or_default().to_owned(),
            // A struct's public fields, braced or tuple.
            "struct" => text
                .find(['{', '('])
                .map(|open| fields(&text[open + 1..text.len().saturating_sub(1)]))
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f.trim_start().starts_with("pub "))
                .collect::<Vec<_>>()
                .join(","),
            _ => text.to_owned(),
        });
    }
    None
}

/// Every store type the public face of `ops` (the text of `ops.rs`) names, one line each;
/// `module` gives the text of a gateway module it re-exports from.
fn rows_at_the_door(
    ops: &str,
    store: &std::collections::BTreeSet<String>,
    module: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let ops = code_of(ops);
    let mut rows = store.clone();
    // A name ops defines itself (its own `Role`, `Tokens`) is its own view, not the store's.
    let words: Vec<&str> = identifiers(&ops).collect();
    for w in words.windows(2) {
        if ["struct", "enum", "type"].contains(&w[0]) {
            rows.remove(w[1]);
        }
    }
    let mut found = Vec::new();
    let check = |what: &str, face: &str| {
        let named: Vec<&str> = identifiers(face)
            .filter(|w| rows.contains(*w) || *w == "agentbus_store")
            .collect();
        (!named.is_empty() || face.contains("store::"))
            .then(|| format!("{what} names the store's {named:?}: {}", face.trim()))
    };
    // Its own public functions and types.
    for (at, _) in ops.match_indices("pub ") {
        let rest = &ops[at + 4..];
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        let name: String = ["fn ", "struct ", "enum ", "type "]
            .iter()
            .find_map(|k| rest.strip_prefix(k))
            .map(|r| {
                r.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .unwrap_or_default();
        if name.is_empty() {
            continue;
        }
        if let Some(face) = public_face(&ops, &name) {
            found.extend(check(&format!("ops::{name}"), &face));
        }
    }
    // What it re-exports.
    for (at, _) in ops.match_indices("pub use ") {
        let line = item_text(&ops, at);
        let path = line["pub use ".len()..].replace(char::is_whitespace, "");
        if path.starts_with("agentbus_store") || path.starts_with("store::") {
            found.push(format!("ops re-exports the store's {path}"));
            continue;
        }
        let Some(rest) = path.strip_prefix("crate::") else {
            found.push(format!("ops re-exports {path}, from outside the gateway"));
            continue;
        };
        let (name_of_module, items) = rest.split_once("::").unwrap_or((rest, ""));
        let Some(text) = module(name_of_module) else {
            found.push(format!(
                "ops re-exports from {name_of_module}, which is no module"
            ));
            continue;
        };
        let code = code_of(&text);
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',').filter(|i| !i.is_empty()) {
            let name = item.split("as").next().unwrap_or(item);
            match public_face(&code, name) {
                Some(face) => found.extend(check(
                    &format!("ops re-exports {name_of_module}::{name}, which"),
                    &face,
                )),
                None => found.push(format!(
                    "ops re-exports {name_of_module}::{name}, not found there"
                )),
            }
        }
    }
    found
}

/// "Front ends have one door, and it hands out views": the gateway's `ops` module re-exports no
/// type of the store crate, and nothing it makes public (its own functions and types, and the
/// items it re-exports from the rest of the gateway) names one. A front end reads tasks,
/// conversations, agents and usage as the gateway's view structs, never as stored rows.
#[test]
fn the_door_hands_out_views_not_rows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agentbus-gateway/src");
    let ops = std::fs::read_to_string(src.join("ops.rs")).expect("ops.rs");
    let module = |m: &str| std::fs::read_to_string(src.join(format!("{m}.rs"))).ok();
    let found = rows_at_the_door(&ops, &store_types(), &module);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The door's check sees a re-exported row, a row in a signature, in a public field and in a
/// re-exported item's fields, and passes a view of its own that shares a store type's name.
#[test]
fn the_door_check_finds_rows() {
    let store = ["TaskRow", "MessageRow", "Role", "UserRow"]
        .map(str::to_owned)
        .into_iter()
        .collect();
    let ops = "pub use agentbus_store::TaskRow;\n\
               pub use crate::state::{App, Principal};\n\
               pub enum Role { Admin }\n\
               pub struct View { pub role: Role, hidden: MessageRow }\n\
               pub struct Leak { pub row: MessageRow }\n\
               impl C { pub async fn task(&self) -> ApiResult<Vec<TaskRow>> { todo() } }\n\
               // pub fn commented(m: MessageRow) {}\n";
    let state = "pub struct App { pub config: Config, store: AnyStore }\n\
                 pub enum Principal { User(UserRow) }";
    let module = |m: &str| (m == "state").then(|| state.to_owned());
    let found = rows_at_the_door(ops, &store, &module).join("\n");
    assert!(
        found.contains("ops re-exports the store's agentbus_store::TaskRow"),
        "{found}"
    );
    assert!(
        found.contains("ops::task names the store's [\"TaskRow\"]"),
        "{found}"
    );
    assert!(
        found.contains("ops::Leak names the store's [\"MessageRow\"]"),
        "{found}"
    );
    assert!(
        found.contains("state::Principal, which names the store's [\"UserRow\"]"),
        "{found}"
    );
    assert!(!found.contains("ops::View"), "{found}");
    assert!(!found.contains("state::App"), "{found}");
    assert!(!found.contains("commented"), "{found}");
}

/// Every `.rs` file under `crates/*/src` (the kit's own left out), with its text.
fn library_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("a source directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                out.push((path, text));
            }
        }
    }
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates/") {
        let dir = entry.expect("entry").path();
        if dir.ends_with("agentbus-testkit") || !dir.join("src").is_dir() {
            continue;
        }
        walk(&dir.join("src"), &mut out);
    }
    out
}

/// The front ends' own answers, which carry a code rather than map to one: the HTTP edge's
/// (`ApiError`), the command line's (`CliError`), the MCP server's (`ToolError`), and background
/// work's, converted only at the HTTP edge (`BackgroundError`).
const ANSWERS: &[&str] = &["ApiError", "CliError", "ToolError", "BackgroundError"];

/// The public error types (`pub enum`/`pub struct` named `…Error`) of `sources` that no
/// `impl Catalogued for` (or the protocol crate's `catalogued!` table) gives a code.
fn uncatalogued(sources: &[(PathBuf, String)]) -> Vec<String> {
    let mut missing = Vec::new();
    for (path, text) in sources {
        let code = code_of(text);
        for kw in ["pub enum ", "pub struct "] {
            for (at, _) in code.match_indices(kw) {
                let name: String = code[at + kw.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.ends_with("Error") || ANSWERS.contains(&name.as_str()) {
                    continue;
                }
                let covered = sources.iter().any(|(_, t)| {
                    t.lines().any(|l| {
                        let l = l.trim();
                        let target = l
                            .split_once("Catalogued for ")
                            .map(|(_, rest)| rest)
                            .or_else(|| l.split_once(" => |").map(|(ty, _)| ty));
                        target.is_some_and(|ty| {
                            let ty = ty.trim_end_matches(" {").trim();
                            ty == name || ty.ends_with(&format!("::{name}"))
                        })
                    })
                });
                if !covered {
                    missing.push(format!("{}: {name}", path.display()));
                }
            }
        }
    }
    missing
}

/// ARCHITECTURE.md, "Errors": every library error has its catalogue entry, so no front end sorts
/// a library's errors by hand.
#[test]
fn every_library_error_has_a_catalogue_code() {
    let missing = uncatalogued(&library_sources());
    assert!(missing.is_empty(), "errors without a code: {missing:#?}");
}

/// The check finds an error type nothing catalogues, and accepts both forms of coverage.
#[test]
fn the_catalogue_check_finds_an_error_without_a_code() {
    let sources = vec![
        (
            PathBuf::from("a.rs"),
            "pub enum LostError { A }\npub struct FoundError;\npub enum TabledError { B }\n"
                .to_owned(),
        ),
        (
            PathBuf::from("b.rs"),
            "impl Catalogued for crate::a::FoundError {\n}\ncatalogued! {\n    crate::a::TabledError => |_e| Code::X;\n}\n"
                .to_owned(),
        ),
    ];
    assert_eq!(uncatalogued(&sources), ["a.rs: LostError"]);
}

/// "The telemetry crate sits low": it depends on no workspace crate, so every process (the
/// gateway, the sidecar, the worker, the MCP server) can use it without an import circle, and the
/// OpenTelemetry crates are linked only by it and those above it.
#[test]
fn the_telemetry_crate_knows_no_other_workspace_crate() {
    let deps = dependencies();
    for d in declared(&deps, "agentbus-telemetry") {
        assert!(
            !d.starts_with("agentbus"),
            "agentbus-telemetry depends on {d}"
        );
    }
    let otel = ["opentelemetry", "opentelemetry_sdk", "opentelemetry-otlp"];
    assert_eq!(users(&deps, &otel), ["agentbus-telemetry"]);
}
