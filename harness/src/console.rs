//! Standard output for everything adgauge prints as it runs: the printing sinks, the progress
//! bar and the history commands. Lines go above the progress bar, and a closed pipe
//! (`adgauge run | head`) silences the console instead of ending the run, so results still reach
//! the history.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Standard output shared by the printing sinks and the progress bar.
#[derive(Clone)]
pub struct Console {
    pub(crate) bar: ProgressBar,
    closed: Arc<AtomicBool>,
}

impl Console {
    /// A console whose progress bar is drawn only when stderr is a terminal and not `quiet`.
    pub fn new(len: usize, quiet: bool) -> Console {
        let bar = ProgressBar::new(len as u64);
        if quiet || !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        } else if let Ok(style) =
            ProgressStyle::with_template("{bar:30} {pos}/{len} cases  elapsed {elapsed}  eta {eta}  {msg}")
        {
            bar.set_style(style);
        }
        Console { bar, closed: Arc::new(AtomicBool::new(false)) }
    }

    /// Prints one line (flushed); after a write error (a closed pipe) prints nothing more.
    /// Control characters but newline and tab are printed escaped (`\u{1b}`): a tool's stderr
    /// in a row's message never drives the terminal (`adgauge_reports::text`).
    pub fn line(&self, text: &str) {
        let text = adgauge_reports::text::escape_controls(text, &['\n', '\t']);
        if self.closed.load(Ordering::Relaxed) {
            return;
        }
        self.bar.suspend(|| {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
                self.closed.store(true, Ordering::Relaxed);
            }
        });
    }
}
