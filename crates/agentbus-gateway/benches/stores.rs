//! The gateway on SQLite and on PostgreSQL side by side in one run, then the held
//! snapshot on PostgreSQL.
//!
//! `scripts/bench-stores` builds it in release and runs it (`cargo bench -p agentbus-gateway
//! --bench stores`). Everything runs in this process on this machine's cores: the gateways, the
//! load generator (`loadgen`, the one the throughput bench and the NATS comparison use) and a
//! throwaway PostgreSQL cluster the bench starts (fsync on, `synchronous_commit` on; the store
//! tests' `pg.rs`) and stops.
//!
//! 1. Side by side, interleaved: in each of `BENCH_ROUNDS` rounds (default 3), each target in
//!    turn (the order rotating per round) measures signed durable publish throughput
//!    (`BENCH_N` messages of `BENCH_SIZE` bytes, default 20,000 of 1,024, over
//!    `BENCH_CONCURRENCY` connections, default 256; the clock stops when the WebSocket subscriber
//!    has all of them) and publish→delivery latency at `BENCH_RATE` msg/s (default 1,000) for
//!    `BENCH_SECS` (default 10). The targets (`BENCH_STORES`, default `sqlite,pg,pg2`):
//!    `sqlite`, the embedded file; `pg`, one replica on a PostgreSQL database; `pg2`, two replicas
//!    on another database (each its own data directory holding the same `master.key` and
//!    `gateway.key`), publishes sent to one and the subscriber's WebSocket held on the other, so
//!    every delivery is woken across replicas (LISTEN/NOTIFY).
//! 2. Held snapshot (skipped with `BENCH_HOLD_SECS=0`): one replica on a fresh database at a
//!    steady `BENCH_HOLD_RATE` msg/s (default 800), delivered and acked; after `BENCH_WARMUP_SECS`
//!    (default 30) a separate connection opens `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1
//!    FROM inbox LIMIT 1` and holds it for `BENCH_HOLD_SECS` (default 180), then commits; the
//!    load runs on for `BENCH_AFTER_SECS` (default 60). Every 30 s it reads `pg_stat_user_tables` for `inbox`,
//!    `inbox_counters` and `messages` and reports, per 30 s window, the rate achieved and the
//!    publish→delivery latency.
//!
//! Beside each latency phase a probe writes 4 KiB and calls `fdatasync` every 10 ms on the same
//! disk and reports its slow calls: a stall of the disk holds every durable commit behind it.
//!
//! Figures go in docs/benchmarks.md. Not a test: nothing here asserts a time.

#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

mod gateway;
mod loadgen;

use std::path::Path;
use std::time::{Duration, Instant};

use agentbus_gateway::config::StoreSetting;
use agentbus_testkit::pg;
use gateway::env;

/// The allocator the `agentbus` binary uses, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A gateway (or a pair of replicas) under measurement, with what each round measured.
struct Target {
    name: &'static str,
    setup: loadgen::Setup,
    throughput: Vec<f64>,
    /// p50, p99, p99.9 of publish→delivery, ms, per round.
    latency: Vec<[f64; 3]>,
}

/// A PostgreSQL gateway of `replicas` replicas on a new database of `cluster`, each with its
/// own data directory under `root` holding the first one's keys; answers the replicas'
/// addresses, the admin token and the database URL.
async fn replicas(
    cluster: &pg::Cluster,
    root: &Path,
    replicas: usize,
) -> (Vec<std::net::SocketAddr>, String, String) {
    let url = cluster.database().await;
    let mut addrs = Vec::new();
    let mut admin = None;
    for i in 0..replicas {
        let dir = root.join(format!("replica-{i}"));
        if i > 0 {
            // Replicas share the database and so its master key, and sign with one gateway key.
            std::fs::create_dir_all(&dir).unwrap();
            for key in ["master.key", "gateway.key"] {
                std::fs::copy(root.join("replica-0").join(key), dir.join(key)).unwrap();
            }
        }
        let (addr, token) = gateway::start(dir, StoreSetting::Postgres(url.clone())).await;
        admin = admin.or(token);
        addrs.push(addr);
    }
    (addrs, admin.unwrap(), url)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

async fn side_by_side(cluster: &pg::Cluster, root: &Path) {
    let rounds = env("BENCH_ROUNDS", 3usize);
    let n = env("BENCH_N", 20_000usize);
    let concurrency = env("BENCH_CONCURRENCY", 256usize);
    let size = env("BENCH_SIZE", 1024usize);
    let rate = env("BENCH_RATE", 1000u64);
    let seconds = env("BENCH_SECS", 10u64);
    let stores = env("BENCH_STORES", "sqlite,pg,pg2".to_owned());
    let mut targets = Vec::new();
    for name in stores.split(',') {
        let setup = match name {
            "sqlite" => {
                let (addr, admin) = gateway::start(root.join("sqlite"), StoreSetting::Sqlite).await;
                loadgen::Setup::new(addr, &admin.unwrap(), "sqlite").await
            }
            "pg" => {
                let (addrs, admin, _) = replicas(cluster, &root.join("pg"), 1).await;
                loadgen::Setup::new(addrs[0], &admin, "pg").await
            }
            "pg2" => {
                let (addrs, admin, _) = replicas(cluster, &root.join("pg2"), 2).await;
                loadgen::Setup::split(addrs[0], addrs[1], &admin, "pg2").await
            }
            other => panic!("BENCH_STORES: unknown target {other:?} (sqlite, pg, pg2)"),
        };
        let name = match name {
            "sqlite" => "sqlite",
            "pg" => "pg 1 replica",
            _ => "pg 2 replicas",
        };
        targets.push(Target {
            name,
            setup,
            throughput: Vec::new(),
            latency: Vec::new(),
        });
    }
    println!(
        "side by side: {rounds} rounds; throughput {n} signed messages of {size} bytes over {concurrency} connections; latency at {rate}/s for {seconds} s"
    );
    let count = targets.len();
    for round in 0..rounds {
        for k in 0..count {
            let t = &mut targets[(round + k) % count];
            // A stall (reported on stderr) is a figure too: it counts as zero throughput.
            let (published, delivered) = t
                .setup
                .throughput(n, size, concurrency)
                .await
                .unwrap_or((Duration::ZERO, Duration::MAX));
            let per_s = n as f64 / delivered.as_secs_f64();
            let probe = DiskProbe::start(root);
            let (lat, accepted) = t.setup.latency_parts(rate, seconds, size).await;
            let disk = probe.stop();
            let q = |p| loadgen::quantile(&lat, p);
            let l = [q(0.50), q(0.99), q(0.999)];
            // How much of the way is the storing publish (publish→202), the rest being delivery.
            let a = |p| loadgen::quantile(&accepted, p);
            println!(
                "round {} {:<14} throughput {per_s:>6.0}/s (published in {:.2} s, all delivered in {:.2} s); at {rate}/s for {seconds} s ({} of {} planned delivered) p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms (publish→202 p50 {:.2} ms, p99 {:.2} ms); load {}; {disk}",
                round + 1,
                t.name,
                published.as_secs_f64(),
                delivered.as_secs_f64(),
                lat.len(),
                rate * seconds,
                l[0],
                l[1],
                l[2],
                lat[lat.len() - 1],
                a(0.50),
                a(0.99),
                loadavg()
            );
            t.throughput.push(per_s);
            t.latency.push(l);
        }
    }
    if rounds == 0 {
        return;
    }
    println!();
    println!(
        "| store | throughput, msg/s (median; each round) | p50 at {rate}/s | p99 | p99.9 | worst p99 |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for t in &targets {
        let each: Vec<String> = t.throughput.iter().map(|v| format!("{v:.0}")).collect();
        let col = |i: usize| median(&t.latency.iter().map(|l| l[i]).collect::<Vec<_>>());
        let worst = t.latency.iter().map(|l| l[1]).fold(0.0, f64::max);
        println!(
            "| {} | {:.0} ({}) | {:.2} ms | {:.2} ms | {:.2} ms | {worst:.2} ms |",
            t.name,
            median(&t.throughput),
            each.join(", "),
            col(0),
            col(1),
            col(2)
        );
    }
    let find = |name: &str| targets.iter().find(|t| t.name == name);
    if let Some(sqlite) = find("sqlite") {
        for t in targets.iter().filter(|t| t.name != "sqlite") {
            // Ratios of the same round: the targets ran back to back on the same machine.
            let ratios: Vec<f64> = t
                .throughput
                .iter()
                .zip(&sqlite.throughput)
                .map(|(p, s)| p / s)
                .collect();
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let m = median(&ratios);
            let target = if t.name == "pg 1 replica" {
                format!(" (target ≥ 0.5: {})", verdict(m >= 0.5))
            } else {
                String::new()
            };
            println!(
                "{} / sqlite throughput: {m:.2} median ({}){target}",
                t.name,
                each.join(", ")
            );
        }
    }
    if let Some(t) = find("pg 2 replicas") {
        let p99 = median(&t.latency.iter().map(|l| l[1]).collect::<Vec<_>>());
        println!(
            "p99 across replicas at {rate}/s: {p99:.2} ms median (target < 10 ms: {})",
            verdict(p99 < 10.0)
        );
    }
}

/// The dead and live tuples, size and autovacuum count of one table.
struct TableStats {
    dead: i64,
    live: i64,
    bytes: i64,
    autovacuums: i64,
}

/// One reading of the database during the held-snapshot phase.
struct Reading {
    phase: &'static str,
    at: f64,
    /// Transactions since the oldest snapshot any session holds (0 when none is held).
    xmin_age: i64,
    tables: Vec<TableStats>,
}

const TABLES: [&str; 3] = ["inbox", "inbox_counters", "messages"];

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn read(c: &tokio_postgres::Client, phase: &'static str, at: f64) -> Reading {
    // This session's own counts are flushed now; the gateway's connections flush theirs each
    // time they go idle (at most once a second), so a reading lags by about a second.
    c.batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    let xmin_age: i32 = c
        .query_one(
            "SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mut tables = Vec::new();
    for table in TABLES {
        let r = c
            .query_one(
                "SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid), autovacuum_count \
                 FROM pg_stat_user_tables WHERE relname = $1",
                &[&table],
            )
            .await
            .unwrap();
        tables.push(TableStats {
            dead: r.get(0),
            live: r.get(1),
            bytes: r.get(2),
            autovacuums: r.get(3),
        });
    }
    Reading {
        phase,
        at,
        xmin_age: i64::from(xmin_age),
        tables,
    }
}

/// Reads the database every 30 s from the end of the warm-up, holding an old snapshot open on
/// its own connection from then for `hold` seconds; stops `after` seconds past the commit.
async fn watch(url: &str, start: Instant, warmup: u64, hold: u64, after: u64) -> Vec<Reading> {
    let stats = connect(url).await;
    let held = connect(url).await;
    let at = |s: u64| start + Duration::from_secs(s);
    let now = || start.elapsed().as_secs_f64();
    tokio::time::sleep_until(at(warmup).into()).await;
    let mut readings = vec![read(&stats, "before", now()).await];
    held.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM inbox LIMIT 1")
        .await
        .unwrap();
    let mut s = 0;
    while s < hold {
        s = (s + 30).min(hold);
        tokio::time::sleep_until(at(warmup + s).into()).await;
        readings.push(read(&stats, "held", now()).await);
    }
    held.batch_execute("COMMIT").await.unwrap();
    let mut s = 0;
    while s < after {
        s = (s + 30).min(after);
        tokio::time::sleep_until(at(warmup + hold + s).into()).await;
        readings.push(read(&stats, "after", now()).await);
    }
    readings
}

async fn held_snapshot(cluster: &pg::Cluster, root: &Path) {
    let hold = env("BENCH_HOLD_SECS", 180u64);
    if hold == 0 {
        return;
    }
    let warmup = env("BENCH_WARMUP_SECS", 30u64);
    let rate = env("BENCH_HOLD_RATE", 800u64);
    let size = env("BENCH_SIZE", 1024usize);
    let after = env("BENCH_AFTER_SECS", 60u64);
    let (addrs, admin, url) = replicas(cluster, &root.join("held"), 1).await;
    let setup = loadgen::Setup::new(addrs[0], &admin, "held").await;
    let total = warmup + hold + after;
    println!();
    println!(
        "held snapshot: one replica at {rate}/s of {size} bytes for {total} s; a REPEATABLE READ snapshot held from {warmup} s to {} s; load {}",
        warmup + hold,
        loadavg()
    );
    let messages = setup.messages((rate * total) as usize, size);
    let start = Instant::now();
    let (samples, readings) = tokio::join!(
        setup.paced(messages, rate, start),
        watch(&url, start, warmup, hold, after)
    );
    println!(
        "| phase | t (s) | xmin age | dead inbox | dead inbox_counters | dead messages | inbox size | inbox_counters size | autovacuums (inbox, counters) | 202s/s | delivered/s | delivery p50 | p99 | 202 p99 |"
    );
    println!(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let mut from = 0.0;
    for r in &readings {
        // The window since the previous reading: what was accepted and delivered in it, and the
        // latency of the messages sent in it.
        let window = r.at - from;
        let inside = |t: f64| t > from && t <= r.at;
        let accepted = samples.iter().filter(|s| inside(s.accepted)).count();
        let delivered = samples
            .iter()
            .filter(|s| s.arrived.is_some_and(inside))
            .count();
        let mut lat: Vec<f64> = samples
            .iter()
            .filter(|s| inside(s.sent))
            .filter_map(|s| s.arrived.map(|a| (a - s.sent) * 1000.0))
            .collect();
        lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut ok: Vec<f64> = samples
            .iter()
            .filter(|s| inside(s.sent))
            .map(|s| (s.accepted - s.sent) * 1000.0)
            .collect();
        ok.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let q = |v: &[f64], p| {
            if v.is_empty() {
                "—".to_owned()
            } else {
                format!("{:.1} ms", loadgen::quantile(v, p))
            }
        };
        let mib = |b: i64| format!("{:.1} MiB", b as f64 / 1048576.0);
        let [inbox, counters, messages] = &r.tables[..] else {
            unreachable!()
        };
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} | {} | {}, {} | {:.0} | {:.0} | {} | {} | {} |",
            r.phase,
            r.at,
            r.xmin_age,
            inbox.dead,
            counters.dead,
            messages.dead,
            mib(inbox.bytes),
            mib(counters.bytes),
            inbox.autovacuums,
            counters.autovacuums,
            accepted as f64 / window,
            delivered as f64 / window,
            q(&lat, 0.50),
            q(&lat, 0.99),
            q(&ok, 0.99),
        );
        from = r.at;
    }
    let live: Vec<String> = readings
        .last()
        .map(|r| {
            r.tables
                .iter()
                .zip(TABLES)
                .map(|(t, name)| format!("{name} {}", t.live))
                .collect()
        })
        .unwrap_or_default();
    let undelivered = samples.iter().filter(|s| s.arrived.is_none()).count();
    println!(
        "live tuples at the end: {}; {} of {} published undelivered; load {}",
        live.join(", "),
        undelivered,
        samples.len(),
        loadavg()
    );
}

/// A light probe of the disk the database and the gateways write to, run beside a latency
/// phase: a 4 KiB write and `fdatasync` every 10 ms, whose slow ones (a stall of the disk itself,
/// which every durable commit queued behind it waits out) are counted.
struct DiskProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<f64>>,
}

impl DiskProbe {
    fn start(dir: &Path) -> DiskProbe {
        use std::os::unix::fs::FileExt;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, path) = (stop.clone(), dir.join("disk-probe"));
        let thread = std::thread::spawn(move || {
            let f = std::fs::File::create(&path).unwrap();
            let mut ms = Vec::new();
            let mut i = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all_at(&[b'x'; 4096], (i % 64) * 4096).unwrap();
                let t = Instant::now();
                f.sync_data().unwrap();
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
                i += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = std::fs::remove_file(&path);
            ms
        });
        DiskProbe { stop, thread }
    }

    /// What the probe saw: its fsyncs' p50 and the count and worst of those over 10 ms.
    fn stop(self) -> String {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut ms = self.thread.join().unwrap();
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let slow = ms.iter().filter(|&&m| m > 10.0).count();
        format!(
            "disk probe: fdatasync p50 {:.2} ms, {slow} of {} over 10 ms, worst {:.1} ms",
            loadgen::quantile(&ms, 0.5),
            ms.len(),
            ms.last().copied().unwrap_or(0.0)
        )
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    let rt = gateway::runtime();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = pg::Cluster::start();
    rt.block_on(async {
        side_by_side(&cluster, tmp.path()).await;
        held_snapshot(&cluster, tmp.path()).await;
    });
    let _ = std::fs::remove_dir_all(tmp.path());
    // Done: exit without tearing the runtime down under the gateways' live connections. The
    // cluster stops as this process ends (its supervisor's stdin closes, see pg.rs), after the
    // gateways, which would otherwise log every retry against a server shutting down.
    std::process::exit(0);
}
