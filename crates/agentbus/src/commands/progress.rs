//! Progress of long transfers: a bar on stderr when stderr is a terminal, nothing when it is not
//! (piped, redirected, or under an agent's tool call).

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The progress of a set of file transfers.
pub struct Transfer {
    bar: Option<ProgressBar>,
    files: usize,
}

impl Transfer {
    /// A display for `files` transfers; hidden unless stderr is a terminal.
    pub fn new(files: usize) -> Transfer {
        let bar = (files > 0 && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{prefix} {wide_msg} {bytes}/{total_bytes} {spinner}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Transfer { bar, files }
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

impl agentbus_client::agent::UploadProgress for Transfer {
    fn start(&self, i: usize, name: &str, bytes: u64) {
        if let Some(b) = &self.bar {
            b.set_prefix(format!("[{}/{}]", i + 1, self.files));
            b.set_message(name.to_owned());
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
