//! `cairn-bench`: benchmarks for the Cairn storage engine.
//!
//! # `cairn-bench utxo quick --entries N --batches K`
//!
//! lsm-tree's UTxO benchmark (requirement P1; `lsm-tree/bench/macro/utxo-bench.hs`), on a table
//! built in a fresh temporary directory:
//!
//! 1. **Setup.** A table with the compact index, Bloom filters at FPR 1e-3, a 20,000-entry write
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
//! and it is closed and the snapshot deleted. The reopened table's filters and indexes count
//! towards the peak RSS. See the [`snapshot`] module.
//!
//! Every lookup result is checked (the snapshot's included): it must be `Found` with exactly the
//! id's value. Any mismatch makes the command exit with status 1 after printing the results.
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
//! results as one JSON object (see [`report::Report`] for the fields).
//!
//! # `cairn-bench utxo setup`, `utxo run`, `utxo suite` and `report`
//!
//! The same workload on any engine behind [`engine::Engine`] (Cairn, and with their cargo
//! features RocksDB, LMDB and fjall), with the table built once by `setup` and used by every
//! `run` (modes serial, pipelined and lookup-only; `--check` compares every lookup with a model;
//! `--memory-limit` runs it in a memory cgroup of its own). `utxo suite` does it all for every
//! engine in one invocation, each run in its own cgroup with the same limit and the page cache
//! dropped before it, and `report` turns the JSON records into `README.md` with SVG charts. See
//! the [`utxo_run`], [`suite`], [`cgroup`] and [`report_cmd`] modules.
//!
//! # `cairn-bench upsert`
//!
//! lsm-tree's upsert benchmark (P2): see [`upsert_bench`].
//!
//! # `cairn-bench union --tables T --entries-per-table N --lookups L`
//!
//! lsm-tree's table-union benchmark: lookups on one table, then on the incremental union of T
//! partly overlapping tables with its full debt, then again once the debt is paid off with
//! `supply_union_credits`. See the [`union_bench`] module for the phases and
//! [`union_report::UnionReport`] for the fields of its results.

mod cgroup;
mod cli;
mod engine;
mod engine_cairn;
#[cfg(feature = "fjall")]
mod engine_fjall;
#[cfg(feature = "lmdb")]
mod engine_lmdb;
#[cfg(feature = "rocksdb")]
mod engine_rocksdb;
mod failure;
mod fio;
mod keys;
mod live;
mod report;
mod report_cmd;
mod snapshot;
mod suite;
mod union_bench;
mod union_report;
mod upsert_bench;
mod utxo_run;
mod workload;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use cairn::fs::RealFs;
use cairn::{IndexType, Session, SessionOptions, Table, TableConfig};
use clap::Parser;

use crate::cli::{io_backend_name, Cli, Command, DiskCacheArg, Mode, QuickArgs, UtxoCommand};
use crate::failure::{Context, Failure};
use crate::report::{peak_rss_bytes, percentiles, Report};
use crate::workload::{Driver, PhaseTiming, BATCH_SIZE};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(failure) = cgroup::join_from_env() {
        eprintln!("cairn-bench: error: {failure}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Utxo(UtxoCommand::Quick(args)) => utxo_quick(&args),
        Command::Utxo(UtxoCommand::Setup(args)) => utxo_run::setup(&args),
        Command::Utxo(UtxoCommand::Run(args)) => utxo_run::run(&args),
        Command::Utxo(UtxoCommand::Suite(args)) => suite::run(&args),
        Command::Union(args) => union_bench::run(&args),
        Command::Upsert(args) => upsert_bench::run(&args),
        Command::Report(args) => report_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("cairn-bench: error: {failure}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `f` in a fresh temporary directory under `parent` (default: the system's temporary
/// directory), then removes the directory unless `keep`.
pub fn in_temp_dir<T>(
    parent: Option<&Path>,
    keep: bool,
    f: impl FnOnce(&Path) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let dir = match parent {
        Some(parent) => tempfile::tempdir_in(parent)
            .context(|| format!("creating a benchmark directory in {}", parent.display()))?,
        None => tempfile::tempdir().context(|| "creating a benchmark directory".to_string())?,
    };
    eprintln!("benchmark directory: {}", dir.path().display());
    let result = f(dir.path());
    if keep {
        let kept = dir.keep();
        eprintln!("kept the benchmark directory {}", kept.display());
    } else {
        let path = dir.path().to_path_buf();
        dir.close()
            .context(|| format!("removing the benchmark directory {}", path.display()))?;
    }
    result
}

/// Runs `utxo quick` in a temporary directory, prints the table and writes the JSON file.
fn utxo_quick(args: &QuickArgs) -> Result<(), Failure> {
    let report = in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        bench_in(dir, args)
    })?;
    print!("{}", report.table());
    if let Some(path) = &args.common.json {
        report.write_json(path)?;
    }
    if report.mismatches() > 0 {
        return Err(Failure(format!(
            "{} lookups did not return the expected value (see the check lines above)",
            report.mismatches()
        )));
    }
    Ok(())
}

/// The table configuration of the UTxO benchmark (also used by `union`): the compact index,
/// Bloom filters at FPR 1e-3, incremental merges, `KeepNewest`.
pub fn utxo_table_config(
    write_buffer: usize,
    merge_batch_size: usize,
    disk_cache: DiskCacheArg,
) -> TableConfig {
    TableConfig {
        index: IndexType::Compact,
        bloom: cairn::BloomAlloc::TargetFpr(1e-3),
        write_buffer_entries: write_buffer,
        merge_batch_size,
        disk_cache: disk_cache.policy(),
        merge_schedule: cairn::MergeSchedule::Incremental,
        resolve: cairn::Resolve::KeepNewest,
    }
}

/// Opens a session in `dir`, runs every phase and collects the report. The session and table
/// are closed before this returns, so the directory can be removed.
fn bench_in(dir: &Path, args: &QuickArgs) -> Result<Report, Failure> {
    let options = SessionOptions {
        io_backend: args.common.io.kind(),
        salt: Some(args.common.seed),
    };
    let session = Session::open_with(Arc::new(RealFs), dir, options)
        .context(|| format!("opening a session in {}", dir.display()))?;
    let table = session
        .new_table(utxo_table_config(
            args.common.write_buffer,
            args.common.merge_batch_size,
            args.common.disk_cache,
        ))
        .context(|| "creating the table".to_string())?;
    let mut report = Report {
        engine: "cairn",
        mode: args.mode.name(),
        entries: args.entries,
        batches: args.batches,
        seed: args.common.seed,
        io_backend: io_backend_name(session.io_backend()),
        disk_cache: if session.io_report().direct_io.is_refused() {
            "all (O_DIRECT refused)"
        } else {
            args.common.disk_cache.name()
        },
        ..Report::default()
    };
    report.setup_seconds = workload::setup(&table, args.entries, args.common.seed)?;
    report.setup_entries_per_sec = args.entries as f64 / report.setup_seconds.max(1e-9);
    if args.snapshot {
        let stats = snapshot::measure(&session, &table, dir, args.entries, args.common.seed)?;
        report.snapshot = Some(stats);
    }
    if let Some(script) = &args.fio_baseline {
        let baseline = fio::measure(script, dir)?;
        report.qd1_iops = baseline.qd1_iops;
        report.qd32_iops = Some(baseline.qd32_iops);
    }
    run_phases(&table, args, &mut report)?;
    record_table_stats(&table, &mut report)?;
    report.peak_rss_bytes = peak_rss_bytes();
    table.close();
    session.close();
    Ok(report)
}

/// Runs the serial phase (unless lookup-only) and the lookup-only pass, filling in the rates,
/// latencies, mismatch count and fio ratios.
fn run_phases(table: &Table, args: &QuickArgs, report: &mut Report) -> Result<(), Failure> {
    let mut driver = Driver::new(table, args.entries, args.common.seed);
    let serial = match args.mode {
        Mode::Serial => Some(driver.run_serial(args.batches)?),
        Mode::LookupOnly => None,
    };
    let lookups = driver.run_lookup_only(args.batches)?;
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

/// Copies the table's final shape into the report.
fn record_table_stats(table: &Table, report: &mut Report) -> Result<(), Failure> {
    let stats = table
        .stats()
        .context(|| "reading the table statistics".to_string())?;
    report.levels = stats.levels;
    report.runs = stats.runs;
    report.filter_and_index_bytes = stats.filter_and_index_bytes;
    report.merge_steps_max_per_update = stats.merge_steps_max_per_update;
    report.merge_steps_bound_per_update = stats.merge_steps_bound_per_update;
    Ok(())
}
