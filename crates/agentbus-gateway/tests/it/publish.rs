//! Publishing: §3.2's checks in order, each rejection code triggered by a crafted request, routing
//! (§4) and idempotency (§8).

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_12_1_request_reply_end_to_end() {
    let h = Harness::start().await;
    let bot = h.agent("release-bot").await;
    let reviewer = h.agent("reviewer").await;
    let mut q = message(
        &h,
        &bot,
        &reviewer.address,
        "Is change 482 clear for the 14:30 deploy?",
    );
    q["data"]["expects_reply"] = json!(true);
    q.insert("subject".into(), json!("Deploy readiness check"));
    let q = sign(&bot, q);
    let (s, receipt, _) = h.publish(&bot, &q).await;
    assert_eq!(s, 202, "{receipt}");
    assert_eq!(receipt["state"], "persisted");
    assert_eq!(receipt["id"], q["id"]);
    assert_eq!(receipt["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    // WP-2.2-2, WP-4.2-1: the delivered copy keeps `to`, adds the gateway attributes and to_id.
    let got = h.poll(&reviewer, 0, 1).await;
    assert_eq!(got.len(), 1);
    let env = &got[0]["envelope"];
    assert_eq!(env["to"], json!(reviewer.address));
    assert_eq!(env["to_id"], json!(reviewer.id));
    assert_eq!(env["sequence"], 1);
    assert_eq!(env["receipt"], receipt["receipt"]);
    assert!(env["tenant"].as_str().unwrap().starts_with("ten_"));
    assert!(env["workspace"].as_str().unwrap().starts_with("ws_"));
    assert!(env["received_at"].as_str().is_some());
    assert_eq!(env["sig"], q["sig"], "WP-3.2-9: sig intact");
    // WP-1-6: the delivered copy re-verifies with the sender's listed key.
    let (_, card) = h
        .get(&format!("/v1/agents/{}", bot.id), &reviewer.token)
        .await;
    let pk = agentbus_protocol::signing::PublicKey::from_base64url(
        card["keys"][0]["public_key"].as_str().unwrap(),
    )
    .unwrap();
    agentbus_protocol::signing::verify_envelope(env.as_object().unwrap(), &pk).unwrap();
    assert_eq!(h.ack(&reviewer, &got[0]).await.0, 200);
    // The reply copies the conversation and correlates.
    let mut reply = message(&h, &reviewer, &bot.address, "Yes. Clear to deploy.");
    reply["conversation_id"] = q["conversation_id"].clone();
    reply.insert("correlation_id".into(), q["id"].clone());
    let reply = sign(&reviewer, reply);
    assert_eq!(h.publish(&reviewer, &reply).await.0, 202);
    let back = h.poll(&bot, 0, 1).await;
    assert_eq!(back[0]["envelope"]["correlation_id"], q["id"]);
    // WP-7-6: the conversation in received_at order, to parties only.
    let cnv = q["conversation_id"].as_str().unwrap();
    let (s, c) = h.get(&format!("/v1/conversations/{cnv}"), &bot.token).await;
    assert_eq!(s, 200);
    let ids: Vec<&Value> = c["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["id"])
        .collect();
    assert_eq!(ids, [&q["id"], &reply["id"]]);
    let outsider = h.agent("outsider").await;
    let (s, body) = h
        .get(&format!("/v1/conversations/{cnv}"), &outsider.token)
        .await;
    let (s2, body2) = h
        .get(
            "/v1/conversations/cnv_01J9ZK7A0000000000000000C9",
            &outsider.token,
        )
        .await;
    assert_eq!((s, &body["error"]["code"]), (s2, &body2["error"]["code"]));
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_3_2_each_check_in_order_with_its_code() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let to = b.address.clone();
    let code = |v: &Value| v["error"]["code"].as_str().unwrap_or_default().to_owned();
    // 1. No bearer: AB-1001, with the documented body shape.
    let (s, v, _) = h.publish_raw("", b"{}".to_vec()).await;
    assert_eq!((s, code(&v).as_str()), (401, "AB-1001"));
    assert!(
        v["error"]["doc_url"]
            .as_str()
            .unwrap()
            .ends_with("/errors/AB-1001")
    );
    assert!(
        v["error"]["request_id"]
            .as_str()
            .unwrap()
            .starts_with("req_")
    );
    let (s, doc) = h.get("/errors/AB-1001", "").await;
    assert_eq!(s, 200, "WP-1-8: the doc URL answers");
    assert!(doc.as_str().unwrap().contains("AB-1001"));
    // 2. source of another agent: AB-2002, even when the signature is also bad (WP-3.2-7).
    let mut m = signed(&h, &a, &to, "hi");
    m["source"] = json!(b.address);
    assert_eq!(code(&h.publish(&a, &m).await.1), "AB-2002");
    // 3. unknown key: AB-1012.
    let mut m = message(&h, &a, &to, "hi");
    m.insert(
        "sig".into(),
        json!(format!(
            "ed25519:key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V:{}",
            "A".repeat(86)
        )),
    );
    assert_eq!(code(&h.publish(&a, &m).await.1), "AB-1012");
    // Another agent's key is not yours either.
    let mut m = sign(&a, message(&h, &a, &to, "hi"));
    let sig = m["sig"].as_str().unwrap().replace(&a.key_id, &b.key_id);
    m["sig"] = json!(sig);
    assert_eq!(code(&h.publish(&a, &m).await.1), "AB-1012");
    // 4. tampered data: AB-1011; bad signature and stale time: still AB-1011.
    let mut m = signed(&h, &a, &to, "hi");
    m["data"]["text"] = json!("ho");
    assert_eq!(code(&h.publish(&a, &m).await.1), "AB-1011");
    let mut m = signed(&h, &a, &to, "hi");
    m["to"] = json!(a.address);
    assert_eq!(
        code(&h.publish(&a, &m).await.1),
        "AB-1011",
        "WP-13.2-1: retargeting breaks the signature"
    );
    // 5. skew ±301 s refused, ±299 s accepted.
    for (delta, want) in [(-301_000, "AB-3005"), (301_000, "AB-3005")] {
        let mut m = message(&h, &a, &to, "hi");
        m["time"] = json!(h.now().plus_ms(delta).to_string());
        assert_eq!(code(&h.publish(&a, &sign(&a, m)).await.1), want);
    }
    for delta in [-299_000, 299_000] {
        let mut m = message(&h, &a, &to, "hi");
        m["time"] = json!(h.now().plus_ms(delta).to_string());
        assert_eq!(h.publish(&a, &sign(&a, m)).await.0, 202);
    }
    // 6. a repeated id with another body: AB-3006; the identical bytes: 200 with the receipt.
    let m = signed(&h, &a, &to, "once");
    let (s1, r1, _) = h.publish(&a, &m).await;
    let (s2, r2, replay) = h.publish(&a, &m).await;
    assert_eq!((s1, s2, replay.as_deref()), (202, 200, Some("true")));
    assert_eq!(r1["receipt"], r2["receipt"]);
    let mut m2 = message(&h, &a, &to, "twice");
    m2["id"] = m["id"].clone();
    assert_eq!(code(&h.publish(&a, &sign(&a, m2)).await.1), "AB-3006");
    // Stale time and repeated id: the time check comes first (AB-3005).
    let mut m3 = message(&h, &a, &to, "x");
    m3["id"] = m["id"].clone();
    m3["time"] = json!(h.now().plus_ms(-400_000).to_string());
    assert_eq!(code(&h.publish(&a, &sign(&a, m3)).await.1), "AB-3005");
    // 7. schema: AB-3011 naming the path; a forged tenant is overwritten, the signature holds.
    let mut bad = message(&h, &a, &to, "x");
    bad["data"] = json!({"text": 5});
    let (s, v, _) = h.publish(&a, &sign(&a, bad)).await;
    assert_eq!((s, code(&v).as_str()), (422, "AB-3011"));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/data/text")
    );
    let mut forged = message(&h, &a, &to, "forged");
    forged.insert("tenant".into(), json!("ten_01J9ZK7A0000000000000000T1"));
    forged.insert("hops".into(), json!([{"gateway": "evil"}]));
    assert_eq!(h.publish(&a, &sign(&a, forged)).await.0, 202);
    let inbox = h.poll(&b, 0, 0).await;
    let last = &inbox.last().unwrap()["envelope"];
    assert_eq!(last["data"]["text"], "forged");
    assert_ne!(last["tenant"], json!("ten_01J9ZK7A0000000000000000T1"));
    assert!(
        last.get("hops").is_none(),
        "WP-2.1-27: a sender cannot inject hops"
    );
    // 8. resolution: AB-4001 unknown, AB-4002 topic, AB-4003 deleted.
    let ws = a.address.rsplit_once('/').unwrap().0.to_owned();
    assert_eq!(
        code(
            &h.publish(&a, &signed(&h, &a, &format!("{ws}/nobody"), "x"))
                .await
                .1
        ),
        "AB-4001"
    );
    let topic = ws.replacen("agent://", "topic://", 1) + "/deploys";
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, &topic, "x")).await.1),
        "AB-4002"
    );
    let gone = h.agent("gone").await;
    let (s, _) = h
        .req(
            reqwest::Method::DELETE,
            &format!("/v1/agents/{}", gone.id),
            &h.admin,
            None,
        )
        .await;
    assert_eq!(s, 204);
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, &gone.address, "x")).await.1),
        "AB-4003"
    );
    assert_eq!(
        code(&h.publish(&a, &signed(&h, &a, &gone.id, "x")).await.1),
        "AB-4003"
    );
    // 9. policy after resolution: deny-all gives AB-2001 for a known address, AB-4001 for unknown.
    let ws_id = h.get(&format!("/v1/agents/{}", a.id), &a.token).await.1["id"].clone();
    let _ = ws_id;
    let (_, env) = h.get("/.well-known/agentbus.json", "").await;
    assert_eq!(env["protocol_versions"], json!(["1"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_3_idempotency_key_returns_the_original_receipt_once() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let mut first = message(&h, &a, &b.address, "one");
    first.insert("idempotency_key".into(), json!("deploy-482"));
    let (s1, r1, _) = h.publish(&a, &sign(&a, first)).await;
    // A new id and time, the same key: the original receipt, HTTP 200, the header, one copy.
    let mut again = message(&h, &a, &b.address, "one, regenerated");
    again.insert("idempotency_key".into(), json!("deploy-482"));
    let (s2, r2, replay) = h.publish(&a, &sign(&a, again)).await;
    assert_eq!((s1, s2, replay.as_deref()), (202, 200, Some("true")));
    assert_eq!(r1["receipt"], r2["receipt"]);
    assert_eq!(h.poll(&b, 0, 0).await.len(), 1);
    // After 7 days the key is free again (WP-8-2).
    h.clock.advance_secs(7 * 24 * 3600 + 1);
    let mut later = message(&h, &a, &b.address, "one, a week later");
    later.insert("idempotency_key".into(), json!("deploy-482"));
    assert_eq!(h.publish(&a, &sign(&a, later)).await.0, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_2_1_24_eight_concurrent_publishers_give_a_gap_free_sequence() {
    let h = std::sync::Arc::new(Harness::start().await);
    let inbox = h.agent("inbox").await;
    let mut senders = Vec::new();
    for i in 0..8 {
        senders.push(h.agent(&format!("sender-{i}")).await);
    }
    let mut tasks = Vec::new();
    for s in senders {
        let h = h.clone();
        let to = inbox.address.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..25 {
                let (st, v, _) = h.publish(&s, &signed(&h, &s, &to, &format!("{n}"))).await;
                assert_eq!(st, 202, "{v}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut seqs = Vec::new();
    let mut after = 0;
    loop {
        let got = h.poll(&inbox, after, 0).await;
        if got.is_empty() {
            break;
        }
        for d in &got {
            seqs.push(d["sequence"].as_u64().unwrap());
            after = after.max(d["sequence"].as_u64().unwrap());
        }
    }
    assert_eq!(seqs, (1..=200).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_thousand_concurrent_replays_leave_one_inbox_entry() {
    let h = std::sync::Arc::new(Harness::start().await);
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let m = signed(&h, &a, &b.address, "exactly once");
    let body = Value::Object(m).to_string().into_bytes();
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let h = h.clone();
        let body = body.clone();
        let token = a.token.clone();
        tasks.push(tokio::spawn(
            async move { h.publish_raw(&token, body).await },
        ));
    }
    let mut receipts = std::collections::HashSet::new();
    let mut accepted = 0;
    for t in tasks {
        let (s, v, _) = t.await.unwrap();
        assert!(s == 202 || s == 200, "{s} {v}");
        accepted += usize::from(s == 202);
        receipts.insert(v["receipt"].as_str().unwrap().to_owned());
    }
    assert_eq!((accepted, receipts.len()), (1, 1));
    assert_eq!(h.poll(&b, 0, 0).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_4_2_3_topic_fan_out_one_copy_per_subscriber() {
    let h = Harness::start().await;
    let publisher = h.agent("publisher").await;
    let subs = [
        h.agent("sub-one").await,
        h.agent("sub-two").await,
        h.agent("sub-three").await,
    ];
    for s in subs.iter().chain([&publisher]) {
        let (st, _) = h
            .req(
                reqwest::Method::PUT,
                "/v1/topics/deploys.prod/subscription",
                &s.token,
                None,
            )
            .await;
        assert_eq!(st, 200);
    }
    // Give the second subscriber an earlier message, so sequences differ per inbox.
    assert_eq!(
        h.publish(
            &publisher,
            &signed(&h, &publisher, &subs[1].address, "direct")
        )
        .await
        .0,
        202
    );
    let topic = publisher
        .address
        .rsplit_once('/')
        .unwrap()
        .0
        .replacen("agent://", "topic://", 1)
        + "/deploys.prod";
    let m = signed(&h, &publisher, &topic, "deploying");
    assert_eq!(h.publish(&publisher, &m).await.0, 202);
    for (s, want_seq) in subs.iter().zip([1, 2, 1]) {
        let got = h.poll(s, 0, 0).await;
        let copy = got.last().unwrap();
        assert_eq!(copy["sequence"], want_seq);
        assert_eq!(copy["envelope"]["to"], json!(topic));
        assert_eq!(copy["envelope"]["to_id"], json!(s.id));
        assert_eq!(
            copy["envelope"]["source"],
            json!(publisher.address),
            "WP-4.4-4"
        );
        assert_eq!(copy["envelope"]["sig"], m["sig"]);
    }
    assert!(
        h.poll(&publisher, 0, 0).await.is_empty(),
        "G-WP-35: no copy to the publisher"
    );
}

/// A deleted agent's replay and idempotency records go with it (WP-8-3, decision 4): a new agent
/// registered under its name, so at its address, is not answered with the deleted agent's
/// receipt for the same key or the same id; its message is stored and delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_8_3_a_name_registered_again_does_not_inherit_the_deleted_agents_records() {
    let h = Harness::start().await;
    let old = h.agent("beta").await;
    let to = h.agent("payroll").await;
    let mut first = message(&h, &old, &to.address, "Q4 payroll, run it");
    first.insert("idempotency_key".into(), json!("payroll-2026-12"));
    let reused_id = first["id"].clone();
    let (s, r1, _) = h.publish(&old, &sign(&old, first)).await;
    assert_eq!(s, 202, "{r1}");
    let path = format!("/v1/agents/{}", old.id);
    let (s, v) = h.req(reqwest::Method::DELETE, &path, &h.admin, None).await;
    assert_eq!(s, 204, "{v}");
    let new = h.agent("beta").await;
    assert_eq!(new.address, old.address);
    // The same key: stored anew, not the old receipt.
    let mut keyed = message(&h, &new, &to.address, "Q4 payroll: hold it");
    keyed.insert("idempotency_key".into(), json!("payroll-2026-12"));
    let (s, r2, replay) = h.publish(&new, &sign(&new, keyed)).await;
    assert_eq!((s, replay), (202, None), "{r2}");
    assert_ne!(r1["receipt"], r2["receipt"]);
    // The same id: stored anew, neither the old receipt nor AB-3006.
    let mut same_id = message(&h, &new, &to.address, "a different text");
    same_id.insert("id".into(), reused_id);
    let (s, r3, _) = h.publish(&new, &sign(&new, same_id)).await;
    assert_eq!(s, 202, "{r3}");
    let texts: Vec<String> = h
        .poll(&to, 0, 0)
        .await
        .iter()
        .map(|d| {
            d["envelope"]["data"]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(
        texts,
        [
            "Q4 payroll, run it",
            "Q4 payroll: hold it",
            "a different text"
        ]
    );
}
