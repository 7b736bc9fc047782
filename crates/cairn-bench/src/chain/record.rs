//! The JSON record of one `chain` configuration (`chain-<config>.json`), written by the run and
//! read by the report.
//!
//! Owns: [`ChainRecord`] and its parts. Must never touch: measuring or rendering. Field names
//! carry their units.

use serde::{Deserialize, Serialize};

use crate::record::Machine;

/// The `benchmark` of a [`ChainRecord`].
pub const CHAIN: &str = "chain";

/// Everything one configuration's load and reads measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChainRecord {
    /// Always [`CHAIN`].
    pub benchmark: String,
    /// The configuration (`cairn-block`, ...).
    pub config: String,
    /// When the run started (UTC, RFC 3339).
    pub date: String,
    /// `git describe --always --dirty` of the working directory.
    pub commit: Option<String>,
    /// The machine.
    pub machine: Option<Machine>,
    /// The command line of the invocation.
    #[serde(default)]
    pub command: String,
    /// The stream's seed.
    pub seed: u64,
    /// Blocks loaded.
    pub blocks: u64,
    /// Transactions (lookup entries) per block.
    pub txs_per_block: u64,
    /// State writes per block.
    pub state_writes_per_block: u64,
    /// Percent of the state writes that update an earlier key.
    pub state_update_percent: u64,
    /// Mean bytes of a body.
    pub body_bytes: usize,
    /// Mean bytes of a block's receipts.
    pub receipts_bytes: usize,
    /// Blocks per group of the block prefix (block layouts only).
    pub group_blocks: u64,
    /// Whether Cairn stored bodies and receipts as blobs.
    pub blobs: bool,
    /// The engine's settings, in words.
    pub settings: String,
    /// Key-value pairs written.
    pub pairs: u64,
    /// Bytes of user data written: Geth's keys (without the block prefix) plus values.
    pub user_bytes: u64,
    /// Seconds of the load (every block written), without the final settling.
    pub load_seconds: f64,
    /// Seconds of the settling after the load (Cairn: background merges and a snapshot;
    /// RocksDB: a flush and the pending compactions).
    pub settle_seconds: f64,
    /// Blocks per second of the load.
    pub blocks_per_s: f64,
    /// MB (10^6 bytes) of user data per second of the load.
    pub user_mb_per_s: f64,
    /// Bytes the process wrote to storage during the load (`/proc/self/io` `write_bytes`).
    pub write_bytes_load: Option<u64>,
    /// The same, load and settling.
    pub write_bytes_total: Option<u64>,
    /// `write_bytes_total / user_bytes`.
    pub write_amplification: Option<f64>,
    /// Bytes of the files in the store's directory once the store is closed (allocated blocks,
    /// a file with several links counted once).
    pub space_bytes: u64,
    /// The same right after the settling, the store open (Cairn: with the files of runs that
    /// merges replaced, which a few later updates did not free and closing does).
    pub space_bytes_open: u64,
    /// Merges and compactions, and the shape of each table.
    pub counters: EngineCounters,
    /// Why the settling stopped before all background work was done, if it did.
    pub unsettled: Option<String>,
    /// Read latencies after the load, one entry per query kind.
    pub reads: Vec<ReadRecord>,
    /// Whether every read was compared with the value recomputed from the seed.
    pub checked: bool,
    /// The memory limit of the run's cgroup, if it had one.
    pub memory_limit_bytes: Option<u64>,
    /// The cgroup's peak usage (resident set plus page cache).
    pub cgroup_peak_bytes: Option<u64>,
    /// Why the run had no memory limit, when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_unlimited_reason: Option<String>,
    /// How the run failed, if it did (the other fields are then mostly empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Merge or compaction counters of one store.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineCounters {
    /// Cairn: merge steps (input entries consumed by merges) over every table, by updates and
    /// the background thread.
    pub merge_steps: Option<u64>,
    /// Cairn: merges started over every table (`TableStats::merges_started`), those that only
    /// linked parts included.
    #[serde(default)]
    pub merges: Option<u64>,
    /// Cairn: parts those merges linked instead of rewriting (`TableStats::parts_linked`).
    #[serde(default)]
    pub parts_linked: Option<u64>,
    /// RocksDB: compactions run (the count of the `rocksdb.compaction.times.micros` histogram).
    pub compactions: Option<u64>,
    /// RocksDB: bytes compactions read (`rocksdb.compact.read.bytes`).
    pub compaction_read_bytes: Option<u64>,
    /// RocksDB: bytes compactions wrote (`rocksdb.compact.write.bytes`).
    pub compaction_write_bytes: Option<u64>,
    /// RocksDB: bytes flushes wrote (`rocksdb.flush.write.bytes`).
    pub flush_write_bytes: Option<u64>,
    /// Each table's (column family's) shape.
    pub tables: Vec<TableShape>,
}

/// The shape of one table once settled.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TableShape {
    /// The table's name.
    pub name: String,
    /// Levels holding data (Cairn: levels below the write buffer; RocksDB: non-empty levels).
    pub levels: u64,
    /// Runs a lookup consults (RocksDB: SST files).
    pub runs: u64,
    /// Merges started but not finished (Cairn; RocksDB: 0).
    pub merges_in_progress: u64,
    /// Cairn: merge steps the table's updates performed (`TableStats::merge_steps_total`; the
    /// background thread's steps are the session's, counted only in
    /// [`EngineCounters::merge_steps`]).
    #[serde(default)]
    pub merge_steps_by_updates: Option<u64>,
    /// Cairn: files (parts) the runs are made of (`TableStats::run_parts`).
    #[serde(default)]
    pub run_parts: Option<u64>,
    /// Cairn: merges the table started and the parts and entries they linked.
    #[serde(default)]
    pub merges_started: Option<u64>,
    #[serde(default)]
    pub parts_linked: Option<u64>,
    #[serde(default)]
    pub entries_linked: Option<u64>,
    /// The user bytes (Geth's keys and values) written into this table.
    #[serde(default)]
    pub user_bytes: Option<u64>,
    /// Cairn: bytes of run files the table wrote (`TableStats::bytes_written`: flushes, merges,
    /// the snapshot's write buffer); with `user_bytes`, the table's own write amplification.
    #[serde(default)]
    pub bytes_written: Option<u64>,
}

/// The latency of one kind of query.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReadRecord {
    /// `header-by-number`, `tx-by-hash` or `state-latest`.
    pub query: String,
    /// Queries timed.
    pub count: u64,
    /// Engine lookups per query.
    pub lookups_per_query: u64,
    /// Median, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Mean, microseconds.
    pub mean_us: f64,
}
