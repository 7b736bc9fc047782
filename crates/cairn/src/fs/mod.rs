//! The file-system abstraction: every file operation of the engine goes through [`FileSystem`].
//!
//! Owns: the [`FileSystem`], [`WritableFile`], [`ReadableFile`] and [`FileLock`] traits, the real
//! implementation [`RealFs`] (POSIX, with `O_DIRECT` and `flock`), [`DirectIo`] (whether `O_DIRECT`
//! works in a directory, found by [`FileSystem::probe_direct_io`]), the simulated file system
//! `sim::MemFs` (feature `sim`, which the engine's own tests turn on), `FileWriter`, the
//! buffered append-only writer that computes a file's CRC32C while writing, and
//! `DeferredRemovals`, the session's queue of released files, removed in bounded steps or kept
//! in a pool for new files to be written over.
//!
//! May call: the standard library, `libc` and `log` (a refused `O_DIRECT`, once per session). Must never touch: engine structures (runs, tables).
//!
//! Every method returns a `Result`, files are trait objects, and nothing outside this module holds
//! a raw path to the operating system, so the simulated file system (`sim`) sees every operation:
//! it models what survives a power loss and injects faults from a seeded plan.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

#[cfg(any(test, feature = "sim"))]
pub mod sim;

#[cfg(any(test, feature = "sim"))]
pub use sim::{CrashReport, FaultKind, FaultPlan, FsOp, InjectedFault, MemFs, SplitMix64};

/// Alignment of O_DIRECT buffers, offsets and lengths: the rule a file opened with
/// [`ReadOptions::direct`] imposes on its reads.
pub(crate) const ALIGN_BYTES: usize = 4096;

/// How a file is opened for reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Bypass the operating system's page cache (`O_DIRECT`). Reads must then use buffers, offsets
    /// and lengths aligned to 4096 bytes.
    pub direct: bool,
    /// Hint that reads are random (`POSIX_FADV_RANDOM`): no read-ahead.
    pub random: bool,
}

/// Whether reads that ask for `O_DIRECT` ([`ReadOptions::direct`]) bypass the page cache, as
/// found by [`FileSystem::probe_direct_io`] in one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectIo {
    /// The file system accepts `O_DIRECT` in `dir`: direct reads bypass the page cache.
    Available {
        /// The directory probed.
        dir: PathBuf,
    },
    /// The file system refuses `O_DIRECT` in `dir` (tmpfs before Linux 6.6, ramfs, some FUSE
    /// and overlay mounts), or the platform has no `O_DIRECT`: files opened for direct reads
    /// are read through the page cache instead.
    Refused {
        /// The directory probed.
        dir: PathBuf,
        /// What the file system answered.
        reason: String,
    },
    /// Not known: the file system has no page cache to bypass (the simulated `MemFs`), it was
    /// not probed, or the probe itself failed.
    Unknown {
        /// Why it is not known.
        reason: String,
    },
}

impl DirectIo {
    /// Whether direct reads bypass the page cache.
    pub fn is_available(&self) -> bool {
        matches!(self, DirectIo::Available { .. })
    }

    /// Whether the file system refused `O_DIRECT` (direct reads go through the page cache).
    pub fn is_refused(&self) -> bool {
        matches!(self, DirectIo::Refused { .. })
    }

    /// The state before any probe.
    pub(crate) fn not_probed() -> DirectIo {
        DirectIo::Unknown {
            reason: "not probed".into(),
        }
    }
}

impl std::fmt::Display for DirectIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectIo::Available { dir } => {
                write!(f, "direct I/O available in {}", dir.display())
            }
            DirectIo::Refused { dir, reason } => write!(
                f,
                "direct I/O refused in {} ({reason}): reads go through the page cache",
                dir.display()
            ),
            DirectIo::Unknown { reason } => write!(f, "direct I/O unknown ({reason})"),
        }
    }
}

/// What [`FileSystem::file_space`] finds of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSpace {
    /// Its length in bytes.
    pub len: u64,
    /// How many names (hard links) it has; only the last one's removal frees its space.
    pub links: u64,
}

/// A file system: the real one, a simulated one, or a wrapper that injects faults.
pub trait FileSystem: Send + Sync + Debug + 'static {
    /// Creates a directory and its parents; succeeds if it exists.
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Names of the entries of a directory, sorted.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> Result<bool>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> Result<bool>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Removes a directory and everything under it.
    fn remove_dir_all(&self, path: &Path) -> Result<()>;
    /// Atomically renames a file, replacing `to` if it exists, or a directory to a name that does
    /// not exist yet.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Makes `to` a second name of the file `from`.
    fn hard_link(&self, from: &Path, to: &Path) -> Result<()>;
    /// The length of the file at `path` and how many names link to it (`stat`).
    fn file_space(&self, path: &Path) -> Result<FileSpace>;
    /// Cuts the file at `path` to its first `len` bytes (`truncate`), freeing the space of the
    /// rest; `len` is at most the file's length.
    fn truncate(&self, path: &Path, len: u64) -> Result<()>;
    /// Makes the directory's entries durable (`fsync` on the directory).
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Makes an existing file's contents durable (`fsync`), e.g. a file just hard-linked into
    /// a snapshot.
    fn sync_file(&self, path: &Path) -> Result<()>;
    /// Creates a new file for appending; fails if it already exists.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Renames the existing file `old` to `path` (which must not exist) and opens it for
    /// writing from its start over its old bytes, so that the blocks it has are written over
    /// rather than freed and allocated again. The writer must end with
    /// [`WritableFile::end_at_written`], which cuts the old bytes past what it wrote. If this
    /// fails, `old` is either still at its name or gone, never both nor half written. The
    /// default removes `old` and creates `path`.
    fn reuse(&self, old: &Path, path: &Path) -> Result<Box<dyn WritableFile>> {
        self.remove_file(old)?;
        self.create(path)
    }
    /// Opens an existing file for positional reads.
    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>>;
    /// Takes an exclusive lock on `path` (created if missing). Returns `Ok(None)` when another
    /// holder has it. The lock is released when the returned guard is dropped.
    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>>;
    /// Whether files in the existing directory `dir` opened with [`ReadOptions::direct`] really
    /// bypass the page cache. May create and remove a file named `direct-io-probe` in
    /// `dir`; never fails (a failed probe gives [`DirectIo::Unknown`]). Called once when a
    /// session opens. The default (simulated and wrapping file systems) is
    /// [`DirectIo::Unknown`].
    fn probe_direct_io(&self, dir: &Path) -> DirectIo {
        let _ = dir;
        DirectIo::Unknown {
            reason: "the file system is not the operating system's".into(),
        }
    }
}

/// A file system that refuses every change: the one a read-only session works through, so that
/// no path of the engine, even one overlooked by the session's own checks, can write to its
/// directory. Reads go to the wrapped file system; every other call fails with
/// [`Error::ReadOnly`], `try_lock` included (a read-only session takes no lock).
#[derive(Debug)]
pub(crate) struct ReadOnlyFs(pub(crate) Arc<dyn FileSystem>);

impl FileSystem for ReadOnlyFs {
    fn create_dir_all(&self, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("creating a directory"))
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.0.list_dir(path)
    }
    fn exists(&self, path: &Path) -> Result<bool> {
        self.0.exists(path)
    }
    fn is_dir(&self, path: &Path) -> Result<bool> {
        self.0.is_dir(path)
    }
    fn remove_file(&self, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("removing a file"))
    }
    fn remove_dir_all(&self, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("removing a directory"))
    }
    fn rename(&self, _: &Path, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("renaming"))
    }
    fn hard_link(&self, _: &Path, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("linking a file"))
    }
    fn file_space(&self, path: &Path) -> Result<FileSpace> {
        self.0.file_space(path)
    }
    fn truncate(&self, _: &Path, _: u64) -> Result<()> {
        Err(Error::ReadOnly("truncating a file"))
    }
    fn sync_dir(&self, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("syncing a directory"))
    }
    fn sync_file(&self, _: &Path) -> Result<()> {
        Err(Error::ReadOnly("syncing a file"))
    }
    fn create(&self, _: &Path) -> Result<Box<dyn WritableFile>> {
        Err(Error::ReadOnly("creating a file"))
    }
    fn reuse(&self, _: &Path, _: &Path) -> Result<Box<dyn WritableFile>> {
        Err(Error::ReadOnly("reusing a file"))
    }
    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>> {
        self.0.open(path, options)
    }
    fn try_lock(&self, _: &Path) -> Result<Option<Box<dyn FileLock>>> {
        Err(Error::ReadOnly("taking the session lock"))
    }
    fn probe_direct_io(&self, _: &Path) -> DirectIo {
        DirectIo::Unknown {
            reason: "a read-only session does not probe (the probe writes a file)".into(),
        }
    }
}

/// The file [`FileSystem::probe_direct_io`] may create (and removes) in the probed directory.
pub(crate) const DIRECT_IO_PROBE_NAME: &str = "direct-io-probe";

/// A file being written, append-only.
pub trait WritableFile: Send + Sync + Debug {
    /// Appends all of `bytes`.
    fn append(&mut self, bytes: &[u8]) -> Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Makes the file `len` bytes long, reading as zeros past what was appended (appends go on
    /// where they were; the real file system makes it sparse): later fsyncs of appends within
    /// it need not update the file's size. The default does nothing. The log preallocates its
    /// segments.
    fn preallocate(&mut self, len: u64) -> Result<()> {
        let _ = len;
        Ok(())
    }
    /// Starts writing back what was appended since the last call, without waiting for it
    /// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`; not a durability point). Long writers
    /// call it every MiB they append, so the device sees a steady stream of
    /// writes instead of the kernel's bursts, which stall reads. The default does nothing.
    fn start_writeback(&mut self) -> Result<()> {
        Ok(())
    }
    /// Makes the file end where this writer's appends end, cutting any older bytes past them
    /// (a file opened by [`FileSystem::reuse`]). The default does nothing: a created file ends
    /// there already.
    fn end_at_written(&mut self) -> Result<()> {
        Ok(())
    }
    /// The file's path.
    fn path(&self) -> &Path;
}

/// A file open for positional reads. Shared between threads.
pub trait ReadableFile: Send + Sync + Debug {
    /// Fills `buf` from `offset`; a short file is an error, never a partial success.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// The file's size in bytes.
    fn len_bytes(&self) -> Result<u64>;
    /// The file's path.
    fn path(&self) -> &Path;
    /// Whether the file was opened with `O_DIRECT`.
    fn is_direct(&self) -> bool;
    /// The operating-system descriptor, when there is one (the io_uring backend needs it).
    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::fd::RawFd>;
    /// Asks for `len` bytes from `offset` to be read into the page cache in the background
    /// (Linux `POSIX_FADV_WILLNEED`: the kernel issues the reads and returns without waiting for
    /// them), so that a later [`read_exact_at`](ReadableFile::read_exact_at) of them finds them
    /// there. A hint only: it changes no data, and a refused hint costs speed, never
    /// correctness, so it reports nothing. Does nothing for a file opened with `O_DIRECT` or
    /// without a page cache.
    fn prefetch(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

/// An exclusive lock held on a file; released on drop.
pub trait FileLock: Send + Sync + Debug {}

/// Reads a whole (small) file into memory.
pub(crate) fn read_all(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    let file = fs.open(path, ReadOptions::default())?;
    let len = file.len_bytes()?;
    let len = usize::try_from(len)
        .map_err(|_| Error::corrupt("file", format!("{} is too large", path.display())))?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Writes `bytes` to a new file at `path` atomically: a temporary file is written and fsynced,
/// then renamed over `path`, and the directory is fsynced.
pub(crate) fn write_atomic(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    if fs.exists(&tmp)? {
        fs.remove_file(&tmp)?;
    }
    let mut file = fs.create(&tmp)?;
    file.append(bytes)?;
    file.sync()?;
    drop(file);
    fs.rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        fs.sync_dir(dir)?;
    }
    Ok(())
}

/// Bytes [`copy_file`] reads and writes at a time.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// Copies the file `from` into a new file `to` without syncing it, and returns the copy's size and
/// CRC32C (computed over the bytes written). Memory: one chunk of 1 MiB, whatever the file's size.
pub(crate) fn copy_file(fs: &dyn FileSystem, from: &Path, to: &Path) -> Result<(u64, u32)> {
    let source = fs.open(from, ReadOptions::default())?;
    let len = source.len_bytes()?;
    let mut out = FileWriter::create(fs, to)?;
    let mut chunk = vec![0u8; len.min(COPY_CHUNK_BYTES) as usize];
    let mut offset = 0;
    while offset < len {
        let n = (len - offset).min(COPY_CHUNK_BYTES) as usize;
        source.read_exact_at(&mut chunk[..n], offset)?;
        out.write(&chunk[..n])?;
        offset += n as u64;
    }
    out.finish(false)
}

/// A buffered, append-only writer that computes the CRC32C of everything written.
///
/// Memory: one buffer of `buffer_bytes` (64 KiB by default). Each flush is one `append` call.
#[derive(Debug)]
pub(crate) struct FileWriter {
    file: Box<dyn WritableFile>,
    buffer: Vec<u8>,
    buffer_bytes: usize,
    crc: u32,
    written_bytes: u64,
    /// `written_bytes` when writeback was last started.
    writeback_from: u64,
    /// The removal queue that each flushed buffer earns budget in (see [`FileWriter::credit`]).
    credit: Option<Arc<DeferredRemovals>>,
    /// The file was an old one written over ([`FileWriter::create_reusing`]): finishing cuts it.
    reused: bool,
}

impl FileWriter {
    /// Default size of the write buffer.
    pub const BUFFER_BYTES_DEFAULT: usize = 64 * 1024;

    /// Bytes appended between two [`WritableFile::start_writeback`] calls (1 MiB, RocksDB's
    /// recommended `bytes_per_sync`).
    pub const WRITEBACK_BYTES: u64 = 1 << 20;

    /// Creates `path` and wraps it.
    pub fn create(fs: &dyn FileSystem, path: &Path) -> Result<FileWriter> {
        Ok(Self::wrap(fs.create(path)?, false))
    }

    /// Creates `path` from a file `removals` kept for reuse, the one best suited to about
    /// `hint` bytes ([`DeferredRemovals::take_recycled`], [`FileSystem::reuse`]), or as a new
    /// file when none is. If reusing fails, the old file goes back to the removal queue.
    pub(crate) fn create_reusing(
        fs: &dyn FileSystem,
        path: &Path,
        removals: &DeferredRemovals,
        hint: u64,
    ) -> Result<FileWriter> {
        let Some(old) = removals.take_recycled(hint) else {
            return Self::create(fs, path);
        };
        match fs.reuse(&old, path) {
            Ok(file) => Ok(Self::wrap(file, true)),
            Err(e) => {
                removals.defer([old]);
                Err(e)
            }
        }
    }

    fn wrap(file: Box<dyn WritableFile>, reused: bool) -> FileWriter {
        FileWriter {
            file,
            buffer: Vec::with_capacity(Self::BUFFER_BYTES_DEFAULT),
            buffer_bytes: Self::BUFFER_BYTES_DEFAULT,
            crc: 0,
            written_bytes: 0,
            writeback_from: 0,
            credit: None,
            reused,
        }
    }

    /// Counts every byte this writer appends towards the removal budget of `removals` (see
    /// [`DeferredRemovals`]): writers of run files do, so that a bulk load frees space as fast
    /// as it writes.
    pub fn credit(mut self, removals: &Arc<DeferredRemovals>) -> FileWriter {
        self.credit = Some(removals.clone());
        self
    }

    /// Appends `bytes` (buffered).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written_bytes += bytes.len() as u64;
        if self.buffer.len() + bytes.len() > self.buffer_bytes {
            self.flush_buffer()?;
        }
        if bytes.len() >= self.buffer_bytes {
            self.file.append(bytes)?;
            if let Some(removals) = &self.credit {
                removals.note_written(bytes.len() as u64);
            }
            Ok(())
        } else {
            self.buffer.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Bytes written so far (including buffered ones).
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    fn flush_buffer(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            self.file.append(&self.buffer)?;
            if let Some(removals) = &self.credit {
                removals.note_written(self.buffer.len() as u64);
            }
            self.buffer.clear();
        }
        let appended = self.written_bytes - self.buffer.len() as u64;
        if appended - self.writeback_from >= Self::WRITEBACK_BYTES {
            self.file.start_writeback()?;
            self.writeback_from = appended;
        }
        Ok(())
    }

    /// Flushes the buffer, optionally fsyncs, and returns `(size_bytes, crc32c)`.
    pub fn finish(mut self, sync: bool) -> Result<(u64, u32)> {
        self.flush_buffer()?;
        if self.reused {
            self.file.end_at_written()?;
        }
        if sync {
            self.file.sync()?;
        }
        Ok((self.written_bytes, self.crc))
    }
}

/// Files whose last user let go, waiting to be removed; one queue per session.
///
/// A run is released in `Drop`, which cannot report an error, so it only queues its files here.
/// The session's operations remove them in bounded steps ([`DeferredRemovals::remove_step`]) at
/// their start, and if a removal fails that operation fails before doing anything else (so it
/// can simply be retried): no error is swallowed, and the failed file stays queued. Reads
/// (lookups, cursors) take a step only when no other operation has for
/// [`DeferredRemovals::READS_PER_STEP`] reads ([`DeferredRemovals::remove_step_for_read`]): while
/// updates go on they pay for the removals their merges caused, and a lookup never waits for a
/// `truncate` (measured at 100M entries, lookups that took steps were most of the pipelined
/// run's slow batches: `docs/benchmarks/README.md`, "Read-ahead"); in a phase of reads only the
/// reads still empty the queue. Files still
/// queued when the session closes are removed then ([`DeferredRemovals::remove_all`]), or, if
/// that fails, when the directory is next opened (opening empties `active/`).
///
/// **Why in steps.** Freeing a file's blocks is not free: a file system mounted with online
/// discard (ext4 `-o discard`, common on SSDs and virtual disks) sends the freed ranges to the
/// device as TRIM, and reads queued behind it wait. Measured at 10M entries (serial UTxO run),
/// removing a merge's inputs at once made the next batch's lookups take 12 to 22 ms instead of 3
/// (`docs/benchmarks/README.md`, "File removal in steps"). So a step frees at most
/// [`DeferredRemovals::STEP_BYTES`] plus twice the bytes the session's writers appended since the
/// previous step (the credit keeps the backlog from growing while a bulk load writes much more
/// than a step per operation), cutting a large file from its end (`truncate`) and removing it
/// once it fits. A file that another name still links to (a snapshot's hard link) frees nothing
/// when removed, so it costs only its removal; it is never cut.
///
/// Cost per operation: an atomic load when the queue is empty, plus an atomic increment for a
/// read that leaves the step to others; otherwise one `stat` and one `remove_file` or
/// `truncate` per file it reaches, freeing at most the step's budget, and one `stat` and one
/// `rename` per file it keeps for reuse (pooling frees nothing, so it is not counted against
/// the budget: a step pools every recyclable file it reaches while the pool has room, at most
/// the four files of each run released since the last step). The backlog is bounded:
/// each step frees at least `STEP_BYTES` while any file waits, and at least twice what was
/// written since the last one; every operation but a read takes a step, and reads do once 32
/// of them pass without one.
///
/// **Recycling.** Better still is not to free the blocks at all. Files queued with
/// [`DeferredRemovals::defer_recyclable`] (run files that only this session ever opened: never
/// linked into a snapshot, never handed out) are renamed `<n>.free` and kept in a pool of at
/// most `recycle_bytes` bytes ([`crate::SessionOptions::recycle_bytes`]) and
/// [`DeferredRemovals::POOL_FILES_MAX`] files instead of being removed; to make room for a new
/// one, the oldest pooled files are removed (sizes no writer took lately). A writer of a new run
/// file takes the largest pooled file no larger than its size hint
/// ([`DeferredRemovals::take_recycled`]), renames it and writes over its blocks
/// ([`FileSystem::reuse`]), growing it as it needs. In a table of steady size, the runs a
/// level frees and the runs it later writes have about the same sizes, so most of the space is
/// written over and never trimmed. Pooled files are removed by [`DeferredRemovals::remove_all`]
/// (when the session's last open table closes, or the session does; after a crash, opening
/// empties `active/`); files larger than the whole pool, and pooled files evicted to make room,
/// are removed in the steps above.
#[derive(Debug, Default)]
pub(crate) struct DeferredRemovals {
    pending: AtomicBool,
    /// Bytes appended by the session's writers since the last step (see [`FileWriter::credit`]).
    written: AtomicU64,
    /// Reads that came since the last step an operation other than a read took.
    reads_since_step: AtomicU32,
    queue: Mutex<Queue>,
    /// The most bytes of files kept for reuse; 0 recycles nothing.
    recycle_bytes: u64,
    /// The only directory whose files are pooled (the session's `active/`): a file queued
    /// from elsewhere (an unfinished run in a snapshot being written, whose directory is
    /// removed as a whole) is removed, never pooled.
    recycle_dir: PathBuf,
    /// Key/ops bytes and entries of the runs written so far, each older run weighing less
    /// ([`DeferredRemovals::note_run`]), for the size hints of new ones.
    run_bytes: AtomicU64,
    run_entries: AtomicU64,
    /// Files pooled so far: the next pooled file's name.
    pooled: AtomicU64,
}

/// The extension of a file kept for reuse (`<n>.free`, beside the file it was).
pub(crate) const RECYCLED_EXTENSION: &str = "free";

/// What waits in [`DeferredRemovals`]: files to remove and files kept for reuse.
#[derive(Debug, Default)]
struct Queue {
    /// Files to remove (or to pool, when marked recyclable), removed newest first.
    paths: Vec<(PathBuf, bool)>,
    /// Files kept for reuse, with their sizes, oldest first; at most
    /// [`DeferredRemovals::POOL_FILES_MAX`].
    pool: Vec<(PathBuf, u64)>,
    /// The sum of the pooled sizes.
    pool_bytes: u64,
}

impl DeferredRemovals {
    /// Reads in a row, with no other operation's step among them, after which reads take steps
    /// too.
    pub(crate) const READS_PER_STEP: u32 = 32;

    /// The most files kept for reuse. A writer's pick and an eviction pass over the pool, so
    /// this bounds their cost; a table's released runs of useful sizes number far fewer (at
    /// 100M entries the pool held tens of files).
    pub(crate) const POOL_FILES_MAX: usize = 256;

    /// Bytes a removal step frees besides its credit (4 MiB: at 16 MiB per operation the
    /// measured lookup stall was back; see the type's doc).
    pub(crate) const STEP_BYTES: u64 = 4 << 20;

    /// A step does not cut a file by less than this; it leaves it to the next step instead.
    const CUT_MIN_BYTES: u64 = 64 << 10;

    /// A queue that keeps up to `recycle_bytes` bytes of recyclable files in directory `dir`
    /// for reuse (see the type's doc); [`DeferredRemovals::default`] recycles nothing.
    pub(crate) fn with_recycling(recycle_bytes: u64, dir: PathBuf) -> DeferredRemovals {
        DeferredRemovals {
            recycle_bytes,
            recycle_dir: dir,
            ..DeferredRemovals::default()
        }
    }

    /// Queues files for removal (no I/O).
    pub(crate) fn defer(&self, paths: impl IntoIterator<Item = PathBuf>) {
        self.enqueue(paths.into_iter().map(|path| (path, false)));
    }

    /// Queues files for removal that may be kept for reuse instead (no I/O). Only for files no
    /// one else can have open or linked: a reused file is written over in place.
    pub(crate) fn defer_recyclable(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let recycle = self.recycle_bytes > 0;
        self.enqueue(paths.into_iter().map(|path| (path, recycle)));
    }

    fn enqueue(&self, paths: impl Iterator<Item = (PathBuf, bool)>) {
        let mut queue = self.lock();
        if queue.paths.is_empty() {
            // Writes made while nothing waited earn no credit for later removals.
            self.written.store(0, Ordering::Relaxed);
        }
        queue.paths.extend(paths);
        self.pending
            .store(!queue.paths.is_empty(), Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the pooled file best suited to a new file of about `hint` bytes, if any (no I/O):
    /// the largest no larger than `hint` (the writer grows it as it needs), never a larger one.
    /// A file larger than what is written into it is cut at the end, and the cut frees, and on
    /// a file system with online discard trims, the rest while the writer waits and reads queue
    /// behind the trim: measured at 100M entries, key/ops files cut by 2.4 to 9.8 MB held a
    /// merge's last chunk for 6 ms and stalled the lookups beside it as long
    /// (`docs/benchmarks/README.md`, "Setup settled with completed merges"). Growing a file
    /// frees nothing. Cost: one pass over the pool.
    pub(crate) fn take_recycled(&self, hint: u64) -> Option<PathBuf> {
        let mut queue = self.lock();
        let best = (queue.pool.iter().enumerate())
            .filter(|(_, (_, len))| *len <= hint)
            .max_by_key(|(_, (_, len))| *len)
            .map(|(i, _)| i)?;
        // `remove`, not `swap_remove`: the pool stays oldest first, for eviction.
        let (path, len) = queue.pool.remove(best);
        queue.pool_bytes -= len;
        Some(path)
    }

    /// Bytes kept for reuse.
    #[cfg(test)]
    pub(crate) fn recycled_bytes(&self) -> u64 {
        self.lock().pool_bytes
    }

    /// Records a finished run's key/ops bytes and entries, for [`DeferredRemovals::keyops_hint`]:
    /// each sum loses an eighth of what it held, then gains the run's, so the hint follows the
    /// runs written lately (a table loaded with inserts and then updated with deletes too
    /// writes smaller entries than its load did).
    pub(crate) fn note_run(&self, keyops_bytes: u64, entries: u64) {
        let decay = |add: u64| move |sum: u64| Some((sum - sum / 8).saturating_add(add));
        // Two separate updates: a hint read between them is off by one run, which is harmless.
        let _ = (self.run_bytes).fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            decay(keyops_bytes),
        );
        let _ =
            (self.run_entries).fetch_update(Ordering::Relaxed, Ordering::Relaxed, decay(entries));
    }

    /// The key/ops bytes a run of `entries` entries will hold at least, as far as one can
    /// tell: the bytes per entry of the runs written lately ([`DeferredRemovals::note_run`];
    /// 0 before the first), less 1/16 for the error of that estimate, in whole pages of
    /// `page_bytes` rounded down (a key/ops file is made of pages). Low rather than high: a
    /// pooled file no larger than this is grown, never cut ([`DeferredRemovals::take_recycled`]).
    pub(crate) fn keyops_hint(&self, entries: u64, page_bytes: u64) -> u64 {
        let bytes = self.run_bytes.load(Ordering::Relaxed);
        let counted = self.run_entries.load(Ordering::Relaxed);
        if counted == 0 || entries == 0 || page_bytes == 0 {
            return 0;
        }
        let expected = (bytes as u128 * entries as u128 / counted as u128).min(u64::MAX as u128);
        let low = expected - expected / 16;
        (low / page_bytes as u128 * page_bytes as u128) as u64
    }

    /// Counts `bytes` appended by one of the session's writers towards the next step's budget.
    pub(crate) fn note_written(&self, bytes: u64) {
        if self.pending.load(Ordering::Relaxed) {
            self.written.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Whether files wait for removal.
    #[cfg(test)]
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// One bounded step (see the type's doc): removes queued files, newest first, and cuts the
    /// end off the one that does not fit in the budget. A file already gone counts as removed;
    /// any other failure is returned, and that file and the ones not yet reached stay queued.
    pub(crate) fn remove_step(&self, fs: &dyn FileSystem) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        self.reads_since_step.store(0, Ordering::Relaxed);
        self.step(fs)
    }

    /// A read's step: nothing until [`DeferredRemovals::READS_PER_STEP`] reads have come since
    /// another operation's step, then the same step as [`DeferredRemovals::remove_step`].
    pub(crate) fn remove_step_for_read(&self, fs: &dyn FileSystem) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let reads = self
            .reads_since_step
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or(u32::MAX);
        if reads < Self::READS_PER_STEP {
            return Ok(());
        }
        self.step(fs)
    }

    fn step(&self, fs: &dyn FileSystem) -> Result<()> {
        let credit = self.written.swap(0, Ordering::Relaxed);
        self.remove_within(
            fs,
            Self::STEP_BYTES.saturating_add(credit.saturating_mul(2)),
            true,
        )
    }

    /// Removes every queued file whatever its size (closing). Errors as for
    /// [`DeferredRemovals::remove_step`].
    /// The files kept for reuse are removed too.
    pub(crate) fn remove_all(&self, fs: &dyn FileSystem) -> Result<()> {
        {
            let mut queue = self.lock();
            let pooled: Vec<PathBuf> = queue.pool.drain(..).map(|(path, _)| path).collect();
            queue.pool_bytes = 0;
            if !pooled.is_empty() {
                queue
                    .paths
                    .extend(pooled.into_iter().map(|path| (path, false)));
                self.pending.store(true, Ordering::Release);
            }
        }
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        self.remove_within(fs, u64::MAX, false)
    }

    /// Removes queued files until `budget` bytes are freed; `pool`: recyclable files go to the
    /// pool while it has room (they free nothing).
    fn remove_within(&self, fs: &dyn FileSystem, mut budget: u64, pool: bool) -> Result<()> {
        let not_found = |e: &Error| matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
        let mut queue = self.lock();
        let queue = &mut *queue;
        while let Some((path, recyclable)) = queue.paths.last().cloned() {
            let path = &path;
            let space = match fs.file_space(path) {
                Ok(space) => Some(space),
                Err(e) if not_found(&e) => None,
                Err(e) => return Err(e),
            };
            if let Some(space) = space {
                let frees = space.links <= 1;
                if pool
                    && recyclable
                    && path.parent() == Some(self.recycle_dir.as_path())
                    && frees
                    && space.len > 0
                    && space.len <= self.recycle_bytes
                {
                    // Room first: the oldest pooled files go back to the queue, to be removed
                    // after the rest. A file no writer took for that long is one whose size
                    // the runs written lately do not need; kept, it would hold the pool's room
                    // for ever (a writer never takes a file larger than its hint).
                    while queue.pool.len() >= Self::POOL_FILES_MAX
                        || queue.pool_bytes + space.len > self.recycle_bytes
                    {
                        let (old, len) = queue.pool.remove(0);
                        queue.pool_bytes -= len;
                        queue.paths.insert(0, (old, false));
                    }
                    // Kept for a new run to write over: nothing freed, nothing trimmed. Renamed,
                    // so that no one mistakes it for the run file it was.
                    let seq = self.pooled.fetch_add(1, Ordering::Relaxed);
                    let pooled = path.with_file_name(format!("{seq}.{RECYCLED_EXTENSION}"));
                    fs.rename(path, &pooled)?;
                    queue.pool_bytes += space.len;
                    queue.pool.push((pooled, space.len));
                    queue.paths.pop();
                    continue;
                }
                if frees && space.len > budget {
                    if budget >= Self::CUT_MIN_BYTES {
                        fs.truncate(path, space.len - budget)?;
                    }
                    return Ok(());
                }
                match fs.remove_file(path) {
                    Ok(()) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(e),
                }
                if frees {
                    budget -= space.len;
                }
            }
            queue.paths.pop();
        }
        self.pending.store(false, Ordering::Release);
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// The real file system.

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl RealFs {
    /// A handle to the real file system.
    pub fn new() -> RealFs {
        RealFs
    }
}

#[derive(Debug)]
struct RealWritable {
    file: std::fs::File,
    path: PathBuf,
    /// Bytes appended (the file's offset: appends start at 0).
    written: u64,
}

#[derive(Debug)]
struct RealReadable {
    file: std::fs::File,
    path: PathBuf,
    direct: bool,
}

/// A lock file held by this process: an `flock` lock on the file, plus the file's entry in
/// [`HELD_LOCKS`].
#[derive(Debug)]
struct RealLock {
    /// `None` only inside `drop`.
    file: Option<std::fs::File>,
    /// The key in [`HELD_LOCKS`].
    key: PathBuf,
}

impl FileLock for RealLock {}

impl Drop for RealLock {
    fn drop(&mut self) {
        // The entry first, then the lock (the descriptor's close releases it): a session of
        // this process that opens between the two waits the moment for the lock.
        held_locks().remove(&self.key);
        drop(self.file.take());
    }
}

/// The lock files this process holds, by canonical path: a second holder in this process is
/// refused at once, without [`LOCK_WAIT`]. (Only a shortcut: the `flock` lock itself is what
/// excludes, between the sessions of one process as between processes.)
static HELD_LOCKS: Mutex<std::collections::BTreeSet<PathBuf>> =
    Mutex::new(std::collections::BTreeSet::new());

fn held_locks() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<PathBuf>> {
    // The set stays consistent under any panic (one insert or remove at a time).
    HELD_LOCKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long [`RealFs::try_lock`] retries a lock that another process holds before it reports
/// the lock as held.
///
/// Why wait at all: an `flock` lock belongs to the open file description, and a child process
/// shares every description of its parent from `fork` until its `exec` closes the descriptors
/// (`O_CLOEXEC`). So when any thread of this process spawns a program just as a session of
/// this process closes, the child holds that session's lock for the moment it takes to exec
/// (microseconds; milliseconds on a loaded machine), and opening the session again at that
/// moment would find it "locked by another session" (seen in CI: tests spawning `git` beside
/// a test that closes and reopens a session). Record locks (`fcntl`), which no child inherits,
/// were tried and rejected: they are per process, so opening and closing the lock file
/// anywhere in the process (a copy of the directory, say) silently drops the lock, a failure
/// that lets two writers in rather than keeping one out.
pub(crate) const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl FileSystem for RealFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::io("create_dir_all", path, e))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let entries = std::fs::read_dir(path).map_err(|e| Error::io("read_dir", path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("read_dir", path, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        path.try_exists().map_err(|e| Error::io("stat", path, e))
    }

    fn is_dir(&self, path: &Path) -> Result<bool> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("stat", path, e)),
        }
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("remove_file", path, e))
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::remove_dir_all(path).map_err(|e| Error::io("remove_dir_all", path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::hard_link(from, to).map_err(|e| Error::io("hard_link", from, e))
    }

    fn file_space(&self, path: &Path) -> Result<FileSpace> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        #[cfg(unix)]
        let links = std::os::unix::fs::MetadataExt::nlink(&meta);
        #[cfg(not(unix))]
        let links = 1;
        Ok(FileSpace {
            len: meta.len(),
            links,
        })
    }

    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        file.set_len(len)
            .map_err(|e| Error::io("truncate", path, e))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let dir = std::fs::File::open(path).map_err(|e| Error::io("open_dir", path, e))?;
        dir.sync_all().map_err(|e| Error::io("fsync_dir", path, e))
    }

    fn sync_file(&self, path: &Path) -> Result<()> {
        let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
        file.sync_all().map_err(|e| Error::io("fsync", path, e))
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(RealWritable {
            file,
            path: path.to_path_buf(),
            written: 0,
        }))
    }

    fn reuse(&self, old: &Path, path: &Path) -> Result<Box<dyn WritableFile>> {
        // Opened before the rename, so that a failure leaves `old` where it was.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(old)
            .map_err(|e| Error::io("open", old, e))?;
        if std::fs::exists(path).map_err(|e| Error::io("stat", path, e))? {
            return Err(Error::io(
                "reuse",
                path,
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        std::fs::rename(old, path).map_err(|e| Error::io("rename", old, e))?;
        Ok(Box::new(RealWritable {
            file,
            path: path.to_path_buf(),
            written: 0,
        }))
    }

    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>> {
        let (file, refusal) =
            open_for_read(path, options.direct).map_err(|e| Error::io("open", path, e))?;
        if let Some(refusal) = &refusal {
            // Reported once per session by `probe_direct_io`; per file only for debugging.
            log::debug!(
                "{} is read through the page cache: {refusal}",
                path.display()
            );
        }
        let direct = options.direct && refusal.is_none();
        #[cfg(target_os = "linux")]
        if options.random {
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is valid for the lifetime of `file`; fadvise only takes a hint.
            let rc =
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
            if rc != 0 {
                return Err(Error::io(
                    "fadvise",
                    path,
                    std::io::Error::from_raw_os_error(rc),
                ));
            }
        }
        Ok(Arc::new(RealReadable {
            file,
            path: path.to_path_buf(),
            direct,
        }))
    }

    fn probe_direct_io(&self, dir: &Path) -> DirectIo {
        let path = dir.join(DIRECT_IO_PROBE_NAME);
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .and_then(|_| open_for_read(&path, true));
        // Best effort: a leftover is one empty file, in `active/` removed at the next open.
        let _ = std::fs::remove_file(&path);
        let dir = dir.to_path_buf();
        let direct_io = match opened {
            Ok((_, None)) => DirectIo::Available { dir },
            Ok((_, Some(refusal))) => DirectIo::Refused {
                dir,
                reason: refusal.to_string(),
            },
            Err(e) => DirectIo::Unknown {
                reason: format!("probing {} failed: {e}", path.display()),
            },
        };
        match &direct_io {
            DirectIo::Available { .. } => log::debug!("{direct_io}"),
            _ => log::warn!("{direct_io}"),
        }
        direct_io
    }

    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>> {
        // The key names the file however `path` reaches it (symbolic links, `..`): its
        // directory's canonical path and its name.
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::io(
                "lock",
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
            ));
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let key = std::fs::canonicalize(parent)
            .map_err(|e| Error::io("lock", path, e))?
            .join(name);
        if held_locks().contains(&key) {
            return Ok(None);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open_lock", path, e))?;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if std::time::Instant::now() >= deadline {
                        return Ok(None);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(25));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io("lock", path, e)),
            }
        }
        held_locks().insert(key.clone());
        Ok(Some(Box::new(RealLock {
            file: Some(file),
            key,
        })))
    }
}

/// Opens `path` for reading, with `O_DIRECT` when `direct` is set (Linux only). When the file
/// system refuses the flag (`EINVAL`: tmpfs before Linux 6.6, ramfs, some FUSE and overlay
/// mounts) or the platform lacks it, the file is opened without it and the refusal is returned
/// alongside, so that [`RealFs::open`] and [`RealFs::probe_direct_io`] decide alike.
fn open_for_read(
    path: &Path,
    direct: bool,
) -> std::io::Result<(std::fs::File, Option<std::io::Error>)> {
    let plain = || std::fs::OpenOptions::new().read(true).open(path);
    if !direct {
        return Ok((plain()?, None));
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => Ok((file, None)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let refusal =
                    std::io::Error::new(e.kind(), format!("the file system refuses O_DIRECT: {e}"));
                Ok((plain()?, Some(refusal)))
            }
            Err(e) => Err(e),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let refusal = std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "O_DIRECT is used on Linux only",
        );
        Ok((plain()?, Some(refusal)))
    }
}

impl WritableFile for RealWritable {
    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn end_at_written(&mut self) -> Result<()> {
        self.file
            .set_len(self.written)
            .map_err(|e| Error::io("truncate", &self.path, e))
    }

    fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync", &self.path, e))
    }

    fn preallocate(&mut self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| Error::io("set_len", &self.path, e))
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for as long as `self.file` lives; offset 0 and
        // length 0 mean the whole file; the call only starts writeback of dirty pages.
        let rc = unsafe {
            libc::sync_file_range(self.file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
        };
        if rc != 0 {
            return Err(Error::io(
                "sync_file_range",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl ReadableFile for RealReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| Error::io("read", &self.path, e))
    }

    fn len_bytes(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len())
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.file.as_raw_fd())
    }

    fn prefetch(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        if !self.direct {
            use std::os::fd::AsRawFd;
            let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
            else {
                return;
            };
            // SAFETY: the descriptor is valid for the lifetime of `self.file`; fadvise only takes
            // a hint and touches no memory of this process.
            let rc = unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    offset,
                    len,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
            if rc != 0 {
                log::debug!("fadvise(WILLNEED) on {}: errno {rc}", self.path.display());
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(fs: &dyn FileSystem, root: &Path) {
        let dir = root.join("a/b");
        fs.create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut w = FileWriter::create(fs, &path).unwrap();
        w.write(b"hello ").unwrap();
        w.write(&vec![7u8; 100_000]).unwrap();
        w.write(b"world").unwrap();
        let (len, crc) = w.finish(true).unwrap();
        assert_eq!(len, 100_011);
        let bytes = read_all(fs, &path).unwrap();
        assert_eq!(bytes.len(), 100_011);
        assert_eq!(crc, crc32c::crc32c(&bytes));
        assert!(fs.create(&path).is_err(), "create must not overwrite");
        let f = fs.open(&path, ReadOptions::default()).unwrap();
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 100_006).unwrap();
        assert_eq!(&buf, b"world");
        assert!(
            f.read_exact_at(&mut buf, 100_008).is_err(),
            "short read is an error"
        );
        let one = FileSpace {
            len: 100_011,
            links: 1,
        };
        assert_eq!(fs.file_space(&path).unwrap(), one);
        fs.hard_link(&path, &dir.join("g")).unwrap();
        assert_eq!(fs.file_space(&path).unwrap(), FileSpace { links: 2, ..one });
        fs.remove_file(&path).unwrap();
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(fs.list_dir(&dir).unwrap(), vec!["g".to_string()]);
        assert_eq!(fs.file_space(&dir.join("g")).unwrap(), one);
        assert!(fs.file_space(&path).is_err(), "no such file");
        fs.truncate(&dir.join("g"), 6).unwrap();
        assert_eq!(read_all(fs, &dir.join("g")).unwrap(), b"hello ");
        let lock = fs.try_lock(&root.join("LOCK")).unwrap();
        assert!(lock.is_some());
        assert!(fs.try_lock(&root.join("LOCK")).unwrap().is_none());
        drop(lock);
        assert!(fs.try_lock(&root.join("LOCK")).unwrap().is_some());
        write_atomic(fs, &dir.join("meta"), b"m1").unwrap();
        write_atomic(fs, &dir.join("meta"), b"m2").unwrap();
        assert_eq!(read_all(fs, &dir.join("meta")).unwrap(), b"m2");
        fs.remove_dir_all(&root.join("a")).unwrap();
        assert!(!fs.exists(&dir).unwrap());
    }

    /// A file of `len` bytes at `path` on `fs`.
    fn file_of(fs: &dyn FileSystem, path: &Path, len: usize) {
        let mut w = FileWriter::create(fs, path).unwrap();
        w.write(&vec![1u8; len]).unwrap();
        w.finish(false).unwrap();
    }

    /// A step frees at most its budget: a large file is cut from its end over several steps and
    /// removed once it fits; small files go whole; a file with another name goes at once (its
    /// removal frees nothing) and is never cut.
    #[test]
    fn removal_steps_free_a_bounded_amount() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES as usize;
        let big = dir.join("big");
        file_of(&fs, &big, 2 * step + step / 2);
        let small = dir.join("small");
        file_of(&fs, &small, step / 4);
        let shared = dir.join("shared");
        file_of(&fs, &shared, 3 * step);
        fs.hard_link(&shared, &dir.join("link")).unwrap();
        let removals = DeferredRemovals::default();
        // Removed newest first: shared, small, then big.
        removals.defer([big.clone(), small.clone(), shared.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(!fs.exists(&shared).unwrap() && !fs.exists(&small).unwrap());
        assert_eq!(
            fs.file_space(&dir.join("link")).unwrap().len,
            3 * step as u64,
            "the other name keeps every byte"
        );
        // The rest of the budget (three quarters of a step) came off the big file.
        assert_eq!(
            fs.file_space(&big).unwrap().len,
            (2 * step + step / 2 - 3 * step / 4) as u64
        );
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, (step - step / 4) as u64);
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert!(!fs.exists(&big).unwrap());
        assert!(!removals.is_pending());
        assert_eq!(fs.list_dir(dir).unwrap(), vec!["link".to_string()]);
    }

    /// Bytes written while files wait raise the next step's budget (twice the bytes); bytes
    /// written while nothing waited do not.
    #[test]
    fn removal_steps_keep_pace_with_writes() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES;
        let removals = Arc::new(DeferredRemovals::default());
        let mut w = FileWriter::create(&fs, &dir.join("w"))
            .unwrap()
            .credit(&removals);
        w.write(&vec![0u8; step as usize]).unwrap();
        let big = dir.join("big");
        file_of(&fs, &big, 6 * step as usize);
        removals.defer([big.clone()]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, 5 * step, "no credit yet");
        w.write(&vec![0u8; 2 * step as usize]).unwrap();
        removals.remove_step(&fs).unwrap();
        assert!(
            !fs.exists(&big).unwrap(),
            "a step plus twice 2 steps' writes"
        );
        w.finish(false).unwrap();
    }

    /// Reads leave the removals to the other operations while those take steps: a read steps
    /// only after `READS_PER_STEP` reads in a row with no other step, and then every read does
    /// until another operation steps again.
    #[test]
    fn reads_take_removal_steps_only_when_nothing_else_does() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES;
        let big = dir.join("big");
        file_of(&fs, &big, 20 * step as usize);
        let removals = DeferredRemovals::default();
        removals.defer([big.clone()]);
        let len = || fs.file_space(&big).unwrap().len;
        for steps in 0..3 {
            for _ in 0..DeferredRemovals::READS_PER_STEP {
                removals.remove_step_for_read(&fs).unwrap();
            }
            assert_eq!(
                len(),
                (20 - steps) * step,
                "reads while others step remove nothing"
            );
            removals.remove_step(&fs).unwrap();
        }
        assert_eq!(len(), 17 * step);
        for _ in 0..DeferredRemovals::READS_PER_STEP + 2 {
            removals.remove_step_for_read(&fs).unwrap();
        }
        assert_eq!(
            len(),
            15 * step,
            "reads alone step once they are the only ones"
        );
        removals.remove_step(&fs).unwrap();
        removals.remove_step_for_read(&fs).unwrap();
        assert_eq!(len(), 14 * step, "another operation's step hands it back");
    }

    /// A failed cut or removal fails the step and leaves the file queued; the next step
    /// finishes the job. Closing removes everything whatever its size.
    #[test]
    fn failed_removal_steps_keep_the_file_queued() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES as usize;
        let big = dir.join("big");
        file_of(&fs, &big, 3 * step);
        let removals = DeferredRemovals::default();
        removals.defer([big.clone()]);
        fs.fail_after(1); // the stat passes, the cut fails
        assert!(removals.remove_step(&fs).is_err());
        assert_eq!(fs.file_space(&big).unwrap().len, 3 * step as u64);
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, 2 * step as u64);
        removals.remove_all(&fs).unwrap();
        assert!(!fs.exists(&big).unwrap());
        assert!(!removals.is_pending());
    }

    /// Recyclable files within the pool's size are kept, not freed; a writer takes the largest
    /// no larger than its size hint, writes over it and cuts it to what it wrote. Files beyond the pool's
    /// size, files with another name and files not marked recyclable are removed as before;
    /// closing removes the pool.
    #[test]
    fn recycled_files_are_written_over_not_freed() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let kib = 1usize << 10;
        let removals = DeferredRemovals::with_recycling(200 * kib as u64, dir.to_path_buf());
        let (a, b, c, d, e) = (
            dir.join("a"),
            dir.join("b"),
            dir.join("c"),
            dir.join("d"),
            dir.join("e"),
        );
        file_of(&fs, &a, 100 * kib);
        file_of(&fs, &b, 40 * kib);
        file_of(&fs, &c, 90 * kib); // a, the oldest pooled, makes room for it
        file_of(&fs, &d, 10 * kib);
        fs.hard_link(&d, &dir.join("d-link")).unwrap();
        file_of(&fs, &e, 10 * kib);
        removals.defer([e.clone()]);
        removals.defer_recyclable([d.clone(), c.clone(), b.clone(), a.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(!removals.is_pending());
        assert_eq!(removals.recycled_bytes(), 130 * kib as u64);
        // Newest first: a became 0.free, b 1.free, then c 2.free, for which 0.free was
        // removed (100 + 40 + 90 KiB would not fit); d's name and e are gone.
        assert_eq!(fs.list_dir(dir).unwrap(), ["1.free", "2.free", "d-link"]);

        // Nothing as small as 1 KiB: a new file.
        assert_eq!(removals.take_recycled(kib as u64), None);
        // 45 KiB: b, the largest no larger (never c, which would be cut); 1 MiB: c.
        let mut w =
            FileWriter::create_reusing(&fs, &dir.join("n1"), &removals, 45 * kib as u64).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), ["2.free", "d-link", "n1"]);
        w.write(b"short").unwrap();
        assert_eq!(w.finish(false).unwrap().0, 5);
        assert_eq!(fs.file_bytes(&dir.join("n1")).unwrap(), b"short");
        let mut w = FileWriter::create_reusing(&fs, &dir.join("n2"), &removals, 1 << 20).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), ["d-link", "n1", "n2"]);
        let long = vec![7u8; 150 * kib];
        w.write(&long).unwrap();
        w.finish(false).unwrap();
        assert_eq!(fs.file_bytes(&dir.join("n2")).unwrap(), long);
        assert_eq!(removals.recycled_bytes(), 0);

        // Closing removes what the pool holds.
        file_of(&fs, &a, 100 * kib);
        removals.defer_recyclable([a.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(fs.exists(&dir.join("3.free")).unwrap());
        removals.remove_all(&fs).unwrap();
        assert!(!fs.exists(&dir.join("3.free")).unwrap());
        assert_eq!(removals.recycled_bytes(), 0);

        // A file outside the pool's directory is removed, not pooled.
        fs.create_dir_all(Path::new("/elsewhere")).unwrap();
        let outside = Path::new("/elsewhere/f");
        file_of(&fs, outside, 10 * kib);
        removals.defer_recyclable([outside.to_path_buf()]);
        removals.remove_step(&fs).unwrap();
        assert!(fs.list_dir(Path::new("/elsewhere")).unwrap().is_empty());
        assert_eq!(removals.recycled_bytes(), 0);

        // A queue without a pool removes recyclable files like any other.
        let plain = DeferredRemovals::default();
        file_of(&fs, &a, 100 * kib);
        plain.defer_recyclable([a.clone()]);
        plain.remove_step(&fs).unwrap();
        assert!(!fs.exists(&a).unwrap());
    }

    /// The pool keeps at most `POOL_FILES_MAX` files however small: each file pooled beyond
    /// that removes the oldest, so files no writer takes (larger than every hint) leave in time
    /// and a writer's pick stays a pass over a bounded list.
    #[test]
    fn the_pool_keeps_the_newest_files_within_its_count() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let removals = DeferredRemovals::with_recycling(1 << 30, dir.to_path_buf());
        let max = DeferredRemovals::POOL_FILES_MAX;
        for i in 0..max + 10 {
            let path = dir.join(format!("f{i}"));
            file_of(&fs, &path, 100);
            removals.defer_recyclable([path]);
            removals.remove_step(&fs).unwrap();
        }
        assert!(!removals.is_pending());
        assert_eq!(removals.recycled_bytes(), 100 * max as u64);
        let mut names = fs.list_dir(dir).unwrap();
        names.sort_by_key(|n| n.trim_end_matches(".free").parse::<usize>().unwrap());
        let want: Vec<String> = (10..max + 10).map(|i| format!("{i}.free")).collect();
        assert_eq!(names, want, "the ten oldest were removed");
        // A pick takes one out of the middle; the order of the rest is kept for eviction.
        let taken = removals.take_recycled(100).unwrap();
        fs.remove_file(&taken).unwrap(); // as if written over under another name
        let path = dir.join("g");
        file_of(&fs, &path, 100);
        removals.defer_recyclable([path]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap().len(), max);
        assert_eq!(removals.recycled_bytes(), 100 * max as u64);
    }

    /// A reuse that fails (the rename, here) leaves the pooled file at its name, queued for
    /// removal, and the new name absent.
    #[test]
    fn failed_reuse_queues_the_old_file_for_removal() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let removals = DeferredRemovals::with_recycling(1 << 20, dir.to_path_buf());
        let old = dir.join("old");
        file_of(&fs, &old, 4096);
        removals.defer_recyclable([old.clone()]);
        removals.remove_step(&fs).unwrap();
        let pooled = dir.join("0.free");
        assert!(fs.exists(&pooled).unwrap());
        fs.fail_after(1); // the open passes, the rename fails
        assert!(FileWriter::create_reusing(&fs, &dir.join("new"), &removals, 4096).is_err());
        assert!(fs.exists(&pooled).unwrap() && !fs.exists(&dir.join("new")).unwrap());
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), Vec::<String>::new());
    }

    /// The key/ops size hint scales the bytes per entry seen so far, less 1/16, and rounds
    /// down to whole pages; nothing is guessed before the first run.
    #[test]
    fn keyops_hints_are_whole_pages_at_the_rate_seen() {
        let removals = DeferredRemovals::default();
        assert_eq!(removals.keyops_hint(1000, 4096), 0);
        removals.note_run(8192, 100); // ~82 bytes an entry
        assert_eq!(removals.keyops_hint(0, 4096), 0);
        assert_eq!(removals.keyops_hint(1, 4096), 0);
        assert_eq!(removals.keyops_hint(53, 4096), 0); // 4342 bytes less 1/16
        assert_eq!(removals.keyops_hint(54, 4096), 4096);
        assert_eq!(removals.keyops_hint(100, 4096), 4096);
        assert_eq!(removals.keyops_hint(110, 4096), 8192);
        assert_eq!(removals.keyops_hint(1000, 0), 0);
    }

    /// The hint follows the runs written lately: after a long load at 100 bytes an entry, 60
    /// runs a tenth of the size at 60 bytes bring it within 1% of the new rate, however long
    /// the load.
    #[test]
    fn keyops_hints_follow_the_recent_rate() {
        let removals = DeferredRemovals::default();
        for _ in 0..1000 {
            removals.note_run(100_000_000, 1_000_000);
        }
        // 100 MB less 1/16, in whole pages.
        assert_eq!(removals.keyops_hint(1_000_000, 4096), 93_749_248);
        for _ in 0..60 {
            removals.note_run(6_000_000, 100_000);
        }
        let hint = removals.keyops_hint(1_000_000, 4096);
        assert!(
            hint.abs_diff(60_000_000 - 60_000_000 / 16) <= 600_000,
            "hint {hint} after the rate fell to 60 bytes an entry"
        );
    }

    /// A writer never takes a pooled file larger than its hint: cutting one back frees (and
    /// trims) the rest while reads wait.
    #[test]
    fn recycling_never_takes_a_larger_file() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let kib = 1u64 << 10;
        let removals = DeferredRemovals::with_recycling(1 << 20, dir.to_path_buf());
        let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
        file_of(&fs, &a, 100 * kib as usize);
        file_of(&fs, &b, 40 * kib as usize);
        file_of(&fs, &c, 91 * kib as usize);
        removals.defer_recyclable([a, b, c]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(removals.recycled_bytes(), 231 * kib);
        // 90 KiB: not c (91) nor a (100), the nearest ones, but b, the largest no larger.
        assert!(removals.take_recycled(90 * kib).is_some());
        assert_eq!(removals.recycled_bytes(), 191 * kib);
        // 99 KiB: c; 39 KiB: nothing left that small.
        assert!(removals.take_recycled(99 * kib).is_some());
        assert_eq!(removals.recycled_bytes(), 100 * kib);
        assert_eq!(removals.take_recycled(39 * kib), None);
        assert_eq!(removals.take_recycled(100 * kib).map(|_| ()), Some(()));
        assert_eq!(removals.recycled_bytes(), 0);
    }

    /// The real file system's reuse renames the old file, writes over it from its start and
    /// cuts it to what was written; onto an existing name it fails and changes nothing.
    #[test]
    fn real_fs_reuse_writes_over_and_cuts() {
        let tmp = tempfile::tempdir().unwrap();
        let fs = RealFs;
        let (old, new, taken) = (
            tmp.path().join("old"),
            tmp.path().join("new"),
            tmp.path().join("taken"),
        );
        std::fs::write(&old, vec![9u8; 100_000]).unwrap();
        std::fs::write(&taken, b"x").unwrap();
        assert!(fs.reuse(&old, &taken).is_err());
        assert_eq!(std::fs::read(&old).unwrap().len(), 100_000);
        assert_eq!(std::fs::read(&taken).unwrap(), b"x");
        let mut file = fs.reuse(&old, &new).unwrap();
        file.append(b"hello ").unwrap();
        file.append(b"world").unwrap();
        file.end_at_written().unwrap();
        file.sync().unwrap();
        drop(file);
        assert!(!old.exists());
        assert_eq!(std::fs::read(&new).unwrap(), b"hello world");
    }

    #[test]
    fn real_fs_behaves() {
        let tmp = tempfile::tempdir().unwrap();
        exercise(&RealFs, tmp.path());
    }

    /// The lock of a real directory excludes other processes and is taken once per process
    /// (also through another spelling of its path); a child forked while it was held keeps it
    /// for as long as the child has the inherited descriptor, and a new holder waits for that
    /// (within `LOCK_WAIT`) rather than being refused (as when a thread spawns a program just
    /// as a session closes and reopens).
    #[cfg(target_os = "linux")]
    #[test]
    fn real_locks_exclude_and_outwait_a_forked_child() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        let path = tmp.path().join("d/lock");
        let lock = RealFs.try_lock(&path).unwrap().expect("free");
        let other_spelling = tmp.path().join("d/../d/lock");
        let start = std::time::Instant::now();
        assert!(RealFs.try_lock(&other_spelling).unwrap().is_none());
        assert!(
            start.elapsed() < LOCK_WAIT,
            "a holder in this process is refused at once"
        );
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let mut pipe = [0i32; 2];
        // SAFETY: `pipe` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        // SAFETY: after the fork the child calls only async-signal-safe functions (open, flock,
        // write, nanosleep, _exit) on memory prepared before it, and never returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; every pointer is to memory the child's copy still holds.
            unsafe {
                let fd = libc::open(c_path.as_ptr(), libc::O_RDWR);
                let refused = fd >= 0 && libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == -1;
                let byte = [u8::from(refused)];
                libc::write(pipe[1], byte.as_ptr().cast(), 1);
                let nap = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                libc::nanosleep(&nap, std::ptr::null_mut());
                libc::_exit(0);
            }
        }
        assert!(pid > 0, "fork failed");
        let mut byte = [0u8; 1];
        // SAFETY: the read end is open and `byte` has room for one byte.
        let n = unsafe { libc::read(pipe[0], byte.as_mut_ptr().cast(), 1) };
        // The child still has the descriptor: the lock stays held until it exits.
        drop(lock);
        let again = RealFs.try_lock(&path);
        // SAFETY: `pid` is our child; reaping it and closing the pipe touch nothing else.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
        assert_eq!((n, byte[0]), (1, 1), "another process took the held lock");
        assert!(
            again.unwrap().is_some(),
            "not taken once the forked child exited"
        );
    }

    /// A writer of several MiB starts writeback along the way (`sync_file_range` on Linux)
    /// and still writes every byte, with the right checksum.
    #[test]
    fn long_writes_start_writeback_and_keep_every_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("long");
        let mut w = FileWriter::create(&RealFs, &path).unwrap();
        let chunk: Vec<u8> = (0..10_007u32).map(|i| (i % 251) as u8).collect();
        let mut want = Vec::new();
        while want.len() < 3 * FileWriter::WRITEBACK_BYTES as usize + 12_345 {
            w.write(&chunk).unwrap();
            want.extend_from_slice(&chunk);
        }
        // Started at least twice: every time a MiB more had been appended.
        assert!(w.writeback_from >= 2 * FileWriter::WRITEBACK_BYTES);
        let (len, crc) = w.finish(false).unwrap();
        assert_eq!(len, want.len() as u64);
        assert_eq!(crc, crc32c::crc32c(&want));
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }

    /// `O_DIRECT` opens succeed on tmpfs: natively (Linux 6.6+) or by falling back to buffered
    /// reads when the file system refuses the flag with EINVAL. Skipped without /dev/shm.
    #[test]
    fn real_fs_direct_open_works_on_tmpfs() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let Ok(tmp) = tempfile::tempdir_in(shm) else {
            return;
        };
        let path = tmp.path().join("f");
        let bytes: Vec<u8> = (0..2 * crate::io::ALIGN_BYTES).map(|i| i as u8).collect();
        write_atomic(&RealFs, &path, &bytes).unwrap();
        let options = ReadOptions {
            direct: true,
            random: true,
        };
        let file = RealFs.open(&path, options).unwrap();
        assert_eq!(file.len_bytes().unwrap(), bytes.len() as u64);
        let mut buf = crate::io::AlignedBuf::zeroed(crate::io::ALIGN_BYTES);
        file.read_exact_at(&mut buf, crate::io::ALIGN_BYTES as u64)
            .unwrap();
        assert_eq!(&buf[..], &bytes[crate::io::ALIGN_BYTES..]);
    }

    #[test]
    fn mem_fs_behaves() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/root")).unwrap();
        exercise(&fs, Path::new("/root"));
    }
}
