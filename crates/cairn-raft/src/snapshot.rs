//! Raft snapshots of a replicated ledger: a snapshot is the ledger's export stream
//! (`docs/format/ledger-export.md`) behind openraft's metadata, in one file; a node builds one
//! from a view of its ledger, sends it to a follower the log no longer reaches, and the follower
//! imports it into a new directory, proves it, and swaps it for its ledger.
//!
//! Owns: [`LedgerSlot`] (the node's current ledger, which an install replaces), [`LedgerHome`]
//! (where a node keeps its ledger and snapshots; opening, with the recovery of an interrupted
//! swap), [`SnapshotData`] (a snapshot file), the snapshot file's layout (`docs/format/raft.md`,
//! "Snapshots"), and the store of snapshot files. May call: `format`, `cairn_ledger` (export,
//! verified import), `cairn` (the file system of the ledger's directory). Must never touch: the
//! network, the log storage.
//!
//! **Files.** In the snapshot directory: `current.snap` (the newest snapshot built or installed;
//! replaced by an atomic rename, never edited), `building-*.snap` and `incoming-*.snap` (being
//! written; removed when a node starts). Beside the ledger's directory `D`: `D.incoming` (an
//! import being built and proved) and `D.old` (the ledger replaced, while the swap runs).
//!
//! **An install**, in three steps, each durable before the next: [`stage`] imports the snapshot
//! into `D.incoming` and proves it there (its checksum, its audit, its digest extending the one
//! this node's ledger has: see [`cairn_ledger::Ledger::import_with`]); [`keep`] makes the
//! snapshot file `current.snap`; [`swap`] closes the current ledger, renames `D` to `D.old` and
//! `D.incoming` to `D`, syncs the parent directory, removes `D.old` and opens the ledger in `D`.
//! [`LedgerHome::open`] finishes or undoes a swap a crash cut: `D.old` without `D` means the
//! proved import is renamed into place (or, without one, `D.old` back); a leftover
//! `D.incoming` beside `D` is removed.
//!
//! **The order is the invariant a restart needs: a node's ledger is never newer than its
//! current snapshot.** openraft, starting a node whose ledger has applied past the end of its
//! log (a follower that installed a snapshot and was killed before its log caught up), purges
//! the log up to what the ledger applied, and then requires the purge to be covered by the
//! current snapshot. A swap before `keep`, cut by a kill between them, left a ledger newer than
//! `current.snap` and a node that could never start again. Cut after `keep` and before the
//! swap, the node starts with its older ledger, and openraft installs the current snapshot
//! again (its `restore_from_snapshot`), which `keep` leaves where it is.
//!
//! **What a snapshot holds.** The ledger as of its newest version, and as metadata the log id and
//! membership that version stored (the last entry that wrote, not later entries that wrote
//! nothing): so the snapshot's log id is exactly the ledger's applied state, on the node that
//! builds it and on the one that installs it.
//!
//! **Bounds.** Building: O(1) under the state machine's task (a view of the ledger), then one
//! pass over the ledger's stored entries on a blocking thread, one frame in memory. Installing:
//! the import's cost (every entry written once, the audit) on a blocking thread, then two
//! renames. Disk: the current snapshot, one being built or received, and during an install a
//! second copy of the ledger.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cairn::fs::{FileSystem, RealFs};
use cairn::SessionOptions;
use cairn_ledger::{ImportChecks, Ledger, LedgerConfig, LedgerExport};
use openraft::alias::{LogIdOf, SnapshotMetaOf};

use crate::format;
use crate::TypeConfig;

/// The first bytes of a snapshot file: `CRNRSNP` and the layout's version.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"CRNRSNP\x01";
/// The longest metadata a snapshot file may carry (the membership's members and addresses).
pub const SNAPSHOT_META_BYTES_MAX: usize = 1 << 20;

/// A node's current ledger: shared by everything that reads it, replaced whole when a snapshot
/// is installed. Clones share it.
#[derive(Clone)]
pub struct LedgerSlot(Arc<RwLock<Arc<Ledger>>>);

impl LedgerSlot {
    /// A slot holding `ledger`.
    pub fn new(ledger: Arc<Ledger>) -> LedgerSlot {
        LedgerSlot(Arc::new(RwLock::new(ledger)))
    }

    /// The current ledger. A read that holds it while a snapshot is installed fails with the
    /// closed session's error; the next call gets the new one.
    pub fn get(&self) -> Arc<Ledger> {
        Arc::clone(&self.0.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn replace(&self, ledger: Arc<Ledger>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = ledger;
    }
}

/// Where a node keeps its ledger and its snapshots, and how it opens a ledger.
#[derive(Clone)]
pub struct LedgerHome {
    /// The ledger's directory.
    pub dir: PathBuf,
    /// The directory of snapshot files (created when missing).
    pub snapshots: PathBuf,
    /// The file system of the ledger's directory (snapshot files are always on the real one).
    pub fs: Arc<dyn FileSystem>,
    /// The ledger's configuration (made with [`crate::ledger_config`]).
    pub config: LedgerConfig,
    /// Its session's options.
    pub options: SessionOptions,
}

impl LedgerHome {
    /// A home on the real file system with the engine's default session options.
    pub fn new(
        dir: impl Into<PathBuf>,
        snapshots: impl Into<PathBuf>,
        config: LedgerConfig,
    ) -> Self {
        LedgerHome {
            dir: dir.into(),
            snapshots: snapshots.into(),
            fs: Arc::new(RealFs),
            config,
            options: SessionOptions::default(),
        }
    }

    /// Opens (or creates) the ledger, first finishing or undoing a swap that a crash cut (the
    /// module's header).
    ///
    /// Errors: the file system's, and the ledger's.
    pub fn open(&self) -> io::Result<Ledger> {
        let fs = &*self.fs;
        let (old, staging) = (self.old(), self.staging());
        if exists(fs, &old)? {
            if !exists(fs, &self.dir)? {
                if exists(fs, &staging)? {
                    fs.rename(&staging, &self.dir).map_err(io::Error::other)?;
                } else {
                    fs.rename(&old, &self.dir).map_err(io::Error::other)?;
                }
                self.sync_parent()?;
            }
            if exists(fs, &old)? {
                fs.remove_dir_all(&old).map_err(io::Error::other)?;
            }
        }
        if exists(fs, &staging)? {
            fs.remove_dir_all(&staging).map_err(io::Error::other)?;
        }
        fs.create_dir_all(&self.dir).map_err(io::Error::other)?;
        Ledger::open_with(
            Arc::clone(&self.fs),
            &self.dir,
            self.config.clone(),
            self.options.clone(),
        )
        .map_err(io::Error::other)
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut name = self.dir.file_name().unwrap_or_default().to_os_string();
        name.push(suffix);
        self.dir.with_file_name(name)
    }

    fn staging(&self) -> PathBuf {
        self.sibling(".incoming")
    }

    fn old(&self) -> PathBuf {
        self.sibling(".old")
    }

    fn sync_parent(&self) -> io::Result<()> {
        match self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => self.fs.sync_dir(parent).map_err(io::Error::other),
            None => Ok(()),
        }
    }
}

fn exists(fs: &dyn FileSystem, path: &Path) -> io::Result<bool> {
    fs.exists(path).map_err(io::Error::other)
}

/// A snapshot file, open: what openraft hands between the state machine and the transports.
/// The file is held open, so a newer snapshot renamed over its path leaves it readable.
#[derive(Clone)]
pub struct SnapshotData {
    file: Arc<File>,
    path: PathBuf,
    len: u64,
    /// Where the ledger's export stream starts.
    export_at: u64,
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SnapshotData({}, {} bytes)",
            self.path.display(),
            self.len
        )
    }
}

impl SnapshotData {
    /// Opens the snapshot file at `path` and reads its metadata.
    ///
    /// Errors: the file's, and [`io::ErrorKind::InvalidData`] for a file that is not a snapshot
    /// of this layout or whose metadata does not decode.
    pub fn open(
        path: impl Into<PathBuf>,
    ) -> io::Result<(SnapshotMetaOf<TypeConfig>, SnapshotData)> {
        let path = path.into();
        let file = File::open(&path)?;
        let len = file.metadata()?.len();
        let mut head = [0u8; 12];
        read_at(&file, &mut head, 0).map_err(|_| invalid(&path, "shorter than its header"))?;
        if head[..8] != SNAPSHOT_MAGIC {
            return Err(invalid(&path, "not a Cairn snapshot of layout 1"));
        }
        let meta_len = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
        if meta_len > SNAPSHOT_META_BYTES_MAX || 12 + meta_len as u64 > len {
            return Err(invalid(&path, "its metadata's length is out of bounds"));
        }
        let mut meta = vec![0u8; meta_len];
        read_at(&file, &mut meta, 12)?;
        let meta = format::decode_snapshot_meta(&meta)?;
        let data = SnapshotData {
            file: Arc::new(file),
            path,
            len,
            export_at: 12 + meta_len as u64,
        };
        Ok((meta, data))
    }

    /// The file's path when it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty (never, for a file [`SnapshotData::open`] accepted).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads up to `buf.len()` bytes at `offset` (fewer only at the end): what a transport
    /// sends, in pieces, from any number of tasks at once.
    pub fn read_chunk(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(self.len.saturating_sub(offset) as usize);
        read_at(&self.file, &mut buf[..want], offset)?;
        Ok(want)
    }

    /// Checks the file's ledger stream (framing and checksum, [`cairn_ledger::check_export`])
    /// without importing it: what a receiver does before handing the snapshot to Raft.
    ///
    /// Errors: [`io::ErrorKind::InvalidData`] naming what is wrong.
    pub fn check(&self) -> io::Result<()> {
        cairn_ledger::check_export(&mut self.export_reader())
            .map(|_| ())
            .map_err(|e| invalid(&self.path, &e.to_string()))
    }

    fn export_reader(&self) -> impl Read + '_ {
        io::BufReader::with_capacity(
            1 << 20,
            FileReader {
                data: self,
                at: self.export_at,
            },
        )
    }
}

struct FileReader<'a> {
    data: &'a SnapshotData,
    at: u64,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.data.read_chunk(self.at, buf)?;
        self.at += n as u64;
        Ok(n)
    }
}

fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    file.read_exact_at(buf, offset)
}

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("snapshot {}: {what}", path.display()),
    )
}

/// A fresh path in snapshot directory `dir` for a snapshot being received (removed, if left
/// over, when the node next starts).
pub(crate) fn incoming_path(dir: &Path) -> PathBuf {
    static RECEIVED: AtomicU64 = AtomicU64::new(0);
    let n = RECEIVED.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("incoming-{}-{n}.snap", std::process::id()))
}

/// The snapshot files of one node: the current one, and fresh names for those being built or
/// received.
pub(crate) struct Store {
    dir: PathBuf,
    /// The current snapshot's log id (`None` also when there is none).
    current: Mutex<Option<Option<LogIdOf<TypeConfig>>>>,
    counter: AtomicU64,
}

impl Store {
    /// The store in `dir` (created), with leftovers of builds and receptions removed.
    pub(crate) fn open(dir: &Path) -> io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("building-") || name.starts_with("incoming-") {
                std::fs::remove_file(dir.join(&*name))?;
            }
        }
        let store = Store {
            dir: dir.to_path_buf(),
            current: Mutex::new(None),
            counter: AtomicU64::new(0),
        };
        let current = store.load()?.map(|(meta, _)| meta.last_log_id);
        *store.current.lock().unwrap_or_else(|p| p.into_inner()) = current;
        Ok(store)
    }

    /// A new file name in the store for a snapshot being `what` (`building`, `incoming`).
    pub(crate) fn fresh(&self, what: &str) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(format!("{what}-{}-{n}.snap", std::process::id()))
    }

    fn current_path(&self) -> PathBuf {
        self.dir.join("current.snap")
    }

    /// The current snapshot, if any. A current file that does not open is reported.
    pub(crate) fn load(&self) -> io::Result<Option<(SnapshotMetaOf<TypeConfig>, SnapshotData)>> {
        match SnapshotData::open(self.current_path()) {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Makes the snapshot file at `path` (durable, of log id `last`) the current one, unless the
    /// current one is as new; removes it otherwise. Answers whether it became current.
    pub(crate) fn promote(
        &self,
        path: &Path,
        last: Option<LogIdOf<TypeConfig>>,
    ) -> io::Result<bool> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| *c >= last) {
            std::fs::remove_file(path)?;
            return Ok(false);
        }
        std::fs::rename(path, self.current_path())?;
        File::open(&self.dir)?.sync_all()?;
        *current = Some(last);
        Ok(true)
    }

    /// The current snapshot's log id, if there is one.
    pub(crate) fn current(&self) -> Option<Option<LogIdOf<TypeConfig>>> {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes the snapshot file of `view` with `meta` at `path`, durably. Runs on a blocking
/// thread.
pub(crate) fn write_file(
    path: &Path,
    meta: &SnapshotMetaOf<TypeConfig>,
    view: LedgerExport,
) -> io::Result<()> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, &file);
    out.write_all(&SNAPSHOT_MAGIC)?;
    let meta = format::encode_snapshot_meta(meta);
    out.write_all(&(meta.len() as u32).to_le_bytes())?;
    out.write_all(&meta)?;
    view.write_to(&mut out).map_err(io::Error::other)?;
    out.flush()?;
    drop(out);
    file.sync_all()
}

/// Imports the ledger in `data` beside `home.dir` and proves it (against the digest `slot`'s
/// ledger has, and by `check`, which the state machine gives: the applied state the imported
/// ledger stores against the snapshot's metadata), leaving it closed in `D.incoming` for
/// [`swap`]. The first step of an install (the module's header). Runs on a blocking thread.
///
/// Errors: [`io::ErrorKind::InvalidData`] for a snapshot that does not prove itself or does not
/// extend this node's history (nothing is changed); the file systems' and the ledger's.
pub(crate) fn stage(
    home: &LedgerHome,
    slot: &LedgerSlot,
    data: &SnapshotData,
    check: impl FnOnce(&Ledger) -> Result<(), String>,
) -> io::Result<()> {
    let fs = &*home.fs;
    let staging = home.staging();
    if exists(fs, &staging)? {
        fs.remove_dir_all(&staging).map_err(io::Error::other)?;
    }
    fs.create_dir_all(&staging).map_err(io::Error::other)?;
    let trusted = slot.get().digest();
    let imported = Ledger::import_with(
        Arc::clone(&home.fs),
        &staging,
        home.config.clone(),
        home.options.clone(),
        &mut data.export_reader(),
        &ImportChecks::trusting([trusted]),
    );
    let refuse = |what: String| {
        let _ = fs.remove_dir_all(&staging);
        invalid(&data.path, &what)
    };
    let (ledger, _) = imported.map_err(|e| refuse(format!("not installed: {e}")))?;
    let checked = check(&ledger);
    ledger.close();
    drop(ledger);
    checked.map_err(refuse)
}

/// Replaces `slot`'s ledger by the one [`stage`] proved in `D.incoming`: closes the current
/// ledger, swaps the directories and opens the new one (the module's header). Answers the new
/// ledger. The last step of an install, after the snapshot was made current ([`keep`]), so that
/// a node's ledger is never newer than its current snapshot. Runs on a blocking thread.
///
/// Errors: the file system's and the ledger's. A swap cut by an error or a crash is finished
/// by [`LedgerHome::open`].
pub(crate) fn swap(home: &LedgerHome, slot: &LedgerSlot) -> io::Result<Arc<Ledger>> {
    let fs = &*home.fs;
    slot.get().close();
    let old = home.old();
    if exists(fs, &old)? {
        fs.remove_dir_all(&old).map_err(io::Error::other)?;
    }
    fs.rename(&home.dir, &old).map_err(io::Error::other)?;
    fs.rename(&home.staging(), &home.dir)
        .map_err(io::Error::other)?;
    home.sync_parent()?;
    fs.remove_dir_all(&old).map_err(io::Error::other)?;
    let ledger = Arc::new(home.open()?);
    slot.replace(Arc::clone(&ledger));
    Ok(ledger)
}

/// Keeps `data` as the store's current snapshot: renamed when it is already in the store's
/// directory (received there), copied otherwise.
pub(crate) fn keep(
    store: &Store,
    data: &SnapshotData,
    last: Option<LogIdOf<TypeConfig>>,
) -> io::Result<()> {
    if data.path == store.current_path() {
        return Ok(());
    }
    let path = match data.path.parent() == Some(store.dir.as_path()) {
        true => data.path.clone(),
        false => {
            let copy = store.fresh("building");
            let mut out = File::create(&copy)?;
            io::copy(&mut FileReader { data, at: 0 }, &mut out)?;
            out.sync_all()?;
            copy
        }
    };
    store.promote(&path, last).map(|_| ())
}
