//! A pseudo-terminal for the binary's terminal output: the test opens the pair itself (rustix, no
//! `script`), hands the slave side to the child as stderr (and stdout when asked), reads the
//! master side on a thread, and looks at what a person would see once the escape sequences are
//! gone.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use rustix::termios::{Winsize, tcsetwinsize};

/// The terminal's width: wide enough that no line the tests look for is cut.
const COLUMNS: u16 = 200;

/// A child running with stderr (and maybe stdout) on a terminal, and everything it drew.
pub struct OnPty {
    /// The child.
    pub child: Child,
    chunks: Receiver<Vec<u8>>,
    /// Every byte written to the terminal so far.
    pub raw: Vec<u8>,
}

/// Spawns `cmd` with stderr on a fresh pseudo-terminal, stdout too when `stdout` is set.
pub fn spawn(mut cmd: Command, stdout: bool) -> OnPty {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    tcsetwinsize(
        &slave,
        Winsize {
            ws_row: 40,
            ws_col: COLUMNS,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )
    .unwrap();
    cmd.stderr(Stdio::from(slave.try_clone().unwrap()));
    if stdout {
        cmd.stdout(Stdio::from(slave.try_clone().unwrap()));
    }
    let child = cmd.spawn().unwrap();
    // Only the child holds the slave now, so the master reads EOF (EIO) once it has exited.
    drop(slave);
    let (tx, chunks) = channel();
    let mut master = File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    OnPty {
        child,
        chunks,
        raw: Vec::new(),
    }
}

impl OnPty {
    /// Reads until what was shown contains `what`, failing after `secs`.
    pub fn wait_for(&mut self, secs: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.text().contains(what) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(c) => self.raw.extend(c),
                Err(_) => panic!(
                    "the terminal never showed {what:?}; it showed:\n{}",
                    self.text()
                ),
            }
        }
    }

    /// Waits for the child's exit and reads the terminal to its end; the exit code.
    pub fn finish(&mut self) -> Option<i32> {
        let status = self.child.wait().unwrap();
        while let Ok(c) = self.chunks.recv_timeout(Duration::from_secs(30)) {
            self.raw.extend(c);
        }
        status.code()
    }

    /// What was shown, escape sequences removed.
    pub fn text(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(&self.raw))
    }

    /// What was shown as the pieces of line between carriage returns and newlines: each redraw
    /// of a progress line is one piece.
    pub fn pieces(&self) -> Vec<String> {
        self.text()
            .split(['\r', '\n'])
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for OnPty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` without its escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL/ST`, and two-byte
/// `ESC x`); carriage returns and newlines stay.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('[') => {
                for c in it.by_ref() {
                    if ('\x40'..='\x7e').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = it.next() {
                    if c == '\x07' || (c == '\x1b' && it.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn strip_ansi_removes_what_a_terminal_interprets_and_keeps_the_text() {
    assert_eq!(
        strip_ansi("\x1b[2K\r\x1b[1A\x1b[32m⠁ task: accepted\x1b[0m 1s\x1b]0;title\x07!"),
        "\r⠁ task: accepted 1s!"
    );
}
