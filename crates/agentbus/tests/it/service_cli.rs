//! The gateway as a service, black-box: the real `agentbus gateway` process, driven
//! over HTTP on loopback. Timers are crossed with the test clock (`--unsafe-test-clock`), never
//! waited out; every other wait polls with a deadline.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Map, Value, json};

use agentbus_protocol::ids::IdKind;

use crate::gateway_cli::{Machine, eventually};
use crate::gwproc::{
    Agent, GwProc, envelope_at, gateway_cmd, gateway_command, header, http, register, request,
    signal_pid,
};

/// A signed message.v1 from `from` to `to`, stamped with the gateway's time.
fn envelope(
    gw: &GwProc,
    from: &Agent,
    to: &Agent,
    id: &str,
    text: &str,
    extra: Value,
) -> Map<String, Value> {
    envelope_at(from, &to.address, id, text, gw.now_ms(), extra)
}

fn new_id() -> String {
    agentbus_runtime::mint(IdKind::Message).to_string()
}

/// Publishes; answers the status, body and whether the replay header was set.
fn publish(gw: &GwProc, from: &Agent, env: &Map<String, Value>) -> (u16, Value, bool) {
    let text = Value::Object(env.clone()).to_string();
    let (s, b, head) = request(
        &gw.url,
        "POST",
        "/v1/messages",
        &from.token,
        Some(("application/json", text.as_bytes())),
    );
    (
        s,
        serde_json::from_slice(&b).unwrap_or(Value::Null),
        header(&head, "agentbus-idempotent-replay") == Some("true"),
    )
}

/// Publishes a plain message from `a` to `b`; answers the status.
fn send(gw: &GwProc, a: &Agent, b: &Agent, id: &str, text: &str) -> u16 {
    publish(gw, a, &envelope(gw, a, b, id, text, json!({}))).0
}

fn poll(gw: &GwProc, a: &Agent, after: u64) -> Vec<Value> {
    let (s, v) = http(
        &gw.url,
        "GET",
        &format!("/v1/inbox?after={after}&wait=0"),
        &a.token,
        None,
    );
    assert_eq!(s, 200, "{v}");
    v["deliveries"].as_array().unwrap().clone()
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

fn test_gateway(extra: &[&str]) -> (tempfile::TempDir, GwProc) {
    let tmp = tempfile::tempdir().unwrap();
    let mut args = vec!["--unsafe-test-clock"];
    args.extend_from_slice(extra);
    let gw = crate::gwproc::start(&tmp.path().join("gw"), &args);
    assert_eq!(gw.doc["unsafe_test_clock"], true);
    (tmp, gw)
}

/// WP-8-1: an id is refused with other content for the replay window (24 h), and usable again
/// after it.
#[test]
fn wp_8_1_black_box_an_id_is_blocked_for_the_replay_window_only() {
    let (_tmp, gw) = test_gateway(&[]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    let id = new_id();
    assert_eq!(send(&gw, &a, &b, &id, "one"), 202);
    gw.advance("23h");
    let (s, v, _) = publish(&gw, &a, &envelope(&gw, &a, &b, &id, "two", json!({})));
    assert_eq!((s, code(&v)), (409, "AB-3006"), "{v}");
    gw.advance("3601s");
    let (s, v, replay) = publish(&gw, &a, &envelope(&gw, &a, &b, &id, "three", json!({})));
    assert_eq!((s, replay), (202, false), "{v}");
}

/// WP-8-2: an idempotency key returns the original receipt for 7 days; after them the same key
/// makes a new message.
#[test]
fn wp_8_2_black_box_an_idempotency_key_answers_for_seven_days() {
    let (_tmp, gw) = test_gateway(&[]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    let key = json!({"idempotency_key": "deploy-482"});
    let (s, first, _) = publish(
        &gw,
        &a,
        &envelope(&gw, &a, &b, &new_id(), "go", key.clone()),
    );
    assert_eq!(s, 202);
    gw.advance("167h");
    let (s, again, replay) = publish(
        &gw,
        &a,
        &envelope(&gw, &a, &b, &new_id(), "go", key.clone()),
    );
    assert_eq!((s, replay), (200, true), "{again}");
    assert_eq!(again["receipt"], first["receipt"]);
    gw.advance("3601s");
    let (s, later, replay) = publish(&gw, &a, &envelope(&gw, &a, &b, &new_id(), "go", key));
    assert_eq!((s, replay), (202, false), "{later}");
    assert_ne!(later["receipt"], first["receipt"]);
}

/// WP-6.1-4, WP-5.10-1: a message without `expires_at` expires 24 h after receipt; it is never
/// delivered, and its sender gets `system.expired` (last_state persisted).
#[test]
fn wp_6_1_4_wp_5_10_1_black_box_an_undelivered_message_expires_after_24h() {
    let (_tmp, gw) = test_gateway(&[]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    let id = new_id();
    assert_eq!(send(&gw, &a, &b, &id, "soon stale"), 202);
    gw.advance("23h");
    let reaped = gw.advance("3601s");
    assert_eq!(reaped["reaped"]["expired"], 1, "{reaped}");
    assert!(
        poll(&gw, &b, 0).is_empty(),
        "an expired message was delivered"
    );
    let notices = poll(&gw, &a, 0);
    assert_eq!(notices.len(), 1);
    let n = &notices[0]["envelope"];
    assert_eq!(n["type"], "agentbus.system.expired.v1");
    assert_eq!(n["data"]["original_message_id"], id.as_str());
    assert_eq!(n["data"]["last_state"], "persisted");
}

fn upload(gw: &GwProc, a: &Agent, bytes: &[u8]) -> (u16, Value) {
    use sha2::Digest as _;
    let sha = hex::encode(sha2::Sha256::digest(bytes));
    let (s, blob) = http(
        &gw.url,
        "POST",
        "/v1/blobs",
        &a.token,
        Some(
            &json!({"name": "notes.txt", "media_type": "text/plain", "size": bytes.len(), "sha256": sha}),
        ),
    );
    if s != 201 {
        return (s, blob);
    }
    let path = format!("/v1/blobs/{}/content", blob["id"].as_str().unwrap());
    let (s, b, _) = request(
        &gw.url,
        "PUT",
        &path,
        &a.token,
        Some(("application/octet-stream", bytes)),
    );
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    (201, blob)
}

/// WP-9-13: a blob expires after its TTL, 30 days by default or `AGENTBUS_BLOB_TTL`.
#[test]
fn wp_9_13_black_box_a_blob_expires_after_the_ttl() {
    let (_tmp, gw) = test_gateway(&[]);
    let a = register(&gw, "alpha");
    let (_, blob) = upload(&gw, &a, b"release notes");
    let path = format!("/v1/blobs/{}/content", blob["id"].as_str().unwrap());
    gw.advance("29d");
    assert_eq!(request(&gw.url, "GET", &path, &a.token, None).0, 200);
    gw.advance("24h");
    let (s, b, _) = request(&gw.url, "GET", &path, &a.token, None);
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((s, code(&v)), (410, "AB-4009"), "{v}");
    // The wire protocol's own variable sets it.
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = gateway_cmd(&tmp.path().join("gw"), &["--unsafe-test-clock"]);
    cmd.env("AGENTBUS_BLOB_TTL", "2d");
    let gw = GwProc::start_cmd(cmd);
    let a = register(&gw, "alpha");
    let (_, blob) = upload(&gw, &a, b"short lived");
    let path = format!("/v1/blobs/{}/content", blob["id"].as_str().unwrap());
    gw.advance("47h");
    assert_eq!(request(&gw.url, "GET", &path, &a.token, None).0, 200);
    gw.advance("3601s");
    assert_eq!(request(&gw.url, "GET", &path, &a.token, None).0, 410);
}

/// WP-9-4: `AGENTBUS_BLOB_INLINE_MAX` caps inline uploads (AB-3040 above it).
#[test]
fn wp_9_4_agentbus_blob_inline_max_caps_inline_uploads() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = gateway_cmd(&tmp.path().join("gw"), &[]);
    cmd.env("AGENTBUS_BLOB_INLINE_MAX", "1KiB");
    let gw = GwProc::start_cmd(cmd);
    let a = register(&gw, "alpha");
    assert_eq!(upload(&gw, &a, &[7u8; 1024]).0, 201);
    let (s, v) = upload(&gw, &a, &[7u8; 1025]);
    assert_eq!((s, code(&v)), (413, "AB-3040"), "{v}");
}

/// WP-8-5: a delivery not acked within the visibility timeout is delivered again (same
/// sequence, the next attempt), and the first delivery's ack is then stale.
#[test]
fn wp_8_5_black_box_an_unacked_delivery_comes_back_after_the_visibility_timeout() {
    let (_tmp, gw) = test_gateway(&[]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    assert_eq!(send(&gw, &a, &b, &new_id(), "ack me"), 202);
    let first = poll(&gw, &b, 0);
    assert_eq!(first.len(), 1);
    assert!(
        poll(&gw, &b, 0).is_empty(),
        "leased, so not delivered twice at once"
    );
    gw.advance("59s");
    assert!(
        poll(&gw, &b, 0).is_empty(),
        "redelivered before the visibility timeout"
    );
    gw.advance("2s");
    let again = poll(&gw, &b, 0);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["sequence"], first[0]["sequence"]);
    assert_eq!(again[0]["attempt"], 2);
    let ack = |d: &Value| {
        http(
            &gw.url,
            "POST",
            &format!("/v1/inbox/{}/ack", d["sequence"]),
            &b.token,
            Some(&json!({"delivery": d["delivery"]})),
        )
    };
    assert_eq!(ack(&first[0]).0, 409);
    assert_eq!(ack(&again[0]).0, 200);
}

/// WP-5.9-1: after `max_attempts` deliveries without an ack the copy is dead-lettered and the
/// sender gets `system.undeliverable` with `dead_lettered: true`.
#[test]
fn wp_5_9_1_black_box_dead_lettered_after_the_maximum_attempts() {
    let (_tmp, gw) = test_gateway(&["--max-attempts", "2"]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    let id = new_id();
    assert_eq!(send(&gw, &a, &b, &id, "never acked"), 202);
    assert_eq!(poll(&gw, &b, 0).len(), 1);
    gw.advance("61s");
    assert_eq!(poll(&gw, &b, 0)[0]["attempt"], 2);
    let reaped = gw.advance("61s");
    assert_eq!(reaped["reaped"]["dead_lettered"], 1, "{reaped}");
    assert!(poll(&gw, &b, 0).is_empty());
    let notices = poll(&gw, &a, 0);
    let n = &notices[0]["envelope"];
    assert_eq!(n["type"], "agentbus.system.undeliverable.v1");
    assert_eq!(n["data"]["original_message_id"], id.as_str());
    assert_eq!(
        (
            n["data"]["dead_lettered"].as_bool(),
            n["data"]["attempts"].as_u64()
        ),
        (Some(true), Some(2))
    );
}

fn run_gateway(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = gateway_cmd(dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap().wait_with_output().unwrap()
}

/// The test clock cannot be switched on by accident: it is refused on a data directory made
/// without it, required on one made with it, and neither a variable nor a file line turns it on.
#[test]
fn the_test_clock_is_refused_unless_the_data_directory_was_made_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    let gw = crate::gwproc::start(&plain, &[]);
    let (s, _) = http(
        &gw.url,
        "POST",
        "/v1/test/clock",
        &gw.operator,
        Some(&json!({"advance": "1h"})),
    );
    assert_eq!(s, 404, "no test clock route without the flag");
    assert!(
        header(
            &request(&gw.url, "GET", "/healthz", "", None).2,
            "agentbus-test-clock"
        )
        .is_none()
    );
    assert!(gw.stop("TERM").success());
    let out = run_gateway(&plain, &["--unsafe-test-clock"], &[]);
    assert_eq!(out.status.code(), Some(4));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("was created without --unsafe-test-clock"),
        "{err}"
    );
    assert!(!plain.join("unsafe-test-clock.json").exists());
    // A variable or a file line cannot turn it on.
    let file = tmp.path().join("gw.toml");
    std::fs::write(&file, "unsafe_test_clock = true\n").unwrap();
    let out = run_gateway(
        &tmp.path().join("fresh"),
        &["--config", file.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stdout).contains("accepted only as a flag"));
    let gw = GwProc::start_cmd({
        let mut c = gateway_cmd(&tmp.path().join("fresh"), &[]);
        c.env("AGENTBUS_UNSAFE_TEST_CLOCK", "true");
        c
    });
    assert_eq!(gw.doc["unsafe_test_clock"], false);
    drop(gw);
    // A directory made with it needs it, and keeps its time across a restart.
    let made = tmp.path().join("made");
    let gw = crate::gwproc::start(&made, &["--unsafe-test-clock"]);
    gw.advance("10d");
    let ahead = gw.now_ms() - agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
    assert!(ahead >= 10 * 86_400_000 - 60_000, "{ahead}");
    assert!(gw.stop("TERM").success());
    let out = run_gateway(&made, &[], &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stdout).contains("was created with --unsafe-test-clock"));
    let gw = crate::gwproc::start(&made, &["--unsafe-test-clock"]);
    let ahead = gw.now_ms() - agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
    assert!(
        ahead >= 10 * 86_400_000 - 60_000,
        "the offset survives a restart: {ahead}"
    );
}

/// The listener is bound before anything else: with the port taken, nothing is created and
/// nothing is printed, and the error names the address with a fix (exit 5).
#[test]
fn a_taken_port_fails_before_anything_is_written() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let out = Command::new(env!("CARGO_BIN_EXE_agentbus"))
        .args(["gateway", "--listen", &addr, "--data"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(out.stdout.is_empty(), "printed before failing");
    assert!(!dir.exists(), "created the data directory before failing");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&addr) && err.contains("fix: Stop the other process"),
        "{err}"
    );
}

/// `--listen 127.0.0.1:0` prints the port it got; the first start prints the connect command
/// and registers nothing; SIGINT stops it with exit 0; `--json` prints one document, with the
/// admin token on the first start only.
#[test]
fn port_zero_prints_the_bound_port_and_json_prints_one_start_document() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let mut child = gateway_command(env!("CARGO_BIN_EXE_agentbus"), false, &dir, &[])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("listening on") {
        assert!(out.read_line(&mut text).unwrap() > 0, "{text}");
    }
    let url = text
        .lines()
        .find_map(|l| l.strip_prefix("listening on "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    assert!(!url.ends_with(":0"), "{url}");
    assert_eq!(http(&url, "GET", "/healthz", "", None).0, 200);
    let connect = text
        .lines()
        .find(|l| l.trim_start().starts_with("agentbus connect"))
        .unwrap();
    assert!(connect.contains(&format!("--gateway {url} ")), "{connect}");
    assert!(
        connect.trim_end().ends_with("--name release-bot"),
        "{connect}"
    );
    let admin = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("abu_"))
        .map(|t| format!("abu_{t}"))
        .unwrap();
    let (_, agents) = http(&url, "GET", "/v1/agents", &admin, None);
    assert_eq!(
        agents["agents"],
        json!([]),
        "the first start registers no agent"
    );
    signal_pid(child.id(), "INT");
    assert!(child.wait().unwrap().success());
    let gw = crate::gwproc::start(&dir, &[]);
    assert_eq!(gw.doc["first_start"], false);
    assert!(gw.doc.get("admin_token").is_none() && gw.doc.get("connect").is_none());
    assert!(!gw.doc["listening"].as_str().unwrap().ends_with(":0"));
}

/// `admin-token` issues a new admin token offline and revokes the old one; it is refused while
/// a gateway runs on the directory.
#[test]
fn admin_token_reissues_offline_and_revokes_the_old_token() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let gw = crate::gwproc::start(&dir, &[]);
    let old = gw.admin.clone();
    assert_eq!(http(&gw.url, "GET", "/v1/agents", &old, None).0, 200);
    let admin_token = || {
        Command::new(env!("CARGO_BIN_EXE_agentbus"))
            .args(["--json", "gateway", "admin-token", "--data"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let refused = admin_token();
    assert_eq!(refused.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("in use by another gateway"));
    assert!(gw.stop("TERM").success());
    let out = admin_token();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = crate::gateway_cli::last_json(&out.stdout);
    let new = doc["admin_token"].as_str().unwrap();
    assert_eq!(doc["revoked"], 1);
    let gw = crate::gwproc::start(&dir, &[]);
    assert_eq!(http(&gw.url, "GET", "/v1/agents", &old, None).0, 401);
    assert_eq!(http(&gw.url, "GET", "/v1/agents", new, None).0, 200);
}

/// SIGTERM: publishes in flight when it arrives finish with their 202 and are kept, and none
/// that got a 202 is lost; the gateway exits 0.
#[test]
fn sigterm_keeps_every_publish_that_got_a_202() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let gw = crate::gwproc::start(&dir, &[]);
    let (a, b) = (register(&gw, "alpha"), register(&gw, "bravo"));
    // One publish is in flight on purpose: its body is half sent when the signal arrives.
    let slow = Value::Object(envelope(&gw, &a, &b, &new_id(), "in flight", json!({}))).to_string();
    let addr = gw.url.trim_start_matches("http://").to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        a.token,
        slow.len()
    )
    .unwrap();
    let half = slow.len() / 2;
    s.write_all(&slow.as_bytes()[..half]).unwrap();
    // Others keep publishing throughout, each publish on its own connection.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let publishers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, count) = (stop.clone(), count.clone());
            let (a, to, addr) = (a.clone(), b.address.clone(), addr.clone());
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let id = new_id();
                    let now = agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
                    let body = Value::Object(envelope_at(&a, &to, &id, "load", now, json!({}))).to_string();
                    let Ok(mut c) = std::net::TcpStream::connect(&addr) else {
                        break;
                    };
                    let sent = write!(
                        c,
                        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        a.token,
                        body.len()
                    );
                    let mut answer = String::new();
                    if sent.is_err() || c.read_to_string(&mut answer).is_err() || answer.is_empty() {
                        break;
                    }
                    if answer.starts_with("HTTP/1.1 202") {
                        accepted.push(id);
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
                accepted
            })
        })
        .collect();
    eventually(20, "publishes", || {
        (count.load(std::sync::atomic::Ordering::SeqCst) >= 30).then_some(())
    });
    gw.signal("TERM");
    gw.wait_for_log("shutting down");
    s.write_all(&slow.as_bytes()[half..]).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "the in-flight publish: {answer}"
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut accepted: Vec<String> = publishers
        .into_iter()
        .flat_map(|p| p.join().unwrap())
        .collect();
    accepted.push(
        serde_json::from_str::<Value>(&slow).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    );
    let status = gw.wait_exit();
    assert!(status.success(), "{status:?}");
    // Every accepted publish is in the inbox after a restart.
    let gw = crate::gwproc::start(&dir, &[]);
    let mut stored = std::collections::HashSet::new();
    let mut after = 0;
    loop {
        let (s, v) = http(
            &gw.url,
            "GET",
            &format!("/v1/inbox?after={after}&wait=0&limit=1000"),
            &b.token,
            None,
        );
        assert_eq!(s, 200, "{v}");
        let got = v["deliveries"].as_array().unwrap();
        if got.is_empty() {
            break;
        }
        for d in got {
            stored.insert(d["envelope"]["id"].as_str().unwrap().to_owned());
        }
        after = v["next_after"].as_u64().unwrap();
    }
    let lost: Vec<&String> = accepted.iter().filter(|id| !stored.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} accepted publishes lost: {lost:?}",
        lost.len(),
        accepted.len()
    );
    assert!(accepted.len() > 10, "{}", accepted.len());
}

/// Bad settings stop the start: one line per bad value, each with its fix, exit 4, and nothing
/// created or printed on stdout.
#[test]
fn bad_settings_stop_the_start_with_one_line_each() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let file = tmp.path().join("gw.toml");
    std::fs::write(&file, "max_attempts = 0\nvisiblity_timeout = \"1m\"\n").unwrap();
    let out = run_gateway(
        &dir,
        &[
            "--config",
            file.to_str().unwrap(),
            "--header-timeout",
            "soon",
        ],
        &[("AGENTBUS_BLOB_INLINE_MAX", "8MB")],
    );
    assert_eq!(out.status.code(), Some(4));
    let doc: Value = crate::gateway_cli::last_json(&out.stdout);
    let message = doc["error"]["message"].as_str().unwrap();
    let lines: Vec<&str> = message.lines().skip(1).collect();
    assert_eq!(lines.len(), 4, "{message}");
    for want in [
        "visiblity_timeout in",
        "max_attempts = 0 in",
        "AGENTBUS_BLOB_INLINE_MAX=\"8MB\"",
        "--header-timeout \"soon\"",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.trim_start().starts_with(want) && l.contains("; fix: ")),
            "{want}: {message}"
        );
    }
    assert!(!dir.exists());
}

/// `--print-config` shows every setting, its value and where it came from (flag, variable,
/// file, default).
#[test]
fn print_config_shows_each_value_and_where_it_came_from() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("gateway.toml");
    std::fs::write(&file, "max_attempts = 3\nvisibility_timeout = \"30s\"\n").unwrap();
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentbus"));
        if json {
            c.arg("--json");
        }
        c.args(["gateway", "--print-config", "--config"])
            .arg(&file)
            .args(["--inbox-max-depth", "500", "--data", "/srv/agentbus"])
            .env("AGENTBUS_VISIBILITY_TIMEOUT", "2m")
            .env("HOME", "/home/ada")
            .env_remove("XDG_DATA_HOME")
            .env_remove("AGENTBUS_LISTEN")
            .output()
            .unwrap()
    };
    let out = run(false);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).replace(&file.display().to_string(), "[file]");
    insta::assert_snapshot!("print_config", text);
    let doc: Value = serde_json::from_slice(&run(true).stdout).unwrap();
    let from = |name: &str| {
        doc["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| {
                (
                    s["value"].as_str().unwrap().to_owned(),
                    s["from"].as_str().unwrap().to_owned(),
                )
            })
            .unwrap()
    };
    assert_eq!(
        from("visibility_timeout"),
        ("2m".into(), "env AGENTBUS_VISIBILITY_TIMEOUT".into())
    );
    assert_eq!(
        from("inbox_max_depth"),
        ("500".into(), "flag --inbox-max-depth".into())
    );
    assert_eq!(
        from("max_attempts"),
        ("3".into(), format!("file {}", file.display()))
    );
    assert_eq!(from("blob_ttl"), ("30d".into(), "default".into()));
}

/// Splits a README command line into words: double quotes group, ` #` starts a comment.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted && cur.is_empty() => break,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The README's gateway section, run as written: the first start prints the `agentbus connect`
/// line the README shows next, registering nothing itself; that line, run as printed, connects
/// `release-bot`; and the README's next commands send it a message and receive it.
#[test]
fn the_first_start_leads_into_the_readme_next_step() {
    let readme = std::fs::read_to_string(crate::repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## The gateway\n")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let commands: Vec<Vec<String>> = section
        .lines()
        .filter(|l| l.starts_with("agentbus "))
        .map(words)
        .collect();
    let shown = commands
        .iter()
        .find(|w| w[1] == "connect")
        .expect("the README's gateway section shows the connect command");
    let tmp = tempfile::tempdir().unwrap();
    let gw = crate::gwproc::start(&tmp.path().join("gw"), &[]);
    let printed = words(gw.doc["connect"].as_str().unwrap());
    assert_eq!(printed.len(), shown.len(), "{printed:?} / {shown:?}");
    for (i, (p, r)) in printed.iter().zip(shown).enumerate() {
        if i == 0 || (shown[i - 1] != "--gateway" && shown[i - 1] != "--token") {
            assert_eq!(p, r, "{printed:?} / {shown:?}");
        }
    }
    let m = Machine::new("release-bot");
    let mut ran = Vec::new();
    for cmd in &commands {
        let args: Vec<&str> = if cmd[1] == "connect" {
            printed[1..].iter().map(String::as_str).collect()
        } else if cmd[1] == "gateway" {
            continue;
        } else {
            cmd[1..].iter().map(String::as_str).collect()
        };
        let out = m.run(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran.push((
            cmd[1].clone(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ));
    }
    let names: Vec<&str> = ran.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, ["connect", "send", "sidecar", "inbox"]);
    assert!(ran[3].1.contains("hello from the README"), "{}", ran[3].1);
}

/// Where a refused start leaves things: a second gateway on the same data directory is refused
/// while the first runs.
#[test]
fn a_second_gateway_on_the_same_data_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let _gw = crate::gwproc::start(&dir, &[]);
    let out = run_gateway(&dir, &[], &[]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stdout).contains("in use by another gateway"));
}
