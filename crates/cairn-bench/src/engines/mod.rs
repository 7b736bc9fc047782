//! One interface for every engine the UTxO benchmark drives: Cairn and its peers (RocksDB, LMDB,
//! fjall, each behind a cargo feature of its own).
//!
//! Owns: the [`Engine`] and [`Reader`] traits, [`EngineKind`] and [`EngineKind::open`]. Each implementation
//! lives in its own module and uses only its engine's public API, with the settings its own
//! documentation recommends for random point reads (stated by [`Engine::settings`]). Must never
//! touch: the workload (which keys, which checks), which is the driver's.
//!
//! An engine instance owns one directory. `setup` builds the initial table there, settles it by
//! the engine's own means and makes it durable ([`Engine::finish_load`]: merges completed and a
//! snapshot for Cairn, a flush, sync and wait for compactions for RocksDB, a flush and sync for
//! the others); `run`
//! opens the same directory again ([`EngineKind::open`] with `create: false`).

pub mod cairn;
#[cfg(feature = "fjall")]
pub mod fjall;
#[cfg(feature = "lmdb")]
pub mod lmdb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
// Built without the feature too, so that its parser's tests run without RocksDB's C++.
#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
pub mod rocks_stats;

use std::path::Path;

use crate::failure::Failure;
use crate::keys::{KEY_BYTES, VALUE_BYTES};
use crate::options::{EngineKind, IoArg};
use crate::record::LevelWork;

/// A UTxO key.
pub type Key = [u8; KEY_BYTES];
/// A UTxO value.
pub type Value = [u8; VALUE_BYTES];

/// How an engine is opened.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Read with the disk cache off (`O_DIRECT`) where the engine supports it.
    pub direct_io: bool,
    /// Seed for anything random in the engine's setup (Cairn's Bloom-filter salt).
    pub seed: u64,
    /// Cairn only: the write buffer's entries.
    pub write_buffer: usize,
    /// Cairn only: merge steps done at once.
    pub merge_batch_size: usize,
    /// Cairn only: the block I/O backend of batched lookups.
    pub io: IoArg,
    /// Cairn only: open the session with a write-ahead log (default options: a 200 µs group
    /// window) and make the table durable, so every update is logged.
    pub wal: bool,
    /// Cairn only: merge work on the session's background thread.
    pub background_merges: bool,
    /// No Bloom filters on the deepest level (`--filters-for-hits`): Cairn, RocksDB and fjall.
    pub filters_for_hits: bool,
    /// Cairn only: reads in flight its concurrent lookups share (`SessionOptions::read_budget`;
    /// 0: none).
    pub read_budget: usize,
}

/// An engine holding one table of UTxO entries.
///
/// `Send + Sync`: the pipelined mode looks up through [`Engine::reader`] on one thread while
/// another applies updates.
pub trait Engine: Send + Sync {
    /// The engine's name in reports: `cairn`, `rocksdb`, `lmdb` or `fjall`.
    fn name(&self) -> &'static str;

    /// The settings in use, in words, for the report (cache sizes, filters, I/O mode).
    fn settings(&self) -> String;

    /// Inserts a chunk of the initial table during setup (keys are fresh; the engine may use a
    /// bulk-loading path).
    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure>;

    /// Whether `setup` should hand this engine the initial table in key order, through
    /// [`Engine::load_sorted`], for an append-only bulk-loading path.
    fn wants_sorted_load(&self) -> bool {
        false
    }

    /// As [`Engine::load`], for a chunk whose keys are sorted and follow every key loaded
    /// before it (only called when [`Engine::wants_sorted_load`]).
    fn load_sorted(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        self.load(chunk)
    }

    /// Ends the setup: the table is brought to rest by the engine's own means (no merge or
    /// compaction of the load left for a run to pay) and must survive the process and be
    /// opened by `run`.
    fn finish_load(&self) -> Result<(), Failure>;

    /// Background work the engine has pending or running now (flushes, compactions, merges),
    /// in words, for the record of a run that starts with it; `None` when it has none, or
    /// cannot tell.
    fn background_work(&self) -> Option<String> {
        None
    }

    /// The engine's merge or compaction work per level so far, as its own counters give it
    /// (since the table was opened, at least), for the record of a run, which keeps the
    /// difference over its timed batches; `None` when the engine does not count it.
    fn level_work(&self) -> Option<LevelWork> {
        None
    }

    /// Looks up a batch: `result[i]` is the value of `keys[i]`, if present. Engines with a
    /// batched read path (Cairn's `lookups`, RocksDB's `MultiGet`) use it.
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure>;

    /// Applies one batch of inserts (fresh keys) and deletes (present keys) as one write.
    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure>;

    /// A read view frozen now (later updates are invisible through it), for the lookups of the
    /// pipelined mode: Cairn's `duplicate`, a read transaction or a snapshot elsewhere.
    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure>;
}

/// A frozen read view of an engine's table.
pub trait Reader: Send {
    /// As [`Engine::lookups`], on the frozen view.
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure>;
}

/// Turns a stored value into a [`Value`]: a value of another length is a failure, not a panic.
pub fn value_from(stored: Option<&[u8]>) -> Result<Option<Value>, Failure> {
    stored
        .map(|v| Value::try_from(v).map_err(|_| Failure(format!("a value of {} bytes", v.len()))))
        .transpose()
}

impl EngineKind {
    /// Opens the engine's table in `dir`, or with `create` creates it (refusing a directory that
    /// already holds one).
    pub fn open(
        self,
        dir: &Path,
        create: bool,
        options: &EngineOptions,
    ) -> Result<Box<dyn Engine>, Failure> {
        match self {
            EngineKind::Cairn => Ok(Box::new(crate::engines::cairn::CairnEngine::open(
                dir, create, options,
            )?)),
            #[cfg(feature = "rocksdb")]
            EngineKind::Rocksdb => Ok(Box::new(crate::engines::rocksdb::RocksEngine::open(
                dir, create, options,
            )?)),
            #[cfg(feature = "lmdb")]
            EngineKind::Lmdb => Ok(Box::new(crate::engines::lmdb::LmdbEngine::open(
                dir, create, options,
            )?)),
            #[cfg(feature = "fjall")]
            EngineKind::Fjall => Ok(Box::new(crate::engines::fjall::FjallEngine::open(
                dir, create, options,
            )?)),
            #[allow(unreachable_patterns)]
            other => Err(other.unavailable()),
        }
    }
}

/// The behaviour every engine must show, checked by each engine's test: load, make durable,
/// reopen, look up present and absent keys, update, and keep a frozen view.
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;
    use crate::keys::{utxo_key, utxo_value};

    fn entry(i: u64) -> (Key, Value) {
        (utxo_key(i, 7), utxo_value(i))
    }

    /// Runs the checks on `kind` in a temporary directory.
    pub(crate) fn check(kind: EngineKind) {
        let options = EngineOptions {
            direct_io: false,
            seed: 7,
            write_buffer: 64,
            merge_batch_size: 16,
            io: IoArg::Auto,
            wal: false,
            background_merges: true,
            filters_for_hits: false,
            read_budget: 0,
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join(kind.name());
        std::fs::create_dir_all(&path).expect("the engine's directory");
        {
            let engine = kind.open(&path, true, &options).expect("create");
            let entries: Vec<_> = (0..1_000).map(entry).collect();
            for chunk in entries.chunks(300) {
                engine.load(chunk).expect("load");
            }
            engine.finish_load().expect("finish_load");
        }
        let engine = kind.open(&path, false, &options).expect("reopen");
        assert_eq!(engine.name(), kind.name());
        assert!(!engine.settings().is_empty());
        let keys: Vec<Key> = (995..1_005).map(|i| utxo_key(i, 7)).collect();
        let found = engine.lookups(&keys).expect("lookups");
        for (i, value) in (995..1_005).zip(&found) {
            assert_eq!(*value, (i < 1_000).then(|| utxo_value(i)), "id {i}");
        }
        let before = engine.reader().expect("reader");
        let inserts: Vec<_> = (1_000..1_010).map(entry).collect();
        let deletes: Vec<Key> = (0..10).map(|i| utxo_key(i, 7)).collect();
        engine.update(&inserts, &deletes).expect("update");
        let ids: Vec<u64> = (0..20).chain(1_000..1_020).collect();
        let probe: Vec<Key> = ids.iter().map(|&i| utxo_key(i, 7)).collect();
        let now = engine.lookups(&probe).expect("lookups after the update");
        let then = before.lookups(&probe).expect("lookups through the reader");
        for ((&i, now), then) in ids.iter().zip(&now).zip(&then) {
            let present_now = (10..1_010).contains(&i);
            assert_eq!(*now, present_now.then(|| utxo_value(i)), "engine, id {i}");
            assert_eq!(*then, (i < 1_000).then(|| utxo_value(i)), "reader, id {i}");
        }
        drop(before);
        drop(engine);
        // `create` never overwrites a table, and opening a directory without one fails.
        assert!(
            kind.open(&path, true, &options).is_err(),
            "create over a table"
        );
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).expect("an empty directory");
        assert!(
            kind.open(&empty, false, &options).is_err(),
            "open without a table"
        );
    }

    #[test]
    fn cairn_conforms() {
        check(EngineKind::Cairn);
    }
}
