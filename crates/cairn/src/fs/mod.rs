//! The file-system abstraction: every file operation of the engine goes through [`FileSystem`].
//!
//! Owns: the [`FileSystem`], [`WritableFile`], [`ReadableFile`] and [`FileLock`] traits, the real
//! implementation [`RealFs`] (POSIX, with `O_DIRECT` and `flock`), [`DirectIo`] (whether `O_DIRECT`
//! works in a directory, found by [`FileSystem::probe_direct_io`]), `ALIGN_BYTES` (the alignment
//! `O_DIRECT` reads need, which `io` follows), the simulated file system
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
use std::sync::Arc;

use crate::error::{Error, Result};

mod read_only;
mod real;
mod removals;
mod writer;

#[cfg(any(test, feature = "sim"))]
pub mod sim;

pub(crate) use read_only::ReadOnlyFs;
pub use real::RealFs;
pub(crate) use removals::DeferredRemovals;
pub(crate) use writer::FileWriter;

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
    /// How many threads may read files at once when the engine opens many (the runs of a
    /// snapshot or checkpoint): more keep the device busy and spread the kernel's copying over
    /// cores. The default, 1, issues every primitive from one thread in one order, which is
    /// what the simulated file system's fault plans and crash points replay.
    fn open_threads(&self) -> usize {
        1
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
    copy_prefix(fs, from, to, None, false)
}

/// Copies the first `len` bytes of `from` (all of it for `None`) into a new file `to`, fsynced
/// when `sync`, and returns the copy's size and CRC32C. Memory: one chunk of 1 MiB.
pub(crate) fn copy_prefix(
    fs: &dyn FileSystem,
    from: &Path,
    to: &Path,
    len: Option<u64>,
    sync: bool,
) -> Result<(u64, u32)> {
    let source = fs.open(from, ReadOptions::default())?;
    let len = match len {
        Some(len) => len,
        None => source.len_bytes()?,
    };
    let mut out = FileWriter::create(fs, to)?;
    let mut chunk = vec![0u8; len.min(COPY_CHUNK_BYTES) as usize];
    let mut offset = 0;
    while offset < len {
        let n = (len - offset).min(COPY_CHUNK_BYTES) as usize;
        source.read_exact_at(&mut chunk[..n], offset)?;
        out.write(&chunk[..n])?;
        offset += n as u64;
    }
    out.finish(sync)
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

    #[test]
    fn real_fs_behaves() {
        let tmp = tempfile::tempdir().unwrap();
        exercise(&RealFs, tmp.path());
    }

    #[test]
    fn mem_fs_behaves() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/root")).unwrap();
        exercise(&fs, Path::new("/root"));
    }
}
