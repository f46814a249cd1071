//! Claim-check attachments (§9). Every test body here runs against each blob target: the inline
//! store (sealed files under the data directory) and an S3 bucket on the moto test server
//! (pre-signed PUT, `complete`, pre-signed or gateway downloads).

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::support::*;

/// One test per target for each body: `<body>::inline`, `<body>::s3` (and `<body>::s3_gateway`
/// for the bodies that download through the gateway).
macro_rules! on_each_target {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use crate::support::Target;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn inline() {
                super::$name(Target::Inline).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn s3() {
                super::$name(Target::S3).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn s3_gateway() {
                super::$name(Target::S3ViaGateway).await
            }
        }
    )*};
}

on_each_target!(
    wp_9_upload_reference_download_and_access,
    wp_9_rejections_at_upload_and_publish,
    hostile_attachment_names_write_nothing_outside_the_blob_store,
    wp_9_6_an_attachment_must_match_its_blobs_size_and_hash,
    wp_9_9_another_tenants_blob_is_refused_and_never_revealed,
    wp_9_3_the_upload_window_closes_and_its_content_is_deleted,
    wp_9_13_expiry_deletes_the_content_and_frees_the_quota,
    downloads_resume_from_any_byte,
    wp_9_14_wp_9_15_the_sidecar_follows_either_target,
);

/// Every stored byte a test can see: the data directory's files and, on S3, the bucket's objects.
async fn stored(h: &Harness) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = walk(&h.dir)
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    if crate::support::on_postgres() {
        // The database's rows as text (message data included), and each blob content row as
        // the bytes stored: `dump` shows bytea as hex, which would hide plain text.
        let dump = h.app.store().dump().await.unwrap();
        out.push(("postgres".into(), dump.join("\n").into_bytes()));
        for id in database_blobs(h).await {
            let bytes = agentbus_store::Store::blob_content(h.app.store(), &id)
                .await
                .unwrap()
                .unwrap();
            out.push((format!("postgres:blob_contents/{id}"), bytes));
        }
    }
    if h.on_s3() {
        let (url, bucket) = (&h.app.config.s3_endpoint, &h.app.config.s3_bucket);
        for key in crate::s3::keys(url, bucket).await {
            let bytes = crate::s3::object(url, bucket, &key)
                .await
                .unwrap_or_else(|| panic!("{key} listed but not readable"));
            out.push((format!("s3://{bucket}/{key}"), bytes));
        }
    }
    out
}

/// The blobs whose content rests in the database (PostgreSQL without S3).
async fn database_blobs(h: &Harness) -> Vec<String> {
    h.app
        .store()
        .dump()
        .await
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("blob_contents: ("))
        .filter_map(|l| l.split(',').next().map(str::to_owned))
        .collect()
}

/// How many blobs' content the inline target holds: files under `<data>/blobs`, or rows of the
/// database on PostgreSQL.
async fn inline_contents(h: &Harness) -> usize {
    if crate::support::on_postgres() {
        database_blobs(h).await.len()
    } else {
        walk(&h.dir.join("blobs")).len()
    }
}

/// The object keys of the test's bucket (empty for the inline target).
async fn objects(h: &Harness) -> Vec<String> {
    if !h.on_s3() {
        return Vec::new();
    }
    crate::s3::keys(&h.app.config.s3_endpoint, &h.app.config.s3_bucket).await
}

fn attachment(b: &Value) -> Value {
    json!({"ref": b["ref"], "name": b["name"], "media_type": "text/plain", "size": b["size"], "sha256": b["sha256"]})
}

async fn wp_9_upload_reference_download_and_access(target: Target) {
    let h = Harness::start_target(target).await;
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
    let (_, meta) = h.get(&format!("/v1/blobs/{id}"), &b.token).await;
    let presigned = !meta["download"]["url"].as_str().unwrap().starts_with('/');
    assert_eq!(presigned, target == Target::S3, "{meta}");
    assert_eq!(h.download(&b, id).await, (200, secret.to_vec()));
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
    // The third agent is not handed a pre-signed URL either: its GET answered 404 above.
    assert!(v.get("download").is_none());
    // WP-9-5, WP-13.4-2: neither the blob nor the message data is stored in plain text, on disk
    // or in the bucket (read straight from the S3 server, around the gateway).
    let needle = b"UNIQUE-PLAINTEXT-7f3a91";
    let all = stored(&h).await;
    assert_eq!(
        all.iter().any(|(n, _)| n.starts_with("s3://")),
        h.on_s3(),
        "the content rests in the configured target"
    );
    for (name, bytes) in all {
        assert!(
            !bytes.windows(needle.len()).any(|w| w == needle),
            "{name} holds plain text"
        );
    }
}

async fn wp_9_rejections_at_upload_and_publish(target: Target) {
    let h = Harness::start_target(target).await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    // Wrong bytes (a wrong hash or length) are AB-3020 at the inline PUT, or at `complete` after
    // a pre-signed PUT, which then deletes them.
    let (_, reg) = h.post("/v1/blobs", &a.token, json!({"name": "x.txt", "size": 3, "sha256": hex::encode(sha2::Sha256::digest(b"abc"))})).await;
    // A declared media type may carry parameters; it is kept as declared (the corpus has the
    // ones refused).
    let typed = "text/plain; charset=utf-8";
    let (s, v) = h.post("/v1/blobs", &a.token, json!({"name": "y.txt", "media_type": typed, "size": 3, "sha256": hex::encode(sha2::Sha256::digest(b"abc"))})).await;
    assert_eq!((s, v["media_type"].as_str()), (201, Some(typed)), "{v}");
    if h.on_s3() {
        // Completing before any upload: AB-3056.
        assert_eq!(code(&h.complete(&a, &reg).await.1), "AB-3056");
    }
    assert_eq!(code(&h.put_content(&a, &reg, b"abd").await.1), "AB-3020");
    assert_eq!(code(&h.put_content(&a, &reg, b"abcd").await.1), "AB-3020");
    assert!(objects(&h).await.is_empty(), "refused content is deleted");
    if h.on_s3() {
        // The URL binds the sealed length (SigV4 signed header), signed on the gateway's clock,
        // and the answer names the header to send (docs/api.md).
        let url = reg["upload"]["url"].as_str().unwrap();
        let sealed = agentbus_protocol::blobseal::sealed_len(3);
        assert_eq!(
            reg["upload"]["headers"],
            json!({"content-length": sealed.to_string()})
        );
        assert_eq!(reg["upload"]["sealing"]["sealed_size"], sealed);
        assert!(
            url.contains("X-Amz-SignedHeaders=content-length%3Bhost&"),
            "{url}"
        );
        let date = agentbus_gateway::testing::date_of(h.app.now());
        assert!(url.contains(&format!("X-Amz-Date={date}&")), "{url}");
        // The right bytes, but not sealed under the blob's key: AB-3057, and deleted too. (The
        // unsealed 3 bytes are not the signed length: S3 itself refuses that PUT; moto 5.2.5
        // checks no pre-signed signature, docs/security.md, so `complete` is what refuses here.)
        assert_eq!(h.put_presigned(url, b"abc".to_vec()).await, 200);
        assert_eq!(code(&h.complete(&a, &reg).await.1), "AB-3057");
        let other = agentbus_protocol::blobseal::ContentKey::from_bytes([9; 32]);
        assert_eq!(h.put_presigned(url, other.seal(b"abc")).await, 200);
        assert_eq!(code(&h.complete(&a, &reg).await.1), "AB-3057");
        assert!(objects(&h).await.is_empty(), "refused content is deleted");
        // The pre-signed URL names this blob's object only, and expires with its window (§9).
        assert!(url.contains(reg["id"].as_str().unwrap()), "{url}");
        assert!(url.contains("X-Amz-Expires=900"), "{url}");
    }
    let (_, pending) = h
        .get(
            &format!("/v1/blobs/{}", reg["id"].as_str().unwrap()),
            &a.token,
        )
        .await;
    assert_eq!(
        pending["status"], "pending",
        "a failed upload never completes a blob"
    );
    // Above the target's cap: AB-3040. Inline, that is AGENTBUS_BLOB_INLINE_MAX; on S3 the
    // plan's blob_bytes alone (the inline cap binds only content the gateway receives).
    let big = json!({"name": "big", "size": 8 * 1024 * 1024 + 1, "sha256": "0".repeat(64)});
    let (s, v) = h.post("/v1/blobs", &a.token, big).await;
    if h.on_s3() {
        assert_eq!(s, 201, "{v}");
        let plan = h.app.config.plan_blob_bytes;
        let over = json!({"name": "big", "size": plan + 1, "sha256": "0".repeat(64)});
        assert_eq!(
            code(&h.post("/v1/blobs", &a.token, over).await.1),
            "AB-3040"
        );
    } else {
        assert_eq!(code(&v), "AB-3040");
    }
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

async fn hostile_attachment_names_write_nothing_outside_the_blob_store(target: Target) {
    let h = Harness::start_target(target).await;
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
                let (s, r) = h.put_content(&a, &v, body.as_bytes()).await;
                assert_eq!(s, 200, "{name:?}: {r}");
                accepted.push(v["id"].as_str().unwrap().to_owned());
                accepted_names.push(name.clone());
            }
            400 => assert_eq!(v["error"]["code"], "AB-3022", "{name:?}: {v}"),
            other => panic!("{name:?}: {other} {v}"),
        }
    }
    // Every new object is <prefix><id> for an accepted blob.
    let keys = objects(&h).await;
    assert_eq!(keys.len(), if h.on_s3() { accepted.len() } else { 0 });
    for k in keys {
        let id = k.strip_prefix(crate::s3::PREFIX).unwrap_or_default();
        assert!(accepted.iter().any(|a| a == id), "{k}");
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
        assert!(!h.on_s3(), "{} written beside the bucket", f.display());
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
async fn wp_9_6_an_attachment_must_match_its_blobs_size_and_hash(target: Target) {
    let h = Harness::start_target(target).await;
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

/// WP-9-9: a `ref` naming another tenant is AB-4022 whether or not the blob
/// exists; a ref under one's own tenant slug to another tenant's blob answers like an unknown blob.
/// No answer tells that a blob exists.
async fn wp_9_9_another_tenants_blob_is_refused_and_never_revealed(target: Target) {
    let h = Harness::start_target(target).await;
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

/// WP-9-3: a pending blob's upload window is 15 minutes, its pre-signed PUT's validity. After it,
/// `complete` (and an inline PUT) are AB-3055, and the reaper deletes whatever was put: a blob
/// never completed never becomes `complete`, and its object does not stay in the bucket.
async fn wp_9_3_the_upload_window_closes_and_its_content_is_deleted(target: Target) {
    let h = Harness::start_target(target).await;
    let a = h.agent("alpha").await;
    let body = b"late content";
    let sha = hex::encode(sha2::Sha256::digest(body));
    let (_, reg) = h
        .post(
            "/v1/blobs",
            &a.token,
            json!({"name": "late.txt", "size": body.len(), "sha256": sha}),
        )
        .await;
    if h.on_s3() {
        // Uploaded in time, completed too late.
        let sealed = sealing_key(&reg["upload"]["sealing"]).seal(body);
        let url = reg["upload"]["url"].as_str().unwrap();
        assert_eq!(h.put_presigned(url, sealed).await, 200);
        assert_eq!(objects(&h).await.len(), 1);
        let expires: agentbus_protocol::timestamp::Timestamp = reg["upload"]["expires_at"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(expires.0, T0 + 15 * 60 * 1000);
    }
    h.clock.advance_secs(15 * 60);
    let (s, v) = h.put_content(&a, &reg, body).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (410, Some("AB-3055")),
        "{v}"
    );
    h.app.reap().await.unwrap();
    assert!(objects(&h).await.is_empty(), "the reaper deleted it");
    let (_, v) = h
        .get(
            &format!("/v1/blobs/{}", reg["id"].as_str().unwrap()),
            &a.token,
        )
        .await;
    assert_eq!(v["status"], "pending");
}

/// WP-9-13: at `AGENTBUS_BLOB_TTL` the reaper deletes a blob's content (file or object); reads
/// are then AB-4009, and the bytes no longer count against the quota (§13.6), which counts
/// pending uploads too while their window is open.
async fn wp_9_13_expiry_deletes_the_content_and_frees_the_quota(target: Target) {
    let tmp = tempfile::tempdir().unwrap();
    let quota = 64u64;
    let h = match target {
        Target::Inline => {
            Harness::start_with(tmp.path().join("gw"), |c| c.tenant_blob_quota = quota).await
        }
        _ => {
            let s3 = crate::s3::bucket(tmp.path()).await;
            Harness::start_with(tmp.path().join("gw"), |c| {
                s3.configure(c);
                c.tenant_blob_quota = quota;
                if target == Target::S3ViaGateway {
                    c.s3_download = agentbus_gateway::config::S3Download::Gateway;
                }
            })
            .await
        }
    };
    let a = h.agent("alpha").await;
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    let kept = h.upload(&a, "kept.txt", &[b'k'; 40]).await;
    let id = kept["id"].as_str().unwrap();
    // 40 complete + 20 pending fit; 10 more do not.
    let reg = |n: usize| json!({"name": "p.txt", "size": n, "sha256": hex::encode(sha2::Sha256::digest(vec![b'p'; n]))});
    let (s, _) = h.post("/v1/blobs", &a.token, reg(20)).await;
    assert_eq!(s, 201);
    assert_eq!(
        code(&h.post("/v1/blobs", &a.token, reg(10)).await.1),
        "AB-5005"
    );
    // Once the pending upload's window closed, its bytes are free again.
    h.clock.advance_secs(15 * 60);
    assert_eq!(h.post("/v1/blobs", &a.token, reg(10)).await.0, 201);
    let before = if h.on_s3() {
        objects(&h).await.len()
    } else {
        inline_contents(&h).await
    };
    assert_eq!(before, 1);
    h.clock.advance_secs(30 * 86_400);
    h.app.reap().await.unwrap();
    assert!(objects(&h).await.is_empty());
    if !h.on_s3() {
        assert_eq!(
            inline_contents(&h).await,
            0,
            "the expired content is deleted"
        );
    }
    let (s, v) = h.get(&format!("/v1/blobs/{id}"), &a.token).await;
    assert_eq!((s, code(&v).as_str()), (410, "AB-4009"));
    assert_eq!(h.download(&a, id).await.0, 410);
    // A second pass finds nothing more to delete.
    h.app.reap().await.unwrap();
    assert_eq!(
        h.post("/v1/blobs", &a.token, reg(60)).await.0,
        201,
        "the quota is free"
    );
}

/// Resumable downloads: `GET /v1/blobs/{id}/content` with `Range: bytes=N-` (or `N-M`) answers
/// 206 with exactly those bytes, from any offset, across sealed pieces; on a pre-signed target
/// the client reads the sealed object from the piece holding N.
async fn downloads_resume_from_any_byte(target: Target) {
    let h = Harness::start_target(target).await;
    let a = h.agent("alpha").await;
    let piece = agentbus_protocol::blobseal::CHUNK;
    let body: Vec<u8> = (0..2 * piece + 1234).map(|i| (i % 251) as u8).collect();
    let blob = h.upload(&a, "big.bin", &body).await;
    let id = blob["id"].as_str().unwrap();
    let (_, meta) = h.get(&format!("/v1/blobs/{id}"), &a.token).await;
    let url = meta["download"]["url"].as_str().unwrap().to_owned();
    for (from, to) in [
        (0, None),
        (1, None),
        (piece - 1, None),
        (piece + 7, Some(2 * piece + 9)),
        (2 * piece + 1233, None),
    ] {
        let want = &body[from..to.map_or(body.len(), |t| t + 1)];
        let range = match to {
            Some(t) => format!("bytes={from}-{t}"),
            None => format!("bytes={from}-"),
        };
        if url.starts_with('/') {
            let r = h
                .http
                .get(format!("{}{url}", h.url))
                .bearer_auth(&a.token)
                .header("range", &range)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 206, "{range}");
            let cr = r.headers()["content-range"].to_str().unwrap().to_owned();
            assert_eq!(
                cr,
                format!("bytes {from}-{}/{}", from + want.len() - 1, body.len())
            );
            assert_eq!(r.bytes().await.unwrap().as_ref(), want, "{range}");
        } else {
            use agentbus_protocol::blobseal::{Opener, sealed_offset};
            let first = (from / piece) as u64;
            let r = h
                .http
                .get(&url)
                .header("range", format!("bytes={}-", sealed_offset(first)))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 206, "{range}");
            let sealed = r.bytes().await.unwrap();
            let mut o = Opener::new(
                sealing_key(&meta["download"]["sealing"]),
                body.len() as u64,
                first,
            );
            let mut plain = o.push(&sealed).unwrap();
            plain.extend(o.finish().unwrap());
            let skip = from - first as usize * piece;
            assert_eq!(&plain[skip..skip + want.len()], want, "{range}");
        }
    }
    // The whole, through the target.
    assert_eq!(h.download(&a, id).await, (200, body));
}

/// The S3 settings are checked at start: a bucket that does not exist stops the gateway with a
/// one-line cause and fix, before it serves anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_settings_are_checked_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = crate::s3::bucket(tmp.path()).await;
    let addr = "127.0.0.1:0".parse().unwrap();
    let clock = agentbus_runtime::ManualClock::new(agentbus_protocol::timestamp::Timestamp(T0));
    let mut c = agentbus_gateway::Config::new(addr, tmp.path().join("gw"));
    s3.configure(&mut c);
    c.s3_bucket = format!("{}-missing", s3.name);
    let e = agentbus_gateway::Gateway::open(c.clone(), std::sync::Arc::new(clock.clone()))
        .await
        .err()
        .expect("a missing bucket is refused");
    let agentbus_gateway::StartError::BlobStore(u) = e else {
        panic!("{e}")
    };
    assert!(u.cause.contains("not writable"), "{}", u.cause);
    assert!(u.fix.contains("exists"), "{}", u.fix);
    assert!(!u.cause.contains('\n') && !u.fix.contains('\n'));
    // A missing secret file names the setting to fix.
    s3.configure(&mut c);
    c.s3_secret_access_key_file = tmp.path().join("nope").display().to_string();
    let e = agentbus_gateway::Gateway::open(c.clone(), std::sync::Arc::new(clock.clone()))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("secret file"), "{e}");
    // And the right settings open, the probe object deleted again.
    s3.configure(&mut c);
    let gw = agentbus_gateway::Gateway::open(c, std::sync::Arc::new(clock)).await;
    assert!(gw.is_ok());
    assert!(crate::s3::keys(&s3.url, &s3.name).await.is_empty());
}

/// WP-9-14, WP-9-15: the sidecar's client (what `delegate`, `complete` and `answer --attach` and
/// the receive path call) uploads and downloads through whichever target the gateway answers,
/// without being told which is configured; an interrupted download resumes from its `.part` file
/// and the file appears only complete and verified.
async fn wp_9_14_wp_9_15_the_sidecar_follows_either_target(target: Target) {
    let h = Harness::start_target(target).await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let piece = agentbus_protocol::blobseal::CHUNK;
    let body: Vec<u8> = (0..2 * piece + 77).map(|i| (i % 241) as u8).collect();
    let sender = agentbus_client::http::Gateway::new(&h.url, &a.token).unwrap();
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = counted.clone();
    let progress: agentbus_client::http::Progress = std::sync::Arc::new(move |n| {
        c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    });
    let entry = sender
        .upload_blob(
            "report.bin",
            "application/octet-stream",
            body.clone(),
            Some(progress),
        )
        .await
        .unwrap();
    assert!(counted.load(std::sync::atomic::Ordering::Relaxed) >= body.len() as u64);
    let mut m = message(&h, &a, &b.address, "see attached");
    m["data"]["attachments"] = json!([entry]);
    assert_eq!(h.publish(&a, &sign(&a, m)).await.0, 202);
    let id = entry.reference.rsplit('/').next().unwrap();
    let receiver = agentbus_client::http::Gateway::new(&h.url, &b.token).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.bin");
    let meta = receiver.download_blob_to(id, &path, None).await.unwrap();
    assert_eq!(meta.blob.sha256, entry.sha256);
    assert_eq!(std::fs::read(&path).unwrap(), body);
    // Interrupted after 1.5 pieces: the rest is fetched, the whole verified.
    std::fs::remove_file(&path).unwrap();
    let part = dir.path().join("report.bin.part");
    std::fs::write(&part, &body[..piece + piece / 2]).unwrap();
    receiver.download_blob_to(id, &path, None).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), body);
    assert!(!part.exists());
    // A corrupt partial file is caught by the sha256 check and removed, never put in place.
    std::fs::remove_file(&path).unwrap();
    let mut bad = body[..piece + 10].to_vec();
    bad[piece + 3] ^= 1;
    std::fs::write(&part, &bad).unwrap();
    let err = receiver.download_blob_to(id, &path, None).await;
    if target == Target::S3 {
        // A pre-signed download re-reads from the piece boundary, so the damage is overwritten.
        err.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), body);
    } else {
        assert!(err.is_err());
        assert!(!path.exists() && !part.exists());
    }
    // A third agent gets nothing, whatever the target.
    let c = h.agent("charlie").await;
    let outsider = agentbus_client::http::Gateway::new(&h.url, &c.token).unwrap();
    assert!(
        outsider
            .download_blob_to(id, &dir.path().join("x"), None)
            .await
            .is_err()
    );
}
