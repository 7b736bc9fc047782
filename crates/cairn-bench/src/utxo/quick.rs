//! `cairn-bench utxo quick --entries N --batches K`: lsm-tree's UTxO benchmark (requirement P1;
//! `lsm-tree/bench/macro/utxo-bench.hs`) on a Cairn table built in a fresh temporary directory,
//! in one invocation.
//!
//! Owns: the phases of a quick run and its record. May call: the Cairn adapter
//! ([`CairnEngine`]) for the table's shape and snapshots, and the [UTxO driver](super::driver),
//! the same one `utxo run` uses, for the batches.
//!
//! 1. **Setup.** A table with the compact index, Bloom filters sized per level (FPR 5e-3 on the
//!    deepest level, 4x lower per level above), a 20,000-entry write
//!    buffer (`--write-buffer`), incremental merges in batches of 1,000 steps
//!    (`--merge-batch-size`) and (unless `--disk-cache all`) no page cache for runs, so
//!    lookups read with `O_DIRECT`. Ids `0..N` are inserted in chunks of 10,000. A key is 34
//!    bytes drawn from a SplitMix64 stream seeded with `id ^ seed` (uniform, like the hashes of
//!    real UTxO keys); the value is the id's 8 little-endian bytes repeated to 60 bytes.
//! 2. **Run (serial).** K batches, one after the other. A batch looks up 256 live keys chosen
//!    uniformly, then applies one `updates` call with 256 inserts of fresh keys (the next ids)
//!    and 256 deletes of distinct live keys chosen uniformly. The live set is a bitmap of deleted
//!    ids (1 bit per id), so the model adds only `ids / 8` bytes to the peak RSS.
//! 3. **Lookup-only pass.** K more batches of 256 lookups and nothing else. `--mode lookup-only`
//!    runs only this pass.
//!
//! With `--snapshot`, between setup and the run phase, the table is saved as snapshot `bench`
//! (`Table::save_snapshot`), the files in `<session dir>/snapshots/bench/` are counted, the
//! snapshot is opened again as a second table (`Session::open_snapshot`, which reads every file
//! to verify its checksum), 512 ids of `0..N` chosen uniformly are looked up through that table,
//! and it is closed and the snapshot deleted (kept with `--keep`, which keeps the directory). The reopened table's filters and indexes count
//! towards the peak RSS. See the [`super::snapshot`] module.
//!
//! Every lookup result is checked (the snapshot's included): it must be exactly the id's value. Any mismatch makes the command exit with status 1 after printing the results.
//!
//! # The numbers
//!
//! - `setup entries/s`: N / seconds of the setup inserts (including writing runs and merging).
//! - `ops/s`: (256 lookups + 256 inserts + 256 deletes) * K / wall-clock seconds of the run
//!   phase; in lookup-only mode, the lookup pass's rate.
//! - `lookup-only ops/s`: 256 * K / seconds of the lookup-only pass.
//! - `p50/p99/max batch ms`: engine time (the `lookups` call plus the `updates` call) per batch
//!   of the measured phase; `lookup p99 batch ms` is for the lookup-only pass.
//! - `peak RSS MiB`: the process's high-water resident set (`VmHWM`), write buffer, Bloom
//!   filters, indexes and the benchmark's own model included.
//! - `levels`, `runs`, `filter+index MiB`: the table's shape at the end (`Table::stats`);
//!   `merge steps max/update` is the most merge work one update did (setup included), next to
//!   the engine's stated bound for the final number of levels.
//! - With `--fio-baseline PATH`, the script `PATH DIR 8` measures the device's 4 KiB random-read
//!   IOPS in the benchmark directory before the run phase; `ops / qd32 IOPS` is `ops/s` divided
//!   by its queue-depth-32 IOPS (the target ratio of P1), and likewise for the lookup pass.
//! - With `--snapshot`: `snapshot save ms` and `snapshot open ms` are the wall-clock times of
//!   the save and of the open (the open time includes the checksum reads of the whole table, from
//!   the page cache when the runs are still cached there); `snapshot files` and `snapshot bytes`
//!   count the files in the snapshot's directory and the sum of their lengths (run files are
//!   hard links, so most of these bytes are shared with the table, not copied); `runs at
//!   snapshot` and `levels at snapshot` are `Table::stats` just before the save; and `snapshot
//!   mismatches` counts wrong lookups through the reopened table (must be 0). The save should
//!   cost O(runs) file operations, so the file count should grow like the runs, logarithmically
//!   in N.
//!
//! Progress lines go to stderr, the results table to stdout, and `--json FILE` writes the same
//! results as one JSON object (see [`QuickRecord`] for the fields).

use std::path::Path;

use crate::cli::{Mode, QuickArgs};
use crate::engines::cairn::CairnEngine;
use crate::engines::EngineOptions;
use crate::failure::Failure;
use crate::in_temp_dir;
use crate::options::DiskCacheArg;
use crate::record::{write_json, QuickRecord};
use crate::report::terminal;
use crate::stats::percentiles;
use crate::sys::fio;
use crate::sys::proc::peak_rss_bytes;
use crate::utxo::driver::{Driver, PhaseTiming, BATCH_SIZE};
use crate::utxo::setup::load;
use crate::utxo::snapshot;

/// Runs `utxo quick` in a temporary directory, prints the table and writes the JSON file; with
/// `--wal`, again with a durable table, and the ratio of the two.
pub fn run(args: &QuickArgs) -> Result<(), Failure> {
    let report = in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        bench_in(dir, args, false)
    })?;
    print!("{}", terminal::quick(&report));
    if let Some(path) = &args.common.json {
        write_json(&report, path)?;
    }
    let mut mismatches = mismatches(&report);
    if args.wal {
        let logged = in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
            bench_in(dir, args, true)
        })?;
        println!();
        println!("with the write-ahead log (durable table, default group window):");
        print!("{}", terminal::quick(&logged));
        println!();
        println!(
            "serial ops/s with the log: {:.0}, without: {:.0}, ratio {:.3}",
            logged.ops_per_sec,
            report.ops_per_sec,
            logged.ops_per_sec / report.ops_per_sec.max(1e-9)
        );
        if let Some(path) = &args.common.json {
            write_json(&logged, &path.with_extension("wal.json"))?;
        }
        mismatches += self::mismatches(&logged);
    }
    if mismatches > 0 {
        return Err(Failure(format!(
            "{mismatches} lookups did not return the expected value (see the check lines above)"
        )));
    }
    Ok(())
}

/// Lookups that did not return the expected value, in the phases and the snapshot check.
fn mismatches(report: &QuickRecord) -> u64 {
    let snapshot = report.snapshot.as_ref();
    report.lookup_mismatches + snapshot.map_or(0, |s| s.snapshot_mismatches)
}

/// Opens a session in `dir`, runs every phase and collects the report. The session and table
/// are closed before this returns, so the directory can be removed.
fn bench_in(dir: &Path, args: &QuickArgs, wal: bool) -> Result<QuickRecord, Failure> {
    let options = EngineOptions {
        direct_io: args.common.disk_cache == DiskCacheArg::None,
        seed: args.common.seed,
        write_buffer: args.common.write_buffer,
        merge_batch_size: args.common.merge_batch_size,
        io: args.common.io,
        wal,
        background_merges: args.background_merges,
        filters_for_hits: false,
        read_budget: 0,
    };
    let engine = CairnEngine::open(dir, true, &options)?;
    let mut report = QuickRecord {
        engine: "cairn",
        mode: args.mode.name(),
        entries: args.entries,
        batches: args.batches,
        seed: args.common.seed,
        io_backend: engine.session().io_backend_name(),
        disk_cache: engine
            .session()
            .disk_cache_name(args.common.disk_cache.name()),
        ..QuickRecord::default()
    };
    report.setup_seconds = load(&engine, 0..args.entries, args.common.seed, "setup")?;
    report.setup_entries_per_sec = args.entries as f64 / report.setup_seconds.max(1e-9);
    if args.snapshot {
        let stats = snapshot::measure(&engine, args.entries, args.common.seed, args.common.keep)?;
        report.snapshot = Some(stats);
    }
    if let Some(script) = &args.fio_baseline {
        let baseline = fio::measure(script, dir)?;
        report.qd1_iops = baseline.qd1_iops;
        report.qd32_iops = Some(baseline.qd32_iops);
    }
    run_phases(&engine, args, &mut report)?;
    let shape = engine.table().shape()?;
    report.levels = shape.levels;
    report.runs = shape.runs;
    report.filter_and_index_bytes = shape.filter_and_index_bytes;
    report.merge_steps_max_per_update = shape.merge_steps_max_per_update;
    report.merge_steps_bound_per_update = shape.merge_steps_bound_per_update;
    report.peak_rss_bytes = peak_rss_bytes();
    engine.close();
    Ok(report)
}

/// Runs the serial phase (unless lookup-only) and the lookup-only pass, filling in the rates,
/// latencies, mismatch count and fio ratios.
fn run_phases(
    engine: &CairnEngine,
    args: &QuickArgs,
    report: &mut QuickRecord,
) -> Result<(), Failure> {
    let mut driver = Driver::new(engine, args.entries, args.common.seed, true);
    let serial = match args.mode {
        Mode::Serial => Some(driver.serial("run", args.batches, true)?),
        Mode::LookupOnly => None,
    };
    let lookups = driver.serial("lookup-only", args.batches, false)?;
    let lookup_ops = (BATCH_SIZE as u64 * args.batches) as f64;
    report.lookup_seconds = lookups.seconds;
    report.lookup_ops_per_sec = lookup_ops / lookups.seconds.max(1e-9);
    report.lookup_p99_batch_ms = percentiles(&lookups.batch_ms).p99;
    let (measured, ops): (&PhaseTiming, f64) = match &serial {
        Some(serial) => (serial, 3.0 * lookup_ops),
        None => (&lookups, lookup_ops),
    };
    report.run_seconds = measured.seconds;
    report.ops_per_sec = ops / measured.seconds.max(1e-9);
    let latency = percentiles(&measured.batch_ms);
    (
        report.p50_batch_ms,
        report.p99_batch_ms,
        report.max_batch_ms,
    ) = (latency.p50, latency.p99, latency.max);
    report.lookup_mismatches = driver.mismatches();
    if let Some(qd32) = report.qd32_iops {
        report.ops_per_fio_iops = Some(report.ops_per_sec / qd32);
        report.lookup_ops_per_fio_iops = Some(report.lookup_ops_per_sec / qd32);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::SnapshotStats;

    #[test]
    fn mismatches_count_the_snapshot_check_too() {
        let report = QuickRecord {
            snapshot: Some(SnapshotStats {
                snapshot_mismatches: 2,
                ..SnapshotStats::default()
            }),
            lookup_mismatches: 1,
            ..QuickRecord::default()
        };
        assert_eq!(mismatches(&report), 3);
    }
}
