//! The gateway's modules form layers, each using only the layers below it (ARCHITECTURE.md,
//! "Gateway"): this test reads `src/*.rs`, collects each module's `crate::` references outside
//! comments and test code, and fails on an import circle, on a module that uses a layer above its
//! own, on a module given no layer, on the state layer using a feature module, and on a module
//! below the notices' layer sweeping owed notices.

use std::collections::{BTreeMap, BTreeSet};

/// The layers, lowest first. Within a layer modules may use each other, without a circle.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "blobstore",
            "capabilities",
            "config",
            "crypto",
            "error",
            "extract",
            "metrics",
            "policy",
            "serve",
            "sigv4",
            "testclock",
        ],
    ),
    ("state", &["state"]),
    ("auth", &["auth"]),
    ("directory", &["directory"]),
    ("access", &["roles", "access"]),
    ("wake-ups", &["wake", "copies"]),
    ("system notices", &["notice"]),
    (
        "features",
        &[
            "a2a", "admin", "blobs", "identity", "inbox", "meta", "publish", "receipts", "tasks",
            "usage", "views", "ops", "people", "search",
        ],
    ),
    ("notices and the reaper", &["owed", "reaper", "clockapi"]),
    ("root", &["lib"]),
];

/// This test's own file, which names modules in strings.
const SELF: &str = "layers";

/// The code of a source file without comments and without its test code (everything from the
/// first `#[cfg(test)]` on: test modules close each file).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segments after each `crate::` in `code`, `use crate::{a, b::c}` included.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        // `agentbus_gateway::crate::` never occurs; skip `xcrate::`-like identifiers.
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// Module name → the modules it uses. A name that is no module is an item of the crate root.
fn graph(sources: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    sources
        .iter()
        .map(|(module, text)| {
            let uses = crate_refs(&code_of(text))
                .into_iter()
                .map(|n| {
                    if sources.contains_key(&n) {
                        n
                    } else {
                        "lib".to_owned()
                    }
                })
                .filter(|n| n != module)
                .collect();
            (module.clone(), uses)
        })
        .collect()
}

/// A circle in the graph, as the modules along it, if there is one.
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|m| m == n).unwrap_or(0);
                let mut c = path[from..].to_vec();
                c.push(n.to_owned());
                return Some(c);
            }
            None => {}
        }
        marks.insert(n.to_owned(), Mark::Open);
        path.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(n.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut marks, &mut Vec::new()))
}

/// Every broken rule, one line each.
fn problems(sources: &BTreeMap<String, String>) -> Vec<String> {
    let g = graph(sources);
    let rank = |m: &str| LAYERS.iter().position(|(_, ms)| ms.contains(&m));
    let mut out = Vec::new();
    if let Some(c) = circle(&g) {
        out.push(format!("import circle: {}", c.join(" -> ")));
    }
    for (m, uses) in &g {
        let Some(r) = rank(m) else {
            out.push(format!("module `{m}` has no layer in LAYERS"));
            continue;
        };
        for u in uses {
            match rank(u) {
                Some(ru) if ru > r => out.push(format!(
                    "`{m}` ({}) uses `{u}` ({}), a layer above it",
                    LAYERS[r].0, LAYERS[ru].0
                )),
                _ => {}
            }
        }
    }
    let features = LAYERS
        .iter()
        .find(|(l, _)| *l == "features")
        .map_or(&[][..], |(_, ms)| *ms);
    for u in g.get("state").into_iter().flatten() {
        if features.contains(&u.as_str()) {
            out.push(format!("the state layer uses the feature module `{u}`"));
        }
    }
    // The sweeps of owed notices are the layer above the features: no module below it reads
    // what is still owed.
    let top = LAYERS
        .iter()
        .position(|(l, _)| *l == "notices and the reaper");
    for (m, text) in sources {
        let code = code_of(text);
        let sweeps = code.contains(".pending_notices(") || code.contains(".pending_task_notices(");
        if sweeps && rank(m) < top {
            out.push(format!(
                "`{m}` sweeps owed notices below the notices' layer"
            ));
        }
    }
    out
}

fn sources_in(dir: &std::path::Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        if module != SELF {
            out.insert(module, std::fs::read_to_string(&path).unwrap());
        }
    }
    out
}

#[test]
fn the_gateway_modules_form_layers_without_a_circle() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = sources_in(&src);
    assert!(sources.contains_key("state"), "no state module in {src:?}");
    let found = problems(&sources);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The checker itself sees a circle, a grouped `use`, an upward use, the state rule and a sweep
/// below its layer.
#[test]
fn the_checker_finds_what_it_should() {
    let sources: BTreeMap<String, String> = [
        (
            "state",
            "use crate::{config::Config, tasks};\n// crate::admin in a comment\n",
        ),
        ("config", "pub struct Config;"),
        (
            "tasks",
            "use crate::state::App;\nfn f(s: S) { s.pending_task_notices(1); }\n#[cfg(test)]\nmod t { use crate::lib; }",
        ),
        ("lib", "mod state;"),
    ]
    .into_iter()
    .map(|(m, t)| (m.to_owned(), t.to_owned()))
    .collect();
    let g = graph(&sources);
    assert_eq!(
        g["state"],
        ["config", "tasks"].map(str::to_owned).into_iter().collect()
    );
    assert_eq!(
        g["tasks"],
        ["state"].map(str::to_owned).into_iter().collect()
    );
    let found = problems(&sources).join("\n");
    assert!(found.contains("import circle: "), "{found}");
    assert!(
        found.contains("`state` (state) uses `tasks` (features)"),
        "{found}"
    );
    assert!(
        found.contains("the state layer uses the feature module `tasks`"),
        "{found}"
    );
    assert!(
        found.contains("`tasks` sweeps owed notices below the notices' layer"),
        "{found}"
    );
}
