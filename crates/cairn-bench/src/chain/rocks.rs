//! The RocksDB store of `chain` (`--features rocksdb`): one database, one column family per
//! table of the configuration (`rocksdb-hashed`: the default column family alone;
//! `rocksdb-block`: `blocks`, `lookups` and `state`).
//!
//! Owns: the database's options and its counters. Must never touch: the stream or the layout.
//!
//! Settings: Geth's Pebble options (`docs/research/peers.md` 4.2) where RocksDB has them, for
//! a Geth database cache of `--rocksdb-cache-mib` (default 256 MiB), on every column family:
//!
//! - Memtables of `cache / 2 / 4` bytes (`write_buffer_size`; Geth's `memTableSize`), at most 8
//!   per column family before writes stop (`max_write_buffer_number`; Pebble's
//!   `MemTableStopWritesThreshold`), and all column families together flushed beyond
//!   `cache / 2` (`db_write_buffer_size`: Geth's 4 memtables).
//! - A block cache of `cache` bytes (Geth gives Pebble the whole cache), 10-bit Bloom filters
//!   (full filters, on every level: Geth leaves L6 without one, which RocksDB cannot express
//!   per level; `optimize_filters_for_hits` is off), 4 KiB blocks.
//! - Target file sizes 2 MiB on L1, doubling per level (`target_file_size_base` 2 MiB,
//!   multiplier 2: 2, 4, ..., 128 MiB on L1..L7; Geth's 2..128 MiB on L0..L6); L1 of 64 MiB
//!   (`max_bytes_for_level_base`, Pebble's default `LBaseMaxBytes`), ratio 10.
//! - L0 compaction after 2 files (`level0_file_num_compaction_trigger`, Geth's
//!   `L0CompactionThreshold`); background jobs = cores (Geth's `MaxConcurrentCompactions`).
//! - No compression (Block-LSM's setup; Geth's Pebble compresses with Snappy, which would
//!   only shrink this stream's random bytes by nothing).
//! - Writes: one `WriteBatch` per block across the column families, the WAL on and not synced
//!   (Geth's `NoSync`), `wal_bytes_per_sync` 500 KiB (Geth's `WALBytesPerSync`, 5 × 100 KiB).
//!   The WAL adds about one write of the user data to RocksDB's write amplification, which
//!   Cairn (no log; a snapshot at the end) does not pay: `--rocksdb-wal false` turns it off to
//!   compare the trees alone.
//! - Settling: every column family flushed, the WAL synced, then `wait_for_compact`.
//! - Statistics on, for the compaction counters.

use std::path::Path;

use rocksdb::statistics::{Histogram, Ticker};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompressionType, Options,
    WaitForCompactOptions, WriteBatch, WriteOptions, DB, DEFAULT_COLUMN_FAMILY_NAME,
};

use super::record::{EngineCounters, TableShape};
use super::{ChainStore, Put};
use crate::failure::{Context, Failure};

/// Bloom filter bits per key (Geth's).
const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// Target file size of L1 (Geth's smallest level).
const TARGET_FILE_BYTES_BASE: u64 = 2 << 20;
/// L1's size (Pebble's default `LBaseMaxBytes`).
const LEVEL_BASE_BYTES: u64 = 64 << 20;
/// Memtables per column family before writes stop (Pebble's `MemTableStopWritesThreshold`).
const MEMTABLES_MAX: i32 = 8;
/// L0 files that start a compaction (Geth's `L0CompactionThreshold`).
const L0_COMPACTION_TRIGGER: i32 = 2;
/// WAL bytes between background syncs (Geth: 5 × `IdealBatchSize` of 100 KiB).
const WAL_BYTES_PER_SYNC: u64 = 5 * 100 * 1024;
/// Levels whose files are counted.
const LEVELS: usize = 7;

/// A RocksDB database with one column family per table.
pub struct RocksStore {
    db: DB,
    /// The options the database was opened with: they hold its statistics.
    options: Options,
    families: Vec<String>,
    /// Every block's write options: not synced, the WAL on unless `--rocksdb-wal false`.
    write: WriteOptions,
    settings: String,
}

impl RocksStore {
    /// Creates a database in `dir` with the column families `tables` (one table: the default
    /// column family).
    pub fn open(
        dir: &Path,
        tables: &[&'static str],
        cache_bytes: usize,
        wal: bool,
    ) -> Result<RocksStore, Failure> {
        let memtable_bytes = cache_bytes / 2 / 4;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cache = Cache::new_lru_cache(cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
        table.set_block_cache(&cache);

        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.set_block_based_table_factory(&table);
        options.set_compression_type(DBCompressionType::None);
        options.set_write_buffer_size(memtable_bytes);
        options.set_max_write_buffer_number(MEMTABLES_MAX);
        options.set_db_write_buffer_size(cache_bytes / 2);
        options.set_target_file_size_base(TARGET_FILE_BYTES_BASE);
        options.set_target_file_size_multiplier(2);
        options.set_max_bytes_for_level_base(LEVEL_BASE_BYTES);
        options.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
        options.set_max_background_jobs(cores as i32);
        options.set_wal_bytes_per_sync(WAL_BYTES_PER_SYNC);
        options.set_max_open_files(-1);
        options.enable_statistics();

        let families: Vec<String> = if tables.len() == 1 {
            vec![DEFAULT_COLUMN_FAMILY_NAME.to_string()]
        } else {
            tables.iter().map(|t| t.to_string()).collect()
        };
        let descriptors: Vec<ColumnFamilyDescriptor> = families
            .iter()
            .map(|name| ColumnFamilyDescriptor::new(name, options.clone()))
            .collect();
        let db = DB::open_cf_descriptors(&options, dir, descriptors)
            .context(|| format!("creating a RocksDB database in {}", dir.display()))?;
        let settings = format!(
            "RocksDB: column families {families:?}; memtables {} MiB, at most {MEMTABLES_MAX} \
             per column family, flushed beyond {} MiB over all; block cache {} MiB; Bloom \
             {BLOOM_BITS_PER_KEY} bits/key; target file size {} MiB x2 per level; L1 {} MiB; \
             L0 compaction trigger {L0_COMPACTION_TRIGGER}; {cores} background jobs; no \
             compression; {}; one WriteBatch per block; the load ends with a flush and \
             wait_for_compact",
            memtable_bytes >> 20,
            (cache_bytes / 2) >> 20,
            cache_bytes >> 20,
            TARGET_FILE_BYTES_BASE >> 20,
            LEVEL_BASE_BYTES >> 20,
            if wal {
                format!(
                    "WAL on, not synced, wal_bytes_per_sync {} KiB",
                    WAL_BYTES_PER_SYNC >> 10
                )
            } else {
                "WAL off (--rocksdb-wal false)".to_string()
            },
        );
        let mut write = WriteOptions::default();
        write.disable_wal(!wal);
        Ok(RocksStore {
            db,
            options,
            families,
            write,
            settings,
        })
    }

    fn family(&self, table: usize) -> Result<&rocksdb::ColumnFamily, Failure> {
        let name = &self.families[table];
        self.db
            .cf_handle(name)
            .ok_or_else(|| Failure(format!("RocksDB has no column family {name}")))
    }
}

impl ChainStore for RocksStore {
    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn write_block(&self, tables: &[Vec<Put>]) -> Result<(), Failure> {
        let mut batch = WriteBatch::default();
        for (table, puts) in tables.iter().enumerate() {
            let family = self.family(table)?;
            for put in puts {
                batch.put_cf(family, &put.key, &put.value);
            }
        }
        self.db
            .write_opt(batch, &self.write)
            .context(|| "writing a block".to_string())
    }

    fn get(&self, table: usize, key: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
        let value = self
            .db
            .get_pinned_cf(self.family(table)?, key)
            .context(|| "a lookup".to_string())?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn finish_load(&self) -> Result<Option<String>, Failure> {
        for table in 0..self.families.len() {
            self.db
                .flush_cf(self.family(table)?)
                .context(|| "flushing the memtables".to_string())?;
        }
        self.db
            .flush_wal(true)
            .context(|| "syncing the WAL".to_string())?;
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())
            .context(|| "waiting for the compactions".to_string())?;
        Ok(None)
    }

    fn counters(&self) -> Result<EngineCounters, Failure> {
        let mut tables = Vec::new();
        for (index, name) in self.families.iter().enumerate() {
            let family = self.family(index)?;
            let mut shape = TableShape {
                name: name.clone(),
                ..TableShape::default()
            };
            for level in 0..LEVELS {
                let files = self
                    .db
                    .property_int_value_cf(family, &format!("rocksdb.num-files-at-level{level}"))
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                shape.runs += files;
                shape.levels += u64::from(files > 0);
            }
            tables.push(shape);
        }
        Ok(EngineCounters {
            merge_steps: None,
            merges: None,
            parts_linked: None,
            compactions: Some(
                self.options
                    .get_histogram_data(Histogram::CompactionTime)
                    .count(),
            ),
            compaction_read_bytes: Some(self.options.get_ticker_count(Ticker::CompactReadBytes)),
            compaction_write_bytes: Some(self.options.get_ticker_count(Ticker::CompactWriteBytes)),
            flush_write_bytes: Some(self.options.get_ticker_count(Ticker::FlushWriteBytes)),
            tables,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// Both RocksDB configurations on a tiny stream, in this process, every read checked.
    #[test]
    fn small_chain_runs_with_check() {
        let dir = tempfile::tempdir().unwrap();
        let argv = [
            "cairn-bench",
            "chain",
            "--configs",
            "rocksdb-hashed,rocksdb-block",
            "--blocks",
            "100",
            "--txs-per-block",
            "10",
            "--state-writes-per-block",
            "20",
            "--body-bytes",
            "3000",
            "--receipts-bytes",
            "2000",
            "--rocksdb-cache",
            "8M",
            "--queries",
            "200",
            "--check",
            "--in-process",
            "--dir",
            dir.path().to_str().unwrap(),
        ];
        let Command::Chain(args) = Cli::parse_from(argv).command else {
            panic!("not the chain command");
        };
        crate::chain::run(&args).unwrap();
    }
}
