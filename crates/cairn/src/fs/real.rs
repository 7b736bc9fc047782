//! The real file system: [`RealFs`], the operating system's files (POSIX, with `O_DIRECT` and
//! `posix_fadvise`), and the session lock it takes with `flock`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{
    DirectIo, FileLock, FileSpace, FileSystem, ReadOptions, ReadableFile, WritableFile,
    DIRECT_IO_PROBE_NAME,
};
use crate::error::{Error, Result};

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
    /// Four: on the project's 2-core machine, a 100M-entry table's clean open (377 MiB of
    /// filters and indexes, through the page cache) spends about half its time in the kernel's
    /// copying and page allocation, which threads spread over both cores, and the rest waiting
    /// for reads, which they overlap.
    fn open_threads(&self) -> usize {
        4
    }

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
    use crate::fs::{write_atomic, ALIGN_BYTES};

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

    /// One page of memory aligned as `O_DIRECT` reads need it.
    #[repr(C, align(4096))]
    struct Page([u8; ALIGN_BYTES]);

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
        let bytes: Vec<u8> = (0..2 * ALIGN_BYTES).map(|i| i as u8).collect();
        write_atomic(&RealFs, &path, &bytes).unwrap();
        let options = ReadOptions {
            direct: true,
            random: true,
        };
        let file = RealFs.open(&path, options).unwrap();
        assert_eq!(file.len_bytes().unwrap(), bytes.len() as u64);
        let mut buf = Page([0; ALIGN_BYTES]);
        file.read_exact_at(&mut buf.0, ALIGN_BYTES as u64).unwrap();
        assert_eq!(&buf.0[..], &bytes[ALIGN_BYTES..]);
    }
}
