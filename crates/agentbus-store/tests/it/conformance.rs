//! The test bodies, each over any [`Store`]; `main.rs` runs each against both backends.

use std::collections::{BTreeMap, BTreeSet};

use agentbus_store::*;

use crate::fixtures::*;

/// Spawns `n` tasks running `f(store, i)` and answers their results in order.
async fn race<S, T, F, Fut>(store: &S, n: usize, f: F) -> Vec<T>
where
    S: Store + Clone,
    T: Send + 'static,
    F: Fn(S, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let handles: Vec<_> = (0..n).map(|i| tokio::spawn(f(store.clone(), i))).collect();
    let mut out = Vec::with_capacity(n);
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// The key before every owed notice's (`Store::pending_notices`).
static FIRST: std::sync::LazyLock<(String, u64)> = std::sync::LazyLock::new(|| (String::new(), 0));

async fn base(store: &impl Store) {
    store
        .create_tenant(tenant("ten_1", "acme"))
        .await
        .expect("tenant");
    store
        .create_workspace(workspace("ws_1", "ten_1", "main"))
        .await
        .expect("workspace");
}

pub async fn store_identity_rows<S: Store + Clone>(store: S) {
    base(&store).await;
    assert_eq!(
        store.tenant("ten_1").await.unwrap(),
        Some(tenant("ten_1", "acme"))
    );
    assert_eq!(
        store.tenant_by_slug("acme").await.unwrap().map(|t| t.id),
        Some("ten_1".into())
    );
    assert_eq!(store.tenant("ten_x").await.unwrap(), None);
    assert!(matches!(
        store.create_tenant(tenant("ten_2", "acme")).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .create_workspace(workspace("ws_2", "ten_1", "main"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    store
        .create_workspace(workspace("ws_0", "ten_1", "alpha"))
        .await
        .unwrap();
    let slugs: Vec<String> = store
        .workspaces("ten_1")
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.slug)
        .collect();
    assert_eq!(slugs, ["alpha", "main"]);
    assert_eq!(
        store
            .workspace_by_slug("ten_1", "main")
            .await
            .unwrap()
            .map(|w| w.id),
        Some("ws_1".into())
    );
    store
        .set_workspace_policy("ws_1", "{\"deny\":[]}".into())
        .await
        .unwrap();
    assert_eq!(
        store.workspace("ws_1").await.unwrap().unwrap().policy,
        "{\"deny\":[]}"
    );
    assert!(matches!(
        store.set_workspace_policy("ws_x", "{}".into()).await,
        Err(StoreError::NotFound)
    ));
    // Users: the first ever created is found whatever the role order.
    store
        .create_user(user("usr_b", Role::Member, T0 + 5))
        .await
        .unwrap();
    store
        .create_user(user("usr_a", Role::Operator, T0 + 5))
        .await
        .unwrap();
    store
        .create_user(user("usr_c", Role::Operator, T0 + 1))
        .await
        .unwrap();
    assert_eq!(
        store.first_user().await.unwrap().map(|u| u.id),
        Some("usr_c".into())
    );
    let ops: Vec<String> = store
        .users_with_role(Role::Operator)
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(ops, ["usr_c", "usr_a"]);
    assert_eq!(
        store.user("usr_b").await.unwrap().unwrap().role,
        Role::Member
    );
    // Tokens: stored by hash; replacing revokes every other token of the subject.
    let subject = TokenSubject::User("usr_b".into());
    store.create_token(token(1, subject.clone())).await.unwrap();
    store.create_token(token(2, subject.clone())).await.unwrap();
    store
        .create_token(token(3, TokenSubject::Agent("usr_b".into())))
        .await
        .unwrap();
    assert_eq!(
        store.token([1; 32]).await.unwrap(),
        Some(token(1, subject.clone()))
    );
    assert_eq!(
        store
            .replace_tokens(token(4, subject.clone()))
            .await
            .unwrap(),
        2
    );
    assert_eq!(store.token([1; 32]).await.unwrap(), None);
    assert_eq!(store.token([2; 32]).await.unwrap(), None);
    assert!(
        store.token([3; 32]).await.unwrap().is_some(),
        "an agent token of the same id stays"
    );
    assert!(store.token([4; 32]).await.unwrap().is_some());
    // Suspension.
    store
        .set_tenant_suspended("ten_1", Some(T0 + 9))
        .await
        .unwrap();
    assert_eq!(
        store.tenant("ten_1").await.unwrap().unwrap().suspended_at,
        Some(T0 + 9)
    );
    store.set_tenant_suspended("ten_1", None).await.unwrap();
    assert_eq!(
        store.tenant("ten_1").await.unwrap().unwrap().suspended_at,
        None
    );
    assert!(matches!(
        store.set_tenant_suspended("ten_x", None).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.tenants().await.unwrap().len(), 1);
    store.check_ready().await.expect("ready");
}

pub async fn store_provision_is_all_or_nothing<S: Store + Clone>(store: S) {
    base(&store).await;
    let t = |slug: &str| tenant(&format!("ten_{slug}"), slug);
    let u = UserRow {
        tenant_id: "ten_beta".into(),
        workspace_id: "ws_beta".into(),
        ..user("usr_beta", Role::TenantAdmin, T0)
    };
    store
        .provision_tenant(
            t("beta"),
            workspace("ws_beta", "ten_beta", "main"),
            u.clone(),
            token(5, TokenSubject::User("usr_beta".into())),
        )
        .await
        .unwrap();
    assert!(store.workspace("ws_beta").await.unwrap().is_some());
    assert!(store.token([5; 32]).await.unwrap().is_some());
    // A taken slug refuses the whole provisioning: no workspace, user or token of it is stored.
    let refused = store
        .provision_tenant(
            tenant("ten_other", "beta"),
            workspace("ws_other", "ten_other", "main"),
            UserRow {
                id: "usr_other".into(),
                ..u
            },
            token(6, TokenSubject::User("usr_other".into())),
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(store.workspace("ws_other").await.unwrap().is_none());
    assert!(store.user("usr_other").await.unwrap().is_none());
    assert!(store.token([6; 32]).await.unwrap().is_none());
}

pub async fn store_agents_aliases_and_keys<S: Store + Clone>(store: S) {
    base(&store).await;
    store
        .create_agent(agent("agt_a", "alice"), vec!["al".into(), "ally".into()])
        .await
        .unwrap();
    assert_eq!(store.aliases("agt_a").await.unwrap(), ["al", "ally"]);
    for name in ["alice", "al", "ally"] {
        assert_eq!(
            store
                .agent_by_name("ws_1", name)
                .await
                .unwrap()
                .map(|a| a.id),
            Some("agt_a".into()),
            "{name}"
        );
    }
    // A name equal to a live name or alias, and an alias equal to a live name, are refused.
    assert!(matches!(
        store.create_agent(agent("agt_b", "alice"), vec![]).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.create_agent(agent("agt_b", "al"), vec![]).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store
            .create_agent(agent("agt_b", "bob"), vec!["alice".into()])
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(
        store.agent("agt_b").await.unwrap().is_none(),
        "a refused create stores nothing"
    );
    store
        .create_agent(agent("agt_b", "bob"), vec!["bobby".into()])
        .await
        .unwrap();
    // Concurrent creates of one name: exactly one wins.
    let results = race(&store, 6, |s, i| async move {
        s.create_agent(agent(&format!("agt_c{i}"), "carol"), vec![])
            .await
    })
    .await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    // Updating the card and the aliases.
    let mut a = agent("agt_b", "bob");
    a.card = "{\"description\":\"reviews\"}".into();
    a.updated_at = T0 + 1;
    store
        .update_agent(a.clone(), Some(vec!["robert".into()]))
        .await
        .unwrap();
    assert_eq!(store.aliases("agt_b").await.unwrap(), ["robert"]);
    assert_eq!(store.agent("agt_b").await.unwrap().unwrap().card, a.card);
    assert!(
        store
            .agent_by_name("ws_1", "bobby")
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        store.update_agent(a.clone(), Some(vec!["al".into()])).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.aliases("agt_b").await.unwrap(),
        ["robert"],
        "a refused update changes nothing"
    );
    assert!(matches!(
        store.update_agent(agent("agt_x", "x"), None).await,
        Err(StoreError::NotFound)
    ));
    let names: Vec<String> = store
        .agents("ten_1")
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["alice", "bob", "carol"]);
    // Keys: at most `max_active` active ones, counted at `now`.
    store
        .add_key(key("key_1", "agt_a", T0 + DAY), 2, T0)
        .await
        .unwrap();
    store
        .add_key(key("key_2", "agt_a", T0 + 10), 2, T0)
        .await
        .unwrap();
    assert!(matches!(
        store.add_key(key("key_3", "agt_a", T0 + DAY), 2, T0).await,
        Err(StoreError::Limit(_))
    ));
    store
        .add_key(key("key_3", "agt_a", T0 + DAY), 2, T0 + 10)
        .await
        .expect("key_2 expired");
    store.revoke_key("agt_a", "key_1", T0 + 20).await.unwrap();
    store.revoke_key("agt_a", "key_1", T0 + 30).await.unwrap();
    assert_eq!(
        store.key("key_1").await.unwrap().unwrap().revoked_at,
        Some(T0 + 20),
        "the first revocation stands"
    );
    assert!(matches!(
        store.revoke_key("agt_b", "key_3", T0).await,
        Err(StoreError::NotFound)
    ));
    let ids: Vec<String> = store
        .keys("agt_a")
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.id)
        .collect();
    assert_eq!(ids, ["key_1", "key_2", "key_3"]);
    // Racing registrations for the last slot: one wins.
    store
        .create_agent(agent("agt_k", "keys"), vec![])
        .await
        .unwrap();
    let results = race(&store, 6, |s, i| async move {
        s.add_key(key(&format!("key_k{i}"), "agt_k", T0 + DAY), 3, T0)
            .await
    })
    .await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        3,
        "{results:?}"
    );
}

pub async fn store_delete_and_suspend_agents<S: Store + Clone>(store: S) {
    base(&store).await;
    store
        .create_agent(agent("agt_a", "alice"), vec!["al".into()])
        .await
        .unwrap();
    store
        .create_agent(agent("agt_b", "bob"), vec![])
        .await
        .unwrap();
    for i in 0..3 {
        stored(&store, msg("agt_a", &format!("m{i}"), &["agt_b"], T0)).await;
    }
    store.lease(lease_req("agt_b", 0, 1, T0)).await.unwrap();
    // Suspension holds the inbox and answers it (each entry owing its sender AB-4013);
    // suspending again owes nothing more and answers none.
    let held = store.suspend_agent("agt_b", T0 + 1).await.unwrap();
    assert_eq!(
        held.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(held[0].state, EntryState::Leased);
    assert_eq!(store.suspend_agent("agt_b", T0 + 2).await.unwrap(), []);
    assert_eq!(
        store.agent("agt_b").await.unwrap().unwrap().suspended_at,
        Some(T0 + 1)
    );
    store.resume_agent("agt_b").await.unwrap();
    assert_eq!(
        store.agent("agt_b").await.unwrap().unwrap().suspended_at,
        None
    );
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 3);
    // Deletion dead-letters the pending inbox, frees the name and answers the entries.
    store.subscribe("ws_1", "news", "agt_b", T0).await.unwrap();
    let dead = store.delete_agent("agt_b", T0 + 3).await.unwrap();
    assert_eq!(
        dead.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(dead[1].message.id, "m1");
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 0);
    assert!(
        store
            .topic("ws_1", "news")
            .await
            .unwrap()
            .unwrap()
            .1
            .is_empty()
    );
    assert!(matches!(
        store.delete_agent("agt_b", T0 + 4).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.suspend_agent("agt_b", T0 + 4).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store
            .agent_by_name("ws_1", "bob")
            .await
            .unwrap()
            .and_then(|a| a.deleted_at),
        Some(T0 + 3),
        "a deleted agent is still found by name (AB-4003)"
    );
    store
        .create_agent(agent("agt_b2", "bob"), vec![])
        .await
        .expect("the name is free again");
    assert_eq!(
        store
            .agent_by_name("ws_1", "bob")
            .await
            .unwrap()
            .map(|a| a.id),
        Some("agt_b2".into())
    );
}

pub async fn store_topics<S: Store + Clone>(store: S) {
    base(&store).await;
    // Concurrent first subscriptions create the topic once.
    let rows = race(&store, 5, |s, i| async move {
        s.subscribe("ws_1", "news", &format!("agt_{i}"), T0 + i as i64)
            .await
    })
    .await;
    let ids: BTreeSet<String> = rows.into_iter().map(|r| r.unwrap().id).collect();
    assert_eq!(ids.len(), 1);
    store
        .subscribe("ws_1", "news", "agt_0", T0)
        .await
        .expect("subscribing twice is harmless");
    store
        .subscribe("ws_1", "alerts", "agt_1", T0)
        .await
        .unwrap();
    let (topic, subs) = store.topic("ws_1", "news").await.unwrap().unwrap();
    assert_eq!(topic.name, "news");
    assert_eq!(subs, ["agt_0", "agt_1", "agt_2", "agt_3", "agt_4"]);
    store.unsubscribe("ws_1", "news", "agt_3").await.unwrap();
    store.unsubscribe("ws_1", "nothing", "agt_3").await.unwrap();
    let counts: Vec<(String, u64)> = store
        .topics("ws_1")
        .await
        .unwrap()
        .into_iter()
        .map(|(t, n)| (t.name, n))
        .collect();
    assert_eq!(counts, [("alerts".to_string(), 1), ("news".to_string(), 4)]);
    assert!(store.topic("ws_1", "nothing").await.unwrap().is_none());
}

/// WP-2.1-24, WP-7-5: 8 publishers at once into two shared inboxes (half of them naming the
/// inboxes in the opposite order): every inbox's sequences are exactly 1..=N, each message
/// holds one sequence per inbox, and each publisher's messages are in its own order.
pub async fn wp_2_1_24_concurrent_publishers_get_gap_free_sequences<S: Store + Clone>(store: S) {
    base(&store).await;
    const PUBLISHERS: usize = 8;
    const EACH: usize = 25;
    let results = race(&store, PUBLISHERS, |s, p| async move {
        let to: &[&str] = if p % 2 == 0 {
            &["agt_x", "agt_y"]
        } else {
            &["agt_y", "agt_x"]
        };
        let mut got = Vec::new();
        for i in 0..EACH {
            let (m, seqs) = stored(
                &s,
                msg(
                    &format!("agt_p{p}"),
                    &format!("m{p}_{i}"),
                    to,
                    T0 + i as i64,
                ),
            )
            .await;
            got.push((m.id, seqs));
        }
        got
    })
    .await;
    let total = (PUBLISHERS * EACH) as u64;
    let mut per_inbox: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for got in &results {
        let mut last: BTreeMap<String, u64> = BTreeMap::new();
        for (_, seqs) in got {
            assert_eq!(seqs.len(), 2);
            for (agent, seq) in seqs {
                per_inbox.entry(agent.clone()).or_default().push(*seq);
                let before = last.insert(agent.clone(), *seq).unwrap_or(0);
                assert!(
                    *seq > before,
                    "one publisher's messages keep their order (WP-7-5)"
                );
            }
        }
    }
    for (agent, mut seqs) in per_inbox {
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=total).collect::<Vec<_>>(),
            "{agent}: no gap, no duplicate"
        );
        assert_eq!(store.pending_count(&agent).await.unwrap(), total);
    }
    // What is stored agrees with what the publishers were told.
    let leased = store
        .lease(lease_req("agt_x", 0, 1000, T0 + 100))
        .await
        .unwrap();
    let seqs: Vec<u64> = leased.iter().map(|d| d.sequence).collect();
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>());
}

pub async fn wp_4_2_3_topic_fan_out_takes_each_inbox_next_sequence<S: Store + Clone>(store: S) {
    base(&store).await;
    stored(&store, msg("agt_a", "first", &["agt_s2"], T0)).await;
    let (_, seqs) = stored(
        &store,
        msg("agt_a", "fan", &["agt_s1", "agt_s2", "agt_s3"], T0),
    )
    .await;
    assert_eq!(
        seqs,
        [
            ("agt_s1".to_string(), 1),
            ("agt_s2".to_string(), 2),
            ("agt_s3".to_string(), 1)
        ]
    );
}

/// WP-3.2-6: 8 concurrent publishes of one `(source, id)`: one copy stored, the others told
/// it is a duplicate of that copy.
pub async fn wp_3_2_6_concurrent_duplicate_ids_store_one_copy<S: Store + Clone>(store: S) {
    base(&store).await;
    let outcomes = race(&store, 8, |s, _| async move {
        s.publish(msg("agt_a", "same", &["agt_b"], T0))
            .await
            .unwrap()
    })
    .await;
    let stored_seq: Vec<i64> = outcomes
        .iter()
        .filter_map(|o| match o {
            PublishOutcome::Stored { message, .. } => Some(message.seq),
            _ => None,
        })
        .collect();
    assert_eq!(stored_seq.len(), 1, "{outcomes:?}");
    for o in &outcomes {
        match o {
            PublishOutcome::Stored { .. } => {}
            PublishOutcome::DuplicateId(m) => assert_eq!(m.seq, stored_seq[0]),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 1);
    let found = store
        .recent_message("ten_1", "agent://acme/main/agt_a", "same", T0 - DAY)
        .await
        .unwrap();
    assert_eq!(found.map(|m| m.seq), Some(stored_seq[0]));
}

/// WP-8-3: 8 concurrent publishes with different ids and one idempotency key: one copy, the
/// others answered with it.
pub async fn wp_8_3_concurrent_idempotent_publishes_store_one_copy<S: Store + Clone>(store: S) {
    base(&store).await;
    let key = IdempotencyKey {
        tenant_id: "ten_1".into(),
        source: "agent://acme/main/agt_a".into(),
        to_id: "agt_b".into(),
        key: "k1".into(),
    };
    let outcomes = race(&store, 8, |s, i| {
        let key = key.clone();
        async move {
            let mut m = msg("agt_a", &format!("m{i}"), &["agt_b"], T0);
            m.idempotency = Some(key);
            s.publish(m).await.unwrap()
        }
    })
    .await;
    let originals: Vec<&MessageRow> = outcomes
        .iter()
        .filter_map(|o| match o {
            PublishOutcome::Stored { message, .. } => Some(message),
            _ => None,
        })
        .collect();
    assert_eq!(originals.len(), 1, "{outcomes:?}");
    assert_eq!(originals[0].idempotency_key.as_deref(), Some("k1"));
    for o in &outcomes {
        if let PublishOutcome::IdempotentReplay(m) = o {
            assert_eq!(m.receipt, originals[0].receipt);
        } else {
            assert!(matches!(o, PublishOutcome::Stored { .. }), "{o:?}");
        }
    }
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 1);
    assert_eq!(
        store
            .idempotent_message(&key, T0 - DAY)
            .await
            .unwrap()
            .map(|m| m.receipt),
        Some(originals[0].receipt.clone())
    );
}

/// WP-8-2 (and the 24 h replay window of WP-3.2-6): the windows the caller passes are decided
/// in the storing transaction; past them the same id or key stores a new message.
pub async fn wp_8_2_replay_windows_are_decided_by_the_store<S: Store + Clone>(store: S) {
    base(&store).await;
    let (first, _) = stored(&store, msg("agt_a", "m", &["agt_b"], T0)).await;
    let mut again = msg("agt_a", "m", &["agt_b"], T0 + DAY);
    again.receipt = "rcp_m_again".into();
    assert!(
        matches!(store.publish(again.clone()).await.unwrap(), PublishOutcome::DuplicateId(m) if m.seq == first.seq)
    );
    again.replay_since = T0 + 1;
    let (second, seqs) = stored(&store, again).await;
    assert_ne!(second.seq, first.seq);
    assert_eq!(seqs, [("agt_b".to_string(), 2)]);
    assert_eq!(
        store
            .recent_message("ten_1", &first.source, "m", T0)
            .await
            .unwrap()
            .map(|m| m.seq),
        Some(second.seq),
        "the dedupe now names the newer copy"
    );
    let key = IdempotencyKey {
        tenant_id: "ten_1".into(),
        source: first.source.clone(),
        to_id: "agt_b".into(),
        key: "k".into(),
    };
    let mut k1 = msg("agt_a", "k1", &["agt_b"], T0);
    k1.idempotency = Some(key.clone());
    stored(&store, k1).await;
    let mut k2 = msg("agt_a", "k2", &["agt_b"], T0 + 7 * DAY + 1);
    k2.idempotency = Some(key.clone());
    k2.idempotency_since = T0 + 1;
    stored(&store, k2).await;
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 4);
}

/// An inbox's depth limit holds under concurrent publishers, and a refused publish stores
/// nothing and takes no sequence.
pub async fn store_inbox_depth_is_checked_inside_the_transaction<S: Store + Clone>(store: S) {
    base(&store).await;
    let outcomes = race(&store, 8, |s, p| async move {
        let mut out = Vec::new();
        for i in 0..3 {
            let mut m = msg("agt_a", &format!("m{p}_{i}"), &["agt_b"], T0);
            m.max_depth = Some(5);
            out.push(s.publish(m).await.unwrap());
        }
        out
    })
    .await;
    let all: Vec<PublishOutcome> = outcomes.into_iter().flatten().collect();
    let mut seqs: Vec<u64> = all
        .iter()
        .filter_map(|o| match o {
            PublishOutcome::Stored { sequences, .. } => Some(sequences[0].1),
            _ => None,
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    for o in &all {
        if let PublishOutcome::InboxFull { agent_id, depth } = o {
            assert_eq!((agent_id.as_str(), *depth), ("agt_b", 5));
        }
    }
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 5);
    let (_, seqs) = stored(&store, msg("agt_a", "after", &["agt_b"], T0)).await;
    assert_eq!(
        seqs,
        [("agt_b".to_string(), 6)],
        "refusals took no sequence"
    );
    // Of two recipients, a full one refuses the message for both.
    let mut m = msg("agt_a", "both", &["agt_c", "agt_b"], T0);
    m.max_depth = Some(6);
    assert!(
        matches!(store.publish(m).await.unwrap(), PublishOutcome::InboxFull { agent_id, depth: 6 } if agent_id == "agt_b")
    );
    assert_eq!(store.pending_count("agt_c").await.unwrap(), 0);
}

/// 8 concurrent leasers drain one inbox of 120 entries: each entry handed out exactly once.
pub async fn store_a_lease_is_never_handed_out_twice<S: Store + Clone>(store: S) {
    base(&store).await;
    for i in 0..120 {
        stored(&store, msg("agt_a", &format!("m{i}"), &["agt_b"], T0)).await;
    }
    let got = race(&store, 8, |s, _| async move {
        let mut mine = Vec::new();
        loop {
            let batch = s.lease(lease_req("agt_b", 0, 7, T0 + 1)).await.unwrap();
            if batch.is_empty() {
                break;
            }
            mine.extend(batch.into_iter().map(|d| (d.sequence, d.token, d.attempt)));
        }
        mine
    })
    .await;
    let all: Vec<(u64, String, u32)> = got.into_iter().flatten().collect();
    let seqs: BTreeSet<u64> = all.iter().map(|d| d.0).collect();
    assert_eq!(all.len(), 120, "no entry leased twice");
    assert_eq!(seqs, (1..=120).collect());
    assert!(all.iter().all(|d| d.2 == 1));
    let tokens: BTreeSet<&String> = all.iter().map(|d| &d.1).collect();
    assert_eq!(tokens.len(), 120);
    // Racers whose cursors differ take each entry once too, above their cursor as new and below
    // it as stranded (visible for the visibility timeout, as after a lost lease).
    for i in 0..120 {
        stored(&store, msg("agt_a", &format!("c{i}"), &["agt_c"], T0)).await;
    }
    let got = race(&store, 8, |s, i| async move {
        let mut mine = Vec::new();
        loop {
            let req = lease_req("agt_c", 15 * i as u64, 7, T0 + 30_000);
            let batch = s.lease(req).await.unwrap();
            if batch.is_empty() {
                break;
            }
            mine.extend(batch.into_iter().map(|d| d.sequence));
        }
        mine
    })
    .await;
    let mut all: Vec<u64> = got.into_iter().flatten().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=120).collect::<Vec<u64>>(), "each leased once");
    // Every lease is in effect: nothing more is deliverable until they run out.
    assert!(
        store
            .lease(lease_req("agt_b", 0, 100, T0 + 2))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.next_visible("agt_b").await.unwrap(),
        Some(T0 + 1 + 30_000)
    );
    // `after` skips never-delivered entries at or below it, not expired leases.
    stored(&store, msg("agt_a", "late", &["agt_b"], T0)).await;
    assert!(
        store
            .lease(lease_req("agt_b", 121, 10, T0 + 3))
            .await
            .unwrap()
            .is_empty()
    );
    let later = store
        .lease(lease_req("agt_b", 120, 200, T0 + 1 + 30_000))
        .await
        .unwrap();
    assert_eq!(later.len(), 121);
    assert!(later[..120].iter().all(|d| d.attempt == 2));
    assert_eq!(later[120].message.data, b"late");
}

/// Acks: only the current lease's token settles an entry; an ack after a redelivery, a wrong
/// token and an unknown sequence are stale; acking twice is harmless.
pub async fn store_acks_with_stale_tokens<S: Store + Clone>(store: S) {
    base(&store).await;
    stored(&store, msg("agt_a", "m1", &["agt_b"], T0)).await;
    stored(&store, msg("agt_a", "m2", &["agt_b"], T0)).await;
    let first = store.lease(lease_req("agt_b", 0, 1, T0)).await.unwrap();
    assert_eq!(first.len(), 1);
    let old = first[0].token.clone();
    assert_eq!(
        store
            .ack("agt_b", vec![(1, "bogus".into()), (9, old.clone())], T0)
            .await
            .unwrap(),
        [AckOutcome::Stale, AckOutcome::Stale]
    );
    // The lease runs out and the entry is redelivered with a new token.
    let second = store
        .lease(lease_req("agt_b", 1, 1, T0 + 30_000))
        .await
        .unwrap();
    assert_eq!((second[0].sequence, second[0].attempt), (1, 2));
    assert_ne!(second[0].token, old);
    let new = second[0].token.clone();
    assert_eq!(
        store
            .ack(
                "agt_b",
                vec![(1, old), (1, new.clone()), (1, new.clone())],
                T0 + 30_001
            )
            .await
            .unwrap(),
        [
            AckOutcome::Stale,
            AckOutcome::Acked,
            AckOutcome::AlreadyAcked
        ]
    );
    assert_eq!(
        store
            .ack("agt_b", vec![(1, new)], T0 + 30_002)
            .await
            .unwrap(),
        [AckOutcome::AlreadyAcked]
    );
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 1, "acked once");
    // Another inbox's ack cannot settle this one's entry.
    let m2 = store
        .lease(lease_req("agt_b", 1, 1, T0 + 30_003))
        .await
        .unwrap();
    assert_eq!(
        store
            .ack("agt_c", vec![(2, m2[0].token.clone())], T0)
            .await
            .unwrap(),
        [AckOutcome::Stale]
    );
    // Concurrent acks of one delivery: one settles it.
    let token = m2[0].token.clone();
    let outcomes = race(&store, 6, |s, _| {
        let token = token.clone();
        async move { s.ack("agt_b", vec![(2, token)], T0 + 30_004).await.unwrap()[0] }
    })
    .await;
    assert_eq!(
        outcomes.iter().filter(|o| **o == AckOutcome::Acked).count(),
        1
    );
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 0);
}

pub async fn store_release_returns_leases<S: Store + Clone>(store: S) {
    base(&store).await;
    stored(&store, msg("agt_a", "m1", &["agt_b"], T0)).await;
    let d = store
        .lease(lease_req("agt_b", 0, 1, T0))
        .await
        .unwrap()
        .remove(0);
    // Uncounted: deliverable again at once as a first delivery.
    store
        .release("agt_b", vec![(1, d.token.clone())], T0 + 1, true)
        .await
        .unwrap();
    let again = store
        .lease(lease_req("agt_b", 0, 1, T0 + 1))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(again.attempt, 1);
    // A stale token releases nothing.
    store
        .release("agt_b", vec![(1, d.token)], T0 + 2, false)
        .await
        .unwrap();
    assert!(
        store
            .lease(lease_req("agt_b", 0, 1, T0 + 2))
            .await
            .unwrap()
            .is_empty()
    );
    // Counted: deliverable at once, the attempt kept.
    store
        .release("agt_b", vec![(1, again.token.clone())], T0 + 3, false)
        .await
        .unwrap();
    assert_eq!(
        store
            .ack("agt_b", vec![(1, again.token)], T0 + 3)
            .await
            .unwrap(),
        [AckOutcome::Stale],
        "a released token is no longer current"
    );
    let third = store
        .lease(lease_req("agt_b", 1, 1, T0 + 3))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(third.attempt, 2);
}

/// A never-delivered entry below a receiver's cursor (its lease write lost in a crash after the
/// frame left, or given back after the cursor passed it) is leased again once it has been
/// visible for a lease's length, never before and never twice, rather than stranded below every
/// cursor until it expires (a receiver that acked it on a lost lease would otherwise see it
/// dead-lettered). Given back here through `release`, the one way the contract can make one.
pub async fn store_a_lease_lost_below_the_cursor_is_leased_again<S: Store + Clone>(store: S) {
    base(&store).await;
    for id in ["m1", "m2", "m3"] {
        stored(&store, msg("agt_a", id, &["agt_b"], T0)).await;
    }
    let first = store.lease(lease_req("agt_b", 0, 3, T0)).await.unwrap();
    assert_eq!(first.len(), 3);
    // Entry 2's lease is gone, as after the crash; the receiver's cursor is at 3.
    store
        .release("agt_b", vec![(2, first[1].token.clone())], T0 + 10, true)
        .await
        .unwrap();
    let others = vec![(1, first[0].token.clone()), (3, first[2].token.clone())];
    store.ack("agt_b", others, T0 + 10).await.unwrap();
    let at = |now| lease_req("agt_b", 3, 10, now);
    assert!(
        store.lease(at(T0 + 10)).await.unwrap().is_empty(),
        "the receiver may hold it: not before a lease's length"
    );
    assert!(store.lease(at(T0 + 10 + 29_999)).await.unwrap().is_empty());
    let again = store.lease(at(T0 + 10 + 30_000)).await.unwrap();
    let got: Vec<(u64, u32)> = again.iter().map(|d| (d.sequence, d.attempt)).collect();
    assert_eq!(got, [(2, 1)]);
    assert!(
        store.lease(at(T0 + 10 + 30_000)).await.unwrap().is_empty(),
        "and once"
    );
    assert_eq!(
        store
            .ack("agt_b", vec![(2, again[0].token.clone())], T0 + 30_020)
            .await
            .unwrap(),
        [AckOutcome::Acked]
    );
}

/// The reaper dead-letters leases out of attempts and expires what outlived its message;
/// concurrent reapers (replicas) settle each entry once.
pub async fn store_reaper_settles_each_entry_once<S: Store + Clone>(store: S) {
    base(&store).await;
    stored(&store, msg("agt_a", "tired", &["agt_b"], T0)).await;
    let mut short = msg("agt_a", "short", &["agt_b"], T0);
    short.expires_at = T0 + 1000;
    stored(&store, short).await;
    let mut req = lease_req("agt_b", 0, 1, T0);
    req.max_attempts = 2;
    store.lease(req.clone()).await.unwrap();
    req.now = T0 + 30_000;
    let again = store.lease(req.clone()).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|d| (d.sequence, d.attempt))
            .collect::<Vec<_>>(),
        [(1, 2)]
    );
    let report = store.reap_inboxes(T0 + 60_000, 2).await.unwrap();
    assert_eq!(
        report
            .dead
            .iter()
            .map(|e| (e.message.id.as_str(), e.attempts))
            .collect::<Vec<_>>(),
        [("tired", 2)]
    );
    assert_eq!(
        report
            .expired
            .iter()
            .map(|e| e.message.id.as_str())
            .collect::<Vec<_>>(),
        ["short"]
    );
    assert_eq!(
        report.expired[0].state,
        EntryState::Ready,
        "answered as it was"
    );
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 0);
    assert_eq!(
        store.reap_inboxes(T0 + 60_000, 2).await.unwrap(),
        ReapReport::default()
    );
    // Many expired entries over several inboxes, four reapers at once.
    for i in 0..60 {
        let mut m = msg("agt_a", &format!("x{i}"), &[&format!("agt_r{}", i % 5)], T0);
        m.expires_at = T0 + 10;
        stored(&store, m).await;
    }
    let reports = race(&store, 4, |s, _| async move {
        s.reap_inboxes(T0 + 100, 5).await.unwrap()
    })
    .await;
    let mut settled: Vec<(String, u64)> = reports
        .iter()
        .flat_map(|r| r.expired.iter().map(|e| (e.agent_id.clone(), e.sequence)))
        .collect();
    let n = settled.len();
    settled.sort();
    settled.dedup();
    assert_eq!(n, settled.len(), "no entry settled twice");
    let rest = store.reap_inboxes(T0 + 100, 5).await.unwrap().expired.len();
    assert_eq!(n + rest, 60);
    for i in 0..5 {
        assert_eq!(store.pending_count(&format!("agt_r{i}")).await.unwrap(), 0);
    }
}

/// The reaper's notices outlive a failure after the settling commit: the entries whose sender is
/// owed one (a dead letter; an expiry never delivered; never about a notice, never to a deleted
/// sender) stay pending until a publish naming the entry stores it, and of several replicas
/// storing the same notice at once one stores it and the others store nothing.
pub async fn store_reaper_owes_notices_until_one_is_stored<S: Store + Clone>(store: S) {
    base(&store).await;
    agents(
        &store,
        &[
            agent("agt_a", "alice"),
            agent("agt_b", "bob"),
            agent("agt_c", "carol"),
        ],
    )
    .await;
    let expiring = |from: &str, id: &str| {
        let mut m = msg(from, id, &["agt_b"], T0);
        m.expires_at = T0 + 1000;
        m
    };
    stored(&store, msg("agt_a", "tired", &["agt_b"], T0)).await;
    stored(&store, expiring("agt_a", "seen")).await;
    let (_, short) = stored(&store, expiring("agt_a", "short")).await;
    stored(&store, expiring("agt_c", "gone")).await;
    let mut notice = expiring("agt_a", "a-notice");
    notice.source_agent_id = None;
    stored(&store, notice).await;
    let mut req = lease_req("agt_b", 0, 2, T0);
    req.max_attempts = 2;
    assert_eq!(
        store.lease(req.clone()).await.unwrap().len(),
        2,
        "tired and seen"
    );
    req.now = T0 + 30_000;
    req.limit = 1;
    assert_eq!(store.lease(req).await.unwrap()[0].attempt, 2);
    store.delete_agent("agt_c", T0 + 2).await.unwrap();
    let report = store.reap_inboxes(T0 + 60_000, 2).await.unwrap();
    assert_eq!((report.dead.len(), report.expired.len()), (1, 4));
    // Each owed entry as "<message id> <state> <notice kind>".
    let ids = |v: &[(InboxEntry, NoticeKind)]| {
        v.iter()
            .map(|(e, k)| format!("{} {:?} {k:?}", e.message.id, e.state))
            .collect::<Vec<_>>()
    };
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["tired Dead Settled", "short Expired Settled"]);
    assert_eq!(
        owed,
        store.pending_notices(FIRST.clone(), 100).await.unwrap(),
        "read, not taken"
    );
    // A page starts past the key it is given.
    let past = |e: &InboxEntry| (e.agent_id.clone(), e.sequence);
    let page = store.pending_notices(past(&owed[0].0), 100).await.unwrap();
    assert_eq!(ids(&page), ["short Expired Settled"]);
    let page = store.pending_notices(past(&owed[1].0), 100).await.unwrap();
    assert_eq!(page, []);
    // The notice of `short`, stored once; a second try stores nothing.
    let entry = Owed::Entry(short[0].0.clone(), short[0].1, NoticeKind::Settled);
    let mut first = msg("agt_z", "n-short-1", &["agt_a"], T0 + 60_000);
    first.notice_of = Some(entry.clone());
    stored(&store, first).await;
    let mut again = msg("agt_z", "n-short-2", &["agt_a"], T0 + 60_000);
    again.notice_of = Some(entry);
    assert!(matches!(
        store.publish(again).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.pending_count("agt_a").await.unwrap(), 1);
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["tired Dead Settled"]);
    // Four replicas store the notice of `tired` at once: one copy.
    let tired = Owed::Entry(
        owed[0].0.agent_id.clone(),
        owed[0].0.sequence,
        NoticeKind::Settled,
    );
    let answers = race(&store, 4, move |s, i| {
        let mut m = msg("agt_z", &format!("n-tired-{i}"), &["agt_a"], T0 + 60_000);
        m.notice_of = Some(tired.clone());
        async move { s.publish(m).await }
    })
    .await;
    let stored_once = answers
        .iter()
        .filter(|a| matches!(a, Ok(PublishOutcome::Stored { .. })));
    assert_eq!(stored_once.count(), 1, "{answers:?}");
    assert!(
        answers.iter().all(|a| matches!(
            a,
            Ok(PublishOutcome::Stored { .. }) | Err(StoreError::Conflict(_))
        )),
        "{answers:?}"
    );
    assert_eq!(store.pending_count("agt_a").await.unwrap(), 2);
    assert_eq!(store.pending_notices(FIRST.clone(), 100).await.unwrap(), []);
    // Deleting an agent dead-letters its queue, and owes each live sender its notice.
    agents(&store, &[agent("agt_d", "dave")]).await;
    stored(&store, msg("agt_a", "to-dave", &["agt_d"], T0)).await;
    let mut by_notice = msg("agt_a", "notice-to-dave", &["agt_d"], T0);
    by_notice.source_agent_id = None;
    stored(&store, by_notice).await;
    assert_eq!(store.delete_agent("agt_d", T0 + 5).await.unwrap().len(), 2);
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["to-dave Dead Deleted"]);
    forgo(&store, &owed).await;
    // Suspending an agent holds its queue and owes each live sender AB-4013, once: a second
    // suspension owes nothing more. A copy published to it while suspended is held and owed in
    // the publish's commit, the store deciding (the gateway's route may have read the agent
    // before the suspension); a notice's copy never is.
    agents(&store, &[agent("agt_e", "erin")]).await;
    stored(&store, msg("agt_a", "before", &["agt_e"], T0)).await;
    let mut by_notice = msg("agt_a", "notice-before", &["agt_e"], T0);
    by_notice.source_agent_id = None;
    stored(&store, by_notice).await;
    let held = store.suspend_agent("agt_e", T0 + 6).await.unwrap();
    let held: Vec<&str> = held.iter().map(|e| e.message.id.as_str()).collect();
    assert_eq!(held, ["before"]);
    assert_eq!(store.suspend_agent("agt_e", T0 + 7).await.unwrap(), []);
    let mut during = msg("agt_a", "during", &["agt_e"], T0 + 8);
    during.expires_at = T0 + 1000;
    stored(&store, during).await;
    let mut notice_during = msg("agt_a", "notice-during", &["agt_e"], T0 + 8);
    notice_during.source_agent_id = None;
    stored(&store, notice_during).await;
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["before Ready Held", "during Ready Held"]);
    // A later expiry (or dead letter) replaces a held mark with its own.
    let report = store.reap_inboxes(T0 + 60_000, 2).await.unwrap();
    assert_eq!(report.expired.len(), 1);
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["before Ready Held", "during Expired Settled"]);
    // A hold's notice decided before the replacement is stored by nothing: the expiry's stays.
    let during = &owed[1].0;
    let mut stale = msg("agt_z", "n-during-held", &["agt_a"], T0 + 60_000);
    stale.notice_of = Some(Owed::Entry(
        during.agent_id.clone(),
        during.sequence,
        NoticeKind::Held,
    ));
    assert!(matches!(
        store.publish(stale).await,
        Err(StoreError::Conflict(_))
    ));
    let owed = store.pending_notices(FIRST.clone(), 100).await.unwrap();
    assert_eq!(ids(&owed), ["before Ready Held", "during Expired Settled"]);
    assert!(matches!(
        store.suspend_agent("agt_nobody", T0).await,
        Err(StoreError::NotFound)
    ));
}

/// Forgoes every owed notice of `owed`.
async fn forgo(store: &impl Store, owed: &[(InboxEntry, NoticeKind)]) {
    for (e, kind) in owed {
        let mark = Owed::Entry(e.agent_id.clone(), e.sequence, *kind);
        store.forgo_notice(mark).await.unwrap();
    }
}

pub async fn store_tasks_due_and_version_check<S: Store + Clone>(store: S) {
    base(&store).await;
    let mut m = msg("agt_a", "msg_tsk_1", &["agt_b"], T0);
    m.task_id = Some("tsk_1".into());
    m.task = Some(TaskWrite::Create(
        task_row("tsk_1", 1, Some(T0 + 100)),
        event("agentbus.task.request.v1", "", "submitted", T0),
    ));
    stored(&store, m).await;
    let mut later = task_row("tsk_2", 1, Some(T0 + 50));
    later.created_at = T0 + 1;
    let mut m = msg("agt_a", "msg_tsk_2", &["agt_b"], T0 + 1);
    m.task_id = Some("tsk_2".into());
    m.task = Some(TaskWrite::Create(
        later,
        event("agentbus.task.request.v1", "", "submitted", T0 + 1),
    ));
    stored(&store, m).await;
    assert_eq!(
        store.task("tsk_1").await.unwrap(),
        Some(task_row("tsk_1", 1, Some(T0 + 100)))
    );
    let due: Vec<String> = store
        .due_tasks(T0 + 100, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(due, ["tsk_2", "tsk_1"], "earliest deadline first");
    assert_eq!(store.due_tasks(T0 + 60, 10).await.unwrap().len(), 1);
    // A timer's change applies only at the version it read; racing timers: one wins.
    let mut expired = task_row("tsk_2", 1, None);
    expired.state = "expired".into();
    expired.terminal = true;
    let results = race(&store, 4, |s, _| {
        let t = expired.clone();
        async move {
            let mut e = event("timer", "submitted", "expired", T0 + 60);
            // Kept as written (an admin cancel's reason, which the owed notices are rebuilt with).
            e.reason = Some("a reason «kept»".into());
            s.update_task(t, 1, e, OWED_REQUESTER | OWED_RECIPIENT)
                .await
        }
    })
    .await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(
        results
            .iter()
            .all(|r| r.is_ok() || matches!(r, Err(StoreError::Conflict(_))))
    );
    let now = store.task("tsk_2").await.unwrap().unwrap();
    assert_eq!(
        (now.version, now.state.as_str(), now.terminal),
        (2, "expired", true)
    );
    let events = store.task_events("tsk_2").await.unwrap();
    assert_eq!(events.len(), 2, "the losers added no event");
    let reasons: Vec<Option<&str>> = events.iter().map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons, [None, Some("a reason «kept»")]);
    // The winner's notices are owed, once, until each is stored or forgone.
    let owed = store.pending_task_notices("", 10).await.unwrap();
    assert_eq!(owed, [(now.clone(), OWED_REQUESTER | OWED_RECIPIENT)]);
    assert_eq!(store.pending_task_notices("tsk_1", 10).await.unwrap(), owed);
    assert!(
        store
            .pending_task_notices("tsk_2", 10)
            .await
            .unwrap()
            .is_empty(),
        "a page starts past its key"
    );
    let mut notice = msg("agt_z", "n-tsk-2", &["agt_y"], T0 + 60);
    notice.notice_of = Some(Owed::Task("tsk_2".into(), OWED_REQUESTER));
    stored(&store, notice.clone()).await;
    notice.id = "n-tsk-2-again".into();
    notice.receipt = "rcp_n-tsk-2-again".into();
    assert!(matches!(
        store.publish(notice).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store.pending_task_notices("", 10).await.unwrap(),
        [(now.clone(), OWED_RECIPIENT)]
    );
    store
        .forgo_notice(Owed::Task("tsk_2".into(), OWED_RECIPIENT))
        .await
        .unwrap();
    assert!(store.pending_task_notices("", 10).await.unwrap().is_empty());
    assert_eq!(store.task("tsk_2").await.unwrap(), Some(now.clone()));
    assert_eq!(
        store.due_tasks(T0 + 1000, 10).await.unwrap().len(),
        1,
        "terminal tasks are not due"
    );
    // A lifecycle message at a stale version stores nothing at all.
    let mut m = msg("agt_b", "accept", &["agt_a"], T0 + 2);
    m.task_id = Some("tsk_2".into());
    m.task = Some(TaskWrite::Update(
        task_row("tsk_2", 1, None),
        1,
        event("agentbus.task.accept.v1", "submitted", "accepted", T0 + 2),
    ));
    assert!(matches!(
        store.publish(m).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.pending_count("agt_a").await.unwrap(), 0);
    assert!(
        store
            .recent_message("ten_1", "agent://acme/main/agt_b", "accept", 0)
            .await
            .unwrap()
            .is_none()
    );
    // Listing, newest first, with filters and a cursor.
    let f = TaskFilter {
        tenant_id: "ten_1".into(),
        limit: 10,
        ..TaskFilter::default()
    };
    let ids = |v: Vec<TaskRow>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.tasks(f.clone()).await.unwrap()),
        ["tsk_2", "tsk_1"]
    );
    assert_eq!(
        ids(store
            .tasks(TaskFilter {
                state: Some("expired".into()),
                ..f.clone()
            })
            .await
            .unwrap()),
        ["tsk_2"]
    );
    assert_eq!(
        ids(store
            .tasks(TaskFilter {
                party_id: Some("agt_b".into()),
                limit: 1,
                ..f.clone()
            })
            .await
            .unwrap()),
        ["tsk_2"]
    );
    assert_eq!(
        ids(store
            .tasks(TaskFilter {
                before: Some((T0 + 1, "tsk_2".into())),
                ..f.clone()
            })
            .await
            .unwrap()),
        ["tsk_1"]
    );
    assert!(
        store
            .tasks(TaskFilter {
                capability: Some("other".into()),
                ..f
            })
            .await
            .unwrap()
            .is_empty()
    );
    let msgs: Vec<String> = store
        .task_messages("ten_1", "tsk_1")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(msgs, ["msg_tsk_1"]);
}

pub async fn store_blobs<S: Store + Clone>(store: S) {
    base(&store).await;
    agents(
        &store,
        &[agent("agt_a", "alice"), agent_in("ws_2", "agt_b", "bob")],
    )
    .await;
    let b = BlobRow {
        id: "blb_1".into(),
        tenant_id: "ten_1".into(),
        uploader_id: "agt_a".into(),
        name: "report.pdf".into(),
        media_type: Some("application/pdf".into()),
        size: 1000,
        sha256: "ab".repeat(32),
        complete: false,
        created_at: T0,
        expires_at: T0 + DAY,
    };
    store.create_blob(b.clone()).await.unwrap();
    store
        .create_blob(BlobRow {
            id: "blb_2".into(),
            size: 24,
            expires_at: T0 + 10,
            ..b.clone()
        })
        .await
        .unwrap();
    assert_eq!(store.blob("blb_1").await.unwrap(), Some(b.clone()));
    store.complete_blob("blb_1").await.unwrap();
    assert!(store.blob("blb_1").await.unwrap().unwrap().complete);
    // Content kept in the database (what replicas share): stored, replaced, read back.
    assert_eq!(store.blob_content("blb_2").await.unwrap(), None);
    store.put_blob_content("blb_2", vec![1; 8]).await.unwrap();
    store.put_blob_content("blb_2", vec![2; 24]).await.unwrap();
    assert_eq!(
        store.blob_content("blb_2").await.unwrap(),
        Some(vec![2; 24])
    );
    assert!(matches!(
        store.complete_blob("blb_x").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.blob_bytes("ten_1", T0, T0 - 1).await.unwrap(), 1024);
    assert_eq!(
        store.blob_bytes("ten_1", T0 + 10, T0).await.unwrap(),
        1000,
        "a pending blob past its upload window does not count"
    );
    // The reaper's view: the pending blob past its window is due, the complete one
    // is not; purging re-checks the rule, happens once, and a purged blob cannot complete.
    let due = store.due_blobs(T0 + 10, T0, 10).await.unwrap();
    assert_eq!(
        due.iter().map(|b| b.id.as_str()).collect::<Vec<_>>(),
        ["blb_2"]
    );
    assert!(!store.purge_blob("blb_1", T0 + 10, T0).await.unwrap());
    assert!(store.purge_blob("blb_2", T0 + 10, T0).await.unwrap());
    assert_eq!(
        store.blob_content("blb_2").await.unwrap(),
        None,
        "a purge deletes the content with it"
    );
    assert!(!store.purge_blob("blb_2", T0 + 10, T0).await.unwrap());
    assert!(matches!(
        store.complete_blob("blb_2").await,
        Err(StoreError::NotFound)
    ));
    assert!(store.due_blobs(T0 + 10, T0, 10).await.unwrap().is_empty());
    assert!(!store.blob_party("blb_1", "agt_b").await.unwrap());
    let mut m = msg("agt_a", "with-blob", &["agt_b"], T0);
    m.blob_refs = vec!["blb_1".into()];
    stored(&store, m).await;
    assert!(store.blob_party("blb_1", "agt_b").await.unwrap());
    assert!(store.blob_party("blb_1", "agt_a").await.unwrap());
    assert!(!store.blob_party("blb_1", "agt_c").await.unwrap());
    assert_eq!(
        store.blob_workspaces("blb_1").await.unwrap(),
        ["ws_1", "ws_2"]
    );
}

pub async fn store_receipts_and_delivery_states<S: Store + Clone>(store: S) {
    base(&store).await;
    let (m, _) = stored(&store, msg("agt_a", "ask", &["agt_b", "agt_c"], T0)).await;
    let d = store
        .lease(lease_req("agt_b", 0, 1, T0 + 5))
        .await
        .unwrap()
        .remove(0);
    store
        .ack("agt_b", vec![(d.sequence, d.token)], T0 + 6)
        .await
        .unwrap();
    let shown = |seq: u64, id: &str, at: i64| ShownReceipt {
        sequence: seq,
        message_id: id.into(),
        shown_at: at,
        harness: "claude".into(),
        event: "UserPromptSubmit".into(),
        pushed: false,
    };
    // A push is its own state: recorded apart from the showing, the first of each standing.
    let pushed = |seq: u64, at: i64| ShownReceipt {
        pushed: true,
        harness: "mcp".into(),
        event: "notifications/claude/channel".into(),
        ..shown(seq, "ask", at)
    };
    assert_eq!(
        store
            .record_receipts("agt_b", vec![pushed(1, T0 + 7), pushed(1, T0 + 8)], T0 + 10)
            .await
            .unwrap(),
        [ReceiptOutcome::Recorded, ReceiptOutcome::AlreadyRecorded]
    );
    assert_eq!(
        store
            .record_receipts(
                "agt_b",
                vec![
                    shown(1, "ask", T0 - 50),
                    shown(1, "ask", T0 + 9),
                    shown(1, "other", T0),
                    shown(7, "ask", T0)
                ],
                T0 + 10
            )
            .await
            .unwrap(),
        [
            ReceiptOutcome::Recorded,
            ReceiptOutcome::AlreadyRecorded,
            ReceiptOutcome::Unknown,
            ReceiptOutcome::Unknown
        ]
    );
    let mut answer = msg("agt_b", "reply", &["agt_a"], T0 + 20);
    answer.correlation_id = Some("ask".into());
    stored(&store, answer).await;
    let (message, states) = store
        .delivery_states("ten_1", &m.source, "ask")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.seq, m.seq);
    assert_eq!(states.len(), 2);
    let b = &states[0];
    assert_eq!(
        (b.agent_id.as_str(), b.state, b.attempts, b.acked_at),
        ("agt_b", EntryState::Acked, 1, Some(T0 + 6))
    );
    let s = b.shown.as_ref().unwrap();
    assert_eq!(
        (s.shown_at, s.message_id.as_str(), s.harness.as_str()),
        (T0, "ask", "claude"),
        "clamped to receipt time"
    );
    assert_eq!(b.answer.as_ref().map(|a| a.id.as_str()), Some("reply"));
    let p = b.pushed.as_ref().unwrap();
    assert_eq!(
        (p.shown_at, p.harness.as_str(), p.pushed),
        (T0 + 7, "mcp", true)
    );
    let c = &states[1];
    assert_eq!(
        (
            c.agent_id.as_str(),
            c.state,
            c.shown.is_none() && c.pushed.is_none(),
            c.answer.is_none()
        ),
        ("agt_c", EntryState::Ready, true, true)
    );
    assert!(
        store
            .delivery_states("ten_1", &m.source, "nothing")
            .await
            .unwrap()
            .is_none()
    );
    let copies = store.copies(vec![m.seq]).await.unwrap();
    assert_eq!(
        copies
            .iter()
            .map(|c| (c.agent_id.as_str(), c.shown_at))
            .collect::<Vec<_>>(),
        [("agt_b", Some(T0)), ("agt_c", None)]
    );
}

pub async fn store_console_sessions<S: Store + Clone>(store: S) {
    let s = |n: u8, expires_at: i64| ConsoleSessionRow {
        id_hash: [n; 32],
        user_id: "usr_1".into(),
        token_hash: [n + 100; 32],
        csrf: format!("csrf{n}"),
        created_at: T0,
        expires_at,
    };
    store.create_console_session(s(1, T0 + 10)).await.unwrap();
    store.create_console_session(s(2, T0 + 20)).await.unwrap();
    store.create_console_session(s(3, T0 + 30)).await.unwrap();
    assert_eq!(
        store.console_session([1; 32]).await.unwrap(),
        Some(s(1, T0 + 10))
    );
    store.delete_console_session([3; 32]).await.unwrap();
    store.delete_console_session([3; 32]).await.unwrap();
    assert_eq!(store.console_session([3; 32]).await.unwrap(), None);
    assert_eq!(store.purge_console_sessions(T0 + 10).await.unwrap(), 1);
    assert_eq!(store.console_session([1; 32]).await.unwrap(), None);
    assert!(store.console_session([2; 32]).await.unwrap().is_some());
}

pub async fn store_console_reads_and_usage<S: Store + Clone>(store: S) {
    base(&store).await;
    agents(
        &store,
        &[
            agent("agt_a", "alice"),
            agent("agt_b", "bob"),
            agent_in("ws_2", "agt_z", "zed"),
        ],
    )
    .await;
    let usage = |agent: &str, day: &str, input: i64, cost: Option<i64>| UsageRow {
        tenant_id: "ten_1".into(),
        workspace_id: "ws_1".into(),
        agent_id: agent.into(),
        task_id: None,
        capability: Some("review".into()),
        day: day.into(),
        field: "usage".into(),
        usage: Some(UsageFigure {
            reported_by: "harness".into(),
            provider: None,
            model: None,
            tokens: Tokens {
                input,
                output: 1,
                ..Tokens::default()
            },
        }),
        cost: cost.map(|micros| CostFigure {
            currency: "USD".into(),
            micros,
            source: None,
        }),
    };
    let mut m1 = msg("agt_a", "u1", &["agt_b"], T0);
    m1.usage = Some(usage("agt_a", "2027-01-15", i64::MAX, Some(5)));
    stored(&store, m1).await;
    let mut m2 = msg("agt_a", "u2", &["agt_b"], T0 + 1);
    m2.usage = Some(usage("agt_a", "2027-01-15", 10, Some(7)));
    stored(&store, m2).await;
    let mut m3 = msg("agt_b", "u3", &["agt_a"], T0 + 2);
    m3.conversation_id = "cnv_2".into();
    m3.usage = Some(usage("agt_b", "2027-01-16", 3, None));
    stored(&store, m3).await;
    let mut m4 = msg("agt_z", "private", &["agt_z"], T0 + 3);
    m4.conversation_id = "cnv_3".into();
    stored(&store, m4).await;
    let totals = store
        .usage(UsageFilter {
            tenant_id: "ten_1".into(),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(totals.len(), 2);
    assert_eq!(
        (totals[0].day.as_str(), totals[0].agent_id.as_str()),
        ("2027-01-16", "agt_b"),
        "newest day first"
    );
    assert_eq!(
        (
            totals[1].messages,
            totals[1].tokens.input,
            totals[1].cost_micros
        ),
        (2, i64::MAX, 12),
        "sums saturate"
    );
    let only = store
        .usage(UsageFilter {
            tenant_id: "ten_1".into(),
            agent_id: Some("agt_b".into()),
            workspace_ids: Some(vec!["ws_1".into()]),
            ..UsageFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert!(
        store
            .usage(UsageFilter {
                tenant_id: "ten_1".into(),
                since_day: Some("2027-01-17".into()),
                ..UsageFilter::default()
            })
            .await
            .unwrap()
            .is_empty()
    );
    // Conversations: what each viewer may read, most recent first, paged by a cursor.
    let tenant_view = store
        .conversations("ten_1", &ConversationViewer::Tenant, None, 10)
        .await
        .unwrap();
    assert_eq!(
        tenant_view
            .iter()
            .map(|c| c.conversation_id.as_str())
            .collect::<Vec<_>>(),
        ["cnv_3", "cnv_2", "cnv_1"]
    );
    assert_eq!(
        (
            tenant_view[2].messages,
            tenant_view[2].first_at,
            tenant_view[2].last.id.as_str()
        ),
        (2, T0, "u2")
    );
    let page = store
        .conversations(
            "ten_1",
            &ConversationViewer::Tenant,
            Some((tenant_view[1].last_at, tenant_view[1].last.seq)),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        page.iter()
            .map(|c| c.conversation_id.as_str())
            .collect::<Vec<_>>(),
        ["cnv_1"]
    );
    let ws_view = store
        .conversations(
            "ten_1",
            &ConversationViewer::Workspace("ws_1".into()),
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(ws_view.len(), 2);
    let b_view = store
        .conversations("ten_1", &ConversationViewer::Agent("agt_b".into()), None, 1)
        .await
        .unwrap();
    assert_eq!(
        b_view
            .iter()
            .map(|c| c.conversation_id.as_str())
            .collect::<Vec<_>>(),
        ["cnv_2"]
    );
    let read = store
        .conversation("ten_1", "cnv_1", &ConversationViewer::Agent("agt_b".into()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        read.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["u1", "u2"]
    );
    assert!(
        store
            .conversation("ten_1", "cnv_3", &ConversationViewer::Agent("agt_b".into()))
            .await
            .unwrap()
            .is_none(),
        "not a party reads nothing"
    );
    assert!(
        store
            .conversation("ten_1", "cnv_9", &ConversationViewer::Tenant)
            .await
            .unwrap()
            .is_none()
    );
    let one = store.message(read[0].seq).await.unwrap().unwrap();
    assert_eq!(
        (one.id.as_str(), one.data.as_slice()),
        ("u1", b"u1".as_slice())
    );
}

/// `GET /v1/messages/sent`'s page: only the agent's own messages of its tenant, newest first,
/// at most `limit`, and the cursor continues where the page ended.
pub async fn store_sent_messages_page_newest_first<S: Store + Clone>(store: S) {
    base(&store).await;
    for (i, from) in ["agt_a", "agt_b", "agt_a", "agt_a", "agt_b", "agt_a"]
        .iter()
        .enumerate()
    {
        stored(
            &store,
            msg(from, &format!("m{i}"), &["agt_c"], T0 + i as i64),
        )
        .await;
    }
    let ids = |rows: &[MessageRow]| rows.iter().map(|m| m.id.clone()).collect::<Vec<_>>();
    let first = store
        .sent_messages("ten_1", "agt_a", None, 3)
        .await
        .unwrap();
    assert_eq!(ids(&first), ["m5", "m3", "m2"]);
    let rest = store
        .sent_messages("ten_1", "agt_a", Some(first[2].seq), 3)
        .await
        .unwrap();
    assert_eq!(ids(&rest), ["m0"]);
    assert!(
        store
            .sent_messages("ten_2", "agt_a", None, 10)
            .await
            .unwrap()
            .is_empty(),
        "another tenant's list is empty"
    );
}

/// WP §5.8: the sender's read of delivery states follows the recipient's lease at once. A lease
/// that is still being written (SQLite queues it without waiting) must not read as unleased to a
/// sender who asks after the poll answered; many rounds, so a racing write would show.
pub async fn wp_5_8_a_lease_shows_in_delivery_states_at_once<S: Store + Clone>(store: S) {
    base(&store).await;
    for i in 0..40 {
        let id = format!("m{i}");
        let (m, _) = stored(&store, msg("agt_a", &id, &["agt_b"], T0)).await;
        let d = store.lease(lease_req("agt_b", i, 1, T0 + 5)).await.unwrap();
        assert_eq!(d.len(), 1, "round {i}");
        let (_, states) = store
            .delivery_states("ten_1", &m.source, &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(states[0].state, EntryState::Leased, "round {i}");
        let copies = store.copies(vec![m.seq]).await.unwrap();
        assert_eq!(copies[0].state, EntryState::Leased, "round {i}: {copies:?}");
    }
}

/// People administered by command: users listed by tenant (or all, for the operator), tokens
/// labelled, listed with their revocations, revoked once, and a removed user's tokens and console
/// sessions gone with it.
pub async fn store_users_and_tokens_are_listed_revoked_and_removed<S: Store + Clone>(store: S) {
    base(&store).await;
    store
        .create_tenant(tenant("ten_2", "globex"))
        .await
        .unwrap();
    store
        .create_user(user("usr_b", Role::Member, T0 + 2))
        .await
        .unwrap();
    store
        .create_user(user("usr_a", Role::TenantAdmin, T0 + 1))
        .await
        .unwrap();
    let mut other = user("usr_g", Role::Member, T0);
    other.tenant_id = "ten_2".into();
    store.create_user(other).await.unwrap();
    let ids = |v: Vec<UserRow>| v.into_iter().map(|u| u.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.users(Some("ten_1")).await.unwrap()),
        ["usr_a", "usr_b"]
    );
    assert_eq!(ids(store.users(Some("ten_2")).await.unwrap()), ["usr_g"]);
    assert_eq!(
        ids(store.users(None).await.unwrap()),
        ["usr_g", "usr_a", "usr_b"]
    );
    let mut labelled = token(1, TokenSubject::User("usr_b".into()));
    labelled.label = Some("laptop".into());
    store.create_token(labelled.clone()).await.unwrap();
    let mut later = token(2, TokenSubject::User("usr_b".into()));
    later.created_at = T0 + 5;
    store.create_token(later.clone()).await.unwrap();
    store
        .create_token(token(3, TokenSubject::User("usr_g".into())))
        .await
        .unwrap();
    store
        .create_token(token(4, TokenSubject::Agent("agt_1".into())))
        .await
        .unwrap();
    assert_eq!(
        store.user_tokens(Some("ten_1")).await.unwrap(),
        [labelled.clone(), later.clone()]
    );
    assert_eq!(
        store.user_tokens(None).await.unwrap().len(),
        3,
        "no agent token"
    );
    // Revoked once; the row stays listed, and authenticates nobody.
    assert!(store.revoke_token([1; 32], T0 + 9).await.unwrap());
    assert!(!store.revoke_token([1; 32], T0 + 10).await.unwrap());
    assert!(!store.revoke_token([9; 32], T0 + 10).await.unwrap());
    assert_eq!(store.token([1; 32]).await.unwrap(), None);
    let listed = store.user_tokens(Some("ten_1")).await.unwrap();
    assert_eq!(listed[0].revoked_at, Some(T0 + 9));
    assert_eq!(listed[0].label.as_deref(), Some("laptop"));
    // Replacing revokes the live ones and keeps them listed.
    let mut fresh = token(5, TokenSubject::User("usr_b".into()));
    fresh.created_at = T0 + 20;
    assert_eq!(store.replace_tokens(fresh).await.unwrap(), 1);
    let listed = store.user_tokens(Some("ten_1")).await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|t| (t.hash[0], t.revoked_at))
            .collect::<Vec<_>>(),
        [(1, Some(T0 + 9)), (2, Some(T0 + 20)), (5, None)]
    );
    // Removing a user takes its tokens and console sessions with it.
    store
        .create_console_session(ConsoleSessionRow {
            id_hash: [7; 32],
            user_id: "usr_b".into(),
            token_hash: [5; 32],
            csrf: "c".into(),
            created_at: T0,
            expires_at: T0 + DAY,
        })
        .await
        .unwrap();
    assert!(store.delete_user("usr_b").await.unwrap());
    assert!(!store.delete_user("usr_b").await.unwrap());
    assert_eq!(store.user("usr_b").await.unwrap(), None);
    assert_eq!(store.token([5; 32]).await.unwrap(), None);
    assert_eq!(store.console_session([7; 32]).await.unwrap(), None);
    assert!(store.user_tokens(Some("ten_1")).await.unwrap().is_empty());
    assert!(store.token([3; 32]).await.unwrap().is_some());
    assert!(store.token([4; 32]).await.unwrap().is_some());
}

/// Search candidates (`Store::search_messages`): every word group matched by one of its words,
/// only what the viewer may read (the conversation routes' rule), the filters, newest first,
/// paged; a message's words are stored with it, in its transaction.
pub async fn store_search_finds_what_the_viewer_may_read<S: Store + Clone>(store: S) {
    base(&store).await;
    agents(
        &store,
        &[
            agent("agt_a", "alice"),
            agent("agt_b", "bob"),
            agent_in("ws_2", "agt_z", "zed"),
        ],
    )
    .await;
    let tagged = |m: &mut NewMessage, tags: &[&str]| {
        m.search_tags = tags.join(" ");
    };
    let mut m1 = msg("agt_a", "s1", &["agt_b"], T0);
    tagged(&mut m1, &["aa01", "bb02"]);
    stored(&store, m1).await;
    let mut m2 = msg("agt_b", "s2", &["agt_a"], T0 + 10);
    tagged(&mut m2, &["aa01"]);
    m2.kind = "agentbus.task.result.v1".into();
    m2.task_id = Some("tsk_1".into());
    stored(&store, m2).await;
    let mut m3 = msg("agt_z", "s3", &["agt_z"], T0 + 20);
    m3.conversation_id = "cnv_3".into();
    tagged(&mut m3, &["aa01", "bb02"]);
    stored(&store, m3).await;
    stored(&store, msg("agt_a", "s4", &["agt_b"], T0 + 30)).await;
    let q = |viewer: ConversationViewer, words: &[&[&str]]| MessageSearch {
        tenant_id: "ten_1".into(),
        viewer,
        words: words
            .iter()
            .map(|g| g.iter().map(|w| w.to_string()).collect())
            .collect(),
        kind: None,
        conversation_id: None,
        source: None,
        to_text: None,
        in_task: false,
        since: None,
        until: None,
        before: None,
        limit: 10,
    };
    let ids = |rows: Vec<MessageRow>| rows.into_iter().map(|m| m.id).collect::<Vec<_>>();
    let found = |q: MessageSearch| {
        let store = store.clone();
        async move { ids(store.search_messages(q).await.unwrap()) }
    };
    let tenant = || ConversationViewer::Tenant;
    assert_eq!(found(q(tenant(), &[&["aa01"]])).await, ["s3", "s2", "s1"]);
    assert_eq!(
        found(q(tenant(), &[&["aa01"], &["bb02"]])).await,
        ["s3", "s1"]
    );
    assert_eq!(
        found(q(tenant(), &[&["zz99", "bb02"]])).await,
        ["s3", "s1"],
        "any of a group"
    );
    assert!(found(q(tenant(), &[&["zz99"]])).await.is_empty());
    // No words: filters alone, every message.
    assert_eq!(found(q(tenant(), &[])).await, ["s4", "s3", "s2", "s1"]);
    // Viewers: an agent reads what it sent or holds; a workspace admin its workspace's.
    let a = || ConversationViewer::Agent("agt_a".into());
    assert_eq!(found(q(a(), &[&["aa01"]])).await, ["s2", "s1"]);
    let z = ConversationViewer::Agent("agt_z".into());
    assert_eq!(found(q(z, &[&["aa01"]])).await, ["s3"]);
    let ws2 = ConversationViewer::Workspace("ws_2".into());
    assert_eq!(found(q(ws2, &[&["aa01"]])).await, ["s3"]);
    // Another tenant's view of the same words: nothing.
    let mut other = q(tenant(), &[&["aa01"]]);
    other.tenant_id = "ten_2".into();
    assert!(found(other).await.is_empty());
    // Filters.
    let mut f = q(tenant(), &[&["aa01"]]);
    f.kind = Some("agentbus.task.*".into());
    assert_eq!(found(f.clone()).await, ["s2"]);
    f.kind = Some("agentbus.message.v1".into());
    assert_eq!(found(f).await, ["s3", "s1"]);
    let mut f = q(tenant(), &[]);
    f.in_task = true;
    assert_eq!(found(f).await, ["s2"]);
    let mut f = q(tenant(), &[]);
    f.conversation_id = Some("cnv_3".into());
    assert_eq!(found(f).await, ["s3"]);
    let mut f = q(tenant(), &[]);
    f.source = Some("agent://acme/main/agt_a".into());
    f.to_text = Some("agt_b".into());
    assert_eq!(found(f).await, ["s4", "s1"]);
    let mut f = q(tenant(), &[]);
    (f.since, f.until) = (Some(T0 + 10), Some(T0 + 30));
    assert_eq!(found(f).await, ["s3", "s2"]);
    // Pages: newest first, below a cursor, at most `limit`.
    let mut f = q(tenant(), &[]);
    f.limit = 2;
    let first = store.search_messages(f.clone()).await.unwrap();
    assert_eq!(ids(first.clone()), ["s4", "s3"]);
    f.before = Some((first[1].received_at, first[1].seq));
    assert_eq!(found(f).await, ["s2", "s1"]);
}
