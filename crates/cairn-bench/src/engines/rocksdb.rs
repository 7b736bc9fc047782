//! RocksDB (through the `rocksdb` crate) behind the benchmark's [`Engine`] interface.
//!
//! Owns: one RocksDB database in the engine's directory, holding the table in its default
//! column family. Must never touch: the workload.
//!
//! Settings, and where they come from:
//!
//! - The point-lookup table options of RocksDB's `OptimizeForPointLookup` (`options.cc`; the
//!   `Options::optimize_for_point_lookup` of the crate), written out so the report can name
//!   them: Bloom filters of 10 bits per key (full filters, the "RocksDB Bloom Filter" wiki's
//!   recommended format), data blocks with a hash index (`kDataBlockBinaryAndHash`, ratio 0.75,
//!   the "Data Block Hash Index" wiki: faster point lookups within a block), and a memtable
//!   Bloom filter on whole keys (ratio 0.02).
//! - A small LRU block cache of [`CACHE_BYTES`]: lookups measure the disk rather than a cache
//!   holding the table, as for the other engines. Index and filter blocks stay outside it, in
//!   the table readers (RocksDB's default, `cache_index_and_filter_blocks = false`, with all
//!   files kept open: `max_open_files = -1`), as Cairn keeps its index and filters in memory.
//! - LZ4 compression (the "Setup Options and Basic Tuning" wiki recommends LZ4 for the levels;
//!   its ZSTD for the last level is not built into this binary), 4 KiB data blocks (the
//!   default, suited to point reads).
//! - Direct reads (`use_direct_reads`, and `use_direct_io_for_flush_and_compaction`, the "Direct
//!   IO" wiki's pair) when `--direct-io` asks for the disk cache off.
//! - Lookups in batches through the batched `MultiGet` (`batched_multi_get_cf`, the "MultiGet
//!   Performance" wiki: one pass over the levels, the data blocks of a file read in parallel
//!   with `MultiRead`, which uses io_uring because the crate is built with its `io-uring`
//!   feature), with `ReadOptions::async_io` set (the "Asynchronous IO" wiki: parallel reads
//!   across files too, where RocksDB was built with coroutine support; without it the flag is
//!   harmless). RocksDB sorts each batch itself, so it is passed unsorted.
//! - Writes: setup chunks are `WriteBatch`es with the WAL off (the bulk-load advice of the
//!   RocksDB FAQ), made durable by [`Engine::finish_load`] (flush the memtables, which syncs
//!   the new files, then wait for the background compactions so `run` starts from a settled
//!   tree); an update is one `WriteBatch` with the default `WriteOptions` (WAL on, not synced).
//! - A [`Reader`] is a RocksDB snapshot (`GetSnapshot`) named in its read options.
//! - Its compaction work per level ([`Engine::level_work`]) is read from the compaction
//!   statistics of its `rocksdb.cfstats-no-file-histogram` property ([`rocks_stats`]).

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DBCompressionType,
    DBPinnableSlice, DataBlockIndexType, Options, ReadOptions, SnapshotWithThreadMode,
    WaitForCompactOptions, WriteBatch, WriteOptions, DB, DEFAULT_COLUMN_FAMILY_NAME,
};

use crate::engines::{rocks_stats, Engine, EngineOptions, Key, Reader, Value};
use crate::failure::{Context, Failure};
use crate::record::LevelWork;

/// The block cache's bytes.
const CACHE_BYTES: usize = 32 << 20;

/// Bloom filter bits per key.
const BLOOM_BITS_PER_KEY: f64 = 10.0;

/// The data-block hash index's utilisation ratio (`OptimizeForPointLookup`'s).
const DATA_BLOCK_HASH_RATIO: f64 = 0.75;

/// The memtable Bloom filter's size, as a fraction of the memtable (`OptimizeForPointLookup`'s).
const MEMTABLE_BLOOM_RATIO: f64 = 0.02;

/// A RocksDB database holding the benchmark's table in its default column family.
pub struct RocksEngine {
    db: DB,
    /// The read options of every lookup (`async_io` on).
    read: ReadOptions,
    settings: String,
}

impl RocksEngine {
    /// Creates a new database in `dir` (`create`: `dir` must not hold one yet), or opens the one
    /// a previous setup left there.
    pub fn open(dir: &Path, create: bool, options: &EngineOptions) -> Result<RocksEngine, Failure> {
        let cache = Cache::new_lru_cache(CACHE_BYTES);
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
        table.set_data_block_index_type(DataBlockIndexType::BinaryAndHash);
        table.set_data_block_hash_ratio(DATA_BLOCK_HASH_RATIO);
        table.set_block_cache(&cache);

        let mut db_options = Options::default();
        db_options.create_if_missing(create);
        db_options.set_error_if_exists(create);
        db_options.set_block_based_table_factory(&table);
        db_options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
        db_options.set_memtable_whole_key_filtering(true);
        db_options.set_compression_type(DBCompressionType::Lz4);
        db_options.set_max_open_files(-1);
        // No filters in the bottommost level, for workloads whose lookups find their keys.
        db_options.set_optimize_filters_for_hits(options.filters_for_hits);
        if options.direct_io {
            db_options.set_use_direct_reads(true);
            db_options.set_use_direct_io_for_flush_and_compaction(true);
        }
        if create {
            std::fs::create_dir_all(dir)
                .context(|| format!("creating the directory {}", dir.display()))?;
        }
        // Opened with its column family named, so that `cf_handle` finds the default one for
        // the batched MultiGet.
        let family = ColumnFamilyDescriptor::new(DEFAULT_COLUMN_FAMILY_NAME, db_options.clone());
        let db = DB::open_cf_descriptors(&db_options, dir, [family]).context(|| {
            if create {
                format!("creating a RocksDB database in {}", dir.display())
            } else {
                format!(
                    "opening the RocksDB database in {} (run `utxo setup` first)",
                    dir.display()
                )
            }
        })?;

        let mut read = ReadOptions::default();
        read.set_async_io(true);
        let settings = format!(
            "Bloom {BLOOM_BITS_PER_KEY} bits/key (full filters{}), data block hash index \
             (ratio {DATA_BLOCK_HASH_RATIO}), memtable whole-key Bloom, block cache {} MiB \
             (index and filters outside it), LZ4, 4 KiB blocks, {}, batched MultiGet with \
             async_io (io_uring MultiRead), WAL off during setup",
            if options.filters_for_hits {
                "; none on the bottommost level: optimize_filters_for_hits"
            } else {
                ""
            },
            CACHE_BYTES >> 20,
            if options.direct_io {
                "direct reads and direct flush/compaction I/O"
            } else {
                "buffered reads (OS page cache)"
            },
        );
        Ok(RocksEngine { db, read, settings })
    }

    /// The default column family.
    fn family(&self) -> Result<&ColumnFamily, Failure> {
        self.db
            .cf_handle(DEFAULT_COLUMN_FAMILY_NAME)
            .ok_or_else(|| Failure("RocksDB has no default column family".to_string()))
    }
}

/// Looks up `keys` in `family` through RocksDB's batched MultiGet with `read`.
fn values(
    db: &DB,
    family: &ColumnFamily,
    read: &ReadOptions,
    keys: &[Key],
) -> Result<Vec<Option<Value>>, Failure> {
    db.batched_multi_get_cf_opt(family, keys, false, read)
        .into_iter()
        .map(|result| value(result.context(|| "looking up a batch".to_string())?))
        .collect()
}

/// Turns a stored value into a [`Value`], failing on a wrong length.
fn value(stored: Option<DBPinnableSlice<'_>>) -> Result<Option<Value>, Failure> {
    crate::engines::value_from(stored.as_deref())
}

impl Engine for RocksEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        let mut batch = WriteBatch::default();
        for (key, value) in chunk {
            batch.put(key, value);
        }
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        self.db
            .write_opt(batch, &write)
            .context(|| "loading a setup chunk".to_string())
    }

    fn background_work(&self) -> Option<String> {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        let flush = property("rocksdb.mem-table-flush-pending");
        let compaction = property("rocksdb.compaction-pending");
        let running =
            property("rocksdb.num-running-compactions") + property("rocksdb.num-running-flushes");
        (flush + compaction + running > 0).then(|| {
            format!("flush pending {flush}, compaction pending {compaction}, running {running}")
        })
    }

    /// The compactions into each level and their input entries since the database was opened,
    /// from its compaction statistics ([`rocks_stats`]); `None` when the property cannot be
    /// read or parsed.
    fn level_work(&self) -> Option<LevelWork> {
        let text = self
            .db
            .property_value(rocks_stats::PROPERTY)
            .ok()
            .flatten()?;
        rocks_stats::level_work(&text)
    }

    fn finish_load(&self) -> Result<(), Failure> {
        self.db
            .flush()
            .context(|| "flushing the memtables".to_string())?;
        self.db
            .flush_wal(true)
            .context(|| "syncing the WAL".to_string())?;
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())
            .context(|| "waiting for the compactions".to_string())
    }

    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        values(&self.db, self.family()?, &self.read, keys)
    }

    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        let mut batch = WriteBatch::default();
        for (key, value) in inserts {
            batch.put(key, value);
        }
        for key in deletes {
            batch.delete(key);
        }
        self.db
            .write(batch)
            .context(|| "applying a batch".to_string())
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure> {
        let snapshot = self.db.snapshot();
        let mut read = ReadOptions::default();
        read.set_async_io(true);
        read.set_snapshot(&snapshot);
        Ok(Box::new(RocksReader {
            read,
            family: self.family()?,
            db: &self.db,
            _snapshot: snapshot,
        }))
    }
}

/// A RocksDB snapshot: it sees the table as of its creation, and is released when dropped.
struct RocksReader<'a> {
    /// Read options naming the snapshot (declared first, so they are dropped before it).
    read: ReadOptions,
    family: &'a ColumnFamily,
    db: &'a DB,
    _snapshot: SnapshotWithThreadMode<'a, DB>,
}

impl Reader for RocksReader<'_> {
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        values(self.db, self.family, &self.read, keys)
    }
}

#[cfg(test)]
mod tests {
    use crate::engines::conformance;
    use crate::options::EngineKind;

    #[test]
    fn conforms() {
        conformance::check(EngineKind::Rocksdb);
    }
}
