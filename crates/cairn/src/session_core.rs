//! A session's core: what every table, cursor, snapshot and log of a session shares, below the
//! public [`crate::Session`] front.
//!
//! Owns: the directory layout and the session metadata file (`docs/format/session.md`), the
//! directory lock, [`SessionOptions`], and [`SessionCore`]: the file system, block I/O engine,
//! salt, page log, queue of deferred file removals, background merge thread, the write-ahead
//! log's lifetime, and the registry of the open tables and cursors that closing the session
//! closes:
//!
//! ```text
//! <dir>/lock          exclusive lock (flock) held while the session is open
//! <dir>/metadata      format version and the Bloom-filter salt (docs/format/session.md)
//! <dir>/active/       the run files of open tables and the page log's segments; emptied
//!                     when the session is opened
//! <dir>/snapshots/    saved tables (one directory each)
//! <dir>/log/          the write-ahead log and its catalog (module `durable`), when opened with one
//! ```
//!
//! May call: `fs`, `io`, `pagelog` (its page log), `run` (run numbers; the runs of its open
//! tables), `background` (its merge thread), `scrub` (its background scrub), `wal` (closing the
//! log). Must never touch: tables, cursors, snapshots or
//! durable tables by their types (they register here as [`Member`]s), or run contents.
//!
//! A session opened read-only ([`SessionOptions::read_only`]) works through a file system that
//! refuses every change, takes no lock, and opens snapshots in place.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::background::Background;
use crate::error::{Error, Result};
use crate::fs::{read_all, write_atomic, DeferredRemovals, FileLock, FileSystem, ReadOnlyFs};
use crate::io::{BlockIo, IoBackendKind};
use crate::pagelog::PageLog;
use crate::run::OpenCheck;
use crate::wal::Log;

/// Table ids are unique per process (as run numbers are, `run::next_run_number`).
static TABLE_IDS: AtomicU64 = AtomicU64::new(0);

const METADATA_MAGIC: &[u8; 8] = b"CRNSESSN";
const METADATA_VERSION: u32 = 1;
const METADATA_BYTES: usize = 8 + 4 + 8 + 4;

/// Encodes the session metadata file.
pub(crate) fn encode_metadata(salt: u64) -> Vec<u8> {
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
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionOptions {
    /// The block I/O backend for batched lookups.
    pub io_backend: IoBackendKind,
    /// The salt of a new session; random when `None`. Ignored when restoring (the stored salt is
    /// used).
    pub salt: Option<u64>,
    /// Opens an existing session for reading only: its snapshots can be listed, inspected,
    /// verified, opened, looked up and iterated, and nothing in the directory is ever written,
    /// removed or locked (see [`crate::Session::open_with`] for the exact guarantees). For tools that
    /// look inside a database, possibly while the process that owns it is running.
    pub read_only: bool,
    /// The session's write-ahead log (`<dir>/log/`), which makes its named tables durable
    /// ([`crate::Session::table`]): recovery runs as the session opens. On by default, with
    /// [`crate::LogOptions::default`]. `None`: no log and no named tables, only ephemeral
    /// tables ([`crate::Session::new_table`]) and snapshots, lsm-tree's model, with nothing extra
    /// to pay (no log directory, no syncer thread). Ignored by a read-only session.
    pub log: Option<crate::LogOptions>,
    /// Creates the session directory (and its parents) when it does not exist, and fsyncs its
    /// parent so that the new entry is durable. On by default; off, a missing directory is
    /// [`crate::Error::SessionDirMissing`]. Ignored by a read-only session, which never creates
    /// anything.
    pub create_if_missing: bool,
    /// Custom resolve functions ([`crate::Resolve::custom`]) the session's durable tables may
    /// use, found by name: a durable table can be created with a custom function only if it is
    /// here, and recovery gives each durable table the function of the name it was created
    /// with (a session whose durable table needs a function not here refuses to open, with
    /// [`crate::Error::InvalidConfig`] naming it). Empty by default.
    pub resolve_functions: Vec<crate::Resolve>,
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
    /// Reads and checks every byte of every run when a table is opened from a snapshot or a
    /// checkpoint (each file against its CRC32C, each page against its own), as Cairn did
    /// before runs had per-page checksums: an open then costs a read of all the table's data.
    /// Off by default: an open reads what lookups need (metadata, filters, indexes, and the
    /// two pages holding each run's first and last key), and every data page and blob chunk is
    /// checked against its CRC32C when it is read, so damage is still never returned as data;
    /// it is found when the damaged page is first read (a lookup, cursor or merge fails with
    /// [`crate::Error::CorruptFile`] naming the file and page), or by
    /// [`crate::Session::scrub`]. Runs written before per-page checksums (run format version
    /// 1) are always read whole.
    pub verify_on_open: bool,
    /// Scrubs the session's open tables in the background once per interval
    /// ([`crate::Session::scrub`], at [`SessionOptions::scrub_bytes_per_second`]): every page
    /// of every run is read and checked against its CRC32C, each problem is logged
    /// (`log::error!`) and the last report kept ([`crate::Session::last_scrub`]). `None` (the
    /// default) runs no scrub thread. Ignored by a read-only session.
    pub scrub_interval: Option<std::time::Duration>,
    /// The most bytes per second a background scrub reads (0: no limit). Default
    /// [`SessionOptions::SCRUB_BYTES_PER_SECOND_DEFAULT`].
    pub scrub_bytes_per_second: u64,
    /// Reads in flight that concurrent batched lookups share (io_uring backend; 0, the
    /// default: no sharing). Each batch otherwise keeps up to 256 reads in flight whatever the
    /// others do, so an application with several batches' lookups in flight at once (say a
    /// pipelined block producer reading the next three batches while it applies one) queues
    /// about 256 per batch in the device, where every read waits behind all of them. With a
    /// budget, a batch that is not the oldest one reading submits only while fewer reads than
    /// the budget are in flight across the session; the oldest is never held back, so the
    /// batch the application waits for next waits behind about the budget's reads at most.
    /// A budget near the depth at which the device stops gaining (128 to 256 on most SSDs)
    /// keeps it as busy. Lookups of one thread at a time are unaffected (theirs is always the
    /// oldest batch). The budget covers every io_uring batch of the session, including the
    /// page reads of authenticated tables.
    pub read_budget: usize,
    /// Reads the trie pages of authenticated tables (the page log's segment files) with
    /// `O_DIRECT` into the session's aligned read buffers, bypassing the operating system's
    /// page cache, as lookups read runs under [`crate::DiskCachePolicy::None`]. For tries many
    /// times larger than the memory the process may use, where a page read is nearly always
    /// a miss and the page cache only adds a copy and reclaim under the memory limit; a trie
    /// that fits in memory reads faster through the cache. Off by default. On a file system
    /// that refuses `O_DIRECT` the pages are read through the page cache (as
    /// [`crate::Session::io_report`] says). Measured at 2^23 keys under a 320 MiB memory
    /// limit: a 10,000-key commit's warm-up in 0.91x the time, the commit with it 0.95x,
    /// the rest within noise (`docs/benchmarks/notes/2026-12-02-segment-reads.md`).
    pub direct_page_reads: bool,
}

impl SessionOptions {
    /// The default of [`SessionOptions::scrub_bytes_per_second`]: 32 MiB/s, a few percent of
    /// an NVMe drive's bandwidth.
    pub const SCRUB_BYTES_PER_SECOND_DEFAULT: u64 = 32 << 20;

    /// The default of [`SessionOptions::recycle_bytes`]: 1 GiB.
    pub const RECYCLE_BYTES_DEFAULT: u64 = 1 << 30;
}

setters!(SessionOptions {
    io_backend: IoBackendKind,
    salt: Option<u64>,
    read_only: bool,
    log: Option<crate::LogOptions>,
    create_if_missing: bool,
    resolve_functions: Vec<crate::Resolve>,
    background_merges: bool,
    recycle_bytes: u64,
    verify_on_open: bool,
    scrub_interval: Option<std::time::Duration>,
    scrub_bytes_per_second: u64,
    read_budget: usize,
    direct_page_reads: bool,
});

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            io_backend: IoBackendKind::Auto,
            salt: None,
            read_only: false,
            log: Some(crate::LogOptions::default()),
            create_if_missing: true,
            resolve_functions: Vec::new(),
            background_merges: false,
            recycle_bytes: SessionOptions::RECYCLE_BYTES_DEFAULT,
            verify_on_open: false,
            scrub_interval: None,
            scrub_bytes_per_second: SessionOptions::SCRUB_BYTES_PER_SECOND_DEFAULT,
            read_budget: 0,
            direct_page_reads: false,
        }
    }
}

/// What a session closes when it closes: an open table or cursor. Registered with
/// [`SessionCore::register_table`] or [`SessionCore::register_cursor`] and held weakly, so
/// that the registry never keeps one alive.
pub(crate) trait Member: std::fmt::Debug + Send + Sync {
    /// Closes it: releases what it holds; its later calls fail.
    fn close(&self);
    /// Whether it is still open.
    fn is_open(&self) -> bool;
    /// Adds the runs it reads to `out` (for scrubs); nothing for what holds no runs.
    fn runs(&self, _out: &mut Vec<Arc<crate::run::Run>>) {}
}

/// What closing a session changes, behind one mutex: only opening and closing tables and
/// cursors take it, never a table's reads or updates.
#[derive(Debug)]
struct SessionState {
    lock: Option<Box<dyn FileLock>>,
    tables: Vec<Weak<dyn Member>>,
    /// `tables` drops its dead entries when it reaches this length, which then becomes twice
    /// the live ones: registering a table costs amortised O(1), not a scan of every table.
    prune_tables_at: usize,
    cursors: Vec<Weak<dyn Member>>,
}

/// The least [`SessionState::prune_tables_at`].
const PRUNE_TABLES_MIN: usize = 16;
/// Tables looked at per hold of the registry's lock when [`SessionCore::table_closed`] looks
/// for one still open.
const OPEN_TABLES_BATCH: usize = 16;

/// A session's shared parts (see the module doc). Every table, cursor and snapshot operation
/// holds an `Arc` of it; the directory lock is released when the last one is dropped or the
/// session is closed.
#[derive(Debug)]
pub(crate) struct SessionCore {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    active_dir: PathBuf,
    snapshots_dir: PathBuf,
    salt: u64,
    io: BlockIo,
    /// Opened with [`SessionOptions::read_only`]: `fs` refuses every change.
    read_only: bool,
    /// How much of each run opening a snapshot or checkpoint reads
    /// ([`SessionOptions::verify_on_open`]).
    open_check: OpenCheck,
    /// The write-ahead log, for a session opened with one: closed (its buffer written and
    /// synced by its policy) before the session's tables, and before the lock is released.
    log: OnceLock<Arc<Log>>,
    /// The background merge thread, for a session opened with
    /// [`SessionOptions::background_merges`].
    background: OnceLock<Background>,
    /// The background scrub, for a session opened with [`SessionOptions::scrub_interval`].
    scrub: OnceLock<crate::scrub::BackgroundScrub>,
    /// Files of released runs, removed at the start of the next operation.
    removals: Arc<DeferredRemovals>,
    /// The trie pages of the session's authenticated tables.
    page_log: PageLog,
    /// Cleared by `close`; read without a lock by every table operation.
    open: AtomicBool,
    state: Mutex<SessionState>,
}

impl SessionCore {
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
    pub(crate) fn check_open(&self) -> Result<()> {
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
    /// [`SessionCore::try_remove_released`].
    pub(crate) fn table_closed(&self) {
        if !self.is_open() {
            return;
        }
        // Whether any table is still open, a few at a time from the oldest registered (often
        // open: then O(1), not a scan of every table, which matters when many duplicates come
        // and go). Each few are upgraded under the registry's lock and looked at (and dropped:
        // a drop may close a table, which comes back here) after it. The registry may change
        // between batches; the answer only chooses a bounded removal step or a full one.
        let mut at = 0;
        let any_open = loop {
            let batch: Vec<Arc<dyn Member>> = {
                let state = self.lock_state();
                if at >= state.tables.len() {
                    break false;
                }
                let end = (at + OPEN_TABLES_BATCH).min(state.tables.len());
                let batch = state.tables[at..end]
                    .iter()
                    .filter_map(Weak::upgrade)
                    .collect();
                at = end;
                batch
            };
            if batch.iter().any(|t| t.is_open()) {
                break true;
            }
        };
        let _ = if any_open {
            self.removals.remove_step(&*self.fs)
        } else {
            self.remove_all_released()
        };
    }

    /// Removes every queued file ([`DeferredRemovals::remove_all`]) and then the directory of
    /// leftovers ([`LEFTOVER_DIR`]), whose files were all queued, if it exists.
    fn remove_all_released(&self) -> Result<()> {
        self.removals.remove_all(&*self.fs)?;
        let aside = self.active_dir.join(LEFTOVER_DIR);
        if self.fs.is_dir(&aside)? && self.fs.list_dir(&aside)?.is_empty() {
            self.fs.remove_dir_all(&aside)?;
        }
        Ok(())
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

    /// [`SessionCore::remove_released`] for a read: a step only once reads have come
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

    /// Hands the session its write-ahead log, to be closed with it (once; a second log is
    /// refused with [`Error::InvalidConfig`]).
    pub(crate) fn set_log(&self, log: Arc<Log>) -> Result<()> {
        self.log
            .set(log)
            .map_err(|_| Error::InvalidConfig("a session has one write-ahead log".into()))
    }

    /// Whether the session was opened read-only.
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// The runs every open table of the session reads (for scrubs).
    pub(crate) fn open_runs(&self) -> Vec<Arc<crate::run::Run>> {
        let tables: Vec<Arc<dyn Member>> = (self.lock_state().tables.iter())
            .filter_map(Weak::upgrade)
            .collect();
        let mut runs = Vec::new();
        for table in &tables {
            table.runs(&mut runs);
        }
        runs
    }

    /// The last report of the background scrub, if it has finished one.
    pub(crate) fn last_scrub(&self) -> Option<crate::scrub::ScrubReport> {
        self.scrub.get().and_then(|s| s.last())
    }

    /// How much of each run opening a snapshot or checkpoint reads.
    pub(crate) fn open_check(&self) -> OpenCheck {
        self.open_check
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
    pub(crate) fn close(&self) {
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
        if let Some(log) = self.log.get() {
            log.close();
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
        // which sets aside and queues what it finds in `active/`.
        let _ = self.remove_all_released();
        // Only now may another session take the directory.
        drop(lock);
    }

    /// Records a new cursor so that closing the session closes it.
    pub(crate) fn register_cursor(&self, cursor: Weak<dyn Member>) -> Result<()> {
        let mut state = self.lock_state();
        if !self.is_open() {
            return Err(Error::SessionClosed);
        }
        state.cursors.retain(|c| c.strong_count() > 0);
        state.cursors.push(cursor);
        Ok(())
    }

    /// Records a new table so that closing the session closes it.
    pub(crate) fn register_table(&self, table: Weak<dyn Member>) -> Result<()> {
        let mut state = self.lock_state();
        if !self.is_open() {
            return Err(Error::SessionClosed);
        }
        if state.tables.len() >= state.prune_tables_at {
            state.tables.retain(|t| t.strong_count() > 0);
            state.prune_tables_at = (2 * state.tables.len()).max(PRUNE_TABLES_MIN);
        }
        state.tables.push(table);
        Ok(())
    }
}

/// The directory inside `active/` where an open puts what an earlier session left there
/// ([`set_leftovers_aside`]).
pub(crate) const LEFTOVER_DIR: &str = ".leftover";

/// Tables are not durable between snapshots and checkpoints: whatever an earlier session left in
/// `active/` is garbage (after a crash: the runs of its tables, merges half written, the pool of
/// recycled files; gigabytes for a large table). Removing it here would make the open wait for
/// the file system to free, and on a file system with online discard trim, every byte of it:
/// measured at 100M entries after a kill, about 2 s of a 3.8 s open. So each file moves (one
/// `rename`) into [`LEFTOVER_DIR`] under a name no earlier leftover has, and is queued in
/// `removals`, which frees it in the bounded steps later operations take
/// ([`DeferredRemovals`]); leftovers of earlier opens still there are queued again.
/// Directories (none in this version) are removed at once. Cost: one `rename` per file and
/// one `stat` per queued file later.
fn set_leftovers_aside(
    fs: &dyn FileSystem,
    active_dir: &Path,
    removals: &DeferredRemovals,
) -> Result<()> {
    let aside = active_dir.join(LEFTOVER_DIR);
    // A name prefix this open alone uses (a leftover of an earlier crash may still be there
    // with the same file name).
    let tag = getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let mut moved = false;
    for name in fs.list_dir(active_dir)? {
        if name == LEFTOVER_DIR {
            continue;
        }
        let path = active_dir.join(&name);
        if fs.is_dir(&path)? {
            fs.remove_dir_all(&path)?;
            continue;
        }
        if !moved && !fs.is_dir(&aside)? {
            fs.create_dir_all(&aside)?;
        }
        moved = true;
        fs.rename(&path, &aside.join(format!("{tag:016x}-{name}")))?;
    }
    if fs.is_dir(&aside)? {
        let queued: Vec<_> = fs
            .list_dir(&aside)?
            .into_iter()
            .map(|n| aside.join(n))
            .collect();
        if queued.is_empty() {
            fs.remove_dir_all(&aside)?;
        } else {
            removals.defer(queued);
        }
    }
    Ok(())
}

impl SessionCore {
    /// Opens the session directory `dir` (see [`crate::Session::open_with`] for what that
    /// does and its errors): creates it when it is empty, checks and empties `active/`
    /// otherwise, probes direct I/O, and starts the background merge thread if asked. The
    /// write-ahead log, if any, is opened by the caller ([`SessionCore::set_log`]).
    pub(crate) fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: &SessionOptions,
    ) -> Result<Arc<SessionCore>> {
        let dir = dir.to_path_buf();
        if !fs.is_dir(&dir)? {
            if !options.create_if_missing || options.read_only || fs.exists(&dir)? {
                return Err(Error::SessionDirMissing(dir));
            }
            fs.create_dir_all(&dir)?;
            // The new entry is durable: the parent is fsynced (one level; a created grandparent
            // is the caller's to make durable, as for any path it names).
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs.sync_dir(parent)?;
            }
        }
        if options.read_only {
            return SessionCore::open_read_only(fs, dir, options);
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
            // A save, import or delete that failed after its rename (at the final fsync of
            // `snapshots/`) left a change that is visible but not durable: make every snapshot
            // listed from now on durable. First, before anything below a renamed directory is
            // removed: a delete renames the snapshot to a temporary name, and removals inside
            // it are not ordered with that rename, so a power loss after removing some of its
            // files but before this fsync could bring the snapshot's name back with files
            // missing (a trie manifest, a metadata file). Once the temporary name is durable,
            // a removal cut short leaves only a temporary directory, removed next time.
            fs.sync_dir(&snapshots_dir)?;
            // A snapshot save or import that crashed, or a delete that failed after its
            // rename, leaves a temporary directory behind.
            for name in fs.list_dir(&snapshots_dir)? {
                if name.starts_with(".tmp-") {
                    fs.remove_dir_all(&snapshots_dir.join(name))?;
                }
            }
            salt
        };
        let removals = Arc::new(DeferredRemovals::with_recycling(
            options.recycle_bytes,
            dir.join("active"),
        ));
        if !unfinished_creation {
            set_leftovers_aside(&*fs, &active_dir, &removals)?;
        }
        let io = BlockIo::new(options.io_backend)?
            .with_direct_io(fs.probe_direct_io(&active_dir))
            .with_read_budget(options.read_budget);
        let core = SessionCore::with_parts(fs, dir, salt, io, Some(lock), removals, options);
        if options.background_merges {
            let background = Background::start(&core.dir)?;
            let _ = core.background.set(background);
        }
        if let Some(interval) = options.scrub_interval {
            let rate = Some(options.scrub_bytes_per_second).filter(|&r| r > 0);
            let weak: Weak<dyn crate::scrub::ScrubSource> =
                Arc::downgrade(&core) as Weak<SessionCore>;
            let scrub = crate::scrub::BackgroundScrub::start(weak, interval, rate)?;
            let _ = core.scrub.set(scrub);
        }
        Ok(core)
    }

    /// Opens an existing session without its lock and without writing (see
    /// [`crate::Session::open_with`]).
    fn open_read_only(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        options: &SessionOptions,
    ) -> Result<Arc<SessionCore>> {
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
            .with_direct_io(fs.probe_direct_io(&dir.join("active")))
            .with_read_budget(options.read_budget);
        Ok(SessionCore::with_parts(
            fs,
            dir,
            salt,
            io,
            None,
            Arc::default(),
            options,
        ))
    }

    /// A session over `dir`, open, with no table yet: read-only exactly when it holds no lock.
    fn with_parts(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        salt: u64,
        io: BlockIo,
        lock: Option<Box<dyn FileLock>>,
        removals: Arc<DeferredRemovals>,
        options: &SessionOptions,
    ) -> Arc<SessionCore> {
        Arc::new(SessionCore {
            page_log: PageLog::new(fs.clone(), dir.join("active"), removals.clone())
                .with_direct_reads(options.direct_page_reads),
            fs,
            active_dir: dir.join("active"),
            snapshots_dir: dir.join("snapshots"),
            dir,
            salt,
            io,
            read_only: lock.is_none(),
            open_check: if options.verify_on_open {
                OpenCheck::Full
            } else {
                OpenCheck::Lazy
            },
            log: OnceLock::new(),
            background: OnceLock::new(),
            scrub: OnceLock::new(),
            removals,
            open: AtomicBool::new(true),
            state: Mutex::new(SessionState {
                lock,
                tables: Vec::new(),
                prune_tables_at: PRUNE_TABLES_MIN,
                cursors: Vec::new(),
            }),
        })
    }
}

impl crate::scrub::ScrubSource for SessionCore {
    fn open_runs(&self) -> Vec<Arc<crate::run::Run>> {
        SessionCore::open_runs(self)
    }
    fn is_open(&self) -> bool {
        SessionCore::is_open(self)
    }
}

impl Drop for SessionCore {
    /// The last handle (session, table or cursor) is gone: release the directory.
    fn drop(&mut self) {
        self.close();
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
