//! The JSON records the benchmarks write, each defined once: the struct a command serialises is
//! the struct `report` deserialises, so the two cannot drift apart.
//!
//! Owns: every record's fields and their JSON names, [`write_json`] and [`read_json`]. Must never
//! touch: measuring (the commands fill the records) or rendering ([`crate::report`] does).
//!
//! | record | written by | `benchmark` |
//! |---|---|---|
//! | [`QuickRecord`] | `utxo quick --json` | (none) |
//! | [`SetupRecord`] | `utxo setup --json`, `utxo suite` | `utxo-setup` |
//! | [`RunRecord`] | `utxo run --json`, `utxo suite` | `utxo-run` |
//! | [`SuiteRecord`] | `utxo suite` (`suite.json`) | `utxo-suite` |
//! | [`UnionRecord`] | `union --json` | (none) |
//! | [`UpsertRecord`] | `upsert --json` | `upsert` |
//!
//! Field names carry their units. A field that a record may lack is an `Option`: it is read as
//! `None` when missing (older records) and written as `null` unless it says otherwise.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::failure::{Context, Failure};

/// The `benchmark` of a [`SetupRecord`].
pub const SETUP: &str = "utxo-setup";
/// The `benchmark` of a [`RunRecord`].
pub const RUN: &str = "utxo-run";
/// The `benchmark` of a [`SuiteRecord`].
pub const SUITE: &str = "utxo-suite";

/// Everything one `utxo quick` run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QuickRecord {
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
    /// With `--snapshot`: the snapshot's timings, size and shape, flattened into the JSON object.
    #[serde(flatten)]
    pub snapshot: Option<SnapshotStats>,
}

/// What `utxo quick --snapshot` measured. In the JSON file these fields sit beside the
/// [`QuickRecord`]'s others.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SnapshotStats {
    /// Wall-clock milliseconds of `Table::save_snapshot`.
    pub snapshot_save_ms: f64,
    /// Files in the snapshot's directory (recursively).
    pub snapshot_files: u64,
    /// Total length of those files, in bytes (hard-linked run files included in full).
    pub snapshot_bytes: u64,
    /// Wall-clock milliseconds of `Session::open_snapshot`, which verifies every file.
    pub snapshot_open_ms: f64,
    /// Runs a lookup consulted when the snapshot was saved (`TableStats::runs`).
    pub runs_at_snapshot: usize,
    /// Levels of the table when the snapshot was saved (`TableStats::levels`).
    pub levels_at_snapshot: usize,
    /// Lookups through the reopened table that did not return the expected value (must be 0).
    pub snapshot_mismatches: u64,
}

/// The results of `utxo setup`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetupRecord {
    /// Always [`SETUP`].
    #[serde(default)]
    pub benchmark: String,
    /// The engine.
    pub engine: String,
    /// Its settings, in words.
    pub settings: String,
    /// Entries loaded.
    pub entries: u64,
    /// Seconds of the load (including making it durable).
    pub setup_seconds: f64,
    /// Entries per second of the load.
    pub setup_entries_per_sec: f64,
    /// Peak resident set of the process.
    pub peak_rss_bytes: Option<u64>,
    /// Bytes the process read from and wrote to storage (`/proc/self/io`).
    pub bytes_read: Option<u64>,
    /// See `bytes_read`.
    pub bytes_written: Option<u64>,
}

/// The results of `utxo run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    /// Always [`RUN`].
    #[serde(default)]
    pub benchmark: String,
    /// The engine.
    pub engine: String,
    /// Its settings, in words.
    #[serde(default)]
    pub settings: String,
    /// serial, pipelined or lookup-only.
    pub mode: String,
    /// Pipelined runs: batches whose lookups were in flight at once (`--pipeline-depth`);
    /// records from before the option were depth 1.
    #[serde(default)]
    pub pipeline_depth: Option<u64>,
    /// Entries of the setup.
    pub entries: u64,
    /// Batches run.
    #[serde(default)]
    pub batches: u64,
    /// Untimed batches run first (`--warmup-batches`).
    #[serde(default)]
    pub warmup_batches: u64,
    /// The batches asked for when the run's time limit (`--max-run-seconds`, in
    /// `time_limit_s`) ended it before them: `batches` is then what ran. Absent when every
    /// batch asked for ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_batches: Option<u64>,
    /// The run's time limit in seconds (`--max-run-seconds`), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<u64>,
    /// Background work the engine had pending or running when the timed batches started (after
    /// the warm-up), in its own words; `None`: none, or the engine cannot tell.
    #[serde(default)]
    pub background_work_at_start: Option<String>,
    /// Whether every lookup was checked.
    pub checked: bool,
    /// Lookups that did not return their id's value (must be 0; counted only with `--check`).
    pub mismatches: u64,
    /// Operations per second (lookups + inserts + deletes).
    pub ops_per_sec: f64,
    /// Seconds of the run.
    pub seconds: f64,
    /// Batch latency percentiles, in milliseconds.
    pub p50_batch_ms: f64,
    /// See `p50_batch_ms`.
    pub p99_batch_ms: f64,
    /// See `p50_batch_ms`.
    pub p999_batch_ms: f64,
    /// See `p50_batch_ms`.
    pub max_batch_ms: f64,
    /// Peak resident set of the process.
    pub peak_rss_bytes: Option<u64>,
    /// Resident set of the process when the run began, before its engine opened: the
    /// benchmark binary's own code and data (with the peer libraries it was built with), which
    /// `peak_rss_bytes` includes.
    #[serde(default)]
    pub start_rss_bytes: Option<u64>,
    /// Bytes the process read from storage during the run (`/proc/self/io` `read_bytes`).
    pub bytes_read: Option<u64>,
    /// Bytes the process wrote to storage during the run.
    pub bytes_written: Option<u64>,
    /// The memory limit of the process's cgroup, if one is set.
    pub memory_limit_bytes: Option<u64>,
    /// The disk's 4 KiB random-read IOPS at queue depth 1, measured in the same invocation.
    pub fio_qd1_iops: Option<f64>,
    /// The same at queue depth 32.
    pub fio_qd32_iops: Option<f64>,
    /// `ops_per_sec / fio_qd32_iops`.
    pub ops_per_qd32_iops: Option<f64>,
    /// CPU seconds (user and system, every thread) the process used during the timed batches:
    /// what a run costs the machine whatever the disk's speed that day.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// Added by the parent when the run had a cgroup of its own (`--memory-limit`, `utxo
    /// suite`); absent otherwise.
    #[serde(flatten)]
    pub own_cgroup: Option<CgroupRecord>,
    /// The length of each window of `throughput`, in seconds (see
    /// [`crate::utxo::throughput`]); absent in records made before the series was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_window_s: Option<f64>,
    /// Operations per second of the timed batches over time, one point per window, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throughput: Vec<ThroughputPoint>,
    /// The engine's merge or compaction work per level over the timed batches (its counters at
    /// the end minus those at the start), for an engine that counts it
    /// ([`crate::engines::Engine::level_work`]); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_work: Option<LevelWork>,
}

/// The throughput of one window of a run's timed batches: the operations of the batches that
/// ended in it, over its length.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThroughputPoint {
    /// When the window starts, in seconds since the first timed batch started.
    pub start_s: f64,
    /// The window's length in seconds (the run's window, or less for the last one).
    pub seconds: f64,
    /// Operations of the batches that ended in the window, per second of it.
    pub ops_per_sec: f64,
}

/// An engine's merge or compaction work per level, in its own terms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LevelWork {
    /// What `steps` counts, in words (Cairn: "merge steps (input entries consumed)").
    pub steps_unit: String,
    /// One row per level that has any work, shallowest first.
    pub levels: Vec<LevelWorkRow>,
    /// Work done off the update path that no level's row includes (Cairn: the steps of the
    /// session's background merge thread), in the unit of `steps`; absent when there is none
    /// or the engine cannot tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattributed_steps: Option<u64>,
}

/// The work on one level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelWorkRow {
    /// The level, as the engine numbers it (Cairn's level 1 takes the flushed write buffers;
    /// RocksDB's level 0 its flushed memtables).
    pub level: u32,
    /// Merges or compactions started on the level, where the engine counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
    /// Merges or compactions finished on (written into) the level.
    pub finished: u64,
    /// The work of those merges, in [`LevelWork::steps_unit`].
    pub steps: u64,
}

impl LevelWork {
    /// The work done since `start` (counters taken from the same engine earlier): each level's
    /// figures minus `start`'s (a level absent from `start` had none), levels with no work
    /// since left out. Counters that went backwards (an engine that restarted its counts)
    /// count as 0.
    pub fn since(&self, start: &LevelWork) -> LevelWork {
        let before: BTreeMap<u32, &LevelWorkRow> =
            start.levels.iter().map(|row| (row.level, row)).collect();
        let levels = self
            .levels
            .iter()
            .map(|row| match before.get(&row.level) {
                None => *row,
                Some(old) => LevelWorkRow {
                    level: row.level,
                    started: row
                        .started
                        .map(|now| now.saturating_sub(old.started.unwrap_or(0))),
                    finished: row.finished.saturating_sub(old.finished),
                    steps: row.steps.saturating_sub(old.steps),
                },
            })
            .filter(|row| row.started.unwrap_or(0) > 0 || row.finished > 0 || row.steps > 0)
            .collect();
        LevelWork {
            steps_unit: self.steps_unit.clone(),
            levels,
            unattributed_steps: self
                .unattributed_steps
                .map(|now| now.saturating_sub(start.unattributed_steps.unwrap_or(0))),
        }
    }
}

impl RunRecord {
    /// The peak usage of the run's own cgroup, where it had one and the kernel reports it.
    pub fn cgroup_peak_bytes(&self) -> Option<u64> {
        self.own_cgroup.as_ref()?.cgroup_peak_bytes
    }
}

/// What the parent saw of a child run in a memory cgroup of its own.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CgroupRecord {
    /// The cgroup's peak usage (resident set plus page cache); null without a cgroup, or where
    /// the kernel does not report it.
    pub cgroup_peak_bytes: Option<u64>,
    /// The hierarchy ("v1" or "v2"); null when the run had no cgroup.
    #[serde(rename = "cgroup")]
    pub version: Option<String>,
    /// Why the run had no memory limit, when it had none (absent otherwise, and in records
    /// made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_unlimited_reason: Option<String>,
}

/// `suite.json`: how one `utxo suite` invocation was run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SuiteRecord {
    /// Always [`SUITE`].
    #[serde(default)]
    pub benchmark: String,
    /// When the suite started (UTC, RFC 3339).
    pub date: String,
    /// `git describe --always --dirty` of the working directory, if it is a checkout.
    pub commit: Option<String>,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Entries of each initial table.
    pub entries: u64,
    /// Batches of each run (of each serial run where `mode_batches` is recorded).
    pub batches: u64,
    /// The timed batches of each mode's runs, by mode name (`--batches`,
    /// `--pipelined-batches`, `--lookup-only-batches`, `--protocol`); absent in records made
    /// before the modes could differ, whose runs all had `batches`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mode_batches: BTreeMap<String, u64>,
    /// The batch protocol preset given (`--protocol`, e.g. "lsm-tree"), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Each run's cgroup limit, or `None` when the runs had none.
    pub memory_limit_bytes: Option<u64>,
    /// "v1", "v2", or `None` without cgroup support.
    pub cgroup: Option<String>,
    /// Why the runs had no memory limit, when they had none (absent otherwise, and in records
    /// made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_unlimited_reason: Option<String>,
    /// Whether the page cache was dropped before every run (needs root).
    pub page_cache_dropped: bool,
    /// Seconds waited after each setup this invocation made (its writes flushed) before that
    /// engine's first run; absent when no setup was waited for (every setup reused, a wait of
    /// 0) and in records made before the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_after_setup_s: Option<u64>,
    /// The disk's 4 KiB random-read IOPS at queue depth 1.
    pub fio_qd1_iops: Option<f64>,
    /// The same at queue depth 32: the figure every ratio of the report divides by.
    pub fio_qd32_iops: Option<f64>,
    /// The disk's queue-depth-32 IOPS measured again after the last run (absent in records made
    /// before it was measured): the disk's drift over the invocation, shown beside the ratios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fio_qd32_iops_end: Option<f64>,
    /// The engines, in order.
    #[serde(default)]
    pub engines: Vec<String>,
    /// The modes, in order.
    #[serde(default)]
    pub modes: Vec<String>,
    /// The file system holding the tables, with its mount options (`discard` makes every file
    /// removal cost the device a TRIM); absent in records made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_mount: Option<String>,
}

/// The machine a suite ran on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` of the first CPU in `/proc/cpuinfo`.
    pub cpu: Option<String>,
    /// CPUs available to the process.
    pub cores: usize,
    /// `MemTotal` of `/proc/meminfo`.
    pub mem_total_bytes: Option<u64>,
    /// The kernel release.
    pub kernel: Option<String>,
}

/// Everything one `union` run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnionRecord {
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

/// The results of `upsert`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UpsertRecord {
    /// Always "upsert".
    pub benchmark: &'static str,
    /// Always "cairn".
    pub engine: &'static str,
    /// Distinct keys.
    pub elements: u64,
    /// Operations per batch.
    pub batch: u64,
    /// Write-buffer entries.
    pub write_buffer: usize,
    /// Upserts (or lookup-then-inserts) per key in comparison 2.
    pub upserts_per_key: u64,
    /// Repetitions of every measurement.
    pub repeat: u64,
    /// Median milliseconds to insert every element once.
    pub insert_ms: f64,
    /// Median milliseconds to upsert every element once.
    pub upsert_ms: f64,
    /// `upsert_ms / insert_ms`.
    pub upsert_over_insert: f64,
    /// Median milliseconds of the repeated upserts.
    pub repeated_upserts_ms: f64,
    /// Median milliseconds of the repeated lookup-then-inserts.
    pub lookup_then_insert_ms: f64,
    /// `lookup_then_insert_ms / repeated_upserts_ms`.
    pub upsert_speedup: f64,
    /// Every measured time, in run order, for the record.
    pub samples_ms: UpsertSamples,
    /// Keys whose final counter was wrong (must be 0).
    pub mismatches: u64,
    /// The process's peak resident set.
    pub peak_rss_bytes: Option<u64>,
}

/// Raw times of each upsert measurement, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UpsertSamples {
    /// Insert every element once.
    pub insert: Vec<f64>,
    /// Upsert every element once.
    pub upsert: Vec<f64>,
    /// Repeated upserts.
    pub repeated_upserts: Vec<f64>,
    /// Repeated lookup-then-inserts.
    pub lookup_then_insert: Vec<f64>,
}

/// Writes `value` to `path` as pretty-printed JSON (and a newline).
pub fn write_json(value: &impl Serialize, path: &Path) -> Result<(), Failure> {
    let mut text =
        serde_json::to_string_pretty(value).context(|| "serialising a record".to_string())?;
    text.push('\n');
    std::fs::write(path, text).context(|| format!("writing {}", path.display()))
}

/// Reads the JSON file `path` as a `T`.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, Failure> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).context(|| format!("parsing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_json_has_the_required_fields() {
        let record = QuickRecord {
            engine: "cairn",
            mode: "serial",
            qd32_iops: Some(1000.0),
            ..QuickRecord::default()
        };
        let json = serde_json::to_value(&record).unwrap();
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
    fn snapshot_fields_are_flattened() {
        let record = QuickRecord {
            snapshot: Some(SnapshotStats {
                snapshot_files: 42,
                ..SnapshotStats::default()
            }),
            ..QuickRecord::default()
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["snapshot_files"], 42);
        for field in [
            "snapshot_save_ms",
            "snapshot_bytes",
            "snapshot_open_ms",
            "runs_at_snapshot",
            "levels_at_snapshot",
            "snapshot_mismatches",
        ] {
            assert!(json.get(field).is_some(), "{field}");
        }
    }

    #[test]
    fn union_json_has_the_required_fields() {
        let json = serde_json::to_value(UnionRecord::default()).unwrap();
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
    }

    fn run_record() -> RunRecord {
        RunRecord {
            benchmark: RUN.to_string(),
            engine: "cairn".to_string(),
            settings: "s".to_string(),
            mode: "serial".to_string(),
            pipeline_depth: None,
            entries: 10,
            batches: 2,
            warmup_batches: 1,
            planned_batches: None,
            time_limit_s: None,
            background_work_at_start: Some("1 merge in progress".into()),
            checked: true,
            mismatches: 0,
            ops_per_sec: 1.5,
            seconds: 2.0,
            p50_batch_ms: 0.1,
            p99_batch_ms: 0.2,
            p999_batch_ms: 0.3,
            max_batch_ms: 0.4,
            peak_rss_bytes: Some(1 << 20),
            start_rss_bytes: Some(1 << 19),
            bytes_read: None,
            bytes_written: Some(4096),
            memory_limit_bytes: None,
            fio_qd1_iops: None,
            fio_qd32_iops: None,
            ops_per_qd32_iops: None,
            cpu_seconds: Some(1.25),
            own_cgroup: None,
            throughput_window_s: None,
            throughput: Vec::new(),
            level_work: None,
        }
    }

    fn row(level: u32, started: Option<u64>, finished: u64, steps: u64) -> LevelWorkRow {
        LevelWorkRow {
            level,
            started,
            finished,
            steps,
        }
    }

    #[test]
    fn level_work_since_a_start_keeps_the_levels_that_worked() {
        let start = LevelWork {
            steps_unit: "steps".into(),
            levels: vec![row(1, Some(0), 0, 0), row(2, Some(10), 9, 1_000)],
            unattributed_steps: Some(50),
        };
        let end = LevelWork {
            steps_unit: "steps".into(),
            levels: vec![
                row(1, Some(0), 0, 0),
                row(2, Some(14), 13, 1_800),
                row(3, Some(1), 0, 300),
            ],
            unattributed_steps: Some(80),
        };
        let since = end.since(&start);
        assert_eq!(
            since.levels,
            [row(2, Some(4), 4, 800), row(3, Some(1), 0, 300)]
        );
        assert_eq!(since.unattributed_steps, Some(30));
        assert_eq!(since.steps_unit, "steps");
        // Counters that went backwards count as none; an engine without `started` keeps none.
        let rocks = |finished, steps| LevelWork {
            levels: vec![row(0, None, finished, steps)],
            ..LevelWork::default()
        };
        assert_eq!(
            rocks(5, 100).since(&rocks(7, 50)).levels,
            [row(0, None, 0, 50)]
        );
        assert!(rocks(5, 100).since(&rocks(5, 100)).levels.is_empty());
    }

    #[test]
    fn new_run_fields_round_trip_and_older_records_load_without_them() {
        let record = RunRecord {
            throughput_window_s: Some(2.5),
            throughput: vec![ThroughputPoint {
                start_s: 0.0,
                seconds: 2.5,
                ops_per_sec: 1e5,
            }],
            level_work: Some(LevelWork {
                steps_unit: "steps".into(),
                levels: vec![row(2, Some(1), 1, 7)],
                unattributed_steps: None,
            }),
            ..run_record()
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["throughput"][0]["ops_per_sec"], 1e5);
        assert!(
            json["level_work"].get("unattributed_steps").is_none(),
            "{json}"
        );
        let back: RunRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.throughput, record.throughput);
        assert_eq!(back.level_work, record.level_work);
        // A record without them writes none of them, and reads back the same.
        let json = serde_json::to_value(run_record()).unwrap();
        for field in ["throughput_window_s", "throughput", "level_work"] {
            assert!(json.get(field).is_none(), "{field}: {json}");
        }
        let back: RunRecord = serde_json::from_value(json).unwrap();
        assert!(back.throughput.is_empty() && back.level_work.is_none());
    }

    #[test]
    fn run_records_round_trip_with_and_without_their_cgroup_fields() {
        let plain = run_record();
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("cgroup_peak_bytes").is_none() && json.get("cgroup").is_none());
        assert_eq!(json["benchmark"], RUN);
        let back: RunRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.cgroup_peak_bytes(), None);
        assert_eq!(back.ops_per_sec, 1.5);

        let unlimited = RunRecord {
            own_cgroup: Some(CgroupRecord {
                memory_unlimited_reason: Some("no controller".to_string()),
                ..CgroupRecord::default()
            }),
            ..run_record()
        };
        let json = serde_json::to_value(&unlimited).unwrap();
        assert!(
            json["cgroup_peak_bytes"].is_null() && json["cgroup"].is_null(),
            "{json}"
        );
        assert_eq!(json["memory_unlimited_reason"], "no controller");
        let peaked = RunRecord {
            own_cgroup: Some(CgroupRecord {
                cgroup_peak_bytes: Some(7),
                version: Some("v2".to_string()),
                memory_unlimited_reason: None,
            }),
            ..run_record()
        };
        let json = serde_json::to_value(&peaked).unwrap();
        assert_eq!(
            (&json["cgroup_peak_bytes"], &json["cgroup"]),
            (&7.into(), &"v2".into())
        );
        assert!(json.get("memory_unlimited_reason").is_none(), "{json}");
        let back: RunRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back.cgroup_peak_bytes(), Some(7));
        assert_eq!(back.own_cgroup.unwrap().version.as_deref(), Some("v2"));
    }
}
