//! The gateway's log as an operator meets it (docs/settings.md `log`, `log_format`): JSON lines
//! when stderr is not a terminal, text when asked, no line per request unless asked, and no
//! dependency notices.

use serde_json::Value;

use crate::gwproc::{GwProc, gateway_cmd, http};

/// Starts a gateway on `dir` with `extra` flags and no `RUST_LOG`, makes a few requests, stops it
/// with SIGTERM and answers its log lines.
fn log_of(dir: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut cmd = gateway_cmd(dir, extra);
    cmd.env_remove("RUST_LOG");
    let gw = GwProc::start_cmd(cmd);
    for _ in 0..3 {
        assert_eq!(http(&gw.url, "GET", "/healthz", "", None).0, 200);
    }
    let (status, lines) = gw.stop_with_logs("TERM");
    assert!(status.success(), "{status:?}: {lines:?}");
    lines
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or_default()
}

#[test]
fn gateway_logs_json_lines_when_piped_and_requests_only_at_debug() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = log_of(tmp.path(), &[]);
    // Blank lines are skipped as a JSON-lines reader skips them (one appeared once under load,
    // source not found); every other line must be one JSON object.
    let parsed: Vec<Value> = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {l:?} in {lines:#?}"))
        })
        .collect();
    assert!(
        parsed
            .iter()
            .any(|l| message(l).starts_with("shutting down")),
        "{lines:#?}"
    );
    assert!(
        parsed.iter().all(|l| message(l) != "request"),
        "no request lines at the default level: {lines:#?}"
    );

    // `--log debug` brings each request back, with the id the response header carried.
    let lines = log_of(tmp.path(), &["--log", "debug"]);
    let requests: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| message(l) == "request" && l["fields"]["path"] == "/healthz")
        .collect();
    assert_eq!(requests.len(), 3, "{lines:#?}");
    assert!(
        requests[0]["fields"]["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
}

#[test]
fn gateway_logs_text_when_asked_and_a_bad_directive_is_refused_before_start() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = log_of(tmp.path(), &["--log-format", "text"]);
    assert!(
        lines.iter().any(|l| l.contains("shutting down")),
        "{lines:#?}"
    );
    for l in &lines {
        assert!(serde_json::from_str::<Value>(l).is_err(), "JSON: {l}");
        assert!(!l.contains('\u{1b}'), "colour codes off a terminal: {l:?}");
    }

    let out = crate::agentbus(
        &[
            "gateway",
            "--data",
            &tmp.path().display().to_string(),
            "--log",
            "loud",
        ],
        b"",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log \"loud\": not a log directive"), "{err}");
    assert!(err.contains("not a log directive"), "{err}");
}

/// On PostgreSQL every start runs the migrations, whose `IF NOT EXISTS` statements make the
/// server send NOTICE messages; the driver logs them with its source path. None reach the log.
#[test]
fn gateway_on_postgres_logs_no_dependency_notices_or_source_paths() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let cluster = agentbus_testkit::pg::Cluster::shared();
    let url = block_on(cluster.database());
    let tmp = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let lines = log_of(tmp.path(), &["--store", &url, "--log-format", "text"]);
        assert!(
            lines.iter().any(|l| l.contains("shutting down")),
            "{lines:#?}"
        );
        for l in &lines {
            assert!(!l.contains("NOTICE"), "{l}");
            assert!(!l.contains(".rs"), "a source path: {l}");
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
