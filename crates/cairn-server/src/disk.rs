//! The disk of a cluster node under test: the real file system, whose writes a fault test can
//! make fail as on a full disk (`ENOSPC`) or slow down (each fsync delayed), while the node
//! runs.
//!
//! Owns: [`DiskFaults`] (the switch a test turns, through `POST /v1/cluster/faults`) and
//! [`FaultyFs`] (the [`FileSystem`] the node's ledger and Raft log are opened on when
//! `[cluster] fault_injection` is set). May call: `cairn::fs`. Must never touch: the ledger or
//! Raft (they see only failed or slow file operations, as on a real disk).
//!
//! A full disk fails every file creation, append and preallocation with `ENOSPC`; reads,
//! fsyncs of what was written and removals go on (removing files is how space comes back). A
//! slow disk sleeps before every fsync (of a file or a directory) for the delay set. The
//! switch costs two atomic loads per write or fsync.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn::fs::{
    DirectIo, FileLock, FileSpace, FileSystem, ReadOptions, ReadableFile, RealFs, WritableFile,
};

/// The error number of a full disk (Linux `ENOSPC`).
const ENOSPC: i32 = 28;

/// The longest delay a test may set: 10 s per fsync.
pub const DISK_DELAY_MAX: Duration = Duration::from_secs(10);

/// What a test has done to the disk: full or not, and the delay before each fsync. Cheap to
/// clone; clones share the switch.
#[derive(Clone, Debug, Default)]
pub struct DiskFaults {
    switch: Arc<Switch>,
}

#[derive(Debug, Default)]
struct Switch {
    full: AtomicBool,
    delay_us: AtomicU64,
}

impl DiskFaults {
    /// A disk with room and no delay.
    pub fn new() -> DiskFaults {
        DiskFaults::default()
    }

    /// Makes the disk full (every write fails with `ENOSPC`) or gives it room again.
    pub fn set_full(&self, full: bool) {
        self.switch.full.store(full, Ordering::Release);
    }

    /// Delays every fsync by `delay` (at most [`DISK_DELAY_MAX`]; zero: none).
    pub fn set_delay(&self, delay: Duration) {
        let us = delay.min(DISK_DELAY_MAX).as_micros() as u64;
        self.switch.delay_us.store(us, Ordering::Release);
    }

    /// Whether the disk is full.
    pub fn is_full(&self) -> bool {
        self.switch.full.load(Ordering::Acquire)
    }

    /// The delay before each fsync.
    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.switch.delay_us.load(Ordering::Acquire))
    }

    fn check_room(&self, op: &'static str, path: &Path) -> cairn::Result<()> {
        if self.is_full() {
            return Err(cairn::Error::Io {
                op,
                path: path.to_path_buf(),
                source: std::io::Error::from_raw_os_error(ENOSPC),
            });
        }
        Ok(())
    }

    fn before_sync(&self) {
        let delay = self.delay();
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }
}

/// The real file system with [`DiskFaults`] applied.
#[derive(Debug)]
pub struct FaultyFs {
    real: RealFs,
    faults: DiskFaults,
}

impl FaultyFs {
    /// The real file system, as `faults` says.
    pub fn new(faults: DiskFaults) -> FaultyFs {
        FaultyFs {
            real: RealFs,
            faults,
        }
    }
}

impl FileSystem for FaultyFs {
    fn create_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.faults.check_room("create_dir_all", path)?;
        self.real.create_dir_all(path)
    }

    fn list_dir(&self, path: &Path) -> cairn::Result<Vec<String>> {
        self.real.list_dir(path)
    }

    fn exists(&self, path: &Path) -> cairn::Result<bool> {
        self.real.exists(path)
    }

    fn is_dir(&self, path: &Path) -> cairn::Result<bool> {
        self.real.is_dir(path)
    }

    fn remove_file(&self, path: &Path) -> cairn::Result<()> {
        self.real.remove_file(path)
    }

    fn remove_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.real.remove_dir_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.real.rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.faults.check_room("hard_link", to)?;
        self.real.hard_link(from, to)
    }

    fn file_space(&self, path: &Path) -> cairn::Result<FileSpace> {
        self.real.file_space(path)
    }

    fn truncate(&self, path: &Path, len: u64) -> cairn::Result<()> {
        self.real.truncate(path, len)
    }

    fn sync_dir(&self, path: &Path) -> cairn::Result<()> {
        self.faults.before_sync();
        self.real.sync_dir(path)
    }

    fn sync_file(&self, path: &Path) -> cairn::Result<()> {
        self.faults.before_sync();
        self.real.sync_file(path)
    }

    fn create(&self, path: &Path) -> cairn::Result<Box<dyn WritableFile>> {
        self.faults.check_room("create", path)?;
        let file = self.real.create(path)?;
        Ok(Box::new(FaultyFile {
            file,
            faults: self.faults.clone(),
        }))
    }

    fn reuse(&self, old: &Path, path: &Path) -> cairn::Result<Box<dyn WritableFile>> {
        let file = self.real.reuse(old, path)?;
        Ok(Box::new(FaultyFile {
            file,
            faults: self.faults.clone(),
        }))
    }

    fn open(&self, path: &Path, options: ReadOptions) -> cairn::Result<Arc<dyn ReadableFile>> {
        self.real.open(path, options)
    }

    fn try_lock(&self, path: &Path) -> cairn::Result<Option<Box<dyn FileLock>>> {
        self.real.try_lock(path)
    }

    fn probe_direct_io(&self, dir: &Path) -> DirectIo {
        self.real.probe_direct_io(dir)
    }

    fn open_threads(&self) -> usize {
        self.real.open_threads()
    }
}

/// A file being written on a [`FaultyFs`].
#[derive(Debug)]
struct FaultyFile {
    file: Box<dyn WritableFile>,
    faults: DiskFaults,
}

impl WritableFile for FaultyFile {
    fn append(&mut self, bytes: &[u8]) -> cairn::Result<()> {
        self.faults.check_room("append", self.file.path())?;
        self.file.append(bytes)
    }

    fn sync(&mut self) -> cairn::Result<()> {
        self.faults.before_sync();
        self.file.sync()
    }

    fn preallocate(&mut self, len: u64) -> cairn::Result<()> {
        self.faults.check_room("preallocate", self.file.path())?;
        self.file.preallocate(len)
    }

    fn start_writeback(&mut self) -> cairn::Result<()> {
        self.file.start_writeback()
    }

    fn end_at_written(&mut self) -> cairn::Result<()> {
        self.file.end_at_written()
    }

    fn path(&self) -> &Path {
        self.file.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_refuses_writes_and_a_freed_one_takes_them() {
        let dir = tempfile::tempdir().unwrap();
        let faults = DiskFaults::new();
        let fs = FaultyFs::new(faults.clone());
        let path = dir.path().join("f");
        let mut file = fs.create(&path).unwrap();
        file.append(b"before").unwrap();
        faults.set_full(true);
        let e = file.append(b"during").unwrap_err();
        assert!(e.to_string().contains("append"), "{e}");
        assert!(fs.create(&dir.path().join("g")).is_err());
        // What was written can still be made durable and read; files can be removed.
        file.sync().unwrap();
        let mut buf = [0u8; 6];
        fs.open(&path, ReadOptions::default())
            .unwrap()
            .read_exact_at(&mut buf, 0)
            .unwrap();
        assert_eq!(&buf, b"before");
        faults.set_full(false);
        file.append(b"after").unwrap();
        faults.set_delay(Duration::from_millis(20));
        let started = std::time::Instant::now();
        file.sync().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(20));
        faults.set_delay(Duration::from_secs(3_600));
        assert_eq!(faults.delay(), DISK_DELAY_MAX);
    }
}
