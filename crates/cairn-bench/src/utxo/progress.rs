//! Progress lines on stderr, one each time another tenth of a phase is done.
//!
//! Owns: [`Progress`]. Must never touch: stdout, which carries the results.

use std::time::Instant;

/// Prints a line to stderr each time another tenth of the work is done.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    tenths_reported: u64,
    start: Instant,
}

impl Progress {
    /// A reporter for `total` units of work, named `label` in its lines.
    pub fn new(label: impl Into<String>, unit: &'static str, total: u64) -> Progress {
        Progress {
            label: label.into(),
            unit,
            total,
            tenths_reported: 0,
            start: Instant::now(),
        }
    }

    /// Records that `done` units (of `ops_per_unit` operations each) are complete.
    pub fn update(&mut self, done: u64, ops_per_unit: u64) {
        let tenths = done * 10 / self.total.max(1);
        if tenths <= self.tenths_reported {
            return;
        }
        self.tenths_reported = tenths;
        let seconds = self.start.elapsed().as_secs_f64();
        eprintln!(
            "{}: {:>3}% ({done}/{} {}, {:.0} ops/s, {seconds:.1} s)",
            self.label,
            tenths * 10,
            self.total,
            self.unit,
            (done * ops_per_unit) as f64 / seconds.max(1e-9),
        );
    }
}
