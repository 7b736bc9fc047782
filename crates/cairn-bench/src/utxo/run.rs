//! `cairn-bench utxo run`: lsm-tree's UTxO benchmark (P1) on any engine behind the
//! [`Engine`](crate::engines::Engine) interface, on the table `utxo setup` built.
//!
//! Owns: the run modes and their report, and `--memory-limit` (the run started again in a
//! cgroup of its own). May call: the engine only through the [`Driver`], never an engine's own
//! API.
//!
//! `run` opens the table again and executes `batches` batches: 256 lookups of live ids chosen
//! uniformly, then one update of 256 inserts of fresh ids and 256 deletes of distinct live ids.
//! Cairn starts every run from its setup snapshot. A peer has no cheap snapshot, so its runs
//! change its table in place, one after the other: `<db>/<engine>/run-state.json` lists the runs
//! applied so far, and the next run replays their choices on the model (no engine calls) before
//! its own batches, so its lookups and checks see exactly the table's contents. A run that did
//! not finish marks the state unknown, and later runs refuse the table until `setup` builds it
//! again. (Copying a 100M-entry table for every run would need twice its disk space; 10,000
//! batches change 2.5% of it.) The modes ([`Driver`]):
//!
//! - `serial`: lookups, then updates, batch after batch.
//! - `pipelined`: two threads. While batch n's updates are applied, the lookups of batch n+1 run
//!   on a read view taken before them ([`Engine::reader`](crate::engines::Engine::reader): a Cairn duplicate, a snapshot or read
//!   transaction elsewhere), and their results are corrected with batch n's inserts and deletes,
//!   as in lsm-tree's pipelined benchmark.
//! - `lookup-only`: only the lookups.
//!
//! With `--check` every (corrected) lookup result is compared with the model: each looked-up
//! id is live, so the result must be exactly its value.
//!
//! With `--memory-limit`, `run` starts itself again in a memory cgroup of its own with that
//! limit (page cache included; see [`crate::sys::cgroup`]) and adds the cgroup's peak usage to the
//! record as `cgroup_peak_bytes`; when no limit can be set, the run goes on unlimited and the
//! record says why (`memory_unlimited_reason`).
//!
//! Reported: ops/s (lookups + inserts + deletes per second of the run), its series over time
//! (ops/s per window of the timed batches, [`crate::utxo::throughput`]), batch latency
//! percentiles (the engine time of a batch; in pipelined mode the wall time of the overlapped
//! step), the engine's merge or compaction work per level over the timed batches where it
//! counts it ([`Engine::level_work`](crate::engines::Engine::level_work)), peak RSS, bytes read and written by the process (`/proc/self/io`), the memory limit
//! of the process's cgroup, and with `--fio-baseline` the disk's queue-depth-1 and -32 IOPS
//! measured in the same invocation and the ratio of ops/s to the qd32 IOPS.

use std::path::Path;

use crate::cli::{RunArgs, RunMode};
use crate::failure::Failure;
use crate::options::EngineKind;
use crate::record::{read_json, write_json, CgroupRecord, RunRecord, RUN};
use crate::report::format::rss_mib;
use crate::report::terminal;
use crate::stats::percentiles;
use crate::sys::cgroup;
use crate::sys::fio;
use crate::sys::proc::{cpu_seconds, peak_rss_bytes, rss_bytes, IoCounters};
use crate::utxo::driver::{Driver, PhaseTiming, BATCH_SIZE};
use crate::utxo::table::{engine_dir, engine_options, read_state, table_dir, Applied, RunState};
use crate::utxo::throughput;

/// `utxo run`.
pub fn run(args: &RunArgs) -> Result<(), Failure> {
    if let Some(limit) = args.memory_limit {
        if !cgroup::in_child() {
            let argv: Vec<String> = std::env::args().skip(1).collect();
            return run_limited(&argv, limit, args.json.as_deref());
        }
    }
    let start_rss_bytes = rss_bytes();
    let dir = engine_dir(&args.db, args.engine.name());
    let setup = read_state(&dir)?;
    let fio = match &args.fio_baseline {
        Some(script) => Some(fio::measure(script, &dir)?),
        None => None,
    };
    let opts = engine_options(&args.engine_args, setup.seed);
    // Cairn starts from its setup snapshot; a peer's runs change its table in place.
    let in_place = args.engine != EngineKind::Cairn;
    let mut state = if in_place {
        RunState::load(&dir)?
    } else {
        RunState::default()
    };
    if state.in_progress {
        return Err(Failure(format!(
            "an earlier run of {} did not finish, so its table's contents are unknown: run \
             `utxo setup` again",
            args.engine.name()
        )));
    }
    if in_place {
        state.in_progress = true;
        state.save(&dir)?;
    }
    let engine = args.engine.open(&table_dir(&dir), false, &opts)?;
    let mut driver = Driver::new(&*engine, setup.entries, setup.seed, args.check);
    for applied in &state.history {
        driver.replay(applied.batches, applied.with_updates);
    }
    let with_updates = args.mode != RunMode::LookupOnly;
    if args.warmup_batches > 0 {
        driver.serial("warm-up", args.warmup_batches, with_updates)?;
    }
    driver.set_time_limit(args.max_run_seconds.map(std::time::Duration::from_secs));
    let background_work_at_start = engine.background_work();
    if let Some(work) = &background_work_at_start {
        eprintln!("background work at the start of the timed batches: {work}");
    }
    let work_at_start = engine.level_work();
    let io_before = IoCounters::now();
    let cpu_before = cpu_seconds();
    let timing = match args.mode {
        RunMode::Serial => driver.serial("serial", args.batches, true)?,
        RunMode::LookupOnly => driver.serial("lookup-only", args.batches, false)?,
        RunMode::Pipelined => driver.pipelined(args.batches, args.pipeline_depth as usize)?,
    };
    let seconds = timing.seconds;
    // Fewer than asked for when the time limit ended the run.
    let batches = timing.batch_ms.len() as u64;
    let work_at_end = engine.level_work();
    if let Some(path) = &args.batch_log {
        write_batch_log(path, &timing)?;
    }
    let io = IoCounters::since(IoCounters::now(), io_before);
    let cpu = cpu_seconds()
        .zip(cpu_before)
        .map(|(now, before)| (now - before).max(0.0));
    let ops_per_batch = match args.mode {
        RunMode::LookupOnly => BATCH_SIZE,
        _ => 3 * BATCH_SIZE,
    } as f64;
    let ops_per_sec = ops_per_batch * batches as f64 / seconds.max(1e-9);
    let series = throughput::of_phase(&timing, ops_per_batch);
    let p = percentiles(&timing.batch_ms);
    let report = RunRecord {
        benchmark: RUN.to_string(),
        engine: setup.engine,
        settings: engine.settings(),
        mode: args.mode.name().to_string(),
        pipeline_depth: (args.mode == RunMode::Pipelined).then_some(args.pipeline_depth),
        entries: setup.entries,
        batches,
        warmup_batches: args.warmup_batches,
        planned_batches: (batches < args.batches).then_some(args.batches),
        time_limit_s: args.max_run_seconds,
        background_work_at_start,
        checked: args.check,
        mismatches: driver.mismatches(),
        ops_per_sec,
        seconds,
        p50_batch_ms: p.p50,
        p99_batch_ms: p.p99,
        p999_batch_ms: p.p999,
        max_batch_ms: p.max,
        peak_rss_bytes: peak_rss_bytes(),
        start_rss_bytes,
        bytes_read: io.map(|io| io.read_bytes),
        bytes_written: io.map(|io| io.write_bytes),
        memory_limit_bytes: cgroup::Hierarchy::of_this_process().own_limit(),
        fio_qd1_iops: fio.and_then(|f| f.qd1_iops),
        fio_qd32_iops: fio.map(|f| f.qd32_iops),
        ops_per_qd32_iops: fio.map(|f| ops_per_sec / f.qd32_iops),
        cpu_seconds: cpu,
        own_cgroup: None,
        throughput_window_s: (!series.points.is_empty()).then_some(series.window_s),
        throughput: series.points,
        level_work: work_at_end
            .zip(work_at_start)
            .map(|(end, start)| end.since(&start)),
    };
    drop(driver);
    drop(engine);
    if in_place {
        if args.warmup_batches > 0 {
            state.history.push(Applied {
                with_updates,
                batches: args.warmup_batches,
            });
        }
        state.history.push(Applied {
            with_updates,
            batches,
        });
        state.in_progress = false;
        state.save(&dir)?;
    }
    print!("{}", terminal::run(&report));
    if let Some(path) = &args.json {
        write_json(&report, path)?;
    }
    if report.mismatches > 0 {
        return Err(Failure(format!(
            "{} lookups did not return the expected value",
            report.mismatches
        )));
    }
    Ok(())
}

/// Writes the batch log of `--batch-log` (see [`RunArgs::batch_log`]).
fn write_batch_log(path: &Path, timing: &PhaseTiming) -> Result<(), Failure> {
    let mut text = String::from("batch,start_unix_s,lookup_ms,update_ms,batch_ms\n");
    for (n, (total, split)) in timing.batch_ms.iter().zip(&timing.split_ms).enumerate() {
        text.push_str(&format!(
            "{n},{:.6},{:.3},{:.3},{total:.3}\n",
            timing.started_unix_s + split.start_ms / 1e3,
            split.lookup_ms,
            split.update_ms
        ));
    }
    std::fs::write(path, text).map_err(|e| {
        Failure(format!(
            "cannot write the batch log {}: {e}",
            path.display()
        ))
    })
}

/// Runs `utxo run` with `argv` again in a memory cgroup limited to `limit` bytes, then adds the
/// cgroup's peak usage to the JSON record at `json`.
pub fn run_limited(argv: &[String], limit: u64, json: Option<&Path>) -> Result<(), Failure> {
    let memory = cgroup::run_child(argv, limit)?;
    println!(
        "cgroup peak MiB (resident + page cache): {}",
        rss_mib(memory.peak_bytes)
    );
    if let Some(path) = json {
        add_cgroup_fields(path, &memory)?;
    }
    Ok(())
}

/// Adds what the parent saw of the child's cgroup to the run record at `path`.
pub fn add_cgroup_fields(path: &Path, memory: &cgroup::ChildMemory) -> Result<(), Failure> {
    let mut record: RunRecord = read_json(path)?;
    record.own_cgroup = Some(CgroupRecord {
        cgroup_peak_bytes: memory.peak_bytes,
        version: memory.version.map(|v| v.name().to_string()),
        memory_unlimited_reason: memory.unlimited_reason.clone(),
    });
    write_json(&record, path)
}
