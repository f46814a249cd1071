//! The memory store's own strictness: what it refuses to promise, beyond the conformance suite.

use super::*;
use crate::{AnyStore, Store};

const T0: i64 = 1_800_000_000_000;

fn tenant(n: usize) -> TenantRow {
    TenantRow {
        id: format!("ten_{n}"),
        slug: format!("t{n}"),
        data_key: vec![1],
        created_at: T0,
        suspended_at: None,
    }
}

fn workspace() -> WorkspaceRow {
    WorkspaceRow {
        id: "ws_1".into(),
        tenant_id: "ten_0".into(),
        slug: "main".into(),
        policy: "{}".into(),
        created_at: T0,
    }
}

fn msg(id: &str, to: &str) -> NewMessage {
    NewMessage {
        tenant_id: "ten_0".into(),
        id: id.into(),
        source: "agent://t0/main/a".into(),
        source_agent_id: Some("agt_a".into()),
        kind: "agentbus.message.v1".into(),
        conversation_id: "cnv_1".into(),
        correlation_id: None,
        to_text: to.into(),
        to_id: to.into(),
        attrs: "{}".into(),
        data: id.as_bytes().to_vec(),
        signed_hash: vec![9; 32],
        idempotency: None,
        receipt: format!("rcp_{id}"),
        received_at: T0,
        expires_at: T0 + 1000,
        task_id: None,
        task: None,
        recipients: vec![to.into()],
        blob_refs: Vec::new(),
        replay_since: T0 - 1000,
        idempotency_since: T0 - 1000,
        max_depth: None,
        usage: None,
        notice_of: None,
        search_tags: String::new(),
    }
}

/// A store holding tenant `ten_0` with workspace `ws_1`, and `more` other tenants.
async fn store(seed: u64, more: usize) -> MemoryStore {
    let store = MemoryStore::with_seed(seed);
    for n in 0..=more {
        store.create_tenant(tenant(n)).await.unwrap();
    }
    store.create_workspace(workspace()).await.unwrap();
    store
}

async fn tenant_order(store: &MemoryStore) -> Vec<String> {
    let rows = store.tenants().await.unwrap();
    rows.into_iter().map(|t| t.id).collect()
}

/// A list whose order the trait leaves open comes back in an order that varies from call to
/// call, the same variations for the same seed; a documented order holds, its ties varied.
#[tokio::test]
async fn an_open_order_varies_and_a_seed_replays_it() {
    let a = store(7, 9).await;
    let mut seen = BTreeSet::new();
    for _ in 0..20 {
        seen.insert(tenant_order(&a).await);
    }
    assert!(seen.len() > 1, "tenants came back in one order: {seen:?}");
    let (b, c) = (store(7, 9).await, store(7, 9).await);
    for _ in 0..5 {
        assert_eq!(tenant_order(&b).await, tenant_order(&c).await);
    }
    // `users_with_role` is oldest first; users created at one instant come in varied orders.
    for (i, at) in [(0, T0 + 5), (1, T0), (2, T0), (3, T0), (4, T0)] {
        let u = UserRow {
            id: format!("usr_{i}"),
            tenant_id: "ten_0".into(),
            workspace_id: "ws_1".into(),
            name: format!("u{i}"),
            role: Role::Admin,
            created_at: at,
        };
        a.create_user(u).await.unwrap();
    }
    let mut ties = BTreeSet::new();
    for _ in 0..20 {
        let rows = a.users_with_role(Role::Admin).await.unwrap();
        assert_eq!(rows.last().map(|u| u.id.as_str()), Some("usr_0"));
        ties.insert(rows.into_iter().map(|u| u.id).collect::<Vec<_>>());
    }
    assert!(ties.len() > 1, "ties came back in one order: {ties:?}");
    assert_eq!(
        a.first_user().await.unwrap().map(|u| u.id),
        Some("usr_1".into()),
        "the first created among the earliest"
    );
}

/// Every row returned is a copy: changing it changes nothing stored.
#[tokio::test]
async fn a_returned_row_is_a_copy() {
    let s = store(1, 0).await;
    let mut t = s.tenant("ten_0").await.unwrap().unwrap();
    t.slug = "changed".into();
    t.data_key.clear();
    assert_eq!(s.tenant("ten_0").await.unwrap(), Some(tenant(0)));
    let PublishOutcome::Stored { mut message, .. } = s.publish(msg("m1", "agt_b")).await.unwrap()
    else {
        panic!("not stored");
    };
    let seq = message.seq;
    message.data = b"changed".to_vec();
    let mut delivered = s
        .lease(LeaseRequest {
            agent_id: "agt_b".into(),
            after: 0,
            limit: 10,
            now: T0,
            visibility_ms: 100,
            max_attempts: 5,
        })
        .await
        .unwrap();
    assert_eq!(delivered[0].message.data, b"m1");
    delivered[0].message.data.clear();
    let stored = s.message(seq).await.unwrap().unwrap();
    assert_eq!(stored.data, b"m1");
}

/// A failure a test injects answers the named operation once, as a database would, and stores
/// nothing: no row, no sequence taken.
#[tokio::test]
async fn an_injected_failure_stores_nothing() {
    let s = store(2, 0).await;
    let before = s.dump().await.unwrap();
    s.fail_next("publish", StoreError::Busy("every connection busy".into()));
    s.fail_next("*", StoreError::Backend("disk full".into()));
    // Each failure answers once, in the order given: the named one to its operation, the other
    // to whichever call comes first.
    assert!(matches!(
        s.pending_count("agt_b").await,
        Err(StoreError::Backend(_))
    ));
    assert!(matches!(
        s.publish(msg("m1", "agt_b")).await,
        Err(StoreError::Busy(_))
    ));
    assert_eq!(
        s.dump().await.unwrap(),
        before,
        "the failed publish stored nothing"
    );
    let PublishOutcome::Stored { sequences, .. } = s.publish(msg("m1", "agt_b")).await.unwrap()
    else {
        panic!("a retry is stored");
    };
    assert_eq!(
        sequences,
        [("agt_b".to_string(), 1)],
        "no sequence was taken"
    );
}

/// A failed precondition answers the documented error and stores nothing; a limit is exact.
#[tokio::test]
async fn a_failed_precondition_is_refused_and_stores_nothing() {
    let s = store(3, 0).await;
    let before = s.dump().await.unwrap();
    let orphan = WorkspaceRow {
        id: "ws_2".into(),
        tenant_id: "ten_x".into(),
        ..workspace()
    };
    assert!(matches!(
        s.create_workspace(orphan).await,
        Err(StoreError::Backend(_))
    ));
    assert!(matches!(
        s.create_tenant(TenantRow {
            slug: "other".into(),
            ..tenant(0)
        })
        .await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.set_workspace_policy("ws_x", "{}".into()).await,
        Err(StoreError::NotFound)
    ));
    let mut stale = msg("m1", "agt_b");
    stale.notice_of = Some(Owed::Task("tsk_x".into(), OWED_REQUESTER));
    assert!(matches!(
        s.publish(stale).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(s.dump().await.unwrap(), before);
    s.publish(msg("m1", "agt_b")).await.unwrap();
    let none = s.sent_messages("ten_0", "agt_a", None, 0).await.unwrap();
    assert!(none.is_empty(), "a limit of 0 answers nothing");
}

/// Storage sequences are ordered, never counted: they start anywhere and grow unevenly.
#[tokio::test]
async fn storage_sequences_are_ordered_not_counted() {
    let s = store(4, 0).await;
    let mut seqs = Vec::new();
    for i in 0..20 {
        if let PublishOutcome::Stored { message, .. } =
            s.publish(msg(&format!("m{i}"), "agt_b")).await.unwrap()
        {
            seqs.push(message.seq);
        }
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(seqs[0] > 1, "{seqs:?}");
    assert!(seqs.windows(2).any(|w| w[1] - w[0] > 1), "{seqs:?}");
}

/// The gateway's store enum runs on it, as a backend of its own.
#[tokio::test]
async fn any_store_runs_on_it() {
    let any = AnyStore::Memory(MemoryStore::new());
    assert_eq!(any.backend(), "memory");
    assert!(any.signals().is_none());
    assert!(any.keeps_blob_content());
    any.create_tenant(tenant(0)).await.unwrap();
    assert_eq!(any.tenant("ten_0").await.unwrap(), Some(tenant(0)));
    assert!(any.claim_reaper("me", T0, 1000).await.unwrap());
    any.check_ready().await.unwrap();
    assert_eq!(any.dump().await.unwrap().len(), 1);
}
