//! The gateway as a service: bounded connections and sockets, one error shape for
//! every refusal, readiness, and a shutdown that closes WebSockets with a frame. Timeouts and
//! limits are tested with small settings, and every wait polls with a generous deadline.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};

use crate::support::*;

/// The longest any wait here may take: far above every bound the tests set, so only a bound that
/// is not enforced at all makes a test fail.
const PATIENCE: Duration = Duration::from_secs(20);

fn addr(h: &Harness) -> String {
    h.url.trim_start_matches("http://").to_owned()
}

/// Reads until the peer closes (or resets); answers what was read and whether it closed in time.
async fn read_to_close(s: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(PATIENCE, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (got, closed)
}

/// The status and JSON body of a raw HTTP/1.1 answer.
fn parse_answer(raw: &[u8]) -> (u16, String, Value) {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

/// Connections that send nothing, and ones that send headers a byte at a time, are closed by
/// the header timeout; a kept-alive connection is closed by the idle timeout after its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slowloris_connections_are_closed_by_their_timeouts() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.header_timeout = Duration::from_millis(300);
        c.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let mut idle = Vec::new();
    let mut slow = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(addr(&h)).await.unwrap());
        let mut s = TcpStream::connect(addr(&h)).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // The slow clients keep sending header bytes, which must not keep them open.
    let drip = tokio::spawn(async move {
        let mut open = slow;
        while !open.is_empty() {
            let mut still = Vec::new();
            for mut s in open {
                if s.write_all(b"X-Slow: 1\r\n").await.is_ok() {
                    still.push(s);
                }
            }
            open = still;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    for mut s in idle {
        let (got, closed) = read_to_close(&mut s).await;
        assert!(closed && got.is_empty(), "an idle connection stayed open");
    }
    tokio::time::timeout(PATIENCE, drip)
        .await
        .expect("slowloris connections stayed open")
        .unwrap();
    // A kept-alive connection: one request answered, then closed for idling.
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (got, closed) = read_to_close(&mut s).await;
    assert!(closed, "a kept-alive connection outlived its idle timeout");
    assert_eq!(parse_answer(&got).0, 200);
}

/// A body that does not arrive in full within the body timeout gets AB-3031 (408), and the
/// connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_gets_408_and_its_connection_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.body_timeout = Duration::from_millis(300);
    })
    .await;
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    s.write_all(
        b"POST /v1/agents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":",
    )
    .await
    .unwrap();
    let (got, closed) = read_to_close(&mut s).await;
    assert!(closed, "a slow body kept its connection");
    let (status, head, body) = parse_answer(&got);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (408, Some("AB-3031"))
    );
    assert!(head.contains("connection: close"), "{head}");
}

/// Past `max_connections`, a connection gets a 503 with AB-9002 in the one error shape; once one
/// closes, new connections are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_with_ab_9002() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.max_connections = 4;
        c.header_timeout = Duration::from_secs(60);
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr(&h)).await.unwrap());
    }
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (got, _) = read_to_close(&mut s).await;
    let (status, head, body) = parse_answer(&got);
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&got));
    assert_eq!(body["error"]["code"], "AB-9002");
    assert!(
        body["error"]["doc_url"]
            .as_str()
            .unwrap()
            .ends_with("/errors/AB-9002")
    );
    assert!(head.contains("retry-after: 1"), "{head}");
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (status, _) = h.get("/healthz", "").await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never served again");
    }
}

/// Oversized bodies always get their 413, never a reset: the gateway reads the rest of the body
/// before answering (without it, about 2 in 100 of these failed with a broken pipe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_always_get_their_413() {
    let h = Harness::start().await;
    let body = vec![b'x'; 2 * 1024 * 1024];
    let mut set = tokio::task::JoinSet::new();
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..400 {
        let (http, url, body) = (
            h.http.clone(),
            format!("{}/v1/messages", h.url),
            body.clone(),
        );
        set.spawn(async move {
            match http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
            {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    format!("{status} {}", v["error"]["code"].as_str().unwrap_or("-"))
                }
                Err(e) => format!("error {e}"),
            }
        });
        while set.len() >= 8 || (i == 399 && !set.is_empty()) {
            let got = set.join_next().await.unwrap().unwrap();
            *outcomes.entry(got).or_default() += 1;
        }
    }
    assert_eq!(
        outcomes,
        [("413 AB-3007".to_owned(), 400)].into_iter().collect(),
        "every oversized publish answered 413 AB-3007"
    );
    // A client that waits for 100-continue is refused at once, before it sends the body.
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    s.write_all(
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99999999\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let (got, closed) = read_to_close(&mut s).await;
    assert!(closed);
    let (status, _, body) = parse_answer(&got);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("AB-3007"))
    );
}

/// Agent cards are bounded (`card_max_bytes`): a larger registration or patch is AB-3041 and
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_cards_over_the_limit_are_refused_with_ab_3041() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let big = "d".repeat(70 * 1024);
    let (s, v) = h
        .post(
            "/v1/agents",
            &h.admin,
            json!({"name": "bulky", "description": big}),
        )
        .await;
    assert_eq!((s, v["error"]["code"].as_str()), (413, Some("AB-3041")));
    let (s, v) = h
        .req(
            reqwest::Method::PATCH,
            &format!("/v1/agents/{}", a.id),
            &a.token,
            Some(json!({"description": big})),
        )
        .await;
    assert_eq!((s, v["error"]["code"].as_str()), (413, Some("AB-3041")));
    let (_, list) = h.get("/v1/agents", &a.token).await;
    let names: Vec<&str> = list["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["alpha"]);
    let (_, card) = h.get(&format!("/v1/agents/{}", a.id), &a.token).await;
    assert_eq!(card["description"], "");
}

/// Every refusal outside the handlers has the one error shape and a code: query and path parse
/// errors, unknown routes, methods a route does not take (with `Allow`), media types, malformed
/// JSON, a WebSocket endpoint asked without an upgrade (cases: `tests/data/rejections.json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_the_one_error_shape() {
    let h = Harness::start().await;
    let agent = h.agent("alpha").await;
    let cases: Vec<Value> = serde_json::from_str(include_str!("../data/rejections.json")).unwrap();
    for case in cases {
        let why = case["why"].as_str().unwrap();
        let method =
            reqwest::Method::from_bytes(case["method"].as_str().unwrap().as_bytes()).unwrap();
        let mut r = h.http.request(
            method,
            format!("{}{}", h.url, case["path"].as_str().unwrap()),
        );
        match case["token"].as_str() {
            Some("admin") => r = r.bearer_auth(&h.admin),
            Some("agent") => r = r.bearer_auth(&agent.token),
            _ => {}
        }
        if let Some(ct) = case["content_type"].as_str() {
            r = r.header("content-type", ct);
        }
        if let Some(b) = case["body"].as_str() {
            r = r.body(b.to_owned());
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(
            status,
            case["status"].as_u64().unwrap() as u16,
            "{why}: {body}"
        );
        assert_eq!(
            headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/json"),
            "{why}"
        );
        let e = &body["error"];
        assert_eq!(e["code"], case["code"], "{why}: {body}");
        assert!(
            e["doc_url"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/errors/{}", case["code"].as_str().unwrap())),
            "{why}"
        );
        assert!(
            e["request_id"].as_str().unwrap().starts_with("req_"),
            "{why}"
        );
        if let Some(m) = case["message"].as_str() {
            assert!(e["message"].as_str().unwrap().contains(m), "{why}: {body}");
        }
        if let Some(allow) = case["allow"].as_str() {
            assert_eq!(headers.get("allow").unwrap(), allow, "{why}");
        }
    }
}

/// A `time` sent as a number is a wrong form (AB-3003), not a missing attribute (AB-3002).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wp_3_2_5_a_time_sent_as_a_number_is_ab_3003() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    let mut env = message(&h, &a, &b.address, "hi");
    env.insert("time".into(), json!(h.now().millis() / 1000));
    let (s, v, _) = h.publish(&a, &sign(&a, env)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("AB-3003")),
        "{v}"
    );
    let mut env = message(&h, &a, &b.address, "hi");
    env.shift_remove("time");
    let (s, v, _) = h.publish(&a, &sign(&a, env)).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("AB-3002")),
        "{v}"
    );
}

/// `POST /v1/tasks/{id}/cancel` checks its body before touching the task: malformed JSON,
/// unknown fields and a reason longer than the task.cancel schema allows are refused, and the
/// task stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_cancel_checks_its_body() {
    let h = Harness::start().await;
    let bot = h.agent("bot").await;
    let rev = h.worker("reviewer").await;
    let mut env = message(&h, &bot, &rev.address, "x");
    env.insert("type".into(), json!("agentbus.task.request.v1"));
    env.insert(
        "schema".into(),
        json!("https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json"),
    );
    env.insert("capability".into(), json!("code.review"));
    env.insert("capability_version".into(), json!("1"));
    env.insert("data".into(), json!({"instructions": "review"}));
    let (s, receipt, _) = h.publish(&bot, &sign(&bot, env)).await;
    assert_eq!(s, 202, "{receipt}");
    let task = receipt["task_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/tasks/{task}/cancel");
    for (body, code) in [
        ("{\"reason\": ", "AB-3001"),
        ("{\"reasons\": \"typo\"}", "AB-3016"),
        ("{\"reason\": 7}", "AB-3016"),
    ] {
        let resp = h
            .http
            .post(format!("{}{path}", h.url))
            .bearer_auth(&h.admin)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }
    let (s, v) = h
        .post(&path, &h.admin, json!({"reason": "r".repeat(3000)}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("AB-3016")),
        "{v}"
    );
    let (_, t) = h.get(&format!("/v1/tasks/{task}"), &h.admin).await;
    assert_eq!(t["state"], "submitted");
    let (s, t) = h
        .post(&path, &h.admin, json!({"reason": "r".repeat(2000)}))
        .await;
    assert_eq!((s, t["state"].as_str()), (200, Some("cancelled")), "{t}");
}

/// `/readyz` answers ready while the store answers with the current schema, and 503 with the
/// code that says why otherwise (a schema this build does not expect; shutting down).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_reports_the_store_schema_and_shutdown() {
    let h = Harness::start().await;
    let (s, v) = h.get("/readyz", "").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("ready")));
    let (s, v) = h.get("/healthz", "").await;
    assert_eq!((s, v["status"].as_str()), (200, Some("alive")));
    // As if a newer gateway had migrated the database further.
    bump_schema_version(&h, 1).await;
    let (s, v) = h.get("/readyz", "").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("AB-9001")),
        "{v}"
    );
    bump_schema_version(&h, -1).await;
    h.app.shutting_down.send_replace(true);
    let (s, v) = h.get("/readyz", "").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("AB-9003")),
        "{v}"
    );
}

/// Moves the schema version recorded in the harness's database by `by`, behind the gateway.
async fn bump_schema_version(h: &Harness, by: i64) {
    match &h.app.config.store {
        agentbus_gateway::config::StoreSetting::Sqlite => {
            let db = rusqlite::Connection::open(h.dir.join("agentbus.db")).unwrap();
            let version: i64 = db
                .pragma_query_value(None, "user_version", |r| r.get(0))
                .unwrap();
            db.pragma_update(None, "user_version", version + by)
                .unwrap();
        }
        agentbus_gateway::config::StoreSetting::Postgres(url) => {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            c.execute("UPDATE schema_version SET version = version + $1", &[&by])
                .await
                .unwrap();
        }
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn open_ws(h: &Harness, token: &str) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut req = format!("{}/v1/inbox/ws", h.url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(req)
        .await
        .map(|(ws, _)| ws)
}

/// Reads frames until the close frame; answers the `error` frames' codes and the close code and
/// reason.
async fn until_close<S>(
    ws: &mut tokio_tungstenite::WebSocketStream<S>,
) -> (Vec<String>, Option<(u16, String)>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut errors = Vec::new();
    let read = tokio::time::timeout(PATIENCE, async {
        while let Some(Ok(m)) = ws.next().await {
            match m {
                Message::Text(t) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    if v["type"] == "error" {
                        errors.push(v["error"]["code"].as_str().unwrap().to_owned());
                    }
                }
                Message::Close(f) => {
                    return f.map(|f| (u16::from(f.code), f.reason.to_string()));
                }
                _ => {}
            }
        }
        None
    })
    .await
    .expect("the socket was neither closed nor answered");
    (errors, read)
}

/// A frame the gateway cannot take gets an `error` frame with its code, then a close frame with
/// the matching close code: not (I-)JSON, an unknown shape, binary, larger than 64 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_websocket_frames_get_an_error_frame_then_a_close_code() {
    let h = Harness::start().await;
    let b = h.agent("bravo").await;
    let cases: Vec<(Message, &str, u16)> = vec![
        (Message::Text("not json".into()), "AB-3001", 1008),
        // Read as strictly as an HTTP body (I-JSON): a duplicate key, an integer past 2^53.
        (
            Message::Text(
                "{\"type\":\"ack\",\"sequence\":1,\"sequence\":2,\"delivery\":\"x\"}".into(),
            ),
            "AB-3001",
            1008,
        ),
        (
            Message::Text(
                "{\"type\":\"ack\",\"sequence\":9007199254740993,\"delivery\":\"x\"}".into(),
            ),
            "AB-3001",
            1008,
        ),
        (Message::Text("{\"type\":\"nope\"}".into()), "AB-3016", 1008),
        (Message::Binary(vec![1, 2, 3].into()), "AB-3030", 1003),
        (
            Message::Text(format!("{{\"pad\":\"{}\"}}", "x".repeat(70 * 1024)).into()),
            "AB-3042",
            1009,
        ),
    ];
    for (frame, code, close) in cases {
        let mut ws = open_ws(&h, &b.token).await.unwrap();
        ws.send(frame).await.unwrap();
        let (errors, closed) = until_close(&mut ws).await;
        assert_eq!(errors, [code]);
        let (got, reason) = closed.expect("a close frame");
        assert_eq!(got, close, "{code}");
        assert!(reason.starts_with(code), "{reason}");
    }
}

/// An agent may hold `ws_per_agent` WebSockets; one more is AB-5002 (429), and a place frees up
/// when a socket closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websockets_per_agent_are_limited_with_ab_5002() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| c.ws_per_agent = 2).await;
    let b = h.agent("bravo").await;
    let other = h.agent("charlie").await;
    let first = open_ws(&h, &b.token).await.unwrap();
    let _second = open_ws(&h, &b.token).await.unwrap();
    match open_ws(&h, &b.token).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status().as_u16(), 429);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["error"]["code"], "AB-5002");
            assert!(resp.headers().contains_key("retry-after"));
        }
        other => panic!("a third socket was not refused: {:?}", other.map(|_| ())),
    }
    // Another agent's sockets are counted apart.
    let _theirs = open_ws(&h, &other.token).await.unwrap();
    drop(first);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while open_ws(&h, &b.token).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed socket's place never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A consumer that does not read is disconnected once its deliveries have waited
/// `ws_send_timeout`: its deliveries return to the inbox at once (long before their visibility
/// timeout), and when it reads at last it finds an AB-5003 error frame and close code 1008.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_that_does_not_read_is_closed_and_its_deliveries_return() {
    let tmp = tempfile::tempdir().unwrap();
    let h = Harness::start_with(tmp.path().join("gw"), |c| {
        c.ws_send_buffer = 16 * 1024;
        c.ws_send_timeout = Duration::from_secs(2);
        c.visibility_timeout_s = 3600;
    })
    .await;
    let a = h.agent("alpha").await;
    let b = h.agent("bravo").await;
    // A reader with a small receive window that reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(addr(&h).parse().unwrap()).await.unwrap();
    let mut req = format!("{}/v1/inbox/ws", h.url.replacen("http", "ws", 1))
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", b.token).parse().unwrap(),
    );
    let (mut ws, _) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    let text = "p".repeat(16 * 1024);
    for _ in 0..300 {
        assert_eq!(
            h.publish(&a, &signed(&h, &a, &b.address, &text)).await.0,
            202
        );
    }
    // The socket's deliveries come back to a long-poll of the same inbox (above any sequence, so
    // it takes only deliveries that return, not the ones never handed out).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let returned = loop {
        let got = h.poll(&b, 1_000_000, 0).await;
        if !got.is_empty() {
            break got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deliveries never came back"
        );
    };
    assert!(returned.iter().all(|d| d["attempt"].as_u64().unwrap() >= 2));
    let (errors, closed) = until_close(&mut ws).await;
    assert_eq!(errors, ["AB-5003"]);
    let (code, reason) = closed.expect("a close frame");
    assert_eq!(code, u16::from(CloseCode::Policy));
    assert!(reason.starts_with("AB-5003 slow consumer"), "{reason}");
}

/// Shutdown closes WebSockets with close code 1001 and AB-9003 as the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_websockets_with_a_going_away_frame() {
    let h = Harness::start().await;
    let b = h.agent("bravo").await;
    let mut ws = open_ws(&h, &b.token).await.unwrap();
    let stopped = tokio::spawn(h.stop());
    let (errors, closed) = until_close(&mut ws).await;
    assert!(errors.is_empty());
    let (code, reason) = closed.expect("a close frame");
    assert_eq!(code, 1001);
    assert!(reason.starts_with("AB-9003"), "{reason}");
    drop(ws);
    tokio::time::timeout(PATIENCE, stopped)
        .await
        .unwrap()
        .unwrap();
}

/// A body sent to a route that takes none is read to its end and dropped before the answer, so a
/// client still writing it gets the answer (not a broken pipe) and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_body_is_drained_before_the_answer() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    for size in [512 * 1024, 2 * 1024 * 1024] {
        let resp = h
            .http
            .post(format!("{}/v1/agents/{}/suspend", h.url, a.id))
            .bearer_auth(&h.admin)
            .header("content-type", "application/json")
            .body(vec![b' '; size])
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{size}: {}", resp.status());
        assert!(resp.headers().get("connection").is_none(), "{size}");
    }
    // The same connection, by hand: the drained rest is not taken for the next request.
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    let body = vec![b' '; 300 * 1024];
    let head = format!(
        "POST /v1/agents/{}/resume HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        a.id,
        h.admin,
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (got, _) = read_to_close(&mut s).await;
    let got = String::from_utf8_lossy(&got);
    assert_eq!(got.matches("HTTP/1.1 2").count(), 2, "{got}");
}

/// A rest past the 8 MiB the gateway drains is not read: the answer closes the connection, so the
/// unread rest is never taken for the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_unread_body_closes_the_connection_after_the_answer() {
    let h = Harness::start().await;
    let a = h.agent("alpha").await;
    let mut s = TcpStream::connect(addr(&h)).await.unwrap();
    let head = format!(
        "POST /v1/agents/{}/suspend HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n    ",
        a.id,
        h.admin,
        64 * 1024 * 1024
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let (got, closed) = read_to_close(&mut s).await;
    assert!(closed, "the connection stayed open");
    let (status, head, _) = parse_answer(&got);
    assert!((200..300).contains(&status), "{status}");
    assert!(head.contains("connection: close"), "{head}");
}
