//! The file-system abstraction: every file operation of the engine goes through [`FileSystem`].
//!
//! Owns: the [`FileSystem`], [`WritableFile`], [`ReadableFile`] and [`FileLock`] traits, the real
//! implementation [`RealFs`] (POSIX, with `O_DIRECT` and `flock`), the simulated [`MemFs`], and
//! [`FileWriter`], the buffered append-only writer that computes a file's CRC32C while writing.
//!
//! May call: the standard library and `libc`. Must never touch: engine structures (runs, tables).
//!
//! Fault injection (a later layer) wraps any `FileSystem` in another `FileSystem`: every method
//! returns a `Result`, files are trait objects, and nothing outside this module holds a raw path
//! to the operating system, so a wrapper sees every operation.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};

/// How a file is opened for reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Bypass the operating system's page cache (`O_DIRECT`). Reads must then use buffers, offsets
    /// and lengths aligned to [`crate::io::ALIGN_BYTES`].
    pub direct: bool,
    /// Hint that reads are random (`POSIX_FADV_RANDOM`): no read-ahead.
    pub random: bool,
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
    /// Makes the directory's entries durable (`fsync` on the directory).
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Makes an existing file's contents durable (`fsync`), e.g. a file just hard-linked into
    /// a snapshot.
    fn sync_file(&self, path: &Path) -> Result<()>;
    /// Creates a new file for appending; fails if it already exists.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Opens an existing file for positional reads.
    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>>;
    /// Takes an exclusive lock on `path` (created if missing). Returns `Ok(None)` when another
    /// holder has it. The lock is released when the returned guard is dropped.
    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>>;
}

/// A file being written, append-only.
pub trait WritableFile: Send + Sync + Debug {
    /// Appends all of `bytes`.
    fn append(&mut self, bytes: &[u8]) -> Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<()>;
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
}

/// An exclusive lock held on a file; released on drop.
pub trait FileLock: Send + Sync + Debug {}

/// Reads a whole (small) file into memory.
pub fn read_all(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
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
pub fn write_atomic(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<()> {
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

/// A buffered, append-only writer that computes the CRC32C of everything written.
///
/// Memory: one buffer of `buffer_bytes` (64 KiB by default). Each flush is one `append` call.
#[derive(Debug)]
pub struct FileWriter {
    file: Box<dyn WritableFile>,
    buffer: Vec<u8>,
    buffer_bytes: usize,
    crc: u32,
    written_bytes: u64,
}

impl FileWriter {
    /// Default size of the write buffer.
    pub const BUFFER_BYTES_DEFAULT: usize = 64 * 1024;

    /// Creates `path` and wraps it.
    pub fn create(fs: &dyn FileSystem, path: &Path) -> Result<FileWriter> {
        Ok(FileWriter {
            file: fs.create(path)?,
            buffer: Vec::with_capacity(Self::BUFFER_BYTES_DEFAULT),
            buffer_bytes: Self::BUFFER_BYTES_DEFAULT,
            crc: 0,
            written_bytes: 0,
        })
    }

    /// Appends `bytes` (buffered).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written_bytes += bytes.len() as u64;
        if self.buffer.len() + bytes.len() > self.buffer_bytes {
            self.flush_buffer()?;
        }
        if bytes.len() >= self.buffer_bytes {
            self.file.append(bytes)
        } else {
            self.buffer.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Bytes written so far (including buffered ones).
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// The CRC32C of everything written so far.
    pub fn crc32c(&self) -> u32 {
        self.crc
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    fn flush_buffer(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            self.file.append(&self.buffer)?;
            self.buffer.clear();
        }
        Ok(())
    }

    /// Flushes the buffer, optionally fsyncs, and returns `(size_bytes, crc32c)`.
    pub fn finish(mut self, sync: bool) -> Result<(u64, u32)> {
        self.flush_buffer()?;
        if sync {
            self.file.sync()?;
        }
        Ok((self.written_bytes, self.crc))
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
}

#[derive(Debug)]
struct RealReadable {
    file: std::fs::File,
    path: PathBuf,
    direct: bool,
}

#[derive(Debug)]
struct RealLock {
    _file: std::fs::File,
}

impl FileLock for RealLock {}

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
        }))
    }

    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>> {
        let mut open = std::fs::OpenOptions::new();
        open.read(true);
        #[cfg(target_os = "linux")]
        if options.direct {
            use std::os::unix::fs::OpenOptionsExt;
            open.custom_flags(libc::O_DIRECT);
        }
        let want_direct = options.direct && cfg!(target_os = "linux");
        let (file, direct) = match open.open(path) {
            Ok(file) => (file, want_direct),
            // Some file systems (tmpfs before Linux 6.6, some FUSE and overlay mounts) refuse
            // O_DIRECT with EINVAL: read through the page cache there, and say so in `is_direct`.
            Err(e) if want_direct && e.raw_os_error() == Some(libc::EINVAL) => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .open(path)
                    .map_err(|e| Error::io("open", path, e))?;
                (file, false)
            }
            Err(e) => return Err(Error::io("open", path, e)),
        };
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

    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open_lock", path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Box::new(RealLock { _file: file }))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }
}

impl WritableFile for RealWritable {
    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io("write", &self.path, e))
    }

    fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fsync", &self.path, e))
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
}

// ------------------------------------------------------------------------------------------------
// The simulated file system.

type MemData = Arc<RwLock<Vec<u8>>>;

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, MemData>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
}

/// An in-memory file system for tests. Files removed while open stay readable through the open
/// handles, as on POSIX. Clones share the same state.
#[derive(Debug, Default, Clone)]
pub struct MemFs {
    state: Arc<Mutex<MemState>>,
}

impl MemFs {
    /// An empty simulated file system with only the root directory.
    pub fn new() -> MemFs {
        let fs = MemFs::default();
        fs.lock_state().dirs.insert(PathBuf::from("/"));
        fs
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, MemState> {
        // A poisoned lock only means another thread panicked mid-operation; the maps stay valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn not_found(op: &'static str, path: &Path) -> Error {
        Error::io(op, path, std::io::ErrorKind::NotFound.into())
    }

    /// The current contents of a file (for tests that corrupt or inspect files).
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock_state();
        let data = state.files.get(path)?;
        let bytes = data.read().unwrap_or_else(|p| p.into_inner()).clone();
        Some(bytes)
    }

    /// Replaces the contents of a file (for tests that corrupt files).
    pub fn set_file_bytes(&self, path: &Path, bytes: Vec<u8>) -> bool {
        let state = self.lock_state();
        match state.files.get(path) {
            Some(data) => {
                *data.write().unwrap_or_else(|p| p.into_inner()) = bytes;
                true
            }
            None => false,
        }
    }

    /// Every file path, sorted.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.lock_state().files.keys().cloned().collect()
    }
}

#[derive(Debug)]
struct MemWritable {
    data: MemData,
    path: PathBuf,
}

#[derive(Debug)]
struct MemReadable {
    data: MemData,
    path: PathBuf,
    direct: bool,
}

#[derive(Debug)]
struct MemLock {
    state: Arc<Mutex<MemState>>,
    path: PathBuf,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.locks.remove(&self.path);
    }
}

impl FileLock for MemLock {}

fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"))
}

impl FileSystem for MemFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        if state.files.contains_key(path) {
            return Err(Error::io(
                "create_dir_all",
                path,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        for ancestor in path.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                state.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let state = self.lock_state();
        if !state.dirs.contains(path) {
            return Err(Self::not_found("read_dir", path));
        }
        let mut names: Vec<String> = state
            .files
            .keys()
            .chain(state.dirs.iter())
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let state = self.lock_state();
        Ok(state.files.contains_key(path) || state.dirs.contains(path))
    }

    fn is_dir(&self, path: &Path) -> Result<bool> {
        Ok(self.lock_state().dirs.contains(path))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        match self.lock_state().files.remove(path) {
            Some(_) => Ok(()),
            None => Err(Self::not_found("remove_file", path)),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        if !state.dirs.contains(path) {
            return Err(Self::not_found("remove_dir_all", path));
        }
        state.files.retain(|p, _| !p.starts_with(path));
        state.dirs.retain(|p| !p.starts_with(path));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock_state();
        if !state.dirs.contains(&parent_of(to)) {
            return Err(Self::not_found("rename", to));
        }
        if state.dirs.contains(from) {
            if state.dirs.contains(to) || state.files.contains_key(to) {
                return Err(Error::io(
                    "rename",
                    to,
                    std::io::ErrorKind::AlreadyExists.into(),
                ));
            }
            let moved = |p: &Path| to.join(p.strip_prefix(from).unwrap_or(p));
            let dirs: Vec<PathBuf> = state
                .dirs
                .iter()
                .filter(|d| d.starts_with(from))
                .cloned()
                .collect();
            for d in dirs {
                state.dirs.remove(&d);
                state.dirs.insert(moved(&d));
            }
            let files: Vec<PathBuf> = state
                .files
                .keys()
                .filter(|f| f.starts_with(from))
                .cloned()
                .collect();
            for f in files {
                if let Some(data) = state.files.remove(&f) {
                    state.files.insert(moved(&f), data);
                }
            }
            return Ok(());
        }
        let data = state
            .files
            .remove(from)
            .ok_or_else(|| Self::not_found("rename", from))?;
        state.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock_state();
        if state.files.contains_key(to) {
            return Err(Error::io(
                "hard_link",
                to,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        if !state.dirs.contains(&parent_of(to)) {
            return Err(Self::not_found("hard_link", to));
        }
        let data = state
            .files
            .get(from)
            .cloned()
            .ok_or_else(|| Self::not_found("hard_link", from))?;
        state.files.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        if self.lock_state().dirs.contains(path) {
            Ok(())
        } else {
            Err(Self::not_found("fsync_dir", path))
        }
    }

    fn sync_file(&self, path: &Path) -> Result<()> {
        if self.lock_state().files.contains_key(path) {
            Ok(())
        } else {
            Err(Self::not_found("fsync", path))
        }
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut state = self.lock_state();
        if state.files.contains_key(path) || state.dirs.contains(path) {
            return Err(Error::io(
                "create",
                path,
                std::io::ErrorKind::AlreadyExists.into(),
            ));
        }
        if !state.dirs.contains(&parent_of(path)) {
            return Err(Self::not_found("create", path));
        }
        let data: MemData = Arc::default();
        state.files.insert(path.to_path_buf(), data.clone());
        Ok(Box::new(MemWritable {
            data,
            path: path.to_path_buf(),
        }))
    }

    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>> {
        let state = self.lock_state();
        let data = state
            .files
            .get(path)
            .cloned()
            .ok_or_else(|| Self::not_found("open", path))?;
        Ok(Arc::new(MemReadable {
            data,
            path: path.to_path_buf(),
            direct: options.direct,
        }))
    }

    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>> {
        let mut state = self.lock_state();
        if !state.dirs.contains(&parent_of(path)) {
            return Err(Self::not_found("open_lock", path));
        }
        state.files.entry(path.to_path_buf()).or_default();
        if !state.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(Box::new(MemLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
        })))
    }
}

impl WritableFile for MemWritable {
    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        self.data
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl ReadableFile for MemReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let data = self.data.read().unwrap_or_else(|p| p.into_inner());
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len());
        match end {
            Some(end) if end <= data.len() => {
                buf.copy_from_slice(&data[start..end]);
                Ok(())
            }
            _ => Err(Error::io(
                "read",
                &self.path,
                std::io::ErrorKind::UnexpectedEof.into(),
            )),
        }
    }

    fn len_bytes(&self) -> Result<u64> {
        Ok(self.data.read().unwrap_or_else(|p| p.into_inner()).len() as u64)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
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
        fs.hard_link(&path, &dir.join("g")).unwrap();
        fs.remove_file(&path).unwrap();
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(fs.list_dir(&dir).unwrap(), vec!["g".to_string()]);
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
