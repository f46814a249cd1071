//! §11 in practice: `doctor`'s warnings and `--sign`.

use agentbus_share::doctor::{self, Level, Note};
use agentbus_share::frontmatter::MessageType;
use agentbus_share::{JoinRequest, SendRequest, WriteOptions};

use crate::{Fx, addr, git, send};

fn warns(notes: &[Note], needle: &str) -> bool {
    notes
        .iter()
        .any(|n| n.level == Level::Warn && n.message.contains(needle))
}

#[test]
fn as_11_1_doctor_warns_when_the_remote_allows_force_pushes() {
    let open = Fx::with_protection(false);
    let a = open.member("a", "acme", "fleet", &["reviewer"]);
    let notes = doctor::doctor(&a).unwrap();
    assert!(warns(&notes, "allows force-pushes"), "{notes:#?}");
    let closed = Fx::new();
    let b = closed.member("b", "acme", "fleet", &["reviewer"]);
    let notes = doctor::doctor(&b).unwrap();
    assert!(!warns(&notes, "allows force-pushes"), "{notes:#?}");
    assert!(
        notes
            .iter()
            .any(|n| n.level == Level::Ok && n.message.contains("refuses non-fast-forward"))
    );
    // A hosted remote cannot be inspected from a clone: doctor says it cannot tell.
    git(
        b.root(),
        &[
            "remote",
            "set-url",
            "origin",
            "https://git.example.org/share.git",
        ],
    );
    let notes = doctor::doctor(&b).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.level == Level::Unknown && n.rule == "AS-11-1")
    );
}

#[test]
fn as_11_2_doctor_flags_unsigned_commits_and_unregistered_authors() {
    let fx = Fx::new();
    let a = fx.member("a", "acme", "fleet", &["reviewer"]);
    send(&a, &["acme/reviewer"], MessageType::Fyi, "x");
    let notes = doctor::doctor(&a).unwrap();
    assert!(warns(&notes, "unsigned"), "{notes:#?}");
    // The fixture registers author@example.org; a commit by someone else is flagged.
    std::fs::write(a.root().join("README.md"), "changed by a stranger\n").unwrap();
    git(
        a.root(),
        &[
            "-c",
            "user.email=mallory@example.net",
            "commit",
            "-qam",
            "x",
            "--author",
            "Mallory <mallory@example.net>",
        ],
    );
    a.sync(&WriteOptions::default()).unwrap();
    let notes = doctor::doctor(&a).unwrap();
    assert!(warns(&notes, "mallory@example.net"), "{notes:#?}");
    assert!(!warns(&notes, "author@example.org"), "{notes:#?}");
}

#[test]
fn as_11_2_sign_signs_commits_with_the_users_git_signing_setup() {
    let fx = Fx::new();
    let dir = fx.clone("signer");
    let key = fx.tmp.path().join("signing-key");
    let out = std::process::Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "test",
            "-f",
            key.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git(&dir, &["config", "gpg.format", "ssh"]);
    git(&dir, &["config", "user.signingkey", key.to_str().unwrap()]);
    let share = fx.share(&dir);
    share
        .join(
            &JoinRequest {
                operator: "acme".into(),
                instance: "fleet".into(),
                agents: vec!["reviewer".into()],
                emails: vec!["author@example.org".into()],
                sign: true,
            },
            &WriteOptions::default(),
        )
        .unwrap();
    share
        .send(
            &SendRequest::new(vec![addr("acme/reviewer")], MessageType::Fyi, "signed"),
            &WriteOptions::default(),
        )
        .unwrap();
    for rev in ["HEAD", "HEAD~1"] {
        let raw = git(&dir, &["cat-file", "commit", rev]);
        assert!(
            raw.contains("gpgsig -----BEGIN SSH SIGNATURE-----"),
            "{rev}: {raw}"
        );
    }
    let notes = doctor::doctor(&share).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.level == Level::Ok && n.message.contains("signs its commits"))
    );
}
