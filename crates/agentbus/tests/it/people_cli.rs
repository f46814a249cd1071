//! `agentbus users …`, `agentbus tokens …` and `agentbus gateway admin-token`: the real binary
//! against a real gateway process, output compared line by line with ids, secrets and times
//! scrubbed.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::gwproc::{gateway_cmd, gateway_command, http, signal_pid};

/// `text` with `usr_`/`tok_` ids, `abu_` secrets and RFC 3339 times replaced by placeholders.
fn scrub(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (prefix, len, shown) in [
            ("usr_", 26, "usr_…"),
            ("tok_", 26, "tok_…"),
            ("abu_", 43, "abu_…"),
        ] {
            if rest.starts_with(prefix) && rest.len() >= prefix.len() + len {
                out.push_str(shown);
                rest = &rest[prefix.len() + len..];
                continue 'outer;
            }
        }
        let b = rest.as_bytes();
        if b.len() >= 24 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T' {
            let end = rest.find('Z').unwrap() + 1;
            out.push_str("<time>");
            rest = &rest[end..];
            continue;
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Runs the binary against `url` with `token`; no `AGENTBUS_*` variable of the environment.
fn run(url: &str, token: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTBUS_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args)
        .env("AGENTBUS_GATEWAY", url)
        .env("AGENTBUS_TOKEN", token)
        .output()
        .unwrap()
}

fn lines(out: &Output) -> Vec<String> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    scrub(&String::from_utf8_lossy(&out.stdout))
        .lines()
        .map(str::to_owned)
        .collect()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An admin adds a user, issues and revokes its tokens and removes it, by command; each
/// printout is exact, a secret is printed once and never listed, and a member is refused with a
/// cause and a fix.
#[test]
fn users_and_tokens_are_administered_by_command() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = crate::gwproc::start(&tmp.path().join("gw"), &[]);
    let (url, admin) = (gw.url.as_str(), gw.admin.as_str());

    let added = run(url, admin, &["users", "add", "--name", "Ada"]);
    let text = String::from_utf8_lossy(&added.stdout).into_owned();
    assert_eq!(
        lines(&added),
        [
            "created user usr_… \"Ada\" (member, workspace default)",
            "token, shown once (stored only hashed; `agentbus tokens issue --user usr_…` issues another):",
            "  abu_…",
        ]
    );
    let ada_token = text.lines().nth(2).unwrap().trim().to_owned();
    assert_eq!(http(url, "GET", "/v1/agents", &ada_token, None).0, 200);
    let listed = json(&run(url, admin, &["--json", "users", "list"]));
    let ada = listed["users"][1]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["users"][1]["name"], "Ada");
    assert_eq!(
        lines(&run(url, admin, &["users", "list"])),
        [
            "usr_… tenant_admin default/default          admin",
            "usr_… member       default/default          Ada",
        ]
    );
    // The operator sees every user, itself (in no tenant) included.
    let all = lines(&run(url, &gw.operator, &["users", "list"]));
    assert!(
        all.contains(&"usr_… operator     -                        operator".to_owned()),
        "{all:?}"
    );

    let issued = run(
        url,
        admin,
        &["tokens", "issue", "--user", &ada, "--label", "laptop"],
    );
    let secret = String::from_utf8_lossy(&issued.stdout)
        .lines()
        .nth(2)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        lines(&issued),
        [
            "issued token tok_… for usr_… \"Ada\" (label \"laptop\")",
            "token, shown once (stored only hashed):",
            "  abu_…",
        ]
    );
    assert_eq!(http(url, "GET", "/v1/agents", &secret, None).0, 200);
    let tokens = json(&run(url, admin, &["--json", "tokens", "list"]));
    assert!(!tokens.to_string().contains(&secret));
    let laptop = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["label"] == "laptop")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        lines(&run(url, admin, &["tokens", "revoke", &laptop])),
        ["revoked token tok_… of usr_… \"Ada\" (label \"laptop\")"]
    );
    assert_eq!(http(url, "GET", "/v1/agents", &secret, None).0, 401);
    assert_eq!(
        lines(&run(url, admin, &["tokens", "list"])),
        [
            "tok_… live                             <time> usr_… \"admin\"",
            "tok_… live                             <time> usr_… \"Ada\"",
            "tok_… revoked <time> <time> usr_… \"Ada\" (label \"laptop\")",
        ]
    );

    // A member may not administer people: the refusal names its code, cause and fix.
    let refused = run(url, &ada_token, &["users", "list"]);
    assert_eq!(refused.status.code(), Some(6));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.starts_with(
            "error: AB-1002: an admin's or the gateway operator's integration token is required\n"
        ),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "one cause, one fix: {err}");
    assert!(err.lines().nth(1).unwrap().starts_with("  fix: "), "{err}");

    assert_eq!(
        lines(&run(url, admin, &["users", "remove", &ada])),
        ["removed user usr_… \"Ada\" and its tokens"]
    );
    assert_eq!(http(url, "GET", "/v1/agents", &ada_token, None).0, 401);
    let gone = run(url, admin, &["users", "remove", &ada]);
    assert_eq!(gone.status.code(), Some(6), "removing twice is refused");
}

/// Starts the gateway as a person does (no `--json`) on `dir` with `extra` flags, reads what the
/// first start prints, stops it, and answers the `admin-token` command that text names.
fn printed_admin_token_command(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut child = gateway_command(env!("CARGO_BIN_EXE_agentbus"), false, dir, extra)
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut command = None;
    for line in out.lines().map_while(Result::ok) {
        if let Some(at) = line.find("`agentbus gateway admin-token") {
            let rest = &line[at + 1..];
            command = Some(rest[..rest.find('`').unwrap()].to_owned());
        }
        if line.starts_with("listening on") {
            break;
        }
    }
    signal_pid(child.id(), "INT");
    assert!(child.wait().unwrap().success());
    let command = command.expect("the first start names admin-token");
    command
        .split_whitespace()
        .map(|w| w.trim_matches('\'').to_owned())
        .collect()
}

/// Runs the printed `admin-token` command literally (no `AGENTBUS_*` variable set), then checks
/// that a gateway on `dir` accepts the new token and refuses the first one.
fn check_admin_token(dir: &Path, printed: &[String], extra: &[&str]) {
    assert_eq!(&printed[..3], ["agentbus", "gateway", "admin-token"]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentbus"));
    for (k, _) in std::env::vars() {
        if k.starts_with("AGENTBUS_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.arg("--json").args(&printed[1..]).output().unwrap();
    let doc = json(&out);
    assert_eq!(doc["revoked"], 1, "{doc}");
    let new = doc["admin_token"].as_str().unwrap();
    let gw = crate::gwproc::GwProc::start_cmd(gateway_cmd(dir, extra));
    assert_eq!(http(&gw.url, "GET", "/v1/agents", new, None).0, 200);
}

/// On SQLite, the command the first start prints issues a working admin token.
#[test]
fn admin_token_works_as_the_first_start_printed_it_on_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let printed = printed_admin_token_command(&dir, &[]);
    check_admin_token(&dir, &printed, &[]);
}

/// On PostgreSQL, the same printed command finds the database the gateway used (it was named by
/// `--store` only), where it used to answer "holds no gateway data".
#[test]
fn admin_token_works_as_the_first_start_printed_it_on_postgres() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let cluster = agentbus_testkit::pg::Cluster::shared();
    let url = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(cluster.database());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let printed = printed_admin_token_command(&dir, &["--store", &url]);
    check_admin_token(&dir, &printed, &["--store", &url]);
}
