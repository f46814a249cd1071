//! Conversations (§7): read per message. A `conversation_id` is a label, not a
//! membership: anyone may write it, and nobody reads an envelope it neither sent nor received,
//! except an admin whose scope covers a party's workspace.

use serde_json::{Value, json};

use crate::support::*;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

fn in_conversation(
    h: &Harness,
    from: &Agent,
    to: &str,
    cnv: &str,
    text: &str,
) -> serde_json::Map<String, Value> {
    let mut m = message(h, from, to, text);
    m["conversation_id"] = json!(cnv);
    sign(from, m)
}

/// The texts of a conversation as `token` reads it, or the error status and code.
async fn view(h: &Harness, cnv: &str, token: &str) -> Result<Vec<String>, (u16, String)> {
    let (s, v) = h.get(&format!("/v1/conversations/{cnv}"), token).await;
    if s != 200 {
        return Err((s, code(&v).to_owned()));
    }
    Ok(v["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["text"].as_str().unwrap_or_default().to_owned())
        .collect())
}

/// The conversation-label attack: a non-party writes the victims' `conversation_id` to its own peer,
/// from the victims' workspace and from another workspace of the tenant. Nobody's view gains
/// anything it did not send or receive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_7_6_conversations_are_read_per_message() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let (s, _) = h
        .post("/v1/workspaces", &h.admin, json!({"slug": "elsewhere"}))
        .await;
    assert_eq!(s, 201);
    let x = h.agent("intruder").await;
    let x_peer = h.agent("accomplice").await;
    let y = h
        .register(&h.admin, "far-intruder", json!({"workspace": "elsewhere"}))
        .await;
    let y_peer = h
        .register(
            &h.admin,
            "far-accomplice",
            json!({"workspace": "elsewhere"}),
        )
        .await;
    let cnv = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string();
    for (from, to, text) in [
        (&alpha, &bravo, "secret one"),
        (&bravo, &alpha, "secret two"),
    ] {
        let env = in_conversation(&h, from, &to.address, &cnv, text);
        assert_eq!(h.publish(from, &env).await.0, 202);
    }
    // Joining is accepted (docs/protocol.md, "Conversations"): the message goes where it is sent.
    for (from, to, text) in [(&x, &x_peer, "intruder x"), (&y, &y_peer, "intruder y")] {
        let env = in_conversation(&h, from, &to.address, &cnv, text);
        assert_eq!(h.publish(from, &env).await.0, 202);
    }
    let secrets = vec!["secret one".to_owned(), "secret two".to_owned()];
    assert_eq!(
        view(&h, &cnv, &alpha.token).await.unwrap(),
        secrets,
        "WP-7-6: in received_at order"
    );
    assert_eq!(view(&h, &cnv, &bravo.token).await.unwrap(), secrets);
    assert_eq!(view(&h, &cnv, &x.token).await.unwrap(), ["intruder x"]);
    assert_eq!(
        view(&h, &cnv, &x_peer.token).await.unwrap(),
        ["intruder x"],
        "received"
    );
    assert_eq!(view(&h, &cnv, &y.token).await.unwrap(), ["intruder y"]);
    // An agent with nothing in it gets exactly what an unknown conversation gets.
    let nobody = h.agent("nobody").await;
    let unknown = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string();
    assert_eq!(
        view(&h, &cnv, &nobody.token).await,
        view(&h, &unknown, &nobody.token).await
    );
    assert_eq!(
        view(&h, &cnv, &nobody.token).await,
        Err((404, "AB-4004".into()))
    );
    // The console's views: a tenant admin reads all of it, a workspace admin what its
    // workspace's agents sent or received, a member nothing (AB-1002, whatever the id).
    assert_eq!(
        view(&h, &cnv, &h.admin).await.unwrap(),
        ["secret one", "secret two", "intruder x", "intruder y"]
    );
    let (_, far_admin) = h
        .post(
            "/v1/users",
            &h.admin,
            json!({"role": "admin", "workspace": "elsewhere"}),
        )
        .await;
    let far_admin = far_admin["token"].as_str().unwrap();
    assert_eq!(view(&h, &cnv, far_admin).await.unwrap(), ["intruder y"]);
    let (_, member) = h
        .post("/v1/users", &h.admin, json!({"role": "member"}))
        .await;
    let member = member["token"].as_str().unwrap();
    assert_eq!(view(&h, &cnv, member).await, Err((403, "AB-1002".into())));
    assert_eq!(
        view(&h, &unknown, member).await,
        Err((403, "AB-1002".into()))
    );
}

/// A reply to the intruder's message stays between the two of them; the victims' view keeps only
/// what they exchanged even when the intruder writes to a victim directly (that victim received it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_7_1_a_message_written_to_a_party_is_that_partys_and_no_one_elses() {
    let h = Harness::start().await;
    let alpha = h.agent("alpha").await;
    let bravo = h.agent("bravo").await;
    let x = h.agent("intruder").await;
    let cnv = agentbus_runtime::mint(agentbus_protocol::ids::IdKind::Conversation).to_string();
    let env = in_conversation(&h, &alpha, &bravo.address, &cnv, "between us");
    assert_eq!(h.publish(&alpha, &env).await.0, 202);
    let env = in_conversation(&h, &x, &alpha.address, &cnv, "hello alpha");
    assert_eq!(h.publish(&x, &env).await.0, 202);
    assert_eq!(
        view(&h, &cnv, &alpha.token).await.unwrap(),
        ["between us", "hello alpha"]
    );
    assert_eq!(view(&h, &cnv, &bravo.token).await.unwrap(), ["between us"]);
    assert_eq!(view(&h, &cnv, &x.token).await.unwrap(), ["hello alpha"]);
}
