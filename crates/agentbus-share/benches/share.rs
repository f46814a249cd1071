//! `threads` and `check` over a share of 10,000 messages (the target: each under 1 s).
//!
//! The share is built once with `git fast-import`, one commit per message as real writers make
//! them, every file written by the crate's own writer so hashes and names are valid: 20 operators,
//! 2,500 threads of a question, an answer, an fyi and an ack.
//!
//! Run: `cargo bench -p agentbus-share --bench share`; figures go in `docs/benchmarks.md`. With
//! `BENCH_BREAKDOWN=1` it prints the cost of the parts instead (the history walk, the file scan).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use agentbus_protocol::timestamp::Timestamp;
use agentbus_share::frontmatter::{self, MessageOut, MessageType, Party};
use agentbus_share::{check, naming, share, views};
use criterion::{Criterion, criterion_group, criterion_main};

const MESSAGES: usize = 10_000;
const OPERATORS: usize = 20;

fn git(dir: &Path, args: &[&str]) {
    let st = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?}");
}

fn blob(out: &mut Vec<u8>, path: &str, content: &str) {
    let _ = writeln!(out, "M 100644 inline {path}\ndata {}", content.len());
    out.extend_from_slice(content.as_bytes());
    out.push(b'\n');
}

fn build(dir: &Path) {
    git(dir, &["init", "--quiet", "--initial-branch=main"]);
    let start: Timestamp = "2026-11-01T00:00:00Z".parse().unwrap();
    let mut registry = String::from(agentbus_share::registry::HEADER);
    for o in 0..OPERATORS {
        let _ = write!(
            registry,
            "op{o:02}:\n  instances:\n    fleet:\n      agents: [agent]\n"
        );
    }
    let mut stream = Vec::new();
    let commit = |stream: &mut Vec<u8>, n: usize, t: Timestamp, files: &[(String, String)]| {
        let msg = format!("message {n}");
        let _ = write!(
            stream,
            "commit refs/heads/main\nmark :{}\ncommitter Bench <bench@example.org> {} +0000\ndata {}\n{msg}\n",
            n + 1,
            t.millis() / 1000,
            msg.len()
        );
        if n > 0 {
            let _ = writeln!(stream, "from :{n}");
        }
        for (p, c) in files {
            blob(stream, p, c);
        }
        stream.push(b'\n');
    };
    commit(
        &mut stream,
        0,
        start,
        &[
            ("operators.yaml".into(), registry),
            (
                ".gitattributes".into(),
                agentbus_share::init::GITATTRIBUTES.into(),
            ),
        ],
    );
    let kinds = [
        MessageType::Question,
        MessageType::Answer,
        MessageType::Fyi,
        MessageType::Ack,
    ];
    let mut thread_first = String::new();
    for i in 0..MESSAGES {
        let t = start.plus_secs(i as i64 * 7);
        let (a, b) = ((i / 4) % OPERATORS, (i / 4 + 1) % OPERATORS);
        // Questions and fyis go a → b; answers and acks come back.
        let (from_op, to_op) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let from = Party {
            operator: format!("op{from_op:02}"),
            instance: Some("fleet".into()),
            agent: "agent".into(),
        };
        let to = Party {
            operator: format!("op{to_op:02}"),
            instance: None,
            agent: "agent".into(),
        };
        let kind = &kinds[i % 4];
        let id = naming::message_stem(t, &from.operator, &from.agent, &format!("m{i}"));
        if i % 4 == 0 {
            thread_first = id.clone();
        }
        let body =
            format!("# Message {i}\n\nSome text of message {i}, long enough to look like one.\n");
        let doc = frontmatter::write_message(&MessageOut {
            id: &id,
            from: &from,
            to: &to,
            thread: &thread_first,
            kind,
            re: kind.needs_re().then_some(thread_first.as_str()),
            created: &naming::rfc3339_seconds(t),
            status: "open",
            recipients: &[],
            body: &body,
            footer: None,
        });
        let path = format!("{}/{id}.md", naming::message_dir(&to.operator, &to.agent));
        commit(&mut stream, i + 1, t, &[(path, doc)]);
    }
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success());
    git(dir, &["reset", "--quiet", "--hard", "main"]);
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    build(tmp.path());
    let root = tmp.path();
    // Sanity: the share is the size we claim and conforms.
    let report = check::check(root).unwrap();
    assert_eq!(report.messages, MESSAGES);
    assert!(
        report.is_clean(),
        "{:#?}",
        &report.findings[..report.findings.len().min(5)]
    );
    assert_eq!(
        views::threads(&share::snapshot(root).unwrap()).len(),
        MESSAGES / 4
    );

    if std::env::var_os("BENCH_BREAKDOWN").is_some() {
        for args in [
            &["rev-list", "--count", "HEAD"][..],
            &["rev-list", "--max-parents=0", "HEAD"],
            &[
                "log",
                "--format=%x00%H %P",
                "--name-status",
                "--no-renames",
                "--diff-merges=first-parent",
                "--diff-filter=MDT",
                "HEAD",
            ],
        ] {
            let t = std::time::Instant::now();
            git(root, args);
            eprintln!("git {args:?}: {:?}", t.elapsed());
        }
        let t = std::time::Instant::now();
        let snap = share::snapshot(root).unwrap();
        eprintln!("snapshot: {:?}", t.elapsed());
        let t = std::time::Instant::now();
        let _ = agentbus_share::registry::Registry::load(root).unwrap();
        eprintln!("registry: {:?} {}", t.elapsed(), snap.messages.len());
        std::process::exit(0);
    }
    let mut g = c.benchmark_group("share_10000_messages");
    g.sample_size(10);
    g.bench_function("threads", |b| {
        b.iter(|| views::threads(&share::snapshot(root).unwrap()).len())
    });
    g.bench_function("check", |b| {
        b.iter(|| check::check(root).unwrap().findings.len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
