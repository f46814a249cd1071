//! Live views over server-sent events: a task's stream pushes each change of
//! the task, a stream ends with its session (a `signed-out` event), and every stream ends when the
//! gateway shuts down, so a graceful shutdown never waits on a console left open.

use std::time::Duration;

use serde_json::json;

use crate::fixture::Fixture;
use crate::support::*;

/// An open event stream.
struct Stream(reqwest::Response, String);

impl Stream {
    async fn open(w: &World, s: &Session, path: &str) -> Stream {
        let resp = w
            .http
            .get(format!("{}{path}", w.url))
            .header("cookie", &s.cookie)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Stream(resp, String::new())
    }

    /// The next event named `name` (its data), waiting for the stream to push it; `None` when
    /// the stream ended first.
    async fn next(&mut self, name: &str) -> Option<String> {
        loop {
            if let Some(end) = self.1.find("\n\n") {
                let event: String = self.1.drain(..end + 2).collect();
                let mut kind = "";
                let mut data = Vec::new();
                for line in event.lines() {
                    if let Some(k) = line.strip_prefix("event: ") {
                        kind = k;
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push(d);
                    }
                }
                if kind == name {
                    return Some(data.join("\n"));
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.0.chunk())
                .await
                .expect("the stream pushed nothing for 20 s")
                .unwrap();
            match chunk {
                Some(c) => self.1.push_str(&String::from_utf8_lossy(&c)),
                None => return None,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_stream_pushes_its_changes_and_ends_with_the_session() {
    let f = Fixture::build().await;
    let w = &f.w;
    let s = w.sign_in(&f.ws_admin).await;
    let mut stream = Stream::open(w, &s, &format!("/console/live/tasks/{}", f.task)).await;
    w.followup(
        &f.worker,
        &f.requester,
        &f.request,
        &f.task,
        "progress",
        json!({"percent": 85, "note": "almost there"}),
    )
    .await;
    let html = stream.next("task-live").await.expect("an update");
    assert!(
        html.contains("85%") && html.contains("almost there"),
        "{html}"
    );
    w.followup(
        &f.worker,
        &f.requester,
        &f.request,
        &f.task,
        "result",
        json!({"status": "succeeded"}),
    )
    .await;
    let html = stream.next("task-live").await.expect("an update");
    assert!(html.contains("id=\"task-state\">succeeded"), "{html}");
    // Signed out elsewhere (another tab): the stream says so and ends.
    assert_eq!(w.submit(&s, "/console/sign-out", &[]).await.status, 303);
    assert_eq!(
        stream.next("signed-out").await.as_deref(),
        Some("signed out")
    );
    assert_eq!(stream.next("task-live").await, None, "the stream ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_stream_follows_the_counters_and_streams_end_at_shutdown() {
    let f = Fixture::build().await;
    let s = f.w.sign_in(&f.ws_admin).await;
    let mut overview = Stream::open(&f.w, &s, "/console/live/overview").await;
    let mut task = Stream::open(&f.w, &s, &format!("/console/live/tasks/{}", f.task)).await;
    let m = f.w.draft(
        &f.requester,
        &f.worker.address,
        "message",
        json!({"text": "one more"}),
    );
    f.w.send(&f.requester, m).await;
    let html = overview.next("overview-live").await.expect("an update");
    assert!(html.contains("id=\"accepted\""), "{html}");
    // A graceful shutdown does not wait for the open streams: they end.
    let stopped = tokio::time::timeout(Duration::from_secs(20), f.w.stop()).await;
    assert!(stopped.is_ok(), "shutdown waited on the console's streams");
    assert_eq!(overview.next("overview-live").await, None);
    assert_eq!(task.next("task-live").await, None);
}
