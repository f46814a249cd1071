//! The generic plans of the statements on every publish's and delivery's path read by index.
//!
//! Pooled connections let PostgreSQL cache a prepared statement's generic plan (planning the
//! lease for its parameters cost a noticeable share of a core under steady load;
//! docs/benchmarks.md). That is safe only while no generic plan reads a queue table whole: the
//! lease's earlier form did, and took 14 s per lease on an inbox of a few thousand entries. The
//! statistics here are taken before one inbox grows large, as autovacuum's lag leaves them: a
//! plan that finds an inbox's entries by agent alone and filters the sequences looks cheap then
//! (the lease's update did, at run time, until bounded by its sequences' range).

use agentbus_store::PgStore;
use agentbus_store::postgres::plans::hot_statements;

/// A queue big enough that reading any of its tables whole costs more than an index: 20
/// inboxes of 1,000 entries each (a third never delivered, a third leased, a third acked),
/// 20,000 of one entry each (so an agent is estimated at a few entries), and one of 60,000 nearly
/// all acked (a busy receiver's), added after the statistics were taken, as in an inbox growing
/// by thousands a minute, their
/// messages, replay and idempotency records, 20,000 inbox counters and 20,000 agents.
const FILL: &str = r"
INSERT INTO messages (tenant_id, id, source, kind, conversation_id, to_text, to_id, attrs, data,
    signed_hash, receipt, received_at, expires_at)
SELECT 'ten_1', 'msg_' || g, 'src', 'tell', 'cnv', 'to', 'agt_' || (g % 20), '{}', '\x00', '\x00',
    'rct_' || g, g, g + 1000000 FROM generate_series(1, 20000) g;
INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, lease)
SELECT 'agt_' || (seq % 20), seq, seq, seq % 3, 1, seq, seq + 1000000, 'd' || seq FROM messages;
INSERT INTO recent_ids SELECT tenant_id, source, id, seq, received_at FROM messages;
INSERT INTO idempotency SELECT tenant_id, source, to_id, 'key_' || seq, seq, received_at FROM messages;
INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, lease)
SELECT 'agt_one_' || g, 1, g, 2, 1, g, g + 1000000, 'd1' FROM generate_series(1, 20000) g;
INSERT INTO inbox_counters SELECT 'agt_' || g, 1000, 1000 FROM generate_series(0, 19999) g;
INSERT INTO agents (id, tenant_id, workspace_id, name, card, visibility, created_at, updated_at)
SELECT 'agt_' || g, 'ten_1', 'ws_1', 'agent-' || g, '{}', 'workspace', 0, 0 FROM generate_series(0, 19999) g;
INSERT INTO inbox_settled SELECT 'agt_' || g, 10 FROM generate_series(0, 19999) g;
ANALYZE;
INSERT INTO inbox (agent_id, sequence, message_seq, state, attempts, visible_at, expires_at, lease)
SELECT 'agt_big', g, 1 + g % 20000, CASE WHEN g > 59990 THEN 0 ELSE 2 END, 1, g, g + 1000000, 'd' || g
FROM generate_series(1, 60000) g;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_generic_plans_of_the_hot_statements_read_by_index() {
    if crate::pg::skip() {
        return;
    }
    let url = crate::pg::Cluster::shared().database().await;
    let _store = PgStore::open(&url).await.expect("open (migrates)");
    let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    let cases = hot_statements();
    // First as a new database's first minute has them (every table empty, no statistics yet:
    // a plan cached then is kept until autovacuum's first ANALYZE), then on the filled queue.
    c.batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .expect("generic plans");
    for when in ["on empty tables", "on a filled queue"] {
        if when == "on a filled queue" {
            c.batch_execute(FILL).await.expect("fill");
        }
        for (name, sql, args) in &cases {
            let plan = generic_plan(&c, sql, args)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Some(why) = reads_whole(&plan) {
                panic!("{name} {when}: {why}:\n{}", plan.join("\n"));
            }
            // The never-delivered entries above the cursor and those stranded below it are read
            // through the index of never-delivered entries: by the inbox's primary key, the
            // stranded ones' bound (`sequence <= after`) spans the inbox's whole history.
            let by_new = plan
                .iter()
                .filter(|l| l.contains("using inbox_new"))
                .count();
            if name.starts_with("lease") && by_new < 2 {
                panic!(
                    "{name} {when}: new and stranded entries not both read by inbox_new:\n{}",
                    plan.join("\n")
                );
            }
        }
    }
}

/// The lines of `EXPLAIN` for `sql`'s generic plan with `args`.
async fn generic_plan(
    c: &tokio_postgres::Client,
    sql: &str,
    args: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    c.batch_execute(&format!("PREPARE s AS {sql}")).await?;
    let plan = c
        .simple_query(&format!("EXPLAIN EXECUTE s({args})"))
        .await?
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect();
    c.batch_execute("DEALLOCATE s").await?;
    Ok(plan)
}

/// What reads a table, or an inbox, whole in an `EXPLAIN` output: a sequential scan, an index
/// read with no bound (`Index Cond`), an inbox index not bounded by the agent, or the inbox's
/// primary key bounded by the agent alone (the lease's earlier generic plans walked every entry
/// of an inbox, or every leased entry of every inbox, those ways, filtering as they went).
fn reads_whole(plan: &[String]) -> Option<String> {
    for (i, line) in plan.iter().enumerate() {
        if line.contains("Seq Scan") {
            return Some(format!("a sequential scan ({})", line.trim()));
        }
        // `Index Scan using x on t`, `Index Only Scan using x on t`, `Bitmap Index Scan on x`.
        if !line.contains("Scan using") && !line.contains("Bitmap Index Scan on") {
            continue;
        }
        // The node's own details run up to the next node (`->`).
        let cond = plan[i + 1..]
            .iter()
            .take_while(|l| !l.contains("->"))
            .find(|l| l.contains("Index Cond"));
        // A bitmap index scan names its index, not its table.
        let inbox = line.split_whitespace().skip_while(|w| *w != "on").nth(1) == Some("inbox")
            || line.contains("Bitmap Index Scan on inbox_");
        match cond {
            None => return Some(format!("an index read whole ({})", line.trim())),
            Some(c) if inbox && !c.contains("agent_id") => {
                return Some(format!("inboxes read across agents ({})", line.trim()));
            }
            Some(c) if line.contains("inbox_pkey") && !c.contains("sequence") => {
                return Some(format!(
                    "an inbox walked by its agent alone ({})",
                    line.trim()
                ));
            }
            Some(_) => {}
        }
    }
    None
}
