//! The progress bar of a run: on standard error, on rank 0, and only when standard error is a
//! terminal (a run whose output goes to a file or a pipe prints no bar).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar counting the rows of a run.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `rows` rows labelled `what`, where standard error is a terminal; `None` otherwise.
    pub fn on_terminal(rows: u64, what: &str) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        Some(Self::to(ProgressDrawTarget::stderr(), rows, what))
    }

    /// A bar of `rows` rows labelled `what`, drawn to `target`.
    pub fn to(target: ProgressDrawTarget, rows: u64, what: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(rows), target);
        let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} rows, {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        Progress { bar }
    }

    /// One row done, of `size` bytes.
    pub fn tick(&self, size: usize) {
        self.bar.set_message(format!("{size} B"));
        self.bar.inc(1);
    }

    /// Rows counted so far.
    pub fn done(&self) -> u64 {
        self.bar.position()
    }

    /// Run `f` (which writes to the terminal) with the bar hidden.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Remove the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rows_and_stays_off_a_pipe() {
        let p = Progress::to(ProgressDrawTarget::hidden(), 3, "allreduce");
        p.tick(8);
        assert_eq!(p.suspend(|| 7), 7);
        p.tick(16);
        assert_eq!(p.done(), 2);
        p.finish();
        // Under `cargo test` standard error is captured, not a terminal.
        if !std::io::stderr().is_terminal() {
            assert!(Progress::on_terminal(3, "x").is_none());
        }
    }
}
