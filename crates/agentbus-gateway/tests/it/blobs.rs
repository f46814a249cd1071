//! Claim-check attachments (§9) with the inline store.

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::support::*;

fn attachment(b: &Value) -> Value {
    json!({"ref": b["ref"], "name": b["name"], "media_type": "text/plain", "size": b["size"], "sha256": b["sha256"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_9_upload_reference_download_and_access() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let c = h.agent("charlie").await;
    let secret = b"diff --git a/worker.go b/worker.go UNIQUE-PLAINTEXT-7f3a91";
    let blob = h.upload(&a, "change.diff", secret).await;
    assert_eq!(blob["status"], "complete");
    assert!(
        blob["ref"]
            .as_str()
            .unwrap()
            .starts_with("blob://default/blb_")
    );
    let mut m = message(&h, &a, &b.address, "see attached");
    m["data"]["attachments"] = json!([attachment(&blob)]);
    assert_eq!(h.publish(&a, &sign(&a, m)).await.0, 202);
    // The recipient may download; to a third agent the blob is one that does not exist (§9 names
    // AB-4022 here; docs/protocol.md says why a refusal never tells that a blob exists).
    let id = blob["id"].as_str().unwrap();
    let resp = h
        .http
        .get(format!("{}/v1/blobs/{id}/content", h.url))
        .bearer_auth(&b.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.bytes().await.unwrap().as_ref(), secret);
    let (s, v) = h.get(&format!("/v1/blobs/{id}"), &c.token).await;
    let (s2, v2) = h
        .get("/v1/blobs/blb_01J9ZK8A0000000000000000D9", &c.token)
        .await;
    assert_eq!((s, &v["error"]["code"]), (s2, &v2["error"]["code"]));
    assert_eq!(s, 404);
    // Another tenant gets exactly what an unknown id gets.
    let other = h.agent_in(&h.second_tenant().await, "outsider").await;
    let (s1, v1) = h.get(&format!("/v1/blobs/{id}"), &other.token).await;
    let (s2, v2) = h
        .get("/v1/blobs/blb_01J9ZK8A0000000000000000D9", &other.token)
        .await;
    assert_eq!((s1, &v1["error"]["code"]), (s2, &v2["error"]["code"]));
    // WP-9-5, WP-13.4-2: neither the blob nor the message data is stored in plain text.
    let needle = b"UNIQUE-PLAINTEXT-7f3a91";
    for entry in walk(&h.dir) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{} holds plain text",
            entry.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_9_rejections_at_upload_and_publish() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    // A wrong hash or length: AB-3020; over the inline cap: AB-3040.
    let (_, reg) = h.post("/v1/blobs", &a.token, json!({"name": "x.txt", "size": 3, "sha256": hex::encode(sha2::Sha256::digest(b"abc"))})).await;
    let put = |body: &'static [u8]| {
        let url = format!("{}/v1/blobs/{}/content", h.url, reg["id"].as_str().unwrap());
        let req = h.http.put(url).bearer_auth(&a.token).body(body);
        async move {
            let r = req.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(code(&put(b"abd").await.1), "AB-3020");
    assert_eq!(code(&put(b"abcd").await.1), "AB-3020");
    let (_, v) = h
        .post(
            "/v1/blobs",
            &a.token,
            json!({"name": "big", "size": 8 * 1024 * 1024 + 1, "sha256": "0".repeat(64)}),
        )
        .await;
    assert_eq!(code(&v), "AB-3040");
    // Publishing: unknown AB-4008, pending AB-4021, mismatch AB-3021.
    let pending = json!({"ref": reg["ref"], "name": "x.txt", "size": 3, "sha256": reg["sha256"]});
    for (att, want) in [
        (
            json!({"ref": "blob://default/blb_01J9ZK8A0000000000000000D9", "name": "a", "size": 1, "sha256": "0".repeat(64)}),
            "AB-4008",
        ),
        (pending, "AB-4021"),
    ] {
        let mut m = message(&h, &a, &b.address, "x");
        m["data"]["attachments"] = json!([att]);
        assert_eq!(code(&h.publish(&a, &sign(&a, m)).await.1), want);
    }
    let ok = h.upload(&a, "y.txt", b"hello").await;
    let mut att = attachment(&ok);
    att["size"] = json!(6);
    let mut m = message(&h, &a, &b.address, "x");
    m["data"]["attachments"] = json!([att]);
    assert_eq!(code(&h.publish(&a, &sign(&a, m)).await.1), "AB-3021");
    // Not the sender's to forward: bravo never received charlie's blob, which answers like a blob
    // that does not exist.
    let c = h.agent("charlie").await;
    let theirs = h.upload(&c, "z.txt", b"private").await;
    let mut m = message(&h, &b, &a.address, "x");
    m["data"]["attachments"] = json!([attachment(&theirs)]);
    assert_eq!(code(&h.publish(&b, &sign(&b, m)).await.1), "AB-4008");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_attachment_names_write_nothing_outside_the_blob_store() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let long = "a".repeat(256);
    let names: Vec<String> = [
        "../escape",
        "../../etc/passwd",
        "..",
        ".",
        "/etc/passwd",
        "/tmp/x",
        "a/b",
        "a\\b",
        "..\\..\\win",
        "%2e%2e%2fescape",
        "%2e%2e/x",
        "..%2fx",
        "\u{FF0E}\u{FF0E}\u{FF0F}x",
        "\u{FF0E}\u{FF0E}",
        "\u{2024}\u{2024}/x",
        "x\u{0000}y",
        "nul\u{0000}",
        "line\nbreak",
        "cr\rreturn",
        "crlf\r\n",
        "tab\tname",
        "\u{202E}gpj.exe",
        "a\u{2066}b",
        "\u{200B}",
        "\u{FEFF}bom",
        &long,
        "C:\\Windows\\x",
        "\\\\server\\share",
        "~/x",
        "~",
        "$HOME",
        "`id`",
        "$(id)",
        "name with spaces",
        "-rf",
        "--",
        ":colon:",
        "con",
        "aux.txt",
        "very.long.name.tar.gz",
        "\u{00E9}t\u{00E9}.txt",
        "\u{1F4C4}.txt",
        "..hidden",
        ".hidden",
        "a..b",
        "trailing.",
        "dot/../dot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert!(names.len() >= 40);
    let before: std::collections::HashSet<_> = walk(&h.dir).into_iter().collect();
    let parent_before = std::fs::read_dir(h.dir.parent().unwrap()).unwrap().count();
    let mut accepted = Vec::new();
    let mut accepted_names = Vec::new();
    for name in &names {
        let body = format!("content of {name:?}");
        let sha = hex::encode(sha2::Sha256::digest(body.as_bytes()));
        let (s, v) = h
            .post(
                "/v1/blobs",
                &a.token,
                json!({"name": name, "size": body.len(), "sha256": sha}),
            )
            .await;
        match s {
            201 => {
                let url = format!("{}/v1/blobs/{}/content", h.url, v["id"].as_str().unwrap());
                let r = h
                    .http
                    .put(url)
                    .bearer_auth(&a.token)
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status().as_u16(), 200, "{name:?}");
                accepted.push(v["id"].as_str().unwrap().to_owned());
                accepted_names.push(name.clone());
            }
            400 => assert_eq!(v["error"]["code"], "AB-3022", "{name:?}: {v}"),
            other => panic!("{name:?}: {other} {v}"),
        }
    }
    // Every new file is <data>/blobs/<id> for an accepted blob, or the database's own files.
    let blobs = h.dir.join("blobs");
    for f in walk(&h.dir) {
        if before.contains(&f)
            || f.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("agentbus.db")
        {
            continue;
        }
        assert_eq!(f.parent().unwrap(), blobs, "{}", f.display());
        let id = f.file_name().unwrap().to_str().unwrap();
        assert!(accepted.iter().any(|a| a == id), "{id}");
    }
    assert_eq!(
        std::fs::read_dir(h.dir.parent().unwrap()).unwrap().count(),
        parent_before,
        "nothing beside the data dir"
    );
    // Names with separators, NUL, line breaks, dot-dot or over 255 characters are refused outright.
    for bad in [
        "../escape",
        "/etc/passwd",
        "x\u{0000}y",
        "line\nbreak",
        "a/b",
        "a\\b",
        "..",
        ".",
        long.as_str(),
    ] {
        assert!(
            !accepted_names.iter().any(|n| n == bad),
            "{bad:?} was accepted"
        );
    }
}

/// WP-9-6: an attachment carries the size and sha256 of the blob it references.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_9_6_an_attachment_must_match_its_blobs_size_and_hash() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let blob = h.upload(&a, "change.diff", b"the diff").await;
    for (field, value) in [("size", json!(9)), ("sha256", json!("0".repeat(64)))] {
        let mut att = attachment(&blob);
        att[field] = value;
        let mut m = message(&h, &a, &b.address, "x");
        m["data"]["attachments"] = json!([att]);
        let (s, v, _) = h.publish(&a, &sign(&a, m)).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some("AB-3021")),
            "{field}"
        );
    }
    let mut m = message(&h, &a, &b.address, "x");
    m["data"]["attachments"] = json!([attachment(&blob)]);
    assert_eq!(h.publish(&a, &sign(&a, m)).await.0, 202);
}

/// WP-9-9 and issue 11 item 6: a `ref` naming another tenant is AB-4022 whether or not the blob
/// exists; a ref under one's own tenant slug to another tenant's blob answers like an unknown blob.
/// No answer tells that a blob exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_9_9_another_tenants_blob_is_refused_and_never_revealed() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let other = h.agent_in(&h.second_tenant().await, "outsider").await;
    let theirs = h.upload(&other, "secret.txt", b"theirs").await;
    let id = theirs["id"].as_str().unwrap();
    let made_up = "blb_01J9ZK8A0000000000000000D9";
    let attempt = |r: String| {
        let mut att = attachment(&theirs);
        att["ref"] = json!(r);
        let mut m = message(&h, &a, &b.address, "x");
        m["data"]["attachments"] = json!([att]);
        let env = sign(&a, m);
        let h = &h;
        let a = a.clone();
        async move {
            let (s, v, _) = h.publish(&a, &env).await;
            let msg = v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .replace(&r, "REF");
            (
                s,
                v["error"]["code"].as_str().unwrap_or_default().to_owned(),
                msg,
            )
        }
    };
    let foreign = attempt(format!("blob://other/{id}")).await;
    assert_eq!((foreign.0, foreign.1.as_str()), (403, "AB-4022"));
    assert_eq!(foreign, attempt(format!("blob://other/{made_up}")).await);
    let own_slug = attempt(format!("blob://default/{id}")).await;
    assert_eq!((own_slug.0, own_slug.1.as_str()), (422, "AB-4008"));
    assert_eq!(own_slug, attempt(format!("blob://default/{made_up}")).await);
    // Tenant B's agent referencing A's blob under A's slug, as WP-9-9 has it.
    let mine = h.upload(&a, "mine.txt", b"mine").await;
    let mut att = attachment(&mine);
    att["ref"] = mine["ref"].clone();
    let mut m = message(&h, &other, &other.address, "x");
    m["data"]["attachments"] = json!([att]);
    let (s, v, _) = h.publish(&other, &sign(&other, m)).await;
    assert_eq!((s, v["error"]["code"].as_str()), (403, Some("AB-4022")));
}
