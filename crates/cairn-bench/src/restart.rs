//! `cairn-bench restart`: how long a named durable table takes to come back, with the page
//! cache dropped: the time to open the session and the table and serve a first batch of 256
//! lookups, and the bytes read from the device for it, after a clean shutdown and after a
//! SIGKILL with the default checkpoint policy (the log replayed).
//!
//! Owns: the phases below, each in a child process of its own (the same binary, the hidden
//! `restart-child` command), so that every open starts cold: a fresh process whose reads come
//! from the device (`/proc/sys/vm/drop_caches` before each, so this needs root).
//! Must never touch: the engine's internals (it uses `Session` as a user would).
//!
//! 1. **Build** (skipped with `--reuse` when `<dir>` holds a table already): a session with a
//!    write-ahead log (default options) and the named table `utxo`, configured as the UTxO
//!    benchmark's (compact index, level-scaled Bloom filters at FPR 5e-3, 20,000-entry write
//!    buffer, incremental merges in batches of 1,000 steps, O_DIRECT lookups, merges on the
//!    background thread); ids `0..N` inserted in batches of 10,000 (keys and values as in
//!    `crate::keys`), then `--churn-batches` UTxO batches (256 lookups, 256 inserts of new
//!    ids, 256 deletes of ids below `N / 4`), so that merges are in progress as in a live
//!    table, then a clean close (which checkpoints).
//! 2. **Clean restart**, `--runs` times: drop the page cache; a child opens the session and
//!    the table and looks up 256 ids drawn from `N / 2 .. N` (all live, every value checked),
//!    then closes.
//! 3. **Restart after a kill**, `--runs` times: a child opens the table, runs UTxO batches
//!    until it has logged `--kill-log-mib` MiB since it opened (the default checkpoint policy
//!    checkpoints at 128 MiB of log or 5 minutes, so 120 MiB is close to the most a kill can
//!    leave to replay) and kills itself with SIGKILL; the page cache is dropped; a child
//!    opens (replaying the log) and serves the first batch, as in 2.
//!
//! Reported per phase: the median and every run of open ms, first batch ms, their total, and
//! MiB read from the device (`/proc/self/io` `read_bytes` of the child), and for kills the log
//! bytes on disk at the kill. `--verify-on-open` opens with `SessionOptions::verify_on_open`
//! (every run read and checked whole, as before per-page checksums), for the comparison.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use cairn::{
    BloomAlloc, DiskCachePolicy, IndexType, MergeSchedule, Resolve, Session, SessionOptions,
    TableConfig,
};
use serde::{Deserialize, Serialize};

use crate::cli::{RestartArgs, RestartChildArgs, RestartPhase};
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, utxo_value, SplitMix64};
use crate::sys::proc::{drop_page_cache, IoCounters};

/// The table's name.
const TABLE: &str = "utxo";
/// Ids inserted per batch while building.
const LOAD_CHUNK: u64 = 10_000;
/// Keys per lookup batch.
const BATCH: usize = 256;

/// What one child measured.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ChildRecord {
    /// Opening the session and the table (log replay included), ms.
    pub open_ms: f64,
    /// The first batch of 256 lookups, ms.
    pub first_batch_ms: f64,
    /// Bytes the child read from the device.
    pub read_bytes: u64,
    /// Kill phase: bytes logged since its open (the log the next open replays).
    pub log_bytes: u64,
    /// Batches run before the kill.
    pub batches: u64,
}

/// The UTxO benchmark's table config (see `engines::cairn`).
fn config() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(20_000)
        .merge_batch_size(1_000)
        .disk_cache(DiskCachePolicy::None)
        .index(IndexType::Compact)
        .bloom(BloomAlloc::LevelScaledFpr(5e-3))
        .merge_schedule(MergeSchedule::Incremental)
        .resolve(Resolve::KeepNewest)
}

fn open(dir: &Path, seed: u64, verify: bool) -> Result<(Session, cairn::Table), Failure> {
    let options = SessionOptions::default()
        .salt(Some(seed))
        .background_merges(true)
        .verify_on_open(verify);
    let session = Session::open_with_options(dir, options)
        .context(|| format!("opening the session in {}", dir.display()))?;
    let table = session
        .table(TABLE, config())
        .context(|| "opening the table".to_string())?;
    Ok((session, table))
}

/// Looks up 256 ids drawn from `entries / 2 .. entries` (by a stream seeded with `draw`) and
/// checks every value.
fn first_batch(table: &cairn::Table, entries: u64, seed: u64, draw: u64) -> Result<(), Failure> {
    let mut rng = SplitMix64::new(seed ^ draw);
    let ids: Vec<u64> = (0..BATCH)
        .map(|_| entries / 2 + rng.below(entries - entries / 2))
        .collect();
    let keys: Vec<_> = ids.iter().map(|&id| utxo_key(id, seed)).collect();
    let found = table
        .lookups(&keys)
        .context(|| "the first batch of lookups".to_string())?;
    for (id, result) in ids.iter().zip(found) {
        if result.value() != Some(&utxo_value(*id)[..]) {
            return Err(Failure(format!(
                "id {id}: found {:?}, not its value",
                result.value().map(|v| v.len())
            )));
        }
    }
    Ok(())
}

/// One UTxO batch: 256 lookups of live ids, 256 inserts of `next..next + 256`, 256 deletes of
/// ids below `entries / 4` (`dead..dead + 256`).
fn churn_batch(
    table: &cairn::Table,
    entries: u64,
    seed: u64,
    next: u64,
    dead: u64,
) -> Result<(), Failure> {
    first_batch(table, entries, seed, next)?;
    let values: Vec<_> = (next..next + BATCH as u64).map(utxo_value).collect();
    let mut updates: Vec<_> = (next..)
        .zip(&values)
        .map(|(id, v)| (utxo_key(id, seed), cairn::Update::Insert(&v[..])))
        .collect();
    let quarter = (entries / 4).max(1);
    updates.extend(
        (dead..dead + BATCH as u64).map(|id| (utxo_key(id % quarter, seed), cairn::Update::Delete)),
    );
    table
        .updates(&updates)
        .context(|| "a UTxO batch".to_string())?;
    Ok(())
}

/// The hidden `restart-child` command: one phase, its record printed as JSON on stdout.
pub fn child(args: &RestartChildArgs) -> Result<(), Failure> {
    let io = IoCounters::now();
    let mut record = ChildRecord::default();
    match args.phase {
        RestartPhase::Build => {
            std::fs::create_dir_all(&args.dir)
                .context(|| format!("creating {}", args.dir.display()))?;
            let (session, table) = open(&args.dir, args.seed, false)?;
            let start = Instant::now();
            let mut id = 0;
            while id < args.entries {
                let end = (id + LOAD_CHUNK).min(args.entries);
                let values: Vec<_> = (id..end).map(utxo_value).collect();
                let pairs: Vec<_> = (id..end)
                    .zip(&values)
                    .map(|(i, v)| (utxo_key(i, args.seed), &v[..]))
                    .collect();
                table.inserts(&pairs).context(|| "loading".to_string())?;
                id = end;
                if id.is_multiple_of(10_000_000) {
                    eprintln!(
                        "restart: built {}M of {}M entries in {:.0} s",
                        id / 1_000_000,
                        args.entries / 1_000_000,
                        start.elapsed().as_secs_f64()
                    );
                }
            }
            for b in 0..args.churn_batches {
                churn_batch(
                    &table,
                    args.entries,
                    args.seed,
                    args.entries + b * BATCH as u64,
                    b * BATCH as u64,
                )?;
            }
            drop(table);
            session.close();
            record.batches = args.churn_batches;
        }
        RestartPhase::Open => {
            let start = Instant::now();
            let (session, table) = open(&args.dir, args.seed, args.verify_on_open)?;
            record.open_ms = start.elapsed().as_secs_f64() * 1e3;
            let start = Instant::now();
            first_batch(&table, args.entries, args.seed, 0x5eed)?;
            record.first_batch_ms = start.elapsed().as_secs_f64() * 1e3;
            if let (Some(after), Some(before)) = (IoCounters::now(), io) {
                record.read_bytes = after.read_bytes - before.read_bytes;
            }
            println!("{}", serde_json::to_string(&record).unwrap_or_default());
            drop(table);
            session.close();
            return Ok(());
        }
        RestartPhase::Kill => {
            let (session, table) = open(&args.dir, args.seed, false)?;
            let start = Instant::now();
            let mut b = 0u64;
            loop {
                let next = args.first_id + b * BATCH as u64;
                churn_batch(
                    &table,
                    args.entries,
                    args.seed,
                    next,
                    (args.first_id / 2) + b * BATCH as u64,
                )?;
                b += 1;
                if b.is_multiple_of(16) {
                    // Bytes logged since the open, which took a checkpoint if it replayed
                    // anything (and a clean close takes one): the log the next open replays.
                    let bytes = session
                        .log_stats()
                        .context(|| "log stats".to_string())?
                        .bytes;
                    if bytes >= args.kill_log_mib << 20 || start.elapsed().as_secs() > 300 {
                        record.log_bytes = bytes;
                        record.batches = b;
                        println!("{}", serde_json::to_string(&record).unwrap_or_default());
                        // SAFETY: kill(2) on our own pid with a valid signal number; it does
                        // not return.
                        unsafe {
                            libc::kill(libc::getpid(), libc::SIGKILL);
                        }
                    }
                }
            }
        }
    }
    println!("{}", serde_json::to_string(&record).unwrap_or_default());
    Ok(())
}

/// Runs `restart-child` with `phase` and returns what it printed.
fn run_child(args: &RestartArgs, phase: &str, extra: &[String]) -> Result<ChildRecord, Failure> {
    let exe = std::env::current_exe().context(|| "finding the benchmark binary".to_string())?;
    let output = Command::new(exe)
        .arg("restart-child")
        .arg(phase)
        .arg("--dir")
        .arg(&args.dir)
        .arg("--entries")
        .arg(args.entries.to_string())
        .arg("--seed")
        .arg(args.seed.to_string())
        .args(extra)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context(|| format!("running the {phase} child"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{'));
    match line {
        Some(line) => serde_json::from_str(line).context(|| format!("the {phase} child's record")),
        None => Err(Failure(format!(
            "the {phase} child printed no record ({})",
            output.status
        ))),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The whole record of an invocation.
#[derive(Debug, Serialize)]
struct Record {
    entries: u64,
    verify_on_open: bool,
    table_bytes: u64,
    clean: Vec<ChildRecord>,
    kill: Vec<(ChildRecord, ChildRecord)>,
}

/// `cairn-bench restart`.
pub fn run(args: &RestartArgs) -> Result<(), Failure> {
    if !(args.reuse && args.dir.join("log").exists()) {
        if args.dir.exists() {
            std::fs::remove_dir_all(&args.dir)
                .context(|| format!("removing {}", args.dir.display()))?;
        }
        eprintln!(
            "restart: building {} entries in {}",
            args.entries,
            args.dir.display()
        );
        let start = Instant::now();
        run_child(
            args,
            "build",
            &["--churn-batches".into(), args.churn_batches.to_string()],
        )?;
        eprintln!("restart: built in {:.0} s", start.elapsed().as_secs_f64());
    }
    let verify: Vec<String> = if args.verify_on_open {
        vec!["--verify-on-open".into()]
    } else {
        vec![]
    };
    // One open, cold: the page cache dropped first.
    let cold_open = || -> Result<ChildRecord, Failure> {
        if !drop_page_cache() {
            return Err(Failure("dropping the page cache needs root".into()));
        }
        run_child(args, "open", &verify)
    };
    let mut clean = Vec::new();
    for run in 0..args.runs {
        let r = cold_open()?;
        eprintln!(
            "restart: clean {run}: open {:.0} ms, first batch {:.1} ms, {:.1} MiB read",
            r.open_ms,
            r.first_batch_ms,
            r.read_bytes as f64 / 1048576.0
        );
        clean.push(r);
    }
    let mut kill = Vec::new();
    for run in 0..args.runs {
        let first_id = args.entries * 2 + run * 100_000_000;
        let extra = vec![
            "--first-id".to_string(),
            first_id.to_string(),
            "--kill-log-mib".to_string(),
            args.kill_log_mib.to_string(),
        ];
        let killed = run_child(args, "kill", &extra)?;
        let r = cold_open()?;
        eprintln!(
            "restart: kill {run}: {} batches, {:.0} MiB of log; open {:.0} ms, first batch {:.1} ms, {:.1} MiB read",
            killed.batches,
            killed.log_bytes as f64 / 1048576.0,
            r.open_ms,
            r.first_batch_ms,
            r.read_bytes as f64 / 1048576.0
        );
        kill.push((killed, r));
    }
    let table_bytes = crate::chain::driver::dir_bytes(&args.dir.join("snapshots"))?;
    let total = |r: &ChildRecord| r.open_ms + r.first_batch_ms;
    let mib = |r: &ChildRecord| r.read_bytes as f64 / 1048576.0;
    println!(
        "restart at {} entries ({:.0} MiB of runs){}",
        args.entries,
        table_bytes as f64 / 1048576.0,
        if args.verify_on_open {
            ", verify_on_open"
        } else {
            ""
        }
    );
    println!("| phase | open ms | first batch ms | total ms | MiB read | log MiB replayed |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| clean shutdown | {:.0} | {:.1} | {:.0} | {:.1} | 0 |",
        median(clean.iter().map(|r| r.open_ms).collect()),
        median(clean.iter().map(|r| r.first_batch_ms).collect()),
        median(clean.iter().map(total).collect()),
        median(clean.iter().map(mib).collect()),
    );
    println!(
        "| after SIGKILL | {:.0} | {:.1} | {:.0} | {:.1} | {:.1} |",
        median(kill.iter().map(|(_, r)| r.open_ms).collect()),
        median(kill.iter().map(|(_, r)| r.first_batch_ms).collect()),
        median(kill.iter().map(|(_, r)| total(r)).collect()),
        median(kill.iter().map(|(_, r)| mib(r)).collect()),
        median(
            kill.iter()
                .map(|(k, _)| k.log_bytes as f64 / 1048576.0)
                .collect()
        ),
    );
    if let Some(path) = &args.json {
        let record = Record {
            entries: args.entries,
            verify_on_open: args.verify_on_open,
            table_bytes,
            clean,
            kill,
        };
        crate::record::write_json(&record, path)?;
    }
    Ok(())
}
