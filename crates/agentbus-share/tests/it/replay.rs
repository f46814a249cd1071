//! What `sync` does with unpushed work when it lost a race (G-AS-3): the replay keeps each
//! message in its own thread (§5), merges `operators.yaml` block by block (§8), refuses what it
//! cannot merge with a reason, and never loses a local commit.

use agentbus_share::frontmatter::MessageType;
use agentbus_share::registry::Registry;
use agentbus_share::views::{self, ThreadState};
use agentbus_share::{JoinRequest, SendRequest, Share, ShareError, WriteOptions};

use crate::{Fx, addr, changes, git, join_request, read};

fn offline() -> WriteOptions {
    WriteOptions {
        offline: true,
        sign: false,
    }
}

fn join(share: &Share, operator: &str, instance: &str, agents: &[&str], opts: &WriteOptions) {
    share
        .join(&join_request(operator, instance, agents), opts)
        .unwrap();
}

fn head(share: &Share) -> String {
    git(share.root(), &["rev-parse", "HEAD"]).trim().to_owned()
}

fn remote_tip(fx: &Fx) -> String {
    git(&fx.remote, &["rev-parse", "HEAD"]).trim().to_owned()
}

/// Commits `rel` with `content` by hand (as a person editing the checkout would).
fn commit_by_hand(share: &Share, rel: &str, content: &str, message: &str) {
    std::fs::write(share.root().join(rel), content).unwrap();
    git(share.root(), &["commit", "-qm", message, "--", rel]);
}

#[test]
fn g_as_3_a_replayed_message_takes_its_new_id_as_its_thread() {
    // The repro: two clones of operator echo send with one slug in one second, one of them
    // offline, then sync.
    let fx = Fx::new();
    let peer = fx.member("peer", "peer", "fleet", &["bot"]);
    let one = fx.member("one", "echo", "east", &["bot"]);
    let two = fx.member("two", "echo", "west", &["bot"]);
    let mut req = SendRequest::new(vec![addr("peer/bot")], MessageType::Question, "from one");
    req.slug = Some("same".into());
    let w1 = one.send(&req, &offline()).unwrap();
    req.body = "from two".into();
    let w2 = two.send(&req, &WriteOptions::default()).unwrap();
    assert_eq!(w1.id, w2.id, "both took one name in one second");
    let report = one.sync(&WriteOptions::default()).unwrap();
    let renamed = &report.renamed_ids[0];
    assert_eq!(renamed.from, w1.id);
    // The renamed message is its own thread: in its file, and in its audit line.
    peer.sync(&WriteOptions::default()).unwrap();
    let snap = peer.snapshot().unwrap();
    for m in &snap.messages {
        assert_eq!(m.doc.thread, m.doc.id, "{}", m.path);
    }
    let log = read(&peer, "log/echo-2026-11-30.jsonl");
    assert!(
        log.contains(&format!(
            "\"msg_id\":\"{0}\",\"from\":\"echo/east/bot\",\"to\":\"peer/bot\",\"thread\":\"{0}\"",
            renamed.to
        )),
        "{log}"
    );
    // An ack of one closes only its own thread.
    peer.reply(
        &w2.id,
        MessageType::Ack,
        None,
        "ok",
        &WriteOptions::default(),
    )
    .unwrap();
    let states: Vec<(String, ThreadState)> = views::threads(&peer.snapshot().unwrap())
        .into_iter()
        .map(|t| (t.thread, t.state))
        .collect();
    assert!(
        states.contains(&(w2.id.clone(), ThreadState::Done)),
        "{states:?}"
    );
    assert!(
        states.contains(&(renamed.to.clone(), ThreadState::Open)),
        "{states:?}"
    );
}

#[test]
fn g_as_3_a_replayed_reply_to_a_replayed_message_follows_it_into_its_new_thread() {
    let fx = Fx::new();
    let one = fx.member("one", "echo", "east", &["bot"]);
    let two = fx.member("two", "echo", "west", &["bot"]);
    let mut req = SendRequest::new(vec![addr("echo/bot")], MessageType::Question, "q one");
    req.slug = Some("same".into());
    let q = one.send(&req, &offline()).unwrap();
    // An answer to it, still unpushed, in its thread.
    let a = one
        .reply(&q.id, MessageType::Answer, None, "a one", &offline())
        .unwrap();
    req.body = "q two".into();
    two.send(&req, &WriteOptions::default()).unwrap();
    let report = one.sync(&WriteOptions::default()).unwrap();
    let new_q = report
        .renamed_ids
        .iter()
        .find(|r| r.from == q.id)
        .unwrap()
        .to
        .clone();
    let snap = one.snapshot().unwrap();
    let answer = snap
        .messages
        .iter()
        .find(|m| m.doc.body.trim() == "a one")
        .unwrap();
    assert_eq!(answer.doc.re.as_deref(), Some(new_q.as_str()));
    assert_eq!(answer.doc.thread, new_q);
    assert_ne!(a.id, new_q);
}

#[test]
fn as_8_2_a_join_replayed_after_a_lost_race_keeps_the_other_instance() {
    // One instance joins offline, another of the same operator online; the offline one syncs.
    let fx = Fx::new();
    let east = fx.share(&fx.clone("east"));
    let west = fx.share(&fx.clone("west"));
    join(&east, "echo", "east", &["bot"], &offline());
    join(
        &west,
        "echo",
        "west",
        &["bot", "helper"],
        &WriteOptions::default(),
    );
    let report = east.sync(&WriteOptions::default()).unwrap();
    assert!(report.replays > 0, "{report:?}");
    let check = fx.share(&fx.clone("check"));
    let reg = Registry::load(check.root()).unwrap();
    assert!(reg.declares("echo", Some("east"), "bot"));
    assert!(reg.declares("echo", Some("west"), "helper"));
    // Both instances still write (the erased one was refused, §2).
    for share in [&east, &west] {
        crate::send(share, &["echo/bot"], MessageType::Fyi, "still declared");
    }
    let report = agentbus_share::check::check(check.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
}

#[test]
fn as_8_2_two_instances_of_one_operator_joining_at_once_are_both_declared() {
    let fx = Fx::new();
    let dirs: Vec<_> = (0..3).map(|i| fx.clone(&format!("c{i}"))).collect();
    std::thread::scope(|s| {
        for (i, d) in dirs.iter().enumerate() {
            let share = fx.share(d);
            s.spawn(move || {
                join(
                    &share,
                    "echo",
                    ["east", "west", "north"][i],
                    &["bot"],
                    &WriteOptions::default(),
                )
            });
        }
    });
    let reg = Registry::load(fx.share(&fx.clone("last")).root()).unwrap();
    let instances: Vec<&String> = reg.operators["echo"].instances.keys().collect();
    assert_eq!(instances, ["east", "north", "west"]);
}

#[test]
fn a_header_edit_and_another_instances_join_both_survive_the_replay() {
    let fx = Fx::new();
    let east = fx.member("east", "acme", "east", &["bot"]);
    let west = fx.share(&fx.clone("west"));
    // East edits the registry's comment by hand and sends offline; west joins as another instance
    // of acme and sends under the same name in the same second, so east's sync has to replay.
    let text = read(&east, "operators.yaml")
        .replace("push promptly.", "push promptly. Ask ops@acme first.");
    commit_by_hand(&east, "operators.yaml", &text, "registry: who to ask");
    let mut req = SendRequest::new(vec![addr("acme/bot")], MessageType::Fyi, "from east");
    req.slug = Some("same".into());
    east.send(&req, &offline()).unwrap();
    join(&west, "acme", "west", &["bot"], &WriteOptions::default());
    req.body = "from west".into();
    west.send(&req, &WriteOptions::default()).unwrap();
    let report = east.sync(&WriteOptions::default()).unwrap();
    assert!(report.replays > 0, "{report:?}");
    let after = read(&fx.share(&fx.clone("check")), "operators.yaml");
    assert!(after.contains("Ask ops@acme first."), "{after}");
    let reg = Registry::parse(&after).unwrap();
    assert!(reg.declares("acme", Some("east"), "bot"), "{after}");
    assert!(reg.declares("acme", Some("west"), "bot"), "{after}");
}

#[test]
fn a_registry_edit_that_conflicts_stops_sync_with_its_reason_and_keeps_the_commit() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    a.sync(&WriteOptions::default()).unwrap();
    // Both edit the same lines differently: a the comment, b the comment too.
    let mine = read(&a, "operators.yaml").replace("push promptly.", "push promptly (a).");
    commit_by_hand(&a, "operators.yaml", &mine, "a's note");
    let theirs = read(&b, "operators.yaml").replace("push promptly.", "push promptly (b).");
    commit_by_hand(&b, "operators.yaml", &theirs, "b's note");
    b.sync(&WriteOptions::default()).unwrap();
    let remote_before = remote_tip(&fx);
    let kept = head(&a);
    let err = a.sync(&WriteOptions::default()).unwrap_err();
    assert!(matches!(err, ShareError::RegistryConflict(_)), "{err}");
    assert!(err.to_string().contains("comment lines"), "{err}");
    // Nothing was lost or pushed: the commit is still HEAD, the remote unchanged; and again.
    assert_eq!(head(&a), kept);
    assert_eq!(remote_tip(&fx), remote_before);
    assert!(read(&a, "operators.yaml").contains("(a)"));
    assert!(a.sync(&WriteOptions::default()).is_err());
    assert_eq!(head(&a), kept);
}

#[test]
fn a_conflicting_hand_edit_of_another_operators_block_is_never_dropped() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    a.sync(&WriteOptions::default()).unwrap();
    // a "fixes" globex's block by hand while globex extends it.
    let text = read(&a, "operators.yaml").replace("[architect]", "[architect, typo-fix]");
    commit_by_hand(&a, "operators.yaml", &text, "fix globex");
    join(&b, "globex", "bots", &["tester"], &WriteOptions::default());
    let kept = head(&a);
    let err = a.sync(&WriteOptions::default()).unwrap_err();
    assert!(
        matches!(err, ShareError::RegistryConflict(ref w) if w.contains("globex")),
        "{err}"
    );
    assert_eq!(head(&a), kept);
    assert!(read(&a, "operators.yaml").contains("typo-fix"));
}

#[test]
fn as_1_2_sync_never_pushes_a_hand_edit_of_a_pushed_message() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let w = crate::send(&a, &["acme/reviewer"], MessageType::Question, "Q");
    let text = read(&a, &w.paths[0]).replace("status: open", "status: done");
    commit_by_hand(&a, &w.paths[0], &text, "close it by editing");
    let remote_before = remote_tip(&fx);
    let err = a.sync(&WriteOptions::default()).unwrap_err();
    assert!(
        matches!(err, ShareError::LocalEdit(ref p) if *p == w.paths[0]),
        "{err}"
    );
    assert_eq!(remote_tip(&fx), remote_before);
    // Writes refuse too, rather than carry the edit along.
    let req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "more");
    assert!(matches!(
        a.send(&req, &WriteOptions::default()),
        Err(ShareError::LocalEdit(_))
    ));
    assert_eq!(changes(&fx.clone("after"), "MDRT"), "");
}

#[test]
fn a_dirty_registry_is_named_and_never_committed_by_a_join() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let half = format!("{}# half-made note\n", read(&a, "operators.yaml"));
    std::fs::write(a.root().join("operators.yaml"), &half).unwrap();
    let kept = head(&a);
    let err = a
        .join(
            &JoinRequest {
                operator: "acme".into(),
                instance: "fleet".into(),
                agents: vec!["writer".into()],
                emails: vec![],
                sign: false,
            },
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(err, ShareError::Dirty(ref f) if f == &["operators.yaml"]),
        "{err}"
    );
    assert_eq!(head(&a), kept);
    assert_eq!(read(&a, "operators.yaml"), half);
}

#[test]
fn a_dirty_file_that_stops_a_rebase_is_named_not_a_raw_git_error() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    // a has an unpushed commit (offline) and an uncommitted edit; b pushes meanwhile.
    crate::send(&b, &["acme/reviewer"], MessageType::Fyi, "b first");
    let w = a
        .send(
            &SendRequest::new(vec![addr("globex/architect")], MessageType::Fyi, "later"),
            &offline(),
        )
        .unwrap();
    std::fs::write(a.root().join("README.md"), "my notes\n").unwrap();
    let err = a.sync(&WriteOptions::default()).unwrap_err();
    assert!(
        matches!(err, ShareError::Dirty(ref f) if f == &["README.md"]),
        "{err}"
    );
    assert_eq!(read(&a, "README.md"), "my notes\n");
    assert!(a.root().join(&w.paths[0]).exists());
}
