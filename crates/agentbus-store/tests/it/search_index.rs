//! Deletion reaches the search index: a message's index row goes with the message's row (a
//! trigger on each store), whatever removes it, so no retention or deletion can leave a message
//! findable, or its word hashes stored, after it is gone.

use agentbus_store::*;

use crate::fixtures::*;

/// A tenant with two agents and one message from the first to the second, indexed under `aa01`
/// and `bb02`; answers the message's storage sequence.
async fn one_indexed_message(store: &impl Store) -> i64 {
    store.create_tenant(tenant("ten_1", "acme")).await.unwrap();
    store
        .create_workspace(workspace("ws_1", "ten_1", "main"))
        .await
        .unwrap();
    agents(store, &[agent("agt_a", "alice"), agent("agt_b", "bob")]).await;
    let mut m = msg("agt_a", "s1", &["agt_b"], 1_000);
    m.search_tags = "aa01 bb02".into();
    stored(store, m).await.0.seq as i64
}

/// On SQLite the row is first in the pending list, later merged into FTS5 (the store's
/// `merge_search_pending`, whose statements the test runs itself): it goes from either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_deleting_a_message_deletes_its_index_row() {
    for merged in [false, true] {
        let (store, dir) = crate::sqlite_store();
        let seq = one_indexed_message(&store).await;
        drop(store);
        let c = rusqlite::Connection::open(dir.path().join("agentbus.db")).unwrap();
        if merged {
            c.execute_batch(
                "INSERT INTO search_terms (rowid, tags) SELECT seq, tags FROM search_pending; \
                 DELETE FROM search_pending;",
            )
            .unwrap();
        }
        let indexed = |c: &rusqlite::Connection| -> (i64, i64) {
            let n = |sql| c.query_row(sql, [], |r| r.get(0)).unwrap();
            (
                n("SELECT count(*) FROM search_pending WHERE tags = 'aa01 bb02'"),
                n("SELECT count(*) FROM search_terms WHERE search_terms MATCH 'aa01 OR bb02'"),
            )
        };
        assert_eq!(indexed(&c), if merged { (0, 1) } else { (1, 0) });
        c.execute("DELETE FROM messages WHERE seq = ?1", [seq])
            .unwrap();
        assert_eq!(
            indexed(&c),
            (0, 0),
            "the message is gone, its index row too"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_deleting_a_message_deletes_its_index_row() {
    if crate::pg::skip() {
        return;
    }
    let url = crate::pg::Cluster::shared().database().await;
    let store = PgStore::open(&url).await.unwrap();
    let seq = one_indexed_message(&store).await;
    let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let indexed = async |c: &tokio_postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM search_terms WHERE tags @@ 'aa01 | bb02'::tsquery",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    };
    assert_eq!(indexed(&c).await, 1);
    c.execute("DELETE FROM messages WHERE seq = $1", &[&seq])
        .await
        .unwrap();
    assert_eq!(
        indexed(&c).await,
        0,
        "the message is gone, its index row too"
    );
}
