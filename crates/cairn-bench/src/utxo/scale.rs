//! `cairn-bench utxo scale`: Cairn alone at several table sizes, to show how each cost grows
//! with the table. For each size, a `utxo suite` of Cairn alone (setup, then each mode in its own
//! memory cgroup, page cache dropped, the same warm-up before each run), its table removed
//! afterwards; then `scale.md` and `scale.json` in `--out`, one row per size and mode.
//!
//! Owns: the list of sizes and the summary. Must never touch: an engine (the suites run every
//! step as a child process).

use std::path::Path;

use serde::Serialize;

use crate::cli::{ScaleArgs, SuiteArgs};
use crate::failure::{Context, Failure};
use crate::options::EngineKind;
use crate::record::{read_json, write_json, RunRecord, SetupRecord, SuiteRecord};
use crate::report::table::{Align, Markdown};

/// One row of the summary: one size, one mode.
#[derive(Debug, Serialize)]
struct Row {
    entries: u64,
    setup_entries_per_sec: f64,
    mode: String,
    ops_per_sec: f64,
    ops_per_qd32_iops: Option<f64>,
    p50_batch_ms: f64,
    p999_batch_ms: f64,
    peak_rss_bytes: Option<u64>,
    cgroup_peak_bytes: Option<u64>,
    mismatches: u64,
}

/// `utxo scale`.
pub fn run(args: &ScaleArgs) -> Result<(), Failure> {
    std::fs::create_dir_all(&args.out).context(|| format!("creating {}", args.out.display()))?;
    let mut rows = Vec::new();
    for &entries in &args.entries {
        let out = args.out.join(entries.to_string());
        let suite = SuiteArgs {
            db: args.db.join(entries.to_string()),
            out: out.clone(),
            entries,
            batches: Some(args.batches),
            pipelined_batches: None,
            lookup_only_batches: None,
            protocol: None,
            warmup_batches: args.warmup_batches,
            engines: vec![EngineKind::Cairn],
            runs: args.runs.clone(),
            reuse_setup: false,
            keep_page_cache: false,
            remove_after: true,
            settle_after_setup_s: args.settle_after_setup_s,
            background_merges_modes: None,
            engine_args: args.engine_args.clone(),
        };
        eprintln!("==== {entries} entries ====");
        crate::utxo::suite::run(&suite)?;
        rows.extend(rows_of(&out, entries)?);
    }
    let table = markdown(&rows);
    print!("{table}");
    std::fs::write(args.out.join("scale.md"), &table)
        .context(|| format!("writing {}", args.out.join("scale.md").display()))?;
    write_json(&rows, &args.out.join("scale.json"))
}

/// The rows of one size, from its suite's records.
fn rows_of(out: &Path, entries: u64) -> Result<Vec<Row>, Failure> {
    let suite: SuiteRecord = read_json(&out.join("suite.json"))?;
    let setup: SetupRecord = read_json(&out.join("setup-cairn.json"))?;
    let mut rows = Vec::new();
    for mode in &suite.modes {
        let run: RunRecord = read_json(&out.join(format!("run-cairn-{mode}.json")))?;
        rows.push(Row {
            entries,
            setup_entries_per_sec: setup.setup_entries_per_sec,
            mode: mode.clone(),
            ops_per_sec: run.ops_per_sec,
            ops_per_qd32_iops: suite.fio_qd32_iops.map(|iops| run.ops_per_sec / iops),
            p50_batch_ms: run.p50_batch_ms,
            p999_batch_ms: run.p999_batch_ms,
            peak_rss_bytes: run.peak_rss_bytes,
            cgroup_peak_bytes: run.own_cgroup.and_then(|c| c.cgroup_peak_bytes),
            mismatches: run.mismatches,
        });
    }
    Ok(rows)
}

fn markdown(rows: &[Row]) -> String {
    let mib =
        |b: Option<u64>| b.map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0));
    let (l, r) = (Align::Left, Align::Right);
    let mut table = Markdown::new(&[
        ("entries", r),
        ("setup entries/s", r),
        ("mode", l),
        ("ops/s", r),
        ("ops / qd32 IOPS", r),
        ("p50 batch ms", r),
        ("p99.9 batch ms", r),
        ("peak RSS MiB", r),
        ("cgroup peak MiB", r),
        ("mismatches", r),
    ]);
    for row in rows {
        table.row([
            row.entries.to_string(),
            format!("{:.0}", row.setup_entries_per_sec),
            row.mode.clone(),
            format!("{:.0}", row.ops_per_sec),
            row.ops_per_qd32_iops
                .map_or("-".to_string(), |x| format!("{x:.2}")),
            format!("{:.2}", row.p50_batch_ms),
            format!("{:.2}", row.p999_batch_ms),
            mib(row.peak_rss_bytes),
            mib(row.cgroup_peak_bytes),
            row.mismatches.to_string(),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_has_a_row_per_size_and_mode() {
        let row = |entries, mode: &str| Row {
            entries,
            setup_entries_per_sec: 1e6,
            mode: mode.into(),
            ops_per_sec: 2e5,
            ops_per_qd32_iops: Some(1.5),
            p50_batch_ms: 3.0,
            p999_batch_ms: 9.0,
            peak_rss_bytes: Some(40 << 20),
            cgroup_peak_bytes: None,
            mismatches: 0,
        };
        // The cells' padding squeezed: `tabled` pads the columns to a common width.
        let table = crate::report::table::squeezed(&markdown(&[
            row(1_000_000, "serial"),
            row(10_000_000, "serial"),
        ]));
        assert_eq!(table.lines().count(), 4);
        assert!(table.contains("| 10000000 | 1000000 | serial | 200000 | 1.50 |"));
        assert!(table.contains("| 40.0 | - | 0 |"));
    }
}
