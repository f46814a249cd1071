//! What search costs and how fast it answers: query latency over a large inbox, and what
//! indexing costs a publish, on SQLite and on PostgreSQL.
//!
//! `scripts/bench-search` builds it in release and runs it (`cargo bench -p agentbus-gateway
//! --bench search`). Everything runs in this process on this machine's cores: the gateways, the
//! load generator (`loadgen`, the other gateway benches' one) and, for `pg`, a throwaway
//! PostgreSQL cluster (the store tests' `pg.rs`, fsync on) the bench starts and stops.
//!
//! The text is made up but shaped like language: words drawn from a vocabulary of 5,000 with
//! Zipf frequencies (a word's weight is 1/rank), so a few words are in most messages and most
//! words in few, as in what agents write.
//!
//! For each store of `BENCH_STORES` (default `sqlite,pg`):
//! 1. Query latency. One gateway gets `BENCH_MESSAGES` messages (default 100,000; 12–60 words
//!    each, three in ten with a subject) and `BENCH_TASKS` task requests (default 10,000; their
//!    instructions 20–80 words), all addressed to one agent, published over 64 connections.
//!    That agent then runs `BENCH_QUERIES` (default 500) queries of each kind, one at a time,
//!    through `GET /v1/search` with a page of 20: two mid-frequency words (ranks 100–1,000: the
//!    target's "two-word query"), two common words (ranks 1–20: the most candidates a query
//!    opens), and two rare words (ranks 3,000–5,000). Reported: p50, p99 and the mean hits.
//! 2. Indexing's cost to publish. Two more gateways on the store, `search_index` on and off,
//!    measured interleaved: in each of `BENCH_ROUNDS` rounds (default 3) each in turn (the order
//!    rotating) publishes `BENCH_N` signed messages (default 20,000) of about 1 KiB of such text
//!    over `BENCH_CONCURRENCY` connections (default 256); the clock stops when the WebSocket
//!    subscriber has all of them. Reported: the median throughput of each and the loss.
//!
//! `BENCH_PARTS` (default `queries,indexing`) picks the parts to run.
//!
//! Figures go in docs/benchmarks.md. Not a test: nothing here asserts a time.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

mod gateway;
mod loadgen;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Instant;

use agentbus_gateway::config::{Config, StoreSetting};
use agentbus_testkit::pg;
use gateway::env;
use serde_json::{Value, json};

/// The allocator the `agentbus` binary uses, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Words in the vocabulary.
const VOCABULARY: usize = 5_000;

/// A deterministic generator (SplitMix64): the same corpus on every run and every store.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The vocabulary by rank, and the cumulative Zipf weights to draw from it.
struct Words {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Words {
    fn new() -> Words {
        const SYLLABLES: [&str; 20] = [
            "ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "pe", "da", "gu", "ri", "zo", "fa",
            "be", "xi", "ho", "ju", "wen", "tor",
        ];
        // Every word has 2–4 syllables; the rank order mixes lengths, as language does.
        let mut words = Vec::with_capacity(VOCABULARY);
        let mut rng = Rng(7);
        let mut seen = std::collections::HashSet::new();
        while words.len() < VOCABULARY {
            let n = 2 + rng.below(3);
            let w: String = (0..n)
                .map(|_| SYLLABLES[rng.below(SYLLABLES.len())])
                .collect();
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let cumulative = (0..VOCABULARY)
            .map(|r| {
                total += 1.0 / (r + 1) as f64;
                total
            })
            .collect();
        Words { words, cumulative }
    }

    fn draw(&self, rng: &mut Rng) -> &str {
        let x = rng.unit() * self.cumulative[VOCABULARY - 1];
        let r = self.cumulative.partition_point(|c| *c < x);
        &self.words[r.min(VOCABULARY - 1)]
    }

    /// `n` words drawn by frequency, as one line.
    fn text(&self, rng: &mut Rng, n: usize) -> String {
        (0..n).map(|_| self.draw(rng)).collect::<Vec<_>>().join(" ")
    }

    /// Two distinct words of rank in `ranks`.
    fn pair(&self, rng: &mut Rng, ranks: std::ops::Range<usize>) -> String {
        let a = ranks.start + rng.below(ranks.len());
        let mut b = ranks.start + rng.below(ranks.len());
        while b == a {
            b = ranks.start + rng.below(ranks.len());
        }
        format!("{} {}", self.words[a], self.words[b])
    }
}

/// The corpus: messages then task requests, from the senders in turn to the subscriber.
fn corpus(
    setup: &loadgen::Setup,
    words: &Words,
    messages: usize,
    tasks: usize,
) -> Vec<(String, Vec<u8>, String)> {
    let mut rng = Rng(42);
    let to = setup.subscriber().address.clone();
    let senders = setup.senders();
    let mut out = Vec::with_capacity(messages + tasks);
    for i in 0..messages + tasks {
        let from = &senders[i % senders.len()];
        let (id, body) = if i < messages {
            let n = 12 + rng.below(49);
            let text = words.text(&mut rng, n);
            let extra = match rng.below(10) < 3 {
                true => {
                    let n = 3 + rng.below(3);
                    json!({"subject": words.text(&mut rng, n)})
                }
                false => json!({}),
            };
            loadgen::signed(from, &to, "message", json!({"text": text}), extra)
        } else {
            let n = 20 + rng.below(61);
            let data = json!({"instructions": words.text(&mut rng, n)});
            let extra = json!({"capability": "code.review", "capability_version": "1"});
            loadgen::signed(from, &to, "task.request", data, extra)
        };
        out.push((id, body, from.token.clone()));
    }
    out
}

/// About 1 KiB of text per message (140 words), `n` messages, for the publish comparison.
fn kib_messages(
    setup: &loadgen::Setup,
    words: &Words,
    rng: &mut Rng,
    n: usize,
) -> Vec<(String, Vec<u8>, String)> {
    let to = setup.subscriber().address.clone();
    let senders = setup.senders();
    (0..n)
        .map(|i| {
            let from = &senders[i % senders.len()];
            let text = words.text(rng, 140);
            let (id, body) =
                loadgen::signed(from, &to, "message", json!({"text": text}), json!({}));
            (id, body, from.token.clone())
        })
        .collect()
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A gateway of `store` on `dir` (a new database of `cluster` for `pg`), with `change` applied.
async fn start(
    store: &str,
    cluster: Option<&pg::Cluster>,
    dir: &Path,
    change: impl FnOnce(&mut Config),
) -> (SocketAddr, String) {
    let setting = match store {
        "sqlite" => StoreSetting::Sqlite,
        "pg" => StoreSetting::Postgres(cluster.unwrap().database().await),
        other => panic!("BENCH_STORES: unknown store {other:?} (sqlite, pg)"),
    };
    let (addr, admin) = gateway::start_with(dir.to_owned(), setting, change).await;
    (addr, admin.unwrap())
}

async fn queries(store: &str, cluster: Option<&pg::Cluster>, root: &Path, words: &Words) {
    let messages = env("BENCH_MESSAGES", 100_000usize);
    let tasks = env("BENCH_TASKS", 10_000usize);
    let count = env("BENCH_QUERIES", 500usize);
    let (addr, admin) = start(store, cluster, &root.join("queries"), |_| {}).await;
    let setup = loadgen::Setup::new(addr, &admin, "search").await;
    let load = corpus(&setup, words, messages, tasks);
    let started = Instant::now();
    let done = setup.publish_all(load, 64).await;
    let took = started.elapsed().as_secs_f64();
    match done {
        Some(_) => println!(
            "{store}: {messages} messages and {tasks} task requests stored in {took:.1} s ({:.0}/s)",
            (messages + tasks) as f64 / took
        ),
        None => println!("{store}: the corpus stalled; the figures below are over what arrived"),
    }
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/v1/search");
    let token = setup.subscriber().token.clone();
    let mut rng = Rng(99);
    for (kind, ranks) in [
        ("two mid-frequency words (ranks 100-1,000)", 100..1_000),
        ("two common words (ranks 1-20)", 0..20),
        ("two rare words (ranks 3,000-5,000)", 3_000..5_000),
    ] {
        let mut ms = Vec::with_capacity(count);
        let mut hits = 0usize;
        for _ in 0..count {
            let q = words.pair(&mut rng, ranks.clone());
            let t = Instant::now();
            // The vocabulary's words are plain ASCII letters: only the space needs encoding.
            let r = http
                .get(format!("{url}?limit=20&q={}", q.replace(' ', "%20")))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            hits += v["hits"].as_array().map_or(0, Vec::len);
        }
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{store}: {kind}: p50 {:.1} ms, p99 {:.1} ms, mean hits per page {:.1} ({count} queries)",
            loadgen::quantile(&ms, 0.5),
            loadgen::quantile(&ms, 0.99),
            hits as f64 / count as f64
        );
    }
}

async fn indexing(store: &str, cluster: Option<&pg::Cluster>, root: &Path, words: &Words) {
    let rounds = env("BENCH_ROUNDS", 3usize);
    let n = env("BENCH_N", 20_000usize);
    let concurrency = env("BENCH_CONCURRENCY", 256usize);
    let mut targets = Vec::new();
    for (name, on) in [("index on", true), ("index off", false)] {
        let dir = root.join(name.replace(' ', "-"));
        let (addr, admin) = start(store, cluster, &dir, |c| c.search_index = on).await;
        let tag = name.replace(' ', "");
        targets.push((
            name,
            loadgen::Setup::new(addr, &admin, &tag).await,
            Vec::new(),
        ));
    }
    let mut rng = Rng(1234);
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (round + k) % targets.len();
            let load = kib_messages(&targets[i].1, words, &mut rng, n);
            let size = load.iter().map(|m| m.1.len()).sum::<usize>() / n.max(1);
            let (_, delivered) = targets[i]
                .1
                .publish_all(load, concurrency)
                .await
                .unwrap_or((std::time::Duration::MAX, std::time::Duration::MAX));
            let per_s = n as f64 / delivered.as_secs_f64();
            println!(
                "{store}: round {}: {}: {per_s:.0} msg/s ({n} of {size} bytes)",
                round + 1,
                targets[i].0
            );
            targets[i].2.push(per_s);
        }
    }
    let on = median(&targets[0].2);
    let off = median(&targets[1].2);
    println!(
        "{store}: publish throughput, median of {rounds}: index on {on:.0} msg/s, off {off:.0} msg/s: indexing costs {:.1}%",
        (off - on) / off * 100.0
    );
}

fn main() {
    let rt = gateway::runtime();
    let stores = env("BENCH_STORES", "sqlite,pg".to_owned());
    let tmp = tempfile::tempdir().unwrap();
    let cluster = stores
        .split(',')
        .any(|s| s == "pg")
        .then(pg::Cluster::start);
    rt.block_on(async {
        let words = Words::new();
        let parts = env("BENCH_PARTS", "queries,indexing".to_owned());
        for store in stores.split(',') {
            let root = tmp.path().join(store);
            if parts.split(',').any(|p| p == "queries") {
                queries(store, cluster.as_ref(), &root, &words).await;
            }
            if parts.split(',').any(|p| p == "indexing") {
                indexing(store, cluster.as_ref(), &root, &words).await;
            }
        }
    });
    let _ = std::fs::remove_dir_all(tmp.path());
    // Exit without tearing the runtime down under the gateways' live connections (as the
    // stores bench does); the cluster stops as this process ends.
    std::process::exit(0);
}
