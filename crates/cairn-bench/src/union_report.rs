//! The results of `cairn-bench union`: collected into [`UnionReport`], printed as an aligned
//! table and written as JSON.
//!
//! Owns: [`UnionReport`] and its rows. Must never touch: the engine.

use std::path::Path;

use serde::Serialize;

use crate::failure::Failure;
use crate::record::{render_rows, rss_mib, write_json};

/// Everything one `union` run measured. Field names carry their units; the JSON file is this
/// struct serialised.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnionReport {
    /// Always "cairn".
    pub engine: &'static str,
    /// Tables in the union.
    pub tables: u64,
    /// Entries inserted into each table.
    pub entries_per_table: u64,
    /// Lookups in each lookup pass.
    pub lookups: u64,
    /// The seed of keys and choices.
    pub seed: u64,
    /// The resolved block I/O backend ("uring" or "pread").
    pub io_backend: &'static str,
    /// The disk-cache policy ("none" or "all").
    pub disk_cache: &'static str,
    /// Credits per `supply_union_credits` call.
    pub credit_chunk: u64,
    /// Seconds the inserts into all tables took (merges included).
    pub fill_seconds: f64,
    /// Runs a lookup consults, summed over the input tables after filling.
    pub input_runs: usize,
    /// Distinct keys in the union, computed from the tables' id ranges.
    pub union_keys: u64,
    /// `remaining_union_debt` right after the union started: the engine's upper bound on the
    /// union's keys (it counts a key once per input that holds it).
    pub union_keys_upper_bound: u64,
    /// The same debt, under the name of the lsm-tree benchmark.
    pub union_debt_start: u64,
    /// Lookups per second on table 0 alone (keys present in table 0).
    pub baseline_lookups_per_sec: f64,
    /// 99th-percentile batch time of the baseline pass, in ms.
    pub baseline_p99_batch_ms: f64,
    /// Wall-clock milliseconds of `Table::incremental_unions`.
    pub union_start_ms: f64,
    /// Lookups per second on the union with its full debt (keys of the union's key space).
    pub union_with_debt_lookups_per_sec: f64,
    /// 99th-percentile batch time on the union with its full debt, in ms.
    pub union_with_debt_p99_batch_ms: f64,
    /// Seconds of the `supply_union_credits` loop that paid the debt off.
    pub union_pay_seconds: f64,
    /// Credits the engine actually spent (asked for minus left over) per second of payment.
    pub union_credits_per_sec: f64,
    /// Credits the engine actually spent: the union's output keys.
    pub union_credits_spent: u64,
    /// `supply_union_credits` calls made.
    pub union_supply_calls: u64,
    /// The slowest `supply_union_credits` call, in ms.
    pub union_supply_max_ms: f64,
    /// Calls after which `remaining_union_debt` was larger than before (must be 0).
    pub union_debt_increases: u64,
    /// Lookups per second on the paid-off union (the same keys as with debt).
    pub union_paid_lookups_per_sec: f64,
    /// 99th-percentile batch time on the paid-off union, in ms.
    pub union_paid_p99_batch_ms: f64,
    /// Runs a lookup consults in the paid-off union (`TableStats::runs`).
    pub union_paid_runs: usize,
    /// Levels of the paid-off union (`TableStats::levels`).
    pub union_paid_levels: usize,
    /// Lookups of the three passes that did not return the id's value (must be 0).
    pub lookup_mismatches: u64,
    /// Peak resident set size (VmHWM), in bytes; null where /proc is unavailable.
    pub peak_rss_bytes: Option<u64>,
}

impl UnionReport {
    /// The report as (metric, value) rows.
    fn rows(&self) -> Vec<(&'static str, String)> {
        let f0 = |x: f64| format!("{x:.0}");
        let f3 = |x: f64| format!("{x:.3}");
        vec![
            ("engine", self.engine.to_string()),
            ("tables", self.tables.to_string()),
            ("entries per table", self.entries_per_table.to_string()),
            ("lookups per pass", self.lookups.to_string()),
            ("io backend", self.io_backend.to_string()),
            ("disk cache", self.disk_cache.to_string()),
            ("fill s", format!("{:.2}", self.fill_seconds)),
            ("input runs", self.input_runs.to_string()),
            ("union keys", self.union_keys.to_string()),
            ("union debt start", self.union_debt_start.to_string()),
            ("baseline lookups/s", f0(self.baseline_lookups_per_sec)),
            ("baseline p99 batch ms", f3(self.baseline_p99_batch_ms)),
            ("union start ms", f3(self.union_start_ms)),
            (
                "with-debt lookups/s",
                f0(self.union_with_debt_lookups_per_sec),
            ),
            (
                "with-debt p99 batch ms",
                f3(self.union_with_debt_p99_batch_ms),
            ),
            ("union pay s", format!("{:.2}", self.union_pay_seconds)),
            ("union credits/s", f0(self.union_credits_per_sec)),
            ("union credits spent", self.union_credits_spent.to_string()),
            ("supply calls", self.union_supply_calls.to_string()),
            ("supply max ms", format!("{:.1}", self.union_supply_max_ms)),
            ("debt increases", self.union_debt_increases.to_string()),
            ("paid-off lookups/s", f0(self.union_paid_lookups_per_sec)),
            ("paid-off p99 batch ms", f3(self.union_paid_p99_batch_ms)),
            ("paid-off runs", self.union_paid_runs.to_string()),
            ("paid-off levels", self.union_paid_levels.to_string()),
            ("lookup mismatches", self.lookup_mismatches.to_string()),
            ("peak RSS MiB", rss_mib(self.peak_rss_bytes)),
        ]
    }

    /// The report as a two-column table.
    pub fn table(&self) -> String {
        render_rows(&self.rows())
    }

    /// Writes the report to `path` as one JSON object (and a newline).
    pub fn write_json(&self, path: &Path) -> Result<(), Failure> {
        write_json(self, path)
    }

    /// What went wrong in the run, if anything: wrong lookups or a debt that grew.
    pub fn problems(&self) -> Option<String> {
        let mut problems = Vec::new();
        if self.lookup_mismatches > 0 {
            problems.push(format!(
                "{} lookups did not return the expected value",
                self.lookup_mismatches
            ));
        }
        if self.union_debt_increases > 0 {
            problems.push(format!(
                "the union debt increased after {} supply calls",
                self.union_debt_increases
            ));
        }
        (!problems.is_empty()).then(|| problems.join("; ") + " (see the lines above)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_required_fields_and_table_is_aligned() {
        let report = UnionReport {
            engine: "cairn",
            peak_rss_bytes: Some(1 << 20),
            ..UnionReport::default()
        };
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "tables",
            "entries_per_table",
            "union_keys",
            "union_keys_upper_bound",
            "baseline_lookups_per_sec",
            "union_with_debt_lookups_per_sec",
            "union_paid_lookups_per_sec",
            "union_start_ms",
            "union_pay_seconds",
            "union_debt_start",
            "peak_rss_bytes",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
        let table = report.table();
        let widths: Vec<usize> = table.lines().map(str::len).collect();
        assert!(widths.windows(2).all(|w| w[0] == w[1]), "{table}");
        assert!(report.problems().is_none());
    }

    #[test]
    fn problems_name_mismatches_and_debt_increases() {
        let report = UnionReport {
            lookup_mismatches: 3,
            union_debt_increases: 1,
            ..UnionReport::default()
        };
        let problems = report.problems().unwrap();
        assert!(problems.contains("3 lookups"), "{problems}");
        assert!(problems.contains("increased after 1"), "{problems}");
    }
}
