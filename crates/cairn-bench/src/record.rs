//! The results: collected into [`Report`], printed as an aligned table and written as JSON.
//!
//! Owns: [`Report`], latency percentiles and the peak-RSS reading.

use std::path::Path;

use serde::Serialize;

use crate::failure::{Context, Failure};
use crate::utxo::snapshot::SnapshotStats;

/// Everything one `utxo quick` run measured. Field names carry their units; the JSON file is
/// this struct serialised.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Always "cairn".
    pub engine: &'static str,
    /// "serial" or "lookup-only".
    pub mode: &'static str,
    /// Entries inserted by setup.
    pub entries: u64,
    /// Batches per phase.
    pub batches: u64,
    /// The seed of keys and choices.
    pub seed: u64,
    /// The resolved block I/O backend ("uring" or "pread").
    pub io_backend: &'static str,
    /// The disk-cache policy ("none" or "all").
    pub disk_cache: &'static str,
    /// Seconds the setup inserts took.
    pub setup_seconds: f64,
    /// Setup entries inserted per second.
    pub setup_entries_per_sec: f64,
    /// Seconds of the measured phase (serial batches, or the lookup pass in lookup-only mode).
    pub run_seconds: f64,
    /// Operations (lookups + inserts + deletes) per second of the measured phase.
    pub ops_per_sec: f64,
    /// Median engine time per batch of the measured phase, in ms.
    pub p50_batch_ms: f64,
    /// 99th-percentile engine time per batch of the measured phase, in ms.
    pub p99_batch_ms: f64,
    /// Slowest batch of the measured phase, in ms.
    pub max_batch_ms: f64,
    /// Seconds of the lookup-only pass.
    pub lookup_seconds: f64,
    /// Lookups per second in the lookup-only pass.
    pub lookup_ops_per_sec: f64,
    /// 99th-percentile time per lookup-only batch, in ms.
    pub lookup_p99_batch_ms: f64,
    /// Lookups that did not return exactly the expected value (must be 0).
    pub lookup_mismatches: u64,
    /// Peak resident set size (VmHWM), in bytes; null where /proc is unavailable.
    pub peak_rss_bytes: Option<u64>,
    /// Levels of the table at the end.
    pub levels: usize,
    /// Runs a lookup consults at the end.
    pub runs: usize,
    /// Memory held by Bloom filters and indexes at the end, in bytes.
    pub filter_and_index_bytes: usize,
    /// The most merge steps (input entries merged) any single update performed, setup included.
    pub merge_steps_max_per_update: u64,
    /// The engine's documented bound on merge steps per update for the final number of levels.
    pub merge_steps_bound_per_update: u64,
    /// The baseline's queue-depth-1 IOPS, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qd1_iops: Option<f64>,
    /// The baseline's queue-depth-32 IOPS, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qd32_iops: Option<f64>,
    /// `ops_per_sec / qd32_iops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_fio_iops: Option<f64>,
    /// `lookup_ops_per_sec / qd32_iops`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookup_ops_per_fio_iops: Option<f64>,
    /// With `--snapshot`: the snapshot's timings, size and shape (`snapshot_save_ms`,
    /// `snapshot_files`, `snapshot_bytes`, `snapshot_open_ms`, `runs_at_snapshot`,
    /// `levels_at_snapshot`, `snapshot_mismatches`), flattened into the JSON object.
    #[serde(flatten)]
    pub snapshot: Option<SnapshotStats>,
}

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

impl Report {
    /// The report as (metric, value) rows.
    fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            ("engine", self.engine.to_string()),
            ("mode", self.mode.to_string()),
            ("entries", self.entries.to_string()),
            ("batches", self.batches.to_string()),
            ("io backend", self.io_backend.to_string()),
            ("disk cache", self.disk_cache.to_string()),
            (
                "setup entries/s",
                format!("{:.0}", self.setup_entries_per_sec),
            ),
            ("setup s", format!("{:.2}", self.setup_seconds)),
            ("ops/s", format!("{:.0}", self.ops_per_sec)),
            ("run s", format!("{:.2}", self.run_seconds)),
            (
                "lookup-only ops/s",
                format!("{:.0}", self.lookup_ops_per_sec),
            ),
            ("p50 batch ms", format!("{:.3}", self.p50_batch_ms)),
            ("p99 batch ms", format!("{:.3}", self.p99_batch_ms)),
            ("max batch ms", format!("{:.3}", self.max_batch_ms)),
            (
                "lookup p99 batch ms",
                format!("{:.3}", self.lookup_p99_batch_ms),
            ),
            ("lookup mismatches", self.lookup_mismatches.to_string()),
            ("peak RSS MiB", rss_mib(self.peak_rss_bytes)),
            ("levels", self.levels.to_string()),
            ("runs", self.runs.to_string()),
            (
                "filter+index MiB",
                format!("{:.2}", self.filter_and_index_bytes as f64 / MIB),
            ),
            (
                "merge steps max/update",
                self.merge_steps_max_per_update.to_string(),
            ),
            (
                "merge steps bound/update",
                self.merge_steps_bound_per_update.to_string(),
            ),
        ];
        let optional = [
            ("fio qd1 IOPS", self.qd1_iops, 0),
            ("fio qd32 IOPS", self.qd32_iops, 0),
            ("ops / qd32 IOPS", self.ops_per_fio_iops, 3),
            ("lookup ops / qd32 IOPS", self.lookup_ops_per_fio_iops, 3),
        ];
        for (name, value, decimals) in optional {
            if let Some(value) = value {
                rows.push((name, format!("{value:.decimals$}")));
            }
        }
        rows.extend(self.snapshot.as_ref().map_or(Vec::new(), snapshot_rows));
        rows
    }

    /// Lookups that did not return the expected value, in the phases and the snapshot check.
    pub fn mismatches(&self) -> u64 {
        self.lookup_mismatches + self.snapshot.as_ref().map_or(0, |s| s.snapshot_mismatches)
    }

    /// The report as a two-column table: metric names left-aligned, values right-aligned.
    pub fn table(&self) -> String {
        render_rows(&self.rows())
    }

    /// Writes the report to `path` as one JSON object (and a newline).
    pub fn write_json(&self, path: &Path) -> Result<(), Failure> {
        write_json(self, path)
    }
}

/// `rows` as a two-column table under a "metric / value" header: names left-aligned, values
/// right-aligned (a value longer than 24 characters, such as a settings line, is not counted
/// in the column's width).
pub fn render_rows(rows: &[(&'static str, String)]) -> String {
    let name_width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let value_width = rows
        .iter()
        .map(|(_, v)| v.len())
        .filter(|&n| n <= 24)
        .max()
        .unwrap_or(0);
    let mut out = format!("{:<name_width$}  {:>value_width$}\n", "metric", "value");
    out.push_str(&format!(
        "{}  {}\n",
        "-".repeat(name_width),
        "-".repeat(value_width)
    ));
    for (name, value) in rows {
        out.push_str(&format!("{name:<name_width$}  {value:>value_width$}\n"));
    }
    out
}

/// Writes `value` to `path` as pretty-printed JSON (and a newline).
pub fn write_json(value: &impl Serialize, path: &Path) -> Result<(), Failure> {
    let mut text =
        serde_json::to_string_pretty(value).context(|| "serialising the report".to_string())?;
    text.push('\n');
    std::fs::write(path, text).context(|| format!("writing {}", path.display()))
}

/// A peak RSS in MiB with one decimal, or "n/a".
pub fn rss_mib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".into(), |b| format!("{:.1}", b as f64 / MIB))
}

/// The `--snapshot` rows of the table.
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

/// Latency summary of one phase, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// Nearest-rank percentiles of `samples` (all zero when empty).
pub fn percentiles(samples: &[f64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank =
        |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Percentiles {
        p50: rank(0.50),
        p99: rank(0.99),
        p999: rank(0.999),
        max: sorted[sorted.len() - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = percentiles(&samples);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(percentiles(&[]), Percentiles::default());
        assert_eq!(percentiles(&[3.0]).p99, 3.0);
        let thousand: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = percentiles(&thousand);
        assert_eq!((p.p50, p.p99, p.p999, p.max), (500.0, 990.0, 999.0, 1000.0));
    }

    #[test]
    fn table_is_aligned_and_json_has_the_required_fields() {
        let report = Report {
            engine: "cairn",
            mode: "serial",
            qd32_iops: Some(1000.0),
            ..Report::default()
        };
        let table = report.table();
        let widths: Vec<usize> = table.lines().map(str::len).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "engine",
            "ops_per_sec",
            "peak_rss_bytes",
            "p99_batch_ms",
            "qd32_iops",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        assert!(json.get("ops_per_fio_iops").is_none());
        assert!(json.get("snapshot_files").is_none());
    }

    #[test]
    fn snapshot_fields_are_flattened_and_shown() {
        let report = Report {
            snapshot: Some(SnapshotStats {
                snapshot_files: 42,
                snapshot_mismatches: 2,
                ..SnapshotStats::default()
            }),
            lookup_mismatches: 1,
            ..Report::default()
        };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["snapshot_files"], 42);
        for field in [
            "snapshot_save_ms",
            "snapshot_bytes",
            "snapshot_open_ms",
            "runs_at_snapshot",
            "levels_at_snapshot",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        assert!(report.table().contains("snapshot files"));
        assert_eq!(report.mismatches(), 3);
    }
}
