//! The Cairn store of `chain`: one session, one table per table of the configuration.
//!
//! Owns: the tables' settings ([`table_config`]), writing a block as one batch per table,
//! settling the load, and [`counters`], the one place that collects Cairn's statistics for the
//! record. Must never touch: the stream or the layout (it gets table indexes and finished keys).
//!
//! Settings:
//!
//! - Session: merges on the session's background thread (`background_merges`, as RocksDB
//!   compacts in the background), no write-ahead log (Cairn's durability point is a snapshot;
//!   the load ends with one per table), io_uring where it works.
//! - Tables: `TableConfig::default()` (lazy levelling, size ratio 4, incremental merges,
//!   Bloom FPR 1e-3, the ordinary index, every run read through the page cache), the write
//!   buffer included (20,000 entries), but capped at `--cairn-write-buffer` bytes per table
//!   (turned into entries by the mean size of the entries the table holds plus
//!   [`ENTRY_OVERHEAD_BYTES`]; Cairn's write buffer counts entries, not bytes): 20,000 bodies
//!   of 70 KB would not fit the memory limit. The cap applies to the tables of block data;
//!   the hash-keyed tables (lookup entries, state) keep the default. A larger write buffer
//!   for them (32 MiB: 335,000 lookup entries) made every insert slower (the buffer's tree no
//!   longer fits the caches) for fewer merges: 2,270 blocks/s against 3,157 at 4 MiB in a
//!   probe of `cairn-block` at 20,000 blocks.
//! - Each block's entries of a table are written as one batch in key order (as `BlockKeys`
//!   asks; with hashed keys the order makes no difference).
//! - Large values: bodies and receipts inline in overflow pages, or as blobs
//!   (`Update::InsertWithBlob` with an empty value) with `--blobs`.
//! - Settling: every table settled (`Table::settle`), then the background thread is given up to
//!   `--settle-timeout-s` to finish the merges in progress, then each table is saved as snapshot
//!   `chain-<table>`, which writes its write buffer to disk: the load ends durable, as RocksDB's
//!   ends with its memtables flushed.

use std::path::Path;
use std::time::{Duration, Instant};

use cairn::{LookupResult, Session, SessionOptions, Table, TableConfig, Update};

use super::record::{EngineCounters, TableShape};
use super::{ChainStore, Put};
use crate::failure::{Context, Failure};

/// How often the settling checks whether merges are left.
const SETTLE_POLL: Duration = Duration::from_millis(20);

/// Memory a write-buffer entry takes besides its key and value: its 48-byte slot in a tree
/// node and the allocator's header of its allocation (`write_buffer.rs`).
pub const ENTRY_OVERHEAD_BYTES: f64 = 64.0;

/// Fewest and most write-buffer entries a table gets.
const WRITE_BUFFER_ENTRIES: std::ops::RangeInclusive<usize> = 64..=(1 << 22);

/// A Cairn session with the configuration's tables.
pub struct CairnStore {
    session: Session,
    tables: Vec<Table>,
    names: Vec<&'static str>,
    blobs: bool,
    settle_timeout: Duration,
    settings: String,
}

/// The configuration of a table whose entries average `mean_entry_bytes` (key and value): the
/// default, with a write buffer of at most about `write_buffer_bytes`.
pub fn table_config(write_buffer_bytes: usize, mean_entry_bytes: f64) -> TableConfig {
    let default = TableConfig::default();
    let entries = (write_buffer_bytes as f64 / (mean_entry_bytes + ENTRY_OVERHEAD_BYTES)) as usize;
    let most = default.write_buffer_entries;
    default.write_buffer_entries(
        entries
            .min(most)
            .clamp(*WRITE_BUFFER_ENTRIES.start(), *WRITE_BUFFER_ENTRIES.end()),
    )
}

impl CairnStore {
    /// Opens a new session in `dir` with one table per `(name, mean entry bytes)` of `tables`.
    pub fn open(
        dir: &Path,
        tables: &[(&'static str, f64)],
        write_buffer_bytes: usize,
        blobs: bool,
        settle_timeout: Duration,
        seed: u64,
    ) -> Result<CairnStore, Failure> {
        let options = SessionOptions::default()
            .salt(Some(seed))
            .background_merges(true);
        let session = Session::open_with_options(dir, options)
            .context(|| format!("opening a Cairn session in {}", dir.display()))?;
        let mut opened = Vec::new();
        let mut described = Vec::new();
        for &(name, mean) in tables {
            let config = table_config(write_buffer_bytes, mean);
            described.push(format!(
                "{name}: write buffer {} entries (mean entry {mean:.0} B)",
                config.write_buffer_entries
            ));
            opened.push(
                session
                    .new_table(config)
                    .context(|| format!("creating table {name}"))?,
            );
        }
        let settings = format!(
            "Cairn: TableConfig::default() (lazy levelling, size ratio 4, incremental merges, \
             Bloom FPR 1e-3, ordinary index, page cache) per table, background merges, no log, \
             io {:?}; bodies and receipts {}; write buffers of the default 20,000 entries, at \
             most {} KiB per table: {}; the load \
             ends with a snapshot of each table",
            session.io_backend(),
            if blobs {
                "as blobs"
            } else {
                "inline (overflow pages)"
            },
            write_buffer_bytes >> 10,
            described.join(", ")
        );
        Ok(CairnStore {
            session,
            tables: opened,
            names: tables.iter().map(|&(n, _)| n).collect(),
            blobs,
            settle_timeout,
            settings,
        })
    }

    /// Merges in progress over every table.
    fn merges_in_progress(&self) -> Result<usize, Failure> {
        let mut total = 0;
        for table in &self.tables {
            total += table
                .stats()
                .context(|| "table stats".into())?
                .merges_in_progress;
        }
        Ok(total)
    }
}

impl ChainStore for CairnStore {
    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn write_block(&self, tables: &[Vec<Put>]) -> Result<(), Failure> {
        for (table, puts) in self.tables.iter().zip(tables) {
            if puts.is_empty() {
                continue;
            }
            // In key order, as `BlockKeys` asks: with block-ordered keys the table's updates
            // then ascend, and its merges link runs instead of rewriting them.
            let mut puts: Vec<&Put> = puts.iter().collect();
            puts.sort_unstable_by(|a, b| a.key.cmp(&b.key));
            let batch: Vec<(&[u8], Update<'_>)> = puts
                .iter()
                .map(|p| {
                    let update = if self.blobs && p.large {
                        Update::InsertWithBlob(&[], &p.value)
                    } else {
                        Update::Insert(&p.value)
                    };
                    (&p.key[..], update)
                })
                .collect();
            table
                .updates(&batch)
                .context(|| "writing a block".to_string())?;
        }
        Ok(())
    }

    fn get(&self, table: usize, key: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
        let table = &self.tables[table];
        match table.lookup(key).context(|| "a lookup".to_string())? {
            LookupResult::NotFound => Ok(None),
            LookupResult::Found(value) => Ok(Some(value)),
            LookupResult::FoundWithBlob(_, blob) => table
                .retrieve_blob(&blob)
                .map(Some)
                .context(|| "reading a blob".to_string()),
        }
    }

    fn finish_load(&self) -> Result<Option<String>, Failure> {
        for table in &self.tables {
            table.settle().context(|| "settling a table".to_string())?;
        }
        let start = Instant::now();
        let mut left = self.merges_in_progress()?;
        while left > 0 && start.elapsed() < self.settle_timeout {
            std::thread::sleep(SETTLE_POLL);
            left = self.merges_in_progress()?;
        }
        for (table, name) in self.tables.iter().zip(&self.names) {
            table
                .save_snapshot(&format!("chain-{name}"), "chain")
                .context(|| format!("saving table {name}"))?;
        }
        Ok((left > 0).then(|| {
            format!(
                "{left} merges still in progress after {} s",
                self.settle_timeout.as_secs()
            )
        }))
    }

    fn counters(&self) -> Result<EngineCounters, Failure> {
        counters(&self.session, &self.tables, &self.names)
    }
}

/// Cairn's counters for the record, summed over `tables` (named `names`): merge steps (input
/// entries consumed by merges, by updates and by the background thread) and each table's
/// shape. The one place that reads them, so that counters added to the engine later are added
/// here.
pub fn counters(
    session: &Session,
    tables: &[Table],
    names: &[&'static str],
) -> Result<EngineCounters, Failure> {
    let mut out = EngineCounters {
        merge_steps: Some(session.background_merge_steps()),
        ..EngineCounters::default()
    };
    for (table, name) in tables.iter().zip(names) {
        let stats = table.stats().context(|| format!("stats of table {name}"))?;
        *out.merge_steps.get_or_insert(0) += stats.merge_steps_total;
        *out.merges.get_or_insert(0) += stats.merges_started;
        *out.parts_linked.get_or_insert(0) += stats.parts_linked;
        out.tables.push(TableShape {
            name: name.to_string(),
            levels: stats.levels as u64,
            runs: stats.runs as u64,
            merges_in_progress: stats.merges_in_progress as u64,
            merge_steps_by_updates: Some(stats.merge_steps_total),
            run_parts: Some(stats.run_parts as u64),
            merges_started: Some(stats.merges_started),
            parts_linked: Some(stats.parts_linked),
            entries_linked: Some(stats.entries_linked),
            bytes_written: Some(stats.bytes_written),
            user_bytes: None,
        });
    }
    Ok(out)
}
