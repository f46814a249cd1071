//! What only the PostgreSQL backend has: its connection settings, its schema version and its
//! pool.

use std::collections::BTreeSet;
use std::time::Duration;

use agentbus_store::*;

use agentbus_testkit::pg::Cluster;

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// Returns once `n` connections to `c`'s database wait for a lock.
async fn until_locks_are_waited_for(c: &tokio_postgres::Client, n: i64) {
    loop {
        let waiting: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if waiting >= n {
            return;
        }
        tokio::task::yield_now().await;
    }
}

fn backend_message(r: StoreResult<PgStore>) -> String {
    match r {
        Err(StoreError::Backend(m)) => m,
        Err(other) => panic!("not a backend error: {other:?}"),
        Ok(_) => panic!("opened"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_open_checks_durability_and_migrates_once() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    // Two replicas starting at once: both open, the schema is applied once.
    let (a, b) = tokio::join!(PgStore::open(&url), PgStore::open(&url));
    let (a, _b) = (a.expect("first"), b.expect("second"));
    assert_eq!(
        a.durability().await.unwrap(),
        ("on".to_string(), "on".to_string())
    );
    a.check_ready().await.unwrap();
    // Generic plans may be cached (`postgres/plans.rs` checks that each reads by index).
    assert_eq!(a.setting("plan_cache_mode").await.unwrap(), "auto");
    let c = admin(&url).await;
    let rows = c
        .query("SELECT version FROM schema_version", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), postgres::current_version());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_refuses_a_schema_newer_than_it_knows() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    let c = admin(&url).await;
    c.execute("UPDATE schema_version SET version = version + 1", &[])
        .await
        .unwrap();
    let msg = backend_message(PgStore::open(&url).await);
    assert!(msg.contains("newer than this build knows"), "{msg}");
    // A running replica's readiness says so too.
    let Err(StoreError::Backend(msg)) = store.check_ready().await else {
        panic!("ready")
    };
    assert!(msg.contains("newer"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_refuses_a_server_without_durable_commits() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let c = admin(&url).await;
    // A role whose sessions default to asynchronous commits still commits durably through the
    // store, which sets synchronous_commit on every connection it makes.
    c.batch_execute(
        "CREATE ROLE lazy LOGIN SUPERUSER; ALTER ROLE lazy SET synchronous_commit = off",
    )
    .await
    .unwrap();
    let lazy = url.replacen("postgres://postgres@", "postgres://lazy@", 1);
    let store = PgStore::open(&lazy).await.expect("open");
    assert_eq!(store.durability().await.unwrap().1, "on");
}

/// The store's sessions hand the pages they write to the disk every 256 kB rather than leaving
/// them to the kernel's bursts (`SESSION` in `postgres/mod.rs`), unless the database names a value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sessions_flush_their_writes_early_unless_the_database_says_otherwise() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.expect("open");
    assert_eq!(store.setting("backend_flush_after").await.unwrap(), "256kB");
    // A value the operator gave the database is theirs, and kept.
    let db = url.rsplit('/').next().expect("the URL names its database");
    admin(&url)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE \"{db}\" SET backend_flush_after = '1MB'"
        ))
        .await
        .unwrap();
    let store = PgStore::open(&url).await.expect("open");
    assert_eq!(store.setting("backend_flush_after").await.unwrap(), "1MB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_bad_urls_and_unreachable_servers_fail_with_a_cause() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let msg = backend_message(PgStore::open("postgres://exa mple:notaport/x").await);
    assert!(msg.contains("malformed"), "{msg}");
    // A closed port on loopback: refused at once, never a hang.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = PgOptions {
        connect_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    let msg = backend_message(
        PgStore::open_with(&format!("postgres://postgres@127.0.0.1:{port}/x"), opts).await,
    );
    assert!(msg.contains("PostgreSQL"), "{msg}");
    let db = Cluster::shared().url("no_such_database");
    let msg = backend_message(PgStore::open(&db).await);
    assert!(msg.contains("no_such_database"), "{msg}");
}

/// A pool whose every connection is busy answers an error after its bounded wait, and serves
/// again once a connection is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_dry_pool_answers_an_error_never_hangs() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let opts = PgOptions {
        max_connections: 1,
        wait: Duration::from_millis(200),
        ..PgOptions::default()
    };
    let store = PgStore::open_with(&url, opts).await.unwrap();
    // Hold the only connection: a publish waits on a table another session locked.
    let mut blocker = admin(&url).await;
    let t = blocker.transaction().await.unwrap();
    t.batch_execute("LOCK TABLE inbox_counters IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let s = store.clone();
    let publish = tokio::spawn(async move {
        s.publish(crate::fixtures::msg(
            "agt_a",
            "m",
            &["agt_b"],
            crate::fixtures::T0,
        ))
        .await
    });
    // Wait (without a timer) until the publish holds the pool's connection, waiting for the
    // lock with it, as a third session sees it. The pool's idle count is no sign: it falls as
    // soon as a caller starts asking for a connection (deadpool counts users), so the read below
    // was sometimes served first, waited out the lock, and left the publish the dry pool.
    until_locks_are_waited_for(&admin(&url).await, 1).await;
    assert_eq!(
        store.pool_status(),
        (1, 0),
        "the publish holds the only connection"
    );
    let Err(StoreError::Busy(msg)) = store.pending_count("agt_b").await else {
        panic!("served")
    };
    assert!(
        msg.contains("no PostgreSQL connection became free within 200 ms"),
        "{msg}"
    );
    t.rollback().await.unwrap();
    assert!(matches!(
        publish.await.unwrap().unwrap(),
        PublishOutcome::Stored { .. }
    ));
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 1);
}

/// A row another session holds without end (a replica's host gone mid-transaction) fails the
/// publishes that need it as busy after `lock_wait`, and only them: publishes into other inboxes,
/// queued behind the batches that waited, are stored (found in review: with both batch writers
/// waiting on one inbox's row, every later publish into any inbox waited with them, unbounded).
/// Nothing of a refused publish is stored, so its inbox stays gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_row_held_without_end_fails_only_its_publishes_as_busy() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, msg, stored};
    let url = Cluster::shared().database().await;
    let opts = PgOptions {
        lock_wait: Duration::from_millis(300),
        ..PgOptions::default()
    };
    let store = PgStore::open_with(&url, opts).await.unwrap();
    stored(&store, msg("agt_a", "b0", &["agt_b"], T0)).await;
    stored(&store, msg("agt_a", "c0", &["agt_c"], T0)).await;
    let watcher = admin(&url).await;
    let mut blocker = admin(&url).await;
    let held = blocker.transaction().await.unwrap();
    held.batch_execute("SELECT * FROM inbox_counters WHERE agent_id = 'agt_b' FOR UPDATE")
        .await
        .unwrap();
    // Both batch writers wait on agt_b's row, one publish each; then a publish into agt_c,
    // answered once the two batches gave up their wait (without the bound it never returns).
    let mut into_b = Vec::new();
    for (n, id) in ["b1", "b2"].into_iter().enumerate() {
        let s = store.clone();
        into_b.push(tokio::spawn(async move {
            s.publish(msg("agt_a", id, &["agt_b"], T0)).await
        }));
        until_locks_are_waited_for(&watcher, n as i64 + 1).await;
    }
    let into_c = store.publish(msg("agt_a", "c1", &["agt_c"], T0)).await;
    let Ok(PublishOutcome::Stored { sequences, .. }) = into_c else {
        panic!("not stored: {into_c:?}")
    };
    assert_eq!(sequences, vec![("agt_c".to_owned(), 2)]);
    for b in into_b {
        match b.await.unwrap() {
            Err(StoreError::Busy(m)) => assert!(m.contains("stayed locked"), "{m}"),
            other => panic!("not refused as busy: {other:?}"),
        }
    }
    held.rollback().await.unwrap();
    let (_, sequences) = stored(&store, msg("agt_a", "b3", &["agt_b"], T0)).await;
    assert_eq!(sequences, vec![("agt_b".to_owned(), 2)], "gap-free");
}

/// The gateway's store is an [`AnyStore`]: each call reaches the backend it holds, and `dump`
/// lists every stored row on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_store_dispatches_to_either_backend() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let (sqlite, _dir) = crate::sqlite_store();
    for store in [
        AnyStore::Sqlite(sqlite),
        AnyStore::Postgres(crate::pg_store().await),
    ] {
        crate::conformance::store_acks_with_stale_tokens(store.clone()).await;
        let dump = store.dump().await.unwrap();
        let inbox = dump.iter().filter(|l| l.starts_with("inbox:")).count();
        assert_eq!(inbox, 2, "{}: {dump:?}", store.backend());
        assert!(dump.windows(2).all(|w| w[0] <= w[1]), "sorted");
    }
}

#[test]
fn pg_urls_are_checked_without_connecting() {
    assert!(PgStore::check_url("postgres://u:p@db.example:5432/agentbus").is_ok());
    assert!(PgStore::check_url("postgresql://localhost/agentbus?connect_timeout=3").is_ok());
    let e = PgStore::check_url("mysql://localhost/x").unwrap_err();
    assert!(e.contains("postgres://"), "{e}");
    let e = PgStore::check_url("postgres://localhost:notaport/x").unwrap_err();
    assert!(e.contains("malformed"), "{e}");
}

/// Every server connection of the store dropped at once (what a PostgreSQL restart does to a
/// running gateway): calls fail with a backend error while their connections are dead, and the
/// same store serves again without being reopened; nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_lost_server_connection_heals_without_reopening() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let opts = PgOptions {
        max_connections: 4,
        ..PgOptions::default()
    };
    let store = PgStore::open_with(&url, opts).await.unwrap();
    for i in 0..8 {
        crate::fixtures::stored(
            &store,
            crate::fixtures::msg("agt_a", &format!("m{i}"), &["agt_b"], crate::fixtures::T0),
        )
        .await;
    }
    let c = admin(&url).await;
    let killed = c
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(!killed.is_empty());
    // Each dead connection fails at most one call; then the pool makes new ones.
    let mut failures = 0;
    let depth = loop {
        match store.pending_count("agt_b").await {
            Ok(n) => break n,
            Err(StoreError::Backend(_)) => failures += 1,
            Err(other) => panic!("{other:?}"),
        }
        assert!(failures <= 4, "the pool did not heal");
    };
    println!("calls failed while the connections were dead: {failures}");
    assert_eq!(depth, 8, "nothing stored was lost");
    crate::fixtures::stored(
        &store,
        crate::fixtures::msg("agt_a", "after", &["agt_b"], crate::fixtures::T0),
    )
    .await;
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 9);
}

/// Two replicas (two stores, each with its own pool) on one database, 8 publishers split between
/// them into one inbox while 4 leasers on each drain it: every inbox sequence is taken once with
/// no gap, and no entry is handed out twice across the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_two_replicas_share_sequences_and_leases() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use std::collections::BTreeSet;

    use crate::fixtures::{T0, lease_req, msg};

    let url = Cluster::shared().database().await;
    let replicas = [
        PgStore::open(&url).await.unwrap(),
        PgStore::open(&url).await.unwrap(),
    ];
    const EACH: usize = 30;
    let publishers: Vec<_> = (0..8)
        .map(|p| {
            let s = replicas[p % 2].clone();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for i in 0..EACH {
                    let m = msg(&format!("agt_p{p}"), &format!("m{p}_{i}"), &["agt_b"], T0);
                    match s.publish(m).await.unwrap() {
                        PublishOutcome::Stored { sequences, .. } => seqs.push(sequences[0].1),
                        other => panic!("{other:?}"),
                    }
                }
                seqs
            })
        })
        .collect();
    let leasers: Vec<_> = (0..8)
        .map(|l| {
            let s = replicas[l % 2].clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                // Until every message was seen by someone: the publishers are still running.
                for _ in 0..400 {
                    let batch = s.lease(lease_req("agt_b", 0, 5, T0 + 1)).await.unwrap();
                    got.extend(batch.into_iter().map(|d| d.sequence));
                    tokio::task::yield_now().await;
                }
                got
            })
        })
        .collect();
    let mut published = Vec::new();
    for p in publishers {
        published.extend(p.await.unwrap());
    }
    let mut leased = Vec::new();
    for l in leasers {
        leased.extend(l.await.unwrap());
    }
    // What the leasers did not reach before they stopped, one more pass collects.
    leased.extend(
        replicas[0]
            .lease(lease_req("agt_b", 0, 1000, T0 + 1))
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.sequence),
    );
    let total = (8 * EACH) as u64;
    published.sort_unstable();
    assert_eq!(
        published,
        (1..=total).collect::<Vec<_>>(),
        "no gap, no sequence twice"
    );
    let unique: BTreeSet<u64> = leased.iter().copied().collect();
    println!(
        "published {}, leased {}, duplicates {}, missing {}",
        published.len(),
        leased.len(),
        leased.len() - unique.len(),
        total as usize - unique.len()
    );
    assert_eq!(
        leased.len(),
        unique.len(),
        "no entry leased twice across replicas"
    );
    assert_eq!(unique, (1..=total).collect());
}

/// A signal one replica sends reaches the other (LISTEN/NOTIFY) and not itself;
/// a large topic's wake-up is split under PostgreSQL's payload limit and arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_signals_reach_the_other_replicas_and_not_the_sender() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let a = PgStore::open(&url).await.unwrap();
    let b = PgStore::open(&url).await.unwrap();
    let mut at_a = a.listen();
    let mut at_b = b.listen();
    // Listening is set up by a task: signal until b hears, which proves the connection listens.
    let heard = loop {
        a.signal(Signal::Identity).await.unwrap();
        if let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(100), at_b.recv()).await {
            break s;
        }
    };
    assert_eq!(heard, Signal::Identity);
    let many: Vec<String> = (0..450).map(|i| format!("agt_{i:026}")).collect();
    a.signal(Signal::Inbox(many.clone())).await.unwrap();
    let mut got = Vec::new();
    while got.len() < many.len() {
        match at_b.recv().await.unwrap() {
            Signal::Inbox(ids) => got.extend(ids),
            Signal::Identity => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, many);
    // a's listening connection may still be on its way (only b's was proven above): signal
    // until a hears.
    let back = loop {
        b.signal(Signal::Inbox(vec!["agt_x".into()])).await.unwrap();
        if let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(100), at_a.recv()).await {
            break s;
        }
    };
    assert_eq!(back, Signal::Inbox(vec!["agt_x".into()]));
    // Nothing of a's own came back to a: all it heard was b's.
    while let Ok(s) = at_a.try_recv() {
        assert_eq!(s, Signal::Inbox(vec!["agt_x".into()]));
    }
    println!("signals: identity, 450 ids in 3 notifications, one back");
}

/// An identity change is sent before `signal` returns: a process that ends right after it (as
/// `agentbus gateway admin-token` does) still tells the running replicas to forget the old
/// credentials. Queued for the sending task, it was dropped with the process's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_an_identity_signal_is_sent_before_the_call_returns() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let running = PgStore::open(&url).await.unwrap();
    let mut heard = running.listen();
    // Signal until the running replica hears, which proves its connection listens.
    let other = PgStore::open(&url).await.unwrap();
    loop {
        other
            .signal(Signal::Inbox(vec!["agt_x".into()]))
            .await
            .unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), heard.recv()).await {
            break;
        }
    }
    // The command's own runtime, which ends once its work returns.
    let command_url = url.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = PgStore::open(&command_url).await.unwrap();
            store.signal(Signal::Identity).await.unwrap();
        });
    })
    .join()
    .unwrap();
    let identity = async {
        while let Some(s) = heard.recv().await {
            if s == Signal::Identity {
                return true;
            }
        }
        false
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(30), identity)
            .await
            .unwrap_or(false),
        "the running replica never heard of the change"
    );
}

/// The reaper's claim goes to one replica at a time, is renewed by its holder,
/// and passes to another only once it ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_the_reaper_claim_is_held_by_one_replica_at_a_time() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let url = Cluster::shared().database().await;
    let (a, b) = (
        PgStore::open(&url).await.unwrap(),
        PgStore::open(&url).await.unwrap(),
    );
    let t0 = crate::fixtures::T0;
    let (x, y) = tokio::join!(a.claim_reaper("a", t0, 1000), b.claim_reaper("b", t0, 1000));
    assert!(
        x.unwrap() ^ y.unwrap(),
        "exactly one of two racing replicas holds it"
    );
    let holder = if a.claim_reaper("a", t0 + 1, 1000).await.unwrap() {
        "a"
    } else {
        "b"
    };
    let other = if holder == "a" { "b" } else { "a" };
    assert!(
        a.claim_reaper(holder, t0 + 500, 1000).await.unwrap(),
        "the holder renews"
    );
    assert!(
        !b.claim_reaper(other, t0 + 1400, 1000).await.unwrap(),
        "renewed until 1500"
    );
    assert!(
        b.claim_reaper(other, t0 + 1501, 1000).await.unwrap(),
        "ran out: taken over"
    );
    assert!(!a.claim_reaper(holder, t0 + 1600, 1000).await.unwrap());
}

/// The group commit (`postgres/batch.rs`): publishes that arrive together share a
/// transaction, and each still gets the outcome it would get alone: one copy of a repeated id,
/// one of a repeated idempotency key, gap-free sequences, and a publish the database refuses
/// fails alone while the others of its batch are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_publishes_arriving_together_share_commits_and_keep_their_outcomes() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, msg};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    let n = 120;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move {
                let m = match i % 10 {
                    // The same id ten more times, and the same idempotency key ten more times.
                    3 => msg("agt_a", "again", &["agt_b"], T0),
                    5 => {
                        let mut m = msg("agt_a", &format!("k{i}"), &["agt_b"], T0);
                        m.idempotency = Some(IdempotencyKey {
                            tenant_id: "ten_1".into(),
                            source: m.source.clone(),
                            to_id: "agt_b".into(),
                            key: "one-key".into(),
                        });
                        m
                    }
                    _ => msg("agt_a", &format!("u{i}"), &["agt_b"], T0),
                };
                (i, s.publish(m).await)
            })
        })
        .collect();
    let mut seqs = Vec::new();
    let (mut again, mut keyed, mut failed) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    let mut copies = [0; 10];
    for t in tasks {
        let (i, outcome) = t.await.unwrap();
        match outcome {
            Ok(PublishOutcome::Stored {
                message, sequences, ..
            }) => {
                seqs.push(sequences[0].1);
                match i % 10 {
                    3 => again.insert(message.seq),
                    5 => keyed.insert(message.seq),
                    _ => true,
                };
                copies[i % 10] += 1;
            }
            Ok(PublishOutcome::DuplicateId(row)) => {
                assert_eq!((i % 10, row.id.as_str()), (3, "again"));
                again.insert(row.seq);
            }
            Ok(PublishOutcome::IdempotentReplay(row)) => {
                assert_eq!(i % 10, 5);
                keyed.insert(row.seq);
            }
            Ok(other) => panic!("publish {i}: {other:?}"),
            Err(_) => failed.push(i),
        }
    }
    assert_eq!(failed, Vec::<usize>::new());
    assert_eq!((copies[3], copies[5]), (1, 1), "one copy each");
    assert_eq!(
        (again.len(), keyed.len()),
        (1, 1),
        "the replays name that copy"
    );
    seqs.sort_unstable();
    let stored = n - 11 - 11;
    assert_eq!(seqs, (1..=stored as u64).collect::<Vec<_>>(), "gap-free");
    assert_eq!(store.pending_count("agt_b").await.unwrap(), stored as u64);
    // Rows written by one transaction share its id (`xmin`): fewer transactions than messages.
    let c = admin(&url).await;
    let commits: i64 = c
        .query_one("SELECT count(DISTINCT xmin::text) FROM messages", &[])
        .await
        .unwrap()
        .get(0);
    println!("{stored} messages stored in {commits} transactions");
    assert!(
        (commits as usize) < stored / 2,
        "{stored} messages in {commits} transactions"
    );

    // PostgreSQL holds no NUL in text: a publish carrying one fails, and only it, though it
    // arrives with the others (its batch is stored again one by one).
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move {
                let mut m = msg("agt_a", &format!("v{i}"), &["agt_b"], T0);
                if i == 17 {
                    m.kind = "bad\0kind".into();
                }
                (i, s.publish(m).await)
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (_, Ok(PublishOutcome::Stored { sequences, .. })) => seqs.push(sequences[0].1),
            (i, Ok(other)) => panic!("publish {i}: {other:?}"),
            (i, Err(_)) => failed.push(i),
        }
    }
    assert_eq!(failed, [17], "only the refused publish failed");
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=stored as u64 + 39).collect::<Vec<_>>(),
        "gap-free"
    );
}

/// An ack whose caller goes away after it started (a WebSocket closing mid-burst) leaves no
/// transaction open on the pooled connection: its statements go out together with `BEGIN` and
/// `COMMIT`. Spread over two round trips, a dropped ack left the connection idle in a transaction,
/// and the next operation on it committed half an ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_an_ack_dropped_midway_leaves_no_transaction_open() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, lease_req, msg};

    let url = Cluster::shared().database().await;
    let opts = PgOptions {
        max_connections: 1,
        ..PgOptions::default()
    };
    let store = PgStore::open_with(&url, opts).await.unwrap();
    for id in ["m1", "m2"] {
        store
            .publish(msg("agt_a", id, &["agt_b"], T0))
            .await
            .unwrap();
    }
    let leased = store.lease(lease_req("agt_b", 0, 2, T0)).await.unwrap();
    let token = |i: usize| (leased[i].sequence, leased[i].token.clone());
    // The first ack prepares the statements on the one pooled connection.
    let first = store.ack("agt_b", vec![token(0)], T0 + 1).await.unwrap();
    assert_eq!(first, vec![AckOutcome::Acked]);
    let mut second = Box::pin(store.ack("agt_b", vec![token(1)], T0 + 2));
    // Polled once (it sends what it sends first), then dropped.
    tokio::select! {
        biased;
        _ = &mut second => {}
        () = std::future::ready(()) => {}
    }
    drop(second);
    let c = admin(&url).await;
    let state = loop {
        let row = c
            .query_one(
                "SELECT coalesce(state, '') FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = 'agentbus' \
                 AND pid <> pg_backend_pid() AND query NOT LIKE 'LISTEN%' \
                 ORDER BY backend_start DESC LIMIT 1",
                &[],
            )
            .await
            .unwrap();
        let state: String = row.get(0);
        if state != "active" {
            break state;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(state, "idle", "the pooled connection after a dropped ack");
}

/// A publish batch plans on its inboxes' counters as read before it locks them, and checks that
/// plan under the lock: a publisher that committed in between moves the batch's sequences on,
/// and one that filled the inbox meanwhile turns a planned store into the refusal a publish
/// alone gets, never an inbox over its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_batch_planned_before_its_lock_is_checked_under_it() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, msg};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    store
        .publish(msg("agt_a", "m0", &["agt_b"], T0))
        .await
        .unwrap();
    let c = admin(&url).await;
    // Publishes `id` (inbox limit `max`) while another transaction holds agt_b's counter row,
    // and lets that one run `then` and commit once the publish waits for the row.
    let publish_past_another = async |id: &str, max: u64, then: &str| {
        c.batch_execute("BEGIN; SELECT 1 FROM inbox_counters WHERE agent_id = 'agt_b' FOR UPDATE")
            .await
            .unwrap();
        let (s, mut m) = (store.clone(), msg("agt_a", id, &["agt_b"], T0));
        m.max_depth = Some(max);
        let publish = tokio::spawn(async move { s.publish(m).await.unwrap() });
        until_locks_are_waited_for(&c, 1).await;
        c.batch_execute(&format!("{then}; COMMIT")).await.unwrap();
        publish.await.unwrap()
    };
    let another_entry = "UPDATE inbox_counters SET last_seq = last_seq + 1, added = added + 1 \
                         WHERE agent_id = 'agt_b'";
    // Planned on depth 1 and sequence 1; stored after the other's entry (sequence 2).
    match publish_past_another("m1", 10, another_entry).await {
        PublishOutcome::Stored {
            sequences, depths, ..
        } => {
            assert_eq!(sequences, [("agt_b".to_string(), 3)]);
            assert_eq!(depths, [3]);
        }
        other => panic!("{other:?}"),
    }
    // Planned on depth 3 under a limit of 4, which the other's entry reaches.
    match publish_past_another("m2", 4, another_entry).await {
        PublishOutcome::InboxFull { agent_id, depth } => {
            assert_eq!((agent_id.as_str(), depth), ("agt_b", 4));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 4);
}

/// A publish that waited for an inbox's counter row decides "full" on the depth as it stands once
/// the row is held, the acks committed during the wait counted. Read in the locking statement
/// itself, they were missed (its snapshot is from before the wait), and beside the row's newest
/// `added` made a depth the inbox never had: here 3 under a limit of 2, where it held 1. Both
/// ways a publish locks: a batch run again with its rows locked first (its plan refused at depth
/// 2), and a publish with a task, stored alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_publish_that_waited_for_the_counter_row_counts_the_acks_of_the_wait() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, event, lease_req, msg, task_row};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    let c = admin(&url).await;
    for (inbox, with_task) in [("agt_b", false), ("agt_c", true)] {
        for k in 0..2 {
            let m = msg("agt_a", &format!("{inbox}_{k}"), &[inbox], T0);
            store.publish(m).await.unwrap();
        }
        let leased = store.lease(lease_req(inbox, 0, 2, T0)).await.unwrap();
        assert_eq!(leased.len(), 2);
        c.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM inbox_counters WHERE agent_id = '{inbox}' FOR UPDATE"
        ))
        .await
        .unwrap();
        let mut m = msg("agt_a", &format!("{inbox}_limited"), &[inbox], T0);
        m.max_depth = Some(2);
        if with_task {
            let id = format!("tsk_{inbox}");
            m.task_id = Some(id.clone());
            m.task = Some(TaskWrite::Create(
                task_row(&id, 1, None),
                event("agentbus.task.request.v1", "", "submitted", T0),
            ));
        }
        let s = store.clone();
        let publish = tokio::spawn(async move { s.publish(m).await.unwrap() });
        until_locks_are_waited_for(&c, 1).await;
        // While it waits: both entries are acked (depth 0), then the holder adds one (depth 1).
        let acks = leased
            .iter()
            .map(|d| (d.sequence, d.token.clone()))
            .collect();
        let acked = store.ack(inbox, acks, T0 + 1).await.unwrap();
        assert_eq!(acked, [AckOutcome::Acked, AckOutcome::Acked]);
        c.batch_execute(&format!(
            "UPDATE inbox_counters SET last_seq = last_seq + 1, added = added + 1 \
             WHERE agent_id = '{inbox}'; COMMIT"
        ))
        .await
        .unwrap();
        match publish.await.unwrap() {
            PublishOutcome::Stored {
                sequences, depths, ..
            } => {
                assert_eq!(sequences, [(inbox.to_string(), 4)]);
                assert_eq!(depths, [2], "{inbox}");
            }
            other => panic!("{inbox}: refused at a depth the inbox never had: {other:?}"),
        }
    }
}

/// Concurrent publishes grouped into batches that name an inbox twice, several inboxes in either
/// order, blob references (recorded once each message's sequence is known), shared idempotency
/// keys and repeated ids: every inbox comes out gap-free, its counter at its last entry, and no
/// id stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_batches_of_mixed_publishes_keep_every_inbox_gap_free() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, msg};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    for round in 0..5 {
        let publishes = (0..60).map(|i| {
            let s = store.clone();
            tokio::spawn(async move {
                let to: &[&str] = match i % 4 {
                    0 => &["agt_b", "agt_c"],
                    1 => &["agt_b", "agt_b"],
                    2 => &["agt_c"],
                    _ => &["agt_c", "agt_b", "agt_c"],
                };
                let mut m = msg("agt_a", &format!("r{round}i{i}"), to, T0);
                m.max_depth = Some(100_000);
                if i % 3 == 0 {
                    m.blob_refs = vec![format!("blb_{i}")];
                }
                if i % 5 == 0 {
                    m.idempotency = Some(IdempotencyKey {
                        tenant_id: "ten_1".into(),
                        source: m.source.clone(),
                        to_id: "agt_b".into(),
                        key: format!("k{round}-{}", i % 2),
                    });
                }
                if i % 7 == 0 {
                    m.id = format!("r{round}dup");
                }
                s.publish(m).await.unwrap()
            })
        });
        for p in publishes.collect::<Vec<_>>() {
            p.await.unwrap();
        }
    }
    let c = admin(&url).await;
    for agent in ["agt_b", "agt_c"] {
        let sequences: Vec<i64> = c
            .query(
                "SELECT sequence FROM inbox WHERE agent_id = $1 ORDER BY sequence",
                &[&agent],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let n = sequences.len() as i64;
        println!("{agent}: {n} entries");
        assert!(n > 0);
        assert_eq!(sequences, (1..=n).collect::<Vec<_>>(), "{agent} gap-free");
        let last: i64 = c
            .query_one(
                "SELECT last_seq FROM inbox_counters WHERE agent_id = $1",
                &[&agent],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(last, n);
    }
    let twice: i64 = c
        .query_one(
            "SELECT count(*) FROM (SELECT id FROM messages GROUP BY id HAVING count(*) > 1) d",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(twice, 0, "ids stored twice");
}

/// A reaping pass counts what it settled in the inboxes' `inbox_settled` rows in id order, once,
/// after both its sweeps: counted after each sweep, a pass that dead-lettered in `agt_b` and then
/// expired in `agt_a` held `agt_b`'s row while it waited for `agt_a`'s, and a second reaper
/// (a pass that outlived its claim) holding them the other way round deadlocked with it. Played
/// here by another transaction that holds `agt_a`'s row and then takes `agt_b`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_reaping_pass_counts_its_settled_entries_in_inbox_order() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, lease_req, msg};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    store
        .publish(msg("agt_x", "to_b", &["agt_b"], T0))
        .await
        .unwrap();
    assert_eq!(
        store
            .lease(lease_req("agt_b", 0, 1, T0))
            .await
            .unwrap()
            .len(),
        1
    );
    let mut short = msg("agt_x", "to_a", &["agt_a"], T0);
    short.expires_at = T0 + 10;
    store.publish(short).await.unwrap();
    let settle = |agent: &str| {
        format!(
            "INSERT INTO inbox_settled (agent_id, settled) VALUES ('{agent}', 0) \
             ON CONFLICT (agent_id) DO UPDATE SET settled = inbox_settled.settled"
        )
    };
    let c = admin(&url).await;
    c.batch_execute(&format!("BEGIN; {}", settle("agt_a")))
        .await
        .unwrap();
    // Past agt_b's lease, at its one attempt allowed, and past agt_a's entry's expiry.
    let s = store.clone();
    let reap = tokio::spawn(async move { s.reap_inboxes(T0 + 60_000, 1).await });
    until_locks_are_waited_for(&c, 1).await;
    c.batch_execute(&settle("agt_b"))
        .await
        .expect("agt_b's row was free: the pass had not counted anything before agt_a's");
    c.batch_execute("COMMIT").await.unwrap();
    let report = reap.await.unwrap().expect("the pass completed");
    let ids = |v: &[InboxEntry]| v.iter().map(|e| e.agent_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&report.dead), ["agt_b"]);
    assert_eq!(ids(&report.expired), ["agt_a"]);
    assert_eq!(store.pending_count("agt_a").await.unwrap(), 0);
    assert_eq!(store.pending_count("agt_b").await.unwrap(), 0);
}

/// A new database's store with agents `agt_a` (alice) and `agt_b` (bob) in one workspace.
async fn alice_and_bob() -> (String, PgStore) {
    use crate::fixtures::{agent, agents, tenant, workspace};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    store.create_tenant(tenant("ten_1", "acme")).await.unwrap();
    let ws = workspace("ws_1", "ten_1", "main");
    store.create_workspace(ws).await.unwrap();
    agents(&store, &[agent("agt_a", "alice"), agent("agt_b", "bob")]).await;
    (url, store)
}

/// Suspends `agt_b` while another session holds what `holding` (run in its own transaction)
/// locked, checks the suspension waits for it, then lets that session run `then` and commit;
/// answers what the suspension held.
async fn suspend_past_another(
    url: &str,
    store: &PgStore,
    holding: &str,
    then: &str,
) -> Vec<InboxEntry> {
    let c = admin(url).await;
    c.batch_execute(&format!("BEGIN; {holding}")).await.unwrap();
    let s = store.clone();
    let suspend =
        tokio::spawn(async move { s.suspend_agent("agt_b", crate::fixtures::T0 + 1).await });
    let waits = tokio::time::timeout(Duration::from_secs(10), until_locks_are_waited_for(&c, 1));
    assert!(
        waits.await.is_ok(),
        "the suspension did not wait for the other session"
    );
    c.batch_execute(&format!("{then}; COMMIT")).await.unwrap();
    suspend.await.unwrap().unwrap()
}

/// A suspension reads its agent's queue without locking it, so an ack (or the reaper) may settle
/// an entry between the read and the marking: the hold is marked, and answered, only on the
/// entries still pending when the update reaches them (checked again on the row it waited for).
/// Marked on the read alone, the acknowledged copy here was held too, and its sender told
/// AB-4013 about a copy the receiver had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_suspension_holds_no_copy_settled_while_it_waits() {
    use crate::fixtures::{T0, msg};

    let (url, store) = alice_and_bob().await;
    for id in ["acked", "held"] {
        store
            .publish(msg("agt_a", id, &["agt_b"], T0))
            .await
            .unwrap();
    }
    // An ack of the first copy, holding its row until the suspension waits for it.
    let ack = "UPDATE inbox SET state = 2 WHERE agent_id = 'agt_b' AND sequence = 1";
    let held = suspend_past_another(&url, &store, ack, "").await;
    let ids: Vec<&str> = held.iter().map(|e| e.message.id.as_str()).collect();
    assert_eq!(ids, ["held"]);
    let owed = store
        .pending_notices((String::new(), 0), 100)
        .await
        .unwrap();
    let owed: Vec<(u64, NoticeKind)> = owed.iter().map(|(e, k)| (e.sequence, *k)).collect();
    assert_eq!(owed, [(2, NoticeKind::Held)]);
}

/// A suspension takes its inbox's counter row before it reads the queue, as every publish into
/// the inbox holds that row from before it reads whether the agent is suspended to its commit: a
/// publish that read the agent live (here another connection's, holding the row and storing an
/// entry) is committed before the suspension's read, which holds its copy. Without the row, the
/// suspension read the queue without that copy and the publish stored it unheld: a copy kept
/// from a suspended agent whose sender was never told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_suspension_holds_the_copy_of_a_publish_it_raced() {
    use crate::fixtures::{T0, msg};

    let (url, store) = alice_and_bob().await;
    store
        .publish(msg("agt_a", "first", &["agt_b"], T0))
        .await
        .unwrap();
    let counter = "SELECT 1 FROM inbox_counters WHERE agent_id = 'agt_b' FOR UPDATE";
    // The racing publish's copy (a second entry of the same message will do), then its commit.
    let publish = "INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at) \
         SELECT agent_id, 2, message_seq, 0, 0, visible_at, expires_at FROM inbox \
         WHERE agent_id = 'agt_b' AND sequence = 1; \
         UPDATE inbox_counters SET last_seq = 2, added = added + 1 WHERE agent_id = 'agt_b'";
    let held = suspend_past_another(&url, &store, counter, publish).await;
    let held: Vec<u64> = held.iter().map(|e| e.sequence).collect();
    assert_eq!(held, [1, 2]);
}

/// A batch writes its messages' search index rows before it locks its inboxes' counter rows
/// (`postgres::batch::SEARCH_ALL`), the rows that make publishes into one inbox serial: a
/// publish waiting for a held counter row has written to `search_terms` already, so one batch's
/// index work overlaps another's hold instead of lengthening it. Its row names its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_batch_indexes_its_messages_before_it_waits_for_the_counter_row() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    use crate::fixtures::{T0, msg};

    let url = Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    let c = admin(&url).await;
    store
        .publish(msg("agt_a", "first", &["agt_b"], T0))
        .await
        .unwrap();
    c.batch_execute("BEGIN; SELECT 1 FROM inbox_counters WHERE agent_id = 'agt_b' FOR UPDATE")
        .await
        .unwrap();
    let mut m = msg("agt_a", "indexed", &["agt_b"], T0);
    m.search_tags = "aa01 bb02".into();
    let s = store.clone();
    let publish = tokio::spawn(async move { s.publish(m).await.unwrap() });
    until_locks_are_waited_for(&c, 1).await;
    let indexing: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE a.datname = current_database() AND a.wait_event_type = 'Lock' \
             AND l.relation = 'search_terms'::regclass AND l.mode = 'RowExclusiveLock' AND l.granted",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(indexing, 1, "the waiting publish has written its index row");
    c.batch_execute("COMMIT").await.unwrap();
    let seq = match publish.await.unwrap() {
        PublishOutcome::Stored { message, .. } => message.seq,
        other => panic!("not stored: {other:?}"),
    };
    let found: i64 = c
        .query_one(
            "SELECT count(*) FROM search_terms WHERE message_seq = $1 AND tags @@ 'aa01 & bb02'::tsquery",
            &[&seq],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(found, 1, "the index row is the stored message's");
}
