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

impl PgStore {
    pub(super) async fn notify(&self, s: Signal) -> StoreResult<()> {
        let mut sql = String::from("BEGIN; SET LOCAL synchronous_commit = off;");
        let me = &self.replica;
        match s {
            Signal::Inbox(ids) => {
                for chunk in ids.chunks(IDS_PER_NOTIFY) {
                    // Ids are minted by the gateway (letters, digits, `_`); anything else is
                    // left out rather than quoted into SQL.
                    let ids: Vec<&str> = chunk
                        .iter()
                        .map(String::as_str)
                        .filter(|id| id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                        .collect();
                    if !ids.is_empty() {
                        sql.push_str(&format!(" NOTIFY {INBOX}, '{me} {}';", ids.join(",")));
                    }
                }
            }
            Signal::Identity => sql.push_str(&format!(" NOTIFY {IDENTITY}, '{me}';")),
            Signal::Resync => return Ok(()),
        }
        sql.push_str(" COMMIT;");
        // Its own transaction, committed without waiting for the disk: a notification is a hint
        // about changes that are durable already, and must not hold the commit of a publish.
        let c = self.client().await?;
        Ok(c.batch_execute(&sql).await?)
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
}
