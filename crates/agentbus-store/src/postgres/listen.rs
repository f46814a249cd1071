//! Signals between replicas: `NOTIFY` after a change commits, one held `LISTEN` connection per
//! process. PostgreSQL delivers a notification to every session listening when the sending
//! transaction commits; a session that was not connected then never sees it, so a reconnect is
//! reported as [`Signal::Resync`] and the gateway polls as a fallback anyway.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use super::PgStore;
use crate::{Signal, StoreResult};

/// The channel inbox wake-ups go on: `<replica> <agent id>,<agent id>…`.
const INBOX: &str = "agentbus_inbox";
/// The channel identity changes go on: `<replica>`.
const IDENTITY: &str = "agentbus_identity";
/// A notification's payload is at most 8,000 bytes; agent ids are about 30, so a wake-up of a
/// large topic is split into notifications of this many ids.
const IDS_PER_NOTIFY: usize = 200;
/// How long a lost listening connection waits before it is made again.
const RECONNECT: Duration = Duration::from_millis(500);

/// Starts the task that sends this store's signals: whatever queued while one `NOTIFY` was on
/// its way goes in the next, merged (each inbox once, identity changes once), so a burst of
/// publishes costs a few notifications rather than one each.
pub(super) fn start_sender(
    pool: deadpool_postgres::Pool,
    replica: String,
) -> mpsc::UnboundedSender<Signal> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut queued = vec![first];
            while let Ok(s) = rx.try_recv() {
                queued.push(s);
            }
            if let Some(sql) = notify_sql(&replica, queued) {
                // A notification lost here only delays a wake-up: the replicas re-read their
                // inboxes at least once a second, and drop cached identities on a `Resync`.
                if let Ok(c) = pool.get().await {
                    let _ = c.batch_execute(&sql).await;
                }
            }
        }
    });
    tx
}

/// One transaction that sends `signals` from `me`, merged; `None` when there is nothing to send.
fn notify_sql(me: &str, signals: Vec<Signal>) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    let mut ids = Vec::new();
    let mut identity = false;
    for s in signals {
        match s {
            Signal::Inbox(list) => {
                // Ids are minted by the gateway (letters, digits, `_`); anything else is left
                // out rather than quoted into SQL.
                for id in list {
                    if id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !id.is_empty()
                        && seen.insert(id.clone())
                    {
                        ids.push(id);
                    }
                }
            }
            Signal::Identity => identity = true,
            Signal::Resync => {}
        }
    }
    if ids.is_empty() && !identity {
        return None;
    }
    // Its own transaction, committed without waiting for the disk: a notification is a hint
    // about changes that are durable already, and must not hold the commit of a publish.
    let mut sql = String::from("BEGIN; SET LOCAL synchronous_commit = off;");
    for chunk in ids.chunks(IDS_PER_NOTIFY) {
        sql.push_str(&format!(" NOTIFY {INBOX}, '{me} {}';", chunk.join(",")));
    }
    if identity {
        sql.push_str(&format!(" NOTIFY {IDENTITY}, '{me}';"));
    }
    sql.push_str(" COMMIT;");
    Some(sql)
}

impl PgStore {
    pub(super) async fn notify(&self, s: Signal) -> StoreResult<()> {
        // An identity change is sent before this returns, and its failure answered: the other
        // replicas would hold a revoked credential until the next one, and a process that ends
        // right after (`agentbus gateway admin-token`) dropped one left queued. Wake-ups are
        // hints the replicas also poll for: queued and merged.
        let now = match s {
            Signal::Identity => s,
            // The sending task is gone (its runtime ended): sent here.
            s => match self.signals.send(s) {
                Ok(()) => return Ok(()),
                Err(unsent) => unsent.0,
            },
        };
        if let Some(sql) = notify_sql(&self.replica, vec![now]) {
            self.client().await?.batch_execute(&sql).await?;
        }
        Ok(())
    }

    /// Signals the other replicas send, until the receiver is dropped: the listening connection
    /// is made (and made again after a loss, with [`Signal::Resync`]) by a task of its own.
    pub fn listen(&self) -> mpsc::UnboundedReceiver<Signal> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (config, me) = (self.config.clone(), self.replica.clone());
        tokio::spawn(async move {
            let mut connected_before = false;
            while !tx.is_closed() {
                if let Ok((client, mut conn)) = config.connect(NoTls).await {
                    let (ntx, mut nrx) = mpsc::unbounded_channel();
                    let driver = tokio::spawn(async move {
                        while let Some(m) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                            match m {
                                Ok(AsyncMessage::Notification(n)) => {
                                    let _ =
                                        ntx.send((n.channel().to_owned(), n.payload().to_owned()));
                                }
                                Ok(_) => {}
                                Err(_) => break,
                            }
                        }
                    });
                    let listening = client
                        .batch_execute(&format!("LISTEN {INBOX}; LISTEN {IDENTITY};"))
                        .await
                        .is_ok();
                    if listening {
                        if connected_before {
                            let _ = tx.send(Signal::Resync);
                        }
                        connected_before = true;
                        // Until the connection ends, or the receiver is dropped (then the
                        // connection is closed at once, not at the next notification).
                        loop {
                            let (channel, payload) = tokio::select! {
                                n = nrx.recv() => match n {
                                    Some(n) => n,
                                    None => break,
                                },
                                () = tx.closed() => break,
                            };
                            if let Some(s) = parse(&channel, &payload, &me)
                                && tx.send(s).is_err()
                            {
                                break;
                            }
                        }
                    }
                    driver.abort();
                }
                tokio::time::sleep(RECONNECT).await;
            }
        });
        rx
    }
}

/// A notification as a signal; none for this replica's own or one it cannot read.
fn parse(channel: &str, payload: &str, me: &str) -> Option<Signal> {
    let (from, rest) = payload.split_once(' ').unwrap_or((payload, ""));
    if from == me {
        return None;
    }
    match channel {
        INBOX => Some(Signal::Inbox(
            rest.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )),
        IDENTITY => Some(Signal::Identity),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_skips_its_own_signals_and_reads_the_others() {
        assert_eq!(parse(INBOX, "me agt_a,agt_b", "me"), None);
        assert_eq!(
            parse(INBOX, "other agt_a,agt_b", "me"),
            Some(Signal::Inbox(vec!["agt_a".into(), "agt_b".into()]))
        );
        assert_eq!(parse(IDENTITY, "other", "me"), Some(Signal::Identity));
        assert_eq!(parse("elsewhere", "other", "me"), None);
    }

    #[test]
    fn queued_signals_go_in_one_transaction_each_inbox_once() {
        let sql = notify_sql(
            "me",
            vec![
                Signal::Inbox(vec!["agt_a".into(), "agt_b".into()]),
                Signal::Identity,
                Signal::Inbox(vec!["agt_b".into(), "agt_c".into(), "x'; DROP".into()]),
                Signal::Identity,
            ],
        );
        assert_eq!(
            sql.as_deref(),
            Some(
                "BEGIN; SET LOCAL synchronous_commit = off; \
                 NOTIFY agentbus_inbox, 'me agt_a,agt_b,agt_c'; NOTIFY agentbus_identity, 'me'; COMMIT;"
            )
        );
        assert_eq!(notify_sql("me", vec![Signal::Resync]), None);
        let many: Vec<String> = (0..IDS_PER_NOTIFY + 1)
            .map(|i| format!("agt_{i}"))
            .collect();
        let sql = notify_sql("me", vec![Signal::Inbox(many)]).unwrap_or_default();
        assert_eq!(sql.matches("NOTIFY agentbus_inbox").count(), 2);
    }
}
