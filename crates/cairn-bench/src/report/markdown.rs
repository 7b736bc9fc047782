//! `README.md` of a `report` directory: the title, the warnings (wrong lookups, the disk's
//! drift), how the records were produced, the results and setup tables, the charts, the
//! throughput over time and merge work per level ([`super::over_time`]'s sections) and where
//! Cairn stands against the disk and its peers.
//!
//! Owns: the Markdown text. Must never touch: files (the caller writes the text).

use std::collections::BTreeMap;

use crate::record::{RunRecord, SetupRecord, SuiteRecord, SETUP, SUITE};
use crate::report::format::{limit_text, mib_text, ms, thousands, GIB};
use crate::report::table::{Align, Markdown};
use crate::report::{distinct, Drift, Report, Row, CAIRN, DRIFT_FLAGGED, SERIAL};

impl Report {
    /// The whole of README.md.
    pub(super) fn markdown(&self) -> String {
        let sections = [
            self.title(),
            self.warnings(),
            self.provenance(),
            self.run_table(),
            self.setup_table(),
            charts(),
            self.throughput_section(),
            self.level_work_section(),
            self.standing(),
        ];
        let sections: Vec<String> = sections.into_iter().filter(|s| !s.is_empty()).collect();
        sections.join("\n")
    }

    /// The title line.
    fn title(&self) -> String {
        let date = match &self.suite {
            Some(suite) => format!(", {}", suite.date),
            None => String::new(),
        };
        format!("# UTxO benchmark, {} entries{date}\n", self.entries_text())
    }

    /// A warning when a checked run found wrong lookups, and one when the disk drifted.
    fn warnings(&self) -> String {
        let mut lines = Vec::new();
        let bad = self.rows.iter().filter(|r| r.run.mismatches > 0).count();
        if bad > 0 {
            lines.push(format!(
                "**Warning:** {bad} of the runs below returned wrong lookup results.\n"
            ));
        }
        if let Some(drift) = self.flagged_drift() {
            lines.push(drift_warning(drift));
        }
        lines.join("\n")
    }

    /// "How it was produced".
    fn provenance(&self) -> String {
        let body = match &self.suite {
            Some(suite) => suite_provenance(suite, self.suites),
            None => self.separate_provenance(),
        };
        format!("## How it was produced\n\n{body}")
    }

    /// Provenance without `suite.json`.
    fn separate_provenance(&self) -> String {
        let runs = || self.rows.iter().map(|r| &r.run);
        let limits = distinct(runs().map(|run| {
            let own = run.own_cgroup.as_ref();
            let reason = own.and_then(|c| c.memory_unlimited_reason.as_deref());
            (run.memory_limit_bytes, reason)
        }));
        let limits: Vec<_> = limits
            .into_iter()
            .map(|(limit, reason)| match reason {
                Some(reason) => format!("{} ({})", limit_text(limit), md_cell(reason)),
                None => limit_text(limit),
            })
            .collect();
        let fio = distinct(runs().map(|run| fio_text(run.fio_qd1_iops, run.fio_qd32_iops)));
        // Each mode's timed batches, in the report's order of modes (0: not recorded).
        let mut batches: BTreeMap<_, Vec<u64>> = BTreeMap::new();
        for run in runs().filter(|run| run.batches > 0) {
            let counts = batches.entry(super::rank(&super::MODE_ORDER, &run.mode));
            counts.or_default().push(run.batches);
        }
        let batches: Vec<String> = batches
            .into_iter()
            .map(|((_, mode), counts)| {
                let counts = distinct(counts.into_iter());
                let counts: Vec<String> = counts.iter().map(|&n| thousands(n as f64)).collect();
                format!("{} {}", md_cell(&mode), counts.join(" and "))
            })
            .collect();
        let batches = if batches.is_empty() {
            "not recorded".to_string()
        } else {
            batches.join(", ")
        };
        let lines = [
            "These records come from separate invocations (there is no `utxo-suite` record), \
             so there is no single command, commit, machine description or date; each run's own \
             memory limit and fio baseline are used."
                .to_string(),
            String::new(),
            format!("- Timed batches per run: {batches}."),
            format!("- Memory limit: {}.", limits.join("; ")),
            "- Page cache: not recorded whether it was dropped before each run.".to_string(),
            format!("- fio 4 KiB random reads: {}.", fio.join("; ")),
        ];
        lines.join("\n") + "\n"
    }

    /// The main table: one row per engine and mode.
    fn run_table(&self) -> String {
        let (l, r) = (Align::Left, Align::Right);
        let mut columns = vec![
            ("engine", l),
            ("mode", l),
            ("ops/s", r),
            ("Cairn / engine", r),
        ];
        if self.flagged_drift().is_some() {
            columns.push(("ops / fio qd32 IOPS before", r));
            columns.push(("ops / fio qd32 IOPS after", r));
        } else {
            columns.push(("ops / fio qd32 IOPS", r));
        }
        columns.extend([
            ("p50 ms", r),
            ("p99 ms", r),
            ("p99.9 ms", r),
            ("max ms", r),
            ("peak RSS MiB", r),
            ("cgroup peak MiB", r),
            ("read B/op", r),
            ("written B/op", r),
            ("check", l),
        ]);
        let mut table = Markdown::new(&columns);
        for row in &self.rows {
            table.row(self.run_cells(row));
        }
        let mut lines = vec!["## Results\n".to_string(), table.render()];
        lines.push(TABLE_NOTES.to_string());
        if let Some(drift) = self.flagged_drift() {
            lines.push(format!(
                "The disk drifted over the invocation ({}), so each run's ratio to the disk is \
                 given against the fio qd32 IOPS measured before the runs ({}) and after them \
                 ({}).\n",
                drift_text(drift),
                thousands(drift.before),
                thousands(drift.after)
            ));
        }
        if let Some(note) = self.start_rss_note() {
            lines.push(note);
        }
        lines.join("\n")
    }

    /// What each run's process held before its engine opened, which every peak RSS includes:
    /// the benchmark binary's own code and data, larger when peers are linked in.
    fn start_rss_note(&self) -> Option<String> {
        let starts: Vec<u64> = self
            .rows
            .iter()
            .filter_map(|r| r.run.start_rss_bytes)
            .collect();
        let (low, high) = (*starts.iter().min()?, *starts.iter().max()?);
        let range = if mib_text(low) == mib_text(high) {
            mib_text(low)
        } else {
            format!("{} to {}", mib_text(low), mib_text(high))
        };
        Some(format!(
            "Each run's process was resident in {range} MiB before its engine opened (the \
             benchmark binary's code and data, with every peer library it was built with); \
             every peak RSS above includes that.\n"
        ))
    }

    /// The cells of one row of the main table.
    fn run_cells(&self, row: &Row) -> Vec<String> {
        let run = &row.run;
        // A pipelined run says how many batches' lookups it kept in flight.
        let mode = match run.pipeline_depth {
            Some(depth) => format!("{}, depth {depth}", run.mode),
            None => run.mode.clone(),
        };
        let mode = match row.repeats {
            1 => mode,
            n => format!("{mode} (median of {n} runs)"),
        };
        // A run its time limit ended early says so: its figures cover fewer batches.
        let mode = match (run.planned_batches, run.time_limit_s) {
            (Some(planned), Some(limit)) => format!(
                "{mode}, {} of {} batches ({limit} s limit)",
                thousands(run.batches as f64),
                thousands(planned as f64)
            ),
            _ => mode,
        };
        let ops = run.ops_per_sec * run.seconds;
        let ratio = |iops: f64| format!("{:.2}", run.ops_per_sec / iops);
        let mut cells = vec![
            md_cell(&run.engine),
            md_cell(&mode),
            thousands(run.ops_per_sec),
            or_dash(self.cairn_ratio(run), |r| format!("{r:.1}x")),
        ];
        match self.flagged_drift() {
            Some(drift) => cells.extend([ratio(drift.before), ratio(drift.after)]),
            None => cells.push(or_dash(self.qd32(run), ratio)),
        }
        cells.extend([
            ms(run.p50_batch_ms),
            ms(run.p99_batch_ms),
            ms(run.p999_batch_ms),
            ms(run.max_batch_ms),
            or_dash(run.peak_rss_bytes, mib_text),
            or_dash(run.cgroup_peak_bytes(), mib_text),
            or_dash(per_op(run.bytes_read, ops), per_op_text),
            or_dash(per_op(run.bytes_written, ops), per_op_text),
            check_text(run),
        ]);
        cells
    }

    /// The setup table.
    fn setup_table(&self) -> String {
        if self.setups.is_empty() {
            return format!("## Setup\n\nNo `{SETUP}` records in this directory.\n");
        }
        let (l, r) = (Align::Left, Align::Right);
        let mut table = Markdown::new(&[
            ("engine", l),
            ("settings", l),
            ("entries", r),
            ("setup s", r),
            ("entries/s", r),
            ("peak RSS MiB", r),
        ]);
        for setup in &self.setups {
            table.row(setup_cells(setup));
        }
        format!("## Setup\n\n{}", table.render())
    }

    /// "Where Cairn stands", computed from the serial runs.
    fn standing(&self) -> String {
        let text = match self.row(CAIRN, SERIAL) {
            None => "There is no Cairn serial run in this directory to place.".to_string(),
            Some(cairn) => format!(
                "{} {}",
                self.fio_sentence(&cairn.run),
                self.peer_sentence(cairn.run.ops_per_sec)
            ),
        };
        format!("## Where Cairn stands\n\n{text}\n")
    }

    /// Cairn's serial ops/s against the disk and lsm-tree's published ratio.
    fn fio_sentence(&self, cairn: &RunRecord) -> String {
        let ops = thousands(cairn.ops_per_sec);
        let Some(qd32) = self.qd32(cairn) else {
            return format!(
                "Cairn's serial run did {ops} ops/s. No fio baseline was recorded, so it cannot \
                 be set against lsm-tree's published serial ratio of 0.25 to 0.33 of fio IOPS."
            );
        };
        // Judged as printed, to two decimals (against the figure measured before the runs).
        let ratio = (cairn.ops_per_sec / qd32 * 100.0).round() / 100.0;
        let verdict = if ratio < 0.25 {
            "below"
        } else if ratio <= 0.33 {
            "within"
        } else {
            "above"
        };
        let after = match self.flagged_drift() {
            Some(drift) => format!(
                " (measured before the runs; against the {} measured after them, which drifted \
                 {}, it is {:.2})",
                thousands(drift.after),
                signed_percent(drift.change()),
                cairn.ops_per_sec / drift.after
            ),
            None => String::new(),
        };
        format!(
            "Cairn's serial run did {ops} ops/s, {ratio:.2} of the disk's {} fio qd32 IOPS{after}; \
             lsm-tree publishes a serial ratio of 0.25 to 0.33 of fio IOPS, so Cairn is \
             {verdict} that range.",
            thousands(qd32)
        )
    }

    /// The lowest and highest Cairn / peer ratios in serial mode.
    fn peer_sentence(&self, cairn_ops: f64) -> String {
        let mut ratios: Vec<(f64, &str)> = self
            .rows
            .iter()
            .map(|row| &row.run)
            .filter(|run| run.mode == SERIAL && run.engine != CAIRN && run.ops_per_sec > 0.0)
            .map(|run| (cairn_ops / run.ops_per_sec, run.engine.as_str()))
            .collect();
        ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
        match ratios.as_slice() {
            [] => "No peer engine ran in serial mode.".to_string(),
            [(ratio, engine)] => {
                format!("In serial mode Cairn did {ratio:.1}x the ops/s of {engine}.")
            }
            [(low, low_engine), .., (high, high_engine)] => format!(
                "In serial mode Cairn did between {low:.1}x (against {low_engine}) and \
                 {high:.1}x (against {high_engine}) the ops/s of its peers."
            ),
        }
    }
}

/// What the main table's columns mean.
const TABLE_NOTES: &str = "ops/s counts lookups, inserts and deletes. Cairn / engine is \
Cairn's ops/s over the engine's in the same mode. ops / fio qd32 IOPS divides ops/s by the \
disk's 4 KiB random-read IOPS at queue depth 32. Batch latencies are in milliseconds. B/op is \
the bytes the process read or wrote during the run divided by the operations of the run. \
When an engine and mode ran several times, the run with the median ops/s is shown.\n";

/// Provenance from `suite.json`.
fn suite_provenance(suite: &SuiteRecord, suites: usize) -> String {
    let machine = &suite.machine;
    let fence = if suite.command.contains("```") {
        "~~~~"
    } else {
        "```"
    };
    let known = |text: &Option<String>| md_cell(text.as_deref().unwrap_or("unknown"));
    let memory = or_unknown(machine.mem_total_bytes, |b| {
        format!("{:.1}", b as f64 / GIB)
    });
    let mut lines = vec![
        format!(
            "- Machine: {}, {} cores, {memory} GiB memory, kernel {}.",
            known(&machine.cpu),
            machine.cores,
            known(&machine.kernel)
        ),
        format!("- Commit: `{}`.", known(&suite.commit)),
        format!(
            "- Workload: {} entries, {}.",
            thousands(suite.entries as f64),
            batches_text(suite)
        ),
        format!("- Memory limit: {}.", limit_and_cgroup(suite)),
        format!(
            "- Page cache: {}.",
            page_cache_text(suite.page_cache_dropped)
        ) + &suite
            .settle_after_setup_s
            .map(|s| {
                format!(
                    " Each engine's first run after a setup made in this invocation started \
                     {s} s after it, its writes flushed (`--settle-after-setup-s`)."
                )
            })
            .unwrap_or_default(),
        format!(
            "- fio 4 KiB random reads: {}.",
            fio_text(suite.fio_qd1_iops, suite.fio_qd32_iops)
        ) + &suite
            .fio_qd32_iops_end
            .map(|end| fio_end_text(suite.fio_qd32_iops, end))
            .unwrap_or_default(),
    ];
    if let Some(mount) = &suite.data_mount {
        let discard = mount.split(['(', ',', ')']).any(|o| o == "discard");
        lines.push(format!(
            "- Tables on: {}{}.",
            md_cell(mount),
            if discard {
                " (online discard: every file removal costs the device a TRIM, and reads wait \
                 behind it)"
            } else {
                ""
            }
        ));
    }
    lines.extend([
        String::new(),
        "The command:".to_string(),
        String::new(),
        format!("{fence}sh\n{}\n{fence}", suite.command),
    ]);
    if suites > 1 {
        lines.push(String::new());
        lines.push(format!(
            "The directory holds {suites} `{SUITE}` records; this one is the latest ({}).",
            suite.date
        ));
    }
    lines.join("\n") + "\n"
}

/// The timed batches of the suite's runs in words: one count for every run, or each mode's
/// (`mode_batches`, with the `--protocol` preset that set them).
fn batches_text(suite: &SuiteRecord) -> String {
    let counts: Vec<u64> = distinct(suite.mode_batches.values().copied());
    let text = match counts.as_slice() {
        [] => format!("{} batches per run", thousands(suite.batches as f64)),
        [one] => format!("{} batches per run", thousands(*one as f64)),
        _ => {
            // In the report's order of modes.
            let by_rank: BTreeMap<_, _> = suite
                .mode_batches
                .iter()
                .map(|(mode, n)| (super::rank(&super::MODE_ORDER, mode), *n))
                .collect();
            let each: Vec<String> = by_rank
                .into_iter()
                .map(|((_, mode), n)| format!("{} {}", md_cell(&mode), thousands(n as f64)))
                .collect();
            format!("timed batches per run: {}", each.join(", "))
        }
    };
    match &suite.protocol {
        Some(protocol) => format!("{text} (`--protocol {}`)", md_cell(protocol)),
        None => text,
    }
}

/// The fio figure measured after the last run, and how far it is from the first.
fn fio_end_text(before: Option<f64>, end: f64) -> String {
    let drift = before
        .filter(|b| *b > 0.0 && end > 0.0)
        .map(|before| Drift { before, after: end });
    let change = match drift {
        Some(drift) if drift.flagged() => format!(
            ", a drift of {}: **more than {:.0}%**, so the ratios below are given against both \
             figures",
            signed_percent(drift.change()),
            DRIFT_FLAGGED * 100.0
        ),
        Some(drift) => format!(
            ", {} from the first; the ratios below divide by the first figure",
            signed_percent(drift.change())
        ),
        None => "; the ratios below divide by the first figure".to_string(),
    };
    format!(
        " After the last run: {} IOPS at queue depth 32{change}.",
        thousands(end)
    )
}

/// The warning at the top of a report whose disk drifted.
fn drift_warning(drift: Drift) -> String {
    format!(
        "**Warning: the disk drifted over this invocation.** Its fio 4 KiB random-read IOPS at \
         queue depth 32 was {} before the runs and {} after them ({}, more than {:.0}%), so the \
         runs did not all meet the same disk, and every ratio of ops/s to the disk's IOPS below \
         is given against both figures.\n",
        thousands(drift.before),
        thousands(drift.after),
        drift_text(drift),
        DRIFT_FLAGGED * 100.0
    )
}

/// The drift in words: "+47.1% from before to after".
fn drift_text(drift: Drift) -> String {
    format!("{} from before to after", signed_percent(drift.change()))
}

/// A change as a signed percentage with one decimal: "+47.1%", "-5.0%".
fn signed_percent(change: f64) -> String {
    format!("{:+.1}%", change * 100.0)
}

/// `f(value)` or "unknown".
fn or_unknown<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "unknown".to_string(), f)
}

/// The memory limit and the cgroup version, in words.
fn limit_and_cgroup(suite: &SuiteRecord) -> String {
    let cgroup = match (&suite.cgroup, &suite.memory_unlimited_reason) {
        (Some(version), _) => format!("cgroup {version}"),
        (None, Some(reason)) => md_cell(reason),
        (None, None) => "no cgroup support on this machine".to_string(),
    };
    format!("{} ({cgroup})", limit_text(suite.memory_limit_bytes))
}

/// Whether the page cache was dropped, in words.
fn page_cache_text(dropped: bool) -> &'static str {
    if dropped {
        "dropped before each run"
    } else {
        "**could not be dropped** before the runs, so they may have read from a warm cache"
    }
}

/// The fio baseline in words.
fn fio_text(qd1: Option<f64>, qd32: Option<f64>) -> String {
    match (qd1, qd32) {
        (None, None) => "not measured".to_string(),
        _ => format!(
            "{} IOPS at queue depth 1, {} IOPS at queue depth 32",
            or_dash(qd1, thousands),
            or_dash(qd32, thousands)
        ),
    }
}

/// The cells of one row of the setup table.
fn setup_cells(setup: &SetupRecord) -> [String; 6] {
    [
        md_cell(&setup.engine),
        md_cell(&setup.settings),
        thousands(setup.entries as f64),
        format!("{:.1}", setup.setup_seconds),
        thousands(setup.setup_entries_per_sec),
        or_dash(setup.peak_rss_bytes, mib_text),
    ]
}

/// The chart images.
fn charts() -> String {
    "## Charts\n\n![ops/s](ops.svg)\n\n![batch latency](latency.svg)\n\n![memory](memory.svg)\n"
        .to_string()
}

/// The check result of a run.
fn check_text(run: &RunRecord) -> String {
    match (run.checked, run.mismatches) {
        (false, _) => "not checked".to_string(),
        (true, 1) => "1 mismatch".to_string(),
        (true, n) => format!("{n} mismatches"),
    }
}

/// `bytes / ops`, when both are known.
fn per_op(bytes: Option<u64>, ops: f64) -> Option<f64> {
    bytes.filter(|_| ops > 0.0).map(|b| b as f64 / ops)
}

/// Bytes per operation: one decimal below 100.
fn per_op_text(bytes: f64) -> String {
    if bytes >= 100.0 {
        thousands(bytes)
    } else {
        format!("{bytes:.1}")
    }
}

/// A table cell: pipes escaped, no line breaks, no HTML.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace(['\n', '\r'], " ")
}

/// `f(value)` or an em dash.
fn or_dash<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "—".to_string(), f)
}
