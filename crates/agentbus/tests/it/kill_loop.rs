//! The kill -9 loop: the real `agentbus gateway` on a real SQLite data
//! directory, killed with SIGKILL at a random moment while 8 signed publishers keep publishes in
//! flight and 2 consumers lease and ack, then restarted on the same directory, cycle after cycle.
//!
//! What a 202 promises (docs/delivery.md, "Durability" and "Sequences"): the envelope is on disk,
//! under one per-inbox sequence with no gap and no reuse. So after the loop every publish that was
//! answered 202 (or 200, a replay) must reach its consumer; no id may sit under two sequences; the
//! sequences of each inbox must run 1..=n; and `PRAGMA integrity_check` must pass after every kill.
//! A publisher whose request died with the process retries the same bytes, as any client would:
//! the answer is a replay when the first attempt was stored, a new 202 when it was not.
//!
//! `AGENTBUS_KILL_CYCLES` sets the number of cycles (10 in the test command; `scripts/reliability`
//! runs 200) and `AGENTBUS_KILL_SEED` replays the kill moments of an earlier run. The figures are
//! printed whether the test passes or not.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use agentbus_protocol::ids::IdKind;

use crate::gwproc::{Agent, Conn, GwProc, PATIENCE, envelope_at, gateway_cmd, register};

const PUBLISHERS: usize = 8;
const CONSUMERS: usize = 2;
/// Acknowledged publishes each cycle must see before its kill moment is drawn, so the kill
/// always lands on a gateway under load.
const WARM: usize = 20;
/// The random part of the kill moment, after the warm-up.
const KILL_JITTER_MS: u64 = 250;
/// Copies leased before a kill come back after the visibility timeout; a copy is never
/// dead-lettered on the way however many kills it sees, and the copies whose acks died with the
/// process never fill an inbox in a long run.
const FLAGS: &[&str] = &[
    "--unsafe-test-clock",
    "--max-attempts",
    "1000",
    "--inbox-max-depth",
    "100000000",
];

/// What the publishers and consumers share with the loop (and with the replicas' test).
pub struct Shared {
    /// `host:port` of each gateway now running (one here; a replica each in `replicas.rs`).
    pub addrs: Mutex<Vec<String>>,
    pub stop_publishing: AtomicBool,
    pub stop_consuming: AtomicBool,
    /// Publishes sent and not yet answered.
    pub in_flight: AtomicUsize,
    /// Publishes answered 202 or 200.
    pub acked: AtomicUsize,
}

impl Shared {
    /// Nothing stopped, nothing counted, on these gateways.
    pub fn new(addrs: Vec<String>) -> Shared {
        Shared {
            addrs: Mutex::new(addrs),
            stop_publishing: AtomicBool::new(false),
            stop_consuming: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            acked: AtomicUsize::new(0),
        }
    }

    /// A connection to a gateway now running, the `prefer`-th first and then the others, as a
    /// load balancer would; waits out a restart.
    fn connect(&self, prefer: usize) -> Conn {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let addrs = self.addrs.lock().unwrap().clone();
            let n = addrs.len().max(1);
            for i in 0..addrs.len() {
                if let Ok(c) = Conn::open(&addrs[(prefer + i) % n]) {
                    return c;
                }
            }
            assert!(Instant::now() < deadline, "no gateway to connect to");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// One publisher's account.
#[derive(Default)]
pub struct Published {
    /// Ids answered 202 or 200, with their recipient.
    pub acked: Vec<(String, String)>,
    /// Publishes whose connection died with the gateway before an answer.
    pub cut: usize,
    /// Of those, retries answered as replays (the first attempt had been stored).
    pub replayed: usize,
    /// Answers other than 200/202 (anything here fails the test).
    pub other: Vec<String>,
}

/// Publishes signed messages to `to` through the `prefer`-th gateway until told to stop; an
/// unanswered publish is retried with the same bytes (on whichever gateway answers) until it
/// gets an answer, even after the stop.
pub fn publisher(shared: &Shared, from: &Agent, to: &str, prefer: usize) -> Published {
    let mut out = Published::default();
    let mut conn = shared.connect(prefer);
    let mut pending: Option<(String, Vec<u8>, bool)> = None;
    loop {
        let (id, body, retry) = match pending.take() {
            Some(p) => p,
            None if shared.stop_publishing.load(Ordering::SeqCst) => return out,
            None => {
                let id = agentbus_runtime::mint(IdKind::Message).to_string();
                let now = agentbus_runtime::Clock::now(&agentbus_runtime::SystemClock).millis();
                let env = envelope_at(from, to, &id, "kill -9 loop", now, json!({}));
                (id, Value::Object(env).to_string().into_bytes(), false)
            }
        };
        shared.in_flight.fetch_add(1, Ordering::SeqCst);
        let answer = conn.call("POST", "/v1/messages", &from.token, &body);
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        match answer {
            Ok((s @ (200 | 202), _)) => {
                if retry && s == 200 {
                    out.replayed += 1;
                }
                out.acked.push((id, to.to_owned()));
                shared.acked.fetch_add(1, Ordering::SeqCst);
            }
            Ok((s, b)) => {
                out.other
                    .push(format!("{s} {}", String::from_utf8_lossy(&b)));
                return out;
            }
            Err(_) => {
                if !retry {
                    out.cut += 1;
                }
                pending = Some((id, body, true));
                conn = shared.connect(prefer);
            }
        }
    }
}

/// What a consumer saw: every (sequence, id) delivered to it.
pub type Seen = BTreeSet<(u64, String)>;

/// Leases one batch after `after` and acks it; answers the next cursor and how many came.
pub fn lease_and_ack(
    conn: &mut Conn,
    who: &Agent,
    after: u64,
    wait: u32,
    seen: &mut Seen,
) -> std::io::Result<(u64, usize)> {
    let path = format!("/v1/inbox?after={after}&wait={wait}&limit=500");
    let (s, b) = conn.call("GET", &path, &who.token, b"")?;
    if s != 200 {
        return Err(std::io::Error::other(format!("poll: {s}")));
    }
    let v: Value = serde_json::from_slice(&b).map_err(std::io::Error::other)?;
    let deliveries = v["deliveries"].as_array().cloned().unwrap_or_default();
    let mut acks = Vec::new();
    for d in &deliveries {
        let seq = d["sequence"].as_u64().unwrap_or(0);
        let id = d["envelope"]["id"].as_str().unwrap_or_default().to_owned();
        seen.insert((seq, id));
        acks.push(json!({"sequence": d["sequence"], "delivery": d["delivery"]}));
    }
    if !acks.is_empty() {
        // An ack lost with a kill leaves the copy leased; it comes back after the visibility
        // timeout, and the final drain collects it.
        let body = json!({"acks": acks}).to_string();
        conn.call("POST", "/v1/inbox/acks", &who.token, body.as_bytes())?;
    }
    let next = v["next_after"].as_u64().unwrap_or(after).max(after);
    Ok((next, deliveries.len()))
}

/// Leases and acks through the `prefer`-th gateway (or whichever answers) until told to stop.
pub fn consumer(shared: &Shared, who: &Agent, prefer: usize) -> Seen {
    let mut seen = Seen::new();
    let mut conn = shared.connect(prefer);
    let mut after = 0;
    while !shared.stop_consuming.load(Ordering::SeqCst) {
        match lease_and_ack(&mut conn, who, after, 1, &mut seen) {
            Ok((next, _)) => after = next,
            Err(_) => conn = shared.connect(prefer),
        }
    }
    seen
}

/// What every consumer saw against what every publisher was acknowledged: the acknowledged ids
/// never delivered, the ids delivered under two sequences, the sequence gaps, and the delivered
/// ids nobody was acknowledged for.
pub struct Account {
    pub acked: usize,
    pub lost: Vec<String>,
    pub twice: Vec<String>,
    pub gaps: usize,
    pub invented: Vec<String>,
}

/// Compares what `consumers` saw with what was `published` (see [`Account`]).
pub fn account(consumers: &[Agent], seen: &[Seen], published: &[Published]) -> Account {
    let mut delivered: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    let mut sequences: HashMap<(&str, &str), BTreeSet<u64>> = HashMap::new();
    let mut gaps = 0;
    for (who, seen) in consumers.iter().zip(seen) {
        let seqs: BTreeSet<u64> = seen.iter().map(|(s, _)| *s).collect();
        let max = seqs.iter().next_back().copied().unwrap_or(0);
        gaps += usize::try_from(max).unwrap() - seqs.len();
        for (seq, id) in seen {
            delivered
                .entry(who.address.as_str())
                .or_default()
                .insert(id);
            sequences
                .entry((who.address.as_str(), id.as_str()))
                .or_default()
                .insert(*seq);
        }
    }
    let acked: BTreeMap<&str, &str> = published
        .iter()
        .flat_map(|p| p.acked.iter().map(|(id, to)| (id.as_str(), to.as_str())))
        .collect();
    Account {
        acked: acked.len(),
        lost: acked
            .iter()
            .filter(|(id, to)| !delivered.get(*to).is_some_and(|d| d.contains(*id)))
            .map(|(id, _)| (*id).to_owned())
            .collect(),
        twice: sequences
            .iter()
            .filter(|(_, s)| s.len() > 1)
            .map(|((_, id), s)| format!("{id} under {s:?}"))
            .collect(),
        gaps,
        invented: delivered
            .iter()
            .flat_map(|(to, ids)| {
                ids.iter()
                    .filter(|id| !acked.contains_key(**id))
                    .map(move |id| format!("{to} got {id}"))
            })
            .collect(),
    }
}

/// `PRAGMA integrity_check` of the database as the kill left it: on a copy of the file and its
/// WAL, so the gateway's own recovery on restart starts from what the kill left too.
fn integrity_check(dir: &Path, scratch: &Path) -> String {
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).unwrap();
    for f in ["agentbus.db", "agentbus.db-wal"] {
        if dir.join(f).exists() {
            std::fs::copy(dir.join(f), scratch.join(f)).unwrap();
        }
    }
    let c = rusqlite::Connection::open(scratch.join("agentbus.db")).unwrap();
    c.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .unwrap_or_else(|e| e.to_string())
}

/// Starts the gateway on `dir` and waits for `/readyz`: answers it and how long that took.
fn start_ready(dir: &Path) -> (GwProc, Duration) {
    let mut cmd = gateway_cmd(dir, FLAGS);
    // A log line per request would cost the gateway more than the publishes.
    cmd.env("RUST_LOG", "warn");
    let t = Instant::now();
    let gw = GwProc::start_cmd(cmd);
    let deadline = t + PATIENCE;
    loop {
        if let Ok((200, _)) =
            Conn::open(&gw.addr).and_then(|mut c| c.call("GET", "/readyz", "", b""))
        {
            return (gw, t.elapsed());
        }
        assert!(Instant::now() < deadline, "the gateway never became ready");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// xorshift64*: the kill moments, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The figures the loop found, checked after they are printed.
struct Figures {
    cycles: usize,
    seed: u64,
    acked: usize,
    cut: usize,
    replayed: usize,
    in_flight_at_kills: Vec<usize>,
    lost: Vec<String>,
    twice: Vec<String>,
    gaps: usize,
    integrity: Vec<String>,
    recovery: Vec<Duration>,
    other: Vec<String>,
    elapsed: Duration,
}

impl Figures {
    fn print(&self) {
        let mut rec = self.recovery.clone();
        rec.sort();
        let pick = |q: f64| {
            rec.get(((rec.len().max(1) - 1) as f64 * q) as usize)
                .copied()
        };
        let at = |q| pick(q).map_or("-".to_owned(), |d| format!("{:.0}", ms(d)));
        let killed_loaded = self.in_flight_at_kills.iter().filter(|n| **n > 0).count();
        let ok = self.integrity.iter().filter(|r| *r == "ok").count();
        // Written to stderr itself, past the test harness's capture: CI's log shows the figures.
        let _ = writeln!(
            std::io::stderr(),
            "kill -9 loop: {} cycles in {:.1} s (seed {:#x}), {PUBLISHERS} publishers, {CONSUMERS} consumers\n  \
             {} publishes acknowledged; {} cut by a kill and retried ({} of them had been stored: a replay)\n  \
             publishes in flight at the kill: {} in all, {} of {} kills with at least one\n  \
             acked but lost: {}; ids under two sequences: {}; sequence gaps: {}; integrity_check ok: {ok} of {}\n  \
             recovery (spawn to /readyz): min {} ms, median {} ms, p99 {} ms, max {} ms",
            self.cycles,
            self.elapsed.as_secs_f64(),
            self.seed,
            self.acked,
            self.cut,
            self.replayed,
            self.in_flight_at_kills.iter().sum::<usize>(),
            killed_loaded,
            self.in_flight_at_kills.len(),
            self.lost.len(),
            self.twice.len(),
            self.gaps,
            self.integrity.len(),
            at(0.0),
            at(0.5),
            at(0.99),
            at(1.0),
        );
    }
}

/// docs/delivery.md ("Durability", "Sequences"), WP-7-5 (one per-inbox order) and WP-8-1 (an id
/// is stored once): SIGKILL at random moments under 8 signed publishers loses no acknowledged
/// publish, stores no id twice, leaves no sequence gap and no corrupt page.
#[test]
fn wp_7_5_wp_8_1_kill_9_loop_loses_no_acknowledged_publish() {
    let cycles: usize = std::env::var("AGENTBUS_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let seed = std::env::var("AGENTBUS_KILL_SEED")
        .ok()
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| u64::from_le_bytes(agentbus_runtime::random_bytes()) | 1);
    let mut rng = Rng(seed);
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gw");
    let (mut gw, _) = start_ready(&dir);
    let operator = gw.operator.clone();
    let consumers: Vec<Agent> = (0..CONSUMERS)
        .map(|i| register(&gw, &format!("consumer-{i}")))
        .collect();
    let publishers: Vec<Agent> = (0..PUBLISHERS)
        .map(|i| register(&gw, &format!("publisher-{i}")))
        .collect();
    let shared = Arc::new(Shared::new(vec![gw.addr.clone()]));
    let pub_threads: Vec<_> = publishers
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let (shared, a) = (shared.clone(), a.clone());
            let to = consumers[i % CONSUMERS].address.clone();
            std::thread::spawn(move || publisher(&shared, &a, &to, 0))
        })
        .collect();
    let con_threads: Vec<_> = consumers
        .iter()
        .map(|c| {
            let (shared, c) = (shared.clone(), c.clone());
            std::thread::spawn(move || consumer(&shared, &c, 0))
        })
        .collect();

    let mut in_flight_at_kills = Vec::new();
    let mut integrity = Vec::new();
    let mut recovery = Vec::new();
    for _ in 0..cycles {
        let base = shared.acked.load(Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        while shared.acked.load(Ordering::SeqCst) < base + WARM {
            assert!(Instant::now() < deadline, "the publishers stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(rng.below(KILL_JITTER_MS + 1)));
        in_flight_at_kills.push(shared.in_flight.load(Ordering::SeqCst));
        gw.kill9();
        integrity.push(integrity_check(&dir, &tmp.path().join("copy")));
        let (next, took) = start_ready(&dir);
        recovery.push(took);
        *shared.addrs.lock().unwrap() = vec![next.addr.clone()];
        gw = next;
    }

    // The last gateway stays up: every cut publish is retried to an answer, then the consumers
    // stop, the copies a kill left leased come back (the test clock passes the visibility
    // timeout) and are collected.
    shared.stop_publishing.store(true, Ordering::SeqCst);
    let published: Vec<Published> = pub_threads.into_iter().map(|t| t.join().unwrap()).collect();
    shared.stop_consuming.store(true, Ordering::SeqCst);
    let mut seen: Vec<Seen> = con_threads.into_iter().map(|t| t.join().unwrap()).collect();
    gw.operator = operator;
    gw.advance("61s");
    for (who, seen) in consumers.iter().zip(seen.iter_mut()) {
        let mut conn = Conn::open(&gw.addr).unwrap();
        while lease_and_ack(&mut conn, who, 0, 0, seen).unwrap().1 > 0 {}
    }
    assert!(gw.stop("TERM").success());
    integrity.push(integrity_check(&dir, &tmp.path().join("copy")));

    let acc = account(&consumers, &seen, &published);
    let figures = Figures {
        cycles,
        seed,
        acked: acc.acked,
        cut: published.iter().map(|p| p.cut).sum(),
        replayed: published.iter().map(|p| p.replayed).sum(),
        in_flight_at_kills,
        lost: acc.lost,
        twice: acc.twice,
        gaps: acc.gaps,
        integrity,
        recovery,
        other: published.iter().flat_map(|p| p.other.clone()).collect(),
        elapsed: started.elapsed(),
    };
    figures.print();
    assert!(
        figures.other.is_empty(),
        "unexpected answers: {:?}",
        figures.other
    );
    assert!(
        figures.lost.is_empty(),
        "acknowledged but lost: {:?}",
        figures.lost
    );
    assert!(
        figures.twice.is_empty(),
        "ids under two sequences: {:?}",
        figures.twice
    );
    assert_eq!(figures.gaps, 0, "sequence gaps");
    assert!(
        figures.integrity.iter().all(|r| r == "ok"),
        "integrity_check: {:?}",
        figures.integrity
    );
    // Every delivered id was published by someone (nothing invented, nothing from elsewhere).
    assert!(acc.invented.is_empty(), "{:?}", acc.invented);
    // The loop did what it claims: it killed under load, publishes were cut mid-flight.
    assert!(
        figures.in_flight_at_kills.iter().sum::<usize>() > 0 && figures.cut > 0,
        "no kill landed on a publish in flight"
    );
}
