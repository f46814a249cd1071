//! Several `agentbus gateway` processes on one PostgreSQL database (docs/deploy.md).
//! Real processes, a real throwaway cluster (`pg.rs`), real HTTP: a publish through one replica
//! reaches a long-poll held by the other, an agent deleted through one is refused by the other,
//! one replica killed with SIGKILL under 8 publishers loses nothing acknowledged, a database
//! restart answers AB-9001 and heals without restarting the gateway, a pool that runs dry answers
//! AB-9010, and every way the database can be unusable at start stops it with a cause and a fix.
//! Each test prints its figures.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use agentbus_protocol::ids::IdKind;

use crate::gwproc::{Agent, Conn, GwProc, PATIENCE, envelope_at, gateway_cmd, http, register};
use crate::kill_loop::{Published, Seen, Shared, account, consumer, lease_and_ack, publisher};
use agentbus_testkit::pg::Cluster;

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A new database on `cluster`.
fn database(cluster: &Cluster) -> String {
    block_on(cluster.database())
}

/// Runs `sql` on the database at `url`.
fn sql(url: &str, sql: &str) {
    block_on(async {
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c.batch_execute(sql).await.unwrap();
    });
}

/// Starts a replica on `dir` over the database `url` (with the master and gateway keys of the
/// replica in `keys_from`, copied as docs/deploy.md says) and waits for `/readyz`.
fn replica(dir: &Path, url: &str, keys_from: Option<&Path>, extra: &[&str]) -> GwProc {
    if let Some(src) = keys_from {
        std::fs::create_dir_all(dir).unwrap();
        for f in ["master.key", "gateway.key"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
    }
    let mut args = vec!["--store", url];
    args.extend_from_slice(extra);
    let mut cmd = gateway_cmd(dir, &args);
    cmd.env("RUST_LOG", "warn");
    let gw = GwProc::start_cmd(cmd);
    let deadline = Instant::now() + PATIENCE;
    while !matches!(
        Conn::open(&gw.addr).and_then(|mut c| c.call("GET", "/readyz", "", b"")),
        Ok((200, _))
    ) {
        assert!(Instant::now() < deadline, "the replica never became ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    gw
}

/// Two replicas on a new database of the shared cluster, started with `flags`: A first (it
/// bootstraps), then B with A's keys. B is handed A's first-start tokens, which are the
/// database's, so a test can act through either.
struct Pair {
    url: String,
    a: GwProc,
    b: GwProc,
    /// B as it started: whether it printed tokens of its own.
    b_bootstrapped: bool,
    _tmp: tempfile::TempDir,
}

fn pair(flags: &[&str]) -> Pair {
    let url = database(Cluster::shared());
    let tmp = tempfile::tempdir().unwrap();
    let a = replica(&tmp.path().join("a"), &url, None, flags);
    let mut b = replica(
        &tmp.path().join("b"),
        &url,
        Some(&tmp.path().join("a")),
        flags,
    );
    let b_bootstrapped = !b.admin.is_empty();
    b.admin = a.admin.clone();
    b.operator = a.operator.clone();
    Pair {
        url,
        a,
        b,
        b_bootstrapped,
        _tmp: tmp,
    }
}

/// A signed message from `from` to `to`, stamped now.
fn message(from: &Agent, to: &Agent, text: &str) -> (String, Vec<u8>) {
    let id = agentbus_runtime::mint(IdKind::Message).to_string();
    let now = agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
    let env = envelope_at(from, &to.address, &id, text, now, json!({}));
    (id, Value::Object(env).to_string().into_bytes())
}

fn publish(gw: &GwProc, from: &Agent, body: &[u8]) -> (u16, Value) {
    publish_at(&gw.addr, from, body)
}

/// [`publish`] to the replica listening on `addr`.
fn publish_at(addr: &str, from: &Agent, body: &[u8]) -> (u16, Value) {
    let mut c = Conn::open(addr).unwrap();
    let (s, b) = c.call("POST", "/v1/messages", &from.token, body).unwrap();
    (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * q) as usize)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Two replicas serve one database. A publish through A wakes a long-poll held
/// by B (LISTEN/NOTIFY; B's fallback poll would take up to a second); an agent deleted through A
/// is refused by B, whose cache held it (docs/deploy.md states the bound); a third replica with
/// a master key of its own is refused at start.
#[test]
fn replicas_wake_each_other_and_forget_revoked_credentials() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let Pair {
        url,
        a,
        b,
        b_bootstrapped,
        _tmp: tmp,
    } = pair(&[]);
    assert!(!b_bootstrapped, "only the first replica bootstraps");
    let mut b_as_admin = http(&b.url, "GET", "/v1/agents", &a.admin, None);
    assert_eq!(b_as_admin.0, 200, "{}", b_as_admin.1);
    let alice = register(&a, "alice");
    let bob = register(&a, "bob");

    // Wake-ups across replicas: bob long-polls on B, alice publishes through A.
    let mut waits = Vec::new();
    let mut after = 0;
    for i in 0..20 {
        let (id, body) = message(&alice, &bob, &format!("wake {i}"));
        let poll = {
            let (addr, token) = (b.addr.clone(), bob.token.clone());
            std::thread::spawn(move || {
                let mut c = Conn::open(&addr).unwrap();
                let (s, body) = c
                    .call(
                        "GET",
                        &format!("/v1/inbox?after={after}&wait=20"),
                        &token,
                        b"",
                    )
                    .unwrap();
                (
                    s,
                    Instant::now(),
                    serde_json::from_slice::<Value>(&body).unwrap(),
                )
            })
        };
        // Give the long-poll time to be waiting, so the wake-up (not the first read) finds it.
        std::thread::sleep(Duration::from_millis(30));
        let sent = Instant::now();
        assert_eq!(publish(&a, &alice, &body).0, 202);
        let answered = Instant::now();
        let (s, got, v) = poll.join().unwrap();
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["deliveries"][0]["envelope"]["id"], id.as_str());
        after = v["next_after"].as_u64().unwrap();
        waits.push((
            got.duration_since(sent),
            got.saturating_duration_since(answered),
        ));
    }
    let mut whole: Vec<Duration> = waits.iter().map(|w| w.0).collect();
    let mut after_202: Vec<Duration> = waits.iter().map(|w| w.1).collect();
    whole.sort();
    after_202.sort();
    let _ = writeln!(
        std::io::stderr(),
        "replicas: publish through A → long-poll on B returns: p50 {:.2} ms, max {:.2} ms; \
         after A's 202: p50 {:.2} ms, max {:.2} ms (20 rounds)",
        percentile(&whole, 0.5),
        percentile(&whole, 1.0),
        percentile(&after_202, 0.5),
        percentile(&after_202, 1.0),
    );

    // B caches bob's token once used; deleting bob through A reaches B by a signal.
    assert_eq!(
        http(&b.url, "GET", "/v1/inbox?wait=0", &bob.token, None).0,
        200
    );
    let (s, v) = http(
        &a.url,
        "DELETE",
        &format!("/v1/agents/{}", bob.id),
        &a.admin,
        None,
    );
    assert!((200..300).contains(&s), "{s} {v}");
    let deleted = Instant::now();
    let deadline = deleted + PATIENCE;
    loop {
        let (s, _) = http(&b.url, "GET", "/v1/inbox?wait=0", &bob.token, None);
        if s == 401 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica B still accepts a deleted agent's token"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = writeln!(
        std::io::stderr(),
        "replicas: a deletion through A refused by B after {:.1} ms",
        deleted.elapsed().as_secs_f64() * 1000.0
    );
    b_as_admin = http(&b.url, "GET", "/v1/agents", &a.admin, None);
    assert_eq!(b_as_admin.0, 200);

    // A replica with a master key of its own cannot read the database's tenant keys.
    let out = crate::agentbus(
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--data",
            &tmp.path().join("c").display().to_string(),
            "--store",
            &url,
        ],
        b"",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("does not open the tenant keys") && err.contains("copy both"),
        "{err}"
    );
    drop((a, b));
}

/// Bad input and limits: an unreachable server, an unknown role, a missing database
/// and a schema from a newer release each stop the start with a line of cause and fix (exit 5
/// for the first, 4 for the others), and `gateway migrate` brings a database to this release.
#[test]
fn replicas_an_unusable_database_stops_the_start_with_its_fix() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let cluster = Cluster::shared();
    let url = database(cluster);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("gw").display().to_string();
    let start = |store: &str| {
        let out = crate::agentbus(
            &[
                "gateway",
                "--listen",
                "127.0.0.1:0",
                "--data",
                &data,
                "--store",
                store,
            ],
            b"",
        );
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap()
        .to_owned();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cases = [
        (
            format!("postgres://postgres@127.0.0.1:{closed}/x"),
            5,
            "accepts TCP connections",
        ),
        (
            format!("postgres://nobody@127.0.0.1:{port}/postgres"),
            4,
            "check the user and password",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{port}/no_such_db"),
            4,
            "create the database first",
        ),
    ];
    for (store, exit, fix) in &cases {
        let (code, err) = start(store);
        assert_eq!(code, Some(*exit), "{store}: {err}");
        assert!(err.contains(fix), "{store}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // `migrate` applies the schema and says so; a newer schema is refused, by it and at start.
    let out = crate::agentbus(&["--json", "gateway", "migrate", "--store", &url], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["store"], "postgres");
    let version = v["schema_version"].as_i64().unwrap();
    assert!(version > 0, "{v}");
    sql(&url, "UPDATE schema_version SET version = version + 1");
    for args in [
        vec!["gateway", "migrate", "--store", url.as_str()],
        vec![
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--data",
            &data,
            "--store",
            &url,
        ],
    ] {
        let out = crate::agentbus(&args, b"");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{err}");
        assert!(
            err.contains("newer than this build knows") && err.contains("newer one"),
            "{err}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "replicas: {} unusable databases refused at start with their fixes; migrate at schema {version}",
        cases.len() + 1
    );
}

/// SIGKILL of one of two replicas while 8 signed publishers (half on each) and
/// 2 consumers (one on each) run: a publish whose connection died is retried with the same bytes
/// on the surviving replica, as behind a load balancer. Every publish answered 202 (or 200) is
/// delivered, no id sits under two sequences, no inbox sequence has a gap.
#[test]
fn replicas_kill_9_of_one_of_two_loses_no_acknowledged_publish() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    const PUBLISHERS: usize = 8;
    let Pair { a, b, _tmp, .. } = pair(&[
        "--unsafe-test-clock",
        "--max-attempts",
        "1000",
        "--inbox-max-depth",
        "100000000",
    ]);
    let consumers: Vec<Agent> = (0..2)
        .map(|i| register(&a, &format!("consumer-{i}")))
        .collect();
    let publishers: Vec<Agent> = (0..PUBLISHERS)
        .map(|i| register(&b, &format!("publisher-{i}")))
        .collect();
    let shared = Arc::new(Shared::new(vec![a.addr.clone(), b.addr.clone()]));
    let started = Instant::now();
    let pubs: Vec<_> = publishers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (shared, p, to) = (shared.clone(), p.clone(), consumers[i % 2].address.clone());
            std::thread::spawn(move || publisher(&shared, &p, &to, i % 2))
        })
        .collect();
    let cons: Vec<_> = consumers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (shared, c) = (shared.clone(), c.clone());
            std::thread::spawn(move || consumer(&shared, &c, i))
        })
        .collect();
    let wait_for = |n: usize| {
        let deadline = Instant::now() + PATIENCE;
        while shared.acked.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "the publishers stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for(200);
    let in_flight = shared.in_flight.load(Ordering::SeqCst);
    assert!(!a.kill9().success());
    shared.addrs.lock().unwrap().remove(0);
    let at_kill = shared.acked.load(Ordering::SeqCst);
    wait_for(at_kill + 200);
    shared.stop_publishing.store(true, Ordering::SeqCst);
    let published: Vec<Published> = pubs.into_iter().map(|t| t.join().unwrap()).collect();
    shared.stop_consuming.store(true, Ordering::SeqCst);
    let mut seen: Vec<Seen> = cons.into_iter().map(|t| t.join().unwrap()).collect();
    // Copies A had leased come back once B's clock passes the visibility timeout.
    b.advance("61s");
    for (who, seen) in consumers.iter().zip(seen.iter_mut()) {
        let mut conn = Conn::open(&b.addr).unwrap();
        while lease_and_ack(&mut conn, who, 0, 0, seen).unwrap().1 > 0 {}
    }
    let acc = account(&consumers, &seen, &published);
    let cut: usize = published.iter().map(|p| p.cut).sum();
    let replayed: usize = published.iter().map(|p| p.replayed).sum();
    let other: Vec<String> = published.iter().flat_map(|p| p.other.clone()).collect();
    let _ = writeln!(
        std::io::stderr(),
        "replicas: kill -9 of one of two under {PUBLISHERS} publishers in {:.1} s: {} acknowledged \
         ({at_kill} before the kill, {in_flight} in flight at it); {cut} cut and retried on the \
         survivor ({replayed} had been stored: a replay); acked but lost: {}; ids under two \
         sequences: {}; gaps: {}",
        started.elapsed().as_secs_f64(),
        acc.acked,
        acc.lost.len(),
        acc.twice.len(),
        acc.gaps,
    );
    assert!(other.is_empty(), "unexpected answers: {other:?}");
    assert!(acc.lost.is_empty(), "acknowledged but lost: {:?}", acc.lost);
    assert!(
        acc.twice.is_empty(),
        "ids under two sequences: {:?}",
        acc.twice
    );
    assert_eq!(acc.gaps, 0, "sequence gaps");
    assert!(acc.invented.is_empty(), "{:?}", acc.invented);
    assert!(b.stop("TERM").success());
}

/// The database restarted under a gateway. While it is down a publish answers
/// AB-9001 (503) and stores nothing; once it is back the same gateway, never restarted, stores
/// the same envelope once and delivers what was stored before.
#[test]
fn replicas_a_database_restart_answers_9001_then_heals() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    // A cluster of its own: the shared one serves the other tests while this one is down.
    let cluster = Cluster::start();
    let url = database(&cluster);
    let tmp = tempfile::tempdir().unwrap();
    let gw = replica(&tmp.path().join("gw"), &url, None, &[]);
    let alice = register(&gw, "alice");
    let bob = register(&gw, "bob");
    let (before, body) = message(&alice, &bob, "before the restart");
    assert_eq!(publish(&gw, &alice, &body).0, 202);

    cluster.set_down(true);
    let (during, body) = message(&alice, &bob, "while the database is down");
    let mut refused = 0;
    for _ in 0..3 {
        let (s, v) = publish(&gw, &alice, &body);
        assert_eq!((s, code(&v)), (503, "AB-9001"), "{v}");
        refused += 1;
    }
    let down_at = Instant::now();
    cluster.set_down(false);
    let back_at = Instant::now();
    // The pool drops the dead connections and opens new ones; each dead one fails at most once.
    let mut answers = Vec::new();
    let stored = loop {
        let (s, v) = publish(&gw, &alice, &body);
        answers.push(s);
        if s == 202 {
            break v;
        }
        assert_eq!((s, code(&v)), (503, "AB-9001"), "{v}");
        assert!(answers.len() < 50, "the gateway did not heal: {answers:?}");
    };
    assert_eq!(stored["id"], during.as_str(), "{stored}");
    // The retry of the stored bytes is a replay, not a second copy.
    assert_eq!(publish(&gw, &alice, &body).0, 200);
    let (s, v) = http(&gw.url, "GET", "/v1/inbox?wait=0", &bob.token, None);
    assert_eq!(s, 200, "{v}");
    let ids: Vec<&str> = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["envelope"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [before.as_str(), during.as_str()]);
    let _ = writeln!(
        std::io::stderr(),
        "replicas: database down {:.0} ms: {refused} publishes answered AB-9001; after it came \
         back, {} more 503 before the first 202, never a gateway restart",
        back_at.duration_since(down_at).as_secs_f64() * 1000.0,
        answers.len() - 1
    );
    assert!(gw.stop("TERM").success());
}

/// A pool that runs dry answers AB-9010 (503, Retry-After) after `store_wait`,
/// never hangs; the request holding the connection completes once the database lets it.
#[test]
fn replicas_a_dry_pool_answers_9010_and_never_hangs() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let cluster = Cluster::shared();
    let url = database(cluster);
    let tmp = tempfile::tempdir().unwrap();
    let gw = replica(
        &tmp.path().join("gw"),
        &url,
        None,
        &[
            "--store-pool",
            "1",
            "--store-wait",
            "200ms",
            "--reaper-interval",
            "0s",
        ],
    );
    let alice = register(&gw, "alice");
    let bob = register(&gw, "bob");
    // Warm the token caches so only the publish and the lease need the pool.
    assert_eq!(
        http(&gw.url, "GET", "/v1/inbox?wait=0", &bob.token, None).0,
        200
    );
    let (_, body) = message(&alice, &bob, "warm");
    assert_eq!(publish(&gw, &alice, &body).0, 202);
    block_on(async {
        let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        c.batch_execute("BEGIN; LOCK TABLE inbox_counters IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        // A publish takes the pool's one connection and waits on the lock.
        let (_, body) = message(&alice, &bob, "held");
        let held = {
            let (addr, token) = (gw.addr.clone(), alice.token.clone());
            std::thread::spawn(move || {
                Conn::open(&addr)
                    .unwrap()
                    .call("POST", "/v1/messages", &token, &body)
                    .unwrap()
                    .0
            })
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let waiting = c
                .query(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND datname = current_database()",
                    &[],
                )
                .await
                .unwrap();
            if !waiting.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the publish never waited on the lock"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked = Instant::now();
        let (s, _, head) =
            crate::gwproc::request(&gw.url, "GET", "/v1/inbox?wait=0", &bob.token, None);
        let took = asked.elapsed();
        assert_eq!(s, 503);
        assert!(
            head.to_ascii_lowercase().contains("retry-after: 1"),
            "{head}"
        );
        let (_, v) = http(&gw.url, "GET", "/v1/inbox?wait=0", &bob.token, None);
        assert_eq!(code(&v), "AB-9010", "{v}");
        c.batch_execute("COMMIT").await.unwrap();
        assert_eq!(held.join().unwrap(), 202, "the held publish completes");
        let _ = writeln!(
            std::io::stderr(),
            "replicas: with the pool's one connection held, a lease answered 503 AB-9010 after {:.0} ms",
            took.as_secs_f64() * 1000.0
        );
    });
    assert!(gw.stop("TERM").success());
}

/// Timers fire once across replicas. Both replicas' reapers sweep at the same
/// moment (each test clock's advance runs a pass before it answers): a message that expired
/// unread is settled by one of them, and its sender gets one expiry notice, not one per replica.
#[test]
fn replicas_an_expiry_fires_once_when_both_reap_at_once() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let Pair { a, b, _tmp, .. } = pair(&["--unsafe-test-clock", "--reaper-interval", "0s"]);
    let alice = register(&a, "alice");
    let bob = register(&a, "bob");
    let mut ids = Vec::new();
    for i in 0..20 {
        let id = agentbus_runtime::mint(IdKind::Message).to_string();
        let now = a.now_ms();
        let expires = agentbus_protocol::timestamp::Timestamp(now + 60_000).to_string();
        let env = envelope_at(
            &alice,
            &bob.address,
            &id,
            &format!("expires unread {i}"),
            now,
            json!({"expires_at": expires}),
        );
        let body = Value::Object(env).to_string().into_bytes();
        let on = if i % 2 == 0 { &a } else { &b };
        assert_eq!(publish(on, &alice, &body).0, 202);
        ids.push(id);
    }
    let advance = |url: String, token: String| {
        std::thread::spawn(move || {
            http(
                &url,
                "POST",
                "/v1/test/clock",
                &token,
                Some(&json!({"advance": "120s"})),
            )
        })
    };
    let ta = advance(a.url.clone(), a.operator.clone());
    let tb = advance(b.url.clone(), b.operator.clone());
    let ((sa, ra), (sb, rb)) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!((sa, sb), (200, 200), "{ra} {rb}");
    let expired = |r: &Value| r["reaped"]["expired"].as_u64().unwrap_or(0);
    assert_eq!(expired(&ra) + expired(&rb), 20, "{ra} {rb}");
    let (s, v) = http(
        &a.url,
        "GET",
        "/v1/inbox?wait=0&limit=100",
        &alice.token,
        None,
    );
    assert_eq!(s, 200, "{v}");
    let mut notices: Vec<&str> = v["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["envelope"]["data"]["original_message_id"].as_str())
        .collect();
    notices.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(notices, want, "one expiry notice per message");
    let _ = writeln!(
        std::io::stderr(),
        "replicas: 20 expiries swept by two replicas at once: {} by A, {} by B, 20 notices",
        expired(&ra),
        expired(&rb)
    );
}

/// A lifecycle message of `task` (requested by `req_id` in `conversation`) from `from` to `to`.
fn followup(
    from: &Agent,
    to: &Agent,
    (req_id, conversation, task): (&str, &str, &str),
    kind: &str,
    mut data: Value,
) -> Vec<u8> {
    let id = agentbus_runtime::mint(IdKind::Message).to_string();
    let now = agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
    data["task_id"] = json!(task);
    let extra = json!({
        "type": format!("agentbus.task.{kind}.v1"),
        "schema": format!("https://komsary.agentbus.exchange/schemas/agentbus.task.{kind}/v1.json"),
        "conversation_id": conversation,
        "correlation_id": req_id,
        "data": data,
    });
    Value::Object(envelope_at(from, &to.address, &id, "", now, extra))
        .to_string()
        .into_bytes()
}

/// Every route on any replica, §6.2: the lifecycle messages of one task, sent
/// through both replicas at once while an admin cancels it through one, are each decided on the
/// task as the other replica left it. Each replica's task lock covers only its own requests, so
/// two of them read the same version of the task; the one whose write then finds it changed
/// decides its message again instead of answering AB-4005 (409) and storing nothing.
#[test]
fn replicas_lifecycle_messages_of_one_task_through_both_are_all_decided() {
    if agentbus_testkit::pg::skip() {
        return;
    }
    let flags = ["--rate-per-agent", "1000000", "--rate-burst", "1000000"];
    let Pair { a, b, _tmp, .. } = pair(&flags);
    let bot = register(&a, "bot");
    let card = json!({"capabilities": [{"name": "code.review", "version": "1", "description": "Review a diff."}]});
    let rev = crate::gwproc::register_with(&a, "reviewer", card);
    let req_id = agentbus_runtime::mint(IdKind::Message).to_string();
    let conversation = agentbus_runtime::mint(IdKind::Conversation).to_string();
    let request = envelope_at(
        &bot,
        &rev.address,
        &req_id,
        "",
        a.now_ms(),
        json!({
            "type": "agentbus.task.request.v1",
            "schema": "https://komsary.agentbus.exchange/schemas/agentbus.task.request/v1.json",
            "capability": "code.review",
            "capability_version": "1",
            "conversation_id": conversation,
            "data": {"instructions": "Review change 482.", "constraints": {}},
        }),
    );
    let (s, r) = publish(&a, &bot, Value::Object(request).to_string().as_bytes());
    assert_eq!(s, 202, "{r}");
    let task = r["task_id"].as_str().unwrap().to_owned();
    let of = (req_id.as_str(), conversation.as_str(), task.as_str());
    let accept = followup(&rev, &bot, of, "accept", json!({}));
    assert_eq!(publish(&b, &rev, &accept).0, 202);

    const EACH: usize = 25;
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let progress: Vec<_> = [a.addr.as_str(), b.addr.as_str()]
            .into_iter()
            .map(|addr| {
                let (rev, bot, sent) = (&rev, &bot, sent.clone());
                scope.spawn(move || {
                    (0..EACH)
                        .map(|i| {
                            let body = followup(rev, bot, of, "progress", json!({"percent": i}));
                            sent.fetch_add(1, Ordering::Relaxed);
                            publish_at(addr, rev, &body)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let (url, admin, task, sent) = (&b.url, &b.admin, &task, &sent);
        // The admin cancels again and again while the progress runs: the first cancel asks the
        // worker to stop, each later one is recorded (§6.2).
        let cancels = scope.spawn(move || {
            let path = format!("/v1/tasks/{task}/cancel");
            let mut answers = Vec::new();
            while sent.load(Ordering::Relaxed) < 2 * EACH && answers.len() < EACH / 2 {
                answers.push(http(url, "POST", &path, admin, Some(&json!({}))));
            }
            answers
        });
        let mut all: Vec<(u16, Value)> = progress
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.extend(cancels.join().unwrap());
        all
    });
    let refused: Vec<String> = answers
        .iter()
        .filter(|(s, _)| *s >= 300)
        .map(|(s, v)| format!("{s} {}", v["error"]["message"]))
        .collect();
    assert!(
        refused.is_empty(),
        "{} of {} refused, the first: {}",
        refused.len(),
        answers.len(),
        refused[0]
    );
    let cancels = answers.len() - 2 * EACH;
    assert_eq!(answers[2 * EACH].1["cancel_requested"], true);
    // Every message and cancel is on the task's timeline once, after the request and accept.
    let (s, t) = http(
        &a.url,
        "GET",
        &format!("/v1/tasks/{task}"),
        &bot.token,
        None,
    );
    assert_eq!(s, 200, "{t}");
    let timeline = t["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 2 + 2 * EACH + cancels, "{t}");
    let _ = writeln!(
        std::io::stderr(),
        "replicas: {} lifecycle messages of one task through two replicas at once and {cancels} \
         admin cancels: all decided, {} on the timeline",
        2 * EACH,
        timeline.len()
    );
}
