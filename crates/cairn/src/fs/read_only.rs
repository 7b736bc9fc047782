//! The read-only file system: [`ReadOnlyFs`], a wrapper that passes reads to the file system it
//! wraps and refuses every change, so that a read-only session cannot write to its directory.

use std::path::Path;
use std::sync::Arc;

use super::{DirectIo, FileLock, FileSpace, FileSystem, ReadOptions, ReadableFile, WritableFile};
use crate::error::{Error, Result};

/// A file system that refuses every change: the one a read-only session works through, so that
/// no path of the engine, even one overlooked by the session's own checks, can write to its
/// directory. Reads go to the wrapped file system; every other call fails with
/// [`Error::ReadOnly`], `try_lock` included (a read-only session takes no lock).
#[derive(Debug)]
pub(crate) struct ReadOnlyFs(pub(crate) Arc<dyn FileSystem>);

impl FileSystem for ReadOnlyFs {
    fn open_threads(&self) -> usize {
        self.0.open_threads()
    }
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
