//! Delivery states and "shown in context" receipts: the sender reads how far
//! each copy got, persisted → leased → acknowledged → shown → answered; only the recipient reports
//! on its inbox and only the sender reads the states, and a refusal for "not yours" is exactly
//! the answer for "does not exist".

use serde_json::{Value, json};

use crate::support::*;

async fn states(h: &Harness, a: &Agent, id: &str) -> (u16, Value) {
    h.get(&format!("/v1/messages/{id}/delivery"), &a.token)
        .await
}

fn state(v: &Value) -> &str {
    v["recipients"][0]["state"].as_str().unwrap_or("?")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_8_the_sender_sees_each_delivery_state_in_turn() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let m = signed(&h, &a, &b.address, "did you see this?");
    let id = m["id"].as_str().unwrap().to_owned();
    assert_eq!(h.publish(&a, &m).await.0, 202);
    let (s, v) = states(&h, &a, &id).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(state(&v), "persisted");
    assert_eq!(v["recipients"][0]["agent"]["address"], b.address);
    assert!(v["recipients"][0]["leased_at"].is_null());

    h.clock.advance_ms(100);
    let d = h.poll(&b, 0, 0).await.remove(0);
    assert_eq!(state(&states(&h, &a, &id).await.1), "leased");
    h.clock.advance_ms(100);
    assert_eq!(h.ack(&b, &d).await.0, 200);
    let (_, v) = states(&h, &a, &id).await;
    assert_eq!(state(&v), "acknowledged");
    let r = &v["recipients"][0];
    assert_eq!(r["acknowledged_at"], (h.now()).to_string());
    assert_eq!(r["attempts"], 1);

    // A push the client may drop is `pushed`: past acknowledged, short of shown.
    h.clock.advance_ms(50);
    let pushed_at = h.now().to_string();
    let push = json!({"receipts": [{"sequence": d["sequence"], "id": id, "shown_at": pushed_at, "harness": "mcp", "event": "notifications/claude/channel", "state": "pushed"}]});
    let (s, v) = h.post("/v1/inbox/receipts", &b.token, push).await;
    assert_eq!(
        (s, v["results"][0]["status"].as_str()),
        (200, Some("recorded")),
        "{v}"
    );
    let (_, v) = states(&h, &a, &id).await;
    assert_eq!(state(&v), "pushed");
    assert!(v["recipients"][0]["shown"].is_null(), "{v}");
    assert_eq!(
        v["recipients"][0]["pushed"],
        json!({"at": pushed_at, "harness": "mcp", "event": "notifications/claude/channel"})
    );

    // The recipient's sidecar reports the first showing; a second report changes nothing.
    h.clock.advance_ms(50);
    let shown_at = h.now().to_string();
    let receipt = json!({"receipts": [{"sequence": d["sequence"], "id": id, "shown_at": shown_at, "harness": "claude", "event": "UserPromptSubmit"}]});
    let (s, v) = h
        .post("/v1/inbox/receipts", &b.token, receipt.clone())
        .await;
    assert_eq!(
        (s, v["results"][0]["status"].as_str()),
        (200, Some("recorded")),
        "{v}"
    );
    let (_, v) = h.post("/v1/inbox/receipts", &b.token, receipt).await;
    assert_eq!(v["results"][0]["status"], "already_recorded");
    let (_, v) = states(&h, &a, &id).await;
    assert_eq!(state(&v), "shown");
    assert_eq!(
        v["recipients"][0]["shown"],
        json!({"at": shown_at, "harness": "claude", "event": "UserPromptSubmit"})
    );

    // A read receipt is listed as such, and an answer ends the progression.
    let mut ack = message(&h, &b, &a.address, "");
    ack.insert("type".into(), json!("agentbus.ack.v1"));
    ack.insert(
        "schema".into(),
        json!("https://komsary.agentbus.exchange/schemas/agentbus.ack/v1.json"),
    );
    ack.insert("data".into(), json!({"level": "read"}));
    ack.insert("correlation_id".into(), json!(id));
    ack.insert("conversation_id".into(), m["conversation_id"].clone());
    assert_eq!(h.publish(&b, &sign(&b, ack.clone())).await.0, 202);
    let (_, v) = states(&h, &a, &id).await;
    assert_eq!(state(&v), "shown", "a read receipt is not an answer");
    assert_eq!(v["recipients"][0]["read_receipt"]["id"], ack["id"]);
    let mut reply = message(&h, &b, &a.address, "yes, seen");
    reply.insert("correlation_id".into(), json!(id));
    reply.insert("conversation_id".into(), m["conversation_id"].clone());
    assert_eq!(h.publish(&b, &sign(&b, reply.clone())).await.0, 202);
    let (_, v) = states(&h, &a, &id).await;
    assert_eq!(state(&v), "answered");
    assert_eq!(v["recipients"][0]["answered"]["id"], reply["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_and_states_are_their_owners_alone_and_not_yours_looks_unknown() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let c = h.agent("charlie").await;
    let m = signed(&h, &a, &b.address, "for bravo");
    let id = m["id"].as_str().unwrap().to_owned();
    assert_eq!(h.publish(&a, &m).await.0, 202);
    let d = h.poll(&b, 0, 0).await.remove(0);
    // Only the sender reads the states: the recipient and a stranger get what an unknown id gets.
    let unknown = states(&h, &c, "msg_01J9ZK7A0000000000000000ZZ").await;
    for who in [&b, &c] {
        let (s, v) = states(&h, who, &id).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (404, Some("AB-4051")),
            "{v}"
        );
        assert_eq!(unknown.0, s);
        assert_eq!(unknown.1["error"]["code"], v["error"]["code"]);
    }
    // Only the recipient reports on its inbox: another agent's report, a wrong id at the right
    // sequence, and an unknown sequence are all "no such delivery".
    let now = h.now().to_string();
    let report = |seq: &Value, id: &str| json!({"receipts": [{"sequence": seq, "id": id, "shown_at": now, "harness": "codex"}]});
    for (who, body) in [
        (&c, report(&d["sequence"], &id)),
        (&b, report(&d["sequence"], "msg_01J9ZK7A0000000000000000ZZ")),
        (&b, report(&json!(999), &id)),
    ] {
        let (s, v) = h.post("/v1/inbox/receipts", &who.token, body).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (404, Some("AB-4050")),
            "{v}"
        );
    }
    assert_eq!(state(&states(&h, &a, &id).await.1), "leased");
    // Bad input is refused with a documented code, never a 5xx.
    for body in [
        json!({"receipts": []}),
        json!({"receipts": [{"sequence": 1, "id": id, "shown_at": "yesterday", "harness": "x"}]}),
        json!({"receipts": [{"sequence": 1, "id": id, "shown_at": now, "harness": "<script>"}]}),
        json!({"nope": 1}),
    ] {
        let (s, v) = h.post("/v1/inbox/receipts", &b.token, body).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (400, Some("AB-3016")),
            "{v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_13_1_5_wp_5_8_3_agents_read_their_workspace_s_inbound_policy() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let (s, v) = h.get("/v1/inbox/policy", &a.token).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (
            v["require_verified_inbound"].as_bool(),
            v["read_receipts"].as_bool()
        ),
        (Some(false), Some(false))
    );
    let ws = v["workspace"].as_str().unwrap().to_owned();
    let (s, _) = h
        .req(
            reqwest::Method::PUT,
            &format!("/v1/workspaces/{ws}/policy"),
            &h.admin,
            Some(json!({"default": "allow", "require_verified_inbound": true, "read_receipts": true})),
        )
        .await;
    assert_eq!(s, 200);
    let (_, v) = h.get("/v1/inbox/policy", &a.token).await;
    assert_eq!(
        (
            v["require_verified_inbound"].as_bool(),
            v["read_receipts"].as_bool()
        ),
        (Some(true), Some(true))
    );
    // A user token is not an agent's.
    let (s, v) = h.get("/v1/inbox/policy", &h.admin).await;
    assert_eq!((s, v["error"]["code"].as_str()), (403, Some("AB-1002")));
}

/// A topic's publisher reads the states of the subscribers it may see in the directory; a private
/// subscriber (of another owner) is only counted: neither its identity nor when it read the
/// message is the publisher's to know (§10 visibility). A recipient addressed directly is always
/// shown, private or not: the sender named it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_8_a_topic_publisher_does_not_see_private_subscribers() {
    let h = Harness::start().await;
    let publisher = h.agent("pub").await;
    let open = h.agent("listener").await;
    let hidden = h
        .agent_with("hidden", json!({"visibility": "private"}))
        .await;
    for a in [&open, &hidden] {
        let (s, v) = h
            .req(
                reqwest::Method::PUT,
                "/v1/topics/builds/subscription",
                &a.token,
                None,
            )
            .await;
        assert!((200..300).contains(&s), "{v}");
    }
    let m = signed(
        &h,
        &publisher,
        "topic://default/default/builds",
        "build 7 is green",
    );
    let id = m["id"].as_str().unwrap().to_owned();
    assert_eq!(h.publish(&publisher, &m).await.0, 202);
    let d = h.poll(&hidden, 0, 0).await.remove(0);
    assert_eq!(h.ack(&hidden, &d).await.0, 200);
    let (s, v) = states(&h, &publisher, &id).await;
    assert_eq!(s, 200, "{v}");
    let shown: Vec<&str> = v["recipients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["agent"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        (shown, &v["hidden_recipients"]),
        (vec![open.id.as_str()], &json!(1))
    );
    assert!(!v.to_string().contains(&hidden.id), "{v}");
    let (_, sent) = h.get("/v1/messages/sent", &publisher.token).await;
    assert!(!sent.to_string().contains(&hidden.id), "{sent}");
    assert_eq!(sent["messages"][0]["hidden_recipients"], 1, "{sent}");
    // Sent to directly, the private agent's copy is the sender's to follow.
    let m = signed(&h, &publisher, &hidden.address, "for you");
    let id = m["id"].as_str().unwrap().to_owned();
    assert_eq!(h.publish(&publisher, &m).await.0, 202);
    let (_, v) = states(&h, &publisher, &id).await;
    assert_eq!(v["recipients"][0]["agent"]["id"], json!(hidden.id), "{v}");
    assert_eq!(v["hidden_recipients"], 0);
}
