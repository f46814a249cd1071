//! `check` on repositories built to contain each violation the issue lists, one test each, and on a
//! clean share.

use std::process::Command;

use agentbus_share::check::{self, Report, Severity};
use agentbus_share::frontmatter::MessageType;
use agentbus_share::{Share, WriteOptions};

use crate::{Fx, git, git_env, send};

const HEADER: &str =
    "protocol: 0.1.0\nfrom: { operator: acme, instance: fleet, agent: reviewer }\n";

fn base() -> (Fx, Share) {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    send(&a, &["acme/reviewer"], MessageType::Question, "Q?");
    (fx, a)
}

/// Commits `content` at `rel` with plain git (as a careless producer would) and pushes it.
fn commit_file(share: &Share, rel: &str, content: &str) {
    let path = share.root().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    git(share.root(), &["add", "-A"]);
    git(share.root(), &["commit", "-qm", &format!("add {rel}")]);
    git(share.root(), &["push", "-q", "origin", "HEAD"]);
    git(share.root(), &["fetch", "-q"]);
}

#[track_caller]
fn assert_flags(report: &Report, section: &str, rule: &str, place: &str) {
    assert!(!report.is_clean());
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == Severity::Violation
                && f.section == section
                && f.rule == rule
                && (f.path.as_deref().unwrap_or_default().contains(place)
                    || f.commit.is_some() && place.is_empty())),
        "no {section} {rule} at {place:?} in {:#?}",
        report.findings
    );
}

fn msg(id: &str, to: &str, kind: &str, extra: &str, body: &str) -> String {
    let (op, agent) = to.split_once('/').unwrap();
    format!(
        "---\n{HEADER}id: {id}\nto: {{ operator: {op}, agent: {agent} }}\ntype: {kind}\n{extra}---\n{body}\n"
    )
}

#[test]
fn as_0_1_a_share_written_by_agentbus_is_clean() {
    let (fx, a) = base();
    let b = fx.member("b", "globex", "bots", &["architect"]);
    send(
        &b,
        &["acme/reviewer", "globex/any"],
        MessageType::Handoff,
        "H",
    );
    a.sync(&WriteOptions::default()).unwrap();
    let report = check::check(a.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
    assert!(report.reflog_seen);
    // The bare remote itself can be checked too.
    let report = check::check(&fx.remote).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
    assert_eq!(report.messages, 3);
}

#[test]
fn as_1_2_a_pushed_message_edited_later_is_a_violation() {
    let (_fx, a) = base();
    let rel = a.snapshot().unwrap().messages[0].path.clone();
    let text = std::fs::read_to_string(a.root().join(&rel))
        .unwrap()
        .replace("status: open", "status: done");
    commit_file(&a, &rel, &text);
    assert_flags(&check::check(a.root()).unwrap(), "§1", "AS-1-2", &rel);
}

#[test]
fn as_1_3_a_pushed_message_deleted_later_is_a_violation() {
    let (_fx, a) = base();
    let rel = a.snapshot().unwrap().messages[0].path.clone();
    git(a.root(), &["rm", "-q", &rel]);
    git(a.root(), &["commit", "-qm", "tidy up"]);
    git(a.root(), &["push", "-q", "origin", "HEAD"]);
    assert_flags(&check::check(a.root()).unwrap(), "§1", "AS-1-3", &rel);
}

#[test]
fn as_1_4_a_force_push_rewrite_is_seen_in_the_remote_tracking_reflog() {
    let fx = Fx::with_protection(false);
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    send(&a, &["acme/reviewer"], MessageType::Fyi, "one");
    send(&a, &["acme/reviewer"], MessageType::Fyi, "two");
    let watcher = fx.clone("watcher");
    // Someone rewrites the shared branch with plain git.
    let vandal = fx.clone("vandal");
    git(&vandal, &["reset", "-q", "--hard", "HEAD~1"]);
    git(&vandal, &["push", "-q", "--force", "origin", "HEAD"]);
    git(&watcher, &["fetch", "-q"]);
    let report = check::check(&watcher).unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.section == "§1" && f.rule == "AS-1-4"),
        "{:#?}",
        report.findings
    );
}

#[test]
fn as_3_1_a_bad_name_is_a_violation() {
    let (_fx, a) = base();
    for (rel, why) in [
        ("messages/acme/reviewer/hello.md", "no timestamp"),
        (
            "messages/acme/reviewer/2026-11-30T12:00:00Z-acme-reviewer-x.md",
            "colons",
        ),
        (
            "messages/acme/reviewer/20261130T120000Z-globex-bot-x.md",
            "another writer's name",
        ),
    ] {
        let id = format!("bad-{}", why.replace(' ', "-"));
        commit_file(&a, rel, &msg(&id, "acme/reviewer", "fyi", "", why));
        assert_flags(&check::check(a.root()).unwrap(), "§3", "AS-3-1", rel);
    }
    commit_file(
        &a,
        "messages/acme/stray.md",
        &msg("stray", "acme/reviewer", "fyi", "", "x"),
    );
    assert_flags(
        &check::check(a.root()).unwrap(),
        "§1",
        "AS-1-1",
        "messages/acme/stray.md",
    );
}

#[test]
fn as_3_8_an_answer_or_ack_without_re_is_a_violation() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-answer.md";
    commit_file(&a, rel, &msg("ans-1", "acme/reviewer", "answer", "", "A"));
    assert_flags(&check::check(a.root()).unwrap(), "§3", "AS-3-8", rel);
}

#[test]
fn as_3_1_7_a_copy_whose_to_is_not_its_folder_breaks_inv_2() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-multi.md";
    let extra =
        "recipients: [ { operator: acme, agent: reviewer }, { operator: globex, agent: any } ]\n";
    commit_file(&a, rel, &msg("multi-1", "globex/any", "fyi", extra, "M"));
    assert_flags(&check::check(a.root()).unwrap(), "§3.1", "AS-3.1-7", rel);
}

#[test]
fn as_6_5_an_index_file_in_knowledge_is_a_violation() {
    let (_fx, a) = base();
    commit_file(&a, "knowledge/INDEX.md", "# Index\n- a\n");
    let report = check::check(a.root()).unwrap();
    assert_flags(&report, "§6", "AS-6-5", "knowledge/INDEX.md");
    commit_file(
        &a,
        "knowledge/specs/index.md",
        "---\nprotocol: 0.1.0\nid: idx\npublisher: { operator: acme, instance: fleet, agent: reviewer }\ntopic: specs\n---\nall\n",
    );
    assert_flags(
        &check::check(a.root()).unwrap(),
        "§6",
        "AS-6-5",
        "knowledge/specs/index.md",
    );
}

#[test]
fn as_9_8_a_producer_emitting_1_0_0_after_its_withdrawal_is_a_violation() {
    let (_fx, a) = base();
    // One written in the window before the withdrawal is legitimate.
    let old = "messages/acme/reviewer/20260810T120000Z-acme-reviewer-old.md";
    let path = a.root().join(old);
    std::fs::write(
        &path,
        msg(
            "old-1",
            "acme/reviewer",
            "fyi",
            "created: 2026-08-10T12:00:00Z\n",
            "old",
        )
        .replace("0.1.0", "1.0.0"),
    )
    .unwrap();
    git(a.root(), &["add", "-A"]);
    let out = Command::new("git")
        .current_dir(a.root())
        .envs(git_env())
        .env("GIT_COMMITTER_DATE", "2026-08-10T12:00:00Z")
        .env("GIT_AUTHOR_DATE", "2026-08-10T12:00:00Z")
        .args(["commit", "-qm", "from the 1.0.0 window"])
        .output()
        .unwrap();
    assert!(out.status.success());
    git(a.root(), &["push", "-q", "origin", "HEAD"]);
    let report = check::check(a.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
    let new = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-new.md";
    commit_file(
        &a,
        new,
        &msg("new-1", "acme/reviewer", "fyi", "", "new").replace("0.1.0", "1.0.0"),
    );
    let report = check::check(a.root()).unwrap();
    assert_flags(&report, "§9", "AS-9-8", new);
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.path.as_deref() == Some(old))
    );
}

#[test]
fn as_9_2_keys_or_types_outside_the_declared_version_are_violations() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-extra.md";
    commit_file(
        &a,
        rel,
        &msg("extra-1", "acme/reviewer", "fyi", "priority: high\n", "x"),
    );
    assert_flags(&check::check(a.root()).unwrap(), "§9", "AS-9-2", rel);
    let rel = "messages/acme/reviewer/20261130T120600Z-acme-reviewer-poll.md";
    commit_file(&a, rel, &msg("poll-1", "acme/reviewer", "poll", "", "x"));
    assert_flags(&check::check(a.root()).unwrap(), "§9", "AS-9-2", rel);
}

#[test]
fn as_3_2_3_a_content_hash_that_does_not_verify_is_a_violation() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-tampered.md";
    let hash = agentbus_share::hash::content_hash("original");
    commit_file(
        &a,
        rel,
        &msg(
            "t-1",
            "acme/reviewer",
            "fyi",
            &format!("content_hash: \"{hash}\"\n"),
            "altered",
        ),
    );
    assert_flags(&check::check(a.root()).unwrap(), "§3.2", "AS-3.2-3", rel);
}

#[test]
fn as_2_4_as_7_2_undeclared_senders_and_bad_log_lines_are_violations() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-mallory-bot-hi.md";
    commit_file(
        &a,
        rel,
        "---\nprotocol: 0.1.0\nid: m-1\nfrom: { operator: mallory, instance: x, agent: bot }\nto: { operator: acme, agent: reviewer }\ntype: fyi\n---\nhi\n",
    );
    assert_flags(&check::check(a.root()).unwrap(), "§2", "AS-2-4", rel);
    commit_file(
        &a,
        "log/acme-2026-11-29.jsonl",
        "{\"ts\":\"2026-11-29T00:00:00Z\",\"operator\":\"acme\",\"event\":\"delete\"}\n",
    );
    assert_flags(
        &check::check(a.root()).unwrap(),
        "§7",
        "AS-7-2",
        "log/acme-2026-11-29.jsonl",
    );
    commit_file(
        &a,
        "log/acme-2026-11-28.jsonl",
        "{\"ts\":\"2026-11-28T00:00:00Z\",\"operator\":\"globex\",\"event\":\"send\"}\n",
    );
    assert_flags(
        &check::check(a.root()).unwrap(),
        "§7",
        "AS-7-1",
        "log/acme-2026-11-28.jsonl",
    );
}

#[test]
fn g_as_2_distinct_messages_sharing_an_id_are_a_violation() {
    let (_fx, a) = base();
    let id = a.snapshot().unwrap().messages[0].doc.id.clone();
    let rel = "messages/acme/reviewer/20261130T120000Z-acme-reviewer-q-2.md";
    commit_file(
        &a,
        rel,
        &msg(&id, "acme/reviewer", "fyi", "", "a different body"),
    );
    assert_flags(&check::check(a.root()).unwrap(), "§3.1", "G-AS-2", rel);
}

#[test]
fn as_1_2_an_edit_made_inside_a_merge_commit_is_a_violation() {
    let (_fx, a) = base();
    let rel = a.snapshot().unwrap().messages[0].path.clone();
    // A side branch adds a file; the merge commit itself edits the pushed message (an "evil"
    // merge: no ordinary commit carries the edit).
    git(a.root(), &["checkout", "-q", "-b", "side"]);
    std::fs::write(a.root().join("notes.txt"), "side\n").unwrap();
    git(a.root(), &["add", "notes.txt"]);
    git(a.root(), &["commit", "-qm", "side"]);
    git(a.root(), &["checkout", "-q", "-"]);
    git(a.root(), &["merge", "-q", "--no-ff", "--no-commit", "side"]);
    let text = std::fs::read_to_string(a.root().join(&rel))
        .unwrap()
        .replace("status: open", "status: done");
    std::fs::write(a.root().join(&rel), text).unwrap();
    git(a.root(), &["add", &rel]);
    git(a.root(), &["commit", "-qm", "merge side"]);
    git(a.root(), &["push", "-q", "origin", "HEAD"]);
    git(a.root(), &["fetch", "-q"]);
    let report = check::check(a.root()).unwrap();
    assert_flags(&report, "§1", "AS-1-2", &rel);
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.rule == "AS-1-2" && f.message.contains("merge commit")),
        "{:#?}",
        report.findings
    );
}

#[test]
fn as_3_2_1_a_content_hash_in_upper_case_hex_is_a_violation() {
    let (_fx, a) = base();
    let rel = "messages/acme/reviewer/20261130T120500Z-acme-reviewer-upper.md";
    let hash = agentbus_share::hash::content_hash("body")
        .to_uppercase()
        .replace("BLAKE3", "blake3");
    commit_file(
        &a,
        rel,
        &msg(
            "u-1",
            "acme/reviewer",
            "fyi",
            &format!("content_hash: \"{hash}\"\n"),
            "body",
        ),
    );
    assert_flags(&check::check(a.root()).unwrap(), "§3.2", "AS-3.2-1", rel);
}

#[test]
fn g_as_3_a_new_message_in_a_same_second_message_threads_is_flagged() {
    // What the old replay left: a renamed message whose thread is the other clone's id.
    let (_fx, a) = base();
    let first = a.snapshot().unwrap().messages[0].doc.clone();
    let rel = "messages/acme/reviewer/20261130T120000Z-acme-reviewer-q-2.md";
    commit_file(
        &a,
        rel,
        &msg(
            "20261130T120000Z-acme-reviewer-q-2",
            "acme/reviewer",
            "question",
            &format!("thread: {}\ncreated: \"2026-11-30T12:00:00Z\"\n", first.id),
            "another question",
        ),
    );
    let report = check::check(a.root()).unwrap();
    assert!(report.is_clean(), "a warning, not a violation");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.rule == "G-AS-3" && f.path.as_deref() == Some(rel)),
        "{:#?}",
        report.findings
    );
    // A follow-up written later, in the same thread on purpose, is not flagged.
    let later = "messages/acme/reviewer/20261130T121000Z-acme-reviewer-more.md";
    commit_file(
        &a,
        later,
        &msg(
            "more-1",
            "acme/reviewer",
            "fyi",
            &format!("thread: {}\ncreated: \"2026-11-30T12:10:00Z\"\n", first.id),
            "and more",
        ),
    );
    let report = check::check(a.root()).unwrap();
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.path.as_deref() == Some(later))
    );
}

#[test]
fn as_7_3_a_missing_audit_line_is_never_a_finding() {
    // The log is self-reported (§11): messages nobody logged, and a log naming a message that is
    // not there, prove nothing either way.
    let (_fx, a) = base();
    commit_file(
        &a,
        "messages/acme/reviewer/20261130T120500Z-acme-reviewer-unlogged.md",
        &msg("unlogged-1", "acme/reviewer", "fyi", "", "nobody logged me"),
    );
    commit_file(
        &a,
        "log/acme-2026-11-29.jsonl",
        "{\"ts\":\"2026-11-29T00:00:00Z\",\"operator\":\"acme\",\"event\":\"send\",\"msg_id\":\"never-written\"}\n",
    );
    let report = check::check(a.root()).unwrap();
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}
