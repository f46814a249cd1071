//! `init` on the README's own recipe and around it (§2 AS-2-1): the share lands on the branch the
//! remote's clones check out, with its README and `.gitattributes`; `init` resumes after a failure
//! and changes nothing on a share that exists; a remote whose HEAD names no branch it has is
//! refused, and `doctor` flags the unrelated histories an old `init` left behind.

use std::path::Path;

use agentbus_share::doctor::{self, Level};
use agentbus_share::init::{self, InitOutcome};
use agentbus_share::{JoinRequest, ShareError, WriteOptions};

use crate::{Fx, git, join_request};

fn bare(dir: &Path, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["init", "--quiet", "--bare"];
    args.extend_from_slice(extra);
    args.push(name);
    git(dir, &args);
    dir.join(name).to_string_lossy().into_owned()
}

fn join_req(operator: &str) -> JoinRequest {
    join_request(operator, "fleet", &["bot"])
}

#[test]
fn as_2_1_init_pushes_to_the_branch_the_remote_head_names_and_clones_see_the_share() {
    let fx = Fx::new();
    // `git init --bare` with no configuration: git's default branch, master.
    let head = git(&fx.remote, &["symbolic-ref", "HEAD"]);
    assert_eq!(head.trim(), "refs/heads/master");
    let clone = fx.clone("fresh");
    for f in ["README.md", ".gitattributes", "operators.yaml"] {
        assert!(clone.join(f).exists(), "{f} missing from a fresh clone");
    }
    assert_eq!(
        git(&clone, &["symbolic-ref", "--short", "HEAD"]).trim(),
        "master"
    );
    // A join there extends the one history; check and doctor have nothing to say about it.
    let share = fx.share(&clone);
    share
        .join(&join_req("acme"), &WriteOptions::default())
        .unwrap();
    assert_eq!(
        git(&clone, &["rev-list", "--max-parents=0", "HEAD"])
            .lines()
            .count(),
        1
    );
    let report = agentbus_share::check::check(&clone).unwrap();
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
    let notes = doctor::doctor(&share).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.rule == "AS-2-1" && n.level == Level::Ok),
        "{notes:#?}"
    );
    // Another default branch on the remote is followed just the same.
    let trunk = bare(fx.tmp.path(), "trunk.git", &["--initial-branch=trunk"]);
    let r = init::init(&fx.tmp.path().join("t"), Some(&trunk)).unwrap();
    assert_eq!(
        (r.branch.as_str(), r.outcome),
        ("trunk", InitOutcome::Created)
    );
    git(fx.tmp.path(), &["clone", "--quiet", &trunk, "t2"]);
    assert!(fx.tmp.path().join("t2/.gitattributes").exists());
}

#[test]
fn as_2_1_init_is_idempotent_and_resumes_after_a_failure() {
    let fx = Fx::new();
    let admin = fx.tmp.path().join("admin");
    let commits = || git(&fx.remote, &["rev-list", "--count", "HEAD"]);
    let before = commits();
    // On the share it made: nothing changes, and it says so.
    let r = init::init(&admin, Some(fx.remote.to_str().unwrap())).unwrap();
    assert_eq!(r.outcome, InitOutcome::Existing);
    // Into a new folder on a remote that holds the share: a clone, nothing created.
    let r = init::init(
        &fx.tmp.path().join("again"),
        Some(fx.remote.to_str().unwrap()),
    )
    .unwrap();
    assert_eq!(r.outcome, InitOutcome::Existing);
    assert_eq!(commits(), before);

    // A push that fails (a hook refuses it) leaves nothing behind; a run after the fix completes.
    let remote = bare(fx.tmp.path(), "hooked.git", &[]);
    let hook = Path::new(&remote).join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\necho 'closed for maintenance' >&2\nexit 1\n",
    )
    .unwrap();
    make_executable(&hook);
    let dir = fx.tmp.path().join("hooked");
    let err = init::init(&dir, Some(&remote)).unwrap_err();
    assert!(matches!(err, ShareError::PushRefused(_)), "{err}");
    assert!(!dir.exists(), "a failed init leaves no half-made checkout");
    std::fs::remove_file(&hook).unwrap();
    let r = init::init(&dir, Some(&remote)).unwrap();
    assert_eq!((r.outcome, r.pushed), (InitOutcome::Created, true));

    // A checkout whose first commit never reached the remote: the next run pushes it.
    let remote = bare(fx.tmp.path(), "later.git", &[]);
    let dir = fx.tmp.path().join("offline");
    init::init(&dir, None).unwrap();
    git(&dir, &["branch", "-m", "master"]);
    let r = init::init(&dir, Some(&remote)).unwrap();
    assert_eq!(
        (r.outcome, r.branch.as_str()),
        (InitOutcome::Resumed, "master")
    );

    // Files an interrupted run left before committing are taken over; anything else is refused.
    let dir = fx.tmp.path().join("leftovers");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(dir.join("README.md"), init::SHARE_README).unwrap();
    assert_eq!(
        init::init(&dir, None).unwrap().outcome,
        InitOutcome::Created
    );
    let dir = fx.tmp.path().join("foreign");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    assert!(matches!(
        init::init(&dir, None),
        Err(ShareError::NotEmpty(_))
    ));
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "mine"
    );
}

#[cfg(unix)]
fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The state an old `init` left: the share pushed to `main` while the remote's HEAD names the
/// unborn `master`, so a clone checks out nothing.
fn broken_remote(fx: &Fx) -> String {
    let remote = bare(fx.tmp.path(), "broken.git", &[]);
    let dir = fx.tmp.path().join("old-admin");
    init::init(&dir, None).unwrap();
    git(&dir, &["remote", "add", "origin", &remote]);
    git(&dir, &["push", "--quiet", "origin", "HEAD:refs/heads/main"]);
    remote
}

#[test]
fn as_2_1_a_remote_whose_head_names_no_branch_it_has_is_refused_with_the_fix() {
    let fx = Fx::new();
    let remote = broken_remote(&fx);
    // init on it says what is wrong instead of calling it a new share.
    let err = init::init(&fx.tmp.path().join("x"), Some(&remote)).unwrap_err();
    assert!(
        matches!(err, ShareError::NoShareBranch { ref branch, ref others } if branch == "master" && others == &["main"]),
        "{err}"
    );
    // A clone checks out nothing; joining there is refused rather than starting a second root.
    git(fx.tmp.path(), &["clone", "--quiet", &remote, "clone"]);
    let share = fx.share(&fx.tmp.path().join("clone"));
    let err = share
        .join(&join_req("acme"), &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(err, ShareError::NoShareBranch { .. }), "{err}");
    assert_eq!(
        git(Path::new(&remote), &["for-each-ref", "--format=%(refname)"]).trim(),
        "refs/heads/main"
    );
}

#[test]
fn doctor_flags_several_root_commits_and_a_checkout_off_the_remote_head() {
    let fx = Fx::new();
    let remote = broken_remote(&fx);
    // What an old join did in a clone that checked out nothing: a second root, on master.
    git(fx.tmp.path(), &["clone", "--quiet", &remote, "old-join"]);
    let dir = fx.tmp.path().join("old-join");
    std::fs::write(
        dir.join("operators.yaml"),
        "acme:\n  instances:\n    f:\n      agents: [bot]\n",
    )
    .unwrap();
    git(&dir, &["add", "operators.yaml"]);
    git(&dir, &["commit", "-qm", "join"]);
    git(
        &dir,
        &["push", "--quiet", "origin", "HEAD:refs/heads/master"],
    );
    git(&dir, &["fetch", "--quiet"]);
    let notes = doctor::doctor(&fx.share(&dir)).unwrap();
    assert!(
        notes.iter().any(|n| n.level == Level::Warn
            && n.rule == "AS-2-1"
            && n.message.contains("2 unrelated histories")),
        "{notes:#?}"
    );
    // A checkout of main, which the remote's HEAD does not name, is told so.
    git(&dir, &["checkout", "--quiet", "-b", "main", "origin/main"]);
    let notes = doctor::doctor(&fx.share(&dir)).unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.level == Level::Warn && n.message.contains("HEAD names master")),
        "{notes:#?}"
    );
    // check on master warns that it lacks the union merge and the -text rules.
    git(&dir, &["checkout", "--quiet", "master"]);
    let report = agentbus_share::check::check(&dir).unwrap();
    assert!(
        report.findings.iter().any(|f| f.rule == "G-AS-4"),
        "{:#?}",
        report.findings
    );
}
