//! Writers racing through one remote that refuses non-fast-forward pushes (§1, AS-1-4, G-AS-3,
//! G-AS-4): every message arrives exactly once, in its own thread, nothing is edited, deleted or
//! force-pushed, and no instance is lost from `operators.yaml`. All writes happen in one clock
//! second with one slug, so file names collide as often as they can.
//!
//! The test command runs a small race; `AGENTBUS_SHARE_RACE=full` (what `scripts/share-race`
//! sets) runs the large one whose figures `docs/benchmarks.md` keeps. Each race prints its figures
//! (writers, messages, push attempts, replays, time); `--nocapture` shows them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use agentbus_share::check::{self, Severity};
use agentbus_share::frontmatter::MessageType;
use agentbus_share::registry::Registry;
use agentbus_share::views::{self, ThreadState};
use agentbus_share::{SendRequest, Share, SyncReport, WriteOptions, Written};

use crate::{Fx, addr, changes, git, join_request};

/// Whether the large race was asked for.
fn full() -> bool {
    std::env::var("AGENTBUS_SHARE_RACE").is_ok_and(|v| v == "full")
}

/// What one race did, for `docs/benchmarks.md`.
#[derive(Debug, Default)]
struct Figures {
    writers: usize,
    messages: usize,
    attempts: u64,
    replays: u64,
    elapsed: Duration,
}

impl Figures {
    fn add(&mut self, w: &Written) {
        self.messages += 1;
        self.sync(&w.sync);
    }

    fn sync(&mut self, r: &SyncReport) {
        self.attempts += u64::from(r.attempts);
        self.replays += u64::from(r.replays);
    }

    // The figures are this test's report (`scripts/share-race` shows them): printing is its job.
    #[allow(clippy::print_stdout)]
    fn print(&self, name: &str) {
        println!(
            "race {name}: {} writers, {} messages, {} push attempts ({:.2} per message), {} replays, {:.1} s",
            self.writers,
            self.messages,
            self.attempts,
            self.attempts as f64 / self.messages.max(1) as f64,
            self.replays,
            self.elapsed.as_secs_f64()
        );
    }
}

fn offline() -> WriteOptions {
    WriteOptions {
        offline: true,
        sign: false,
    }
}

/// Every writer sends `each` messages to `to(i)` at once, slug `msg`; writer `i` sends every
/// `offline_every(i)`-th message offline (and syncs at the end). Returns the figures.
fn race(
    shares: &[Share],
    each: usize,
    to: impl Fn(usize) -> String + Sync,
    offline_every: impl Fn(usize) -> Option<usize> + Sync,
) -> Figures {
    let start = Instant::now();
    let per_writer: Vec<(Vec<Written>, SyncReport)> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, share)| {
                let (to, offline_every) = (&to, &offline_every);
                s.spawn(move || {
                    let mut out = Vec::new();
                    for n in 0..each {
                        let mut req = SendRequest::new(
                            vec![addr(&to(i))],
                            MessageType::Fyi,
                            format!("writer {i} message {n}"),
                        );
                        req.slug = Some("msg".into());
                        let opts = match offline_every(i) {
                            Some(k) if n % k == 0 => offline(),
                            _ => WriteOptions::default(),
                        };
                        out.push(share.send(&req, &opts).unwrap());
                    }
                    let last = share.sync(&WriteOptions::default()).unwrap();
                    (out, last)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut figures = Figures {
        writers: shares.len(),
        elapsed: start.elapsed(),
        ..Figures::default()
    };
    for (written, last) in &per_writer {
        written.iter().for_each(|w| figures.add(w));
        figures.sync(last);
    }
    figures
}

/// What every race must leave: each message once, distinct ids, each new message in its own
/// thread (also in the audit log), nothing edited or deleted, each old tip of the remote an
/// ancestor of the next, and `check` clean with no replayed-thread warning.
fn assert_race_invariants(fx: &Fx, expected: usize) -> Share {
    let check = fx.share(&fx.clone("check"));
    let snap = check.snapshot().unwrap();
    assert!(snap.malformed.is_empty(), "{:?}", snap.malformed);
    let bodies: BTreeSet<String> = snap
        .messages
        .iter()
        .map(|m| m.doc.body.trim().to_owned())
        .collect();
    let ids: BTreeSet<&str> = snap.messages.iter().map(|m| m.doc.id.as_str()).collect();
    assert_eq!(snap.messages.len(), expected);
    assert_eq!(bodies.len(), expected, "every message arrived exactly once");
    assert_eq!(
        ids.len(),
        expected,
        "distinct messages, distinct ids (G-AS-2)"
    );
    // §5: a new message is its own thread; a replay that renamed it renamed its thread with it.
    let strays: Vec<(&str, &str)> = snap
        .messages
        .iter()
        .filter(|m| m.doc.thread != m.doc.id)
        .map(|m| (m.doc.id.as_str(), m.doc.thread.as_str()))
        .collect();
    assert!(
        strays.is_empty(),
        "messages outside their own thread: {strays:?}"
    );
    assert_eq!(views::threads(&snap).len(), expected);
    // Every audit line survived the concurrent appends (merge=union, G-AS-4), its thread its id.
    let mut lines = 0;
    for f in std::fs::read_dir(check.root().join("log")).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        for l in text.lines() {
            let l: agentbus_share::audit::LogLine = serde_json::from_str(l).unwrap();
            assert_eq!(l.thread, l.msg_id, "{l:?}");
            assert!(ids.contains(l.msg_id.as_deref().unwrap()), "{l:?}");
            lines += 1;
        }
    }
    assert_eq!(lines, expected);
    assert_eq!(changes(check.root(), "MDRT"), "");
    let branch = git(check.root(), &["symbolic-ref", "--short", "HEAD"]);
    let tips = git(
        &fx.remote,
        &[
            "reflog",
            "show",
            "--format=%H",
            &format!("refs/heads/{}", branch.trim()),
        ],
    );
    let tips: Vec<&str> = tips.lines().collect();
    assert!(tips.len() > expected / 2);
    for pair in tips.windows(2) {
        git(
            &fx.remote,
            &["merge-base", "--is-ancestor", pair[1], pair[0]],
        );
    }
    let report = check::check(check.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.rule == "G-AS-3" || f.severity == Severity::Violation),
        "{:#?}",
        report.findings
    );
    check
}

#[test]
fn as_1_4_writers_of_several_operators_race_through_one_remote_without_a_force_push() {
    let (writers, each) = if full() { (8, 50) } else { (4, 8) };
    let fx = Fx::new();
    // The remote keeps a reflog of its branch, so we can prove every old tip stays an ancestor.
    git(&fx.remote, &["config", "core.logAllRefUpdates", "always"]);
    let ops = ["alpha", "beta", "gamma", "delta"];
    let n_ops = (writers / 2).min(ops.len());
    // Two instances per operator, one agent name: their file names collide within a second.
    let shares: Vec<Share> = (0..writers)
        .map(|i| {
            let op = ops[i % n_ops];
            let instance = if i < n_ops { "east" } else { "west" };
            fx.member(&format!("w{i}"), op, instance, &["bot"])
        })
        .collect();
    let figures = race(
        &shares,
        each,
        |i| format!("{}/bot", ops[(i + 1) % n_ops]),
        |_| None,
    );
    figures.print("several operators");
    assert_race_invariants(&fx, writers * each);
}

#[test]
fn g_as_3_two_instances_of_one_operator_race_their_joins_and_sends_and_keep_every_instance_and_thread()
 {
    let each = if full() { 100 } else { 12 };
    let fx = Fx::new();
    git(&fx.remote, &["config", "core.logAllRefUpdates", "always"]);
    let peer = fx.member("peer", "peer", "fleet", &["bot"]);
    // Three instances of `echo` join at once: one offline (it syncs later), two racing online.
    let dirs: Vec<_> = ["east", "west", "north"]
        .iter()
        .map(|i| fx.clone(i))
        .collect();
    let shares: Vec<Share> = dirs.iter().map(|d| fx.share(d)).collect();
    let join = |share: &Share, instance: &str, opts: &WriteOptions| {
        share
            .join(&join_request("echo", instance, &["bot"]), opts)
            .unwrap();
    };
    join(&shares[0], "east", &offline());
    std::thread::scope(|s| {
        s.spawn(|| join(&shares[1], "west", &WriteOptions::default()));
        s.spawn(|| join(&shares[2], "north", &WriteOptions::default()));
    });
    shares[0].sync(&WriteOptions::default()).unwrap();
    peer.sync(&WriteOptions::default()).unwrap();
    let registry = Registry::load(peer.root()).unwrap();
    let instances: Vec<&String> = registry.operators["echo"].instances.keys().collect();
    assert_eq!(instances, ["east", "north", "west"], "no instance lost");

    // Two of them send in the same second with one slug, the first partly offline.
    let figures = race(
        &shares[..2],
        each,
        |_| "peer/bot".to_owned(),
        |i| (i == 0).then_some(3),
    );
    figures.print("two instances of one operator");
    assert!(figures.replays > 0, "the race had collisions to replay");
    let check = assert_race_invariants(&fx, 2 * each);

    // Every instance can still write, and an ack closes exactly the thread it names.
    for share in &shares {
        crate::send(share, &["peer/bot"], MessageType::Fyi, "still here");
    }
    peer.sync(&WriteOptions::default()).unwrap();
    let snap = peer.snapshot().unwrap();
    let target = snap.messages[0].doc.id.clone();
    peer.reply(
        &target,
        MessageType::Ack,
        None,
        "done",
        &WriteOptions::default(),
    )
    .unwrap();
    let states: BTreeMap<String, ThreadState> = views::threads(&peer.snapshot().unwrap())
        .into_iter()
        .map(|t| (t.thread, t.state))
        .collect();
    let done: Vec<&String> = states
        .iter()
        .filter(|(_, s)| **s == ThreadState::Done)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(done.len(), 1, "{done:?}");
    drop(check);
}
