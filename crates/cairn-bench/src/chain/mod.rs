//! `cairn-bench chain` (issue 15, B3): a seeded synthetic Ethereum-sync stream written block by
//! block into Cairn and RocksDB, with Geth's hashed keys and with block-ordered keys, then the
//! reads a node serves.
//!
//! Owns: the command (which configurations, each in a child process of its own in a memory
//! cgroup), the [`ChainStore`] interface the stores implement, and the records' directory.
//! The parts:
//!
//! - [`stream`]: the stream (Geth's key layout, sizes, everything a function of the seed).
//! - [`config`]: the configurations and their table layouts.
//! - [`cairn`] and `rocks` (`--features rocksdb`): the stores and their settings.
//! - [`driver`]: one configuration's load, settling, measurements and reads.
//! - [`record`] and [`report`]: the JSON record and the Markdown report.
//!
//! Must never touch: the engines' internals.

pub mod cairn;
pub mod config;
pub mod driver;
pub mod record;
pub mod report;
#[cfg(feature = "rocksdb")]
pub mod rocks;
pub mod stream;

use std::path::Path;
use std::time::Duration;

use crate::cli::ChainArgs;
use crate::failure::{Context, Failure};
use crate::options::ChainConfig;
use crate::sys::{self, cgroup};
use record::{ChainRecord, EngineCounters, CHAIN};

/// One pair of a block, keyed for its table.
#[derive(Clone, Debug)]
pub struct Put {
    /// The key, as stored (with the block prefix where the configuration gives one).
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Whether it is a body or receipts (a blob, where the store keeps them as blobs).
    pub large: bool,
}

/// A store of the benchmark: one engine with the configuration's tables.
pub trait ChainStore {
    /// The settings, in words, for the record.
    fn settings(&self) -> String;
    /// Writes one block: `tables[i]` goes to table `i`, one batch per table (or one batch over
    /// every table, where the engine has such a thing).
    fn write_block(&self, tables: &[Vec<Put>]) -> Result<(), Failure>;
    /// The value of `key` in table `table`.
    fn get(&self, table: usize, key: &[u8]) -> Result<Option<Vec<u8>>, Failure>;
    /// Ends the load: makes it durable and waits for the background work it left; says what
    /// was left undone, if anything.
    fn finish_load(&self) -> Result<Option<String>, Failure>;
    /// Merge or compaction counters and the tables' shapes.
    fn counters(&self) -> Result<EngineCounters, Failure>;
}

/// `chain`.
pub fn run(args: &ChainArgs) -> Result<(), Failure> {
    if let Some(name) = &args.child_config {
        return run_child(name, args);
    }
    let configs = chosen_configs(args)?;
    let started = std::time::Instant::now();
    let (mut records, failed) = crate::in_temp_dir(args.dir.as_deref(), args.keep, |parts| {
        run_configs(parts, &configs, args)
    })?;
    eprintln!(
        "chain: {} configurations in {:.1} s",
        configs.len(),
        started.elapsed().as_secs_f64()
    );
    let command = command_line();
    for record in &mut records {
        record.command = command.clone();
    }
    println!("{}", report::markdown(&records));
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).context(|| format!("creating {}", out.display()))?;
        for record in &records {
            crate::record::write_json(record, &out.join(format!("chain-{}.json", record.config)))?;
        }
        let path = report::write(out)?;
        eprintln!("report: {}", path.display());
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure(format!(
            "{} (the other configurations' records were kept)",
            failed.join("; ")
        )))
    }
}

/// `--configs`, or every configuration built in; an error for one that is not built in or for
/// a shape the stream refuses.
fn chosen_configs(args: &ChainArgs) -> Result<Vec<ChainConfig>, Failure> {
    let configs: Vec<ChainConfig> = if args.configs.is_empty() {
        ChainConfig::ALL
            .into_iter()
            .filter(|c| c.available())
            .collect()
    } else {
        args.configs.clone()
    };
    if let Some(missing) = configs.iter().find(|c| !c.available()) {
        return Err(Failure(format!(
            "{} is not built in: build cairn-bench with --features rocksdb",
            missing.name()
        )));
    }
    if args.state_update_percent >= 100 {
        return Err(Failure(
            "--state-update-percent must be below 100".to_string(),
        ));
    }
    Ok(configs)
}

/// Runs each configuration in turn, each in `parts/<config>` (removed afterwards unless
/// `--keep`, so that two stores never hold the disk at once). A configuration that fails gets a
/// record saying how, and the others still run.
fn run_configs(
    parts: &Path,
    configs: &[ChainConfig],
    args: &ChainArgs,
) -> Result<(Vec<ChainRecord>, Vec<String>), Failure> {
    let mut records = Vec::new();
    let mut failed = Vec::new();
    for &config in configs {
        let work = parts.join(config.name());
        std::fs::create_dir_all(&work).context(|| format!("creating {}", work.display()))?;
        let result = if args.in_process {
            run_here(config, &work, args)
        } else {
            run_in_child(config, parts, &work, args)
        };
        if !args.keep {
            std::fs::remove_dir_all(&work).context(|| format!("removing {}", work.display()))?;
        }
        match result {
            Ok(record) => records.push(record),
            Err(e) => {
                eprintln!("{}: {e}", config.name());
                failed.push(format!("{}: {e}", config.name()));
                records.push(ChainRecord {
                    benchmark: CHAIN.to_string(),
                    config: config.name().to_string(),
                    date: sys::now_rfc3339(),
                    commit: sys::git_commit(),
                    failure: Some(e.0),
                    ..ChainRecord::default()
                });
            }
        }
    }
    Ok((records, failed))
}

/// This process's command line, as the user gave it.
fn command_line() -> String {
    let mut words = vec!["cairn-bench".to_string()];
    words.extend(std::env::args().skip(1));
    words.join(" ")
}

/// Runs `config` in this process, in `dir`.
fn run_here(config: ChainConfig, dir: &Path, args: &ChainArgs) -> Result<ChainRecord, Failure> {
    let store = open_store(config, dir, args)?;
    let record = driver::run(config, store, dir, args)?;
    eprintln!(
        "{}: {:.0} blocks/s, write amplification {}",
        config.name(),
        record.blocks_per_s,
        record
            .write_amplification
            .map_or("n/a".to_string(), |w| format!("{w:.2}"))
    );
    Ok(record)
}

/// Runs `config` as a child process (this command again, with `--child-config`) in a memory
/// cgroup of its own limited to `--memory-limit`, the page cache dropped first, working in
/// `work` and writing its record next to it.
fn run_in_child(
    config: ChainConfig,
    parts: &Path,
    work: &Path,
    args: &ChainArgs,
) -> Result<ChainRecord, Failure> {
    let part = parts.join(format!("{}.json", config.name()));
    let memory = cgroup::rerun_as_child(
        "--child-config",
        config.name(),
        &part,
        work,
        args.memory_limit,
    )?;
    let mut record: ChainRecord = crate::record::read_json(&part)?;
    record.memory_limit_bytes = memory.limit_bytes;
    record.cgroup_peak_bytes = memory.peak_bytes;
    record.memory_unlimited_reason = memory.unlimited_reason;
    Ok(record)
}

/// The child's side of [`run_in_child`].
fn run_child(name: &str, args: &ChainArgs) -> Result<(), Failure> {
    let config = ChainConfig::from_name(name)
        .ok_or_else(|| Failure(format!("unknown configuration {name}")))?;
    let (Some(dir), Some(json)) = (&args.child_dir, &args.child_json) else {
        return Err(Failure(
            "--child-config needs --child-dir and --child-json".to_string(),
        ));
    };
    let record = run_here(config, dir, args)?;
    crate::record::write_json(&record, json)
}

/// Opens `config`'s store, new, in `dir`.
fn open_store(
    config: ChainConfig,
    dir: &Path,
    args: &ChainArgs,
) -> Result<Box<dyn ChainStore>, Failure> {
    if config.is_rocksdb() {
        #[cfg(feature = "rocksdb")]
        return Ok(Box::new(rocks::RocksStore::open(
            dir,
            config.tables(),
            args.rocksdb_cache as usize,
            args.rocksdb_wal,
        )?));
        #[cfg(not(feature = "rocksdb"))]
        return Err(Failure(format!(
            "{} needs --features rocksdb",
            config.name()
        )));
    }
    let stream = stream::Stream::new(args.seed, driver::shape(args));
    let tables: Vec<(&'static str, f64)> = config
        .tables()
        .iter()
        .enumerate()
        .map(|(index, &name)| (name, mean_entry_bytes(config, &stream, index)))
        .collect();
    Ok(Box::new(cairn::CairnStore::open(
        dir,
        &tables,
        args.cairn_write_buffer as usize,
        args.blobs,
        Duration::from_secs(args.settle_timeout_s),
        args.seed,
    )?))
}

/// The mean bytes of an entry (key as stored, value) of table `table` of `config`.
fn mean_entry_bytes(config: ChainConfig, stream: &stream::Stream, table: usize) -> f64 {
    let (mut bytes, mut count) = (0.0, 0.0);
    for (kind, mean, per_block) in stream.mean_sizes() {
        if config.table_of(kind) != table {
            continue;
        }
        let prefix = if config.prefixes(kind) {
            ::cairn::BlockKeys::PREFIX_BYTES as f64
        } else {
            0.0
        };
        bytes += (mean + prefix) * per_block;
        count += per_block;
    }
    if count > 0.0 {
        bytes / count
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// `chain` with tiny sizes on every Cairn configuration, in this process, with `--check`:
    /// every read matches the model, and the records and the report are written.
    #[test]
    fn small_chain_runs_with_check() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let argv = [
            "cairn-bench",
            "chain",
            "--configs",
            "cairn-hashed,cairn-block,cairn-block-onetable",
            "--blocks",
            "120",
            "--txs-per-block",
            "12",
            "--state-writes-per-block",
            "20",
            "--body-bytes",
            "3000",
            "--receipts-bytes",
            "5000",
            "--group-blocks",
            "4",
            "--cairn-write-buffer",
            "64K",
            "--queries",
            "300",
            "--check",
            "--in-process",
            "--dir",
            work.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let Command::Chain(mut args) = Cli::parse_from(argv).command else {
            panic!("not the chain command");
        };
        super::run(&args).unwrap();
        let report = std::fs::read_to_string(out.join("chain.md")).unwrap();
        assert!(report.contains("| cairn-block-onetable |"), "{report}");
        assert!(
            report.contains("cairn-block against each configuration"),
            "{report}"
        );
        for name in ["cairn-hashed", "cairn-block", "cairn-block-onetable"] {
            let record: super::ChainRecord =
                crate::record::read_json(&out.join(format!("chain-{name}.json"))).unwrap();
            assert!(record.failure.is_none());
            assert!(record.checked);
            assert_eq!(record.pairs, 120 * (5 + 12 + 20));
            assert_eq!(record.reads.len(), 3);
            assert!(record.reads.iter().all(|r| r.count == 300));
            assert!(record.space_bytes > 0);
            assert!(record.counters.merge_steps.is_some());
            let runs: u64 = record.counters.tables.iter().map(|t| t.runs).sum();
            assert!(runs > 0, "{name}: the write buffers were flushed");
        }
        // Blobs for bodies and receipts read back the same.
        args.blobs = true;
        args.configs = vec![super::ChainConfig::CairnBlock];
        args.out = None;
        super::run(&args).unwrap();
    }
}
