//! The sections of `README.md` about what happened inside each run: its throughput over time
//! (a chart per mode, drawn by [`super::svg`], and a table of each series' lowest, median and
//! last window), and the engines' merge or compaction work per level over the timed batches.
//!
//! Owns: the text of those two sections and which modes get a chart ([`Report::modes_over_time`]).
//! Must never touch: files (the caller writes them), or the series' windows (the run chose them:
//! [`crate::utxo::throughput`]).

use crate::cli::RunMode;
use crate::record::RunRecord;
use crate::report::format::{thousands, trimmed};
use crate::report::table::{Align, Markdown};
use crate::report::{throughput_file, Report};
use crate::stats::median;

/// Operations of the update of one batch (256 inserts and 256 deletes).
const UPDATES_PER_BATCH: f64 = 512.0;

impl Report {
    /// The modes, in report order, of which at least one run recorded a throughput series.
    pub(super) fn modes_over_time(&self) -> Vec<String> {
        let mut modes = self.modes.clone();
        modes.retain(|mode| self.runs_over_time(mode).next().is_some());
        modes
    }

    /// The runs of `mode` that recorded a throughput series, in engine order.
    pub(super) fn runs_over_time<'a>(
        &'a self,
        mode: &'a str,
    ) -> impl Iterator<Item = &'a RunRecord> + 'a {
        self.rows
            .iter()
            .map(|row| &row.run)
            .filter(move |run| run.mode == mode && !run.throughput.is_empty())
    }

    /// "Throughput over time": what a point is, the window of each run, a chart per mode and
    /// a table of each series in short. Empty when no run recorded a series (older records).
    pub(super) fn throughput_section(&self) -> String {
        let modes = self.modes_over_time();
        if modes.is_empty() {
            return String::new();
        }
        let mut lines = vec![
            "## Throughput over time\n".to_string(),
            "Each point is the ops/s of one window of a run's timed batches (the operations of \
             the batches that ended in it, over its length), drawn at the window's middle: \
             windows of 60 s for a run of 10 minutes or more, otherwise a twentieth of the run \
             (at least 1 s); a last window shorter than half a window is joined to the one \
             before it.\n"
                .to_string(),
        ];
        for mode in &modes {
            let windows: Vec<String> = self
                .runs_over_time(mode)
                .map(|run| {
                    let window = run
                        .throughput_window_s
                        .map_or("?".to_string(), |w| format!("{} s", trimmed(w, 1)));
                    format!("{} {window}", run.engine)
                })
                .collect();
            lines.push(format!(
                "**{mode}**, windows: {}.\n\n![ops/s against time, {mode}]({})\n",
                windows.join(", "),
                throughput_file(mode)
            ));
        }
        let (l, r) = (Align::Left, Align::Right);
        let mut table = Markdown::new(&[
            ("engine", l),
            ("mode", l),
            ("window s", r),
            ("windows", r),
            ("lowest ops/s", r),
            ("median ops/s", r),
            ("last ops/s", r),
            ("last / first", r),
        ]);
        for mode in &modes {
            for run in self.runs_over_time(mode) {
                table.row(series_cells(run));
            }
        }
        lines.push(table.render());
        lines.join("\n")
    }

    /// "Merge work per level": for each run whose engine counts it, the work per level over the
    /// timed batches. Empty when no run has it.
    pub(super) fn level_work_section(&self) -> String {
        let runs: Vec<&RunRecord> = self
            .rows
            .iter()
            .map(|row| &row.run)
            .filter(|run| run.level_work.is_some())
            .collect();
        if runs.is_empty() {
            return String::new();
        }
        let mut units: Vec<String> = Vec::new();
        for run in &runs {
            if let Some(work) = &run.level_work {
                let unit = format!("{} counts {}", run.engine, work.steps_unit);
                if !units.contains(&unit) {
                    units.push(unit);
                }
            }
        }
        let (l, r) = (Align::Left, Align::Right);
        let mut table = Markdown::new(&[
            ("engine", l),
            ("mode", l),
            ("level", l),
            ("merges started", r),
            ("merges finished", r),
            ("steps", r),
            ("steps per update", r),
        ]);
        for run in &runs {
            level_work_rows(run, &mut table);
        }
        format!(
            "## Merge work per level\n\nThe merges (compactions) each engine that counts them ran \
             on each level over a run's timed batches: its counters at the end minus those at \
             the start. {}. Steps per update divides a level's steps by the run's inserts and \
             deletes; work the engine does off the update path without a level (Cairn's \
             background merge thread) has a row of its own.\n\n{}",
            units.join("; "),
            table.render()
        )
    }
}

/// One row of the series table.
fn series_cells(run: &RunRecord) -> Vec<String> {
    let ops: Vec<f64> = run.throughput.iter().map(|p| p.ops_per_sec).collect();
    let lowest = ops.iter().copied().fold(f64::INFINITY, f64::min);
    let (first, last) = (ops[0], ops[ops.len() - 1]);
    vec![
        run.engine.clone(),
        run.mode.clone(),
        run.throughput_window_s
            .map_or("—".to_string(), |w| trimmed(w, 1)),
        ops.len().to_string(),
        thousands(lowest),
        thousands(median(&ops)),
        thousands(last),
        if first > 0.0 {
            format!("{:.2}", last / first)
        } else {
            "—".to_string()
        },
    ]
}

/// Steps per update: two decimals, three below 0.1 (a level that merged little still shows).
fn per_update_text(value: f64) -> String {
    if value < 0.1 {
        format!("{value:.3}")
    } else {
        format!("{value:.2}")
    }
}

/// The rows of one run in the merge work table: one per level, and one for the work no level
/// holds.
fn level_work_rows(run: &RunRecord, table: &mut Markdown) {
    let Some(work) = &run.level_work else {
        return;
    };
    let updates =
        (run.mode != RunMode::LookupOnly.name()).then_some(run.batches as f64 * UPDATES_PER_BATCH);
    let per_update = |steps: u64| match updates {
        Some(updates) if updates > 0.0 => per_update_text(steps as f64 / updates),
        _ => "—".to_string(),
    };
    if work.levels.is_empty() && work.unattributed_steps.unwrap_or(0) == 0 {
        table.row([
            run.engine.as_str(),
            run.mode.as_str(),
            "none",
            "0",
            "0",
            "0",
            "—",
        ]);
    }
    for level in &work.levels {
        table.row([
            run.engine.clone(),
            run.mode.clone(),
            level.level.to_string(),
            level
                .started
                .map_or("—".to_string(), |s| thousands(s as f64)),
            thousands(level.finished as f64),
            thousands(level.steps as f64),
            per_update(level.steps),
        ]);
    }
    if let Some(steps) = work.unattributed_steps.filter(|s| *s > 0) {
        table.row([
            run.engine.clone(),
            run.mode.clone(),
            "background thread".to_string(),
            "—".to_string(),
            "—".to_string(),
            thousands(steps as f64),
            per_update(steps),
        ]);
    }
}
