//! Sessions: one directory, its lock, its salt, its block I/O engine and its tables.
//!
//! Owns: [`Session`], [`SessionOptions`], the session metadata file and the directory layout:
//!
//! ```text
//! <dir>/lock          exclusive lock (flock) held while the session is open
//! <dir>/metadata      format version and the Bloom-filter salt (docs/format/session.md)
//! <dir>/active/       the run files of open tables and the page log's segments; emptied
//!                     when the session is opened
//! <dir>/snapshots/    saved tables (one directory each)
//! ```
//!
//! May call: `fs`, `io`, `pagelog` (its page log), `table` (creating tables), `cursor`
//! (closing cursors), `inspect`
//! (looking inside snapshots), `run` (run numbers), `snapshot` (a session's snapshots), `durable` (its write-ahead
//! log and durable tables), `background` (its merge thread). Must never touch: run contents.
//!
//! A session opened read-only ([`SessionOptions::read_only`]) works through a file system that
//! refuses every change, takes no lock, and opens snapshots in place.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::background::Background;
use crate::config::TableConfig;
use crate::cursor::CursorInner;
use crate::error::{Error, Result};
use crate::fs::{
    read_all, write_atomic, DeferredRemovals, FileLock, FileSystem, ReadOnlyFs, RealFs,
};
use crate::io::{BlockIo, IoBackendKind, IoReport};
use crate::pagelog::PageLog;
use crate::snapshot::SnapshotOverrides;
use crate::snapshot::{self};
use crate::table::{Table, TableInner};

/// Table ids are unique per process (as run numbers are, `run::next_run_number`).
static TABLE_IDS: AtomicU64 = AtomicU64::new(0);

const METADATA_MAGIC: &[u8; 8] = b"CRNSESSN";
const METADATA_VERSION: u32 = 1;
const METADATA_BYTES: usize = 8 + 4 + 8 + 4;

/// Encodes the session metadata file.
fn encode_metadata(salt: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(METADATA_BYTES);
    out.extend_from_slice(METADATA_MAGIC);
    out.extend_from_slice(&METADATA_VERSION.to_le_bytes());
    out.extend_from_slice(&salt.to_le_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes the session metadata file (total: any bytes give a salt or an error).
pub(crate) fn decode_metadata(bytes: &[u8]) -> Result<u64> {
    let bad = |detail: &str| Error::corrupt("session metadata", detail.to_string());
    if bytes.len() < 12 || &bytes[..8] != METADATA_MAGIC {
        return Err(bad("bad magic"));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let unsupported = Error::UnsupportedVersion {
        what: "session metadata",
        found: version,
        supported: METADATA_VERSION,
    };
    if bytes.len() != METADATA_BYTES {
        // Another length: a newer format (whose layout may differ), or damage.
        return Err(if version != METADATA_VERSION {
            unsupported
        } else {
            bad("wrong length")
        });
    }
    // This layout: the checksum first, so that a damaged version field is corruption.
    let crc = u32::from_le_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if crc != crc32c::crc32c(&bytes[..20]) {
        return Err(bad("checksum mismatch"));
    }
    if version != METADATA_VERSION {
        return Err(unsupported);
    }
    let mut salt = [0u8; 8];
    salt.copy_from_slice(&bytes[12..20]);
    Ok(u64::from_le_bytes(salt))
}

/// How a session is opened.
#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    /// The block I/O backend for batched lookups.
    pub io_backend: IoBackendKind,
    /// The salt of a new session; random when `None`. Ignored when restoring (the stored salt is
    /// used).
    pub salt: Option<u64>,
    /// Opens an existing session for reading only: its snapshots can be listed, inspected,
    /// verified, opened, looked up and iterated, and nothing in the directory is ever written,
    /// removed or locked (see [`Session::open_with`] for the exact guarantees). For tools that
    /// look inside a database, possibly while the process that owns it is running.
    pub read_only: bool,
    /// Opens the session with a write-ahead log (`<dir>/log/`), so that it can hold durable
    /// tables ([`Session::create_durable_table`]): recovery runs as the session opens. `None`:
    /// no log, no durable tables, nothing extra to pay. Ignored by a read-only session.
    pub log: Option<crate::LogOptions>,
    /// Runs merge work on a background thread of the session, ahead of the credits updates
    /// pay, so that updates usually find their merge work done and a second core does it.
    /// Every update keeps the bound on the merge steps it performs itself
    /// ([`crate::TableStats::merge_steps_bound_per_update`]), and may additionally wait for one chunk of
    /// background steps (512) on a merge it needs. Snapshots, duplicates and recovery are
    /// unchanged: the background only does earlier what updates would do later. Off by default
    /// (updates then do all merge work themselves, deterministically). Ignored by a read-only
    /// session.
    pub background_merges: bool,
    /// The most bytes of released run files the session keeps to write new runs over, instead
    /// of freeing their blocks and allocating new ones. On a file system that trims what is
    /// freed (ext4 mounted with `discard`, common on SSDs and virtual disks), every freed
    /// range becomes a TRIM request that reads wait behind; written over, the space is never
    /// trimmed. Costs that much disk space at most, on top of the live runs; the files are
    /// removed when the session's last open table closes, or the session does. 0 frees every
    /// released file. Default [`SessionOptions::RECYCLE_BYTES_DEFAULT`]. Ignored by a
    /// read-only session.
    pub recycle_bytes: u64,
}

impl SessionOptions {
    /// The default of [`SessionOptions::recycle_bytes`]: 1 GiB.
    pub const RECYCLE_BYTES_DEFAULT: u64 = 1 << 30;
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            io_backend: IoBackendKind::Auto,
            salt: None,
            read_only: false,
            log: None,
            background_merges: false,
            recycle_bytes: SessionOptions::RECYCLE_BYTES_DEFAULT,
        }
    }
}

/// What closing a session changes, behind one mutex: only opening and closing tables and
/// cursors take it, never a table's reads or updates.
#[derive(Debug)]
struct SessionState {
    lock: Option<Box<dyn FileLock>>,
    tables: Vec<Weak<TableInner>>,
    cursors: Vec<Weak<CursorInner>>,
}

#[derive(Debug)]
pub(crate) struct SessionInner {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    active_dir: PathBuf,
    snapshots_dir: PathBuf,
    salt: u64,
    io: BlockIo,
    /// Opened with [`SessionOptions::read_only`]: `fs` refuses every change.
    read_only: bool,
    /// The write-ahead log and durable tables, for a session opened with one.
    durable: std::sync::OnceLock<crate::durable::Durable>,
    /// The background merge thread, for a session opened with
    /// [`SessionOptions::background_merges`].
    background: std::sync::OnceLock<Background>,
    /// Files of released runs, removed at the start of the next operation.
    removals: Arc<DeferredRemovals>,
    /// The trie pages of the session's authenticated tables.
    page_log: PageLog,
    /// Cleared by `close`; read without a lock by every table operation.
    open: AtomicBool,
    state: Mutex<SessionState>,
}

impl SessionInner {
    pub(crate) fn fs(&self) -> &Arc<dyn FileSystem> {
        &self.fs
    }

    pub(crate) fn active_dir(&self) -> &Path {
        &self.active_dir
    }

    pub(crate) fn snapshots_dir(&self) -> &Path {
        &self.snapshots_dir
    }

    /// Fails with [`Error::SessionClosed`] after `close`; then removes the files of released
    /// runs (see [`DeferredRemovals`]).
    fn check_open(&self) -> Result<()> {
        if !self.is_open() {
            return Err(Error::SessionClosed);
        }
        self.remove_released()
    }

    /// Takes a removal step for the files of released runs if it can, for operations that
    /// cannot report an error (closing a table, a failed restore). A failure leaves the file
    /// queued: the next operation retries the removal and reports the error.
    pub(crate) fn try_remove_released(&self) {
        if self.is_open() {
            let _ = self.removals.remove_step(&*self.fs);
        }
    }

    /// After a table closed: a removal step, or, once no table of the session is open any more,
    /// the removal of every queued file and of the files kept for reuse (no table will write
    /// over them). That last removal is unbounded, like the session's close: up to
    /// [`crate::SessionOptions::recycle_bytes`] plus the queue, freed (and, on a file system
    /// with online discard, trimmed) at once. Errors are left for later operations, as for
    /// [`SessionInner::try_remove_released`].
    pub(crate) fn table_closed(&self) {
        if !self.is_open() {
            return;
        }
        // Upgraded under the registry's lock, looked at (and dropped: a drop may close a
        // table, which comes back here) after it.
        let tables: Vec<Arc<TableInner>> = (self.lock_state().tables.iter())
            .filter_map(Weak::upgrade)
            .collect();
        let _ = if tables.iter().any(|t| t.is_open()) {
            self.removals.remove_step(&*self.fs)
        } else {
            self.removals.remove_all(&*self.fs)
        };
    }

    /// The queue of files that released runs left for removal.
    pub(crate) fn removals(&self) -> &Arc<DeferredRemovals> {
        &self.removals
    }

    /// The page log of the session's authenticated tables.
    pub(crate) fn page_log(&self) -> &PageLog {
        &self.page_log
    }

    /// Takes a bounded step removing the files of released runs
    /// ([`DeferredRemovals::remove_step`]); an I/O error fails the calling operation before it
    /// does anything else. Nothing is removed once the session is closed (the next session
    /// empties `active/`).
    pub(crate) fn remove_released(&self) -> Result<()> {
        if !self.is_open() {
            return Ok(());
        }
        self.removals.remove_step(&*self.fs)
    }

    /// [`SessionInner::remove_released`] for a read: a step only once reads have come
    /// [`DeferredRemovals::READS_PER_STEP`] times in a row with no other operation's step
    /// ([`DeferredRemovals::remove_step_for_read`]).
    pub(crate) fn remove_released_for_read(&self) -> Result<()> {
        if !self.is_open() {
            return Ok(());
        }
        self.removals.remove_step_for_read(&*self.fs)
    }

    pub(crate) fn salt(&self) -> u64 {
        self.salt
    }

    /// The session directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The log and durable tables, if the session has a log.
    pub(crate) fn durable(&self) -> Option<&crate::durable::Durable> {
        self.durable.get()
    }

    /// Whether the session was opened read-only.
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// The background merge thread, if the session has one.
    pub(crate) fn background(&self) -> Option<&Background> {
        self.background.get()
    }

    /// Fails with [`Error::ReadOnly`] (naming `what`) in a read-only session.
    pub(crate) fn check_writable(&self, what: &'static str) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(what));
        }
        Ok(())
    }

    pub(crate) fn io(&self) -> &BlockIo {
        &self.io
    }

    /// A run number never used before in this process, so that a run kept alive past its
    /// session (by a cursor, say) can never share file names with a later session's runs.
    pub(crate) fn next_run_number(&self) -> u64 {
        crate::run::next_run_number()
    }

    /// A table id unique in this process (blob references name their table by it).
    pub(crate) fn next_table_id(&self) -> u64 {
        TABLE_IDS.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the session is open (no lock taken).
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// The registry of tables and cursors. A poisoned lock is recovered: the registry is a list
    /// of weak references, consistent at every point where a panic could occur.
    fn lock_state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the session: closes every table and cursor, removes the files of released runs
    /// where it can, and releases the directory lock. Idempotent.
    ///
    /// Only the call that closes the session does anything: a later one (the last handle's drop
    /// after an explicit close) must not remove files in `active/`, which another session may
    /// own by then. Operations already running when the session closes are not waited for: one
    /// may still finish writing a snapshot after the lock is released.
    fn close(&self) {
        let (tables, cursors, lock) = {
            let mut state = self.lock_state();
            if !self.open.swap(false, Ordering::AcqRel) {
                return;
            }
            (
                std::mem::take(&mut state.tables),
                std::mem::take(&mut state.cursors),
                state.lock.take(),
            )
        };
        // What the log buffered is written (and synced, by its policy) before tables close.
        if let Some(durable) = self.durable.get() {
            durable.log.close();
        }
        // No merge work after this point: the chunk in progress ends first.
        if let Some(background) = self.background.get() {
            background.stop();
        }
        for cursor in cursors.iter().filter_map(Weak::upgrade) {
            cursor.close();
        }
        for table in tables.iter().filter_map(Weak::upgrade) {
            table.close();
        }
        // Last chance to free the space now; whatever fails is removed by the next session,
        // which empties `active/`.
        let _ = self.removals.remove_all(&*self.fs);
        // Only now may another session take the directory.
        drop(lock);
    }

    /// Records a new cursor so that closing the session closes it.
    pub(crate) fn register_cursor(&self, cursor: &Arc<CursorInner>) -> Result<()> {
        let mut state = self.lock_state();
        if !self.is_open() {
            return Err(Error::SessionClosed);
        }
        state.cursors.retain(|c| c.strong_count() > 0);
        state.cursors.push(Arc::downgrade(cursor));
        Ok(())
    }

    /// Records a new table so that closing the session closes it.
    pub(crate) fn register_table(&self, table: &Arc<TableInner>) -> Result<()> {
        let mut state = self.lock_state();
        if !self.is_open() {
            return Err(Error::SessionClosed);
        }
        state.tables.retain(|t| t.strong_count() > 0);
        state.tables.push(Arc::downgrade(table));
        Ok(())
    }
}

impl Drop for SessionInner {
    /// The last handle (session, table or cursor) is gone: release the directory.
    fn drop(&mut self) {
        self.close();
    }
}

/// A session: the owner of one directory and of the tables in it.
///
/// `Session` is a cheap, cloneable handle (an `Arc` inside), `Send + Sync`. The session stays
/// open, holding its directory's lock, while any handle to it, or to one of its tables or
/// cursors, is alive: a function may open a session, create a table and return only the table.
/// The lock is released when the last of them is dropped, or at once by [`Session::close`],
/// which also closes every table and cursor of the session.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
    /// The durable tables, kept alive by the session's handles (not by its tables).
    durable_tables: Arc<crate::durable::DurableTables>,
}

impl Session {
    /// Opens the session in `dir` on the real file system: creates it when `dir` is empty,
    /// restores it otherwise. `dir` must exist.
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
    /// let options = SessionOptions {
    ///     io_backend: IoBackendKind::Pread,
    ///     ..SessionOptions::default()
    /// };
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
    /// A new session's files are fsynced, but `dir` itself belongs to the caller: make its own
    /// entry in its parent durable (create it and fsync the parent) before relying on it. A
    /// first open that failed half way can simply be retried.
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
    /// Errors: [`Error::SessionDirMissing`], [`Error::SessionLocked`] if another live session
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
        let dir = dir.as_ref().to_path_buf();
        if !fs.is_dir(&dir)? {
            return Err(Error::SessionDirMissing(dir));
        }
        if options.read_only {
            return Session::open_read_only(fs, dir, options);
        }
        let Some(lock) = fs.try_lock(&dir.join("lock"))? else {
            return Err(Error::SessionLocked(dir));
        };
        let active_dir = dir.join("active");
        let snapshots_dir = dir.join("snapshots");
        let metadata_path = dir.join("metadata");
        let entries: Vec<String> = fs
            .list_dir(&dir)?
            .into_iter()
            .filter(|name| name != "lock")
            .collect();
        // A first open that failed or lost power half way leaves some of these behind, all
        // empty and no metadata: the directory is still new.
        let mut unfinished_creation = true;
        for name in &entries {
            unfinished_creation &= match name.as_str() {
                "active" | "snapshots" => {
                    // A regular file here is not a session's: the directory is corrupted.
                    let sub = dir.join(name);
                    fs.is_dir(&sub)? && fs.list_dir(&sub)?.is_empty()
                }
                "metadata.tmp" => true,
                _ => false,
            };
        }
        let salt = if unfinished_creation {
            let salt = match options.salt {
                Some(salt) => salt,
                None => random_salt(&dir)?,
            };
            fs.create_dir_all(&active_dir)?;
            fs.create_dir_all(&snapshots_dir)?;
            write_atomic(&*fs, &metadata_path, &encode_metadata(salt))?;
            fs.sync_dir(&dir)?;
            salt
        } else {
            let corrupted = |reason: String| Error::SessionCorrupted {
                path: dir.clone(),
                reason,
            };
            if !fs.exists(&metadata_path)? {
                return Err(corrupted(
                    "the directory is not empty but has no metadata file".into(),
                ));
            }
            let salt = decode_metadata(&read_all(&*fs, &metadata_path)?).map_err(|e| match e {
                // Written by a newer build: nothing is damaged.
                e @ Error::UnsupportedVersion { .. } => e,
                e => corrupted(e.to_string()),
            })?;
            for sub in [&active_dir, &snapshots_dir] {
                if !fs.is_dir(sub)? {
                    return Err(corrupted(format!(
                        "{} is missing or not a directory",
                        sub.display()
                    )));
                }
            }
            // A snapshot save or import that crashed leaves a temporary directory behind.
            for name in fs.list_dir(&snapshots_dir)? {
                if name.starts_with(".tmp-") {
                    fs.remove_dir_all(&snapshots_dir.join(name))?;
                }
            }
            // A save, import or delete that failed after its rename (at the final fsync of
            // `snapshots/`) left a change that is visible but not durable: make every snapshot
            // listed from now on durable.
            fs.sync_dir(&snapshots_dir)?;
            // Tables are not durable between snapshots: whatever an earlier session left in
            // `active` is garbage.
            for name in fs.list_dir(&active_dir)? {
                let path = active_dir.join(name);
                if fs.is_dir(&path)? {
                    fs.remove_dir_all(&path)?;
                } else {
                    fs.remove_file(&path)?;
                }
            }
            salt
        };
        let io = BlockIo::new(options.io_backend)?.with_direct_io(fs.probe_direct_io(&active_dir));
        let removals = Arc::new(DeferredRemovals::with_recycling(
            options.recycle_bytes,
            dir.join("active"),
        ));
        let session = Session::with_parts(fs, dir, salt, io, Some(lock), removals);
        if options.background_merges {
            let background = Background::start(&session.inner.dir)?;
            let _ = session.inner.background.set(background);
        }
        if let Some(log) = options.log {
            let (durable, tables) = crate::durable::open(&session.inner, log)?;
            let _ = session.inner.durable.set(durable);
            let session = Session {
                durable_tables: Arc::new(tables),
                ..session
            };
            return Ok(session);
        }
        Ok(session)
    }

    /// Opens an existing session without its lock and without writing (see
    /// [`Session::open_with`]).
    fn open_read_only(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        options: SessionOptions,
    ) -> Result<Session> {
        let corrupted = |reason: String| Error::SessionCorrupted {
            path: dir.clone(),
            reason,
        };
        let metadata_path = dir.join("metadata");
        if !fs.exists(&metadata_path)? {
            return Err(corrupted(
                "it has no metadata file (not a Cairn session directory)".into(),
            ));
        }
        let salt = decode_metadata(&read_all(&*fs, &metadata_path)?).map_err(|e| match e {
            e @ Error::UnsupportedVersion { .. } => e,
            e => corrupted(e.to_string()),
        })?;
        let snapshots_dir = dir.join("snapshots");
        if !fs.is_dir(&snapshots_dir)? {
            return Err(corrupted(format!(
                "{} is missing or not a directory",
                snapshots_dir.display()
            )));
        }
        let fs: Arc<dyn FileSystem> = Arc::new(ReadOnlyFs(fs));
        let io = BlockIo::new(options.io_backend)?
            .with_direct_io(fs.probe_direct_io(&dir.join("active")));
        Ok(Session::with_parts(fs, dir, salt, io, None, Arc::default()))
    }

    /// A session over `dir`, open, with no table yet: read-only exactly when it holds no lock.
    fn with_parts(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        salt: u64,
        io: BlockIo,
        lock: Option<Box<dyn FileLock>>,
        removals: Arc<DeferredRemovals>,
    ) -> Session {
        Session {
            durable_tables: Arc::default(),
            inner: Arc::new(SessionInner {
                page_log: PageLog::new(fs.clone(), dir.join("active"), removals.clone()),
                fs,
                active_dir: dir.join("active"),
                snapshots_dir: dir.join("snapshots"),
                dir,
                salt,
                io,
                read_only: lock.is_none(),
                durable: std::sync::OnceLock::new(),
                background: std::sync::OnceLock::new(),
                removals,
                open: AtomicBool::new(true),
                state: Mutex::new(SessionState {
                    lock,
                    tables: Vec::new(),
                    cursors: Vec::new(),
                }),
            }),
        }
    }

    /// Merge steps the session's background merge thread has performed so far (0 without
    /// [`SessionOptions::background_merges`]). Steps done there are not counted again in
    /// [`crate::TableStats::merge_steps_total`], which counts the steps updates performed.
    pub fn background_merge_steps(&self) -> u64 {
        self.inner.background().map_or(0, Background::steps)
    }

    /// Whether the session was opened with [`SessionOptions::read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The salt of the Bloom-filter hashes.
    pub fn salt(&self) -> u64 {
        self.inner.salt
    }

    /// The block I/O backend in use (`Uring` or `Pread`).
    pub fn io_backend(&self) -> IoBackendKind {
        self.inner.io.kind()
    }

    /// Creates an empty table. Fails with [`Error::InvalidConfig`] for an invalid config and
    /// [`Error::SessionClosed`] after [`Session::close`].
    pub fn new_table(&self, config: TableConfig) -> Result<Table> {
        self.inner.check_open()?;
        self.inner.check_writable("creating a table")?;
        Table::new(self.inner.clone(), config)
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
        self.inner.check_open()?;
        snapshot::validate_name(name)?;
        Table::open_snapshot(self.inner.clone(), name, label, overrides)
    }

    /// Names of the saved snapshots, sorted: every directory of `snapshots/` whose name is a
    /// valid snapshot name (anything else there is not a snapshot and is ignored), so that every
    /// name listed can be passed to [`Session::open_snapshot`].
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::Io`].
    pub fn list_snapshots(&self) -> Result<Vec<String>> {
        self.inner.check_open()?;
        snapshot::list(&self.inner)
    }

    /// Whether snapshot `name` exists.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`], [`Error::Io`].
    pub fn snapshot_exists(&self, name: &str) -> Result<bool> {
        self.inner.check_open()?;
        snapshot::validate_name(name)?;
        snapshot::exists(&self.inner, name)
    }

    /// Deletes snapshot `name` (its files; tables opened from it are not affected).
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::Io`] (the snapshot is then either intact or gone: it is
    /// renamed away first).
    pub fn delete_snapshot(&self, name: &str) -> Result<()> {
        self.inner.check_open()?;
        snapshot::validate_name(name)?;
        self.inner.check_writable("deleting a snapshot")?;
        snapshot::delete(&self.inner, name)
    }

    /// Copies snapshot `name` into `target`, a directory that must not exist yet and whose parent
    /// must (on the same file system as the session). The copy is fsynced. It can be imported into a session with
    /// the same salt (this one, a restored copy of its directory, or one opened with
    /// [`SessionOptions::salt`] set to [`Session::salt`]): Bloom filters are built with the salt.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotMissing`], [`Error::SnapshotDirectory`] (the target exists, or its parent does not), [`Error::Io`].
    pub fn export_snapshot(&self, name: &str, target: impl AsRef<Path>) -> Result<()> {
        self.inner.check_open()?;
        snapshot::validate_name(name)?;
        self.inner.check_writable("exporting a snapshot")?;
        snapshot::export(&self.inner, name, target.as_ref())
    }

    /// Copies the snapshot exported in `source` into this session as snapshot `name`. The copy
    /// is atomic; its contents are verified when the snapshot is opened.
    ///
    /// Errors: [`Error::SessionClosed`], [`Error::InvalidSnapshotName`], [`Error::SnapshotExists`],
    /// [`Error::SnapshotDirectory`] (the source is missing), [`Error::Io`] (the snapshot is then
    /// either absent or complete).
    pub fn import_snapshot(&self, name: &str, source: impl AsRef<Path>) -> Result<()> {
        self.inner.check_open()?;
        self.inner.check_writable("importing a snapshot")?;
        snapshot::import(&self.inner, name, source.as_ref())
    }

    /// Creates the durable table `name` (1 to 64 characters from `[a-z0-9_-]`): a table whose
    /// updates go through the session's write-ahead log, so that it survives a crash as its
    /// newest checkpoint plus the log after it ([`Session::checkpoint`]). Reopening the session
    /// with a log recovers it; [`Session::durable_table`] returns it. Cost: one empty checkpoint
    /// and one catalog write, each fsynced.
    ///
    /// Errors: [`Error::NotDurable`] without a log, [`Error::InvalidConfig`] (a bad name, a name
    /// in use, a custom resolve function, which recovery could not be given), and as
    /// [`Session::new_table`].
    pub fn create_durable_table(&self, name: &str, config: TableConfig) -> Result<Table> {
        self.inner.check_open()?;
        self.inner.check_writable("creating a table")?;
        let durable = self.durable()?;
        durable.create(&self.inner, &self.durable_tables, name, config)
    }

    /// The durable table `name` (created, or recovered when the session opened), or `None`.
    pub fn durable_table(&self, name: &str) -> Option<Table> {
        self.durable_tables.get(name)
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
        self.inner.check_open()?;
        crate::durable::write(&self.inner, parts)
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
        self.inner.check_open()?;
        self.durable()?
            .checkpoint(&self.inner, &self.durable_tables)
    }

    /// Writes and fsyncs every record logged so far, whatever the sync policy, and waits for
    /// it. Errors: [`Error::NotDurable`] without a log, [`Error::LogFailed`].
    pub fn sync_log(&self) -> Result<()> {
        self.inner.check_open()?;
        self.durable()?.log.sync()
    }

    /// Counters of the session's log since it opened: records, groups, fsyncs, bytes.
    /// Errors: [`Error::NotDurable`] without a log.
    pub fn log_stats(&self) -> Result<crate::LogStats> {
        Ok(self.durable()?.log.stats())
    }

    fn durable(&self) -> Result<&crate::durable::Durable> {
        self.inner
            .durable()
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
        self.inner.check_open()?;
        crate::inspect::info(&self.inner, name)
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
        self.inner.check_open()?;
        crate::inspect::stats(&self.inner, name, sample)
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
        self.inner.check_open()?;
        crate::inspect::verify(&self.inner, name, options, progress)
    }

    /// Closes the session now, for every handle: closes every table and cursor (their later
    /// calls fail with [`Error::TableClosed`] and [`Error::CursorClosed`], and this session's
    /// with [`Error::SessionClosed`]), removes the files of released runs where it can (the next
    /// session removes any that remain), and releases the directory lock. Idempotent. Dropping
    /// every handle has the same effect without the need to call it.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Whether the session is open.
    pub fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    /// How block I/O really works in this session, with the reason for every fallback: the
    /// backend in use and why io_uring is not (if it is not), and whether reads that ask for
    /// `O_DIRECT` bypass the page cache (probed once in `active/` when the session opened). Each
    /// fallback is also logged once through the `log` facade.
    pub fn io_report(&self) -> IoReport {
        self.inner.io.report()
    }
}

fn random_salt(dir: &Path) -> Result<u64> {
    getrandom::u64().map_err(|e| {
        Error::io(
            "getrandom",
            dir,
            std::io::Error::other(format!("no randomness for the session salt: {e}")),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_golden_file() {
        let golden = crate::golden::check_golden(
            "session-metadata-v1.bin",
            &encode_metadata(0x0123_4567_89ab_cdef),
        );
        assert_eq!(decode_metadata(&golden).unwrap(), 0x0123_4567_89ab_cdef);
    }

    #[test]
    fn metadata_round_trip_and_totality() {
        let bytes = encode_metadata(0x0123_4567_89ab_cdef);
        assert_eq!(decode_metadata(&bytes).unwrap(), 0x0123_4567_89ab_cdef);
        for len in 0..bytes.len() {
            assert!(decode_metadata(&bytes[..len]).is_err());
        }
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_metadata(&b).is_err());
        }
    }
}
