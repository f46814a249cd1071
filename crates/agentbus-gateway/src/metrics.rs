//! Prometheus metrics at `/metrics`: publishes by result code, deliveries, redeliveries, dead
//! letters, expiries, inbox depth, and latency histograms. Hand-rolled text exposition: a few
//! atomics and one lock-guarded map, so the hot path costs almost nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        let i = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, name: &str, out: &mut String) {
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[derive(Default)]
struct Registry {
    publishes: Mutex<BTreeMap<String, u64>>,
    deliveries: AtomicU64,
    redeliveries: AtomicU64,
    dead_letters: AtomicU64,
    expired: AtomicU64,
    depth: Mutex<BTreeMap<String, u64>>,
    refused_connections: AtomicU64,
    timed_out_connections: AtomicU64,
    slow_consumers: AtomicU64,
    open_connections: AtomicU64,
    publish_latency: Histogram,
    delivery_latency: Histogram,
    /// The same counts per workspace (the sender's for publishes, the recipient's for deliveries
    /// and dead letters), for views scoped to a tenant or workspace (the console's overview).
    workspaces: Mutex<std::collections::HashMap<String, Counters>>,
}

/// Counts the console's overview draws from, as of one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Publishes by result (`accepted`, `replay` or an `AB-` code).
    pub publishes: BTreeMap<String, u64>,
    /// Deliveries handed out (first attempts and redeliveries).
    pub deliveries: u64,
    /// Redeliveries among them.
    pub redeliveries: u64,
    /// Entries dead-lettered.
    pub dead_letters: u64,
    /// Entries expired before an ack.
    pub expired: u64,
}

impl Counters {
    fn add(&mut self, other: &Counters) {
        for (k, n) in &other.publishes {
            *self.publishes.entry(k.clone()).or_default() += n;
        }
        self.deliveries += other.deliveries;
        self.redeliveries += other.redeliveries;
        self.dead_letters += other.dead_letters;
        self.expired += other.expired;
    }
}

fn in_workspace(workspace: &str, change: impl FnOnce(&mut Counters)) {
    if let Ok(mut m) = registry().workspaces.lock() {
        // The key is allocated only the first time a workspace is seen.
        match m.get_mut(workspace) {
            Some(c) => change(c),
            None => change(m.entry(workspace.to_owned()).or_default()),
        }
    }
}

/// Counts a publish by an agent of `workspace` answered with `result`.
pub fn count_publish_in(workspace: &str, result: &str) {
    in_workspace(workspace, |c| match c.publishes.get_mut(result) {
        Some(n) => *n += 1,
        None => {
            c.publishes.insert(result.to_owned(), 1);
        }
    });
}

/// Counts a delivery to an agent of `workspace`; `attempt > 1` is a redelivery.
pub fn count_delivery_in(workspace: &str, attempt: u32) {
    in_workspace(workspace, |c| {
        c.deliveries += 1;
        c.redeliveries += u64::from(attempt > 1);
    });
}

/// Counts one entry of an inbox of `workspace` dead-lettered (`dead`) or expired.
pub fn count_reaped_in(workspace: &str, dead: bool) {
    in_workspace(workspace, |c| {
        if dead {
            c.dead_letters += 1;
        } else {
            c.expired += 1;
        }
    });
}

/// The counters of this process summed over the workspaces `include` accepts, or, with `None`,
/// the gateway's own totals (which also count publishes refused before any workspace was known).
pub fn counters(include: Option<&dyn Fn(&str) -> bool>) -> Counters {
    let r = registry();
    let Some(include) = include else {
        return Counters {
            publishes: r.publishes.lock().map(|m| m.clone()).unwrap_or_default(),
            deliveries: r.deliveries.load(Ordering::Relaxed),
            redeliveries: r.redeliveries.load(Ordering::Relaxed),
            dead_letters: r.dead_letters.load(Ordering::Relaxed),
            expired: r.expired.load(Ordering::Relaxed),
        };
    };
    let mut out = Counters::default();
    if let Ok(m) = r.workspaces.lock() {
        for (ws, c) in m.iter() {
            if include(ws) {
                out.add(c);
            }
        }
    }
    out
}

/// Calls `each` with the counters of every workspace this process has counted for, in one pass
/// under one lock and without copying them: a sampler that keeps every workspace's history reads
/// them all at once, each interval.
pub fn each_workspace(mut each: impl FnMut(&str, &Counters)) {
    if let Ok(m) = registry().workspaces.lock() {
        for (ws, c) in m.iter() {
            each(ws, c);
        }
    }
}

/// The same counters, gauges and histograms over OTLP (docs/observability.md), once telemetry is
/// on: the counters and gauges are read from the registry at each export, the histograms are
/// recorded beside it.
struct Otlp {
    publish_latency: agentbus_telemetry::instruments::Histogram<f64>,
    delivery_latency: agentbus_telemetry::instruments::Histogram<f64>,
    /// Kept so their callbacks stay registered.
    _observed: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

/// The instruments of every gateway of this process that turned telemetry on (one in a
/// deployment; several in a test binary, each with its own collector), each recorded into.
static OTLP: Mutex<Vec<Otlp>> = Mutex::new(Vec::new());
/// Whether [`OTLP`] holds any: the hot path takes no lock while telemetry is off.
static OTLP_ON: AtomicBool = AtomicBool::new(false);

/// Runs `f` on each gateway's instruments, when telemetry is on anywhere in the process.
fn each_otlp(f: impl Fn(&Otlp)) {
    if OTLP_ON.load(Ordering::Relaxed)
        && let Ok(list) = OTLP.lock()
    {
        list.iter().for_each(f);
    }
}

/// Exports the registry's metrics through `meter`, under the names and units `/metrics` uses;
/// every gateway of a process that turns telemetry on does, into its own meter.
pub fn export_to(meter: &agentbus_telemetry::Meter) {
    use agentbus_telemetry::KeyValue;
    use agentbus_telemetry::instruments::AsyncInstrument;
    let counter = |name: &'static str,
                   read: fn(&Registry) -> u64|
     -> Box<dyn std::any::Any + Send + Sync> {
        Box::new(
            meter
                .u64_observable_counter(name)
                .with_callback(move |o: &dyn AsyncInstrument<u64>| o.observe(read(registry()), &[]))
                .build(),
        )
    };
    let mut observed = vec![
        counter("agentbus_deliveries_total", |r| {
            r.deliveries.load(Ordering::Relaxed)
        }),
        counter("agentbus_redeliveries_total", |r| {
            r.redeliveries.load(Ordering::Relaxed)
        }),
        counter("agentbus_dead_letters_total", |r| {
            r.dead_letters.load(Ordering::Relaxed)
        }),
        counter("agentbus_expired_total", |r| {
            r.expired.load(Ordering::Relaxed)
        }),
        counter("agentbus_refused_connections_total", |r| {
            r.refused_connections.load(Ordering::Relaxed)
        }),
        counter("agentbus_timed_out_connections_total", |r| {
            r.timed_out_connections.load(Ordering::Relaxed)
        }),
        counter("agentbus_slow_consumers_total", |r| {
            r.slow_consumers.load(Ordering::Relaxed)
        }),
    ];
    observed.push(Box::new(
        meter
            .u64_observable_counter("agentbus_publishes_total")
            .with_callback(|o: &dyn AsyncInstrument<u64>| {
                if let Ok(m) = registry().publishes.lock() {
                    for (result, n) in m.iter() {
                        o.observe(*n, &[KeyValue::new("result", result.clone())]);
                    }
                }
            })
            .build(),
    ));
    observed.push(Box::new(
        meter
            .u64_observable_gauge("agentbus_open_connections")
            .with_callback(|o: &dyn AsyncInstrument<u64>| {
                o.observe(registry().open_connections.load(Ordering::Relaxed), &[]);
            })
            .build(),
    ));
    observed.push(Box::new(
        meter
            .u64_observable_gauge("agentbus_inbox_depth")
            .with_callback(|o: &dyn AsyncInstrument<u64>| {
                if let Ok(m) = registry().depth.lock() {
                    for (agent, n) in m.iter() {
                        o.observe(*n, &[KeyValue::new("agent", agent.clone())]);
                    }
                }
            })
            .build(),
    ));
    let histogram = |name: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_boundaries(BUCKETS.to_vec())
            .build()
    };
    if let Ok(mut list) = OTLP.lock() {
        list.push(Otlp {
            publish_latency: histogram("agentbus_publish_seconds"),
            delivery_latency: histogram("agentbus_publish_to_delivery_seconds"),
            _observed: observed,
        });
        OTLP_ON.store(true, Ordering::Relaxed);
    }
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(Registry::default)
}

/// Counts a publish answered with `result` (`accepted`, `replay` or an `AB-` code).
pub fn count_publish(result: &str, seconds: f64) {
    if let Ok(mut m) = registry().publishes.lock() {
        // The key is allocated only the first time a result is seen.
        match m.get_mut(result) {
            Some(n) => *n += 1,
            None => {
                m.insert(result.to_owned(), 1);
            }
        }
    }
    registry().publish_latency.observe(seconds);
    each_otlp(|o| o.publish_latency.record(seconds, &[]));
}

/// Counts a delivery; `attempt > 1` is a redelivery. `age_s` is the time since receipt.
pub fn count_delivery(attempt: u32, age_s: f64) {
    registry().deliveries.fetch_add(1, Ordering::Relaxed);
    if attempt > 1 {
        registry().redeliveries.fetch_add(1, Ordering::Relaxed);
    } else {
        registry().delivery_latency.observe(age_s);
        each_otlp(|o| o.delivery_latency.record(age_s, &[]));
    }
}

/// Counts dead letters and expiries of a reaper pass.
pub fn count_reaped(dead: usize, expired: usize) {
    registry()
        .dead_letters
        .fetch_add(dead as u64, Ordering::Relaxed);
    registry()
        .expired
        .fetch_add(expired as u64, Ordering::Relaxed);
}

/// Counts a connection refused at the connection cap (AB-9002).
pub fn count_refused_connection() {
    registry()
        .refused_connections
        .fetch_add(1, Ordering::Relaxed);
}

/// Counts a connection closed by a header, idle or stalled-response timeout.
pub fn count_timed_out_connection() {
    registry()
        .timed_out_connections
        .fetch_add(1, Ordering::Relaxed);
}

/// Counts a WebSocket closed as a slow consumer (AB-5003).
pub fn count_slow_consumer() {
    registry().slow_consumers.fetch_add(1, Ordering::Relaxed);
}

/// Counts a connection opened (WebSockets included).
pub fn connection_opened() {
    registry().open_connections.fetch_add(1, Ordering::Relaxed);
}

/// Counts a connection closed.
pub fn connection_closed() {
    registry().open_connections.fetch_sub(1, Ordering::Relaxed);
}

/// Records an inbox's unacknowledged depth.
pub fn set_depth(agent: &str, depth: u64) {
    if let Ok(mut m) = registry().depth.lock() {
        match m.get_mut(agent) {
            Some(d) => *d = depth,
            None => {
                m.insert(agent.to_owned(), depth);
            }
        }
    }
}

/// The Prometheus text exposition.
pub fn render() -> String {
    let r = registry();
    let mut out = String::new();
    out.push_str("# TYPE agentbus_publishes_total counter\n");
    if let Ok(m) = r.publishes.lock() {
        for (result, n) in m.iter() {
            let _ = writeln!(out, "agentbus_publishes_total{{result=\"{result}\"}} {n}");
        }
    }
    for (name, v) in [
        ("agentbus_deliveries_total", &r.deliveries),
        ("agentbus_redeliveries_total", &r.redeliveries),
        ("agentbus_dead_letters_total", &r.dead_letters),
        ("agentbus_expired_total", &r.expired),
        ("agentbus_refused_connections_total", &r.refused_connections),
        (
            "agentbus_timed_out_connections_total",
            &r.timed_out_connections,
        ),
        ("agentbus_slow_consumers_total", &r.slow_consumers),
    ] {
        let _ = writeln!(
            out,
            "# TYPE {name} counter\n{name} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# TYPE agentbus_open_connections gauge\nagentbus_open_connections {}",
        r.open_connections.load(Ordering::Relaxed)
    );
    out.push_str("# TYPE agentbus_inbox_depth gauge\n");
    if let Ok(m) = r.depth.lock() {
        for (agent, n) in m.iter() {
            let _ = writeln!(out, "agentbus_inbox_depth{{agent=\"{agent}\"}} {n}");
        }
    }
    r.publish_latency
        .render("agentbus_publish_seconds", &mut out);
    r.delivery_latency
        .render("agentbus_publish_to_delivery_seconds", &mut out);
    out
}
