//! Many writers racing through one remote (§1, AS-1-4, G-AS-3, G-AS-4): 8 clones, 50 messages
//! each, all at the same clock second so names collide as often as they can.

use std::collections::BTreeSet;

use agentbus_share::frontmatter::MessageType;
use agentbus_share::{SendRequest, WriteOptions};

use crate::{Fx, addr, changes, git};

const WRITERS: usize = 8;
const EACH: usize = 50;

#[test]
fn as_1_4_eight_writers_fifty_messages_each_all_arrive_without_a_force_push() {
    let fx = Fx::new();
    // The remote keeps a reflog of its branch, so we can prove every old tip stays an ancestor.
    git(&fx.remote, &["config", "core.logAllRefUpdates", "always"]);
    let ops = ["alpha", "beta", "gamma", "delta"];
    // Two instances per operator, one agent name: their file names collide within a second.
    let shares: Vec<_> = (0..WRITERS)
        .map(|i| {
            let op = ops[i % 4];
            let instance = if i < 4 { "east" } else { "west" };
            fx.member(&format!("w{i}"), op, instance, &["bot"])
        })
        .collect();
    std::thread::scope(|s| {
        for (i, share) in shares.iter().enumerate() {
            s.spawn(move || {
                let to = addr(&format!("{}/bot", ops[(i + 1) % 4]));
                for n in 0..EACH {
                    let mut req = SendRequest::new(
                        vec![to.clone()],
                        MessageType::Fyi,
                        format!("writer {i} message {n}"),
                    );
                    req.slug = Some("msg".into());
                    share.send(&req, &WriteOptions::default()).unwrap();
                }
            });
        }
    });
    let check = fx.share(&fx.clone("check"));
    let snap = check.snapshot().unwrap();
    assert!(snap.malformed.is_empty(), "{:?}", snap.malformed);
    let bodies: BTreeSet<String> = snap
        .messages
        .iter()
        .map(|m| m.doc.body.trim().to_owned())
        .collect();
    let ids: BTreeSet<&str> = snap.messages.iter().map(|m| m.doc.id.as_str()).collect();
    assert_eq!(snap.messages.len(), WRITERS * EACH);
    assert_eq!(bodies.len(), WRITERS * EACH);
    assert_eq!(
        ids.len(),
        WRITERS * EACH,
        "distinct messages, distinct ids (G-AS-2)"
    );
    // Every audit line of every writer survived the concurrent appends (merge=union, G-AS-4).
    let lines: usize = ops
        .iter()
        .map(|op| {
            std::fs::read_to_string(check.root().join(format!("log/{op}-2026-11-30.jsonl")))
                .unwrap()
                .lines()
                .count()
        })
        .sum();
    assert_eq!(lines, WRITERS * EACH);
    // No file was ever modified or deleted, and each old tip of the remote is an ancestor of the next.
    assert_eq!(changes(check.root(), "MDRT"), "");
    let tips = git(
        &fx.remote,
        &["reflog", "show", "--format=%H", "refs/heads/main"],
    );
    let tips: Vec<&str> = tips.lines().collect();
    assert!(tips.len() > WRITERS * EACH / 2);
    for pair in tips.windows(2) {
        git(
            &fx.remote,
            &["merge-base", "--is-ancestor", pair[1], pair[0]],
        );
    }
    let report = agentbus_share::check::check(check.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
}
