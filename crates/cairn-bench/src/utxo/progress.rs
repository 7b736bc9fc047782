//! Progress of a phase on stderr: a bar while it runs, and a line each time another tenth of it
//! is done.
//!
//! Owns: [`Progress`]. Must never touch: stdout, which carries the results.
//!
//! The bar is `indicatif`'s, as the `cairn` command's: drawn at most four times a second, and
//! only when stderr is a terminal. The tenth lines stay our own text, printed above the bar on a
//! terminal and alone otherwise: they are what a benchmark's log keeps (throughput as the phase
//! went, which the benchmark notes quote), and a hidden bar draws nothing.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Shows the progress of `total` units of work on stderr.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    tenths_reported: u64,
    start: Instant,
    bar: ProgressBar,
}

impl Progress {
    /// A reporter for `total` units of work, named `label` in its lines.
    pub fn new(label: impl Into<String>, unit: &'static str, total: u64) -> Progress {
        let label = label.into();
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(4));
        let template =
            format!("{{prefix}}: [{{bar:30}}] {{pos}}/{{len}} {unit}, {{elapsed}}, eta {{eta}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.clone());
        Progress {
            label,
            unit,
            total,
            tenths_reported: 0,
            start: Instant::now(),
            bar,
        }
    }

    /// Records that `done` units (of `ops_per_unit` operations each) are complete.
    pub fn update(&mut self, done: u64, ops_per_unit: u64) {
        self.bar.set_position(done);
        let tenths = done * 10 / self.total.max(1);
        if tenths <= self.tenths_reported {
            return;
        }
        self.tenths_reported = tenths;
        let seconds = self.start.elapsed().as_secs_f64();
        let line = format!(
            "{}: {:>3}% ({done}/{} {}, {:.0} ops/s, {seconds:.1} s)",
            self.label,
            tenths * 10,
            self.total,
            self.unit,
            (done * ops_per_unit) as f64 / seconds.max(1e-9),
        );
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Drop for Progress {
    /// The bar goes; the lines stay.
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_tenth_once() {
        let mut progress = Progress::new("test", "batches", 20);
        for done in 1..=20 {
            progress.update(done, 3);
        }
        assert_eq!(progress.tenths_reported, 10);
        assert_eq!(progress.bar.position(), 20);
        let mut empty = Progress::new("empty", "entries", 0);
        empty.update(0, 1);
        assert_eq!(empty.tenths_reported, 0);
    }
}
