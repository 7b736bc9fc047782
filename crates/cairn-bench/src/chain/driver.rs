//! One configuration from start to end: the load (every block written as one batch per
//! table), the settling, the measurements, and the reads a node serves afterwards.
//!
//! Owns: what is timed and what is counted, and the checks of `--check`. Must never touch: an
//! engine's settings (the stores own them) or the stream's contents (the stream owns them).
//!
//! Timed: the load (blocks/s and user MB/s), the settling (on its own), and each read query
//! (the engine lookups only; the expected values are computed outside the timer). Counted:
//! `/proc/self/io` `write_bytes` from before the store is written to until the load has
//! settled, divided by the user bytes (Geth's keys without the block prefix, plus values):
//! the write amplification. The process runs one configuration only (a child of its own, see
//! [`super`]), so nothing else it does is counted.

use std::path::Path;
use std::time::Instant;

use cairn::BlockKeys;

use super::record::{ChainRecord, ReadRecord, CHAIN};
use super::stream::{self, Kind, Pair, Stream};
use super::{ChainStore, Put};
use crate::cli::ChainArgs;
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;
use crate::options::ChainConfig;
use crate::sys::proc::IoCounters;

/// Blocks between two progress lines: a tenth of the load.
const PROGRESS_PARTS: u64 = 10;

/// What a configuration's run works with.
struct Plan<'a> {
    config: ChainConfig,
    stream: Stream,
    keys: BlockKeys,
    store: &'a dyn ChainStore,
}

impl Plan<'_> {
    /// Looks up Geth's key `key` of `kind` at block `block` where the configuration keeps it.
    fn get(&self, kind: Kind, block: u64, key: Vec<u8>) -> Result<Option<Vec<u8>>, Failure> {
        let stored = self.config.key(&self.keys, kind, block, key);
        self.store.get(self.config.table_of(kind), &stored)
    }
}

/// The stream's shape as the command line gives it.
pub fn shape(args: &ChainArgs) -> stream::Shape {
    stream::Shape {
        blocks: args.blocks,
        txs_per_block: args.txs_per_block,
        state_writes_per_block: args.state_writes_per_block,
        update_percent: args.state_update_percent,
        body_bytes: args.body_bytes,
        receipts_bytes: args.receipts_bytes,
    }
}

/// Runs `config` on `store` (opened in `dir`, empty), closes it, and returns the record.
pub fn run(
    config: ChainConfig,
    store: Box<dyn ChainStore>,
    dir: &Path,
    args: &ChainArgs,
) -> Result<ChainRecord, Failure> {
    let plan = Plan {
        config,
        stream: Stream::new(args.seed, shape(args)),
        keys: BlockKeys::new(args.group_blocks).context(|| "--group-blocks".to_string())?,
        store: &*store,
    };
    let io_start = IoCounters::now();
    let start = Instant::now();
    let (pairs, user_bytes, table_bytes) = load(&plan)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let io_load = IoCounters::now();
    let settle_start = Instant::now();
    let unsettled = store.finish_load()?;
    let settle_seconds = settle_start.elapsed().as_secs_f64();
    let io_total = IoCounters::now();
    if let Some(why) = &unsettled {
        eprintln!("{}: not settled: {why}", config.name());
    }
    let space_bytes_open = dir_bytes(dir)?;
    let mut counters = store.counters()?;
    for (table, bytes) in counters.tables.iter_mut().zip(&table_bytes) {
        table.user_bytes = Some(*bytes);
    }
    let write_bytes_load = IoCounters::since(io_load, io_start).map(|c| c.write_bytes);
    let write_bytes_total = IoCounters::since(io_total, io_start).map(|c| c.write_bytes);
    eprintln!(
        "{}: loaded {pairs} pairs ({:.1} MB) in {load_seconds:.1} s, settled in \
         {settle_seconds:.1} s; reading",
        config.name(),
        user_bytes as f64 / 1e6
    );
    let reads = read_queries(&plan, args.queries, args.seed, args.check)?;
    let settings = store.settings();
    // Cairn removes the files of runs that merges replaced in steps paced by its writes, so
    // those of the last merges are still there while the store is open (later updates or the
    // close remove them): the space while open holds them too; closed, the store holds only
    // its data (Cairn: the snapshot the settling saved).
    drop(store);
    let space_bytes = dir_bytes(dir)?;
    Ok(ChainRecord {
        benchmark: CHAIN.to_string(),
        config: config.name().to_string(),
        date: crate::sys::now_rfc3339(),
        commit: crate::sys::git_commit(),
        machine: Some(crate::sys::machine()),
        seed: args.seed,
        blocks: args.blocks,
        txs_per_block: args.txs_per_block,
        state_writes_per_block: args.state_writes_per_block,
        state_update_percent: args.state_update_percent,
        body_bytes: args.body_bytes,
        receipts_bytes: args.receipts_bytes,
        group_blocks: args.group_blocks,
        blobs: args.blobs && !config.is_rocksdb(),
        settings,
        pairs,
        user_bytes,
        load_seconds,
        settle_seconds,
        blocks_per_s: args.blocks as f64 / load_seconds,
        user_mb_per_s: user_bytes as f64 / 1e6 / load_seconds,
        write_bytes_load,
        write_bytes_total,
        write_amplification: write_bytes_total.map(|w| w as f64 / user_bytes.max(1) as f64),
        space_bytes,
        space_bytes_open,
        counters,
        unsettled,
        reads,
        checked: args.check,
        ..ChainRecord::default()
    })
}

/// Writes every block, one batch per table; returns the pairs, the user bytes written and the
/// user bytes of each table.
fn load(plan: &Plan<'_>) -> Result<(u64, u64, Vec<u64>), Failure> {
    let tables = plan.config.tables().len();
    let blocks = plan.stream.blocks();
    let step = (plan.stream.shape().blocks / PROGRESS_PARTS).max(1);
    let start = Instant::now();
    let mut pairs: Vec<Pair> = Vec::new();
    let mut batches: Vec<Vec<Put>> = (0..tables).map(|_| Vec::new()).collect();
    let (mut count, mut user_bytes) = (0u64, 0u64);
    let mut table_bytes = vec![0u64; tables];
    for block in blocks.clone() {
        pairs.clear();
        plan.stream.block_pairs(block, &mut pairs);
        for batch in &mut batches {
            batch.clear();
        }
        for pair in pairs.drain(..) {
            count += 1;
            user_bytes += (pair.key.len() + pair.value.len()) as u64;
            let large = matches!(pair.kind, Kind::Body | Kind::Receipts);
            table_bytes[plan.config.table_of(pair.kind)] +=
                (pair.key.len() + pair.value.len()) as u64;
            batches[plan.config.table_of(pair.kind)].push(Put {
                key: plan.config.key(&plan.keys, pair.kind, block, pair.key),
                value: pair.value,
                large,
            });
        }
        plan.store.write_block(&batches)?;
        let done = block - blocks.start() + 1;
        if done.is_multiple_of(step) {
            eprintln!(
                "{}: {done} blocks, {:.0} blocks/s",
                plan.config.name(),
                done as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    Ok((count, user_bytes, table_bytes))
}

/// The three queries, `queries` of each, timed one by one (the engine lookups only).
fn read_queries(
    plan: &Plan<'_>,
    queries: u64,
    seed: u64,
    check: bool,
) -> Result<Vec<ReadRecord>, Failure> {
    let mut rng = SplitMix64::new(seed ^ 0x7265_6164_7321);
    let mut out = vec![header_queries(plan, queries, &mut rng, check)?];
    if plan.stream.shape().txs_per_block > 0 {
        out.push(tx_queries(plan, queries, &mut rng, check)?);
    }
    if plan.stream.shape().state_writes_per_block > 0 {
        out.push(state_queries(plan, queries, &mut rng, check)?);
    }
    Ok(out)
}

/// Headers of random blocks by number.
fn header_queries(
    plan: &Plan<'_>,
    queries: u64,
    rng: &mut SplitMix64,
    check: bool,
) -> Result<ReadRecord, Failure> {
    let mut times = Vec::with_capacity(queries as usize);
    for _ in 0..queries {
        let block = random_block(plan, rng);
        let started = Instant::now();
        let (hash, header) = header_by_number(plan, block)?;
        times.push(micros(started));
        if check {
            let want_hash = plan.stream.block_hash(block);
            expect(&hash, &want_hash, "canonical hash", block)?;
            expect(&header, &plan.stream.header_value(block), "header", block)?;
        }
    }
    Ok(summary("header-by-number", 2, &times))
}

/// Random transactions by hash: lookup entry, canonical hash, body.
fn tx_queries(
    plan: &Plan<'_>,
    queries: u64,
    rng: &mut SplitMix64,
    check: bool,
) -> Result<ReadRecord, Failure> {
    let mut times = Vec::with_capacity(queries as usize);
    for _ in 0..queries {
        let block = random_block(plan, rng);
        let tx_hash = plan
            .stream
            .tx_hash(block, rng.below(plan.stream.shape().txs_per_block));
        let started = Instant::now();
        let (number, hash, body) = tx_by_hash(plan, &tx_hash)?;
        times.push(micros(started));
        if check {
            let want_hash = plan.stream.block_hash(block);
            expect(
                &number.to_be_bytes(),
                &block.to_be_bytes(),
                "tx lookup",
                block,
            )?;
            expect(&hash, &want_hash, "canonical hash", block)?;
            expect(&body, &plan.stream.body_value(block), "body", block)?;
        }
    }
    Ok(summary("tx-by-hash", 3, &times))
}

/// The latest values of random state keys; with `check`, compared with the last write of each
/// ([`Stream::last_writes`]).
fn state_queries(
    plan: &Plan<'_>,
    queries: u64,
    rng: &mut SplitMix64,
    check: bool,
) -> Result<ReadRecord, Failure> {
    let model = check.then(|| plan.stream.last_writes());
    let state_keys = plan.stream.state_keys_after(*plan.stream.blocks().end());
    let mut times = Vec::with_capacity(queries as usize);
    for _ in 0..queries {
        let number = rng.below(state_keys);
        let key = plan.stream.state_key(number);
        let kind = if plan.stream.is_account(number) {
            Kind::Account
        } else {
            Kind::Storage
        };
        let started = Instant::now();
        let value = plan.get(kind, 0, key)?;
        times.push(micros(started));
        let value = value.ok_or_else(|| Failure(format!("state key {number} is missing")))?;
        if let Some(last) = &model {
            let (block, index) = (
                last[number as usize] >> 32,
                last[number as usize] & 0xffff_ffff,
            );
            let want = plan.stream.state_value(number, block, index);
            expect(&value, &want, "state value", block)?;
        }
    }
    Ok(summary("state-latest", 1, &times))
}

fn random_block(plan: &Plan<'_>, rng: &mut SplitMix64) -> u64 {
    plan.stream.blocks().start() + rng.below(plan.stream.shape().blocks)
}

/// Header by number: the canonical hash of `block`, then the header it names.
fn header_by_number(plan: &Plan<'_>, block: u64) -> Result<([u8; 32], Vec<u8>), Failure> {
    let hash = canonical_hash(plan, block)?;
    let header = plan
        .get(Kind::Header, block, stream::header_key(block, &hash))?
        .ok_or_else(|| Failure(format!("the header of block {block} is missing")))?;
    Ok((hash, header))
}

/// Transaction by hash: its lookup entry (the block number), the canonical hash of that
/// block, then the body.
fn tx_by_hash(plan: &Plan<'_>, tx_hash: &[u8; 32]) -> Result<(u64, [u8; 32], Vec<u8>), Failure> {
    let entry = plan
        .get(Kind::TxLookup, 0, stream::lookup_key(tx_hash))?
        .ok_or_else(|| Failure("a tx lookup entry is missing".to_string()))?;
    let block = stream::parse_lookup_value(&entry)
        .ok_or_else(|| Failure(format!("a tx lookup entry of {} bytes", entry.len())))?;
    let hash = canonical_hash(plan, block)?;
    let body = plan
        .get(Kind::Body, block, stream::body_key(block, &hash))?
        .ok_or_else(|| Failure(format!("the body of block {block} is missing")))?;
    Ok((block, hash, body))
}

fn canonical_hash(plan: &Plan<'_>, block: u64) -> Result<[u8; 32], Failure> {
    let value = plan
        .get(Kind::Canonical, block, stream::canonical_key(block))?
        .ok_or_else(|| Failure(format!("the canonical hash of block {block} is missing")))?;
    value
        .try_into()
        .map_err(|v: Vec<u8>| Failure(format!("a canonical hash of {} bytes", v.len())))
}

fn expect(got: &[u8], want: &[u8], what: &str, block: u64) -> Result<(), Failure> {
    if got == want {
        Ok(())
    } else {
        Err(Failure(format!(
            "--check: the {what} of block {block} differs from the model ({} bytes read, {} \
             expected)",
            got.len(),
            want.len()
        )))
    }
}

fn micros(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e6
}

fn summary(query: &str, lookups_per_query: u64, micros: &[f64]) -> ReadRecord {
    let p = crate::stats::percentiles(micros);
    ReadRecord {
        query: query.to_string(),
        count: micros.len() as u64,
        lookups_per_query,
        p50_us: p.p50,
        p99_us: p.p99,
        mean_us: micros.iter().sum::<f64>() / micros.len().max(1) as f64,
    }
}

/// Bytes allocated to the files under `dir` (their blocks, so sparse or preallocated files
/// count what they hold on disk; a file with several hard links, as Cairn's snapshots make,
/// counts once).
pub fn dir_bytes(dir: &Path) -> Result<u64, Failure> {
    let mut seen = std::collections::HashSet::new();
    dir_bytes_into(dir, &mut seen)
}

fn dir_bytes_into(
    dir: &Path,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> Result<u64, Failure> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let entries = std::fs::read_dir(dir).context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        let meta = entry
            .metadata()
            .context(|| format!("reading {}", entry.path().display()))?;
        if meta.is_dir() {
            total += dir_bytes_into(&entry.path(), seen)?;
        } else if seen.insert((meta.dev(), meta.ino())) {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use clap::Parser;

    use super::*;
    use crate::chain::record::EngineCounters;
    use crate::cli::{Cli, Command};

    /// A store in memory that can flip a byte of every value whose stored key starts with
    /// `corrupt` (after the block prefix, if any).
    struct MemoryStore {
        tables: RefCell<Vec<HashMap<Vec<u8>, Vec<u8>>>>,
        corrupt: Option<u8>,
        prefixed: bool,
    }

    impl ChainStore for MemoryStore {
        fn settings(&self) -> String {
            "memory".to_string()
        }

        fn write_block(&self, tables: &[Vec<Put>]) -> Result<(), Failure> {
            let mut stored = self.tables.borrow_mut();
            stored.resize_with(tables.len(), HashMap::new);
            for (table, puts) in stored.iter_mut().zip(tables) {
                for put in puts {
                    table.insert(put.key.clone(), put.value.clone());
                }
            }
            Ok(())
        }

        fn get(&self, table: usize, key: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
            let mut value = self.tables.borrow()[table].get(key).cloned();
            // Geth's keys start with a letter, block-group prefixes (of these few blocks) with 0.
            let skip = if self.prefixed && key[0] == 0 { 8 } else { 0 };
            if let (Some(v), Some(c)) = (value.as_mut(), self.corrupt) {
                if key.get(skip) == Some(&c) && !v.is_empty() {
                    v[0] ^= 1;
                }
            }
            Ok(value)
        }

        fn finish_load(&self) -> Result<Option<String>, Failure> {
            Ok(None)
        }

        fn counters(&self) -> Result<EngineCounters, Failure> {
            Ok(EngineCounters::default())
        }
    }

    fn args() -> ChainArgs {
        let argv = [
            "cairn-bench",
            "chain",
            "--blocks",
            "30",
            "--txs-per-block",
            "5",
            "--state-writes-per-block",
            "10",
            "--body-bytes",
            "500",
            "--receipts-bytes",
            "400",
            "--queries",
            "100",
            "--check",
        ];
        let Command::Chain(args) = Cli::parse_from(argv).command else {
            panic!("not the chain command");
        };
        args
    }

    fn run_on(config: ChainConfig, corrupt: Option<u8>) -> Result<ChainRecord, Failure> {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore {
            tables: RefCell::new(Vec::new()),
            corrupt,
            prefixed: config.prefixed(),
        };
        run(config, Box::new(store), dir.path(), &args())
    }

    #[test]
    fn reads_of_a_faithful_store_pass_the_check() {
        for config in [ChainConfig::CairnHashed, ChainConfig::CairnBlock] {
            let record = run_on(config, None).unwrap();
            assert_eq!(record.pairs, 30 * (5 + 5 + 10));
            let names: Vec<&str> = record.reads.iter().map(|r| r.query.as_str()).collect();
            assert_eq!(names, ["header-by-number", "tx-by-hash", "state-latest"]);
        }
    }

    #[test]
    fn the_check_catches_a_wrong_value_of_every_kind_read() {
        for config in [ChainConfig::CairnHashed, ChainConfig::CairnBlockOnetable] {
            // Header, canonical hash (both `h`), body, lookup entry, account, storage slot.
            for prefix in [b'h', b'b', b'l', b'a', b'o'] {
                let failure = run_on(config, Some(prefix)).unwrap_err();
                assert!(
                    failure.0.contains("differs from the model")
                        || failure.0.contains("is missing"),
                    "{} {}: {failure}",
                    config.name(),
                    prefix as char
                );
            }
        }
    }
}
