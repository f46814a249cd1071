//! Store-level throughput, SQLite and PostgreSQL side by side in one run: durable publishes from
//! 8 concurrent publishers into 8 inboxes, then those inboxes drained by lease and ack. No HTTP,
//! no signatures: what the store itself costs per message. PostgreSQL runs on a throwaway cluster
//! on this machine (fsync on), sharing its cores with the load.
//!
//! `cargo bench -p agentbus-store --bench publish` (`PUBLISH_N` messages per publisher, 1000).

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use std::time::Instant;

use agentbus_store::*;
use agentbus_testkit::pg;

const PUBLISHERS: usize = 8;
const T0: i64 = 1_800_000_000_000;

fn message(p: usize, i: usize) -> NewMessage {
    let id = format!("msg_{p}_{i}");
    let to = format!("agt_{p}");
    NewMessage {
        tenant_id: "ten_1".into(),
        id: id.clone(),
        source: format!("agent://acme/main/p{p}"),
        source_agent_id: Some(format!("agt_p{p}")),
        kind: "agentbus.message.v1".into(),
        conversation_id: format!("cnv_{p}"),
        correlation_id: None,
        to_text: to.clone(),
        to_id: to.clone(),
        attrs: "{\"subject\":\"hello\"}".into(),
        data: vec![7; 512],
        signed_hash: vec![9; 32],
        idempotency: None,
        receipt: format!("rcp_{id}"),
        received_at: T0,
        expires_at: T0 + 86_400_000,
        task_id: None,
        task: None,
        recipients: vec![to],
        blob_refs: Vec::new(),
        replay_since: T0 - 86_400_000,
        idempotency_since: T0 - 7 * 86_400_000,
        max_depth: Some(100_000),
        usage: None,
        notice_of: None,
        search_tags: String::new(),
    }
}

/// (publishes per second, lease-and-ack deliveries per second).
async fn run<S: Store + Clone>(store: S, n: usize) -> (f64, f64) {
    let started = Instant::now();
    let handles: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let s = store.clone();
            tokio::spawn(async move {
                for i in 0..n {
                    s.publish(message(p, i)).await.unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    let publish = (PUBLISHERS * n) as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let handles: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            let s = store.clone();
            tokio::spawn(async move {
                let agent = format!("agt_{p}");
                let mut after = 0;
                loop {
                    let req = LeaseRequest {
                        agent_id: agent.clone(),
                        after,
                        limit: 32,
                        now: T0 + 1,
                        visibility_ms: 60_000,
                        max_attempts: 5,
                    };
                    let batch = s.lease(req).await.unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    after = batch.iter().map(|d| d.sequence).max().unwrap_or(after);
                    let acks = batch.into_iter().map(|d| (d.sequence, d.token)).collect();
                    s.ack(&agent, acks, T0 + 2).await.unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.await.unwrap();
    }
    let deliver = (PUBLISHERS * n) as f64 / started.elapsed().as_secs_f64();
    (publish, deliver)
}

fn main() {
    let n: usize = std::env::var("PUBLISH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(&dir.path().join("bench.db")).unwrap();
        let (sp, sd) = run(sqlite, n).await;
        let cluster = pg::Cluster::start();
        let pg = PgStore::open(&cluster.database().await).await.unwrap();
        let (pp, pd) = run(pg, n).await;
        println!("store backend | durable publishes/s (8 publishers) | lease+ack deliveries/s (8 inboxes)");
        println!("sqlite        | {sp:>10.0} | {sd:>10.0}");
        println!("postgres      | {pp:>10.0} | {pd:>10.0}");
        println!("postgres/sqlite publish ratio: {:.2}", pp / sp);
        cluster.stop();
    });
}
