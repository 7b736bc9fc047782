//! `cairn-bench utxo suite`: the side-by-side comparison of P1 and P4 in one invocation. For each
//! engine in turn: `utxo setup` (unless an equal setup is reused), then `utxo run` in each mode,
//! each run a child process in a memory cgroup of its own with the same limit (page cache
//! included) and with the page cache dropped before it; then `suite.json` and the report.
//!
//! Owns: the order of the steps, the contents of `suite.json` ([`SuiteRecord`]: machine, commit,
//! command, the timed batches of each mode ([`mode_batches`]: `--batches`,
//! `--pipelined-batches`, `--lookup-only-batches` or a `--protocol` preset), memory limit, fio
//! baseline) and the records directory. Must never touch: an engine (every step is a child `cairn-bench`
//! process, so each engine's memory is its own), or the report's layout ([`crate::report`]).
//!
//! The fio baseline is measured on `--db` before the first run, and the report divides every
//! run's ops/s by it; its queue-depth-32 figure is measured again after the last run, so the
//! report shows how far the disk drifted over the invocation.

use std::path::Path;

use crate::cli::{EngineArgs, Protocol, RunMode, SuiteArgs};
use crate::failure::{Context, Failure};
use crate::options::EngineKind;
use crate::record::{write_json, SuiteRecord, SUITE};
use crate::sys;
use crate::sys::cgroup;
use crate::sys::fio;
use crate::utxo::run::add_cgroup_fields;
use crate::utxo::table::{reusable_setup, SETUP_REPORT};

/// `utxo suite`.
pub fn run(args: &SuiteArgs) -> Result<(), Failure> {
    let engines = if args.engines.is_empty() {
        EngineKind::all()
            .into_iter()
            .filter(|e| e.available())
            .collect()
    } else {
        args.engines.clone()
    };
    for engine in &engines {
        engine.require_available()?;
    }
    let modes = if args.runs.modes.is_empty() {
        vec![RunMode::Serial, RunMode::Pipelined, RunMode::LookupOnly]
    } else {
        args.runs.modes.clone()
    };
    let batches = mode_batches(args);
    std::fs::create_dir_all(&args.out).context(|| format!("creating {}", args.out.display()))?;
    std::fs::create_dir_all(&args.db).context(|| format!("creating {}", args.db.display()))?;
    let mut record = SuiteRecord {
        benchmark: SUITE.to_string(),
        date: sys::now_rfc3339(),
        commit: sys::git_commit(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: sys::machine(),
        entries: args.entries,
        batches: batches.serial,
        mode_batches: modes
            .iter()
            .map(|&mode| (mode.name().to_string(), batches.of(mode)))
            .collect(),
        protocol: args.protocol.map(|p| p.name().to_string()),
        memory_limit_bytes: None,
        cgroup: None,
        memory_unlimited_reason: None,
        page_cache_dropped: true,
        settle_after_setup_s: None,
        fio_qd1_iops: None,
        fio_qd32_iops: None,
        fio_qd32_iops_end: None,
        engines: engines.iter().map(|e| e.name().to_string()).collect(),
        modes: modes.iter().map(|m| m.name().to_string()).collect(),
        data_mount: sys::proc::mount_of(&args.db),
    };
    if let Some(script) = &args.runs.fio_baseline {
        let baseline = fio::measure(script, &args.db)?;
        (record.fio_qd1_iops, record.fio_qd32_iops) = (baseline.qd1_iops, Some(baseline.qd32_iops));
    }
    for &engine in &engines {
        if setup(args, engine)? && args.settle_after_setup_s > 0 {
            eprintln!(
                "== settling {} s after the setup ==",
                args.settle_after_setup_s
            );
            sys::proc::settle_disk(std::time::Duration::from_secs(args.settle_after_setup_s));
            record.settle_after_setup_s = Some(args.settle_after_setup_s);
        }
        for &mode in &modes {
            if args.keep_page_cache {
                record.page_cache_dropped = false;
            } else if !sys::proc::drop_page_cache() {
                record.page_cache_dropped = false;
                eprintln!("cairn-bench: could not drop the page cache (needs root)");
            }
            let json = args
                .out
                .join(format!("run-{}-{}.json", engine.name(), mode.name()));
            eprintln!("== {} {} ==", engine.name(), mode.name());
            let argv = run_argv(args, &batches, engine, mode, &json);
            let memory = cgroup::run_child(&argv, args.runs.memory_limit)?;
            add_cgroup_fields(&json, &memory)?;
            record.memory_limit_bytes = memory.limit_bytes;
            record.cgroup = memory.version.map(|v| v.name().to_string());
            record.memory_unlimited_reason = memory.unlimited_reason;
        }
        if args.remove_after {
            let dir = args.db.join(engine.name());
            std::fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
        }
    }
    if let Some(script) = &args.runs.fio_baseline {
        record.fio_qd32_iops_end = Some(fio::measure(script, &args.db)?.qd32_iops);
    }
    write_json(&record, &args.out.join("suite.json"))?;
    let report = crate::report::write_report(&args.out)?;
    eprintln!("report: {}", report.display());
    Ok(())
}

/// The timed batches of a suite's serial runs when nothing else sets them.
pub const BATCHES_DEFAULT: u64 = 10_000;

/// The timed batches of each mode's runs in a suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeBatches {
    /// Of each serial run.
    pub serial: u64,
    /// Of each pipelined run.
    pub pipelined: u64,
    /// Of each lookup-only run.
    pub lookup_only: u64,
}

impl ModeBatches {
    /// The batches of `mode`'s runs.
    pub fn of(&self, mode: RunMode) -> u64 {
        match mode {
            RunMode::Serial => self.serial,
            RunMode::Pipelined => self.pipelined,
            RunMode::LookupOnly => self.lookup_only,
        }
    }
}

/// The timed batches of each mode of `protocol`.
pub fn protocol_batches(protocol: Protocol) -> ModeBatches {
    match protocol {
        // lsm-tree's report, section 4.5: "10 k batches of operations for the serial mode and
        // 100 k batches for the pipelined mode"; lookup-only as serial.
        Protocol::LsmTree => ModeBatches {
            serial: 10_000,
            pipelined: 100_000,
            lookup_only: 10_000,
        },
    }
}

/// The timed batches of each mode's runs: the preset's with `--protocol` (which clap refuses
/// beside any of the batch flags), else `--batches` (default [`BATCHES_DEFAULT`]) for serial
/// runs and for the other modes unless their own flag is given.
pub fn mode_batches(args: &SuiteArgs) -> ModeBatches {
    if let Some(protocol) = args.protocol {
        return protocol_batches(protocol);
    }
    let serial = args.batches.unwrap_or(BATCHES_DEFAULT);
    ModeBatches {
        serial,
        pipelined: args.pipelined_batches.unwrap_or(serial),
        lookup_only: args.lookup_only_batches.unwrap_or(serial),
    }
}

/// Builds `engine`'s table with a `utxo setup` child (no memory limit: the setup is not part of
/// the measurement), or keeps an equal one with `--reuse-setup`; copies its record to `--out`.
/// Returns whether a setup ran (`false` when one was reused).
fn setup(args: &SuiteArgs, engine: EngineKind) -> Result<bool, Failure> {
    let dir = args.db.join(engine.name());
    let out = args.out.join(format!("setup-{}.json", engine.name()));
    if args.reuse_setup && reusable_setup(&dir, args.entries, args.runs.seed) {
        eprintln!(
            "== {}: reusing the setup in {} ==",
            engine.name(),
            dir.display()
        );
        let kept = dir.join(SETUP_REPORT);
        if kept.exists() {
            std::fs::copy(&kept, &out).context(|| format!("copying {}", kept.display()))?;
        }
        return Ok(false);
    }
    eprintln!("== {} setup ==", engine.name());
    let mut argv = vec![
        "utxo".to_string(),
        "setup".into(),
        "--engine".into(),
        engine.name().into(),
        "--db".into(),
        path_arg(&args.db),
        "--entries".into(),
        args.entries.to_string(),
        "--seed".into(),
        args.runs.seed.to_string(),
        "--json".into(),
        path_arg(&out),
    ];
    argv.extend(engine_argv(&args.engine_args));
    cgroup::run_self(&argv, None)?;
    Ok(true)
}

fn run_argv(
    args: &SuiteArgs,
    batches: &ModeBatches,
    engine: EngineKind,
    mode: RunMode,
    json: &Path,
) -> Vec<String> {
    let mut argv = vec![
        "utxo".to_string(),
        "run".into(),
        "--engine".into(),
        engine.name().into(),
        "--db".into(),
        path_arg(&args.db),
        "--mode".into(),
        mode.name().into(), // clap's value names are the report names
        "--batches".into(),
        batches.of(mode).to_string(),
        "--warmup-batches".into(),
        args.warmup_batches.to_string(),
        "--json".into(),
        path_arg(json),
    ];
    if args.runs.check {
        argv.push("--check".into());
    }
    argv.extend([
        "--pipeline-depth".into(),
        args.runs.pipeline_depth.to_string(),
    ]);
    if let Some(limit) = args.runs.max_run_seconds {
        argv.extend(["--max-run-seconds".into(), limit.to_string()]);
    }
    argv.extend(engine_argv(&run_engine_args(args, mode)));
    argv
}

/// The engine options of a run in `mode`: the suite's, with background merges as
/// `--background-merges-modes` chooses for the mode when given.
fn run_engine_args(args: &SuiteArgs, mode: RunMode) -> EngineArgs {
    let mut engine = args.engine_args.clone();
    if let Some(modes) = &args.background_merges_modes {
        engine.background_merges = modes.contains(&mode);
    }
    engine
}

fn engine_argv(args: &EngineArgs) -> Vec<String> {
    let mut argv = vec![
        "--write-buffer".to_string(),
        args.write_buffer.to_string(),
        "--merge-batch-size".into(),
        args.merge_batch_size.to_string(),
        "--background-merges".into(),
        args.background_merges.to_string(),
        "--filters-for-hits".into(),
        args.filters_for_hits.to_string(),
        "--read-budget".into(),
        args.read_budget.to_string(),
    ];
    if args.cached {
        argv.push("--cached".into());
    }
    argv
}

fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command, UtxoCommand};

    /// The batches of `utxo suite --db d --out o` with `flags`, or clap's error.
    fn batches(flags: &[&str]) -> Result<ModeBatches, clap::Error> {
        let argv = ["cairn-bench", "utxo", "suite", "--db", "d", "--out", "o"];
        let cli = Cli::try_parse_from(argv.iter().chain(flags))?;
        match cli.command {
            Command::Utxo(UtxoCommand::Suite(args)) => Ok(mode_batches(&args)),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn each(serial: u64, pipelined: u64, lookup_only: u64) -> ModeBatches {
        ModeBatches {
            serial,
            pipelined,
            lookup_only,
        }
    }

    #[test]
    fn batches_default_to_the_serial_count() {
        assert_eq!(batches(&[]).unwrap(), each(10_000, 10_000, 10_000));
        assert_eq!(
            batches(&["--batches", "3000"]).unwrap(),
            each(3_000, 3_000, 3_000)
        );
        assert_eq!(
            batches(&["--batches", "3000", "--pipelined-batches", "30000"]).unwrap(),
            each(3_000, 30_000, 3_000)
        );
        assert_eq!(
            batches(&["--lookup-only-batches", "500"]).unwrap(),
            each(10_000, 10_000, 500)
        );
        assert_eq!(each(1, 2, 3).of(RunMode::Pipelined), 2);
        assert_eq!(each(1, 2, 3).of(RunMode::LookupOnly), 3);
        assert!(batches(&["--pipelined-batches", "0"]).is_err());
    }

    #[test]
    fn the_lsm_tree_preset_sets_every_mode_and_refuses_batch_flags_beside_it() {
        assert_eq!(
            batches(&["--protocol", "lsm-tree"]).unwrap(),
            each(10_000, 100_000, 10_000)
        );
        for flag in ["--batches", "--pipelined-batches", "--lookup-only-batches"] {
            let err = batches(&["--protocol", "lsm-tree", flag, "20"]).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{flag}"
            );
            let text = err.to_string();
            assert!(
                text.contains("--protocol") && text.contains(flag),
                "{flag}: {text}"
            );
        }
        assert!(batches(&["--protocol", "rocksdb"]).is_err());
    }
}
