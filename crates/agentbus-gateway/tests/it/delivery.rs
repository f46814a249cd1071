//! At-least-once delivery: leases, acks, redelivery after the visibility timeout, dead letters,
//! expiry, and a restart that loses nothing.

use agentbus_store::Store as _;
use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_ack_is_refused_and_the_redelivered_copy_is_acked_once() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "hello")).await.0,
        202
    );
    let first = h.poll(&b, 0, 0).await;
    assert_eq!(first.len(), 1);
    // Within the visibility timeout nothing is redelivered.
    assert!(h.poll(&b, 0, 0).await.is_empty());
    // The receiver pauses past its visibility timeout (30 s here); the message comes again.
    h.clock.advance_secs(31);
    let second = h.poll(&b, 0, 0).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0]["sequence"], first[0]["sequence"]);
    assert_eq!(second[0]["envelope"]["id"], first[0]["envelope"]["id"]);
    assert_eq!(second[0]["attempt"], 2);
    let (s, v) = h.ack(&b, &first[0]).await;
    assert_eq!((s, v["error"]["code"].as_str()), (409, Some("AB-4010")));
    assert_eq!(h.ack(&b, &second[0]).await.0, 200);
    let (s, v) = h.ack(&b, &second[0]).await;
    assert_eq!((s, v["status"].as_str()), (200, Some("already_acked")));
    h.clock.advance_secs(100);
    assert!(h.poll(&b, 0, 0).await.is_empty(), "acked once, never again");
}

/// A copy never delivered (as the store has it) below the receiver's cursor is one whose lease
/// was lost, to a crash after its frame left the gateway or to a connection that gave it back
/// after another's cursor passed it: it comes again once it has been visible for the
/// visibility timeout, as an unacked lease would, instead of waiting below every cursor for its
/// expiry and its sender's AB-4010 (docs/api.md, "Inbox").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_stranded_below_the_cursor_comes_after_the_visibility_timeout() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for text in ["one", "two", "three"] {
        let m = signed(&h, &a, &b.address, text);
        assert_eq!(h.publish(&a, &m).await.0, 202);
    }
    assert!(
        h.poll(&b, 2, 0).await.len() == 1,
        "the third, above the cursor"
    );
    h.clock.advance_secs(29);
    assert!(
        h.poll(&b, 3, 0).await.is_empty(),
        "not within a lease's length"
    );
    h.clock.advance_secs(2);
    let late = h.poll(&b, 3, 0).await;
    let got: Vec<(u64, u64)> = late
        .iter()
        .filter_map(|d| Some((d["sequence"].as_u64()?, d["attempt"].as_u64()?)))
        .collect();
    // The third's lease ran out too: it comes again as a redelivery.
    assert_eq!(got, [(1, 1), (2, 1), (3, 2)]);
    for d in &late {
        assert_eq!(h.ack(&b, d).await.0, 200);
    }
    h.clock.advance_secs(100);
    assert!(h.poll(&b, 3, 0).await.is_empty(), "acked once, never again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_5_9_1_never_acked_is_dead_lettered_and_the_sender_told() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let m = signed(&h, &a, &b.address, "will never be acked");
    assert_eq!(h.publish(&a, &m).await.0, 202);
    for _ in 0..3 {
        assert_eq!(h.poll(&b, 0, 0).await.len(), 1);
        h.clock.advance_secs(31);
    }
    let report = h.app.reap().await.unwrap();
    assert_eq!(report.dead.len(), 1);
    assert!(h.poll(&b, 0, 0).await.is_empty());
    let notices = h.poll(&a, 0, 0).await;
    let n = &notices[0]["envelope"];
    assert_eq!(n["type"], "agentbus.system.undeliverable.v1");
    assert_eq!(n["source"], "agent://system/gateway/router");
    assert_eq!(n["data"]["original_message_id"], m["id"]);
    assert_eq!(n["data"]["dead_lettered"], true);
    assert_eq!(n["data"]["attempts"], 3);
    assert_eq!(n["correlation_id"], m["id"]);
    // Decision 8: the notice is signed by the gateway key of the well-known document.
    let (_, wk) = h.get("/.well-known/agentbus.json", "").await;
    let pk = agentbus_protocol::signing::PublicKey::from_base64url(
        wk["gateway_keys"][0]["public_key"].as_str().unwrap(),
    )
    .unwrap();
    agentbus_protocol::signing::verify_envelope(n.as_object().unwrap(), &pk).unwrap();
}

/// Publishes a message from `from` to `to` that expires in 2 s; answers the envelope.
async fn publish_expiring(
    h: &Harness,
    from: &Agent,
    to: &Agent,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = message(h, from, &to.address, "soon stale");
    m.insert("expires_at".into(), json!(h.now().plus_secs(2).to_string()));
    let m = sign(from, m);
    assert_eq!(h.publish(from, &m).await.0, 202);
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_2_1_19_expired_before_delivery_is_never_delivered_and_the_sender_told() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let m = publish_expiring(&h, &a, &b).await;
    h.clock.advance_secs(3);
    assert!(h.poll(&b, 0, 0).await.is_empty());
    let report = h.app.reap().await.unwrap();
    assert_eq!(report.expired.len(), 1);
    let n = &h.poll(&a, 0, 0).await[0]["envelope"];
    assert_eq!(n["type"], "agentbus.system.expired.v1");
    assert_eq!(n["data"]["original_message_id"], m["id"]);
    assert_eq!(n["data"]["last_state"], "persisted");
}

/// WP-2.1-19's notice is owed, not hoped for: a pass that settled an entry and stopped before
/// its notice (the gateway killed, the store failing after the settling commit) leaves it owed,
/// and the next pass sends it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_owed_by_a_pass_that_stopped_goes_with_the_next_once() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let m = publish_expiring(&h, &a, &b).await;
    h.clock.advance_secs(3);
    // The settling commit alone, as a pass that stopped right after it leaves the store.
    let settled = h
        .app
        .store()
        .reap_inboxes(h.now().millis(), h.app.config.max_attempts)
        .await
        .unwrap();
    assert_eq!(settled.expired.len(), 1);
    assert!(h.poll(&a, 0, 0).await.is_empty(), "no notice yet");
    let report = h.app.reap().await.unwrap();
    assert_eq!(report.expired.len(), 0, "nothing left to settle");
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["envelope"]["type"], "agentbus.system.expired.v1");
    assert_eq!(
        notices[0]["envelope"]["data"]["original_message_id"],
        m["id"]
    );
    h.app.reap().await.unwrap();
    assert!(h.poll(&a, 0, 0).await.is_empty(), "sent once");
}

/// §5.9's notice of a deleted recipient is owed like the reaper's: a deletion whose route
/// stopped after its commit (the gateway killed before it told the senders) leaves the notices
/// to the reaper's next pass, which sends each once, with AB-4003.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notices_of_a_deletion_that_stopped_go_with_the_next_pass_once() {
    let h = Harness::start().await;
    let (a, b) = (h.agent("alpha").await, h.agent("bravo").await);
    let m = signed(&h, &a, &b.address, "to be dead-lettered");
    assert_eq!(h.publish(&a, &m).await.0, 202);
    // The deletion's commit alone, as a route that stopped right after it leaves the store.
    let settled = h
        .app
        .store()
        .delete_agent(&b.id, h.now().millis())
        .await
        .unwrap();
    assert_eq!(settled.len(), 1);
    assert!(h.poll(&a, 0, 0).await.is_empty(), "no notice yet");
    h.app.reap().await.unwrap();
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let n = &notices[0]["envelope"];
    assert_eq!(n["type"], "agentbus.system.undeliverable.v1");
    assert_eq!(
        (
            n["data"]["code"].as_str(),
            n["data"]["dead_lettered"].as_bool()
        ),
        (Some("AB-4003"), Some(true))
    );
    assert_eq!(n["data"]["original_message_id"], m["id"]);
    h.app.reap().await.unwrap();
    assert!(h.poll(&a, 0, 0).await.is_empty(), "sent once");
    // Through the route, the notice goes at once, and the next pass owes nothing more.
    let c = h.agent("charlie").await;
    let m = signed(&h, &a, &c.address, "to be dead-lettered too");
    assert_eq!(h.publish(&a, &m).await.0, 202);
    let path = format!("/v1/agents/{}", c.id);
    let (s, _) = h.req(reqwest::Method::DELETE, &path, &h.admin, None).await;
    assert_eq!(s, 204);
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["envelope"]["data"]["code"], "AB-4003");
    h.app.reap().await.unwrap();
    assert!(h.poll(&a, 0, 0).await.is_empty(), "sent once");
}

/// A suspension's AB-4013 notices are owed in its commit: a route that stopped right after it
/// leaves them to the reaper's next pass, which sends each once, and forgoes one whose copy was
/// delivered and acknowledged meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notices_of_a_suspension_that_stopped_go_with_the_next_pass_once() {
    let h = Harness::start().await;
    let (a, b) = (h.agent("alpha").await, h.agent("bravo").await);
    let (c, d) = (h.agent("charlie").await, h.agent("delta").await);
    let held = signed(&h, &a, &b.address, "held");
    assert_eq!(h.publish(&a, &held).await.0, 202);
    let taken = signed(&h, &a, &d.address, "delivered before the pass");
    assert_eq!(h.publish(&a, &taken).await.0, 202);
    // The suspensions' commits alone.
    for agent in [&b, &d] {
        let now = h.now().millis();
        assert_eq!(
            h.app
                .store()
                .suspend_agent(&agent.id, now)
                .await
                .unwrap()
                .len(),
            1
        );
    }
    assert!(h.poll(&a, 0, 0).await.is_empty(), "no notice yet");
    // Delta is resumed and reads and acks its copy before the pass: nothing left to report.
    let resume = format!("/v1/agents/{}/resume", d.id);
    assert_eq!(h.post(&resume, &h.admin, json!({})).await.0, 200);
    let got = h.poll(&d, 0, 0).await;
    assert_eq!(h.ack(&d, &got[0]).await.0, 200);
    h.app.reap().await.unwrap();
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let n = &notices[0]["envelope"];
    assert_eq!(
        (
            n["data"]["code"].as_str(),
            n["data"]["dead_lettered"].as_bool()
        ),
        (Some("AB-4013"), Some(false))
    );
    assert_eq!(n["data"]["original_message_id"], held["id"]);
    h.app.reap().await.unwrap();
    assert!(h.poll(&a, 0, 0).await.is_empty(), "sent once");
    // A copy sent to a suspended agent is owed in the publish's commit; its route sends it, once.
    let suspend = format!("/v1/agents/{}/suspend", c.id);
    assert_eq!(h.post(&suspend, &h.admin, json!({})).await.0, 200);
    let during = signed(&h, &a, &c.address, "during");
    assert_eq!(h.publish(&a, &during).await.0, 202);
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["envelope"]["data"]["code"], "AB-4013");
    h.app.reap().await.unwrap();
    assert!(h.poll(&a, 0, 0).await.is_empty(), "sent once");
}

/// A dead letter the reaper settled is reported as what it was, AB-4016 (whose catalogue entry
/// says dead-lettered), even when its recipient is deleted before the notice goes out (the
/// deletion owes AB-4003 only for what it dead-letters itself). The notice names its type's
/// registry schema, so it validates as any envelope does (§5.9, `agentbus envelope validate`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_is_reported_ab_4016_when_its_recipient_is_deleted_before_the_notice() {
    let h = Harness::start().await;
    let (a, b) = (h.agent("alpha").await, h.agent("bravo").await);
    let m = signed(&h, &a, &b.address, "never acked");
    assert_eq!(h.publish(&a, &m).await.0, 202);
    for _ in 0..3 {
        assert_eq!(h.poll(&b, 0, 0).await.len(), 1);
        h.clock.advance_secs(31);
    }
    // The reaper's commit alone, then the deletion through its route.
    let report = h
        .app
        .store()
        .reap_inboxes(h.now().millis(), 3)
        .await
        .unwrap();
    assert_eq!(report.dead.len(), 1);
    let path = format!("/v1/agents/{}", b.id);
    let (s, _) = h.req(reqwest::Method::DELETE, &path, &h.admin, None).await;
    assert_eq!(s, 204);
    h.app.reap().await.unwrap();
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    let env = &notices[0]["envelope"];
    assert_eq!(env["data"]["code"], "AB-4016");
    assert_eq!(
        agentbus_protocol::errors::Code::DeadLettered.to_string(),
        "AB-4016"
    );
    assert_eq!(
        env["schema"],
        "https://komsary.agentbus.exchange/schemas/agentbus.system.undeliverable/v1.json"
    );
    let envelope =
        agentbus_protocol::envelope::Envelope::parse(env.to_string().as_bytes()).unwrap();
    let problems = envelope.validate(Default::default());
    assert!(problems.is_empty(), "{problems:?}");
}

/// A message from the agent `from` (by id) to `to`, stored through the store itself (no
/// envelope checks), expiring at `expires_at`.
async fn raw_message(
    h: &Harness,
    from: &str,
    to: &Agent,
    id: &str,
    expires_at: i64,
) -> agentbus_store::NewMessage {
    let now = h.now().millis();
    agentbus_store::NewMessage {
        tenant_id: h
            .app
            .store()
            .agent(&to.id)
            .await
            .unwrap()
            .unwrap()
            .tenant_id,
        id: id.into(),
        source: format!("agent://default/main/{from}"),
        source_agent_id: Some(from.into()),
        kind: "agentbus.message.v1".into(),
        conversation_id: "cnv_raw".into(),
        correlation_id: None,
        to_text: to.address.clone(),
        to_id: to.id.clone(),
        attrs: "{}".into(),
        data: b"{}".to_vec(),
        signed_hash: vec![0; 32],
        idempotency: None,
        receipt: format!("rcp_{id}"),
        received_at: now,
        expires_at,
        task_id: None,
        task: None,
        recipients: vec![to.id.clone()],
        blob_refs: vec![],
        replay_since: now,
        idempotency_since: now,
        max_depth: None,
        usage: None,
        notice_of: None,
        search_tags: String::new(),
    }
}

async fn stored_raw(h: &Harness, m: agentbus_store::NewMessage) {
    let stored = h.app.store().publish(m).await.unwrap();
    assert!(matches!(
        stored,
        agentbus_store::PublishOutcome::Stored { .. }
    ));
}

/// A pass sends every notice it owes, however many: the owed ones are read a page of 1,000 at
/// a time until none is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_sends_more_than_a_page_of_owed_notices() {
    let h = Harness::start().await;
    let (a, b) = (h.agent("alpha").await, h.agent("bravo").await);
    let expires = h.now().millis() + 2000;
    let mut messages = Vec::new();
    for i in 0..1001 {
        messages.push(raw_message(&h, &a.id, &b, &format!("msg_{i}"), expires).await);
    }
    for chunk in messages.chunks(128) {
        futures_util::future::join_all(chunk.iter().map(|m| stored_raw(&h, m.clone()))).await;
    }
    h.clock.advance_secs(3);
    assert_eq!(h.app.reap().await.unwrap().expired.len(), 1001);
    assert_eq!(
        h.app.store().pending_count(&a.id).await.unwrap(),
        1001,
        "one notice each"
    );
    let left = h
        .app
        .store()
        .pending_notices((String::new(), 0), 10)
        .await
        .unwrap();
    assert_eq!(left, []);
}

/// One owed notice that cannot be built (here its sender's workspace row is gone, so the sender
/// has no address) is logged and left owed; the pass still sends every other notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owed_notice_that_cannot_be_built_holds_back_no_other() {
    let h = Harness::start().await;
    let (a, b) = (h.agent("alpha").await, h.agent("bravo").await);
    let now = h.now().millis();
    // A sender in a workspace that does not exist, and its message to bravo, stored first.
    let mut ghost = h.app.store().agent(&a.id).await.unwrap().unwrap();
    ghost.id = "agt_ghost".into();
    ghost.name = "ghost".into();
    ghost.workspace_id = "wks_gone".into();
    h.app.store().create_agent(ghost, vec![]).await.unwrap();
    stored_raw(
        &h,
        raw_message(&h, "agt_ghost", &b, "msg_ghost", now + 2000).await,
    )
    .await;
    let m = publish_expiring(&h, &a, &b).await;
    h.clock.advance_secs(3);
    let report = h.app.reap().await.unwrap();
    assert_eq!(report.expired.len(), 2);
    let notices = h.poll(&a, 0, 0).await;
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(
        notices[0]["envelope"]["data"]["original_message_id"],
        m["id"]
    );
    let owed = h
        .app
        .store()
        .pending_notices((String::new(), 0), 10)
        .await
        .unwrap();
    let left: Vec<&str> = owed.iter().map(|(e, _)| e.message.id.as_str()).collect();
    assert_eq!(left, ["msg_ghost"], "the ghost's stays owed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_loses_nothing_acked_and_redelivers_nothing_twice_after_dedupe() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for i in 0..10 {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, &format!("m{i}")))
                .await
                .0,
            202
        );
    }
    // The receiver is handed all ten; it persists and acks five, persists two more without
    // acking, crashes before the last three, and then the gateway restarts too.
    let got = h.poll(&b, 0, 0).await;
    assert_eq!(got.len(), 10);
    let mut seen = std::collections::HashSet::new();
    for d in &got[..5] {
        assert_eq!(h.ack(&b, d).await.0, 200);
        seen.insert(d["envelope"]["id"].as_str().unwrap().to_owned());
    }
    for d in &got[5..7] {
        seen.insert(d["envelope"]["id"].as_str().unwrap().to_owned());
    }
    let (dir, clock, tmp) = h.stop().await;
    let h = Harness::start_in(dir, Some(clock)).await;
    let mut b2 = b.clone();
    b2.token = b.token.clone();
    h.clock.advance_secs(31);
    let mut delivered = std::collections::HashSet::new();
    let mut dupes = 0;
    loop {
        let got = h.poll(&b2, 0, 0).await;
        if got.is_empty() {
            break;
        }
        for d in &got {
            let id = d["envelope"]["id"].as_str().unwrap().to_owned();
            // The receiver's dedupe: anything it already holds is acked silently.
            if seen.contains(&id) {
                dupes += 1;
            }
            delivered.insert(id);
            assert_eq!(h.ack(&b2, d).await.0, 200);
        }
    }
    // The five unacked come back: two the receiver already holds (its dedupe drops them), three new.
    assert_eq!((delivered.len(), dupes), (5, 2));
    seen.extend(delivered);
    assert_eq!(seen.len(), 10, "nothing lost");
    drop(tmp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_pushes_resumes_after_a_sequence_and_takes_acks() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for i in 0..3 {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, &format!("m{i}")))
                .await
                .0,
            202
        );
    }
    // Resume after sequence 2: only the third is pushed, then a new one as it arrives.
    let mut req = format!("{}/v1/inbox/ws?after=2", h.url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", b.token).parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    let next = |v: Option<Result<Message, _>>| -> serde_json::Value {
        serde_json::from_str(v.unwrap().unwrap().to_text().unwrap()).unwrap()
    };
    let first = next(ws.next().await);
    assert_eq!(first["type"], "delivery");
    assert_eq!(first["delivery"]["sequence"], 3);
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "live")).await.0,
        202
    );
    let second = next(ws.next().await);
    assert_eq!(second["delivery"]["sequence"], 4);
    assert_eq!(second["delivery"]["envelope"]["data"]["text"], "live");
    let ack = serde_json::json!({"type": "ack", "sequence": 4, "delivery": second["delivery"]["delivery"]});
    ws.send(Message::Text(ack.to_string().into()))
        .await
        .unwrap();
    let answer = next(ws.next().await);
    assert_eq!(answer["result"]["status"], "acked");
    // A burst is acked in one `acks` frame and answered in one `acks` frame, item by item.
    for text in ["x", "y"] {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, text)).await.0,
            202
        );
    }
    let (x, y) = (next(ws.next().await), next(ws.next().await));
    let acks = serde_json::json!({"type": "acks", "acks": [
        {"sequence": x["delivery"]["sequence"], "delivery": x["delivery"]["delivery"]},
        {"sequence": y["delivery"]["sequence"], "delivery": y["delivery"]["delivery"]},
        {"sequence": 3, "delivery": "d3.9.0"},
    ]});
    ws.send(Message::Text(acks.to_string().into()))
        .await
        .unwrap();
    let answer = next(ws.next().await);
    assert_eq!(answer["type"], "acks");
    let statuses: Vec<&str> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["acked", "acked", "refused"]);
    // The two acked copies are settled: a poll from the start offers neither.
    let acked = [&x["delivery"]["sequence"], &y["delivery"]["sequence"]];
    assert!(
        h.poll(&b, 0, 0)
            .await
            .iter()
            .all(|d| !acked.contains(&&d["sequence"]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_13_6_inbox_depth_and_rate_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    // A gateway with small limits, set through its configuration.
    let h = Harness::start_with(dir, |c| {
        c.inbox_max_depth = 3;
        c.rate_per_agent = 5.0;
        c.rate_burst = 5.0;
    })
    .await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for i in 0..3 {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, &format!("{i}")))
                .await
                .0,
            202
        );
    }
    let (s, v, _) = h.publish(&a, &signed(&h, &a, &b.address, "full")).await;
    assert_eq!((s, v["error"]["code"].as_str()), (429, Some("AB-4040")));
    // Draining the inbox makes room again.
    for d in h.poll(&b, 0, 0).await {
        h.ack(&b, &d).await;
    }
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "room")).await.0,
        202
    );
    // The fifth publish in one instant empties the bucket of 5; the next is AB-5001.
    let (s, v, _) = h.publish(&a, &signed(&h, &a, &b.address, "sixth")).await;
    assert_eq!((s, v["error"]["code"].as_str()), (429, Some("AB-5001")));
    h.clock.advance_secs(1);
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "after a second"))
            .await
            .0,
        202
    );
}

/// §3.2 puts the replay check before every limit: a byte-identical repeat of an accepted envelope
/// gets its original receipt (200) even after the recipient's inbox filled up and the sender's
/// rate bucket ran dry, although the gateway only consults the replay window once a later check
/// refuses the envelope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_3_2_a_repeat_answers_as_a_repeat_after_the_inbox_filled_and_the_bucket_emptied() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.inbox_max_depth = 2;
        c.rate_per_agent = 3.0;
        c.rate_burst = 3.0;
    })
    .await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let first = signed(&h, &a, &b.address, "first");
    let (s, receipt, _) = h.publish(&a, &first).await;
    assert_eq!(s, 202);
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "second")).await.0,
        202
    );
    let (s, v, _) = h.publish(&a, &signed(&h, &a, &b.address, "third")).await;
    assert_eq!((s, v["error"]["code"].as_str()), (429, Some("AB-4040")));
    // Inbox full: the repeat is still a repeat.
    let (s, v, replay) = h.publish(&a, &first).await;
    assert_eq!((s, replay.as_deref()), (200, Some("true")), "{v}");
    assert_eq!(v["receipt"], receipt["receipt"]);
    // Bucket empty (3 tokens spent above, the repeat took the last): still a repeat.
    let (s, v, _) = h.publish(&a, &signed(&h, &a, &b.address, "fresh")).await;
    assert_eq!((s, v["error"]["code"].as_str()), (429, Some("AB-5001")));
    let (s, v, replay) = h.publish(&a, &first).await;
    assert_eq!((s, replay.as_deref()), (200, Some("true")), "{v}");
    assert_eq!(v["receipt"], receipt["receipt"]);
    // A different envelope reusing the id is AB-3006 whatever else is wrong.
    let mut other = signed(&h, &a, &b.address, "other text");
    other.insert("id".into(), first["id"].clone());
    let other = sign(&a, other);
    let (s, v, _) = h.publish(&a, &other).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("AB-3006")),
        "{v}"
    );
}

/// A publisher reads the clock before its commit, so a committed entry can carry a later
/// `received_at` than the `now` of a lease that reads it; it is deliverable all the same (a
/// receiver's cursor moves past whatever a lease returns, so one skipped would be stranded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_takes_an_entry_received_after_its_now() {
    use agentbus_store::Store as _;
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let before = h.now().millis();
    h.clock.advance_secs(1);
    assert_eq!(
        h.publish(&a, &signed(&h, &a, &b.address, "later")).await.0,
        202
    );
    let leased = h
        .app
        .store()
        .lease(agentbus_store::LeaseRequest {
            agent_id: b.id.clone(),
            after: 0,
            limit: 10,
            now: before,
            visibility_ms: 30_000,
            max_attempts: 3,
        })
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
}

/// Leases are answered before their write lands (docs/delivery.md); concurrent polls of one
/// inbox still never hand out the same entry, and every entry is handed out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_polls_of_one_inbox_never_share_an_entry() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    for i in 0..60 {
        let env = signed(&h, &a, &b.address, &format!("{i}"));
        assert_eq!(h.publish(&a, &env).await.0, 202);
    }
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..10 {
        let polls = futures_util::future::join_all((0..6).map(|_| async {
            let (s, v) = h.get("/v1/inbox?after=0&limit=7", &b.token).await;
            assert_eq!(s, 200, "{v}");
            v["deliveries"].as_array().unwrap().clone()
        }))
        .await;
        for d in polls.into_iter().flatten() {
            let seq = d["sequence"].as_u64().unwrap();
            assert!(
                seen.insert(seq, d).is_none(),
                "entry {seq} handed out twice"
            );
        }
    }
    assert_eq!(seen.len(), 60);
    // Every token handed out is current.
    for d in seen.values() {
        assert_eq!(h.ack(&b, d).await.0, 200);
    }
}

/// The depth limit is checked inside the transaction that adds the entry: 16 concurrent
/// publishers into an inbox with room for 5 leave exactly 5 entries, the rest refused AB-4040.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_13_6_concurrent_publishers_never_overfill_an_inbox() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.inbox_max_depth = 5;
        c.rate_per_agent = 1e6;
        c.rate_burst = 1e6;
    })
    .await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let bodies: Vec<_> = (0..16)
        .map(|i| signed(&h, &a, &b.address, &format!("{i}")))
        .collect();
    let results = futures_util::future::join_all(bodies.iter().map(|env| h.publish(&a, env))).await;
    let accepted = results.iter().filter(|r| r.0 == 202).count();
    let full = results
        .iter()
        .filter(|r| r.0 == 429 && r.1["error"]["code"] == "AB-4040")
        .count();
    assert_eq!((accepted, full), (5, 11));
    assert_eq!(h.poll(&b, 0, 0).await.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_answers_in_flight_requests_and_ends_long_polls() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    // A long-poll waiting for up to 60 s, and a burst of publishes in flight, when shutdown begins.
    let poll = {
        let url = format!("{}/v1/inbox?wait=60&after=1000", h.url);
        let req = h.http.get(url).bearer_auth(&b.token);
        tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
    };
    let mut publishes = Vec::new();
    for i in 0..20 {
        let body =
            serde_json::Value::Object(signed(&h, &a, &b.address, &format!("{i}"))).to_string();
        let req = h
            .http
            .post(format!("{}/v1/messages", h.url))
            .bearer_auth(&a.token)
            .body(body);
        publishes.push(tokio::spawn(async move {
            req.send().await.map(|r| r.status().as_u16())
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let (dir, clock, tmp) = h.stop().await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the long-poll did not hold the shutdown"
    );
    assert_eq!(poll.await.unwrap().unwrap(), 200);
    let mut accepted = 0;
    for p in publishes {
        // Every publish the server took is answered; none is cut off mid-request.
        if let Ok(status) = p.await.unwrap() {
            assert_eq!(status, 202);
            accepted += 1;
        }
    }
    // What was acknowledged with 202 is there after a restart.
    let h = Harness::start_in(dir, Some(clock)).await;
    let mut b2 = b.clone();
    b2.token = b.token.clone();
    assert_eq!(h.poll(&b2, 0, 0).await.len(), accepted);
    drop(tmp);
}
