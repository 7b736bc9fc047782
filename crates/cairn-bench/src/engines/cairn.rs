//! Cairn behind the benchmark's [`Engine`] interface, and the crate's only door to the `cairn`
//! crate.
//!
//! Owns: opening a session ([`CairnSession::open`], the one place that does), the table
//! configurations of the benchmarks ([`TableSettings`]), the session layout of a `utxo setup`
//! table (one session; the setup saved as snapshot [`SETUP_SNAPSHOT`]) and thin wrappers over the
//! `Session` and `Table` calls the benchmarks make: inserts, upserts, updates, lookups,
//! duplicates, snapshots, unions and statistics. No other module names a `cairn` item, so a change
//! of the engine's API is absorbed here. Must never touch: the workload (which keys, which
//! checks, what is timed).

use std::path::{Path, PathBuf};

use cairn::{
    BloomAlloc, DiskCachePolicy, IndexType, IoBackendKind, MergeSchedule, Resolve, Session,
    SessionOptions, SnapshotOverrides, Table, TableConfig, Update,
};

use crate::engines::{value_from, Engine, EngineOptions, Key, Reader, Value};
use crate::failure::{Context, Failure};
use crate::options::{DiskCacheArg, IoArg};
use crate::record::{LevelWork, LevelWorkRow};

/// The snapshot `utxo setup` saves and `utxo run` opens.
pub const SETUP_SNAPSHOT: &str = "utxo-setup";

/// The label [`SETUP_SNAPSHOT`] is saved and opened with.
const SETUP_LABEL: &str = "utxo";

/// Which configuration a benchmark table has.
#[derive(Clone, Copy)]
pub enum TableKind {
    /// The UTxO benchmark's (and `union`'s): the compact index, Bloom filters at FPR 1e-3,
    /// incremental merges, `KeepNewest`.
    Utxo,
    /// The upsert benchmark's: Cairn's default configuration, upserts combined by
    /// `resolve(newer, older)`.
    Upsert(fn(&[u8], &[u8]) -> Vec<u8>),
}

/// The UTxO table's Bloom false-positive rate on its deepest filtered level
/// (`BloomAlloc::LevelScaledFpr`).
pub const UTXO_BLOOM_FPR: f64 = 5e-3;

/// A benchmark table's configuration, in the benchmark's terms.
#[derive(Clone, Copy)]
pub struct TableSettings {
    /// Index, filters, merge schedule and resolve function.
    pub kind: TableKind,
    /// Entries of the write buffer.
    pub write_buffer: usize,
    /// Merge steps done at once.
    pub merge_batch_size: usize,
    /// Which runs are read through the page cache.
    pub disk_cache: DiskCacheArg,
    /// The deepest level's runs get no Bloom filter (`TableConfig::last_level_bloom`).
    pub filters_for_hits: bool,
}

impl TableSettings {
    /// The engine's configuration.
    fn config(&self) -> TableConfig {
        let base = TableConfig::default()
            .write_buffer_entries(self.write_buffer)
            .merge_batch_size(self.merge_batch_size)
            .disk_cache(match self.disk_cache {
                DiskCacheArg::None => DiskCachePolicy::None,
                DiskCacheArg::All => DiskCachePolicy::All,
            })
            .last_level_bloom(self.filters_for_hits.then_some(BloomAlloc::None));
        match self.kind {
            TableKind::Utxo => base
                .index(IndexType::Compact)
                // Monkey's allocation: about the false reads per lookup of FPR 1e-3 on every
                // level (with four filtered levels, as at 10M; fewer with more), less memory.
                .bloom(BloomAlloc::LevelScaledFpr(UTXO_BLOOM_FPR))
                .merge_schedule(MergeSchedule::Incremental)
                .resolve(Resolve::KeepNewest),
            TableKind::Upsert(resolve) => base.resolve(Resolve::custom("upsert-bench", resolve)),
        }
    }
}

/// An open session: one directory of tables and snapshots.
pub struct CairnSession {
    session: Session,
    dir: PathBuf,
}

impl CairnSession {
    /// Opens the session in `dir` (creating it when `dir` holds none) on the real file system,
    /// with the block I/O backend `io` and, for a new session, the Bloom-filter salt `seed`;
    /// with a write-ahead log (default options) if `wal`; merge work on the session's
    /// background thread if `background_merges`.
    pub fn open(
        dir: &Path,
        io: IoArg,
        seed: u64,
        wal: bool,
        background_merges: bool,
    ) -> Result<CairnSession, Failure> {
        Self::open_with_budget(dir, io, seed, wal, background_merges, 0)
    }

    /// [`CairnSession::open`] with `read_budget` reads in flight shared by concurrent lookups
    /// (`SessionOptions::read_budget`; 0: none).
    pub fn open_with_budget(
        dir: &Path,
        io: IoArg,
        seed: u64,
        wal: bool,
        background_merges: bool,
        read_budget: usize,
    ) -> Result<CairnSession, Failure> {
        let options = SessionOptions::default()
            .io_backend(match io {
                IoArg::Auto => IoBackendKind::Auto,
                IoArg::Uring => IoBackendKind::Uring,
                IoArg::Pread => IoBackendKind::Pread,
            })
            .salt(Some(seed))
            .log(wal.then(cairn::LogOptions::default))
            .background_merges(background_merges)
            .read_budget(read_budget);
        let session = Session::open_with_options(dir, options)
            .context(|| format!("opening a Cairn session in {}", dir.display()))?;
        Ok(CairnSession {
            session,
            dir: dir.to_path_buf(),
        })
    }

    /// The disk-cache policy as it really works: `asked` unless the file system refused
    /// `O_DIRECT`, when every read goes through the page cache.
    pub fn disk_cache_name(&self, asked: &'static str) -> &'static str {
        if self.session.io_report().direct_io.is_refused() {
            "all (O_DIRECT refused)"
        } else {
            asked
        }
    }

    /// The backend `--io` resolved to, as reports name it ("uring" or "pread").
    pub fn io_backend_name(&self) -> &'static str {
        match self.session.io_backend() {
            IoBackendKind::Auto => "auto",
            IoBackendKind::Uring => "uring",
            IoBackendKind::Pread => "pread",
        }
    }

    /// Creates an empty table.
    pub fn new_table(&self, settings: &TableSettings) -> Result<CairnTable, Failure> {
        let table = self
            .session
            .new_table(settings.config())
            .context(|| "creating a table".to_string())?;
        Ok(CairnTable(table))
    }

    /// Creates an empty durable table (the session must have a log): its updates are logged.
    pub fn new_durable_table(
        &self,
        name: &str,
        settings: &TableSettings,
    ) -> Result<CairnTable, Failure> {
        let table = self
            .session
            .create_durable_table(name, settings.config())
            .context(|| "creating a durable table".to_string())?;
        Ok(CairnTable(table))
    }

    /// Whether the session holds snapshot `name`.
    pub fn snapshot_exists(&self, name: &str) -> Result<bool, Failure> {
        self.session
            .snapshot_exists(name)
            .context(|| "listing snapshots".to_string())
    }

    /// Opens snapshot `name` (saved with `label`) as a new table, which reads every file to
    /// verify its checksum. With `settings`, their disk cache and merge batch size replace the
    /// saved ones.
    pub fn open_snapshot(
        &self,
        name: &str,
        label: &str,
        settings: Option<&TableSettings>,
    ) -> Result<CairnTable, Failure> {
        let overrides = match settings.map(TableSettings::config) {
            Some(config) => SnapshotOverrides::default()
                .disk_cache(Some(config.disk_cache))
                .merge_batch_size(Some(config.merge_batch_size)),
            None => SnapshotOverrides::default(),
        };
        let table = self
            .session
            .open_snapshot(name, label, overrides)
            .context(|| format!("opening snapshot {name:?}"))?;
        Ok(CairnTable(table))
    }

    /// The directory holding snapshot `name`'s files.
    pub fn snapshot_dir(&self, name: &str) -> PathBuf {
        self.dir.join("snapshots").join(name)
    }

    /// Deletes snapshot `name` and checks that the session no longer lists it.
    pub fn delete_snapshot(&self, name: &str) -> Result<(), Failure> {
        self.session
            .delete_snapshot(name)
            .context(|| format!("deleting snapshot {name:?}"))?;
        let names = self
            .session
            .list_snapshots()
            .context(|| "listing the snapshots".to_string())?;
        if names.iter().any(|n| n == name) {
            return Err(Failure(format!(
                "snapshot {name:?} is still listed after its deletion"
            )));
        }
        Ok(())
    }

    /// Closes the session (and every table still open in it).
    pub fn close(self) {
        self.session.close();
    }
}

/// A table's shape (`Table::stats`), as the reports show it.
#[derive(Clone, Copy, Debug)]
pub struct TableShape {
    /// Levels below the write buffer.
    pub levels: usize,
    /// Runs a lookup consults.
    pub runs: usize,
    /// Memory held by Bloom filters and indexes, in bytes.
    pub filter_and_index_bytes: usize,
    /// The most merge steps any single update performed.
    pub merge_steps_max_per_update: u64,
    /// The engine's bound on merge steps per update for the current number of levels.
    pub merge_steps_bound_per_update: u64,
}

/// A table of a [`CairnSession`].
pub struct CairnTable(Table);

impl CairnTable {
    /// Whether the table's deepest level is written without Bloom filters (as its snapshot
    /// or its creation configured it).
    pub fn last_level_unfiltered(&self) -> bool {
        self.0.config().last_level_bloom == Some(BloomAlloc::None)
    }

    /// The table's Bloom allocation in words (as its snapshot or its creation configured it).
    pub fn bloom_description(&self) -> String {
        match self.0.config().bloom {
            BloomAlloc::BitsPerEntry(bits) => format!("Bloom {bits} bits per entry"),
            BloomAlloc::TargetFpr(fpr) => format!("Bloom FPR {fpr:e}"),
            BloomAlloc::None => "no Bloom filters".to_string(),
            BloomAlloc::LevelScaledFpr(fpr) => format!(
                "Bloom FPR {fpr:e} on the deepest filtered level, {}x lower per level above",
                cairn::SIZE_RATIO
            ),
            other => format!("Bloom {other:?}"),
        }
    }

    /// Inserts `pairs` (key, value) in one call.
    pub fn inserts<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<(), Failure> {
        self.0
            .inserts(pairs)
            .context(|| "inserting a batch".to_string())
    }

    /// Upserts `pairs` (key, value) in one call.
    pub fn upserts<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<(), Failure> {
        self.0
            .upserts(pairs)
            .context(|| "upserting a batch".to_string())
    }

    /// Applies `inserts` and `deletes` in one `updates` call.
    pub fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        let mut batch: Vec<(&[u8], Update<'_>)> = Vec::with_capacity(inserts.len() + deletes.len());
        batch.extend(
            inserts
                .iter()
                .map(|(k, v)| (&k[..], Update::Insert(&v[..]))),
        );
        batch.extend(deletes.iter().map(|k| (&k[..], Update::Delete)));
        self.0
            .updates(&batch)
            .context(|| "applying a batch".to_string())
    }

    /// Looks up `keys` in one call and maps each key's value (`None` when absent) through `f`.
    pub fn lookups_with<K: AsRef<[u8]>, T>(
        &self,
        keys: &[K],
        f: impl FnMut(Option<&[u8]>) -> T,
    ) -> Result<Vec<T>, Failure> {
        let results = self
            .0
            .lookups(keys)
            .context(|| "looking up a batch".to_string())?;
        Ok(results.iter().map(|r| r.value()).map(f).collect())
    }

    /// Looks up UTxO keys: `result[i]` is the value of `keys[i]`, if present.
    pub fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        self.lookups_with(keys, value_from)?.into_iter().collect()
    }

    /// A copy of the table as it is now, which later updates leave unchanged.
    pub fn duplicate(&self) -> Result<CairnTable, Failure> {
        let copy = self
            .0
            .duplicate()
            .context(|| "duplicating the table".to_string())?;
        Ok(CairnTable(copy))
    }

    /// Saves the table as snapshot `name` of its session, with `label`.
    pub fn save_snapshot(&self, name: &str, label: &str) -> Result<(), Failure> {
        self.0
            .save_snapshot(name, label)
            .context(|| format!("saving snapshot {name:?}"))
    }

    /// Finishes the table's merges in progress (and a flush in progress): the engine's own means
    /// of bringing a table to rest. Returns the merge steps performed.
    pub fn complete_merges(&self) -> Result<u64, Failure> {
        self.0
            .complete_merges()
            .context(|| "completing the merges in progress".to_string())
    }

    /// The merge work of each level so far (`TableStats::level_merges`: merges started and
    /// finished, and the steps this table's updates performed, level 1 first), with the steps
    /// `session`'s background merge thread performed, which no level includes.
    pub fn level_work(&self, session: &CairnSession) -> Result<LevelWork, Failure> {
        let stats = self
            .0
            .stats()
            .context(|| "reading the table statistics".to_string())?;
        let levels = stats.level_merges.iter().zip(1u32..);
        Ok(LevelWork {
            steps_unit: "merge steps (input entries consumed)".to_string(),
            levels: levels
                .map(|(level, number)| LevelWorkRow {
                    level: number,
                    started: Some(level.merges_started),
                    finished: level.merges_finished,
                    steps: level.merge_steps,
                })
                .collect(),
            unattributed_steps: Some(session.session.background_merge_steps()),
        })
    }

    /// Merges started and not yet finished.
    pub fn merges_in_progress(&self) -> Result<usize, Failure> {
        Ok(self
            .0
            .stats()
            .context(|| "reading the table statistics".to_string())?
            .merges_in_progress)
    }

    /// The table's shape now.
    pub fn shape(&self) -> Result<TableShape, Failure> {
        let stats = self
            .0
            .stats()
            .context(|| "reading the table statistics".to_string())?;
        Ok(TableShape {
            levels: stats.levels,
            runs: stats.runs,
            filter_and_index_bytes: stats.filter_and_index_bytes,
            merge_steps_max_per_update: stats.merge_steps_max_per_update,
            merge_steps_bound_per_update: stats.merge_steps_bound_per_update,
        })
    }

    /// Starts the incremental union of `inputs` (a new table, with the union as its debt).
    pub fn union(inputs: &[CairnTable]) -> Result<CairnTable, Failure> {
        let tables: Vec<&Table> = inputs.iter().map(|t| &t.0).collect();
        let union =
            Table::incremental_unions(&tables).context(|| "starting the union".to_string())?;
        Ok(CairnTable(union))
    }

    /// The credits still needed to finish the union.
    pub fn union_debt(&self) -> Result<u64, Failure> {
        self.0
            .remaining_union_debt()
            .context(|| "reading the remaining union debt".to_string())
    }

    /// Pays `credits` towards the union's debt; returns the credits left over.
    pub fn supply_union_credits(&self, credits: u64) -> Result<u64, Failure> {
        self.0
            .supply_union_credits(credits)
            .context(|| "supplying union credits".to_string())
    }

    /// Closes the table.
    pub fn close(self) {
        self.0.close();
    }
}

/// A duplicate of a table: frozen for reading, closed when dropped.
struct CairnReader(CairnTable);

impl Reader for CairnReader {
    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        self.0.lookups(keys)
    }
}

/// A Cairn session holding one UTxO table.
pub struct CairnEngine {
    // Declared before the session, so the table closes first.
    table: CairnTable,
    /// Kept open (it holds the directory's lock) for as long as the table is used.
    session: CairnSession,
    settings: String,
    background_merges: bool,
}

impl CairnEngine {
    /// Creates a new session and empty table in `dir` (`create`; refused when `dir` already
    /// holds a setup), or opens the setup snapshot of the session in `dir`.
    pub fn open(dir: &Path, create: bool, options: &EngineOptions) -> Result<CairnEngine, Failure> {
        let settings = TableSettings {
            kind: TableKind::Utxo,
            write_buffer: options.write_buffer,
            merge_batch_size: options.merge_batch_size,
            disk_cache: if options.direct_io {
                DiskCacheArg::None
            } else {
                DiskCacheArg::All
            },
            filters_for_hits: options.filters_for_hits,
        };
        let session = CairnSession::open_with_budget(
            dir,
            options.io,
            options.seed,
            options.wal,
            options.background_merges,
            options.read_budget,
        )?;
        let table = if create {
            if session.snapshot_exists(SETUP_SNAPSHOT)? {
                return Err(Failure(format!(
                    "{} already holds a benchmark table",
                    dir.display()
                )));
            }
            if options.wal {
                session.new_durable_table("utxo", &settings)?
            } else {
                session.new_table(&settings)?
            }
        } else {
            session
                .open_snapshot(SETUP_SNAPSHOT, SETUP_LABEL, Some(&settings))
                .map_err(|f| Failure(format!("{f} (run `utxo setup` first)")))?
        };
        let budget = match options.read_budget {
            0 => String::new(),
            reads => format!(", {reads} reads in flight shared by concurrent lookups"),
        };
        let description = format!(
            "compact index, {}{}, write buffer {}, merge batch {}, disk cache {}, I/O {}{}, \
             released run files written over (up to {} MiB){budget}",
            table.bloom_description(),
            if table.last_level_unfiltered() {
                " (none on the deepest level)"
            } else {
                ""
            },
            settings.write_buffer,
            settings.merge_batch_size,
            settings.disk_cache.name(),
            session.session.io_report(),
            if options.background_merges {
                ", background merges"
            } else {
                ""
            },
            SessionOptions::RECYCLE_BYTES_DEFAULT >> 20,
        );
        Ok(CairnEngine {
            table,
            session,
            settings: description,
            background_merges: options.background_merges,
        })
    }

    /// The table.
    pub fn table(&self) -> &CairnTable {
        &self.table
    }

    /// The session holding the table.
    pub fn session(&self) -> &CairnSession {
        &self.session
    }

    /// Closes the table, then the session.
    pub fn close(self) {
        self.table.close();
        self.session.close();
    }
}

impl Engine for CairnEngine {
    fn name(&self) -> &'static str {
        "cairn"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    /// Only with background merges does Cairn work beside the caller: otherwise its merges in
    /// progress are paid by updates, a bounded share each.
    fn background_work(&self) -> Option<String> {
        if !self.background_merges {
            return None;
        }
        match self.table.merges_in_progress() {
            Ok(0) => None,
            Ok(n) => Some(format!("{n} merges in progress, on the background thread")),
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// `TableStats::level_merges` of the table, and the session's background merge steps. A
    /// failure to read them leaves the record without them (the run itself is unaffected).
    fn level_work(&self) -> Option<LevelWork> {
        self.table.level_work(&self.session).ok()
    }

    fn load(&self, chunk: &[(Key, Value)]) -> Result<(), Failure> {
        self.table.inserts(chunk)
    }

    /// Settles the load by Cairn's own means, as RocksDB's `wait_for_compact` settles its:
    /// every merge in progress is completed, so no run pays for the setup's merges.
    fn finish_load(&self) -> Result<(), Failure> {
        let start = std::time::Instant::now();
        let steps = self.table.complete_merges()?;
        eprintln!(
            "cairn: completed the setup's merges in progress ({steps} merge steps, {:.1} s)",
            start.elapsed().as_secs_f64()
        );
        self.table.save_snapshot(SETUP_SNAPSHOT, SETUP_LABEL)
    }

    fn lookups(&self, keys: &[Key]) -> Result<Vec<Option<Value>>, Failure> {
        self.table.lookups(keys)
    }

    fn update(&self, inserts: &[(Key, Value)], deletes: &[Key]) -> Result<(), Failure> {
        self.table.update(inserts, deletes)
    }

    fn reader(&self) -> Result<Box<dyn Reader + '_>, Failure> {
        Ok(Box::new(CairnReader(self.table.duplicate()?)))
    }
}
