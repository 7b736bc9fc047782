//! `cairn-bench ledger-receipts`: the verifiable ledger (`cairn_ledger`, issue 45) on a real
//! directory, measured for issue 45's acceptance item 5: receipt sizes, receipts verified per
//! second on one core, the cost the ledger adds to a commit, and the space a version takes.
//!
//! Owns: the workload, its model, the measurements and their record. Must never touch: the
//! ledger's or the engine's internals (it uses `Ledger`, `Session` and `Table` as a user
//! would, and reads the directory's files only to measure their size).
//!
//! Method, in one fresh directory under `--dir` (default `target/`), on one thread:
//!
//! 1. **Load.** A ledger of two tables, `events` (`--events` keys) and `accounts` (`--keys`
//!    keys), loaded with `Ledger::write` of `--load-batch` keys each (one version per write),
//!    and a bare session with one durable authenticated table `accounts` holding the same
//!    keys, loaded with the same batches (`Table::write`, `Table::commit`). Keys are UTxO keys
//!    (34 bytes, [`crate::keys::utxo_key`]), values 60 bytes naming the key and the version
//!    that wrote them, so that `--check` compares every value read with a model.
//! 2. **Commit cost, after the load**: pairs of commits of the same `--commit-keys` random
//!    present keys, the ledger's `write` (one version, A) then the bare table's `write` and
//!    `commit` (B), and as a third side (C) other keys of the bare table written through a
//!    bare `Session::transaction` and committed (the engine's path under `Ledger::transact`,
//!    and under `Ledger::write` before it wrote one engine batch). Interleaved A, B, C, A,
//!    B, C so that the machine's noise hits every side, `--repetitions` rounds after 3 untimed
//!    ones, first not waiting for durability (no side), then waiting for it on every side
//!    (`sync_log` of each session after its commit, the same call on all). Each mode starts
//!    with the page cache dropped (`--commit-cache cold`, the default; needs root), so that
//!    the table loaded first is not the one whose pages the cache lost. Medians of each side,
//!    by the clock and by the process's CPU time, their ratios, and the bytes each side read
//!    from the disk.
//! 3. **Small commits**: the ledger's remaining versions up to `--versions`, one random present
//!    key updated each, `--waited-commits` of them first each waited until durable, the rest
//!    not waited for (the log's default group commit makes them durable; one `sync` at the
//!    end). At every power-of-two version, `--samples-on-the-way` one-key reads measure the
//!    receipt's size against the history's size (not counted in the commit rate).
//! 4. **Receipts at the last version**: `--samples` reads of each kind (one present key of
//!    `accounts`, one absent key, one present key of each table), their encoded sizes and
//!    parts, and how long a read with its receipt takes.
//! 5. **Verification rate**: `--verify-receipts` receipts of distinct random present keys,
//!    verified with `cairn_proof::verify_receipt` round-robin for `--seconds` on this thread,
//!    every one checked to succeed; then the same with each receipt decoded from its bytes
//!    first.
//! 6. **Commit cost again** at the last version (the ledger's `accounts` now also carries the
//!    small commits' updates, the bare table does not: read this as the second figure).
//! 7. **Space**: both sessions checkpointed, then `--space-commits` commits of one random key
//!    on each side (ledger versions; bare `write` and `commit`), synced; the directories'
//!    allocated bytes (hard links counted once) before, after, and after another checkpoint,
//!    by top-level directory, divided by the commits. The ledger's own share is the
//!    difference between the sides. The encoded sizes of the ledger's records per version are
//!    computed from the format (`cairn_ledger`'s `records.rs`, `docs/format/history.md`).
//!
//! Settings: `Ledger::open` and `Session::open` with the engine's defaults (a log with group
//! commit, a 200 µs window; background merges off), tables of the default configuration with
//! SHA-256 tries, or BLAKE3 tries with `--hash blake3` (the ledger's tables and the bare table
//! alike; the history tree and the ledger root are SHA-256 either way).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use cairn::{AuthConfig, Session, Table, TableConfig, Update};
use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::history::HISTORY_LEAF_BYTES;
use cairn_proof::{verify_receipt, Claim, Digest, HashKind, Receipt, TableClaims};

use crate::cli::{AuthHashArg, CommitCache, LedgerReceiptsArgs};
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, SplitMix64, KEY_BYTES, VALUE_BYTES};
use crate::report::table::Markdown;
use crate::stats::{median, percentiles};

/// The ledger's large table, and the bare table compared with it.
const ACCOUNTS: &str = "accounts";
/// The ledger's second table (two-table reads).
const EVENTS: &str = "events";
/// Mixed into the seed of `events` keys, so that they differ from `accounts` keys.
const EVENTS_SALT: u64 = 0x6576_656e_7473_0001;
/// Untimed pairs before each commit-cost comparison.
const WARMUP_PAIRS: u64 = 3;
/// At most one progress line per this long.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

type Key = [u8; KEY_BYTES];
type Value = [u8; VALUE_BYTES];

fn account_key(id: u64, seed: u64) -> Key {
    utxo_key(id, seed)
}

fn event_key(id: u64, seed: u64) -> Key {
    utxo_key(id, seed ^ EVENTS_SALT)
}

/// The value of key `id` as written by version `version` (0: the load): the two numbers,
/// then their xor repeated, so that a value read names what wrote it.
fn value(id: u64, version: u64) -> Value {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&id.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    let mix = (id ^ version.rotate_left(32)).to_le_bytes();
    for (i, byte) in v[16..].iter_mut().enumerate() {
        *byte = mix[i % 8];
    }
    v
}

/// Prints a line at most every [`PROGRESS_EVERY`], and always the last: the count, the
/// seconds, the rate since the start and since the line before.
struct Progress {
    what: &'static str,
    start: Instant,
    last: Instant,
    last_done: u64,
}

impl Progress {
    fn new(what: &'static str) -> Progress {
        let now = Instant::now();
        Progress {
            what,
            start: now,
            last: now,
            last_done: 0,
        }
    }

    fn tick(&mut self, done: u64, total: u64, unit: &str, last: bool) {
        let since = self.last.elapsed();
        if !last && since < PROGRESS_EVERY {
            return;
        }
        let s = self.start.elapsed().as_secs_f64();
        eprintln!(
            "{}: {done} of {total} {unit}, {s:.1} s, {:.0} {unit}/s ({:.0} lately)",
            self.what,
            done as f64 / s.max(1e-9),
            (done - self.last_done) as f64 / since.as_secs_f64().max(1e-9)
        );
        self.last = Instant::now();
        self.last_done = done;
    }
}

/// The bare session of the comparison: one durable authenticated table.
struct Bare {
    session: Session,
    table: Table,
}

/// The ledger under measurement, the model of what it holds, and the choices' generator.
struct Bench<'a> {
    args: &'a LedgerReceiptsArgs,
    ledger: Ledger,
    rng: SplitMix64,
    /// `accounts` keys updated since the load: id to the version that wrote the value.
    written: HashMap<u64, u64>,
}

impl Bench<'_> {
    fn expected(&self, id: u64) -> Value {
        value(id, self.written.get(&id).copied().unwrap_or(0))
    }

    /// `n` distinct random ids of present `accounts` keys.
    fn distinct_ids(&mut self, n: u64) -> Vec<u64> {
        let n = n.min(self.args.keys);
        let mut seen = HashSet::with_capacity(n as usize);
        let mut ids = Vec::with_capacity(n as usize);
        while (ids.len() as u64) < n {
            let id = self.rng.below(self.args.keys);
            if seen.insert(id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The batch of the next version, writing `ids` of `accounts`.
    fn batch(&self, ids: &[u64]) -> LedgerBatch {
        let version = self.ledger.version() + 1;
        let mut batch = LedgerBatch::new();
        for &id in ids {
            batch.insert(
                ACCOUNTS,
                account_key(id, self.args.seed),
                value(id, version),
            );
        }
        batch
    }

    /// Commits `batch` (made by [`Bench::batch`] for `ids`) as the next version.
    fn write(
        &mut self,
        batch: &LedgerBatch,
        ids: &[u64],
    ) -> Result<cairn_ledger::Committed, Failure> {
        let version = self.ledger.version() + 1;
        let committed = self
            .ledger
            .write(batch)
            .context(|| format!("committing version {version}"))?
            .ok_or_else(|| Failure(format!("version {version} made no version")))?;
        for &id in ids {
            self.written.insert(id, version);
        }
        Ok(committed)
    }

    /// Commits one version writing `ids` of `accounts`.
    fn commit(&mut self, ids: &[u64]) -> Result<cairn_ledger::Committed, Failure> {
        let batch = self.batch(ids);
        self.write(&batch, ids)
    }
}

pub fn run(args: &LedgerReceiptsArgs) -> Result<(), Failure> {
    if args.seconds <= 0.0 {
        return Err(Failure("--seconds must be positive".into()));
    }
    in_bench_dir(args.dir.as_deref(), args.keep, |dir| bench(args, dir))
}

/// Runs `f` in a fresh benchmark directory inside `parent` (default `target/` of the current
/// directory, created if missing), removed at the end unless `keep`.
pub(crate) fn in_bench_dir<T>(
    parent: Option<&Path>,
    keep: bool,
    f: impl FnOnce(&Path) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let parent = parent.unwrap_or(Path::new("target"));
    std::fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
    crate::in_temp_dir(Some(parent), keep, f)
}

fn bench(args: &LedgerReceiptsArgs, dir: &Path) -> Result<(), Failure> {
    let started = (crate::sys::now_rfc3339(), machine_load());
    let ledger_dir = dir.join("ledger");
    let bare_dir = dir.join("bare");
    let config = LedgerConfig::new([ACCOUNTS, EVENTS]).hash(hash_kind(args));
    let ledger = Ledger::open(&ledger_dir, config)
        .context(|| format!("opening a ledger in {}", ledger_dir.display()))?;
    let mut b = Bench {
        args,
        ledger,
        rng: SplitMix64::new(args.seed),
        written: HashMap::new(),
    };
    let load_ledger_s = load_ledger(&b)?;
    let load_versions = b.ledger.version();
    if load_versions > args.versions {
        return Err(Failure(format!(
            "the load alone makes {load_versions} versions, more than --versions {}",
            args.versions
        )));
    }
    let bare = open_bare(&bare_dir, hash_kind(args))?;
    let load_bare_s = load_bare(&bare, args)?;
    let cost_after_load = [
        commit_cost(&mut b, &bare, false)?,
        commit_cost(&mut b, &bare, true)?,
    ];
    let small = small_commits(&mut b)?;
    let receipts = [
        receipts(&mut b, Kind::Present, args.samples)?,
        receipts(&mut b, Kind::Absent, args.samples)?,
        receipts(&mut b, Kind::TwoTables, args.samples)?,
    ];
    let verification = verification(&mut b)?;
    let cost_at_end = [
        commit_cost(&mut b, &bare, false)?,
        commit_cost(&mut b, &bare, true)?,
    ];
    let space = space(&mut b, &bare, &ledger_dir, &bare_dir)?;
    let figures = Figures {
        load_ledger_s,
        load_bare_s,
        load_versions,
        cost_after_load,
        small,
        receipts,
        verification,
        cost_at_end,
        space,
    };
    print_table(args, &figures);
    if let Some(path) = &args.json {
        let doc = record(args, &figures, &started, dir);
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .context(|| format!("writing {}", path.display()))?;
    }
    bare.session.close();
    b.ledger.close();
    Ok(())
}

// -------------------------------------------------------------------------------------------
// Loading

/// Loads `events`, then `accounts`, one version per `--load-batch` keys; returns the seconds.
fn load_ledger(b: &Bench<'_>) -> Result<f64, Failure> {
    let args = b.args;
    let mut progress = Progress::new("ledger load");
    let total = args.events + args.keys;
    let mut done = 0;
    for (table, count) in [(EVENTS, args.events), (ACCOUNTS, args.keys)] {
        let mut first = 0;
        while first < count {
            let last = (first + args.load_batch).min(count);
            let mut batch = LedgerBatch::new();
            for id in first..last {
                let key = match table {
                    EVENTS => event_key(id, args.seed),
                    _ => account_key(id, args.seed),
                };
                batch.insert(table, key, value(id, 0));
            }
            b.ledger
                .write(&batch)
                .context(|| format!("loading {table} keys {first} to {last}"))?;
            done += last - first;
            first = last;
            progress.tick(done, total, "keys", done == total);
        }
    }
    b.ledger.sync().context(|| "syncing the load".into())?;
    Ok(progress.start.elapsed().as_secs_f64())
}

/// The hash function of every table's trie (`--hash`).
fn hash_kind(args: &LedgerReceiptsArgs) -> HashKind {
    match args.hash {
        AuthHashArg::Sha256 => HashKind::Sha256,
        AuthHashArg::Blake3 => HashKind::Blake3,
    }
}

fn open_bare(dir: &Path, hash: HashKind) -> Result<Bare, Failure> {
    let session =
        Session::open(dir).context(|| format!("opening a session in {}", dir.display()))?;
    let config = TableConfig::default().auth(Some(AuthConfig::default().hash(hash)));
    let table = session
        .table(ACCOUNTS, config)
        .context(|| "opening the bare table".into())?;
    Ok(Bare { session, table })
}

/// Loads the bare table with the ledger's `accounts` keys, in the same batches.
fn load_bare(bare: &Bare, args: &LedgerReceiptsArgs) -> Result<f64, Failure> {
    let mut progress = Progress::new("bare table load");
    let mut first = 0;
    while first < args.keys {
        let last = (first + args.load_batch).min(args.keys);
        let pairs: Vec<(Key, Value)> = (first..last)
            .map(|id| (account_key(id, args.seed), value(id, 0)))
            .collect();
        bare_commit(bare, &updates(&pairs))
            .context(|| format!("loading keys {first} to {last}"))?;
        first = last;
        progress.tick(first, args.keys, "keys", first == args.keys);
    }
    bare.session
        .sync_log()
        .context(|| "syncing the load".into())?;
    Ok(progress.start.elapsed().as_secs_f64())
}

/// The bare table's updates of `pairs`.
fn updates(pairs: &[(Key, Value)]) -> Vec<(&[u8], Update<'_>)> {
    pairs
        .iter()
        .map(|(k, v)| (&k[..], Update::Insert(&v[..])))
        .collect()
}

/// One commit of the bare table: the updates logged, then the trie committed.
fn bare_commit(bare: &Bare, updates: &[(&[u8], Update<'_>)]) -> cairn::Result<()> {
    bare.table.write(updates)?;
    bare.table.commit()?;
    Ok(())
}

/// One commit of the bare table through a transaction (the engine's path under
/// `Ledger::transact`, without the ledger's records): the updates inserted in a transaction and
/// committed with it, then the trie committed.
fn bare_tx_commit(bare: &Bare, pairs: &[(Key, Value)]) -> cairn::Result<()> {
    let mut tx = bare.session.transaction()?;
    for (k, v) in pairs {
        tx.insert(&bare.table, k, v)?;
    }
    tx.commit()?;
    bare.table.commit()?;
    Ok(())
}

// -------------------------------------------------------------------------------------------
// The commit cost

/// The commit-cost comparison in one mode: the ledger (A), the bare table (B), and the bare
/// table through a transaction (C: what a transaction costs without the ledger's records).
struct CommitCost {
    waited: bool,
    /// The ledger's version count when the comparison started.
    at_version: u64,
    ledger_ms: Vec<f64>,
    bare_ms: Vec<f64>,
    bare_tx_ms: Vec<f64>,
    /// Process CPU milliseconds of each commit: the ledger's, the bare table's, the bare
    /// table's through a transaction.
    cpu_ms: [Vec<f64>; 3],
    /// Bytes each side read from the disk over its timed commits (`/proc/self/io`
    /// `read_bytes`: not what the page cache served), in the same order.
    disk_read_bytes: [u64; 3],
    /// Whether the page cache was dropped before the comparison.
    cache_dropped: bool,
}

impl CommitCost {
    fn ledger_median(&self) -> f64 {
        median(&self.ledger_ms)
    }

    fn bare_median(&self) -> f64 {
        median(&self.bare_ms)
    }

    fn bare_tx_median(&self) -> f64 {
        median(&self.bare_tx_ms)
    }

    /// The ledger's median over the bare table's.
    fn ratio(&self) -> f64 {
        self.ledger_median() / self.bare_median()
    }

    /// The median of each repetition's ratio of `a` to `b`.
    fn pair_ratio(a: &[f64], b: &[f64]) -> f64 {
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        median(&ratios)
    }
}

/// What `timed_ms` measured of one call.
struct Timed {
    /// Milliseconds of the clock.
    ms: f64,
    /// Milliseconds of the process's CPU time (every thread).
    cpu_ms: f64,
    /// Bytes the process read from the disk meanwhile (every thread).
    disk_read: u64,
}

/// Times `f`.
fn timed_ms(f: impl FnOnce() -> Result<(), Failure>) -> Result<Timed, Failure> {
    let (start, cpu, read) = (
        Instant::now(),
        cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID),
        disk_read_bytes(),
    );
    f()?;
    Ok(Timed {
        ms: start.elapsed().as_secs_f64() * 1e3,
        cpu_ms: (cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e3,
        disk_read: disk_read_bytes().saturating_sub(read),
    })
}

/// The bytes this process has read from the disk (`read_bytes` of `/proc/self/io`; 0 where
/// there is no such file).
fn disk_read_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn commit_cost(b: &mut Bench<'_>, bare: &Bare, waited: bool) -> Result<CommitCost, Failure> {
    // Both tables from the same state of the page cache: the one loaded first would otherwise
    // find fewer of its pages there (measured at 10M keys: 4 to 5 MB read from the disk per
    // commit by whichever table was loaded first, nothing by the other).
    let cache_dropped = match b.args.commit_cache {
        CommitCache::Cold => {
            b.ledger.sync().context(|| "syncing".into())?;
            bare.session.sync_log().context(|| "syncing".into())?;
            if !crate::sys::proc::drop_page_cache() {
                return Err(Failure(
                    "--commit-cache cold needs root to drop the page cache (or pass \
                     --commit-cache as-is)"
                        .into(),
                ));
            }
            true
        }
        CommitCache::AsIs => false,
    };
    let mut cost = CommitCost {
        waited,
        at_version: b.ledger.version(),
        ledger_ms: Vec::new(),
        bare_ms: Vec::new(),
        bare_tx_ms: Vec::new(),
        cpu_ms: Default::default(),
        disk_read_bytes: [0; 3],
        cache_dropped,
    };
    let rounds = WARMUP_PAIRS + b.args.repetitions;
    let mut progress = Progress::new(if waited {
        "commit cost, waited until durable"
    } else {
        "commit cost, not waited for"
    });
    let seed = b.args.seed;
    for round in 0..rounds {
        // A and B write the same keys and values; C other keys of the bare table (the same
        // keys would find B's pages in memory).
        let ids = b.distinct_ids(b.args.commit_keys);
        let tx_ids = b.distinct_ids(b.args.commit_keys);
        let version = b.ledger.version() + 1;
        let batch = b.batch(&ids);
        let pairs: Vec<(Key, Value)> = ids
            .iter()
            .map(|&id| (account_key(id, seed), value(id, version)))
            .collect();
        let bare_updates = updates(&pairs);
        let tx_pairs: Vec<(Key, Value)> = tx_ids
            .iter()
            .map(|&id| (account_key(id, seed), value(id, version | 1 << 63)))
            .collect();
        let sync_bare = || -> Result<(), Failure> {
            if waited {
                bare.session.sync_log().context(|| "syncing".into())?;
            }
            Ok(())
        };
        let a = timed_ms(|| {
            b.write(&batch, &ids)?;
            if waited {
                b.ledger.sync().context(|| "syncing".into())?;
            }
            Ok(())
        })?;
        let bb = timed_ms(|| {
            bare_commit(bare, &bare_updates).context(|| "a bare commit".into())?;
            sync_bare()
        })?;
        let c = timed_ms(|| {
            bare_tx_commit(bare, &tx_pairs).context(|| "a bare transaction".into())?;
            sync_bare()
        })?;
        if round >= WARMUP_PAIRS {
            cost.ledger_ms.push(a.ms);
            cost.bare_ms.push(bb.ms);
            cost.bare_tx_ms.push(c.ms);
            for (i, t) in [&a, &bb, &c].into_iter().enumerate() {
                cost.cpu_ms[i].push(t.cpu_ms);
                cost.disk_read_bytes[i] += t.disk_read;
            }
        }
        progress.tick(round + 1, rounds, "rounds", round + 1 == rounds);
    }
    eprintln!(
        "commit of {} keys at version {}, {}: ledger {:.3} ms, bare table {:.3} ms, bare table \
         through a transaction {:.3} ms (medians); ledger / bare {:.3}, ledger / transaction {:.3}; \
         MB read from the disk per commit {:.2} / {:.2} / {:.2}",
        b.args.commit_keys,
        cost.at_version,
        if waited { "waited" } else { "not waited" },
        cost.ledger_median(),
        cost.bare_median(),
        cost.bare_tx_median(),
        cost.ratio(),
        cost.ledger_median() / cost.bare_tx_median(),
        cost.disk_read_bytes[0] as f64 / 1e6 / b.args.repetitions as f64,
        cost.disk_read_bytes[1] as f64 / 1e6 / b.args.repetitions as f64,
        cost.disk_read_bytes[2] as f64 / 1e6 / b.args.repetitions as f64,
    );
    Ok(cost)
}

// -------------------------------------------------------------------------------------------
// Small commits

/// The commits of one key each that make the ledger's versions.
struct SmallCommits {
    commits: u64,
    /// Seconds of the commits not waited for (reads on the way not included).
    seconds: f64,
    /// CPU seconds of the process over those commits (every thread's; reads not included).
    cpu_s: f64,
    waited: u64,
    waited_seconds: f64,
    waited_ms: Vec<f64>,
    /// One-key receipts measured at each power-of-two version on the way, and at the last.
    on_the_way: Vec<ReceiptSizes>,
}

fn small_commits(b: &mut Bench<'_>) -> Result<SmallCommits, Failure> {
    let args = b.args;
    let remaining = args.versions.saturating_sub(b.ledger.version());
    let waited = args.waited_commits.min(remaining);
    let mut small = SmallCommits {
        commits: remaining - waited,
        seconds: 0.0,
        cpu_s: 0.0,
        waited,
        waited_seconds: 0.0,
        waited_ms: Vec::with_capacity(waited as usize),
        on_the_way: Vec::new(),
    };
    let start = Instant::now();
    for _ in 0..waited {
        let id = b.rng.below(args.keys);
        let t = Instant::now();
        let committed = b.commit(&[id])?;
        committed
            .durability
            .wait()
            .context(|| "waiting for a version's durability".into())?;
        small.waited_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    small.waited_seconds = start.elapsed().as_secs_f64();
    if waited > 0 {
        eprintln!(
            "{waited} commits of one key, each waited until durable: {:.0} per s",
            waited as f64 / small.waited_seconds
        );
    }
    let mut progress = Progress::new("commits of one key");
    let mut reading = Duration::ZERO;
    let mut reading_cpu_s = 0.0;
    let cpu_start = cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID);
    let planned = small.commits;
    let budget = args.commit_seconds.map(Duration::from_secs_f64);
    for done in 1..=planned {
        let id = b.rng.below(args.keys);
        let version = b.commit(&[id])?.version;
        if version.is_power_of_two() || version == args.versions {
            let (t, cpu) = (Instant::now(), cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID));
            small
                .on_the_way
                .push(receipts(b, Kind::Present, args.samples_on_the_way)?);
            reading += t.elapsed();
            reading_cpu_s += cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu;
        }
        let out_of_time = budget.is_some_and(|t| progress.start.elapsed() >= t);
        progress.tick(done, planned, "commits", done == planned || out_of_time);
        if out_of_time && done < planned {
            eprintln!(
                "commits of one key: --commit-seconds reached at version {version}, short of \
                 --versions {}",
                args.versions
            );
            small.commits = done;
            break;
        }
    }
    small.seconds = (progress.start.elapsed() - reading).as_secs_f64();
    small.cpu_s = cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu_start - reading_cpu_s;
    b.ledger.sync().context(|| "syncing the versions".into())?;
    Ok(small)
}

// -------------------------------------------------------------------------------------------
// Receipts

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One present key of `accounts`.
    Present,
    /// One absent key of `accounts`.
    Absent,
    /// One present key of `accounts` and one of `events`.
    TwoTables,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Present => "1 key present, 1 table",
            Kind::Absent => "1 key absent, 1 table",
            Kind::TwoTables => "1 key present in each of 2 tables",
        }
    }
}

/// Receipts of one kind of read at one version.
#[derive(Clone, Debug)]
struct ReceiptSizes {
    kind: Kind,
    version: u64,
    reads: u64,
    bytes: Vec<f64>,
    history_hashes: Vec<f64>,
    table_path_hashes: Vec<f64>,
    trie_proof_bytes: Vec<f64>,
    read_us: Vec<f64>,
}

impl ReceiptSizes {
    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }

    fn min(v: &[f64]) -> f64 {
        v.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn max(v: &[f64]) -> f64 {
        v.iter().copied().fold(0.0, f64::max)
    }

    fn json(&self) -> serde_json::Value {
        let m = |v: &[f64]| serde_json::json!({ "min": Self::min(v), "mean": Self::mean(v), "max": Self::max(v) });
        serde_json::json!({
            "kind": self.kind.name(),
            "version": self.version,
            "reads": self.reads,
            "receipt_bytes": m(&self.bytes),
            "history_path_hashes": m(&self.history_hashes),
            "table_path_hashes": m(&self.table_path_hashes),
            "trie_proof_bytes": m(&self.trie_proof_bytes),
            "read_us": { "p50": percentiles(&self.read_us).p50, "p99": percentiles(&self.read_us).p99 },
        })
    }
}

/// `n` reads of `kind` at the newest version, their receipts measured (and with `--check`,
/// the values compared with the model, and each receipt verified and round-tripped).
fn receipts(b: &mut Bench<'_>, kind: Kind, n: u64) -> Result<ReceiptSizes, Failure> {
    let mut sizes = ReceiptSizes {
        kind,
        version: b.ledger.version(),
        reads: n,
        bytes: Vec::new(),
        history_hashes: Vec::new(),
        table_path_hashes: Vec::new(),
        trie_proof_bytes: Vec::new(),
        read_us: Vec::new(),
    };
    let seed = b.args.seed;
    for _ in 0..n {
        let (id, present) = match kind {
            Kind::Absent => (b.args.keys + b.rng.below(1 << 40), false),
            _ => (b.rng.below(b.args.keys), true),
        };
        let event = b.rng.below(b.args.events);
        let account = [account_key(id, seed)];
        let events = [event_key(event, seed)];
        let mut reads: Vec<(&str, &[Key])> = vec![(ACCOUNTS, &account[..])];
        if kind == Kind::TwoTables {
            reads.push((EVENTS, &events[..]));
        }
        let start = Instant::now();
        let read = b.ledger.read(&reads).context(|| "a read".into())?;
        sizes.read_us.push(start.elapsed().as_secs_f64() * 1e6);
        let r = &read.receipt;
        sizes.bytes.push(r.encoded_len() as f64);
        sizes.history_hashes.push(r.history_path.len() as f64);
        sizes
            .table_path_hashes
            .push(r.tables.iter().map(|t| t.path.len()).sum::<usize>() as f64);
        sizes.trie_proof_bytes.push(
            r.tables
                .iter()
                .map(|t| t.proof.encoded_len())
                .sum::<usize>() as f64,
        );
        if b.args.check {
            let account_value = present.then(|| b.expected(id));
            let event_value = value(event, 0);
            check_read(&read, kind, &account, account_value, &events, &event_value)?;
        }
    }
    Ok(sizes)
}

/// The values against the model, the receipt against its digest, its encoding round-tripped.
fn check_read(
    read: &cairn_ledger::VerifiedRead,
    kind: Kind,
    account: &[Key; 1],
    account_value: Option<Value>,
    events: &[Key; 1],
    event_value: &Value,
) -> Result<(), Failure> {
    let got = read.values[0][0].as_deref();
    if got != account_value.as_ref().map(|v| &v[..]) {
        return Err(Failure(format!(
            "version {}: accounts key {} read {got:?}, the model says {account_value:?}",
            read.version,
            hex::encode(account[0])
        )));
    }
    let account_claim = [match &account_value {
        Some(v) => Claim::present(&account[0], v),
        None => Claim::absent(&account[0]),
    }];
    let event_claim = [Claim::present(&events[0], event_value)];
    let mut claims = vec![TableClaims {
        table: ACCOUNTS,
        claims: &account_claim,
    }];
    if kind == Kind::TwoTables {
        if read.values[1][0].as_deref() != Some(&event_value[..]) {
            return Err(Failure(format!(
                "version {}: events key {} read {:?}",
                read.version,
                hex::encode(events[0]),
                read.values[1][0]
            )));
        }
        claims.push(TableClaims {
            table: EVENTS,
            claims: &event_claim,
        });
    }
    verify_receipt(&read.receipt, &claims, &read.digest)
        .map_err(|e| Failure(format!("version {}: a receipt failed: {e}", read.version)))?;
    let bytes = read.receipt.encode();
    if bytes.len() != read.receipt.encoded_len()
        || Receipt::decode(&bytes).ok().as_ref() != Some(&read.receipt)
    {
        return Err(Failure(format!(
            "version {}: a receipt does not round-trip through its encoding",
            read.version
        )));
    }
    Ok(())
}

// -------------------------------------------------------------------------------------------
// Verification rate

struct Verification {
    receipts: u64,
    version: u64,
    /// Hashes in the history path of the receipts (all at one version, so all alike).
    history_path_hashes: usize,
    /// Verified per second of the clock, and per second of the thread's CPU time.
    verified_per_s: (f64, f64),
    decoded_and_verified_per_s: (f64, f64),
    making_s: f64,
}

/// One receipt of the verification set: its key, value, receipt and encoding.
struct Made {
    key: Key,
    value: Value,
    receipt: Receipt,
    bytes: Vec<u8>,
}

fn verification(b: &mut Bench<'_>) -> Result<Verification, Failure> {
    let ids = b.distinct_ids(b.args.verify_receipts);
    let start = Instant::now();
    let mut digest: Option<Digest> = None;
    let mut made = Vec::with_capacity(ids.len());
    for &id in &ids {
        let key = account_key(id, b.args.seed);
        let read = b
            .ledger
            .read(&[(ACCOUNTS, &[key][..])])
            .context(|| "a read".into())?;
        if digest.get_or_insert(read.digest) != &read.digest {
            return Err(Failure("the digest moved while no commit ran".into()));
        }
        let value = b.expected(id);
        if read.values[0][0].as_deref() != Some(&value[..]) {
            return Err(Failure(format!(
                "key {id}: the value read is not the model's"
            )));
        }
        made.push(Made {
            key,
            value,
            bytes: read.receipt.encode(),
            receipt: read.receipt,
        });
    }
    let making_s = start.elapsed().as_secs_f64();
    let digest = digest.ok_or_else(|| Failure("no receipt made".into()))?;
    let history_path_hashes = made[0].receipt.history_path.len();
    let claims_ok = |m: &Made, r: &Receipt| {
        let claim = [Claim::present(&m.key, &m.value)];
        let reads = [TableClaims {
            table: ACCOUNTS,
            claims: &claim,
        }];
        verify_receipt(r, &reads, &digest).is_ok()
    };
    let verified_per_s = rate(made.len(), b.args.seconds, |i| {
        claims_ok(&made[i], &made[i].receipt)
    })?;
    let decoded_and_verified_per_s = rate(made.len(), b.args.seconds, |i| {
        Receipt::decode(&made[i].bytes)
            .ok()
            .is_some_and(|r| claims_ok(&made[i], &r))
    })?;
    eprintln!(
        "{} receipts at version {} ({history_path_hashes} history path hashes) verified: {:.0} \
         per s ({:.0} per CPU second), decoded and verified: {:.0} per s ({:.0} per CPU \
         second), one thread",
        made.len(),
        digest.size,
        verified_per_s.0,
        verified_per_s.1,
        decoded_and_verified_per_s.0,
        decoded_and_verified_per_s.1
    );
    Ok(Verification {
        receipts: made.len() as u64,
        version: digest.size,
        history_path_hashes,
        verified_per_s,
        decoded_and_verified_per_s,
        making_s,
    })
}

/// Runs `verify(i)` round-robin over `n` receipts for `seconds`; returns verifications per
/// second of the clock and per second of this thread's CPU time (what one core does when the
/// machine's other work takes turns on it).
fn rate(
    n: usize,
    seconds: f64,
    mut verify: impl FnMut(usize) -> bool,
) -> Result<(f64, f64), Failure> {
    let start = Instant::now();
    let cpu_start = cpu_s(libc::CLOCK_THREAD_CPUTIME_ID);
    let mut done = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for i in 0..n {
            if !verify(i) {
                return Err(Failure(format!("receipt {i} did not verify")));
            }
        }
        done += n as u64;
    }
    let cpu = cpu_s(libc::CLOCK_THREAD_CPUTIME_ID) - cpu_start;
    Ok((
        done as f64 / start.elapsed().as_secs_f64(),
        done as f64 / cpu.max(1e-9),
    ))
}

/// The CPU time of `clock` (`CLOCK_PROCESS_CPUTIME_ID`: every thread of the process;
/// `CLOCK_THREAD_CPUTIME_ID`: the calling thread), in seconds; 0 if the clock fails.
pub(crate) fn cpu_s(clock: libc::clockid_t) -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration, and the clock ids
    // passed are constants of the running kernel; a failure leaves `t` at zero.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// `/proc/loadavg` and the CPU line of `/proc/pressure/cpu` (the share of time some task
/// waited for a CPU): how busy the shared machine was.
pub(crate) fn machine_load() -> serde_json::Value {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    serde_json::json!({
        "loadavg": read("/proc/loadavg"),
        "pressure_cpu": read("/proc/pressure/cpu"),
    })
}

// -------------------------------------------------------------------------------------------
// Space

/// Allocated bytes of a directory, by top-level entry; files with several links once.
pub(crate) fn usage(dir: &Path) -> Result<BTreeMap<String, u64>, Failure> {
    let mut seen = HashSet::new();
    let mut by_top = BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), None::<String>)];
    while let Some((path, top)) = stack.pop() {
        let entries = std::fs::read_dir(&path).context(|| format!("listing {}", path.display()))?;
        for entry in entries {
            let entry = entry.context(|| format!("listing {}", path.display()))?;
            let meta = entry
                .metadata()
                .context(|| format!("measuring {}", entry.path().display()))?;
            let top = top
                .clone()
                .unwrap_or_else(|| entry.file_name().to_string_lossy().into_owned());
            if meta.is_dir() {
                stack.push((entry.path(), Some(top)));
            } else if seen.insert((meta.dev(), meta.ino())) {
                *by_top.entry(top).or_insert(0) += meta.blocks() * 512;
            }
        }
    }
    Ok(by_top)
}

/// The space of the commits of one side: allocated bytes by top-level directory before the
/// commits (after a checkpoint), after them (synced), and after another checkpoint.
struct SideSpace {
    before: BTreeMap<String, u64>,
    after: BTreeMap<String, u64>,
    checkpointed: BTreeMap<String, u64>,
    seconds: f64,
}

impl SideSpace {
    fn total(m: &BTreeMap<String, u64>) -> u64 {
        m.values().sum()
    }

    fn per_commit(&self, m: &BTreeMap<String, u64>, commits: u64) -> f64 {
        (Self::total(m) as f64 - Self::total(&self.before) as f64) / commits as f64
    }

    fn json(&self, commits: u64) -> serde_json::Value {
        serde_json::json!({
            "before": self.before,
            "after": self.after,
            "after_checkpoint": self.checkpointed,
            "bytes_per_commit_after": self.per_commit(&self.after, commits),
            "bytes_per_commit_after_checkpoint": self.per_commit(&self.checkpointed, commits),
            "seconds": self.seconds,
        })
    }
}

struct Space {
    commits: u64,
    ledger: SideSpace,
    bare: SideSpace,
}

fn space(
    b: &mut Bench<'_>,
    bare: &Bare,
    ledger_dir: &Path,
    bare_dir: &Path,
) -> Result<Space, Failure> {
    let n = b.args.space_commits;
    b.ledger
        .checkpoint()
        .context(|| "checkpointing the ledger".into())?;
    bare.session
        .checkpoint()
        .context(|| "checkpointing the bare session".into())?;
    let ids: Vec<u64> = (0..n).map(|_| b.rng.below(b.args.keys)).collect();
    let before = usage(ledger_dir)?;
    let start = Instant::now();
    for &id in &ids {
        b.commit(&[id])?;
    }
    b.ledger.sync().context(|| "syncing the ledger".into())?;
    let seconds = start.elapsed().as_secs_f64();
    let after = usage(ledger_dir)?;
    b.ledger
        .checkpoint()
        .context(|| "checkpointing the ledger".into())?;
    let ledger = SideSpace {
        before,
        after,
        checkpointed: usage(ledger_dir)?,
        seconds,
    };
    let before = usage(bare_dir)?;
    let start = Instant::now();
    for (i, &id) in ids.iter().enumerate() {
        let pair = [(account_key(id, b.args.seed), value(id, i as u64 + 1))];
        bare_commit(bare, &updates(&pair)).context(|| "a bare commit".into())?;
    }
    bare.session.sync_log().context(|| "syncing".into())?;
    let seconds = start.elapsed().as_secs_f64();
    let after = usage(bare_dir)?;
    bare.session
        .checkpoint()
        .context(|| "checkpointing the bare session".into())?;
    let bare = SideSpace {
        before,
        after,
        checkpointed: usage(bare_dir)?,
        seconds,
    };
    eprintln!(
        "space of {n} commits of one key: ledger {:.0} bytes per version ({:.0} after a \
         checkpoint), bare table {:.0} per commit ({:.0})",
        ledger.per_commit(&ledger.after, n),
        ledger.per_commit(&ledger.checkpointed, n),
        bare.per_commit(&bare.after, n),
        bare.per_commit(&bare.checkpointed, n)
    );
    Ok(Space {
        commits: n,
        ledger,
        bare,
    })
}

/// The ledger's records per version, from the format (`cairn_ledger`'s `records.rs`): the
/// version record's bytes for `tables` tables and empty metadata, and the history nodes
/// stored for `versions` versions (a leaf each, and one node per subtree completed:
/// `2·n − popcount(n)` in all).
fn format_sizes(tables: u64, versions: u64) -> serde_json::Value {
    let record = 1 + HISTORY_LEAF_BYTES as u64 + 2 + 33 * tables + 4;
    let nodes = 2 * versions - u64::from(versions.count_ones());
    let nodes_per_version = nodes as f64 / versions.max(1) as f64;
    serde_json::json!({
        "version_record_bytes": record,
        "version_record_key_bytes": 9,
        "node_key_bytes": 10,
        "node_value_bytes": 32,
        "head_record_bytes": 1 + 8,
        "pending_record_bytes": 1 + 13,
        "nodes_stored": nodes,
        "nodes_per_version": nodes_per_version,
        // Keys and values a version adds to `_history` (no engine framing): its nodes, its
        // record, the head, and the pending record inserted (with the updates) and deleted.
        "payload_bytes_per_version": nodes_per_version * 42.0 + (9 + record + 9 + 14 + 1) as f64,
    })
}

// -------------------------------------------------------------------------------------------
// Results

struct Figures {
    load_ledger_s: f64,
    load_bare_s: f64,
    load_versions: u64,
    cost_after_load: [CommitCost; 2],
    small: SmallCommits,
    receipts: [ReceiptSizes; 3],
    verification: Verification,
    cost_at_end: [CommitCost; 2],
    space: Space,
}

fn print_table(args: &LedgerReceiptsArgs, f: &Figures) {
    println!(
        "ledger of {} keys in accounts and {} in events, {:?} tries, {} versions ({} from the \
         load)",
        args.keys,
        args.events,
        hash_kind(args),
        f.verification.version,
        f.load_versions
    );
    let mut table = Markdown::left(&["figure", "value", "target"]);
    for r in &f.receipts {
        table.row([
            format!("receipt bytes, {} (min / mean / max)", r.kind.name()),
            format!(
                "{:.0} / {:.1} / {:.0}",
                ReceiptSizes::min(&r.bytes),
                ReceiptSizes::mean(&r.bytes),
                ReceiptSizes::max(&r.bytes)
            ),
            if r.kind == Kind::Present {
                "at most 1,536".into()
            } else {
                String::new()
            },
        ]);
    }
    let largest = f
        .small
        .on_the_way
        .iter()
        .max_by(|a, b| ReceiptSizes::max(&a.bytes).total_cmp(&ReceiptSizes::max(&b.bytes)));
    if let Some(r) = largest {
        table.row([
            "largest 1-key receipt on the way (bytes, at version)".into(),
            format!("{:.0} at {}", ReceiptSizes::max(&r.bytes), r.version),
            "at most 1,536".into(),
        ]);
    }
    let v = &f.verification;
    table.row([
        "receipts verified per s, one thread (per CPU second of it)".into(),
        format!("{:.0} ({:.0})", v.verified_per_s.0, v.verified_per_s.1),
        "at least 50,000".into(),
    ]);
    table.row([
        "receipts decoded and verified per s (per CPU second)".into(),
        format!(
            "{:.0} ({:.0})",
            v.decoded_and_verified_per_s.0, v.decoded_and_verified_per_s.1
        ),
        String::new(),
    ]);
    for c in f.cost_after_load.iter().chain(&f.cost_at_end) {
        table.row([
            format!(
                "{}-key commit at version {}, {}: ledger / bare / bare in a transaction ms \
                 (ledger over each; by CPU time)",
                args.commit_keys,
                c.at_version,
                if c.waited { "durable" } else { "not waited" }
            ),
            format!(
                "{:.2} / {:.2} / {:.2} ({:.3}, {:.3}; {:.3}, {:.3})",
                c.ledger_median(),
                c.bare_median(),
                c.bare_tx_median(),
                c.ratio(),
                c.ledger_median() / c.bare_tx_median(),
                median(&c.cpu_ms[0]) / median(&c.cpu_ms[1]),
                median(&c.cpu_ms[0]) / median(&c.cpu_ms[2])
            ),
            "at most 1.05".into(),
        ]);
    }
    let s = &f.small;
    table.row([
        "commits of 1 key, not waited for, per s (per CPU second)".into(),
        format!(
            "{:.0} ({:.0})",
            s.commits as f64 / s.seconds.max(1e-9),
            s.commits as f64 / s.cpu_s.max(1e-9)
        ),
        String::new(),
    ]);
    table.row([
        "commits of 1 key, each waited until durable, per s".into(),
        format!("{:.0}", s.waited as f64 / s.waited_seconds.max(1e-9)),
        String::new(),
    ]);
    let sp = &f.space;
    table.row([
        "allocated bytes per version: ledger / bare (after a checkpoint)".into(),
        format!(
            "{:.0} / {:.0} ({:.0} / {:.0})",
            sp.ledger.per_commit(&sp.ledger.after, sp.commits),
            sp.bare.per_commit(&sp.bare.after, sp.commits),
            sp.ledger.per_commit(&sp.ledger.checkpointed, sp.commits),
            sp.bare.per_commit(&sp.bare.checkpointed, sp.commits)
        ),
        String::new(),
    ]);
    print!("{}", table.render());
}

fn cost_json(c: &CommitCost) -> serde_json::Value {
    serde_json::json!({
        "waited_until_durable": c.waited,
        "at_version": c.at_version,
        "rounds": c.ledger_ms.len(),
        "ledger_ms_median": c.ledger_median(),
        "bare_ms_median": c.bare_median(),
        "bare_transaction_ms_median": c.bare_tx_median(),
        "cpu_ms_median": {
            "ledger": median(&c.cpu_ms[0]),
            "bare": median(&c.cpu_ms[1]),
            "bare_transaction": median(&c.cpu_ms[2]),
        },
        "cpu_ledger_over_bare": median(&c.cpu_ms[0]) / median(&c.cpu_ms[1]),
        "cpu_ledger_over_bare_transaction": median(&c.cpu_ms[0]) / median(&c.cpu_ms[2]),
        "ledger_over_bare": c.ratio(),
        "ledger_over_bare_median_of_rounds": CommitCost::pair_ratio(&c.ledger_ms, &c.bare_ms),
        "ledger_over_bare_transaction": c.ledger_median() / c.bare_tx_median(),
        "ledger_over_bare_transaction_median_of_rounds":
            CommitCost::pair_ratio(&c.ledger_ms, &c.bare_tx_ms),
        "ledger_ms": c.ledger_ms,
        "bare_ms": c.bare_ms,
        "bare_transaction_ms": c.bare_tx_ms,
        "cpu_ms": c.cpu_ms,
        "page_cache_dropped_before": c.cache_dropped,
        "disk_read_bytes_per_commit": {
            "ledger": c.disk_read_bytes[0] as f64 / c.ledger_ms.len().max(1) as f64,
            "bare": c.disk_read_bytes[1] as f64 / c.ledger_ms.len().max(1) as f64,
            "bare_transaction": c.disk_read_bytes[2] as f64 / c.ledger_ms.len().max(1) as f64,
        },
    })
}

fn record(
    args: &LedgerReceiptsArgs,
    f: &Figures,
    started: &(String, serde_json::Value),
    dir: &Path,
) -> serde_json::Value {
    let s = &f.small;
    let waited = percentiles(&s.waited_ms);
    serde_json::json!({
        "benchmark": "ledger-receipts",
        "started": started.0,
        "load_at_start": started.1,
        "finished": crate::sys::now_rfc3339(),
        "load_at_end": machine_load(),
        "commit": crate::sys::git_commit(),
        "command": std::env::args().collect::<Vec<_>>(),
        "machine": crate::sys::machine(),
        "mount": crate::sys::proc::mount_of(dir),
        "keys": args.keys,
        "events": args.events,
        "hash": match args.hash {
            AuthHashArg::Sha256 => "sha256",
            AuthHashArg::Blake3 => "blake3",
        },
        "versions": f.verification.version,
        "load_batch": args.load_batch,
        "seed": args.seed,
        "checked": args.check,
        "load": {
            "versions": f.load_versions,
            "ledger_s": f.load_ledger_s,
            "bare_s": f.load_bare_s,
        },
        "small_commits": {
            "not_waited": { "commits": s.commits, "seconds": s.seconds, "cpu_s": s.cpu_s,
                "per_s": s.commits as f64 / s.seconds.max(1e-9),
                "per_cpu_s": s.commits as f64 / s.cpu_s.max(1e-9) },
            "waited": { "commits": s.waited, "seconds": s.waited_seconds,
                "per_s": s.waited as f64 / s.waited_seconds.max(1e-9),
                "latency_ms": { "p50": waited.p50, "p99": waited.p99, "max": waited.max } },
        },
        "receipts": f.receipts.iter().map(ReceiptSizes::json).collect::<Vec<_>>(),
        "receipts_on_the_way": s.on_the_way.iter().map(ReceiptSizes::json).collect::<Vec<_>>(),
        "verification": {
            "receipts": f.verification.receipts,
            "version": f.verification.version,
            "history_path_hashes": f.verification.history_path_hashes,
            "seconds_each": args.seconds,
            "making_s": f.verification.making_s,
            "verified_per_s": f.verification.verified_per_s.0,
            "verified_per_cpu_s": f.verification.verified_per_s.1,
            "decoded_and_verified_per_s": f.verification.decoded_and_verified_per_s.0,
            "decoded_and_verified_per_cpu_s": f.verification.decoded_and_verified_per_s.1,
        },
        "commit_cost": {
            "keys": args.commit_keys,
            "after_load": f.cost_after_load.iter().map(cost_json).collect::<Vec<_>>(),
            "at_end": f.cost_at_end.iter().map(cost_json).collect::<Vec<_>>(),
        },
        "space": {
            "commits": f.space.commits,
            "ledger": f.space.ledger.json(f.space.commits),
            "bare": f.space.bare.json(f.space.commits),
            "format": format_sizes(2, f.verification.version),
        },
    })
}
