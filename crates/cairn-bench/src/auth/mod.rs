//! `cairn-bench auth`: authenticated state side by side (issue 12, requirement P5). Each engine
//! in turn, on the same key and update streams:
//!
//! 1. **Load**: `--keys` keys in commits of `--load-batch` (timed, for information).
//! 2. **Commits**: for each size in `--commit-keys`, `2 * --commits` commits of that many
//!    updates (half change present keys, a quarter insert fresh keys, a quarter delete present
//!    keys; no key twice in one commit), alternately without and with a warm-up of the commit's
//!    keys first. Timed apart: the warm-up, and the commit (the updates applied, made durable and
//!    the new root computed). Per commit: milliseconds, bytes the process read and wrote
//!    (`/proc/self/io`).
//! 3. **Proofs**: `--samples` inclusion proofs of present keys and as many exclusion proofs of
//!    absent ones, one at a time, and one multiproof of `--multiproof-keys` present keys: sizes
//!    in bytes (each engine's own encoding), proofs made and verified per second on one thread.
//!    Every proof is verified, by the engine's own verifier (Cairn's: `cairn-proof`), against the
//!    expected values; one rejected proof fails the run.
//! 4. **UTxO**: `--utxo-batches` of lsm-tree's UTxO batches ([`UTXO_BATCH`] lookups of present
//!    keys, then one commit of as many deletes and inserts, with its root), each timed whole:
//!    the warm-up of the keys it updates (and of those it reads, for NOMT, whose reads use its
//!    warm-up), its lookups (each checked against the model; a wrong value fails the run) and
//!    its commit. `cairn-plain`, the same Cairn table without a root, is the
//!    baseline; not run on the rebuild (`alloy-trie`), whose every root costs O(N).
//!
//! Engines ([`AuthEngineKind`]): Cairn's authenticated table and the same table plain; NOMT
//! (`--features nomt`); JMT over memory and over a Cairn table (`--features jmt`); the Ethereum
//! trie rebuilt by alloy-trie (`--features alloy-trie`). Each adapter's module says which
//! settings it uses and why.
//!
//! Fairness: key paths are 32 random bytes made by the benchmark outside every timed region
//! (the "hashed keys" every engine takes; Cairn hashes them once more into its own key paths,
//! inside its timing), values 60 bytes; each commit's updates are generated and sorted by key
//! path before its timer starts, the same for every engine.
//!
//! Owns: the workload ([`Workload`]), the phases, the record ([`AuthRecord`]) and the printout.
//! Must never touch: an engine's internals (each is behind [`AuthEngine`]). A mismatching key or
//! value is shown in hex by the `hex` crate, not by a formatter of our own.

#[cfg(feature = "alloy-trie")]
mod alloy;
mod cairn;
#[cfg(feature = "jmt")]
mod jmt;
#[cfg(feature = "nomt")]
mod nomt;
pub mod report;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cli::{AuthArgs, AuthEngineKind, AuthHashArg};
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;
use crate::report::format::rss_mib;
use crate::report::table::{Align, Markdown};
use crate::stats::{median, percentiles};
use crate::sys;
use crate::sys::cgroup;

/// Bytes of a key path.
pub const KEY_BYTES: usize = 32;
/// Bytes of a value.
pub const VALUE_BYTES: usize = 60;
/// Lookups, deletes and inserts (each) of a UTxO batch, as in lsm-tree's benchmark.
pub const UTXO_BATCH: usize = 256;

/// A key path: 32 bytes, uniformly distributed.
pub type KeyPath = [u8; KEY_BYTES];
/// A value.
pub type Value = [u8; VALUE_BYTES];

/// One update of a commit: the key path and its new value, or `None` to delete it.
pub type Change = (KeyPath, Option<Value>);

/// A proof as an engine made it: its encoded size, and its check against a root and claims.
pub trait AuthProof {
    /// Bytes of the proof in the engine's own encoding.
    fn encoded_len(&self) -> usize;
    /// Verifies the proof against `root` with the engine's own verifier: each key of `claims`
    /// holds the value given, or is absent (`None`).
    fn verify(&self, root: &[u8; 32], claims: &[(KeyPath, Option<Value>)]) -> Result<(), String>;
}

/// An authenticated-state engine under test.
pub trait AuthEngine {
    /// Its name in records.
    fn name(&self) -> &'static str;
    /// Its settings, in words (what its documentation recommends and what was chosen).
    fn settings(&self) -> String;
    /// Applies `changes` of the load (sorted by key path, fresh keys only). By default a
    /// commit; an engine whose root costs O(N) whatever the commit's size may defer it.
    fn load(&mut self, changes: &[Change]) -> Result<(), Failure> {
        self.commit(changes).map(|_| ())
    }
    /// Brings the keys of the next commit into memory (NOMT: `Session::warm_up`; Cairn:
    /// `Table::prefetch`).
    fn warm_up(&mut self, keys: &[KeyPath]) -> Result<(), Failure>;
    /// Brings keys the next batch will only read into memory, where the engine's reads go
    /// through what a warm-up fetches (NOMT: `Session::warm_up`, whose docs cover reads too). By
    /// default nothing: Cairn's and JMT's lookups read the data, not the trie, so warming their
    /// tries up for keys that are not updated would be wasted work.
    fn warm_up_reads(&mut self, _keys: &[KeyPath]) -> Result<(), Failure> {
        Ok(())
    }
    /// Applies `changes` (sorted by key path, no key twice), makes them durable and returns the
    /// new root.
    fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure>;
    /// A proof of one key, present or absent.
    fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure>;
    /// One proof of several keys (sorted by key path).
    fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure>;
    /// The values of `keys` (any order, repeats allowed) as of the last commit.
    fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure>;
    /// The engine's own account of its state (Cairn: its page log's files, live bytes and
    /// cleaning), for progress lines and the record. By default nothing.
    fn status(&self) -> Option<String> {
        None
    }
    /// The engine's own account of where its commits' time went so far, summed from its start
    /// (Cairn: `AuthStats::time` and its page-log reads), if it keeps one. By default none.
    fn breakdown(&self) -> Option<Breakdown> {
        None
    }
    /// Whether the engine makes proofs (a plain table does not: its proof phase is skipped).
    fn proves(&self) -> bool {
        true
    }
    /// Whether the UTxO phase runs on the engine (not when each root costs a rebuild of the
    /// whole trie).
    fn runs_utxo(&self) -> bool {
        true
    }
    /// A proof of each of `keys`, in their order. By default one [`AuthEngine::prove`] each; an
    /// engine that makes proofs by rebuilding its trie makes them all in one rebuild.
    fn prove_each(&mut self, keys: &[KeyPath]) -> Result<Vec<Box<dyn AuthProof>>, Failure> {
        keys.iter().map(|key| self.prove(key)).collect()
    }
}

/// Key path of key `id`: 32 bytes from a keyed SplitMix64, uniform like a hash.
pub fn key_path(id: u64, seed: u64) -> KeyPath {
    let mut rng = SplitMix64::new(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed);
    let mut key = [0u8; KEY_BYTES];
    for chunk in key.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    key
}

/// Value of key `id` as written by its `version`-th write.
pub fn value(id: u64, version: u32) -> Value {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&id.to_le_bytes());
    v[8..12].copy_from_slice(&version.to_le_bytes());
    v[12..].fill(0xA5);
    v
}

/// The key and update streams and the model of the live keys: ids `0..next_fresh`, a bit per id
/// for whether it is present, and the version of every id written since the load.
pub struct Workload {
    seed: u64,
    rng: SplitMix64,
    present: Vec<u64>,
    live: u64,
    next_fresh: u64,
    versions: HashMap<u64, u32>,
}

impl Workload {
    /// The workload of `keys` loaded keys.
    pub fn new(keys: u64, seed: u64) -> Workload {
        let mut present = vec![u64::MAX; keys.div_ceil(64) as usize];
        if !keys.is_multiple_of(64) {
            *present.last_mut().expect("keys >= 1") = (1u64 << (keys % 64)) - 1;
        }
        Workload {
            seed,
            rng: SplitMix64::new(seed ^ 0xA17E_5EED),
            present,
            live: keys,
            next_fresh: keys,
            versions: HashMap::new(),
        }
    }

    /// The load's changes for ids `from..to`, sorted by key path.
    pub fn load_changes(&self, from: u64, to: u64) -> Vec<Change> {
        let mut changes: Vec<Change> = (from..to)
            .map(|id| (key_path(id, self.seed), Some(value(id, 0))))
            .collect();
        changes.sort_unstable_by_key(|a| a.0);
        changes
    }

    fn is_present(&self, id: u64) -> bool {
        self.present
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    fn set_present(&mut self, id: u64, present: bool) {
        let word = (id / 64) as usize;
        if word >= self.present.len() {
            self.present.resize(word + 1, 0);
        }
        if present {
            self.present[word] |= 1 << (id % 64);
        } else {
            self.present[word] &= !(1 << (id % 64));
        }
    }

    /// A random present id not in `taken` (rejection sampling: at least half the ids are
    /// present, as inserts and deletes are equally many).
    fn pick_present(&mut self, taken: &HashSet<u64>) -> u64 {
        loop {
            let id = self.rng.next_u64() % self.next_fresh;
            if self.is_present(id) && !taken.contains(&id) {
                return id;
            }
        }
    }

    /// The value `id` holds now, or `None` if it is absent.
    pub fn current(&self, id: u64) -> Option<Value> {
        self.is_present(id)
            .then(|| value(id, self.versions.get(&id).copied().unwrap_or(0)))
    }

    /// The next commit of `k` changes (applied to the model), sorted by key path: half change
    /// present keys, a quarter insert fresh keys, a quarter delete present keys.
    pub fn next_commit(&mut self, k: u64) -> Vec<Change> {
        let mut taken = HashSet::with_capacity(k as usize);
        let mut changes = Vec::with_capacity(k as usize);
        for j in 0..k {
            match j % 4 {
                0 | 1 => {
                    let id = self.pick_present(&taken);
                    taken.insert(id);
                    let version = self.versions.entry(id).or_insert(0);
                    *version += 1;
                    changes.push((key_path(id, self.seed), Some(value(id, *version))));
                }
                2 => {
                    let id = self.next_fresh;
                    self.next_fresh += 1;
                    taken.insert(id);
                    self.set_present(id, true);
                    self.live += 1;
                    changes.push((key_path(id, self.seed), Some(value(id, 0))));
                }
                _ => {
                    let id = self.pick_present(&taken);
                    taken.insert(id);
                    self.set_present(id, false);
                    self.versions.remove(&id);
                    self.live -= 1;
                    changes.push((key_path(id, self.seed), None));
                }
            }
        }
        changes.sort_unstable_by_key(|a| a.0);
        changes
    }

    /// The next UTxO batch (lsm-tree's): [`UTXO_BATCH`] lookups of present keys chosen
    /// uniformly (with their values now), then one commit of [`UTXO_BATCH`] deletes of distinct
    /// present keys chosen uniformly and [`UTXO_BATCH`] inserts of fresh keys (applied to the
    /// model), sorted by key path.
    pub fn next_utxo_batch(&mut self) -> (Vec<(KeyPath, Value)>, Vec<Change>) {
        let lookups = (0..UTXO_BATCH).map(|_| self.sample_present()).collect();
        let mut taken = HashSet::with_capacity(UTXO_BATCH);
        let mut changes = Vec::with_capacity(2 * UTXO_BATCH);
        for _ in 0..UTXO_BATCH {
            let id = self.pick_present(&taken);
            taken.insert(id);
            self.set_present(id, false);
            self.versions.remove(&id);
            changes.push((key_path(id, self.seed), None));
        }
        for _ in 0..UTXO_BATCH {
            let id = self.next_fresh;
            self.next_fresh += 1;
            self.set_present(id, true);
            changes.push((key_path(id, self.seed), Some(value(id, 0))));
        }
        changes.sort_unstable_by_key(|a| a.0);
        (lookups, changes)
    }

    /// A random present key and its value.
    pub fn sample_present(&mut self) -> (KeyPath, Value) {
        let id = self.pick_present(&HashSet::new());
        let v = self.current(id).expect("picked a present id");
        (key_path(id, self.seed), v)
    }

    /// A random key that was never written.
    pub fn sample_absent(&mut self) -> KeyPath {
        let id = self.next_fresh + (1 << 40) + self.rng.next_u64() % (1 << 40);
        key_path(id, self.seed)
    }

    /// Keys present now.
    pub fn live(&self) -> u64 {
        self.live
    }
}

/// Where an engine's commits spent their time, by its own account (see
/// [`AuthEngine::breakdown`]): sums from the engine's start, or the mean per commit in a
/// [`CommitFigures`] (milliseconds, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Breakdown {
    /// Looking up the committed keys' values and hashing them.
    pub values_ms: f64,
    /// Reading the pages of the changed paths that no warm-up loaded, and rehashing the paths.
    pub update_ms: f64,
    /// Of `update_ms`: time in page reads and their checks, summed over the threads that read.
    pub page_reads_ms: f64,
    /// Encoding and appending the changed pages.
    pub write_ms: f64,
    /// Cleaning the page log (emptying old segments).
    pub clean_ms: f64,
    /// Warm-ups.
    pub warm_up_ms: f64,
    /// Bytes of trie pages asked of the files (warm-ups, commits, proofs; whole blocks, from
    /// the page cache or the device: `bytes_read` of the commit figures says what reached it).
    pub page_bytes_read: f64,
    /// Bytes cleaning asked of the files.
    pub clean_bytes_read: f64,
    /// Writing the commit's updates to the table (its write buffer, flushes and merge steps)
    /// and its write-ahead log, and syncing the log (0 in records made before it was counted).
    #[serde(default)]
    pub log_ms: f64,
    /// Of `log_ms`, the log's fsync (0 in records made before it was counted).
    #[serde(default)]
    pub log_sync_ms: f64,
}

impl Breakdown {
    /// The figures in words, for reports.
    pub fn describe(&self) -> String {
        format!(
            "warm-up {:.1}; log write and sync {:.1} (in the sync {:.1}); values {:.1}; reads \
             and rehash {:.1} (in page reads {:.1}, summed over threads); page writes {:.1}; \
             cleaning {:.1}; KiB of pages read {:.0}, by cleaning {:.0}",
            self.warm_up_ms,
            self.log_ms,
            self.log_sync_ms,
            self.values_ms,
            self.update_ms,
            self.page_reads_ms,
            self.write_ms,
            self.clean_ms,
            self.page_bytes_read / 1024.0,
            self.clean_bytes_read / 1024.0
        )
    }

    /// `f` of each field of `self` and the same field of `other`.
    fn zip_with(&self, other: &Breakdown, f: impl Fn(f64, f64) -> f64) -> Breakdown {
        Breakdown {
            values_ms: f(self.values_ms, other.values_ms),
            update_ms: f(self.update_ms, other.update_ms),
            page_reads_ms: f(self.page_reads_ms, other.page_reads_ms),
            write_ms: f(self.write_ms, other.write_ms),
            clean_ms: f(self.clean_ms, other.clean_ms),
            warm_up_ms: f(self.warm_up_ms, other.warm_up_ms),
            page_bytes_read: f(self.page_bytes_read, other.page_bytes_read),
            clean_bytes_read: f(self.clean_bytes_read, other.clean_bytes_read),
            log_ms: f(self.log_ms, other.log_ms),
            log_sync_ms: f(self.log_sync_ms, other.log_sync_ms),
        }
    }

    /// `self − earlier`, field by field.
    fn since(&self, earlier: &Breakdown) -> Breakdown {
        self.zip_with(earlier, |a, b| a - b)
    }

    /// Every field times `factor`.
    fn scaled(&self, factor: f64) -> Breakdown {
        self.zip_with(self, |a, _| a * factor)
    }

    /// The mean of `all`, field by field (`None` for none).
    fn mean(all: &[Breakdown]) -> Option<Breakdown> {
        let sum = all
            .iter()
            .fold(Breakdown::default(), |sum, b| sum.zip_with(b, |a, b| a + b));
        (!all.is_empty()).then(|| sum.scaled(1.0 / all.len() as f64))
    }
}

/// The figures of one commit size and warm-up mode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CommitFigures {
    /// Updates per commit.
    pub keys: u64,
    /// Whether the commit's keys were warmed up first.
    pub warm_up: bool,
    /// Commits measured.
    pub commits: u64,
    /// Commit time (updates applied, durable, root computed): median, 99th percentile, max, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub max_ms: f64,
    /// Median commit time per updated key, µs.
    pub us_per_key: f64,
    /// Median warm-up time per key, µs (0 without warm-up).
    pub warm_up_us_per_key: f64,
    /// Median of warm-up plus commit per key, µs.
    pub total_us_per_key: f64,
    /// Mean bytes written per commit (warm-up included), from `/proc/self/io`.
    pub bytes_written: f64,
    /// Mean bytes read per commit (warm-up included).
    pub bytes_read: f64,
    /// Where the time went, by the engine's own account: means per commit (warm-up included).
    /// Only engines that keep one (Cairn); absent in records made before 2026-11-27.
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
}

/// The proof figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProofFigures {
    /// Proofs of each kind sampled.
    pub samples: u64,
    /// Inclusion proofs: mean and max bytes.
    pub inclusion_mean_bytes: f64,
    /// See `inclusion_mean_bytes`.
    pub inclusion_max_bytes: f64,
    /// Exclusion proofs: mean and max bytes.
    pub exclusion_mean_bytes: f64,
    /// See `exclusion_mean_bytes`.
    pub exclusion_max_bytes: f64,
    /// Single-key proofs made per second, one thread (inclusion and exclusion together).
    pub proofs_per_sec: f64,
    /// Single-key proofs verified per second, one thread.
    pub verified_per_sec: f64,
    /// Keys of the multiproof.
    pub multiproof_keys: u64,
    /// Its size in bytes.
    pub multiproof_bytes: f64,
    /// Milliseconds to make it.
    pub multiproof_ms: f64,
    /// Milliseconds to verify it.
    pub multiproof_verify_ms: f64,
}

/// The UTxO phase: lsm-tree's batches with a root after each.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct UtxoFigures {
    /// Batches measured.
    pub batches: u64,
    /// Lookups, deletes and inserts per second (3 × 256 per batch).
    pub ops_per_sec: f64,
    /// Batch time (warm-up, lookups, commit with its root): percentiles, ms.
    pub p50_ms: f64,
    /// See `p50_ms`.
    pub p99_ms: f64,
    /// See `p50_ms`.
    pub p999_ms: f64,
    /// See `p50_ms`.
    pub max_ms: f64,
    /// Mean bytes written and read per batch, from `/proc/self/io`.
    pub bytes_written: f64,
    /// See `bytes_written`.
    pub bytes_read: f64,
    /// Where the batches' commits and warm-ups spent their time, by the engine's own account:
    /// means per batch (see [`CommitFigures::breakdown`]).
    #[serde(default)]
    pub breakdown: Option<Breakdown>,
}

/// One engine's record.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AuthRecord {
    /// Always `"auth"`.
    pub benchmark: String,
    /// The engine.
    pub engine: String,
    /// Its settings.
    pub settings: String,
    /// The hash function.
    pub hash: String,
    /// When the record was made (`YYYY-MM-DDTHH:MM:SSZ`).
    #[serde(default)]
    pub date: String,
    /// `git describe` of the checkout the benchmark ran from, if known.
    #[serde(default)]
    pub commit: Option<String>,
    /// Keys loaded.
    pub keys: u64,
    /// Keys present at the end.
    pub live_keys_at_end: u64,
    /// Load: seconds, and µs per key.
    pub load_seconds: f64,
    /// See `load_seconds`.
    pub load_us_per_key: f64,
    /// One entry per commit size and warm-up mode.
    pub commits: Vec<CommitFigures>,
    /// Proof sizes and rates (`None`: the engine makes no proofs).
    pub proofs: Option<ProofFigures>,
    /// The UTxO phase (`None`: not run).
    #[serde(default)]
    pub utxo: Option<UtxoFigures>,
    /// Peak RSS of the process at the end of this engine's run (earlier engines of the same
    /// process included), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Bytes the engine's directory holds at the end.
    pub disk_bytes: u64,
    /// The engine's own account of its state at the end ([`AuthEngine::status`]).
    #[serde(default)]
    pub engine_status: Option<String>,
    /// The memory limit of the engine's own cgroup (`--memory-limit`), if it had one.
    pub memory_limit_bytes: Option<u64>,
    /// That cgroup's peak usage, resident set plus page cache.
    pub cgroup_peak_bytes: Option<u64>,
    /// How the engine's run failed (killed at the memory limit, a rejected proof), if it did:
    /// the record then holds no figures.
    #[serde(default)]
    pub failure: Option<String>,
}

impl AuthRecord {
    /// Whether the engine made proofs (a plain table's commits have no root to compare).
    fn proves(&self) -> bool {
        self.proofs.is_some()
    }

    /// The record of an engine whose child process failed.
    fn failed(engine: AuthEngineKind, args: &AuthArgs, limit: u64, failure: String) -> Self {
        AuthRecord {
            benchmark: "auth".to_string(),
            engine: engine.name().to_string(),
            hash: hash_name(args.hash).to_string(),
            date: sys::now_rfc3339(),
            commit: sys::git_commit(),
            keys: args.keys,
            memory_limit_bytes: Some(limit),
            failure: Some(failure),
            ..AuthRecord::default()
        }
    }
}

/// `auth`.
pub fn run(args: &AuthArgs) -> Result<(), Failure> {
    let engines = if let Some(engine) = args.child_engine {
        vec![engine]
    } else if args.engines.is_empty() {
        AuthEngineKind::ALL
            .into_iter()
            .filter(|e| e.available())
            .collect()
    } else {
        args.engines.clone()
    };
    // A commit of k changes updates or deletes 3k/4 distinct present keys.
    let largest = args.commit_keys.iter().copied().max().unwrap_or(0);
    if largest.saturating_mul(3) / 4 > args.keys {
        return Err(Failure(format!(
            "--keys {} is too few for commits of {largest} keys: a commit changes or deletes \
             three quarters of its keys among those present (at least {} needed)",
            args.keys,
            largest.saturating_mul(3) / 4
        )));
    }
    for engine in &engines {
        if !engine.available() {
            return Err(Failure(format!(
                "engine {} is not built in: build cairn-bench with --features {}",
                engine.name(),
                engine.feature()
            )));
        }
    }
    let (records, failed) = match args.memory_limit {
        Some(limit) if !cgroup::in_child() => run_children(&engines, limit, args)?,
        _ => (run_here(&engines, args)?, Vec::new()),
    };
    if let Some(path) = &args.child_json {
        return write_json(&records, path);
    }
    if records.len() > 1 {
        print_ratios(&records);
    }
    if let Some(path) = &args.json {
        write_json(&records, path)?;
    }
    if let Some(dir) = &args.report_dir {
        std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
        write_json(&records, &dir.join(format!("auth-{}.json", args.keys)))?;
        let path = report::write(dir)?;
        eprintln!("report: {}", path.display());
    }
    if !failed.is_empty() {
        return Err(Failure(format!(
            "{} (the other engines' records were kept)",
            failed.join("; ")
        )));
    }
    Ok(())
}

/// Runs each engine in this process, one after the other, in a temporary directory.
fn run_here(engines: &[AuthEngineKind], args: &AuthArgs) -> Result<Vec<AuthRecord>, Failure> {
    let bench = |dir: &Path| {
        let mut records = Vec::new();
        for &engine in engines {
            let engine_dir = dir.join(engine.name());
            std::fs::create_dir_all(&engine_dir)
                .context(|| format!("creating {}", engine_dir.display()))?;
            let mut opened = open(engine, &engine_dir, args)?;
            let record = bench_engine(&mut *opened, &engine_dir, args)?;
            drop(opened);
            print_record(&record);
            records.push(record);
        }
        Ok(records)
    };
    match &args.child_dir {
        Some(dir) => bench(dir),
        None => crate::in_temp_dir(args.dir.as_deref(), args.keep, bench),
    }
}

/// Runs each engine as a child process (this command again, with `--child-engine`) in a memory
/// cgroup of its own limited to `limit`, the page cache dropped before each; collects their
/// records with the cgroups' peaks, and how each engine that failed (a rejected proof, or killed
/// at the memory limit) failed, so that one engine's failure does not lose the others' records.
fn run_children(
    engines: &[AuthEngineKind],
    limit: u64,
    args: &AuthArgs,
) -> Result<(Vec<AuthRecord>, Vec<String>), Failure> {
    crate::in_temp_dir(args.dir.as_deref(), args.keep, |parts| {
        children_in(parts, engines, limit, args)
    })
}

/// [`run_children`] in `parts`: each child works in `parts/<engine>` (removed once the child
/// ends, unless `--keep`, so that two engines' tables never hold the disk at once) and writes
/// its record to `parts/<engine>.json`. An engine that fails gets a record saying how.
fn children_in(
    parts: &Path,
    engines: &[AuthEngineKind],
    limit: u64,
    args: &AuthArgs,
) -> Result<(Vec<AuthRecord>, Vec<String>), Failure> {
    let keep = args.keep;
    let mut records = Vec::new();
    let mut failed = Vec::new();
    for &engine in engines {
        let part = parts.join(format!("{}.json", engine.name()));
        let work = parts.join(engine.name());
        std::fs::create_dir_all(&work).context(|| format!("creating {}", work.display()))?;
        let child = cgroup::rerun_as_child("--child-engine", engine.name(), &part, &work, limit);
        if !keep {
            std::fs::remove_dir_all(&work).context(|| format!("removing {}", work.display()))?;
        }
        let memory = match child {
            Ok(memory) => memory,
            Err(e) => {
                eprintln!("{}: {e}", engine.name());
                failed.push(format!("{}: {e}", engine.name()));
                // The record keeps what happened, not the child's long command line.
                let how =
                    e.0.split_once(" failed ")
                        .map_or(e.0.as_str(), |(_, how)| how);
                let how = format!("the child process failed {how}");
                records.push(AuthRecord::failed(engine, args, limit, how));
                continue;
            }
        };
        let text =
            std::fs::read_to_string(&part).context(|| format!("reading {}", part.display()))?;
        let mut part_records: Vec<AuthRecord> =
            serde_json::from_str(&text).map_err(|e| Failure(format!("{}: {e}", part.display())))?;
        for record in &mut part_records {
            eprintln!(
                "{}: cgroup peak (resident + page cache) {} MiB",
                record.engine,
                rss_mib(memory.peak_bytes)
            );
            record.memory_limit_bytes = memory.limit_bytes;
            record.cgroup_peak_bytes = memory.peak_bytes;
            if let Some(reason) = &memory.unlimited_reason {
                eprintln!("{}: ran without a memory limit: {reason}", record.engine);
            }
        }
        records.extend(part_records);
    }
    Ok((records, failed))
}

fn write_json(records: &[AuthRecord], path: &Path) -> Result<(), Failure> {
    let json = serde_json::to_string_pretty(records)
        .map_err(|e| Failure(format!("encoding the records: {e}")))?;
    std::fs::write(path, json).context(|| format!("writing {}", path.display()))
}

fn open(
    engine: AuthEngineKind,
    dir: &Path,
    args: &AuthArgs,
) -> Result<Box<dyn AuthEngine>, Failure> {
    Ok(match engine {
        AuthEngineKind::Cairn => Box::new(cairn::CairnAuth::open(dir, Some(args.hash), args)?),
        AuthEngineKind::CairnPlain => Box::new(cairn::CairnAuth::open(dir, None, args)?),
        #[cfg(feature = "nomt")]
        AuthEngineKind::Nomt => nomt::open(dir, args)?,
        #[cfg(feature = "jmt")]
        AuthEngineKind::JmtMemory => jmt::open_memory(args.hash)?,
        #[cfg(feature = "jmt")]
        AuthEngineKind::JmtCairn => jmt::open_cairn(dir, args.hash)?,
        #[cfg(feature = "alloy-trie")]
        AuthEngineKind::AlloyTrie => Box::new(alloy::AlloyRebuild::open(dir)?),
        #[allow(unreachable_patterns)]
        other => unreachable!("checked by run: {} is not built in", other.name()),
    })
}

/// The name of `hash` in records.
pub fn hash_name(hash: AuthHashArg) -> &'static str {
    match hash {
        AuthHashArg::Sha256 => "sha256",
        AuthHashArg::Blake3 => "blake3",
    }
}

fn bench_engine(
    engine: &mut dyn AuthEngine,
    dir: &Path,
    args: &AuthArgs,
) -> Result<AuthRecord, Failure> {
    let name = engine.name();
    let mut workload = Workload::new(args.keys, args.seed);

    // 1. Load.
    let timer = Instant::now();
    let mut loaded = 0;
    let mut last_report = Instant::now();
    while loaded < args.keys {
        let end = (loaded + args.load_batch).min(args.keys);
        let changes = workload.load_changes(loaded, end);
        engine.load(&changes)?;
        loaded = end;
        if last_report.elapsed().as_secs_f64() >= 5.0 || loaded == args.keys {
            last_report = Instant::now();
            eprintln!(
                "{name} load: {:3.0}% ({loaded}/{} keys, {:.1} s){}",
                loaded as f64 * 100.0 / args.keys as f64,
                args.keys,
                timer.elapsed().as_secs_f64(),
                engine
                    .status()
                    .map(|s| format!("; {s}"))
                    .unwrap_or_default()
            );
        }
    }
    let load_seconds = timer.elapsed().as_secs_f64();

    // 2. Commits.
    let mut commits = Vec::new();
    for &k in &args.commit_keys {
        let mut plain = Samples::default();
        let mut warm = Samples::default();
        for round in 0..2 * args.commits {
            let with_warm_up = round % 2 == 1;
            let changes = workload.next_commit(k);
            let keys: Vec<KeyPath> = changes.iter().map(|(key, _)| *key).collect();
            let io_before = sys::proc::IoCounters::now();
            let breakdown_before = engine.breakdown();
            let mut warm_up_s = 0.0;
            if with_warm_up {
                let timer = Instant::now();
                engine.warm_up(&keys)?;
                warm_up_s = timer.elapsed().as_secs_f64();
            }
            let timer = Instant::now();
            engine.commit(&changes)?;
            let commit_s = timer.elapsed().as_secs_f64();
            let io = sys::proc::IoCounters::since(sys::proc::IoCounters::now(), io_before);
            let breakdown = engine
                .breakdown()
                .zip(breakdown_before)
                .map(|(after, before)| after.since(&before));
            let samples = if with_warm_up { &mut warm } else { &mut plain };
            samples.push(commit_s, warm_up_s, io, breakdown);
            eprintln!(
                "{name} commit of {k}{}: {:.2} ms ({:.2} µs/key{})",
                if with_warm_up { " after a warm-up" } else { "" },
                commit_s * 1e3,
                commit_s * 1e6 / k as f64,
                if with_warm_up {
                    format!(", warm-up {:.2} µs/key", warm_up_s * 1e6 / k as f64)
                } else {
                    String::new()
                }
            );
        }
        commits.push(plain.figures(k, false));
        commits.push(warm.figures(k, true));
    }

    // 3. Proofs, against the root after the commits.
    let proofs = if engine.proves() {
        let root = engine.commit(&[])?;
        Some(bench_proofs(engine, &mut workload, &root, args)?)
    } else {
        None
    };

    // 4. UTxO batches.
    let utxo = if args.utxo_batches > 0 && engine.runs_utxo() {
        Some(bench_utxo(engine, &mut workload, args.utxo_batches)?)
    } else {
        None
    };

    Ok(AuthRecord {
        benchmark: "auth".to_string(),
        engine: name.to_string(),
        settings: engine.settings(),
        hash: hash_name(args.hash).to_string(),
        date: sys::now_rfc3339(),
        commit: sys::git_commit(),
        keys: args.keys,
        live_keys_at_end: workload.live(),
        load_seconds,
        load_us_per_key: load_seconds * 1e6 / args.keys as f64,
        commits,
        proofs,
        utxo,
        peak_rss_bytes: sys::proc::peak_rss_bytes(),
        disk_bytes: dir_bytes(dir),
        engine_status: engine.status(),
        memory_limit_bytes: None,
        cgroup_peak_bytes: None,
        failure: None,
    })
}

fn bench_proofs(
    engine: &mut dyn AuthEngine,
    workload: &mut Workload,
    root: &[u8; 32],
    args: &AuthArgs,
) -> Result<ProofFigures, Failure> {
    let name = engine.name();
    let mut claims: Vec<(KeyPath, Option<Value>)> = Vec::with_capacity(2 * args.samples as usize);
    for _ in 0..args.samples {
        let (key, v) = workload.sample_present();
        claims.push((key, Some(v)));
        claims.push((workload.sample_absent(), None));
    }
    let keys: Vec<KeyPath> = claims.iter().map(|(key, _)| *key).collect();
    let timer = Instant::now();
    let made = engine.prove_each(&keys)?;
    let prove_s = timer.elapsed().as_secs_f64();
    let timer = Instant::now();
    for (proof, claim) in made.iter().zip(&claims) {
        proof
            .verify(root, std::slice::from_ref(claim))
            .map_err(|e| {
                Failure(format!(
                    "{name}: a proof of {} was rejected: {e}",
                    if claim.1.is_some() {
                        "a present key"
                    } else {
                        "an absent key"
                    }
                ))
            })?;
    }
    let verify_s = timer.elapsed().as_secs_f64();
    let sizes = |present: bool| -> Vec<f64> {
        made.iter()
            .zip(&claims)
            .filter(|(_, c)| c.1.is_some() == present)
            .map(|(p, _)| p.encoded_len() as f64)
            .collect()
    };
    let (inclusion, exclusion) = (sizes(true), sizes(false));

    let mut multi: Vec<(KeyPath, Option<Value>)> = Vec::new();
    let mut seen = HashSet::new();
    while (multi.len() as u64) < args.multiproof_keys.min(workload.live()) {
        let (key, v) = workload.sample_present();
        if seen.insert(key) {
            multi.push((key, Some(v)));
        }
    }
    multi.sort_unstable_by_key(|a| a.0);
    let keys: Vec<KeyPath> = multi.iter().map(|(k, _)| *k).collect();
    let timer = Instant::now();
    let proof = engine.prove_many(&keys)?;
    let multiproof_ms = timer.elapsed().as_secs_f64() * 1e3;
    let timer = Instant::now();
    proof
        .verify(root, &multi)
        .map_err(|e| Failure(format!("{name}: the multiproof was rejected: {e}")))?;
    let multiproof_verify_ms = timer.elapsed().as_secs_f64() * 1e3;

    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    Ok(ProofFigures {
        samples: args.samples,
        inclusion_mean_bytes: mean(&inclusion),
        inclusion_max_bytes: max(&inclusion),
        exclusion_mean_bytes: mean(&exclusion),
        exclusion_max_bytes: max(&exclusion),
        proofs_per_sec: claims.len() as f64 / prove_s.max(1e-9),
        verified_per_sec: claims.len() as f64 / verify_s.max(1e-9),
        multiproof_keys: multi.len() as u64,
        multiproof_bytes: proof.encoded_len() as f64,
        multiproof_ms,
        multiproof_verify_ms,
    })
}

/// Runs `batches` UTxO batches: each the warm-up of its keys (those it reads, where the engine's
/// reads benefit, and those it updates), its lookups (each checked against the model; a wrong
/// value fails the run), then its commit with the new root, all timed.
fn bench_utxo(
    engine: &mut dyn AuthEngine,
    workload: &mut Workload,
    batches: u64,
) -> Result<UtxoFigures, Failure> {
    let name = engine.name();
    let mut batch_ms = Vec::with_capacity(batches as usize);
    let (mut written, mut read) = (0u64, 0u64);
    let io_before = sys::proc::IoCounters::now();
    let breakdown_before = engine.breakdown();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut seconds = 0.0;
    for batch in 0..batches {
        let (lookups, changes) = workload.next_utxo_batch();
        let keys: Vec<KeyPath> = lookups.iter().map(|(k, _)| *k).collect();
        let mut reads = keys.clone();
        reads.sort_unstable();
        reads.dedup();
        let updated: Vec<KeyPath> = changes.iter().map(|c| c.0).collect();
        let timer = Instant::now();
        engine.warm_up_reads(&reads)?;
        engine.warm_up(&updated)?;
        let found = engine.lookups(&keys)?;
        engine.commit(&changes)?;
        let elapsed = timer.elapsed().as_secs_f64();
        seconds += elapsed;
        batch_ms.push(elapsed * 1e3);
        if found.len() != lookups.len() {
            return Err(Failure(format!(
                "{name}: {} lookups gave {} results",
                lookups.len(),
                found.len()
            )));
        }
        for ((key, expected), got) in lookups.iter().zip(&found) {
            if got.as_deref() != Some(&expected[..]) {
                return Err(Failure(format!(
                    "{name}: UTxO batch {batch}: key {} holds {:?}, expected {:?}",
                    hex::encode(key),
                    got.as_deref().map(hex::encode),
                    hex::encode(expected)
                )));
            }
        }
        if last_report.elapsed().as_secs_f64() >= 5.0 {
            last_report = Instant::now();
            eprintln!(
                "{name} UTxO: batch {}/{batches}, {:.0} ops/s so far ({:.1} s)",
                batch + 1,
                (3 * UTXO_BATCH) as f64 * (batch + 1) as f64 / seconds.max(1e-9),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if let Some(io) = sys::proc::IoCounters::since(sys::proc::IoCounters::now(), io_before) {
        written = io.write_bytes;
        read = io.read_bytes;
    }
    let breakdown = engine
        .breakdown()
        .zip(breakdown_before)
        .map(|(after, before)| after.since(&before))
        .map(|total| total.scaled(1.0 / batches.max(1) as f64));
    let p = percentiles(&batch_ms);
    Ok(UtxoFigures {
        batches,
        ops_per_sec: (3 * UTXO_BATCH) as f64 * batches as f64 / seconds.max(1e-9),
        p50_ms: p.p50,
        p99_ms: p.p99,
        p999_ms: p.p999,
        max_ms: p.max,
        bytes_written: written as f64 / batches as f64,
        bytes_read: read as f64 / batches as f64,
        breakdown,
    })
}

/// The samples of one commit size and warm-up mode.
#[derive(Default)]
struct Samples {
    commit_s: Vec<f64>,
    warm_up_s: Vec<f64>,
    written: Vec<f64>,
    read: Vec<f64>,
    breakdowns: Vec<Breakdown>,
}

impl Samples {
    fn push(
        &mut self,
        commit_s: f64,
        warm_up_s: f64,
        io: Option<sys::proc::IoCounters>,
        breakdown: Option<Breakdown>,
    ) {
        self.breakdowns.extend(breakdown);
        self.commit_s.push(commit_s);
        self.warm_up_s.push(warm_up_s);
        if let Some(io) = io {
            self.written.push(io.write_bytes as f64);
            self.read.push(io.read_bytes as f64);
        }
    }

    fn figures(&self, keys: u64, warm_up: bool) -> CommitFigures {
        let per_key = |s: &[f64]| -> Vec<f64> { s.iter().map(|t| t * 1e6 / keys as f64).collect() };
        let total: Vec<f64> = self
            .commit_s
            .iter()
            .zip(&self.warm_up_s)
            .map(|(c, w)| (c + w) * 1e6 / keys as f64)
            .collect();
        let ms: Vec<f64> = self.commit_s.iter().map(|s| s * 1e3).collect();
        let p = percentiles(&ms);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        CommitFigures {
            keys,
            warm_up,
            commits: self.commit_s.len() as u64,
            p50_ms: p.p50,
            p99_ms: p.p99,
            max_ms: p.max,
            us_per_key: median(&per_key(&self.commit_s)),
            warm_up_us_per_key: median(&per_key(&self.warm_up_s)),
            total_us_per_key: median(&total),
            bytes_written: mean(&self.written),
            bytes_read: mean(&self.read),
            breakdown: Breakdown::mean(&self.breakdowns),
        }
    }
}

/// Bytes of the files under `dir` (allocated blocks: a sparse or preallocated file counts what
/// it holds on disk).
fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn print_record(r: &AuthRecord) {
    println!(
        "\n{} ({}, {} keys): {}",
        r.engine, r.hash, r.keys, r.settings
    );
    println!(
        "load: {:.1} s ({:.2} µs/key); on disk at the end {} MiB; peak RSS {} MiB",
        r.load_seconds,
        r.load_us_per_key,
        rss_mib(Some(r.disk_bytes)),
        rss_mib(r.peak_rss_bytes)
    );
    let r_ = Align::Right;
    let mut table = Markdown::new(&[
        ("keys", r_),
        ("warm-up", Align::Left),
        ("p50 ms", r_),
        ("p99 ms", r_),
        ("max ms", r_),
        ("µs/key", r_),
        ("warm-up µs/key", r_),
        ("total µs/key", r_),
        ("KiB written", r_),
        ("KiB read", r_),
    ]);
    for c in &r.commits {
        let f2 = |v: f64| format!("{v:.2}");
        table.row([
            c.keys.to_string(),
            if c.warm_up { "yes" } else { "no" }.to_string(),
            f2(c.p50_ms),
            f2(c.p99_ms),
            f2(c.max_ms),
            f2(c.us_per_key),
            f2(c.warm_up_us_per_key),
            f2(c.total_us_per_key),
            format!("{:.0}", c.bytes_written / 1024.0),
            format!("{:.0}", c.bytes_read / 1024.0),
        ]);
    }
    print!("{}", table.render());
    for c in &r.commits {
        if let Some(b) = &c.breakdown {
            println!(
                "commit of {}{}, by the engine's account, ms per commit: {}",
                c.keys,
                if c.warm_up { " after a warm-up" } else { "" },
                b.describe()
            );
        }
    }
    if let Some(p) = &r.proofs {
        println!(
            "proofs: inclusion mean {:.0} B (max {:.0}), exclusion mean {:.0} B (max {:.0}); {:.0} made/s, {:.0} verified/s; multiproof of {} keys {:.0} B ({:.0} B/key), made in {:.2} ms, verified in {:.2} ms",
            p.inclusion_mean_bytes,
            p.inclusion_max_bytes,
            p.exclusion_mean_bytes,
            p.exclusion_max_bytes,
            p.proofs_per_sec,
            p.verified_per_sec,
            p.multiproof_keys,
            p.multiproof_bytes,
            p.multiproof_bytes / p.multiproof_keys.max(1) as f64,
            p.multiproof_ms,
            p.multiproof_verify_ms
        );
    }
    if let Some(u) = &r.utxo {
        println!(
            "UTxO, a root after each batch: {:.0} ops/s over {} batches; batch p50 {:.2} ms, p99 {:.2}, p99.9 {:.2} (p99.9/p50 {:.2}), max {:.2}; {:.0} KiB written, {:.0} KiB read per batch",
            u.ops_per_sec,
            u.batches,
            u.p50_ms,
            u.p99_ms,
            u.p999_ms,
            u.p999_ms / u.p50_ms.max(1e-9),
            u.max_ms,
            u.bytes_written / 1024.0,
            u.bytes_read / 1024.0
        );
        if let Some(b) = &u.breakdown {
            println!(
                "UTxO, by the engine's account, ms per batch: {}",
                b.describe()
            );
        }
    }
}

/// Cairn over each other engine, per commit size and mode (time per key: the peer's over
/// Cairn's, so above 1 means Cairn is faster).
fn print_ratios(records: &[AuthRecord]) {
    let Some(cairn) = records
        .iter()
        .find(|r| r.engine == "cairn" && r.failure.is_none())
    else {
        return;
    };
    for peer in records
        .iter()
        .filter(|r| r.engine != "cairn" && r.failure.is_none())
    {
        println!("\nCairn against {}:", peer.engine);
        let commits = if peer.proves() {
            &peer.commits[..]
        } else {
            &[]
        };
        for (c, p) in cairn.commits.iter().zip(commits) {
            println!(
                "  commit of {}{}: {:.2} vs {:.2} µs/key ({:.2}x); with the warm-up {:.2} vs {:.2} ({:.2}x)",
                c.keys,
                if c.warm_up { " after a warm-up" } else { "" },
                c.us_per_key,
                p.us_per_key,
                p.us_per_key / c.us_per_key.max(1e-9),
                c.total_us_per_key,
                p.total_us_per_key,
                p.total_us_per_key / c.total_us_per_key.max(1e-9)
            );
        }
        if let (Some(c), Some(p)) = (&cairn.proofs, &peer.proofs) {
            println!(
                "  proofs made/s {:.2}x, verified/s {:.2}x, inclusion bytes {:.2}x",
                c.proofs_per_sec / p.proofs_per_sec.max(1e-9),
                c.verified_per_sec / p.verified_per_sec.max(1e-9),
                c.inclusion_mean_bytes / p.inclusion_mean_bytes.max(1e-9)
            );
        }
        if let (Some(c), Some(p)) = (&cairn.utxo, &peer.utxo) {
            println!(
                "  UTxO ops/s {:.0} vs {:.0} ({:.2}x)",
                c.ops_per_sec,
                p.ops_per_sec,
                c.ops_per_sec / p.ops_per_sec.max(1e-9)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streams are the same for every engine: a function of the seed alone; no key twice
    /// in a commit; the model follows inserts, changes and deletes.
    #[test]
    fn commits_are_deterministic_distinct_and_modelled() {
        let mut a = Workload::new(1000, 7);
        let mut b = Workload::new(1000, 7);
        for _ in 0..20 {
            let ca = a.next_commit(100);
            assert_eq!(ca, b.next_commit(100));
            let keys: HashSet<KeyPath> = ca.iter().map(|c| c.0).collect();
            assert_eq!(keys.len(), ca.len());
            assert!(ca.windows(2).all(|w| w[0].0 < w[1].0));
        }
        // 20 commits of 100: 500 inserts and 500 deletes.
        assert_eq!(a.live(), 1000);
        let mut present = 0;
        for id in 0..a.next_fresh {
            if let Some(v) = a.current(id) {
                present += 1;
                assert_eq!(v[..8], id.to_le_bytes());
            }
        }
        assert_eq!(present, 1000);
    }

    fn small_args(engine: AuthEngineKind) -> AuthArgs {
        AuthArgs {
            dir: None,
            keep: false,
            json: None,
            report_dir: None,
            seed: 3,
            engines: vec![engine],
            hash: AuthHashArg::Sha256,
            keys: 3_000,
            load_batch: 1_000,
            commit_keys: vec![40],
            commits: 2,
            samples: 20,
            multiproof_keys: 16,
            utxo_batches: 3,
            nomt_buckets: 4_096,
            nomt_page_cache_mib: 16,
            nomt_leaf_cache_mib: 16,
            cairn_retained_mib: 20,
            cairn_top_page_depth: 6,
            cairn_inline_warm_up: false,
            cairn_direct_page_reads: false,
            memory_limit: None,
            child_engine: None,
            child_json: None,
            child_dir: None,
        }
    }

    /// Runs every phase of `engine` on a small table: the load, commits with and without a
    /// warm-up, and proofs of present and absent keys, each verified against the model (a
    /// rejected proof fails the run).
    fn every_phase(engine: AuthEngineKind) {
        let dir = tempfile::tempdir().unwrap();
        let args = small_args(engine);
        let mut opened = open(engine, dir.path(), &args).unwrap();
        let record = bench_engine(&mut *opened, dir.path(), &args).unwrap();
        assert_eq!(record.engine, engine.name());
        assert_eq!(record.commits.len(), 2);
        assert_eq!(record.commits[1].commits, 2);
        assert_eq!(record.live_keys_at_end, 3_000);
        if let Some(proofs) = &record.proofs {
            assert!(proofs.inclusion_mean_bytes > 0.0);
            assert!(proofs.exclusion_mean_bytes > 0.0);
            assert_eq!(proofs.multiproof_keys, 16);
        } else {
            assert_eq!(engine, AuthEngineKind::CairnPlain);
        }
        if let Some(utxo) = &record.utxo {
            assert_eq!(utxo.batches, 3);
            assert!(utxo.ops_per_sec > 0.0);
        } else {
            assert_eq!(engine, AuthEngineKind::AlloyTrie);
        }
    }

    #[test]
    fn cairn_runs_every_phase_on_a_small_table() {
        every_phase(AuthEngineKind::Cairn);
        every_phase(AuthEngineKind::CairnPlain);
    }

    #[cfg(feature = "nomt")]
    #[test]
    fn nomt_runs_every_phase_on_a_small_table() {
        every_phase(AuthEngineKind::Nomt);
    }

    /// A proof checked against claims it does not prove is rejected, by each engine's verifier.
    fn wrong_claims_are_rejected(engine: AuthEngineKind) {
        let dir = tempfile::tempdir().unwrap();
        let args = small_args(engine);
        let mut opened = open(engine, dir.path(), &args).unwrap();
        let workload = Workload::new(100, 1);
        let root = opened.commit(&workload.load_changes(0, 100)).unwrap();
        let present = key_path(5, 1);
        let proof = opened.prove(&present).unwrap();
        proof
            .verify(&root, &[(present, Some(value(5, 0)))])
            .unwrap();
        assert!(proof
            .verify(&root, &[(present, Some(value(5, 1)))])
            .is_err());
        assert!(proof.verify(&root, &[(present, None)]).is_err());
        let mut other_root = root;
        other_root[0] ^= 1;
        assert!(proof
            .verify(&other_root, &[(present, Some(value(5, 0)))])
            .is_err());
    }

    #[test]
    fn cairn_rejects_wrong_claims() {
        wrong_claims_are_rejected(AuthEngineKind::Cairn);
    }

    #[cfg(feature = "nomt")]
    #[test]
    fn nomt_rejects_wrong_claims() {
        wrong_claims_are_rejected(AuthEngineKind::Nomt);
    }

    /// An engine whose lookups return a wrong value: the UTxO phase must fail on it.
    struct Lying(Box<dyn AuthEngine>);

    impl AuthEngine for Lying {
        fn name(&self) -> &'static str {
            "lying"
        }
        fn settings(&self) -> String {
            String::new()
        }
        fn warm_up(&mut self, keys: &[KeyPath]) -> Result<(), Failure> {
            self.0.warm_up(keys)
        }
        fn commit(&mut self, changes: &[Change]) -> Result<[u8; 32], Failure> {
            self.0.commit(changes)
        }
        fn lookups(&mut self, keys: &[KeyPath]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
            let mut found = self.0.lookups(keys)?;
            if let Some(Some(v)) = found.last_mut() {
                v[20] ^= 1;
            }
            Ok(found)
        }
        fn prove(&mut self, key: &KeyPath) -> Result<Box<dyn AuthProof>, Failure> {
            self.0.prove(key)
        }
        fn prove_many(&mut self, keys: &[KeyPath]) -> Result<Box<dyn AuthProof>, Failure> {
            self.0.prove_many(keys)
        }
    }

    #[test]
    fn a_wrong_lookup_fails_the_utxo_phase() {
        let dir = tempfile::tempdir().unwrap();
        let args = small_args(AuthEngineKind::Cairn);
        let mut engine = Lying(open(AuthEngineKind::Cairn, dir.path(), &args).unwrap());
        let mut workload = Workload::new(1000, 1);
        engine.commit(&workload.load_changes(0, 1000)).unwrap();
        let e = bench_utxo(&mut engine, &mut workload, 2).err().unwrap();
        assert!(e.0.contains("expected"), "{}", e.0);
    }

    /// JMT's two stores hold the same tree: the same roots after every commit.
    #[cfg(feature = "jmt")]
    #[test]
    fn jmt_stores_agree_on_every_root() {
        let dir = tempfile::tempdir().unwrap();
        let args = small_args(AuthEngineKind::JmtCairn);
        let mut memory = open(AuthEngineKind::JmtMemory, dir.path(), &args).unwrap();
        let mut cairn = open(AuthEngineKind::JmtCairn, dir.path(), &args).unwrap();
        let mut workload = Workload::new(2000, 5);
        let load = workload.load_changes(0, 2000);
        assert_eq!(memory.commit(&load).unwrap(), cairn.commit(&load).unwrap());
        for _ in 0..10 {
            let changes = workload.next_commit(100);
            assert_eq!(
                memory.commit(&changes).unwrap(),
                cairn.commit(&changes).unwrap()
            );
        }
    }

    #[cfg(feature = "jmt")]
    #[test]
    fn jmt_runs_every_phase_and_rejects_wrong_claims() {
        for engine in [AuthEngineKind::JmtMemory, AuthEngineKind::JmtCairn] {
            every_phase(engine);
            wrong_claims_are_rejected(engine);
        }
    }

    #[cfg(feature = "alloy-trie")]
    #[test]
    fn alloy_trie_runs_every_phase_and_rejects_wrong_claims() {
        every_phase(AuthEngineKind::AlloyTrie);
        wrong_claims_are_rejected(AuthEngineKind::AlloyTrie);
    }
}
