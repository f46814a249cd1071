//! What a terminal shows: the binary runs with stderr on a
//! pseudo-terminal the test opened ([`crate::pty`]), against a real gateway on loopback, while
//! the test drives the other side; the assertions are on the text a person would see.

use crate::gateway_cli::{Gw, Machine, pair};
use crate::pty;

/// The first `tsk_…` word of `text`.
fn task_id(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ')')
        .find(|w| w.starts_with("tsk_"))
        .unwrap()
        .to_owned()
}

#[test]
fn delegate_wait_on_a_terminal_redraws_one_line_with_state_percent_and_last_note() {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let mut term = pty::spawn(
        bot.cmd(&[
            "delegate",
            &reviewer.address(),
            "--capability",
            "code.review",
            "--wait",
            "2m",
            "Review it.",
        ]),
        false,
    );
    term.wait_for(20, "delegated tsk_");
    let task = task_id(&term.text());
    reviewer.ok(&["--json", "sidecar", "--once"]);
    reviewer.ok(&["--json", "accept", &task, "--note", "on it"]);
    let accepted = format!("task {task}: accepted - on it");
    term.wait_for(20, &accepted);
    let progress = |percent: &str, note: &str| {
        reviewer.ok(&[
            "--json",
            "progress",
            &task,
            "--percent",
            percent,
            "--stage",
            "static-analysis",
            "--note",
            note,
        ]);
    };
    progress("40", "one suspicious unlock");
    let forty = format!("task {task}: in_progress 40% (static-analysis) - one suspicious unlock");
    term.wait_for(20, &forty);
    // The worker's words reach the terminal as text, never as its controls.
    progress("75", "two files left \x1b[2J");
    let seventy_five = format!("task {task}: in_progress 75% (static-analysis) - two files left");
    term.wait_for(20, &seventy_five);
    reviewer.ok(&["--json", "complete", &task, "--summary", "fine"]);
    assert_eq!(term.finish(), Some(0), "{}", term.text());

    // One line redrawn in place: no newline between the states, only carriage returns and the
    // clear-line sequence of a progress line (without a terminal each change is its own line).
    let text = term.text();
    let (from, to) = (
        text.find(&accepted).unwrap(),
        text.rfind(&seventy_five).unwrap(),
    );
    assert!(from < to && !text[from..to].contains('\n'), "{text:?}");
    let raw = String::from_utf8_lossy(&term.raw);
    assert!(raw.contains("\x1b[2K"), "{raw:?}");
    assert!(
        !raw.contains("\x1b[2J"),
        "the note's escape reached the terminal: {raw:?}"
    );
    // The line is cleared when the wait ends: the last thing drawn is not the progress line.
    let last = term.pieces().last().cloned().unwrap_or_default();
    assert!(!last.contains("in_progress"), "{last:?}");
}

/// A 4 MiB attachment in `m`'s home.
fn big_file(m: &Machine) -> std::path::PathBuf {
    let path = m.home().join("big.bin");
    let mut bytes = Vec::with_capacity(4 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while bytes.len() < 4 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A gateway, a requester holding [`big_file`] and a worker that takes code reviews.
fn with_big_file() -> (Gw, Machine, Machine, std::path::PathBuf) {
    let gw = Gw::start();
    let (bot, reviewer) = pair(&gw, "release-bot", "reviewer");
    reviewer.ok(&["--json", "card", "edit", "--capability", "code.review@1"]);
    let file = big_file(&bot);
    (gw, bot, reviewer, file)
}

/// `delegate --attach big.bin` to `to`, with the global flags `flags` first.
fn delegate_attach<'a>(to: &'a str, file: &'a str, flags: &[&'a str]) -> Vec<&'a str> {
    let mut args = flags.to_vec();
    args.extend([
        "delegate",
        to,
        "--capability",
        "code.review",
        "--new-task",
        "--attach",
        file,
        "Review the attached build.",
    ]);
    args
}

/// Whether `text` shows a bar of `verb` (`upload`, `download`) for big.bin.
fn shows_bar(term: &pty::OnPty, verb: &str) -> bool {
    term.pieces()
        .iter()
        .any(|p| p.contains(&format!("{verb} 1/1 big.bin")) && p.contains("/4.00 MiB"))
}

#[test]
fn attachments_show_one_kind_of_bar_up_and_down_on_a_terminal_and_none_with_q() {
    let (_gw, bot, reviewer, file) = with_big_file();
    let (to, path) = (reviewer.address(), file.to_str().unwrap().to_owned());

    // The upload: a bar on stderr while it runs, cleared when it is over.
    let mut up = pty::spawn(bot.cmd(&delegate_attach(&to, &path, &[])), false);
    assert_eq!(up.finish(), Some(0), "{}", up.text());
    assert!(shows_bar(&up, "upload"), "{:?}", up.pieces());
    // The download, on the receive path: the same bar, the other way.
    let mut down = pty::spawn(reviewer.cmd(&["sidecar", "--once"]), false);
    assert_eq!(down.finish(), Some(0), "{}", down.text());
    assert!(shows_bar(&down, "download"), "{:?}", down.pieces());
    let saved = reviewer.stored()[0]["attachments"][0]["path"]
        .as_str()
        .map(std::fs::read)
        .unwrap()
        .unwrap();
    assert!(saved == std::fs::read(&file).unwrap());

    // With -q, on the same terminal: no bar either way.
    let mut up = pty::spawn(bot.cmd(&delegate_attach(&to, &path, &["-q"])), false);
    assert_eq!(up.finish(), Some(0), "{}", up.text());
    assert!(!up.text().contains("MiB"), "{:?}", up.text());
    let mut down = pty::spawn(reviewer.cmd(&["-q", "sidecar", "--once"]), false);
    assert_eq!(down.finish(), Some(0), "{}", down.text());
    assert!(!down.text().contains("MiB"), "{:?}", down.text());
    assert_eq!(reviewer.stored().len(), 2);
}

#[test]
fn without_a_terminal_no_bar_bytes_reach_stderr_either_way() {
    let (_gw, bot, reviewer, file) = with_big_file();
    let (to, path) = (reviewer.address(), file.to_str().unwrap().to_owned());
    let up = bot.run(&delegate_attach(&to, &path, &[]));
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let down = reviewer.run(&["sidecar", "--once"]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    for out in [&up, &down] {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !err.contains('\x1b') && !err.contains("MiB") && !err.contains('\r'),
            "{err:?}"
        );
    }
    assert_eq!(
        reviewer.stored()[0]["attachments"][0]["path"]
            .as_str()
            .map(|p| std::fs::read(p).unwrap().len()),
        Some(4 << 20)
    );
}
