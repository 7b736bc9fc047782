//! `cairn-bench utxo setup` and `cairn-bench utxo run`: lsm-tree's UTxO benchmark (P1) on any
//! engine behind the [`Engine`] interface, with the setup built once and reused by every run.
//!
//! Owns: the setup record (`<db>/<engine>/setup.json`), the three run modes and their report.
//! May call: [`Engine`] only (never an engine's own API), the [`LiveSet`] model, `fio`.
//!
//! - `setup` creates `<db>/<engine>/table/`, loads ids `0..entries` in chunks of 10,000 (keys and
//!   values as in [`crate::utxo::keys`]; in key order for an engine that asks for it,
//!   [`Engine::wants_sorted_load`]), makes the table durable ([`Engine::finish_load`]) and records
//!   the entry count and seed. Its own throughput is reported.
//! - `run` opens the table again and executes `batches` batches: 256 lookups of live ids chosen
//!   uniformly, then one update of 256 inserts of fresh ids and 256 deletes of distinct live ids.
//!   Cairn starts every run from its setup snapshot. A peer has no cheap snapshot, so its runs
//!   change its table in place, one after the other: `<db>/<engine>/run-state.json` lists the
//!   runs applied so far, and the next run replays their choices on the model (no engine calls)
//!   before its own batches, so its lookups and checks see exactly the table's contents. A run
//!   that did not finish marks the state unknown, and later runs refuse the table until `setup`
//!   builds it again. (Copying a 100M-entry table for every run would need twice its disk space;
//!   10,000 batches change 2.5% of it.)
//!   - `serial`: lookups, then updates, batch after batch.
//!   - `pipelined`: two threads. While batch n's updates are applied, the lookups of batch n+1
//!     run on a read view taken before them ([`Engine::reader`]: a Cairn duplicate, a snapshot
//!     or read transaction elsewhere), and their results are corrected with batch n's inserts
//!     and deletes, as in lsm-tree's pipelined benchmark.
//!   - `lookup-only`: only the lookups.
//!
//!   With `--check` every (corrected) lookup result is compared with the model: each looked-up
//!   id is live, so the result must be exactly its value.
//!
//! With `--memory-limit`, `run` starts itself again in a memory cgroup of its own with that
//! limit (page cache included; see [`crate::sys::cgroup`]) and adds the cgroup's peak usage to the
//! record as `cgroup_peak_bytes`.
//!
//! Reported: ops/s (lookups + inserts + deletes per second of the run), batch latency
//! percentiles (the engine time of a batch; in pipelined mode the wall time of the overlapped
//! step), peak RSS, bytes read and written by the process (`/proc/self/io`), the memory limit
//! of the process's cgroup, and with `--fio-baseline` the disk's queue-depth-1 and -32 IOPS
//! measured in the same invocation and the ratio of ops/s to the qd32 IOPS.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cli::{EngineArgs, RunArgs, RunMode, SetupArgs};
use crate::engines::{Engine, EngineKind, EngineOptions, Key, Value};
use crate::failure::{Context, Failure};
use crate::record::{peak_rss_bytes, percentiles, render_rows, rss_mib, write_json};
use crate::sys::cgroup;
use crate::sys::fio;
use crate::utxo::keys::{utxo_key, utxo_value, SplitMix64};
use crate::utxo::live::LiveSet;
use crate::utxo::workload::{Progress, BATCH_SIZE, SETUP_CHUNK};

/// Separates the batch-choice stream from the key streams (as in `workload`).
const CHOICE_STREAM: u64 = 0x5eed_c401_ce00_0001;

/// What `setup` recorded for `run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetupRecord {
    /// The engine.
    pub engine: String,
    /// Ids `0..entries` were loaded.
    pub entries: u64,
    /// The key seed.
    pub seed: u64,
    /// Seconds of the load (including `finish_load`).
    pub seconds: f64,
}

/// The results of `utxo setup`.
#[derive(Clone, Debug, Serialize)]
pub struct SetupReport {
    /// Always "utxo-setup".
    pub benchmark: &'static str,
    /// The engine.
    pub engine: String,
    /// Its settings, in words.
    pub settings: String,
    /// Entries loaded.
    pub entries: u64,
    /// Seconds of the load.
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
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// Always "utxo-run".
    pub benchmark: &'static str,
    /// The engine.
    pub engine: String,
    /// Its settings, in words.
    pub settings: String,
    /// serial, pipelined or lookup-only.
    pub mode: &'static str,
    /// Entries of the setup.
    pub entries: u64,
    /// Batches run.
    pub batches: u64,
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
}

fn engine_dir(db: &Path, engine: &str) -> PathBuf {
    db.join(engine)
}

fn options(args: &EngineArgs, seed: u64) -> EngineOptions {
    EngineOptions {
        direct_io: !args.cached,
        seed,
        write_buffer: args.write_buffer,
        merge_batch_size: args.merge_batch_size,
    }
}

/// `utxo setup`.
pub fn setup(args: &SetupArgs) -> Result<(), Failure> {
    let dir = engine_dir(&args.db, args.engine.name());
    if dir.exists() {
        std::fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
    let opts = options(&args.engine_args, args.seed);
    let io_before = ProcIo::read();
    let table_dir = dir.join("table");
    std::fs::create_dir_all(&table_dir).context(|| format!("creating {}", table_dir.display()))?;
    let engine = args.engine.open(&table_dir, true, &opts)?;
    let start = Instant::now();
    let mut progress = Progress::new(format!("setup {}", engine.name()), "entries", args.entries);
    let mut chunk: Vec<(Key, Value)> = Vec::with_capacity(SETUP_CHUNK);
    if engine.wants_sorted_load() {
        // All keys at once, sorted: 48 bytes per entry of memory for the bulk-loading path.
        let mut keyed: Vec<(Key, u64)> = (0..args.entries)
            .map(|i| (utxo_key(i, args.seed), i))
            .collect();
        keyed.sort_unstable_by_key(|&(key, _)| key);
        let mut loaded = 0;
        for piece in keyed.chunks(SETUP_CHUNK) {
            chunk.clear();
            chunk.extend(piece.iter().map(|&(key, i)| (key, utxo_value(i))));
            engine.load_sorted(&chunk)?;
            loaded += piece.len() as u64;
            progress.update(loaded, 1);
        }
    } else {
        let mut id = 0;
        while id < args.entries {
            let end = (id + SETUP_CHUNK as u64).min(args.entries);
            chunk.clear();
            chunk.extend((id..end).map(|i| (utxo_key(i, args.seed), utxo_value(i))));
            engine.load(&chunk)?;
            id = end;
            progress.update(id, 1);
        }
    }
    engine.finish_load()?;
    let seconds = start.elapsed().as_secs_f64();
    let settings = engine.settings();
    drop(engine);
    let record = SetupRecord {
        engine: args.engine.name().to_string(),
        entries: args.entries,
        seed: args.seed,
        seconds,
    };
    write_json(&record, &dir.join(SETUP_RECORD))?;
    let io = ProcIo::read().since(io_before);
    let report = SetupReport {
        benchmark: "utxo-setup",
        engine: record.engine.clone(),
        settings,
        entries: args.entries,
        setup_seconds: seconds,
        setup_entries_per_sec: args.entries as f64 / seconds.max(1e-9),
        peak_rss_bytes: peak_rss_bytes(),
        bytes_read: io.map(|io| io.read_bytes),
        bytes_written: io.map(|io| io.write_bytes),
    };
    print!(
        "{}",
        render_rows(&[
            ("engine", report.engine.clone()),
            ("settings", report.settings.clone()),
            ("entries", report.entries.to_string()),
            ("setup s", format!("{:.1}", report.setup_seconds)),
            (
                "setup entries/s",
                format!("{:.0}", report.setup_entries_per_sec)
            ),
            ("peak RSS MiB", rss_mib(report.peak_rss_bytes)),
            ("bytes written", opt(report.bytes_written)),
        ])
    );
    write_json(&report, &dir.join(SETUP_REPORT))?;
    if let Some(path) = &args.json {
        write_json(&report, path)?;
    }
    Ok(())
}

/// The setup's report, kept beside the table so `utxo suite --reuse-setup` can show it.
pub const SETUP_REPORT: &str = "setup-report.json";

/// What `setup` records for `run`, beside the table.
const SETUP_RECORD: &str = "setup.json";

/// Whether the engine directory `dir` holds a finished setup of `entries` entries from `seed`
/// that no unfinished run has left in an unknown state (so `utxo suite --reuse-setup` may use
/// it). Any unreadable record means no.
pub fn reusable_setup(dir: &Path, entries: u64, seed: u64) -> bool {
    let record = std::fs::read_to_string(dir.join(SETUP_RECORD))
        .ok()
        .and_then(|text| serde_json::from_str::<SetupRecord>(&text).ok());
    let finished = RunState::load(dir).is_ok_and(|state| !state.in_progress);
    record.is_some_and(|r| r.entries == entries && r.seed == seed) && finished
}

/// The runs applied in place to a peer's table since its setup (see the module doc).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct RunState {
    /// A run started and did not record its end: the table's contents are unknown.
    in_progress: bool,
    /// The runs applied, in order.
    history: Vec<Applied>,
}

/// One run applied to a table.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Applied {
    /// Whether its batches updated the table (serial, pipelined) or only looked up.
    with_updates: bool,
    /// Batches run.
    batches: u64,
}

const RUN_STATE: &str = "run-state.json";

impl RunState {
    fn load(dir: &Path) -> Result<RunState, Failure> {
        let path = dir.join(RUN_STATE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str(&text).context(|| format!("parsing {}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RunState::default()),
            Err(e) => Err(Failure(format!("reading {}: {e}", path.display()))),
        }
    }

    fn save(&self, dir: &Path) -> Result<(), Failure> {
        write_json(self, &dir.join(RUN_STATE))
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// `utxo run`.
pub fn run(args: &RunArgs) -> Result<(), Failure> {
    if let Some(limit) = args.memory_limit {
        if !cgroup::in_child() {
            let argv: Vec<String> = std::env::args().skip(1).collect();
            return run_limited(&argv, limit, args.json.as_deref());
        }
    }
    let dir = engine_dir(&args.db, args.engine.name());
    let record_path = dir.join(SETUP_RECORD);
    let text = std::fs::read_to_string(&record_path)
        .context(|| format!("reading {} (run `utxo setup` first)", record_path.display()))?;
    let record: SetupRecord =
        serde_json::from_str(&text).context(|| format!("parsing {}", record_path.display()))?;
    let fio = match &args.fio_baseline {
        Some(script) => Some(fio::measure(script, &dir)?),
        None => None,
    };
    let opts = options(&args.engine_args, record.seed);
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
    let engine = args.engine.open(&dir.join("table"), false, &opts)?;
    let mut driver = Driver {
        engine: &*engine,
        seed: record.seed,
        rng: SplitMix64::new(record.seed ^ CHOICE_STREAM),
        live: LiveSet::new(record.entries),
        check: args.check,
        mismatches: 0,
    };
    for applied in &state.history {
        for _ in 0..applied.batches {
            driver.choose(applied.with_updates);
        }
    }
    let io_before = ProcIo::read();
    let start = Instant::now();
    let batch_ms = match args.mode {
        RunMode::Serial => driver.serial(args.batches, true)?,
        RunMode::LookupOnly => driver.serial(args.batches, false)?,
        RunMode::Pipelined => driver.pipelined(args.batches)?,
    };
    let seconds = start.elapsed().as_secs_f64();
    let io = ProcIo::read().since(io_before);
    let ops_per_batch = match args.mode {
        RunMode::LookupOnly => BATCH_SIZE,
        _ => 3 * BATCH_SIZE,
    } as f64;
    let ops_per_sec = ops_per_batch * args.batches as f64 / seconds.max(1e-9);
    let p = percentiles(&batch_ms);
    let report = RunReport {
        benchmark: "utxo-run",
        engine: record.engine,
        settings: engine.settings(),
        mode: args.mode.name(),
        entries: record.entries,
        batches: args.batches,
        checked: args.check,
        mismatches: driver.mismatches,
        ops_per_sec,
        seconds,
        p50_batch_ms: p.p50,
        p99_batch_ms: p.p99,
        p999_batch_ms: p.p999,
        max_batch_ms: p.max,
        peak_rss_bytes: peak_rss_bytes(),
        bytes_read: io.map(|io| io.read_bytes),
        bytes_written: io.map(|io| io.write_bytes),
        memory_limit_bytes: cgroup::own_limit(),
        fio_qd1_iops: fio.and_then(|f| f.qd1_iops),
        fio_qd32_iops: fio.map(|f| f.qd32_iops),
        ops_per_qd32_iops: fio.map(|f| ops_per_sec / f.qd32_iops),
    };
    drop(driver);
    drop(engine);
    if in_place {
        state.history.push(Applied {
            with_updates: args.mode != RunMode::LookupOnly,
            batches: args.batches,
        });
        state.in_progress = false;
        state.save(&dir)?;
    }
    print!("{}", run_table(&report));
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

/// Adds `cgroup_peak_bytes` and `cgroup` (the hierarchy) to the JSON record at `path`.
pub fn add_cgroup_fields(path: &Path, memory: &cgroup::ChildMemory) -> Result<(), Failure> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    let mut record: serde_json::Value =
        serde_json::from_str(&text).context(|| format!("parsing {}", path.display()))?;
    let Some(fields) = record.as_object_mut() else {
        return Err(Failure(format!("{} is not a JSON object", path.display())));
    };
    fields.insert("cgroup_peak_bytes".into(), memory.peak_bytes.into());
    fields.insert(
        "cgroup".into(),
        memory.version.map(|v| v.name().to_string()).into(),
    );
    write_json(&record, path)
}

fn run_table(r: &RunReport) -> String {
    let f1 = |v: f64| format!("{v:.1}");
    render_rows(&[
        ("engine", r.engine.clone()),
        ("settings", r.settings.clone()),
        ("mode", r.mode.to_string()),
        ("entries", r.entries.to_string()),
        ("batches", r.batches.to_string()),
        (
            "checked",
            if r.checked {
                format!("yes, {} mismatches", r.mismatches)
            } else {
                "no".into()
            },
        ),
        ("ops/s", format!("{:.0}", r.ops_per_sec)),
        ("p50 batch ms", f1(r.p50_batch_ms)),
        ("p99 batch ms", f1(r.p99_batch_ms)),
        ("p99.9 batch ms", f1(r.p999_batch_ms)),
        ("max batch ms", f1(r.max_batch_ms)),
        ("peak RSS MiB", rss_mib(r.peak_rss_bytes)),
        ("bytes read", opt(r.bytes_read)),
        ("bytes written", opt(r.bytes_written)),
        ("memory limit", opt(r.memory_limit_bytes)),
        ("fio qd1 IOPS", opt(r.fio_qd1_iops.map(|v| v as u64))),
        ("fio qd32 IOPS", opt(r.fio_qd32_iops.map(|v| v as u64))),
        (
            "ops / qd32 IOPS",
            opt(r.ops_per_qd32_iops.map(|v| format!("{v:.3}"))),
        ),
    ])
}

/// One batch's choices, made on the model.
struct Batch {
    lookup_ids: Vec<u64>,
    lookup_keys: Vec<Key>,
    inserts: Vec<(Key, Value)>,
    /// The ids of `inserts`, then of `deletes`, for correcting pipelined lookups.
    insert_ids: Vec<u64>,
    delete_ids: Vec<u64>,
    deletes: Vec<Key>,
}

struct Driver<'e> {
    engine: &'e dyn Engine,
    seed: u64,
    rng: SplitMix64,
    live: LiveSet,
    check: bool,
    mismatches: u64,
}

impl Driver<'_> {
    /// Picks the lookups of a batch (live ids now) and, `with_updates`, its updates, which the
    /// model applies at once.
    fn choose(&mut self, with_updates: bool) -> Batch {
        let mut lookup_ids = Vec::with_capacity(BATCH_SIZE);
        self.live
            .pick_live_many(&mut self.rng, BATCH_SIZE, &mut lookup_ids);
        let seed = self.seed;
        let lookup_keys = lookup_ids.iter().map(|&id| utxo_key(id, seed)).collect();
        let mut batch = Batch {
            lookup_ids,
            lookup_keys,
            inserts: Vec::new(),
            insert_ids: Vec::new(),
            delete_ids: Vec::new(),
            deletes: Vec::new(),
        };
        if with_updates {
            self.live
                .delete_random(&mut self.rng, BATCH_SIZE, &mut batch.delete_ids);
            batch.insert_ids = self.live.insert_fresh(BATCH_SIZE as u64).collect();
            batch.inserts = batch
                .insert_ids
                .iter()
                .map(|&id| (utxo_key(id, seed), utxo_value(id)))
                .collect();
            batch.deletes = batch
                .delete_ids
                .iter()
                .map(|&id| utxo_key(id, seed))
                .collect();
        }
        batch
    }

    fn check(&mut self, ids: &[u64], results: &[Option<Value>]) {
        if !self.check {
            return;
        }
        if ids.len() != results.len() {
            self.mismatches += ids.len() as u64;
            return;
        }
        for (&id, result) in ids.iter().zip(results) {
            if result.as_ref() != Some(&utxo_value(id)) {
                self.mismatches += 1;
                if self.mismatches <= 5 {
                    eprintln!("check: lookup of live id {id} returned a wrong result");
                }
            }
        }
    }

    /// Serial batches (`with_updates`) or lookup-only ones; returns each batch's engine time.
    fn serial(&mut self, batches: u64, with_updates: bool) -> Result<Vec<f64>, Failure> {
        let label = if with_updates {
            "serial"
        } else {
            "lookup-only"
        };
        let ops = if with_updates { 3 } else { 1 } * BATCH_SIZE as u64;
        let mut progress = Progress::new(label, "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        for n in 0..batches {
            let batch = self.choose(with_updates);
            let start = Instant::now();
            let results = self.engine.lookups(&batch.lookup_keys)?;
            if with_updates {
                self.engine.update(&batch.inserts, &batch.deletes)?;
            }
            batch_ms.push(start.elapsed().as_secs_f64() * 1e3);
            self.check(&batch.lookup_ids, &results);
            progress.update(n + 1, ops);
        }
        Ok(batch_ms)
    }

    /// Pipelined batches: the lookups of batch n+1 on a view from before batch n's updates,
    /// overlapped with those updates, then corrected with them.
    fn pipelined(&mut self, batches: u64) -> Result<Vec<f64>, Failure> {
        let mut progress = Progress::new("pipelined", "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        if batches == 0 {
            return Ok(batch_ms);
        }
        // Batch 0's lookups run alone.
        let mut current = self.choose(true);
        let first = self.engine.lookups(&current.lookup_keys)?;
        self.check(&current.lookup_ids, &first);
        for n in 0..batches {
            let next = (n + 1 < batches).then(|| self.choose(true));
            let engine = self.engine;
            let start = Instant::now();
            let view = engine.reader()?;
            let next_keys = next.as_ref().map(|b| &b.lookup_keys[..]);
            let (update, lookups) = std::thread::scope(|scope| {
                let lookups = scope.spawn(move || match next_keys {
                    Some(keys) => view.lookups(keys).map(Some),
                    None => Ok(None),
                });
                let update = engine.update(&current.inserts, &current.deletes);
                (update, lookups.join())
            });
            update?;
            let lookups = lookups.map_err(|_| Failure("the lookup thread panicked".into()))??;
            batch_ms.push(start.elapsed().as_secs_f64() * 1e3);
            if let (Some(next), Some(mut results)) = (next.as_ref(), lookups) {
                correct(&mut results, next, &current);
                self.check(&next.lookup_ids, &results);
            }
            if let Some(next) = next {
                current = next;
            }
            progress.update(n + 1, 3 * BATCH_SIZE as u64);
        }
        Ok(batch_ms)
    }
}

/// Corrects lookups made before `applied`'s updates: its deletes are absent, its inserts present.
fn correct(results: &mut [Option<Value>], next: &Batch, applied: &Batch) {
    for (id, result) in next.lookup_ids.iter().zip(results.iter_mut()) {
        if applied.delete_ids.contains(id) {
            *result = None;
        } else if let Some(i) = applied.insert_ids.iter().position(|x| x == id) {
            *result = Some(applied.inserts[i].1);
        }
    }
}

/// `/proc/self/io` counters.
#[derive(Clone, Copy, Debug)]
struct ProcIo {
    read_bytes: u64,
    write_bytes: u64,
}

impl ProcIo {
    fn read() -> Option<ProcIo> {
        let text = std::fs::read_to_string("/proc/self/io").ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        Some(ProcIo {
            read_bytes: field("read_bytes:")?,
            write_bytes: field("write_bytes:")?,
        })
    }
}

trait Since {
    fn since(self, before: Option<ProcIo>) -> Option<ProcIo>;
}

impl Since for Option<ProcIo> {
    fn since(self, before: Option<ProcIo>) -> Option<ProcIo> {
        let (now, before) = (self?, before?);
        Some(ProcIo {
            read_bytes: now.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: now.write_bytes.saturating_sub(before.write_bytes),
        })
    }
}
