//! Progress of long transfers: a bar on stderr when stderr is a terminal, nothing when it is not
//! (piped, redirected, or under an agent's tool call).

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::printer::Verbosity;

/// The progress of a set of attachment transfers, one direction at a time: the one display for
/// uploads (`send`, `delegate`, `complete`, `answer --attach`) and for downloads (the receive path).
pub struct Transfer {
    bar: Option<ProgressBar>,
    files: usize,
    verb: &'static str,
}

impl Transfer {
    /// A display for `files` uploads, at `verbosity`.
    pub fn uploads(files: usize, verbosity: Verbosity) -> Transfer {
        Transfer::new(files, "upload", verbosity)
    }

    /// A display for `files` downloads, at `verbosity`.
    pub fn downloads(files: usize, verbosity: Verbosity) -> Transfer {
        Transfer::new(files, "download", verbosity)
    }

    /// Hidden unless stderr is a terminal, and with `-q`.
    fn new(files: usize, verb: &'static str, verbosity: Verbosity) -> Transfer {
        let shown = verbosity > Verbosity::Quiet;
        let bar = (files > 0 && shown && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{prefix} {wide_msg} {bytes}/{total_bytes} {spinner}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Transfer { bar, files, verb }
    }
}

/// The bar is cleared when the transfers are over, whichever way they ended.
impl Drop for Transfer {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl agentbus_client::agent::TransferProgress for Transfer {
    fn start(&self, i: usize, name: &str, bytes: u64) {
        if let Some(b) = &self.bar {
            b.set_prefix(format!("{} {}/{}", self.verb, i + 1, self.files));
            // A received attachment's name is the sender's text: one line, no terminal controls.
            b.set_message(agentbus_protocol::text::for_terminal_line(name).into_owned());
            b.set_length(bytes);
            b.set_position(0);
        }
    }

    fn counter(&self) -> Option<agentbus_client::http::Progress> {
        let bar = self.bar.clone()?;
        Some(std::sync::Arc::new(move |n| bar.inc(n)))
    }

    fn done(&self) {
        if let Some(b) = &self.bar {
            b.set_position(b.length().unwrap_or(0));
        }
    }
}

/// A task being waited for (`delegate --wait`), as it goes: on a terminal one progress line
/// (indicatif) with the task's state, percent, stage and last note, redrawn as news arrives;
/// otherwise one line on stderr for each change of those. Nothing with `--json` or `-q`.
pub struct TaskLine {
    task_id: String,
    bar: Option<ProgressBar>,
    printer: crate::printer::Printer,
    state: String,
    percent: Option<f64>,
    stage: Option<String>,
    note: Option<String>,
    said: String,
}

impl TaskLine {
    /// A display of task `task_id` for `printer`'s mode.
    pub fn new(task_id: &str, printer: &crate::printer::Printer) -> TaskLine {
        let shown = !printer.is_json() && printer.verbosity() > Verbosity::Quiet;
        let terminal = std::io::stderr().is_terminal();
        let bar = (shown && terminal).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {wide_msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        TaskLine {
            task_id: task_id.to_owned(),
            bar,
            printer: *printer,
            state: "submitted".into(),
            percent: None,
            stage: None,
            note: None,
            said: String::new(),
        }
    }

    /// Takes what the wait learned and shows it if it changed anything.
    pub fn news(&mut self, news: agentbus_client::agent::TaskNews<'_>) {
        use agentbus_client::agent::TaskNews;
        use agentbus_protocol::schema::KnownType;
        match news {
            TaskNews::Record(task) => {
                self.state = task.state.clone();
            }
            TaskNews::Message(r) => {
                let data = r.envelope.get("data").cloned().unwrap_or_default();
                let text = |k: &str| data[k].as_str().map(str::to_owned);
                match r.attr("type") {
                    Some(t) if t == KnownType::TaskAccept.as_str() => {
                        self.state = "accepted".into();
                        self.note = text("note").or(self.note.take());
                    }
                    Some(t) if t == KnownType::TaskProgress.as_str() => {
                        self.state = "in_progress".into();
                        self.percent = data["percent"].as_f64().or(self.percent);
                        self.stage = text("stage").or(self.stage.take());
                        self.note = text("note").or(self.note.take());
                    }
                    Some(t) if t == KnownType::TaskNeedsInput.as_str() => {
                        self.state = "needs_input".into();
                        self.note = text("question").map(|q| {
                            format!(
                                "asks: {q}; now: agentbus answer {} \"<your answer>\"",
                                self.task_id
                            )
                        });
                    }
                    _ => {}
                }
            }
        }
        self.show();
    }

    /// The line as it stands.
    fn text(&self) -> String {
        let mut out = format!("task {}: {}", self.task_id, self.state);
        if let Some(p) = self.percent {
            out.push_str(&format!(" {p}%"));
        }
        if let Some(s) = &self.stage {
            out.push_str(&format!(" ({s})"));
        }
        if let Some(n) = &self.note {
            out.push_str(" - ");
            out.push_str(n);
        }
        // Notes are the worker's words: one line, no terminal controls.
        agentbus_protocol::text::for_terminal_line(&out).into_owned()
    }

    fn show(&mut self) {
        let text = self.text();
        if text == self.said {
            return;
        }
        if let Some(bar) = &self.bar {
            bar.set_message(text.clone());
        } else {
            // Commentary: on stderr, human mode only, not with -q.
            self.printer.commentary(&text);
        }
        self.said = text;
    }

    /// The task's state as last learned.
    pub fn state(&self) -> &str {
        &self.state
    }
}

/// The line is cleared when the wait ends, whichever way it ended.
impl Drop for TaskLine {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
