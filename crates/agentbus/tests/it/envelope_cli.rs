//! `agentbus envelope`, `keys` and `explain` as a user runs them.

use serde_json::Value;

use crate::{agentbus, repo};

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn wp_2_2_1_validate_accepts_the_spec_example_with_the_sig_check_off() {
    let example = repo().join("tests/data/envelopes/spec/s2-2-minimal.json");
    let out = agentbus(
        &[
            "envelope",
            "validate",
            "--no-sig-check",
            example.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "valid\n");
    // With the check on, the placeholder sig is the one problem, and the exit code says "no".
    let out = agentbus(&["envelope", "validate", example.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stdout), @"AB-1010 /sig: sig must be ed25519:<key_id>:<base64url signature without padding>: the key id must be a key_ id
");
}

#[test]
fn sign_then_verify_round_trip_and_tamper_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("bot.key");
    let out = agentbus(
        &["--json", "keys", "generate", "--out", key.to_str().unwrap()],
        b"",
    );
    assert!(out.status.success());
    let public = json(&out)["public_key"].as_str().unwrap().to_owned();
    let example =
        std::fs::read(repo().join("tests/data/envelopes/spec/s2-2-minimal.json")).unwrap();
    let signed = agentbus(
        &[
            "envelope",
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--key-id",
            "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V",
        ],
        &example,
    );
    assert!(signed.status.success());
    let verify = agentbus(
        &["--json", "envelope", "verify", "--public-key", &public],
        &signed.stdout,
    );
    // One document whether it verifies or not (docs/cli.md, "`--json` documents").
    assert_eq!(
        json(&verify),
        serde_json::json!({"verified": true, "key_id": "key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V", "code": null, "message": null})
    );
    let tampered = String::from_utf8(signed.stdout)
        .unwrap()
        .replace("14:30", "15:30");
    let refused = json(&agentbus(
        &["--json", "envelope", "verify", "--public-key", &public],
        tampered.as_bytes(),
    ));
    assert_eq!(
        (&refused["verified"], &refused["key_id"], &refused["code"]),
        (
            &serde_json::json!(false),
            &serde_json::json!("key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V"),
            &serde_json::json!("AB-1011")
        )
    );
    assert!(refused["message"].is_string(), "{refused}");
    let verify = agentbus(
        &["envelope", "verify", "--public-key", &public],
        tampered.as_bytes(),
    );
    assert_eq!(verify.status.code(), Some(1));
    let err = String::from_utf8_lossy(&verify.stderr);
    assert!(err.starts_with("error: AB-1011: "), "{err}");
    assert!(err.contains("\n  fix: "), "{err}");
}

#[test]
fn bad_input_is_a_one_line_cause_and_fix_never_a_panic() {
    for (stdin, code) in [
        (&b"{\"a\":1,\"a\":2}"[..], "AB-3001"),
        (b"[1,2]", "AB-3001"),
        (b"\xff\xfe", "AB-3001"),
        (b"", "AB-3001"),
    ] {
        let out = agentbus(&["envelope", "validate"], stdin);
        assert_eq!(out.status.code(), Some(3), "{stdin:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 2, "{err}");
        assert!(err.contains(code) && err.contains("fix:"), "{err}");
    }
    let out = agentbus(
        &["--json", "envelope", "verify", "--public-key", "short"],
        b"{}",
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(json(&out)["error"]["code"], "AB-1014");
}

#[test]
fn wp_3_3_2_generated_key_files_are_0600_and_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.key");
    assert!(
        agentbus(&["keys", "generate", "--out", key.to_str().unwrap()], b"")
            .status
            .success()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let again = agentbus(&["keys", "generate", "--out", key.to_str().unwrap()], b"");
    assert_eq!(again.status.code(), Some(3));
}

#[test]
fn explain_prints_the_catalogue_entry() {
    let out = agentbus(&["explain", "AB-1011"], b"");
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8_lossy(&out.stdout));
    let all = agentbus(&["explain", "--all", "--markdown"], b"");
    let doc = std::fs::read_to_string(repo().join("docs/errors.md")).unwrap();
    assert_eq!(String::from_utf8_lossy(&all.stdout), doc);
    assert_eq!(
        agentbus(&["explain", "AB-0000"], b"").status.code(),
        Some(3)
    );
    // One document with or without --all: one code's fields (null for --all) and `entries`.
    let one = json(&agentbus(&["--json", "explain", "AB-1011"], b""));
    insta::assert_snapshot!("explain_json", serde_json::to_string_pretty(&one).unwrap());
    let every = json(&agentbus(&["--json", "explain", "--all"], b""));
    let fields = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(fields(&every), fields(&one));
    assert!(every["code"].is_null(), "{every}");
    assert_eq!(every["entries"][0]["code"], "AB-1001");
    assert_eq!(
        every["entries"].as_array().unwrap().len(),
        agentbus_protocol::Code::ALL.len()
    );
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentbus"))
        .args(["explain", "--all", "--markdown"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
