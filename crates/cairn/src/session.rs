//! Sessions: the public front of one directory, its tables, snapshots and durable tables.
//!
//! Owns: [`Session`], the public session API. What a session shares with its tables, cursors
//! and snapshots (directory, lock, file system, I/O, salt, page log, registries) is the
//! session core below it (`session_core`); this module only opens it and calls down.
//!
//! May call: `session_core` (opening and closing the session), `table` (the public handles
//! it returns), `lsm` (creating and opening tables), `snapshot` (a session's snapshots),
//! `durable` (its write-ahead log and durable tables), `durable_view` (a read-only view of
//! them), `log_view` (its log read without replaying it), `inspect` (looking inside snapshots),
//! `salvage` (reading what is intact of a damaged one),
//! `background` (its merge thread's counter), `fs` (the real file system by default), `io`
//! (the I/O report), `scrub` (its scrub reports), `batch` (write batches it writes) and
//! `transaction` (transactions it
//! begins) and `observe` (the span of an open). Must never touch: run contents.

use std::path::Path;
use std::sync::Arc;

use crate::background::Background;
use crate::config::TableConfig;
use crate::durable::{Durable, DurableTables};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, RealFs};
use crate::io::{IoBackendKind, IoReport};
use crate::lsm::Lsm;
use crate::session_core::{SessionCore, SessionOptions};
use crate::snapshot::{self, SnapshotOverrides};
use crate::table::Table;

/// A session: the owner of one directory and of the tables in it.
///
/// `Session` is a cheap, cloneable handle (an `Arc` inside), `Send + Sync`. The session stays
/// open, holding its directory's lock, while any handle to it, or to one of its tables or
/// cursors, is alive: a function may open a session, create a table and return only the table.
/// The lock is released when the last of them is dropped, or at once by [`Session::close`],
/// which also closes every table and cursor of the session.
#[derive(Debug, Clone)]
pub struct Session {
    core: Arc<SessionCore>,
    /// The write-ahead log's writer and catalog, for a session opened with a log; shared with
    /// its durable tables' handles.
    durable: Option<Arc<Durable>>,
    /// The durable tables, kept alive by the session's handles (not by its tables).
    durable_tables: Arc<DurableTables>,
}

impl Session {
    /// Opens the session in `dir` on the real file system with the default options: creates
    /// `dir` if it is missing and a new session in it if it is empty, recovers the session
    /// otherwise, with its write-ahead log and named durable tables ([`Session::table`]).
    ///
    /// ```
    /// use cairn::{Session, TableConfig};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("db");
    /// let session = Session::open(&path)?;
    /// let accounts = session.table("accounts", TableConfig::default())?;
    /// accounts.insert("alice", "100")?;
    /// session.close();
    /// // A restart (or a crash: see `SyncPolicy` for what a crash may lose) finds it again.
    /// let session = Session::open(&path)?;
    /// let accounts = session.table("accounts", TableConfig::default())?;
    /// assert_eq!(accounts.get("alice")?.as_deref(), Some(&b"100"[..]));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// Errors: as [`Session::open_with`].
    pub fn open(dir: impl AsRef<Path>) -> Result<Session> {
        Session::open_with(Arc::new(RealFs), dir, SessionOptions::default())
    }

    /// Opens the session in `dir` on the real file system with the given options (the I/O
    /// backend, the salt of a new session).
    ///
    /// ```
    /// use cairn::{IoBackendKind, Session, SessionOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let options = SessionOptions::default().io_backend(IoBackendKind::Pread);
    /// let session = Session::open_with_options(dir.path(), options)?;
    /// assert_eq!(session.io_backend(), IoBackendKind::Pread);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// Errors: as [`Session::open_with`].
    pub fn open_with_options(dir: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        Session::open_with(Arc::new(RealFs), dir, options)
    }

    /// Opens the session in `dir` on the given file system (the real one, a simulated one for
    /// tests, or your own implementation of [`FileSystem`]) with the given options.
    ///
    /// A new session's files are fsynced, and so is the parent of a directory it created
    /// ([`SessionOptions::create_if_missing`]); a directory that existed belongs to the caller,
    /// whose entry in its parent must be durable before the session is relied on. A first open
    /// that failed half way can simply be retried. With a log ([`SessionOptions::log`], the
    /// default), the durable tables are recovered: each from its newest checkpoint plus the log
    /// after it, then a checkpoint folds in what was replayed.
    ///
    /// With [`SessionOptions::read_only`], the directory must already be a session, and the
    /// session works through a file system that refuses every change: it takes no lock, removes
    /// nothing (not even what a crashed save left behind), and every operation that would write
    /// fails with [`Error::ReadOnly`]: creating tables, updates, unions, union credits, saving,
    /// deleting, importing and exporting snapshots, and a commit with updates pending. Snapshots
    /// are opened in place (no links into `active/`); merges they record as in progress stay
    /// unfinished, their inputs read directly. Another process may own the directory meanwhile:
    /// a published snapshot is never modified, only deleted, so whatever a read-only session
    /// reads of a snapshot is either that snapshot's bytes or a missing-file error.
    ///
    /// Errors: [`Error::SessionDirMissing`] (missing, or not a directory, unless created),
    /// [`Error::LogCorrupted`] (see [`crate::RecoveryMode`]), [`Error::SessionLocked`] if
    /// another live session
    /// holds the directory (at once for a session of this process; after half a second of
    /// retries for another process, since a child that a thread of this process is spawning
    /// holds a just-closed session's lock until it execs), [`Error::SessionCorrupted`] if a
    /// non-empty directory (any directory, when read-only) is not a session,
    /// [`Error::UnsupportedVersion`] for a session written by a newer build.
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        options: SessionOptions,
    ) -> Result<Session> {
        let span = crate::observe::session_open(dir.as_ref(), options.read_only);
        let core = SessionCore::open(fs, dir.as_ref(), &options)?;
        let (durable, durable_tables) = match options.log {
            // A read-only session ignores the log (see `SessionOptions::log`).
            Some(log) if !core.read_only() => {
                let durable = crate::durable::open(&core, log, options.resolve_functions)?;
                let tables = durable.tables.clone();
                (Some(Arc::new(durable)), tables)
            }
            _ => (None, Arc::new(DurableTables::default())),
        };
        if crate::observe::TRACING_ON {
            span.record("durable_tables", durable_tables.names().len() as u64);
        }
        Ok(Session {
            core,
            durable,
            durable_tables,
        })
    }

    /// Merge steps the session's background merge thread has performed so far (0 without
    /// [`SessionOptions::background_merges`]). Steps done there are not counted again in
    /// [`crate::TableStats::merge_steps_total`], which counts the steps updates performed.
    pub fn background_merge_steps(&self) -> u64 {
        self.core.background().map_or(0, Background::steps)
    }

    /// Whether the session was opened with [`SessionOptions::read_only`].
    pub fn is_read_only(&self) -> bool {
        self.core.read_only()
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        self.core.dir()
    }

    /// The salt of the Bloom-filter hashes.
    pub fn salt(&self) -> u64 {
        self.core.salt()
    }

    /// The block I/O backend in use (`Uring` or `Pread`).
    pub fn io_backend(&self) -> IoBackendKind {
        self.core.io().kind()
    }

    /// Creates an empty *ephemeral* table: anonymous, not logged, gone when the session closes
    /// unless saved as a snapshot ([`Table::save_snapshot`]), lsm-tree's model. Its updates pay
    /// no log. For a named table that survives restarts, see [`Session::table`].
    ///
    /// Errors: [`Error::InvalidConfig`] for an invalid config, [`Error::ReadOnly`],
    /// [`Error::SessionClosed`] after [`Session::close`].
    pub fn new_table(&self, config: TableConfig) -> Result<Table> {
        self.core.check_open()?;
        self.core.check_writable("creating a table")?;
        Ok(Table::new(Lsm::new(self.core.clone(), config)?, None))
    }

    /// Opens snapshot `name` as a new table. `label` must equal the label it was saved with.
    ///
    /// Every file of the snapshot is read and checked against its CRC32C before the table is
    /// returned (O(table size) reads); merges that were in progress are restarted and caught up
    /// with the credits they had been paid. Errors: [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::SnapshotLabelMismatch`],
    /// [`Error::SnapshotCorrupted`] naming the bad file, [`Error::InvalidConfig`] when a custom
    /// resolve function is needed and not given.
    pub fn open_snapshot(
        &self,
        name: &str,
        label: &str,
        overrides: SnapshotOverrides,
    ) -> Result<Table> {
        self.core.check_open()?;
        snapshot::validate_name(name)?;
        let lsm = Lsm::open_snapshot(self.core.clone(), name, label, overrides)?;
        Ok(Table::new(lsm, None))
    }

    /// Names of the saved snapshots, sorted: every directory of `snapshots/` whose name is a
    /// valid snapshot name (anything else there is not a snapshot and is ignored), so that every
    /// name listed can be passed to [`Session::open_snapshot`].
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::Io`].
    pub fn list_snapshots(&self) -> Result<Vec<String>> {
        self.core.check_open()?;
        snapshot::list(&self.core)
    }

    /// Whether snapshot `name` exists.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`], [`Error::Io`].
    pub fn snapshot_exists(&self, name: &str) -> Result<bool> {
        self.core.check_open()?;
        snapshot::validate_name(name)?;
        snapshot::exists(&self.core, name)
    }

    /// Deletes snapshot `name` (its files; tables opened from it are not affected).
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::Io`] (the snapshot is then either intact or gone: it is
    /// renamed away first).
    pub fn delete_snapshot(&self, name: &str) -> Result<()> {
        self.core.check_open()?;
        snapshot::validate_name(name)?;
        self.core.check_writable("deleting a snapshot")?;
        snapshot::delete(&self.core, name)
    }

    /// Copies snapshot `name` into `target`, a directory that must not exist yet and whose parent
    /// must (on the same file system as the session). The copy is fsynced. It can be imported into a session with
    /// the same salt (this one, a restored copy of its directory, or one opened with
    /// [`SessionOptions::salt`] set to [`Session::salt`]): Bloom filters are built with the salt.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::SnapshotDirectory`] (the target exists, or its parent does not), [`Error::Io`].
    pub fn export_snapshot(&self, name: &str, target: impl AsRef<Path>) -> Result<()> {
        self.core.check_open()?;
        snapshot::validate_name(name)?;
        self.core.check_writable("exporting a snapshot")?;
        snapshot::export(&self.core, name, target.as_ref())
    }

    /// Copies the snapshot exported in `source` into this session as snapshot `name`. The copy
    /// is atomic; its contents are verified when the snapshot is opened.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`], [`Error::SnapshotExists`],
    /// [`Error::SnapshotDirectory`] (the source is missing), [`Error::Io`] (the snapshot is then
    /// either absent or complete).
    pub fn import_snapshot(&self, name: &str, source: impl AsRef<Path>) -> Result<()> {
        self.core.check_open()?;
        self.core.check_writable("importing a snapshot")?;
        snapshot::import(&self.core, name, source.as_ref())
    }

    /// The durable table `name` (1 to 64 characters from `[a-z0-9_-]`), created with `config`
    /// if the session has no table of that name: the usual way to get a table. Its updates go
    /// through the session's write-ahead log, so that it survives a restart and a crash (as
    /// its newest checkpoint plus the log after it; see [`crate::SyncPolicy`] for which writes a
    /// crash may lose and [`crate::LogOptions::checkpoint_bytes`] for the automatic
    /// checkpoints). A table that exists keeps the configuration it was created with; `config`
    /// must agree with it on what decides its contents (the resolve function, authentication
    /// and its hash). For a table that lives only until the session closes, see
    /// [`Session::new_table`].
    ///
    /// Cost: a lookup in the session's registry; for a new table, one empty checkpoint and one
    /// catalog write, each fsynced.
    ///
    /// Errors: [`Error::NotDurable`] for a session opened without a log,
    /// [`Error::InvalidConfig`] (a bad name, a config that disagrees with the existing table's,
    /// a custom resolve function not registered in [`SessionOptions::resolve_functions`]),
    /// [`Error::ReadOnly`],
    /// [`Error::SessionClosed`], [`Error::Io`].
    pub fn table(&self, name: &str, config: TableConfig) -> Result<Table> {
        self.core.check_open()?;
        // A read-only session opens no log: it says so rather than "not durable".
        self.core.check_writable("opening a named table")?;
        let durable = self.durable()?;
        let lsm = durable.open_or_create(&self.core, name, config)?;
        Ok(Table::new(lsm, Some(durable.clone())))
    }

    /// Creates the durable table `name` (1 to 64 characters from `[a-z0-9_-]`): a table whose
    /// updates go through the session's write-ahead log, so that it survives a crash as its
    /// newest checkpoint plus the log after it ([`Session::checkpoint`]). Reopening the session
    /// with a log recovers it; [`Session::durable_table`] returns it. Cost: one empty checkpoint
    /// and one catalog write, each fsynced.
    ///
    /// Errors: [`Error::NotDurable`] without a log, [`Error::InvalidConfig`] (a bad name, a name
    /// in use, a custom resolve function not registered in
    /// [`SessionOptions::resolve_functions`]), and as
    /// [`Session::new_table`].
    pub fn create_durable_table(&self, name: &str, config: TableConfig) -> Result<Table> {
        self.core.check_open()?;
        self.core.check_writable("creating a table")?;
        let durable = self.durable()?;
        let lsm = durable.create(&self.core, name, config)?;
        Ok(Table::new(lsm, Some(durable.clone())))
    }

    /// The durable table `name` (created, or recovered when the session opened), or `None`.
    pub fn durable_table(&self, name: &str) -> Option<Table> {
        let lsm = self.durable_tables.get(name)?;
        Some(Table::new(lsm, self.durable.clone()))
    }

    /// Names of the session's durable tables, sorted.
    pub fn durable_tables(&self) -> Vec<String> {
        self.durable_tables.names()
    }

    /// Writes one batch of updates across several durable tables of this session, atomically:
    /// it is logged as one record and recovered all or nothing. Returns once the batch is
    /// applied in memory and appended to the log's buffer (no I/O; it waits only if the buffer
    /// is full), with the [`crate::Durability`] of its record: wait for it, poll it, await it or
    /// give it a callback. Concurrent writers share fsyncs (group commit).
    ///
    /// A table may appear more than once; its parts apply in order. Errors (nothing is logged
    /// or applied): [`Error::NotDurable`] (no log, or a table that is not durable),
    /// [`Error::InvalidConfig`] (a table of another session), the input errors of
    /// [`Table::updates`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::LogFailed`]. An I/O error while applying the batch to a table (a flush or
    /// merge) breaks that table, after the batch was logged: recovery applies it whole.
    pub fn write<K: AsRef<[u8]>>(
        &self,
        parts: &[(&Table, &[(K, crate::Update<'_>)])],
    ) -> Result<crate::Durability> {
        self.core.check_open()?;
        let durable = self.durable()?;
        let parts: Vec<(&Lsm, &[(K, crate::Update<'_>)])> =
            parts.iter().map(|(t, batch)| (t.lsm(), *batch)).collect();
        durable.write(&self.core, &parts)
    }

    /// Begins a read-modify-write transaction over the session's durable tables (see
    /// [`crate::Transaction`]): serializable, with a view of every durable table as of now,
    /// consistent across tables. Cost: one duplicate per durable table (no I/O), taken while
    /// holding the write order.
    ///
    /// Errors: [`Error::NotDurable`] without a log, [`Error::SessionClosed`],
    /// [`Error::TableBroken`] and [`Error::Io`] from duplicating a table.
    pub fn transaction(&self) -> Result<crate::Transaction> {
        self.core.check_open()?;
        crate::transaction::Transaction::begin(self.core.clone(), self.durable()?.clone())
    }

    /// Runs `body` in a transaction and commits it, running it again (in a new transaction)
    /// when the commit finds a conflict, up to [`Session::TRANSACT_ATTEMPTS_MAX`] times, after a
    /// pause that grows with the attempts (a yield, then a random sleep of up to 2^n
    /// microseconds, at most about 4 ms) so that clients contending for one key take turns
    /// instead of failing each other in lockstep.
    /// Returns what `body` returned with the commit's [`crate::Durability`] (`None` if
    /// `body` wrote nothing). An error from `body` ends it: the transaction is dropped,
    /// nothing written.
    ///
    /// Errors: those of `body`, of [`Session::transaction`] and of
    /// [`crate::Transaction::commit`]; [`Error::TransactionConflict`] after the last attempt.
    pub fn transact<T>(
        &self,
        mut body: impl FnMut(&mut crate::Transaction) -> Result<T>,
    ) -> Result<(T, Option<crate::Durability>)> {
        let mut attempt = 1;
        loop {
            let mut tx = self.transaction()?;
            let out = body(&mut tx)?;
            match tx.commit() {
                Ok(durability) => return Ok((out, durability)),
                Err(e) if e.is_retryable() && attempt < Session::TRANSACT_ATTEMPTS_MAX => {
                    backoff(attempt);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Most attempts of [`Session::transact`] (with its pauses, about 0.2 s in all at most).
    pub const TRANSACT_ATTEMPTS_MAX: u32 = 64;

    /// Writes `batch` (updates across durable tables of this session, each table's keys of
    /// their own type) atomically, as one log record: as [`Session::write`], which takes a
    /// slice of parts with one key type instead.
    ///
    /// Errors: as [`Session::write`].
    pub fn write_batch(&self, batch: &crate::batch::WriteBatch) -> Result<crate::Durability> {
        self.core.check_open()?;
        let durable = self.durable()?;
        let parts = batch.parts();
        let parts: Vec<crate::durable::TablePart<'_>> = parts
            .iter()
            .map(|(t, updates)| (*t, &updates[..]))
            .collect();
        durable.write(&self.core, &parts)
    }

    /// Saves every durable table as a new checkpoint (a snapshot, in O(log n) file operations
    /// per table) after syncing the log, switches the catalog to them, and removes the old
    /// checkpoints and the log segments that only they needed. Writes wait meanwhile. A crash at
    /// any point leaves either the old checkpoints and the whole log, or the new ones and the
    /// log after them.
    ///
    /// Errors: [`Error::NotDurable`] without a log, [`Error::LogFailed`], and as
    /// [`Table::save_snapshot`].
    pub fn checkpoint(&self) -> Result<()> {
        self.core.check_open()?;
        self.durable()?.checkpoint(&self.core)
    }

    /// Writes and fsyncs every record logged so far, whatever the sync policy, and waits for
    /// it. Errors: [`Error::NotDurable`] without a log, [`Error::LogFailed`].
    pub fn sync_log(&self) -> Result<()> {
        self.core.check_open()?;
        self.durable()?.log.sync()
    }

    /// A read-only view of the session's durable tables as their owner sees them: each one's
    /// newest checkpoint, opened in place, with the log records after it replayed into memory
    /// (nothing is written, no lock is taken), as of the last record read. For tools that
    /// look at a live session from another process (`cairn get --table`); the owner's writes
    /// after the view opened are not seen.
    ///
    /// Cost: opening each checkpoint (as [`Session::open_snapshot`]) and reading the log after
    /// the oldest one; memory: each key the log changed since the checkpoints (module
    /// `durable_view`).
    ///
    /// Errors: [`Error::NotDurable`] for a session without a log, [`Error::LogCorrupted`],
    /// [`Error::InvalidConfig`] for a table with a custom resolve function, the errors of
    /// [`Session::open_snapshot`], [`Error::SessionClosed`].
    pub fn durable_view(&self) -> Result<crate::DurableView> {
        self.core.check_open()?;
        crate::durable_view::open(&self.core)
    }

    /// Reads the session's write-ahead log without replaying it: the durable tables its
    /// catalog lists, its segments, and every record in order, decoded and handed to
    /// `on_record` (which may stop the reading with [`std::ops::ControlFlow::Break`]), with
    /// the chain checked as recovery checks it (damage is reported in
    /// [`crate::inspect::LogView::damage`], not as an error). Works on a read-only session,
    /// beside the log's owner: a record it is writing reads as a torn tail.
    ///
    /// Cost: reads every segment once, one in memory at a time.
    ///
    /// Errors: [`Error::NotDurable`] for a session without a log, [`Error::CorruptFile`] and
    /// the decoders' errors for a damaged catalog, [`Error::SessionClosed`], [`Error::Io`].
    pub fn read_log(
        &self,
        on_record: &mut dyn FnMut(&crate::inspect::LogRecord) -> std::ops::ControlFlow<()>,
    ) -> Result<crate::inspect::LogView> {
        self.core.check_open()?;
        crate::log_view::read_log(&**self.core.fs(), self.core.dir(), on_record)
    }

    /// The durable tables the catalog of the session's write-ahead log lists, read from the
    /// catalog alone (no segment is read): what [`Session::read_log`] reports as
    /// [`crate::inspect::LogView::tables`]. Works on a read-only session.
    ///
    /// Errors: as [`Session::read_log`].
    pub fn log_tables(&self) -> Result<Vec<crate::inspect::LogTableEntry>> {
        self.core.check_open()?;
        crate::log_view::log_tables(&**self.core.fs(), self.core.dir())
    }

    /// Counters of the session's log since it opened: records, groups, fsyncs, bytes.
    /// Errors: [`Error::NotDurable`] without a log.
    pub fn log_stats(&self) -> Result<crate::LogStats> {
        Ok(self.durable()?.log.stats())
    }

    fn durable(&self) -> Result<&Arc<Durable>> {
        self.durable
            .as_ref()
            .ok_or_else(|| Error::NotDurable("the session was opened without a log".into()))
    }

    /// What snapshot `name` holds, read from its metadata and index files: label,
    /// configuration, runs with their place, entries, pages and bytes, files and bytes in all,
    /// and an authenticated table's state root. Nothing is verified (a damaged file may still
    /// give an answer; see [`Session::verify_snapshot`]). Cost: reads the metadata and every
    /// run's index file.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::CorruptFile`] and the rest of the decoders' errors
    /// for a damaged metadata or index file, [`Error::Io`].
    pub fn snapshot_info(&self, name: &str) -> Result<crate::inspect::SnapshotInfo> {
        self.core.check_open()?;
        crate::inspect::info(&self.core, name)
    }

    /// Layout and filter quality of every run of snapshot `name`: entries by operation, blobs,
    /// pages and overflow pages, file sizes, Bloom bits per key and hashes, the false-positive
    /// rate measured by probing `sample` keys that are not in the run, and the index kind and
    /// size. Cost: reads every file once (as [`Session::verify_snapshot`]'s file checks),
    /// `sample` filter probes per run.
    ///
    /// Errors: as [`Session::snapshot_info`], and [`Error::CorruptFile`] naming the first
    /// damaged file.
    pub fn snapshot_stats(&self, name: &str, sample: u64) -> Result<Vec<crate::inspect::RunStats>> {
        self.core.check_open()?;
        crate::inspect::stats(&self.core, name, sample)
    }

    /// Checks every file of snapshot `name` and reports every problem with its file and, where
    /// one place can be named, its offset. Besides each file's size and CRC32C, it checks what
    /// a checksum cannot vouch for: each page fully decoded, keys strictly increasing across
    /// each run, blob references inside the blob file, every key found by the run's index on
    /// its own page and passed by its Bloom filter, the entry counts, the metadata's runs and
    /// levels, no file missing and none unexpected. When the files are sound, the table is
    /// opened and read whole, and an authenticated table's state root is recomputed from its
    /// contents and compared with the recorded one (a custom resolve function, which cannot be
    /// named here, skips these; the report says so).
    ///
    /// Works in a read-only session (what `cairn verify` uses), which leaves the directory
    /// untouched. `progress` is called as work is done.
    ///
    /// Cost: reads every file once, then the table once through a cursor, then (authenticated)
    /// 2^d more times for the smallest d that keeps a pass's leaves (96 bytes per entry) within
    /// [`crate::inspect::VerifyOptions::root_memory_bytes`]. Memory: the largest run's filter
    /// and index, a 1 MiB read buffer and the longest value, and that leaf budget.
    ///
    /// Errors (problems found are not errors): [`Error::SessionClosed`],
    /// [`Error::InvalidSnapshotName`], [`Error::SnapshotMissing`], [`Error::Io`] listing the
    /// snapshot directory.
    pub fn verify_snapshot(
        &self,
        name: &str,
        options: crate::inspect::VerifyOptions,
        progress: &mut dyn FnMut(crate::inspect::VerifyProgress),
    ) -> Result<crate::inspect::VerifyReport> {
        self.core.check_open()?;
        crate::inspect::verify(&self.core, name, options, progress)
    }

    /// Saves what is intact of damaged snapshot `from` as a new snapshot `to` (with the same
    /// label and configuration), and reports what was lost; `from` is left as it is. With `to`
    /// `None`, only reads and reports (in a read-only session too).
    ///
    /// Only `from`'s metadata file must be intact. Every run file is read page by page; a page
    /// that fails its recorded CRC32C or does not decode, a blob that fails its checksum, a
    /// missing file, is dropped and recorded as a loss ([`crate::inspect::SalvageLoss`]) with
    /// the range of keys it may have held; the rest is resolved as the table's reads resolve it
    /// (newest version first, upserts through the resolve function, a pending union's inputs
    /// folded left to right). A key a loss may have affected is missing from `to` or has the
    /// value an older run gave it; every other key has exactly its value in `from`
    /// ([`crate::inspect::SalvageReport::may_have_lost`]). An authenticated table's trie is
    /// rebuilt from the salvaged contents: `to` has a new state root, in the report. A sound
    /// snapshot is copied whole (its contents resolved, merges done): the report is then
    /// complete ([`crate::inspect::SalvageReport::is_complete`]).
    ///
    /// `progress` is called every 64 Ki keys and at the end.
    ///
    /// Cost: one sequential read of `from`'s run files (each blob read where referenced, each
    /// 4 KiB checked), and the writes of a table of the salvaged keys built by inserts and
    /// saved. Memory: a 1 MiB buffer per run read at once, a page's entries per run, the losses,
    /// and the new table's write buffer.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::ReadOnly`] (with `to`),
    /// [`Error::InvalidSnapshotName`], [`Error::SnapshotMissing`] (`from`),
    /// [`Error::SnapshotExists`] (`to`), [`Error::SnapshotCorrupted`] for a damaged metadata
    /// file of `from` (which says which runs the table reads, in what order: nothing can be
    /// salvaged with certainty without it), [`Error::InvalidConfig`] for a custom resolve
    /// function not given in `overrides`, I/O errors writing `to`.
    pub fn salvage_snapshot(
        &self,
        from: &str,
        to: Option<&str>,
        overrides: SnapshotOverrides,
        progress: &mut dyn FnMut(crate::inspect::SalvageProgress),
    ) -> Result<crate::inspect::SalvageReport> {
        self.core.check_open()?;
        if let Some(to) = to {
            self.core.check_writable("a salvage")?;
            snapshot::validate_name(to)?;
            if snapshot::exists(&self.core, to)? {
                return Err(Error::SnapshotExists(to.to_string()));
            }
        }
        let mut salvage = crate::salvage::Salvage::open(&self.core, from, overrides)?;
        let table = match to {
            Some(_) => Some(self.new_table(salvage.config.clone())?),
            None => None,
        };
        const BATCH: usize = 1024;
        let mut batch = Vec::with_capacity(BATCH);
        let flush = |batch: &mut Vec<crate::salvage::Salvaged>| {
            let Some(table) = &table else {
                batch.clear();
                return Ok(());
            };
            let updates: Vec<(&[u8], crate::Update<'_>)> = batch
                .iter()
                .map(|(k, v, blob)| {
                    let update = match blob {
                        Some(blob) => crate::Update::InsertWithBlob(v, blob),
                        None => crate::Update::Insert(v),
                    };
                    (k.as_slice(), update)
                })
                .collect();
            let done = table.updates(&updates);
            batch.clear();
            done
        };
        while let Some(entry) = salvage.next()? {
            batch.push(entry);
            if batch.len() == BATCH {
                flush(&mut batch)?;
            }
            if salvage.progress().keys % (64 << 10) == 0 {
                progress(salvage.progress());
            }
        }
        flush(&mut batch)?;
        let mut report = salvage.report();
        if let (Some(table), Some(to)) = (&table, to) {
            if table.config().auth.is_some() {
                report.root = Some(table.commit()?.root);
            }
            table.save_snapshot(to, &salvage.label)?;
        }
        progress(salvage.progress());
        Ok(report)
    }

    /// Reads every run of every open table of the session and checks every byte against its
    /// recorded checksums (each file's CRC32C and, for runs of format version 2, each page's
    /// and blob chunk's), and reports what it found; it changes nothing. Damage in a page no
    /// one has read yet is found here rather than by the lookup, cursor or merge that would
    /// read it (which fail with [`Error::CorruptFile`], never returning damaged data).
    /// Snapshots on disk are checked by [`Session::verify_snapshot`].
    ///
    /// Cost: one sequential read of the open tables' runs (about their size on disk, through
    /// the page cache), unthrottled; it runs beside the tables' reads and updates without
    /// blocking them. A background scrub at a bounded pace: [`SessionOptions::scrub_interval`].
    pub fn scrub(&self) -> Result<crate::ScrubReport> {
        self.core.check_open()?;
        let runs = self.core.open_runs();
        let core = &self.core;
        Ok(crate::scrub::scrub_runs(&runs, None, &|| core.is_open()))
    }

    /// The report of the last scrub the background scrub finished
    /// ([`SessionOptions::scrub_interval`]); `None` before the first or without one.
    pub fn last_scrub(&self) -> Option<crate::ScrubReport> {
        self.core.last_scrub()
    }

    /// Closes the session now, for every handle: closes every table and cursor (their later
    /// calls fail with [`Error::TableClosed`] and [`Error::CursorClosed`], and this session's
    /// with [`Error::SessionClosed`]), removes the files of released runs where it can (the next
    /// session removes any that remain), and releases the directory lock. Idempotent. Dropping
    /// every handle has the same effect without the need to call it, except one: `close` first
    /// takes a checkpoint of the durable tables when anything was logged since the last one
    /// ([`Session::checkpoint`]; in O(log n) file operations per table plus the write of each
    /// write buffer), so that the next open replays no log. Should it fail, the error is logged
    /// (`log::warn!`) and the next open replays the log instead; nothing is lost.
    pub fn close(&self) {
        if let Some(durable) = &self.durable {
            durable.checkpoint_at_close(&self.core);
        }
        self.core.close();
    }

    /// Removes now every file queued for removal (released runs and page-log segments no open
    /// version reaches) and the files kept for reuse, instead of a bounded step at a time by
    /// later operations. For tools and tests that count files; a running application has no
    /// need of it. Cost: one file removal per queued file.
    ///
    /// Errors: [`Error::Io`] (the files not yet removed stay queued).
    pub fn remove_released_files(&self) -> Result<()> {
        self.core.removals().remove_all(&**self.core.fs())
    }

    /// Whether the session is open.
    pub fn is_open(&self) -> bool {
        self.core.is_open()
    }

    /// How block I/O really works in this session, with the reason for every fallback: the
    /// backend in use and why io_uring is not (if it is not), and whether reads that ask for
    /// `O_DIRECT` bypass the page cache (probed once in `active/` when the session opened). Each
    /// fallback is also logged once through the `log` facade.
    pub fn io_report(&self) -> IoReport {
        self.core.io().report()
    }
}

/// The pause of [`Session::transact`] after failed attempt `attempt` (1, 2, ...): a yield for the
/// first two, then a sleep drawn uniformly from 0 to `2^min(attempt, 12)` microseconds.
fn backoff(attempt: u32) {
    if attempt <= 2 {
        std::thread::yield_now();
        return;
    }
    let ceiling = 1u64 << attempt.min(12);
    let draw = getrandom::u64().unwrap_or(ceiling / 2) % ceiling;
    std::thread::sleep(std::time::Duration::from_micros(draw));
}
