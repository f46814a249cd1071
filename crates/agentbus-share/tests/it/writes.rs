//! Every write on real repositories: §1 uniqueness, §2 identity, §3 messages, §4 broadcasts, §5
//! replies, §6 knowledge, §7 the audit log, §8 the registry, §9 what a producer emits.

use agentbus_share::audit::LogLine;
use agentbus_share::frontmatter::{self, MessageType};
use agentbus_share::views::{self, ThreadState};
use agentbus_share::{JoinRequest, PublishRequest, SendRequest, ShareError, WriteOptions};

use crate::{Fx, addr, changes, git, read, send};

fn is_message_path(p: &str, to_op: &str, to_agent: &str, from: &str) -> bool {
    let prefix = format!("messages/{to_op}/{to_agent}/");
    let Some(name) = p.strip_prefix(&prefix) else {
        return false;
    };
    let b = name.as_bytes();
    b.len() > 17
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && &name[15..17] == "Z-"
        && name[17..].starts_with(&format!("{from}-"))
        && name.ends_with(".md")
}

#[test]
fn as_2_1_init_on_an_empty_bare_repository_yields_a_working_share() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    assert!(a.root().join(".gitattributes").exists());
    assert!(read(&a, ".gitattributes").contains("log/*.jsonl merge=union"));
    assert!(a.root().join("operators.yaml").exists());
    send(&a, &["acme/reviewer"], MessageType::Fyi, "hello");
}

#[test]
fn as_2_2_operators_are_lowercase() {
    let fx = Fx::new();
    let share = fx.share(&fx.clone("a"));
    for bad in ["Balazs", "bal azs", "-x", ""] {
        let err = share
            .join(
                &JoinRequest {
                    operator: bad.into(),
                    instance: "fleet".into(),
                    agents: vec!["a".into()],
                    emails: vec![],
                    sign: false,
                },
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert!(
            matches!(
                err,
                ShareError::BadIdent {
                    what: "operator",
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
}

#[test]
fn as_2_3_two_instances_of_one_operator_both_send() {
    let fx = Fx::new();
    let one = fx.member("one", "acme", "fleet-a", &["reviewer"]);
    let two = fx.member("two", "acme", "fleet-b", &["reviewer", "writer"]);
    let peer = fx.member("peer", "globex", "bots", &["architect"]);
    send(&one, &["globex/architect"], MessageType::Fyi, "from a");
    send(&two, &["globex/architect"], MessageType::Fyi, "from b");
    peer.sync(&WriteOptions::default()).unwrap();
    let inbox = agentbus_share::inbound_messages(&peer).unwrap();
    let instances: Vec<_> = inbox
        .messages
        .iter()
        .map(|m| m.from_instance.clone().unwrap())
        .collect();
    assert_eq!(instances, ["fleet-a", "fleet-b"]);
    let reg = agentbus_share::registry::Registry::load(peer.root()).unwrap();
    assert!(reg.declares("acme", Some("fleet-a"), "reviewer"));
    assert!(reg.declares("acme", Some("fleet-b"), "writer"));
}

#[test]
fn as_2_4_an_undeclared_agent_cannot_send() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    // Claim an agent locally that the registry does not list.
    git(
        a.root(),
        &["config", "--add", "agentbus-share.agent", "ghost"],
    );
    let mut req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "boo");
    req.from_agent = Some("ghost".into());
    let err = a.send(&req, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, ShareError::Undeclared(_)), "{err}");
    // And a clone that never joined cannot write at all.
    let stranger = fx.share(&fx.clone("stranger"));
    let err = stranger.send(&req, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, ShareError::NotJoined), "{err}");
}

#[test]
fn as_3_1_and_as_3_2_a_message_lies_in_the_recipients_folder_named_in_utc() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    fx.member("b", "globex", "bots", &["architect"]);
    // A clock instant with a fraction of a second; the name and created use the same UTC second.
    fx.clock
        .set("2026-11-30T23:59:59.750+00:00".parse().unwrap());
    let w = send(&a, &["globex/architect"], MessageType::Question, "Schema?");
    assert_eq!(w.paths.len(), 1);
    assert!(
        is_message_path(&w.paths[0], "globex", "architect", "acme-reviewer"),
        "{}",
        w.paths[0]
    );
    assert!(w.paths[0].starts_with("messages/globex/architect/20261130T235959Z-acme-reviewer-"));
    let m = frontmatter::read_message(&read(&a, &w.paths[0])).unwrap();
    assert_eq!(m.created.unwrap().raw, "2026-11-30T23:59:59Z");
}

#[test]
fn as_3_3_the_slug_is_short_kebab_case() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let mut req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "x");
    req.slug = Some("Hello World: The  Sequel!".into());
    let w = a.send(&req, &WriteOptions::default()).unwrap();
    assert!(
        w.paths[0].ends_with("-acme-reviewer-hello-world-the-sequel.md"),
        "{}",
        w.paths[0]
    );
}

#[test]
fn as_3_4_a_same_second_collision_is_suffixed_and_never_overwrites() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let mut req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "first");
    req.slug = Some("msg".into());
    let w1 = a.send(&req, &WriteOptions::default()).unwrap();
    let first = read(&a, &w1.paths[0]);
    req.body = "second".into();
    let w2 = a.send(&req, &WriteOptions::default()).unwrap();
    req.body = "third".into();
    let w3 = a.send(&req, &WriteOptions::default()).unwrap();
    assert!(w1.paths[0].ends_with("-msg.md"));
    assert!(w2.paths[0].ends_with("-msg-2.md"));
    assert!(w3.paths[0].ends_with("-msg-3.md"));
    assert_eq!(read(&a, &w1.paths[0]), first);
    // G-AS-2: distinct messages, distinct ids.
    assert!(w1.id != w2.id && w2.id != w3.id);
    // AS-3.1-3: a constant slug for every message works.
}

#[test]
fn as_3_5_any_reaches_every_local_agent_of_the_operator() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect", "tester"]);
    let w = send(&a, &["globex/any"], MessageType::Handoff, "anyone?");
    assert!(w.paths[0].starts_with("messages/globex/any/"));
    b.sync(&WriteOptions::default()).unwrap();
    let inbox = agentbus_share::inbound_messages(&b).unwrap();
    assert_eq!(inbox.messages.len(), 1);
    assert_eq!(inbox.messages[0].to, "share:globex/any");
}

#[test]
fn as_3_6_an_emitted_message_has_exactly_the_keys_of_0_1_0() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    fx.member("b", "globex", "bots", &["architect"]);
    let q = send(
        &a,
        &["globex/architect"],
        MessageType::Question,
        "# Schema?\n\nIs v2 final?\n",
    );
    let text = read(&a, &q.paths[0]);
    insta::assert_snapshot!("emitted_question", text);
}

#[test]
fn as_3_7_the_writer_refuses_an_unknown_type() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let req = SendRequest::new(
        vec![addr("acme/reviewer")],
        MessageType::Unknown("maybe".into()),
        "x",
    );
    assert!(matches!(
        a.send(&req, &WriteOptions::default()),
        Err(ShareError::Invalid(_))
    ));
}

#[test]
fn as_3_8_re_is_required_on_answer_and_ack_and_absent_on_a_new_thread() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    for kind in [MessageType::Answer, MessageType::Ack] {
        let req = SendRequest::new(vec![addr("acme/reviewer")], kind, "x");
        assert!(matches!(
            a.send(&req, &WriteOptions::default()),
            Err(ShareError::Invalid(_))
        ));
    }
    let w = send(&a, &["acme/reviewer"], MessageType::Handoff, "new");
    let text = read(&a, &w.paths[0]);
    assert!(!text.contains("\nre:"), "{text}");
    // An answer to an id the share does not hold is refused too.
    let mut req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Answer, "x");
    req.re = Some("no-such-id".into());
    assert!(matches!(
        a.send(&req, &WriteOptions::default()),
        Err(ShareError::UnknownId(_))
    ));
}

#[test]
fn as_3_9_status_is_open_or_done() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let mut req = SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "x");
    req.status = "pending".into();
    assert!(matches!(
        a.send(&req, &WriteOptions::default()),
        Err(ShareError::Invalid(_))
    ));
    req.status = "done".into();
    let w = a.send(&req, &WriteOptions::default()).unwrap();
    assert!(read(&a, &w.paths[0]).contains("\nstatus: done\n"));
}

#[test]
fn as_3_1_7_inv_2_a_multicast_writes_one_copy_per_folder_sharing_one_id() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    fx.member("b", "globex", "bots", &["architect"]);
    fx.member("c", "initech", "crew", &["milton"]);
    let w = send(
        &a,
        &["globex/architect", "initech/milton", "acme/any"],
        MessageType::Fyi,
        "to all three",
    );
    assert_eq!(w.paths.len(), 3);
    let copies: Vec<_> = w
        .paths
        .iter()
        .map(|p| frontmatter::read_message(&read(&a, p)).unwrap())
        .collect();
    for (p, m) in w.paths.iter().zip(&copies) {
        assert_eq!(m.id, w.id);
        assert!(
            p.starts_with(&format!("messages/{}/{}/", m.to.operator, m.to.agent)),
            "{p}"
        );
        assert_eq!(m.recipients.len(), 3);
        assert!(m.recipients_emitted);
    }
    // AS-3.1-2: the copies count once.
    let snap = a.snapshot().unwrap();
    let t = views::threads(&snap);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].messages, 1);
    // G-AS-18: one send line, one route line per further copy.
    let events: Vec<String> = log_lines(&a, "acme").into_iter().map(|l| l.event).collect();
    assert_eq!(events, ["send", "route", "route"]);
}

fn log_lines(share: &agentbus_share::Share, op: &str) -> Vec<LogLine> {
    agentbus_share::audit::files_of(share.root(), op)
        .iter()
        .flat_map(|f| {
            read(share, f)
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn as_3_1_6_inv_1_delivery_reads_to_and_ignores_recipients() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    send(
        &a,
        &["globex/architect", "acme/reviewer"],
        MessageType::Fyi,
        "multicast",
    );
    b.sync(&WriteOptions::default()).unwrap();
    let with = agentbus_share::inbound_messages(&b).unwrap();
    // Strip recipients from every copy (in a scratch clone): routing must not change.
    for m in b.snapshot().unwrap().messages {
        let p = b.root().join(&m.path);
        let text = std::fs::read_to_string(&p).unwrap();
        let stripped: String = text
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("recipients:") && !l.starts_with("  - {"))
            .collect();
        std::fs::write(&p, stripped).unwrap();
    }
    let without = agentbus_share::inbound_messages(&b).unwrap();
    let key = |i: &agentbus_share::views::Inbound| -> Vec<(String, String)> {
        i.messages
            .iter()
            .map(|m| (m.id.clone(), m.to.clone()))
            .collect()
    };
    assert_eq!(key(&with), key(&without));
    assert_eq!(key(&with).len(), 1);
}

/// What another implementation's writer does: `files` (share-relative path, content) committed by
/// `writer` with plain git and synced, then `reader` synced.
fn foreign_commit(
    writer: &agentbus_share::Share,
    files: &[(&str, &str)],
    reader: &agentbus_share::Share,
) {
    for (rel, content) in files {
        let path = writer.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    git(writer.root(), &["add", "-A"]);
    git(
        writer.root(),
        &["commit", "-qm", "written by another implementation"],
    );
    writer.sync(&WriteOptions::default()).unwrap();
    reader.sync(&WriteOptions::default()).unwrap();
}

#[test]
fn as_3_1_1_an_id_is_never_read_from_the_file_name() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    // A crafted copy whose stem is not its id, and whose slug lies.
    foreign_commit(
        &b,
        &[(
            "messages/acme/reviewer/20261130T120000Z-globex-architect-urgent-payroll.md",
            "---\nprotocol: 0.1.0\nid: the-real-id\nfrom: { operator: globex, instance: bots, agent: architect }\nto: { operator: acme, agent: reviewer }\nthread: t1\ntype: question\n---\nQ\n",
        )],
        &a,
    );
    let inbox = agentbus_share::inbound_messages(&a).unwrap();
    assert_eq!(inbox.messages[0].id, "the-real-id");
    let w = a
        .reply(
            "the-real-id",
            MessageType::Answer,
            None,
            "A",
            &WriteOptions::default(),
        )
        .unwrap();
    let m = frontmatter::read_message(&read(&a, &w.paths[0])).unwrap();
    assert_eq!(m.re.as_deref(), Some("the-real-id"));
    assert_eq!(m.thread, "t1");
    let t = views::threads(&a.snapshot().unwrap());
    assert_eq!(t.iter().find(|t| t.thread == "t1").unwrap().messages, 2);
}

#[test]
fn as_4_1_a_broadcast_goes_to_star_quoted() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let w = a
        .broadcast(
            MessageType::Fyi,
            None,
            Some("maintenance"),
            None,
            "Friday 18:00 UTC",
            &WriteOptions::default(),
        )
        .unwrap();
    assert_eq!(w.paths, [format!("broadcast/{}.md", w.id)]);
    assert_eq!(w.id, "20261130T120000Z-acme-maintenance");
    let text = read(&a, &w.paths[0]);
    assert!(
        text.contains("to: { operator: \"*\", agent: \"*\" }\n"),
        "{text}"
    );
    assert!(!text.contains("recipients"));
    b.sync(&WriteOptions::default()).unwrap();
    let inbox = agentbus_share::inbound_messages(&b).unwrap();
    assert!(inbox.messages[0].broadcast);
    // An answer cannot be broadcast: it answers nothing.
    assert!(
        a.broadcast(
            MessageType::Answer,
            None,
            None,
            None,
            "x",
            &WriteOptions::default()
        )
        .is_err()
    );
}

#[test]
fn as_5_1_to_as_5_4_replies_and_acks_add_files_and_the_thread_state_is_derived() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let q = send(&a, &["globex/architect"], MessageType::Question, "Schema?");
    fx.clock.advance_secs(60);
    // b has not synced: reply fetches before it gives up on an id it does not hold yet.
    let ans = b
        .reply(
            &q.id,
            MessageType::Answer,
            None,
            "Yes.",
            &WriteOptions::default(),
        )
        .unwrap();
    // AS-5-1: in the asker's folder, re: set, the original's thread.
    assert!(
        ans.paths[0].starts_with("messages/acme/reviewer/"),
        "{}",
        ans.paths[0]
    );
    let m = frontmatter::read_message(&read(&b, &ans.paths[0])).unwrap();
    assert_eq!(
        (m.re.as_deref(), m.thread.as_str()),
        (Some(q.id.as_str()), q.thread.as_deref().unwrap())
    );
    assert_eq!(m.from.agent, "architect");
    assert_eq!(
        views::threads(&b.snapshot().unwrap())[0].state,
        ThreadState::Open
    );
    a.sync(&WriteOptions::default()).unwrap();
    let ack = a
        .reply(
            &ans.id,
            MessageType::Ack,
            None,
            "Thanks.",
            &WriteOptions::default(),
        )
        .unwrap();
    assert!(ack.paths[0].starts_with("messages/globex/architect/"));
    // AS-5-3: done, while the original file still says open.
    let snap = a.snapshot().unwrap();
    let t = &views::threads(&snap)[0];
    assert_eq!((t.state, t.messages), (ThreadState::Done, 3));
    assert!(read(&a, &q.paths[0]).contains("\nstatus: open\n"));
    // AS-1-5, AS-5-4: nothing was modified or deleted, only added.
    assert_eq!(changes(a.root(), "MDRT"), "");
    let added = changes(a.root(), "A");
    assert_eq!(added.lines().filter(|l| !l.is_empty()).count(), 3);
    // AS-9-4: an unknown type takes no automated action: it does not close the thread.
    let events: Vec<String> = log_lines(&a, "acme").into_iter().map(|l| l.event).collect();
    assert_eq!(events, ["send", "ack"]);
}

#[test]
fn as_6_1_to_as_6_5_publications_and_supersession() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let mut req = PublishRequest {
        from_agent: None,
        topic: "payments-api".into(),
        slug: Some("survey".into()),
        supersedes: None,
        source: None,
        last_verified: Some("2026-11-29".into()),
        body: "# Survey v1\n".into(),
    };
    let v1 = a.publish(&req, &WriteOptions::default()).unwrap();
    assert_eq!(
        v1.paths,
        ["knowledge/payments-api/2026-11-30-acme-survey.md"]
    );
    insta::assert_snapshot!("emitted_publication", read(&a, &v1.paths[0]));
    req.supersedes = Some(v1.id.clone());
    req.body = "# Survey v2\n".into();
    req.last_verified = None;
    let v2 = a.publish(&req, &WriteOptions::default()).unwrap();
    assert_eq!(v2.id, "2026-11-30-acme-survey-2");
    req.supersedes = Some(v2.id.clone());
    req.body = "# Survey v3\n".into();
    let v3 = a.publish(&req, &WriteOptions::default()).unwrap();
    let topics = views::knowledge(&a.snapshot().unwrap());
    assert_eq!(topics.len(), 1);
    let live: Vec<&str> = topics[0].live.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(live, [v3.id.as_str()]);
    assert_eq!(topics[0].superseded, 2);
    assert!(read(&a, &v1.paths[0]).contains("# Survey v1"));
    // A fork lists every live head (G-AS-12).
    req.supersedes = Some(v2.id.clone());
    req.body = "# Survey v3, the other one\n".into();
    a.publish(&req, &WriteOptions::default()).unwrap();
    assert_eq!(views::knowledge(&a.snapshot().unwrap())[0].live.len(), 2);
    // AS-6-4: a topic named after an operator warns.
    req.topic = "acme".into();
    req.supersedes = None;
    let w = a.publish(&req, &WriteOptions::default()).unwrap();
    assert!(
        w.warnings.iter().any(|w| w.contains("operator")),
        "{:?}",
        w.warnings
    );
    // AS-6-5: no command wrote anything but the publications themselves into knowledge/.
    let files = git(a.root(), &["ls-files", "knowledge"]);
    assert!(
        files
            .lines()
            .all(|l| l.matches('/').count() == 2 && !l.to_lowercase().contains("index"))
    );
    assert_eq!(changes(a.root(), "MDRT"), "");
    // Superseding an id the share does not hold is refused.
    req.supersedes = Some("nope".into());
    assert!(matches!(
        a.publish(&req, &WriteOptions::default()),
        Err(ShareError::UnknownId(_))
    ));
}

#[test]
fn as_7_1_and_as_7_2_every_event_appends_one_line_to_the_own_daily_file() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let q = send(&a, &["globex/architect"], MessageType::Question, "Q");
    b.sync(&WriteOptions::default()).unwrap();
    b.reply(
        &q.id,
        MessageType::Ack,
        None,
        "ok",
        &WriteOptions::default(),
    )
    .unwrap();
    a.sync(&WriteOptions::default()).unwrap();
    a.publish(
        &PublishRequest {
            from_agent: None,
            topic: "specs".into(),
            slug: None,
            supersedes: None,
            source: None,
            last_verified: None,
            body: "Spec".into(),
        },
        &WriteOptions::default(),
    )
    .unwrap();
    let logs = git(a.root(), &["ls-files", "log"]);
    assert_eq!(
        logs,
        "log/acme-2026-11-30.jsonl\nlog/globex-2026-11-30.jsonl\n"
    );
    let acme = read(&a, "log/acme-2026-11-30.jsonl");
    insta::assert_snapshot!(acme, @r#"
    {"ts":"2026-11-30T12:00:00Z","operator":"acme","event":"send","msg_id":"20261130T120000Z-acme-reviewer-q","from":"acme/fleet/reviewer","to":"globex/architect","thread":"20261130T120000Z-acme-reviewer-q","type":"question"}
    {"ts":"2026-11-30T12:00:00Z","operator":"acme","event":"publish","msg_id":"2026-11-30-acme-spec","from":"acme/fleet/reviewer"}
    "#);
    let globex = read(&a, "log/globex-2026-11-30.jsonl");
    let line: LogLine = serde_json::from_str(globex.lines().next().unwrap()).unwrap();
    assert_eq!(
        (line.event.as_str(), line.operator.as_str()),
        ("ack", "globex")
    );
    assert_eq!(line.to.as_deref(), Some("acme/reviewer"));
}

#[test]
fn as_8_2_concurrent_joins_keep_every_block() {
    let fx = Fx::new();
    let dirs: Vec<_> = (0..4).map(|i| fx.clone(&format!("c{i}"))).collect();
    std::thread::scope(|s| {
        for (i, d) in dirs.iter().enumerate() {
            let share = fx.share(d);
            s.spawn(move || {
                share
                    .join(
                        &JoinRequest {
                            operator: format!("op{}", ["a", "b", "c", "d"][i]),
                            instance: "fleet".into(),
                            agents: vec!["agent".into()],
                            emails: vec![],
                            sign: false,
                        },
                        &WriteOptions::default(),
                    )
                    .unwrap();
            });
        }
    });
    let last = fx.share(&fx.clone("last"));
    let reg = agentbus_share::registry::Registry::load(last.root()).unwrap();
    for op in ["opa", "opb", "opc", "opd"] {
        assert!(reg.declares(op, Some("fleet"), "agent"), "{op}");
    }
    // Re-joining with another agent extends only the own block.
    let before = read(&last, "operators.yaml");
    let share = fx.share(&dirs[0]);
    share
        .join(
            &JoinRequest {
                operator: "opa".into(),
                instance: "fleet".into(),
                agents: vec!["second".into()],
                emails: vec![],
                sign: false,
            },
            &WriteOptions::default(),
        )
        .unwrap();
    let after = read(&share, "operators.yaml");
    let other = |t: &str| agentbus_share::registry::block_of(t, "opb").unwrap();
    assert_eq!(other(&before), other(&after));
    assert!(
        agentbus_share::registry::block_of(&after, "opa")
            .unwrap()
            .contains("[agent, second]")
    );
}

#[test]
fn as_8_3_the_split_registry_form_is_read() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    std::fs::create_dir_all(a.root().join("operators")).unwrap();
    std::fs::write(
        a.root().join("operators/globex.yaml"),
        "globex:\n  instances:\n    bots:\n      agents: [architect]\n",
    )
    .unwrap();
    std::fs::write(
        a.root().join("operators/initech.yaml"),
        "instances:\n  crew:\n    agents: [milton]\n",
    )
    .unwrap();
    let reg = agentbus_share::registry::Registry::load(a.root()).unwrap();
    assert!(reg.declares("acme", Some("fleet"), "reviewer"));
    assert!(reg.declares("globex", Some("bots"), "architect"));
    assert!(reg.declares("initech", Some("crew"), "milton"));
}

#[test]
fn as_9_2_as_9_6_as_9_8_every_emitted_file_declares_0_1_0_and_only_its_keys() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let q = send(
        &a,
        &["acme/any", "acme/reviewer"],
        MessageType::Question,
        "Q",
    );
    a.reply(
        &q.id,
        MessageType::Answer,
        None,
        "A",
        &WriteOptions::default(),
    )
    .unwrap();
    a.broadcast(
        MessageType::Handoff,
        Some("ops"),
        None,
        None,
        "B",
        &WriteOptions::default(),
    )
    .unwrap();
    let snap = a.snapshot().unwrap();
    assert!(snap.malformed.is_empty());
    for m in snap.all_messages() {
        assert_eq!(m.doc.protocol, "0.1.0");
        for k in &m.doc.keys {
            assert!(
                frontmatter::MESSAGE_KEYS.contains(&k.as_str())
                    || frontmatter::ENVELOPE_KEYS.contains(&k.as_str()),
                "{k} in {}",
                m.path
            );
        }
        assert!(!read(&a, &m.path).contains("1.0.0"));
    }
    let report = agentbus_share::check::check(a.root()).unwrap();
    assert!(report.is_clean(), "{:#?}", report.findings);
}

#[test]
fn g_as_3_an_add_add_race_between_clones_is_re_suffixed_and_retried() {
    let fx = Fx::new();
    // Two instances of one operator with one agent name: the file name has no instance.
    let one = fx.member("one", "acme", "fleet-a", &["bot"]);
    let two = fx.member("two", "acme", "fleet-b", &["bot"]);
    let mut req = SendRequest::new(vec![addr("acme/bot")], MessageType::Fyi, "from one");
    req.slug = Some("msg".into());
    let offline = WriteOptions {
        offline: true,
        sign: false,
    };
    let w1 = one.send(&req, &offline).unwrap();
    assert!(w1.sync.offline.is_some());
    req.body = "from two".into();
    let w2 = two.send(&req, &WriteOptions::default()).unwrap();
    assert_eq!(
        w1.paths, w2.paths,
        "both took the same name in the same second"
    );
    let report = one.sync(&WriteOptions::default()).unwrap();
    assert_eq!(report.renamed_ids.len(), 1, "{report:?}");
    let new_id = &report.renamed_ids[0].to;
    assert!(new_id.ends_with("-msg-2"));
    let snap = fx.share(&fx.clone("check")).snapshot().unwrap();
    let bodies: Vec<(String, String)> = snap
        .messages
        .iter()
        .map(|m| (m.doc.id.clone(), m.doc.body.trim().to_owned()))
        .collect();
    assert!(
        bodies.contains(&(w2.id.clone(), "from two".into())),
        "{bodies:?}"
    );
    assert!(
        bodies.contains(&(new_id.clone(), "from one".into())),
        "{bodies:?}"
    );
    // Its audit line follows the new id; the log merged by union.
    let log = read(&one, "log/acme-2026-11-30.jsonl");
    assert!(log.contains(&format!("\"msg_id\":\"{new_id}\"")), "{log}");
    assert_eq!(log.lines().count(), 2);
    assert_eq!(changes(one.root(), "MDRT"), "");
}

#[test]
fn g_as_2_same_agent_two_clones_same_second_different_recipients_get_distinct_ids() {
    let fx = Fx::new();
    let one = fx.member("one", "acme", "fleet-a", &["bot"]);
    let two = fx.member("two", "acme", "fleet-b", &["bot", "other"]);
    let offline = WriteOptions {
        offline: true,
        sign: false,
    };
    let mut req = SendRequest::new(vec![addr("acme/bot")], MessageType::Fyi, "x");
    req.slug = Some("msg".into());
    one.send(&req, &offline).unwrap();
    req.to = vec![addr("acme/other")];
    let w2 = two.send(&req, &WriteOptions::default()).unwrap();
    let report = one.sync(&WriteOptions::default()).unwrap();
    assert_eq!(report.renamed_ids.len(), 1);
    assert_ne!(report.renamed_ids[0].to, w2.id);
}

#[test]
fn offline_writes_are_committed_and_pushed_by_a_later_sync() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let offline = WriteOptions {
        offline: true,
        sign: false,
    };
    let w = a
        .send(
            &SendRequest::new(vec![addr("globex/architect")], MessageType::Fyi, "later"),
            &offline,
        )
        .unwrap();
    assert!(!w.sync.pushed);
    assert!(b.sync(&WriteOptions::default()).unwrap().arrived.is_empty());
    a.sync(&WriteOptions::default()).unwrap();
    let arrived = b.sync(&WriteOptions::default()).unwrap().arrived;
    assert!(arrived.contains(&w.paths[0]), "{arrived:?}");
}

#[test]
fn as_11_3_a_secret_looking_body_is_sent_with_a_warning() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let w = send(
        &a,
        &["acme/reviewer"],
        MessageType::Fyi,
        "the key is -----BEGIN OPENSSH PRIVATE KEY-----",
    );
    assert!(
        w.warnings.iter().any(|w| w.contains("§11")),
        "{:?}",
        w.warnings
    );
    let w = send(&a, &["acme/reviewer"], MessageType::Fyi, "nothing to see");
    assert!(w.warnings.is_empty());
}

/// Two members, acme (`a`) and globex (`b`), and every kind of write between them: a multicast
/// question, an answer, an ack, a broadcast and a publication superseded once; `b` synced last.
fn every_write(fx: &Fx) -> (agentbus_share::Share, agentbus_share::Share) {
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let q = send(
        &a,
        &["globex/architect", "acme/any"],
        MessageType::Question,
        "Q",
    );
    b.sync(&WriteOptions::default()).unwrap();
    let ans = b
        .reply(
            &q.id,
            MessageType::Answer,
            None,
            "A",
            &WriteOptions::default(),
        )
        .unwrap();
    a.sync(&WriteOptions::default()).unwrap();
    a.reply(
        &ans.id,
        MessageType::Ack,
        None,
        "thanks",
        &WriteOptions::default(),
    )
    .unwrap();
    a.broadcast(
        MessageType::Fyi,
        None,
        None,
        None,
        "news",
        &WriteOptions::default(),
    )
    .unwrap();
    let mut req = PublishRequest {
        from_agent: None,
        topic: "specs".into(),
        slug: Some("spec".into()),
        supersedes: None,
        source: None,
        last_verified: None,
        body: "v1".into(),
    };
    let v1 = a.publish(&req, &WriteOptions::default()).unwrap();
    req.supersedes = Some(v1.id);
    a.publish(&req, &WriteOptions::default()).unwrap();
    b.sync(&WriteOptions::default()).unwrap();
    (a, b)
}

#[test]
fn as_1_1_to_as_1_3_every_command_adds_new_files_and_never_edits_or_deletes_one() {
    let fx = Fx::new();
    let (_, b) = every_write(&fx);
    // Every artifact path was added exactly once, and nothing was modified, deleted or renamed.
    let added: Vec<String> = changes(b.root(), "A")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let unique: std::collections::BTreeSet<&String> = added.iter().collect();
    assert_eq!(added.len(), 7, "{added:?}");
    assert_eq!(unique.len(), added.len());
    assert_eq!(changes(b.root(), "MDRT"), "");
    // The name encodes the writer and the time (§1).
    for l in &added {
        let name = l.rsplit('/').next().unwrap();
        assert!(
            name.starts_with("20261130T120000Z-") || name.starts_with("2026-11-30-"),
            "{name}"
        );
        assert!(
            name.contains("-acme-") || name.contains("-globex-"),
            "{name}"
        );
    }
}

#[test]
fn as_8_1_names_yaml_would_type_are_written_as_quoted_keys() {
    let fx = Fx::new();
    let share = fx.share(&fx.clone("hex"));
    let join = |agents: &[&str]| {
        share
            .join(
                &JoinRequest {
                    operator: "0x1f".into(),
                    instance: "1e3".into(),
                    agents: agents.iter().map(|a| a.to_string()).collect(),
                    emails: vec![],
                    sign: false,
                },
                &WriteOptions::default(),
            )
            .unwrap()
    };
    join(&["bot"]);
    let text = read(&share, "operators.yaml");
    // A YAML 1.1 reader types a plain 0x1f as the integer 31 and 1e3 as a number.
    assert!(
        text.contains("\n\"0x1f\":\n  instances:\n    \"1e3\":\n"),
        "{text}"
    );
    // Joining again extends the one block (the quoted key is found), never adds a second.
    join(&["second"]);
    let text = read(&share, "operators.yaml");
    assert_eq!(text.matches("0x1f").count(), 1, "{text}");
    let reg = agentbus_share::registry::Registry::parse(&text).unwrap();
    assert!(reg.declares("0x1f", Some("1e3"), "second"));
    // A block another implementation wrote plain is still found and rewritten quoted.
    let plain = text.replace("\"0x1f\":", "0x1f:");
    let block = agentbus_share::registry::block_of(&text, "0x1f").unwrap();
    assert!(agentbus_share::registry::block_of(&plain, "0x1f").is_some());
    let spliced = agentbus_share::registry::splice_block(&plain, "0x1f", &block);
    assert_eq!(spliced, text);
    crate::send(&share, &["0x1f/bot"], MessageType::Fyi, "to myself");
}

#[test]
fn as_2_4_a_recipient_the_registry_does_not_declare_warns_and_strict_refuses() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    fx.member("b", "globex", "bots", &["architect"]);
    a.sync(&WriteOptions::default()).unwrap();
    for (to, says) in [
        (
            "globex/architcet",
            "globex has no agent architcet in operators.yaml (its agents: architect)",
        ),
        (
            "globx/architect",
            "globx is not an operator of this share (operators.yaml declares acme, globex)",
        ),
    ] {
        let mut req = SendRequest::new(vec![addr(to)], MessageType::Fyi, "typo");
        let w = a.send(&req, &WriteOptions::default()).unwrap();
        assert!(
            w.warnings.iter().any(|w| w.starts_with(says)),
            "{:?}",
            w.warnings
        );
        req.strict = true;
        let before = git(a.root(), &["rev-parse", "HEAD"]);
        let err = a.send(&req, &WriteOptions::default()).unwrap_err();
        assert!(
            matches!(err, ShareError::UnknownRecipient(ref w) if w.starts_with(says)),
            "{err}"
        );
        assert_eq!(
            git(a.root(), &["rev-parse", "HEAD"]),
            before,
            "nothing written"
        );
    }
    // Declared recipients and `any` of a declared operator say nothing.
    let w = send(
        &a,
        &["globex/architect", "globex/any"],
        MessageType::Fyi,
        "fine",
    );
    assert!(w.warnings.is_empty(), "{:?}", w.warnings);
}

#[test]
fn a_missing_share_folder_says_so_rather_than_blaming_git() {
    let fx = Fx::new();
    let missing = fx.tmp.path().join("no/such/dir");
    for err in [
        agentbus_share::Share::open(&missing).unwrap_err(),
        agentbus_share::check::check(&missing).unwrap_err(),
    ] {
        assert!(
            matches!(err, ShareError::NoSuchDir(ref p) if *p == missing),
            "{err}"
        );
        assert!(err.to_string().ends_with("does not exist"), "{err}");
    }
}

#[test]
fn as_3_2_3_a_crlf_checkout_keeps_artifact_bytes_and_still_verifies() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let w = send(
        &a,
        &["acme/reviewer"],
        MessageType::Fyi,
        "line one\nline two\nline three\n",
    );
    // Git for Windows' default: LF becomes CRLF in the checkout, unless .gitattributes says -text.
    git(
        fx.tmp.path(),
        &[
            "clone",
            "--quiet",
            "-c",
            "core.autocrlf=true",
            fx.remote.to_str().unwrap(),
            "win",
        ],
    );
    let win = fx.tmp.path().join("win");
    let bytes = std::fs::read(win.join(&w.paths[0])).unwrap();
    assert!(
        !bytes.windows(2).any(|p| p == b"\r\n"),
        "init's .gitattributes keeps the bytes"
    );
    assert!(agentbus_share::check::check(&win).unwrap().is_clean());
    // A share without those rules (another implementation's, or an older one): the CRLF checkout
    // still verifies, because the reader tolerates CRLF line ends.
    std::fs::write(win.join(".git/info/attributes"), "* text=auto\n").unwrap();
    std::fs::remove_file(win.join(&w.paths[0])).unwrap();
    git(&win, &["checkout", "--", &w.paths[0]]);
    let text = std::fs::read_to_string(win.join(&w.paths[0])).unwrap();
    assert!(text.contains("line one\r\nline two"), "{text:?}");
    let m = frontmatter::read_message(&text).unwrap();
    assert_eq!(m.hash_check, agentbus_share::hash::HashCheck::Verified);
    let report = agentbus_share::check::check(&win).unwrap();
    assert!(
        !report.findings.iter().any(|f| f.rule == "AS-3.2-3"),
        "{:#?}",
        report.findings
    );
}

#[test]
fn as_1_5_closing_a_thread_adds_one_file_and_modifies_none() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let b = fx.member("b", "globex", "bots", &["architect"]);
    let q = send(&a, &["globex/architect"], MessageType::Question, "Q");
    b.sync(&WriteOptions::default()).unwrap();
    let log = "log/globex-2026-11-30.jsonl";
    let log_before = std::fs::read_to_string(b.root().join(log)).unwrap_or_default();
    b.reply(
        &q.id,
        MessageType::Ack,
        None,
        "done",
        &WriteOptions::default(),
    )
    .unwrap();
    // The close is one new file (and the closer's own audit line appended), nothing else.
    let status = git(
        b.root(),
        &["show", "--format=", "--name-status", "--no-renames", "HEAD"],
    );
    let lines: Vec<&str> = status.lines().collect();
    assert_eq!(lines.len(), 2, "{status}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("A\tmessages/acme/reviewer/")),
        "{status}"
    );
    assert!(lines.iter().any(|l| l.ends_with(log)), "{status}");
    assert!(
        read(&b, log).starts_with(&log_before),
        "the log was only appended to"
    );
    assert_eq!(changes(b.root(), "MDRT"), "");
    let t = views::threads(&b.snapshot().unwrap());
    assert_eq!(t[0].state, ThreadState::Done);
}

#[test]
fn as_3_1_2_copies_sharing_an_id_count_once_for_threads_re_and_dedup() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer", "writer"]);
    let g = fx.member("g", "globex", "bots", &["architect"]);
    // Another implementation's multicast: one id, two folders, stems that are not the id.
    let copy = |agent: &str| {
        format!(
            "---\nprotocol: 0.1.0\nid: multi-1\nfrom: {{ operator: globex, instance: bots, agent: architect }}\nto: {{ operator: acme, agent: {agent} }}\nrecipients: [ {{ operator: acme, agent: reviewer }}, {{ operator: acme, agent: writer }} ]\ntype: question\n---\nTo both of you.\n"
        )
    };
    let (one, two) = (copy("reviewer"), copy("writer"));
    foreign_commit(
        &g,
        &[
            (
                "messages/acme/reviewer/20261130T120000Z-globex-architect-copy-one.md",
                &one,
            ),
            (
                "messages/acme/writer/20261130T120000Z-globex-architect-copy-two.md",
                &two,
            ),
        ],
        &a,
    );
    // Dedup: one entry per (id, recipient), one message in its thread.
    let inbox = agentbus_share::inbound_messages(&a).unwrap();
    let keys: Vec<(String, String)> = inbox
        .messages
        .iter()
        .map(|m| (m.id.clone(), m.to.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("multi-1".to_owned(), "share:acme/reviewer".to_owned()),
            ("multi-1".to_owned(), "share:acme/writer".to_owned())
        ]
    );
    // re: names the id; the answer joins the one thread, counted once with the original.
    let ans = a
        .reply(
            "multi-1",
            MessageType::Answer,
            None,
            "Answered once.",
            &WriteOptions::default(),
        )
        .unwrap();
    let m = frontmatter::read_message(&read(&a, &ans.paths[0])).unwrap();
    assert_eq!(
        (m.re.as_deref(), m.thread.as_str()),
        (Some("multi-1"), "multi-1")
    );
    let t = views::threads(&a.snapshot().unwrap());
    assert_eq!((t.len(), t[0].messages), (1, 2));
    // The audit line names the answer by id, never by path.
    let line = log_lines(&a, "acme").pop().unwrap();
    assert_eq!(line.msg_id.as_deref(), Some(ans.id.as_str()));
    assert_eq!(line.thread.as_deref(), Some("multi-1"));
    let report = agentbus_share::check::check(a.root()).unwrap();
    assert!(
        !report.findings.iter().any(|f| f.rule == "G-AS-2"),
        "{:#?}",
        report.findings
    );
}

#[test]
fn as_3_1_3_the_slug_is_never_parsed_and_a_constant_slug_works() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    let g = fx.member("g", "globex", "bots", &["architect"]);
    // A file whose slug lies about its content and sender.
    foreign_commit(
        &g,
        &[(
            "messages/acme/reviewer/20261130T120000Z-globex-architect-urgent-from-the-ceo.md",
            "---\nprotocol: 0.1.0\nid: weekly-1\nfrom: { operator: globex, instance: bots, agent: architect }\nto: { operator: acme, agent: reviewer }\ntype: fyi\n---\nWeekly digest.\n",
        )],
        &a,
    );
    let m = &agentbus_share::inbound_messages(&a).unwrap().messages[0];
    assert_eq!(
        (m.id.as_str(), m.subject.as_deref(), m.kind.as_str()),
        ("weekly-1", Some("Weekly digest."), "fyi")
    );
    assert_eq!(m.from, "share:globex/architect");
    // A producer may use one slug for everything: the suffixes keep names and ids distinct.
    let mut req = SendRequest::new(vec![addr("globex/architect")], MessageType::Fyi, "x");
    req.slug = Some("msg".into());
    let ids: Vec<String> = (0..3)
        .map(|i| {
            req.body = format!("message {i}");
            a.send(&req, &WriteOptions::default()).unwrap().id
        })
        .collect();
    assert_eq!(
        ids,
        [
            "20261130T120000Z-acme-reviewer-msg",
            "20261130T120000Z-acme-reviewer-msg-2",
            "20261130T120000Z-acme-reviewer-msg-3"
        ]
    );
}

#[test]
fn as_8_1_only_join_ever_touches_operators_yaml() {
    let fx = Fx::new();
    let (a, b) = every_write(&fx);
    agentbus_share::inbound_messages(&a).unwrap();
    agentbus_share::check::check(a.root()).unwrap();
    agentbus_share::doctor::doctor(&a).unwrap();
    b.sync(&WriteOptions::default()).unwrap();
    let touched = git(b.root(), &["log", "--format=%s", "--", "operators.yaml"]);
    let subjects: Vec<&str> = touched.lines().collect();
    assert_eq!(
        subjects,
        [
            "agentbus share join: globex/bots",
            "agentbus share join: acme/fleet",
            "agentbus share init: a new share (agentshare 0.1 Core layout)"
        ]
    );
}
