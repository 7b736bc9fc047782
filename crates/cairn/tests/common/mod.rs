//! Test helpers shared by integration tests.

#[allow(dead_code)]
pub mod ledger;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn::fs::{FileLock, FileSpace, FileSystem, MemFs, ReadOptions, ReadableFile, WritableFile};
use cairn::{Error, Session, SessionOptions, TableConfig};

/// Opens (creating or restoring) the session in `/s` of the in-memory `fs`.
#[allow(dead_code)]
pub fn session_in(fs: &MemFs) -> Session {
    session_with(fs, SessionOptions::default())
}

/// Opens (creating or restoring) the session in `/s` of the in-memory `fs` with `options`.
#[allow(dead_code)]
pub fn session_with(fs: &MemFs, options: SessionOptions) -> Session {
    fs.create_dir_all(Path::new("/s")).unwrap();
    Session::open_with(Arc::new(fs.clone()), "/s", options).unwrap()
}

/// A small write buffer and merge batch, so that a few updates already make runs and merges.
#[allow(dead_code)]
pub fn small() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(4)
        .merge_batch_size(1)
}

/// The `i`-th test key, in key order.
#[allow(dead_code)]
pub fn key(i: u32) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

/// The in-memory file system, instrumented: it counts the files created and the bytes
/// appended, and can fail the next `create` of a path ending in a chosen suffix.
#[derive(Debug, Default)]
#[allow(dead_code)]
pub struct TestFs {
    pub inner: MemFs,
    pub fail_create: Mutex<Option<String>>,
    pub files_created: AtomicU64,
    pub bytes_written: Arc<AtomicU64>,
}

#[derive(Debug)]
#[allow(dead_code)]
struct CountingFile {
    inner: Box<dyn WritableFile>,
    bytes_written: Arc<AtomicU64>,
}

impl WritableFile for CountingFile {
    fn append(&mut self, bytes: &[u8]) -> cairn::Result<()> {
        self.bytes_written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.inner.append(bytes)
    }
    fn sync(&mut self) -> cairn::Result<()> {
        self.inner.sync()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for TestFs {
    fn create_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> cairn::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> cairn::Result<bool> {
        self.inner.exists(path)
    }
    fn is_dir(&self, path: &Path) -> cairn::Result<bool> {
        self.inner.is_dir(path)
    }
    fn remove_file(&self, path: &Path) -> cairn::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.inner.remove_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.inner.rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.inner.hard_link(from, to)
    }
    fn file_space(&self, path: &Path) -> cairn::Result<FileSpace> {
        self.inner.file_space(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> cairn::Result<()> {
        self.inner.truncate(path, len)
    }
    fn sync_dir(&self, path: &Path) -> cairn::Result<()> {
        self.inner.sync_dir(path)
    }
    fn sync_file(&self, path: &Path) -> cairn::Result<()> {
        self.inner.sync_file(path)
    }
    fn create(&self, path: &Path) -> cairn::Result<Box<dyn WritableFile>> {
        let mut fail = self.fail_create.lock().unwrap();
        if fail
            .as_deref()
            .is_some_and(|suffix| path.to_string_lossy().ends_with(suffix))
        {
            *fail = None;
            return Err(Error::Io {
                op: "create",
                path: path.to_path_buf(),
                source: std::io::Error::other("injected"),
            });
        }
        self.files_created.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(CountingFile {
            inner: self.inner.create(path)?,
            bytes_written: self.bytes_written.clone(),
        }))
    }
    fn open(&self, path: &Path, options: ReadOptions) -> cairn::Result<Arc<dyn ReadableFile>> {
        self.inner.open(path, options)
    }
    fn try_lock(&self, path: &Path) -> cairn::Result<Option<Box<dyn FileLock>>> {
        self.inner.try_lock(path)
    }
}

/// Copies a directory tree (to damage a copy of a session and keep the original).
#[allow(dead_code)]
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}
