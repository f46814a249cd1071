//! Inbound content is data: a peer's words printed by a command stay inside the field they fill
//! and cannot add a line that passes for the command's own (a directory row, a card's key, a
//! task's transition, an error's fix). Cases under `tests/data/forged-lines.json`, run against a
//! real gateway on loopback.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::gateway_cli::{Gw, pair, redact};

/// `text` with every `{name}` of `vars` filled in.
fn fill(text: &str, vars: &HashMap<String, String>) -> String {
    vars.iter().fold(text.to_owned(), |t, (k, v)| {
        t.replace(&format!("{{{k}}}"), v)
    })
}

#[test]
fn a_peer_s_text_cannot_forge_a_line_of_the_cli_s_own_output() {
    let table: Value = serde_json::from_slice(
        &std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/forged-lines.json"))
            .unwrap(),
    )
    .unwrap();
    let mut forgeries = Vec::new();
    for case in table["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        // A gateway of its own for each case, so one case's card is not another's.
        let gw = Gw::start();
        let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
        let mut vars = HashMap::from([
            ("bot".to_owned(), bot.address()),
            ("reviewer".to_owned(), reviewer.address()),
        ]);
        let machine = |v: &Value| match v["on"].as_str().unwrap() {
            "bot" => &bot,
            "reviewer" => &reviewer,
            other => panic!("{name}: no machine {other}"),
        };
        let args_of = |v: &Value, vars: &HashMap<String, String>| -> Vec<String> {
            v["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| fill(a.as_str().unwrap(), vars))
                .collect()
        };
        for step in case["steps"].as_array().unwrap() {
            let args = args_of(step, &vars);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let doc = machine(step).ok(&refs);
            for (var, field) in step["keep"].as_object().into_iter().flatten() {
                let value = doc[field.as_str().unwrap()].as_str().unwrap().to_owned();
                vars.insert(var.clone(), value);
            }
        }
        let run = &case["run"];
        let args = args_of(run, &vars);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = machine(run).run(&refs);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(
            out.status.code(),
            case["exit"].as_i64().map(|c| c as i32),
            "{name}: {stdout}{stderr}"
        );
        // Every case is run before failing, so one run says which of them a peer can forge.
        let forged = case["forged"].as_str().unwrap();
        match stdout
            .lines()
            .chain(stderr.lines())
            .find(|line| line.starts_with(forged))
        {
            Some(line) => forgeries.push(format!("{name}: {line:?}\n{stdout}{stderr}")),
            None => {
                let text = format!("{stdout}{stderr}").replace(&gw.url, "{gw}");
                insta::assert_snapshot!(format!("forged_{name}"), redact(&text));
            }
        }
    }
    assert!(
        forgeries.is_empty(),
        "a peer's text made a line of its own:\n{}",
        forgeries.join("\n")
    );
}
