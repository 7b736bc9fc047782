//! The results table every benchmark command prints to stdout: one "metric / value" row per
//! number of its record.
//!
//! Owns: the rows of each record; the table is drawn by [`metric_value`]. Must never touch: the
//! records' files.

use crate::record::{
    QuickRecord, RunRecord, SetupRecord, SnapshotStats, UnionRecord, UpsertRecord,
};
use crate::report::format::{opt, rss_mib, thousands, trimmed, MIB};
use crate::report::table::metric_value;
use crate::stats::median;

/// The table of `utxo quick`.
pub fn quick(r: &QuickRecord) -> String {
    let mut rows = vec![
        ("engine", r.engine.to_string()),
        ("mode", r.mode.to_string()),
        ("entries", r.entries.to_string()),
        ("batches", r.batches.to_string()),
        ("io backend", r.io_backend.to_string()),
        ("disk cache", r.disk_cache.to_string()),
        ("setup entries/s", format!("{:.0}", r.setup_entries_per_sec)),
        ("setup s", format!("{:.2}", r.setup_seconds)),
        ("ops/s", format!("{:.0}", r.ops_per_sec)),
        ("run s", format!("{:.2}", r.run_seconds)),
        ("lookup-only ops/s", format!("{:.0}", r.lookup_ops_per_sec)),
        ("p50 batch ms", format!("{:.3}", r.p50_batch_ms)),
        ("p99 batch ms", format!("{:.3}", r.p99_batch_ms)),
        ("max batch ms", format!("{:.3}", r.max_batch_ms)),
        (
            "lookup p99 batch ms",
            format!("{:.3}", r.lookup_p99_batch_ms),
        ),
        ("lookup mismatches", r.lookup_mismatches.to_string()),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
        ("levels", r.levels.to_string()),
        ("runs", r.runs.to_string()),
        (
            "filter+index MiB",
            format!("{:.2}", r.filter_and_index_bytes as f64 / MIB),
        ),
        (
            "merge steps max/update",
            r.merge_steps_max_per_update.to_string(),
        ),
        (
            "merge steps bound/update",
            r.merge_steps_bound_per_update.to_string(),
        ),
    ];
    let optional = [
        ("fio qd1 IOPS", r.qd1_iops, 0),
        ("fio qd32 IOPS", r.qd32_iops, 0),
        ("ops / qd32 IOPS", r.ops_per_fio_iops, 3),
        ("lookup ops / qd32 IOPS", r.lookup_ops_per_fio_iops, 3),
    ];
    for (name, value, decimals) in optional {
        if let Some(value) = value {
            rows.push((name, format!("{value:.decimals$}")));
        }
    }
    rows.extend(r.snapshot.as_ref().map_or(Vec::new(), snapshot_rows));
    let mut table = metric_value(&rows);
    table.push_str(QUICK_NOTES);
    table
}

/// What the rows of `utxo quick` that need it mean, printed under its table.
const QUICK_NOTES: &str = "\n\
ops/s counts lookups, inserts and deletes (768 per batch of 256 each) per second of the timed \
run; lookup-only ops/s counts the lookups of the lookup-only pass. merge steps max/update is \
the most merge steps (input entries a merge consumed) that one update paid for; merge steps \
bound/update is the bound the incremental merge schedule guarantees for one update at this \
number of levels (docs/design.md, \"Merges\"): max never exceeds it.\n";

/// What the rows of `utxo run` that need it mean, printed under its table.
const RUN_NOTES: &str = "\n\
ops/s counts lookups, inserts and deletes (768 per batch of 256 each) per second of the timed \
batches; ops / qd32 IOPS divides it by the disk's random-read IOPS at queue depth 32 measured \
by fio in the same invocation. ops/s over time summarises the ops/s of each window of the timed \
batches (the record holds the series); merge work is the engine's merges finished and steps \
(input entries) per level over the timed batches, where it counts them.\n";

/// The `--snapshot` rows of `utxo quick`.
fn snapshot_rows(s: &SnapshotStats) -> Vec<(&'static str, String)> {
    vec![
        ("snapshot save ms", format!("{:.1}", s.snapshot_save_ms)),
        ("snapshot files", s.snapshot_files.to_string()),
        ("snapshot bytes", s.snapshot_bytes.to_string()),
        ("snapshot open ms", format!("{:.1}", s.snapshot_open_ms)),
        ("runs at snapshot", s.runs_at_snapshot.to_string()),
        ("levels at snapshot", s.levels_at_snapshot.to_string()),
        ("snapshot mismatches", s.snapshot_mismatches.to_string()),
    ]
}

/// The table of `utxo setup`.
pub fn setup(r: &SetupRecord) -> String {
    metric_value(&[
        ("engine", r.engine.clone()),
        ("settings", r.settings.clone()),
        ("entries", r.entries.to_string()),
        ("setup s", format!("{:.1}", r.setup_seconds)),
        ("setup entries/s", format!("{:.0}", r.setup_entries_per_sec)),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
        ("bytes written", opt(r.bytes_written)),
    ])
}

/// The table of `utxo run`.
pub fn run(r: &RunRecord) -> String {
    let f1 = |v: f64| format!("{v:.1}");
    let checked = if r.checked {
        format!("yes, {} mismatches", r.mismatches)
    } else {
        "no".into()
    };
    metric_value(&[
        ("engine", r.engine.clone()),
        ("settings", r.settings.clone()),
        (
            "mode",
            match r.pipeline_depth {
                Some(depth) => format!("{} (depth {depth})", r.mode),
                None => r.mode.clone(),
            },
        ),
        ("entries", r.entries.to_string()),
        ("batches", r.batches.to_string()),
        ("checked", checked),
        ("ops/s", format!("{:.0}", r.ops_per_sec)),
        ("p50 batch ms", f1(r.p50_batch_ms)),
        ("p99 batch ms", f1(r.p99_batch_ms)),
        ("p99.9 batch ms", f1(r.p999_batch_ms)),
        ("max batch ms", f1(r.max_batch_ms)),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
        ("RSS at start MiB", rss_mib(r.start_rss_bytes)),
        (
            "CPU us per op",
            opt(r.cpu_seconds.map(|s| {
                let ops = r.ops_per_sec * r.seconds;
                format!("{:.2}", s * 1e6 / ops.max(1.0))
            })),
        ),
        ("bytes read", opt(r.bytes_read)),
        ("bytes written", opt(r.bytes_written)),
        ("memory limit", opt(r.memory_limit_bytes)),
        ("fio qd1 IOPS", opt(r.fio_qd1_iops.map(|v| v as u64))),
        ("fio qd32 IOPS", opt(r.fio_qd32_iops.map(|v| v as u64))),
        (
            "ops / qd32 IOPS",
            opt(r.ops_per_qd32_iops.map(|v| format!("{v:.3}"))),
        ),
        ("ops/s over time", over_time(r)),
        ("merge work", opt(level_work_text(r))),
    ]) + RUN_NOTES
}

/// The run's throughput series in short: its lowest, median and last window, or "-".
fn over_time(r: &RunRecord) -> String {
    let ops: Vec<f64> = r.throughput.iter().map(|p| p.ops_per_sec).collect();
    let (Some(last), Some(window)) = (ops.last(), r.throughput_window_s) else {
        return "-".to_string();
    };
    let min = ops.iter().copied().fold(f64::INFINITY, f64::min);
    let windows = match ops.len() {
        1 => "1 window".to_string(),
        n => format!("{n} windows"),
    };
    format!(
        "min {} / median {} / last {} ({windows} of {} s)",
        thousands(min),
        thousands(median(&ops)),
        thousands(*last),
        trimmed(window, 1)
    )
}

/// The engine's work per level over the timed batches in short: "L2 12 merges, 3.1M steps; ...".
fn level_work_text(r: &RunRecord) -> Option<String> {
    let work = r.level_work.as_ref()?;
    let mut parts: Vec<String> = work
        .levels
        .iter()
        .map(|l| format!("L{} {} finished, {} steps", l.level, l.finished, l.steps))
        .collect();
    if let Some(steps) = work.unattributed_steps.filter(|s| *s > 0) {
        parts.push(format!("{steps} steps in the background"));
    }
    Some(if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join("; ")
    })
}

/// The table of `union`.
pub fn union(r: &UnionRecord) -> String {
    let f0 = |x: f64| format!("{x:.0}");
    let f3 = |x: f64| format!("{x:.3}");
    metric_value(&[
        ("engine", r.engine.to_string()),
        ("tables", r.tables.to_string()),
        ("entries per table", r.entries_per_table.to_string()),
        ("lookups per pass", r.lookups.to_string()),
        ("io backend", r.io_backend.to_string()),
        ("disk cache", r.disk_cache.to_string()),
        ("fill s", format!("{:.2}", r.fill_seconds)),
        ("input runs", r.input_runs.to_string()),
        ("union keys", r.union_keys.to_string()),
        ("union debt start", r.union_debt_start.to_string()),
        ("baseline lookups/s", f0(r.baseline_lookups_per_sec)),
        ("baseline p99 batch ms", f3(r.baseline_p99_batch_ms)),
        ("union start ms", f3(r.union_start_ms)),
        ("with-debt lookups/s", f0(r.union_with_debt_lookups_per_sec)),
        ("with-debt p99 batch ms", f3(r.union_with_debt_p99_batch_ms)),
        ("union pay s", format!("{:.2}", r.union_pay_seconds)),
        ("union credits/s", f0(r.union_credits_per_sec)),
        ("union credits spent", r.union_credits_spent.to_string()),
        ("supply calls", r.union_supply_calls.to_string()),
        ("supply max ms", format!("{:.1}", r.union_supply_max_ms)),
        ("debt increases", r.union_debt_increases.to_string()),
        ("paid-off lookups/s", f0(r.union_paid_lookups_per_sec)),
        ("paid-off p99 batch ms", f3(r.union_paid_p99_batch_ms)),
        ("paid-off runs", r.union_paid_runs.to_string()),
        ("paid-off levels", r.union_paid_levels.to_string()),
        ("lookup mismatches", r.lookup_mismatches.to_string()),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
    ])
}

/// The table of `upsert`, whose keys and values are `element_bytes` long.
pub fn upsert(r: &UpsertRecord, element_bytes: usize) -> String {
    metric_value(&[
        ("benchmark", "upsert (lsm-tree's parameters)".to_string()),
        ("elements", r.elements.to_string()),
        (
            "key / value bytes",
            format!("{element_bytes} / {element_bytes}"),
        ),
        ("batch", r.batch.to_string()),
        ("write buffer", r.write_buffer.to_string()),
        ("repeat (medians)", r.repeat.to_string()),
        ("insert ms", format!("{:.1}", r.insert_ms)),
        ("upsert ms", format!("{:.1}", r.upsert_ms)),
        (
            "upsert / insert",
            format!("{:.3} (target within 5%)", r.upsert_over_insert),
        ),
        ("upserts per key", r.upserts_per_key.to_string()),
        (
            "repeated upserts ms",
            format!("{:.1}", r.repeated_upserts_ms),
        ),
        (
            "lookup-then-insert ms",
            format!("{:.1}", r.lookup_then_insert_ms),
        ),
        (
            "upsert speed-up",
            format!("{:.2}x (target at least 2x)", r.upsert_speedup),
        ),
        ("wrong counters", r.mismatches.to_string()),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table's lines (up to the blank line before its notes) all have one width.
    fn assert_aligned(table: &str) {
        let widths: Vec<usize> = (table.lines())
            .take_while(|l| !l.is_empty())
            .map(str::len)
            .collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
    }

    #[test]
    fn tables_are_aligned() {
        let record = QuickRecord {
            engine: "cairn",
            mode: "serial",
            qd32_iops: Some(1000.0),
            ..QuickRecord::default()
        };
        assert_aligned(&quick(&record));
        let union_record = UnionRecord {
            engine: "cairn",
            peak_rss_bytes: Some(1 << 20),
            ..UnionRecord::default()
        };
        assert_aligned(&union(&union_record));
    }

    #[test]
    fn run_shows_its_series_and_merge_work_in_short() {
        use crate::record::{LevelWork, LevelWorkRow, ThroughputPoint};
        let json = serde_json::json!({
            "benchmark": "utxo-run", "engine": "cairn", "mode": "serial", "entries": 10,
            "checked": true, "mismatches": 0, "ops_per_sec": 2.0, "seconds": 1.0,
            "p50_batch_ms": 1.0, "p99_batch_ms": 1.0, "p999_batch_ms": 1.0, "max_batch_ms": 1.0,
            "peak_rss_bytes": null, "bytes_read": null, "bytes_written": null,
            "memory_limit_bytes": null, "fio_qd1_iops": null, "fio_qd32_iops": null,
            "ops_per_qd32_iops": null
        });
        let mut record: RunRecord = serde_json::from_value(json).unwrap();
        let table = run(&record);
        assert!(table.contains("ops/s over time"), "{table}");
        assert_aligned(&table);
        record.throughput_window_s = Some(1.5);
        record.throughput = [150_000.0, 120_000.0, 170_000.0, 160_000.0]
            .iter()
            .enumerate()
            .map(|(i, &ops)| ThroughputPoint {
                start_s: 1.5 * i as f64,
                seconds: 1.5,
                ops_per_sec: ops,
            })
            .collect();
        record.level_work = Some(LevelWork {
            steps_unit: "steps".into(),
            levels: vec![LevelWorkRow {
                level: 2,
                started: Some(3),
                finished: 2,
                steps: 900,
            }],
            unattributed_steps: Some(40),
        });
        let table = run(&record);
        assert!(
            table.contains("min 120,000 / median 155,000 / last 160,000 (4 windows of 1.5 s)"),
            "{table}"
        );
        assert!(
            table.contains("L2 2 finished, 900 steps; 40 steps in the background"),
            "{table}"
        );
    }

    #[test]
    fn quick_shows_the_snapshot_rows() {
        let record = QuickRecord {
            snapshot: Some(SnapshotStats {
                snapshot_files: 42,
                ..SnapshotStats::default()
            }),
            ..QuickRecord::default()
        };
        let table = quick(&record);
        assert!(table.contains("snapshot files"), "{table}");
        assert!(!quick(&QuickRecord::default()).contains("snapshot files"));
    }
}
