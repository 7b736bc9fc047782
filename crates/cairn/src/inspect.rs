//! Looking inside snapshots without trusting them: what `cairn info`, `cairn stats` and
//! `cairn verify` show.
//!
//! Owns: [`SnapshotInfo`], [`RunStats`], [`VerifyReport`] and the checks behind
//! [`crate::Session::verify_snapshot`]: every file's size and CRC32C, then what a CRC cannot
//! vouch for (a foreign snapshot's checksums may be valid and its contents hostile): every page
//! fully validated, keys strictly increasing across the whole run, every blob reference inside
//! the blob file, every key found by the index on its own page and passed by the Bloom filter,
//! the entry count the index records, the metadata's run list and level shape; then the table
//! read whole, and an authenticated table's state root recomputed from its contents.
//!
//! May call: `fs` (reads only), `session_core` (its directories and salt), `snapshot` (metadata,
//! layout), `schedule` (level shapes), `run` (file names, the checksums file), `page`, `index`
//! and `bloom` (decoders), `trie` (the recorded root node), `pagelog` (the trie's manifest and
//! segments), `lsm` (opening a snapshot to read it whole), and `cairn_proof` (the root); it
//! re-exports `log_view` (the log read without replaying it), `repair` (the metadata file
//! rebuilt) and `salvage` (what is intact of a damaged snapshot). Must never write: everything here works in a read-only session, but `repair`.

pub use crate::log_view::{LogRecord, LogRecordKind, LogSegment, LogTableEntry, LogView};
pub use crate::repair::{repair_metadata, MetadataRepair};
pub use crate::salvage::{LostKeys, SalvageLoss, SalvageProgress, SalvageReport};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_proof::{HashKind, Leaf, Root, ZERO};

use crate::bloom::{key_hash, BloomFilter};
use crate::config::IndexType;
use crate::error::{Error, Result};
use crate::fs::{read_all, FileSystem, ReadOptions, ReadableFile};
use crate::index::Index;
use crate::lsm::Lsm;
use crate::page::{self, Op, PageView, PAGE_BYTES};
use crate::pagelog::{self, Manifest};
use crate::run::{run_file_path, RunChecksums, RunFile};
use crate::schedule::IncomingShape;
use crate::session_core::SessionCore;
use crate::snapshot::{self, ResolveTag, SnapshotMeta, TRIE_DIR};

/// Where a run sits in a snapshot's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunPlace {
    /// The write buffer, saved as a run.
    WriteBuffer,
    /// On level `level` (1 is the newest); `merging` when it is an input of a merge in progress.
    Level {
        /// The level, from 1.
        level: usize,
        /// Whether the run is an input of a merge in progress.
        merging: bool,
    },
    /// Part of an input of a union in progress.
    Union,
}

/// One run of a snapshot, as its index file describes it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunInfo {
    /// The run's number in the snapshot (its files are `<number>.keyops` and so on).
    pub number: usize,
    /// Where it sits.
    pub place: RunPlace,
    /// Entries stored (deletes, upserts and entries shadowed by newer runs included).
    pub entries: u64,
    /// 4 KiB pages of its key/ops file.
    pub pages: u64,
    /// Bytes of its five files.
    pub bytes: u64,
}

/// An authenticated table's trie, as its snapshot records it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AuthInfo {
    /// The state root.
    pub root: Root,
    /// The trie's version (commits that changed it).
    pub version: u64,
    /// The memory budget of the retained trie pages.
    pub retained_bytes: usize,
}

/// What a snapshot holds, from its metadata and index files (no data read, nothing verified:
/// see [`crate::Session::verify_snapshot`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SnapshotInfo {
    /// The snapshot's name.
    pub name: String,
    /// The label it was saved with.
    pub label: String,
    /// Files in its directory (the trie's included).
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// The resolve function: `keep-newest`, `add-u64-le` or `custom "<name>"`.
    pub resolve: String,
    /// The index kind of its runs.
    pub index: IndexType,
    /// The write-buffer capacity it was configured with.
    pub write_buffer_entries: usize,
    /// Every run, by number.
    pub runs: Vec<RunInfo>,
    /// Levels (the first is level 1).
    pub levels: usize,
    /// Inputs of the union in progress below the levels (0 when there is none).
    pub union_inputs: usize,
    /// The trie, for an authenticated table.
    pub auth: Option<AuthInfo>,
}

impl SnapshotInfo {
    /// Entries stored in all runs (see [`RunInfo::entries`]).
    pub fn stored_entries(&self) -> u64 {
        self.runs.iter().map(|r| r.entries).sum()
    }
}

/// A run's layout and the quality of its filter, measured by [`crate::Session::snapshot_stats`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunStats {
    /// The run's number and place, and its entries and pages.
    pub run: RunInfo,
    /// Entries that are inserts, upserts and deletes.
    pub ops: [u64; 3],
    /// Entries with a blob.
    pub blobs: u64,
    /// Pages that continue a long value (every page of a span but its first).
    pub overflow_pages: u64,
    /// Bytes of the key/ops file.
    pub keyops_bytes: u64,
    /// Bytes of the blob file.
    pub blob_bytes: u64,
    /// Bytes of the filter's bit array.
    pub filter_bytes: u64,
    /// Bits of filter per stored entry.
    pub filter_bits_per_key: f64,
    /// Bits probed per key.
    pub filter_hashes: u32,
    /// False-positive rate measured on keys not in the run.
    pub filter_fpr: f64,
    /// How many keys that measurement probed.
    pub filter_sample: u64,
    /// The index kind.
    pub index: IndexType,
    /// Bytes of the index file.
    pub index_bytes: u64,
}

/// One thing wrong with a snapshot: the file, where in it (when known), and what.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The damaged (or missing, or unexpected) file.
    pub path: PathBuf,
    /// The byte offset of the damage in it, when one place can be named.
    pub offset: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(offset) => write!(
                f,
                "{} at offset {offset}: {}",
                self.path.display(),
                self.detail
            ),
            None => write!(f, "{}: {}", self.path.display(), self.detail),
        }
    }
}

/// How thoroughly [`crate::Session::verify_snapshot`] works.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Memory for recomputing an authenticated table's root: the key space is hashed in as many
    /// passes over the table as needed to keep each pass's leaves (96 bytes each) within it.
    pub root_memory_bytes: usize,
}

setters!(VerifyOptions {
    root_memory_bytes: usize,
});

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            root_memory_bytes: 256 << 20,
        }
    }
}

/// What a verification is doing, for progress output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyPhase {
    /// Reading and checking every file (`done` and `total` in bytes).
    Files,
    /// Reading the table whole through a cursor (`done` in entries; `total` is the stored
    /// entries, an upper bound).
    Contents,
    /// Recomputing the state root (`done` and `total` in passes over the table).
    Root,
}

/// Progress of a verification.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct VerifyProgress {
    /// The phase.
    pub phase: VerifyPhase,
    /// Work done in this phase.
    pub done: u64,
    /// Work this phase has in all.
    pub total: u64,
}

/// The outcome of verifying one snapshot.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Everything found wrong; empty when the snapshot is sound.
    pub problems: Vec<Problem>,
    /// Files checked.
    pub files: u64,
    /// Bytes read and checked.
    pub bytes: u64,
    /// Entries stored in the runs, every one checked.
    pub stored_entries: u64,
    /// Entries the table holds, read through a cursor (`None` when it was not read).
    pub entries: Option<u64>,
    /// The state root, recomputed from the contents and equal to the recorded one (`None` for
    /// a table that is not authenticated, or when it was not read).
    pub root: Option<Root>,
    /// Checks that could not be made, and why.
    pub skipped: Vec<String>,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The snapshot's directory, or [`Error::SnapshotMissing`].
fn snapshot_path(session: &SessionCore, name: &str) -> Result<PathBuf> {
    snapshot::validate_name(name)?;
    let dir = snapshot::snapshot_dir(session.snapshots_dir(), name);
    if !session.fs().is_dir(&dir)? {
        return Err(Error::SnapshotMissing(name.to_string()));
    }
    Ok(dir)
}

/// Where each run of a snapshot sits.
fn run_places(meta: &SnapshotMeta) -> Vec<RunPlace> {
    let mut places = vec![RunPlace::Union; meta.run_count];
    if let Some(p) = meta.write_buffer.and_then(|i| places.get_mut(i)) {
        *p = RunPlace::WriteBuffer;
    }
    // Levels name sorted runs: each of their parts sits there.
    let mut set = |s: usize, place: RunPlace| {
        for &i in meta.sorted.get(s).map(Vec::as_slice).unwrap_or_default() {
            if let Some(p) = places.get_mut(i) {
                *p = place;
            }
        }
    };
    for (idx, level) in meta.levels.iter().enumerate() {
        let at = |merging| RunPlace::Level {
            level: idx + 1,
            merging,
        };
        match &level.incoming {
            IncomingShape::Single(i) => set(*i, at(false)),
            IncomingShape::Merging {
                inputs, progress, ..
            } => {
                inputs.iter().for_each(|&i| set(i, at(true)));
                if let Some(i) = progress.as_ref().and_then(|p| p.output) {
                    set(i, at(true));
                }
            }
            IncomingShape::Empty => {}
        }
        level.resident.iter().for_each(|&i| set(i, at(false)));
    }
    places
}

fn resolve_name(tag: &ResolveTag) -> String {
    match tag {
        ResolveTag::KeepNewest => "keep-newest".into(),
        ResolveTag::AddU64Le => "add-u64-le".into(),
        ResolveTag::Custom(Some(name)) => format!("custom {name:?}"),
        ResolveTag::Custom(None) => "custom (unnamed)".into(),
    }
}

/// Files and bytes under `dir`, recursively.
fn count_files(fs: &dyn FileSystem, dir: &Path) -> Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    for name in fs.list_dir(dir)? {
        let path = dir.join(name);
        if fs.is_dir(&path)? {
            let (f, b) = count_files(fs, &path)?;
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += fs.open(&path, ReadOptions::default())?.len_bytes()?;
        }
    }
    Ok((files, bytes))
}

fn file_len(fs: &dyn FileSystem, path: &Path) -> Result<u64> {
    fs.open(path, ReadOptions::default())?.len_bytes()
}

/// See [`crate::Session::snapshot_info`].
pub(crate) fn info(session: &SessionCore, name: &str) -> Result<SnapshotInfo> {
    let fs = &**session.fs();
    let dir = snapshot_path(session, name)?;
    let meta = snapshot::read_meta(fs, &dir).map_err(|e| e.in_file(&dir.join("metadata")))?;
    let places = run_places(&meta);
    let mut runs = Vec::with_capacity(meta.run_count);
    for (i, place) in places.into_iter().enumerate() {
        let path = |file| run_file_path(&dir, i as u64, file);
        let index = Index::decode(&read_all(fs, &path(RunFile::Index))?)
            .map_err(|e| e.in_file(&path(RunFile::Index)))?;
        let mut bytes = 0;
        for file in RunFile::ALL {
            bytes += file_len(fs, &path(file))?;
        }
        runs.push(RunInfo {
            number: i,
            place,
            entries: index.entry_count(),
            pages: index.page_count(),
            bytes,
        });
    }
    let (files, bytes) = count_files(fs, &dir)?;
    let auth = match (&meta.auth, &meta.config.auth) {
        (Some(a), Some(config)) => Some(AuthInfo {
            root: Root {
                kind: config.hash,
                hash: crate::trie::root_hash_of_node(config.hash, &a.root)
                    .map_err(|e| e.in_file(&dir.join("metadata")))?,
            },
            version: a.version,
            retained_bytes: config.retained_bytes,
        }),
        _ => None,
    };
    Ok(SnapshotInfo {
        name: name.to_string(),
        label: meta.label.clone(),
        files,
        bytes,
        resolve: resolve_name(&meta.resolve),
        index: meta.config.index,
        write_buffer_entries: meta.config.write_buffer_entries,
        runs,
        levels: meta.levels.len(),
        union_inputs: meta.union.as_ref().map_or(0, |u| u.inputs.len()),
        auth,
    })
}

/// Reads a file front to back, once, computing its CRC32C on the way and checking each 4 KiB
/// chunk against its recorded CRC32C (run format version 2): the spans a scan asks for (in
/// increasing order) are served from a buffer that holds at most one chunk plus the span being
/// asked for.
struct Sequential {
    file: Arc<dyn ReadableFile>,
    size: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
    crc: u32,
    /// The recorded CRC32C of each 4 KiB chunk, if the run has them.
    sums: Option<Arc<[u32]>>,
}

/// Bytes read at once.
const CHUNK: usize = 1 << 20;

impl Sequential {
    fn new(file: Arc<dyn ReadableFile>, sums: Option<Arc<[u32]>>) -> Result<Sequential> {
        let size = file.len_bytes()?;
        Ok(Sequential {
            file,
            size,
            buf: Vec::new(),
            start: 0,
            crc: 0,
            sums,
        })
    }

    /// Adds `bytes`, read at `offset` (a multiple of 4 KiB: reads follow each other from 0 in
    /// whole chunks but the file's last), to the CRC and checks their chunks.
    fn sum(&mut self, offset: u64, bytes_at: usize, len: usize) -> Result<()> {
        let bytes = &self.buf[bytes_at..bytes_at + len];
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        if let Some(sums) = &self.sums {
            let first = offset / PAGE_BYTES as u64;
            crate::run::check_chunks(self.file.path(), first, bytes, sums)?;
        }
        Ok(())
    }

    /// The `len` bytes at `offset` (not below any offset asked for before; the caller checks
    /// that they lie inside the file).
    fn get(&mut self, offset: u64, len: usize, progress: &mut dyn FnMut(u64)) -> Result<&[u8]> {
        debug_assert!(offset >= self.start && offset + len as u64 <= self.size);
        let end = offset + len as u64;
        if end > self.start + self.buf.len() as u64 {
            let drop = ((offset - self.start) as usize).min(self.buf.len());
            self.buf.drain(..drop);
            self.start += drop as u64;
            let read_to = self.start + self.buf.len() as u64;
            let want = ((end - read_to) as usize)
                .max(CHUNK)
                .min((self.size - read_to) as usize);
            let at = self.buf.len();
            self.buf.resize(at + want, 0);
            self.file.read_exact_at(&mut self.buf[at..], read_to)?;
            self.sum(read_to, at, want)?;
            progress(want as u64);
        }
        let from = (offset - self.start) as usize;
        Ok(&self.buf[from..from + len])
    }

    /// Reads the rest of the file; returns its CRC32C.
    fn finish(mut self, progress: &mut dyn FnMut(u64)) -> Result<u32> {
        let mut at = self.start + self.buf.len() as u64;
        self.buf.clear();
        self.buf.resize(CHUNK, 0);
        while at < self.size {
            let n = ((self.size - at) as usize).min(CHUNK);
            self.file.read_exact_at(&mut self.buf[..n], at)?;
            self.sum(at, 0, n)?;
            progress(n as u64);
            at += n as u64;
        }
        Ok(self.crc)
    }
}

/// What a scan of one run found.
#[derive(Default)]
struct Scanned {
    problems: Vec<Problem>,
    entries: u64,
    pages: u64,
    ops: [u64; 3],
    blobs: u64,
    overflow_pages: u64,
    sizes: [u64; 5],
    filter: Option<BloomFilter>,
    index: Option<Index>,
    /// The CRC32C of the checksums file's bytes.
    checksums_crc: Option<u32>,
}

/// Checks every file of run `number` in `dir`: sizes and CRC32Cs against its checksums file,
/// the filter's salt, and (in one pass over the key/ops file) every page, the order of every
/// key, every blob reference, and that the index and the filter find every key. Reads each file
/// once; memory: the filter and index, plus one 1 MiB chunk and the longest span.
fn scan_run(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    salt: u64,
    progress: &mut dyn FnMut(u64),
) -> Scanned {
    let mut out = Scanned::default();
    let path = |file| run_file_path(dir, number, file);
    let problem = |file, offset, detail: String| Problem {
        path: path(file),
        offset,
        detail,
    };
    let missing_or = |file, e: Error| {
        let missing = matches!(&e, Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound);
        problem(
            file,
            None,
            if missing {
                "missing".into()
            } else {
                e.to_string()
            },
        )
    };
    // The checksums file.
    let sums = match read_all(fs, &path(RunFile::Checksums)) {
        Ok(bytes) => {
            out.sizes[4] = bytes.len() as u64;
            out.checksums_crc = Some(RunChecksums::pin(&bytes));
            match RunChecksums::decode(&bytes) {
                Ok(sums) => Some(sums),
                Err(e) => {
                    out.problems
                        .push(problem(RunFile::Checksums, None, e.to_string()));
                    None
                }
            }
        }
        Err(e) => {
            out.problems.push(missing_or(RunFile::Checksums, e));
            None
        }
    };
    // Opens a file; checks its size against the checksums file.
    let open = |file: RunFile, slot: usize, out: &mut Scanned| -> Option<Arc<dyn ReadableFile>> {
        let opened = fs
            .open(&path(file), ReadOptions::default())
            .and_then(|f| f.len_bytes().map(|len| (f, len)));
        match opened {
            Ok((f, len)) => {
                out.sizes[slot] = len;
                if let Some(sums) = &sums {
                    let expected = sums.files[slot].0;
                    if len != expected {
                        out.problems.push(problem(
                            file,
                            Some(len.min(expected)),
                            format!("{len} bytes, the checksums file says {expected}"),
                        ));
                        return None;
                    }
                }
                Some(f)
            }
            Err(e) => {
                out.problems.push(missing_or(file, e));
                None
            }
        }
    };
    let check_crc = |file: RunFile, slot: usize, crc: u32, out: &mut Scanned| {
        if let Some(sums) = &sums {
            let expected = sums.files[slot].1;
            if crc != expected {
                out.problems.push(problem(
                    file,
                    None,
                    format!("CRC32C {crc:08x}, the checksums file says {expected:08x}"),
                ));
            }
        }
    };
    // The filter and the index: read whole, checked, decoded.
    for (file, slot) in [(RunFile::Filter, 2), (RunFile::Index, 3)] {
        let Some(f) = open(file, slot, &mut out) else {
            continue;
        };
        let mut bytes = vec![0u8; out.sizes[slot] as usize];
        if let Err(e) = f.read_exact_at(&mut bytes, 0) {
            out.problems.push(problem(file, None, e.to_string()));
            continue;
        }
        progress(bytes.len() as u64);
        check_crc(file, slot, crc32c::crc32c(&bytes), &mut out);
        match file {
            RunFile::Filter => match BloomFilter::decode(&bytes) {
                Ok(filter) if filter.salt() != salt => out.problems.push(problem(
                    file,
                    None,
                    format!("salt {:#x} is not the session's", filter.salt()),
                )),
                Ok(filter) => out.filter = Some(filter),
                Err(e) => out.problems.push(problem(file, None, e.to_string())),
            },
            _ => match Index::decode(&bytes) {
                Ok(index) => out.index = Some(index),
                Err(e) => out.problems.push(problem(file, None, e.to_string())),
            },
        }
    }
    // The blob file: its size bounds every blob reference.
    let blobs = open(RunFile::Blobs, 1, &mut out);
    let blob_size = blobs.as_ref().map(|_| out.sizes[1]);
    // The key/ops file: one pass, every span validated.
    if let Some(f) = open(RunFile::KeyOps, 0, &mut out) {
        let size = out.sizes[0];
        if size % PAGE_BYTES as u64 != 0 {
            out.problems.push(problem(
                RunFile::KeyOps,
                Some(size - size % PAGE_BYTES as u64),
                format!("{size} bytes is not a whole number of pages"),
            ));
        }
        let pages = size / PAGE_BYTES as u64;
        out.pages = pages;
        if let Some(index) = &out.index {
            if index.page_count() != pages {
                out.problems.push(problem(
                    RunFile::Index,
                    None,
                    format!(
                        "covers {} pages, the key/ops file has {pages}",
                        index.page_count()
                    ),
                ));
            }
        }
        let page_sums = sums.as_ref().and_then(|s| s.pages.as_ref());
        match Sequential::new(f, page_sums.map(|p| p.keyops.clone())) {
            Ok(mut seq) => {
                let found = scan_pages(&mut seq, pages, blob_size, salt, &mut out, progress);
                if let Err(p) = found {
                    out.problems.push(p(&path));
                }
                match seq.finish(progress) {
                    Ok(crc) => check_crc(RunFile::KeyOps, 0, crc, &mut out),
                    Err(e) => out
                        .problems
                        .push(problem(RunFile::KeyOps, None, e.to_string())),
                }
            }
            Err(e) => out
                .problems
                .push(problem(RunFile::KeyOps, None, e.to_string())),
        }
        if let Some(index) = &out.index {
            if out.problems.is_empty() && index.entry_count() != out.entries {
                out.problems.push(problem(
                    RunFile::Index,
                    None,
                    format!(
                        "records {} entries, the pages hold {}",
                        index.entry_count(),
                        out.entries
                    ),
                ));
            }
        }
    }
    if let Some(f) = blobs {
        let chunk_sums = sums.as_ref().and_then(|s| s.pages.as_ref());
        match Sequential::new(f, chunk_sums.map(|p| p.blobs.clone()))
            .and_then(|seq| seq.finish(progress))
        {
            Ok(crc) => check_crc(RunFile::Blobs, 1, crc, &mut out),
            Err(e) => out
                .problems
                .push(problem(RunFile::Blobs, None, e.to_string())),
        }
    }
    out
}

/// A problem found while scanning pages, waiting for the run's paths.
type Deferred = Box<dyn FnOnce(&dyn Fn(RunFile) -> PathBuf) -> Problem>;

fn deferred(file: RunFile, offset: Option<u64>, detail: String) -> Deferred {
    Box::new(move |path| Problem {
        path: path(file),
        offset,
        detail,
    })
}

/// The span-by-span part of [`scan_run`]; stops at the first problem.
fn scan_pages(
    seq: &mut Sequential,
    pages: u64,
    blob_size: Option<u64>,
    salt: u64,
    out: &mut Scanned,
    progress: &mut dyn FnMut(u64),
) -> std::result::Result<(), Deferred> {
    let page_bytes = PAGE_BYTES as u64;
    let mut prev_key: Vec<u8> = Vec::new();
    let mut page = 0u64;
    let io = |e: Error| deferred(RunFile::KeyOps, None, e.to_string());
    while page < pages {
        let offset = page * page_bytes;
        let at = Some(offset);
        let first = seq.get(offset, PAGE_BYTES, progress).map_err(io)?;
        let span = page::span_pages(first)
            .map_err(|e| deferred(RunFile::KeyOps, at, format!("page {page}: {e}")))?;
        if span > pages - page {
            return Err(deferred(
                RunFile::KeyOps,
                at,
                format!("page {page}: a span of {span} pages runs past the end of the file"),
            ));
        }
        let bytes = seq
            .get(offset, (span * page_bytes) as usize, progress)
            .map_err(io)?;
        page::validate(bytes)
            .map_err(|e| deferred(RunFile::KeyOps, at, format!("page {page}: {e}")))?;
        let view = PageView::new(bytes)
            .map_err(|e| deferred(RunFile::KeyOps, at, format!("page {page}: {e}")))?;
        for i in 0..view.len() {
            let e = view
                .entry(i)
                .map_err(|e| deferred(RunFile::KeyOps, at, format!("page {page}: {e}")))?;
            if out.entries > 0 && e.key <= prev_key.as_slice() {
                return Err(deferred(
                    RunFile::KeyOps,
                    at,
                    format!("page {page}: key {i} is not above the previous page's last key"),
                ));
            }
            if let (Some(span), Some(size)) = (e.blob, blob_size) {
                if span
                    .offset
                    .checked_add(span.len as u64)
                    .is_none_or(|end| end > size)
                {
                    return Err(deferred(
                        RunFile::KeyOps,
                        at,
                        format!(
                            "page {page}: entry {i} refers to {} blob bytes at {}, past the end \
                             of the {size}-byte blob file",
                            span.len, span.offset
                        ),
                    ));
                }
            }
            if let Some(filter) = &out.filter {
                if !filter.contains_hash(key_hash(salt, e.key)) {
                    return Err(deferred(
                        RunFile::Filter,
                        None,
                        format!("the key of entry {i} on page {page} is not in the filter"),
                    ));
                }
            }
            if let Some(index) = &out.index {
                let found = index.search(e.key);
                if !found.is_some_and(|s| s.first <= page && page + span - 1 <= s.last) {
                    return Err(deferred(
                        RunFile::Index,
                        None,
                        format!(
                            "the key of entry {i} on page {page} is indexed at {}",
                            match found {
                                Some(s) => format!("pages {} to {}", s.first, s.last),
                                None => "no page".into(),
                            }
                        ),
                    ));
                }
            }
            out.ops[match e.op {
                Op::Insert => 0,
                Op::Upsert => 1,
                Op::Delete => 2,
            }] += 1;
            out.blobs += u64::from(e.blob.is_some());
            out.entries += 1;
            prev_key.clear();
            prev_key.extend_from_slice(e.key);
        }
        out.overflow_pages += span - 1;
        page += span;
    }
    Ok(())
}

/// The runs and problems of one snapshot directory (the table's, or its trie's): its metadata,
/// its files (none missing, none unexpected) and every run.
fn check_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    salt: u64,
    report: &mut VerifyReport,
    progress: &mut dyn FnMut(u64),
) -> Option<SnapshotMeta> {
    let meta_path = dir.join("metadata");
    let meta = match snapshot::read_meta(fs, dir) {
        Ok(meta) => Some(meta),
        Err(e) => {
            report.problems.push(Problem {
                path: meta_path.clone(),
                offset: None,
                detail: e.to_string(),
            });
            None
        }
    };
    let names = match fs.list_dir(dir) {
        Ok(names) => names,
        Err(e) => {
            report.problems.push(Problem {
                path: dir.to_path_buf(),
                offset: None,
                detail: e.to_string(),
            });
            return meta;
        }
    };
    // Runs: as many as the metadata says, or (when it is unreadable) as the directory holds.
    let run_count = match &meta {
        Some(meta) => meta.run_count,
        None => names.iter().filter(|n| n.ends_with(".checksums")).count(),
    };
    let trie = meta.as_ref().is_some_and(|m| m.auth.is_some());
    for name in &names {
        let expected = name == "metadata"
            || (name == TRIE_DIR && trie)
            || name.split_once('.').is_some_and(|(n, ext)| {
                n.parse::<usize>()
                    .is_ok_and(|k| k < run_count && k.to_string() == n)
                    && RunFile::ALL.iter().any(|f| f.extension() == ext)
            });
        if !expected {
            report.problems.push(Problem {
                path: dir.join(name),
                offset: None,
                detail: "not a file of this snapshot".into(),
            });
        }
    }
    for i in 0..run_count {
        let scanned = scan_run(fs, dir, i as u64, salt, progress);
        report.files += 5;
        report.bytes += scanned.sizes.iter().sum::<u64>();
        report.stored_entries += scanned.entries;
        if let (Some(meta), Some(crc)) = (&meta, scanned.checksums_crc) {
            if scanned.problems.is_empty() && meta.run_sums[i] != crc {
                report.problems.push(Problem {
                    path: run_file_path(dir, i as u64, RunFile::Checksums),
                    offset: None,
                    detail: format!("run {i} is not the run the snapshot saved"),
                });
            }
        }
        report.problems.extend(scanned.problems);
    }
    report.files += 1;
    meta
}

/// Checks an authenticated snapshot's `trie/`: its manifest, and each segment it lists (the
/// header and every record's checksum, read whole); a file it does not list is a problem.
fn check_trie_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    report: &mut VerifyReport,
    progress: &mut dyn FnMut(u64),
) {
    let manifest_path = dir.join(pagelog::MANIFEST_NAME);
    let manifest = match read_all(fs, &manifest_path).and_then(|b| Manifest::decode(&b)) {
        Ok(manifest) => manifest,
        Err(e) => {
            report.problems.push(Problem {
                path: manifest_path,
                offset: None,
                detail: e.to_string(),
            });
            return;
        }
    };
    report.files += 1;
    match fs.list_dir(dir) {
        Ok(names) => {
            for name in names {
                let listed = pagelog::segment_id_of(&name)
                    .is_some_and(|id| manifest.segments.iter().any(|s| s.file_id == id));
                if name != pagelog::MANIFEST_NAME && !listed {
                    report.problems.push(Problem {
                        path: dir.join(&name),
                        offset: None,
                        detail: "not a file of this snapshot".into(),
                    });
                }
            }
        }
        Err(e) => report.problems.push(Problem {
            path: dir.to_path_buf(),
            offset: None,
            detail: e.to_string(),
        }),
    }
    for entry in &manifest.segments {
        let (id, live) = (entry.id, entry.bytes);
        let path = dir.join(pagelog::segment_file_name(entry.file_id));
        let scanned = fs
            .open(&path, ReadOptions::default())
            .and_then(|file| Ok((file.len_bytes()?, pagelog::scan_file(&*file, id)?)));
        report.files += 1;
        progress(1);
        match scanned {
            Ok((len, records)) => {
                report.bytes += len;
                let total: u64 = records.iter().map(|r| pagelog::record_bytes(&r.0)).sum();
                let top_here = manifest.top.filter(|t| t.segment == id);
                if live > total || top_here.is_some_and(|t| !records.iter().any(|r| r.0 == t)) {
                    report.problems.push(Problem {
                        path,
                        offset: None,
                        detail: "holds fewer records than the manifest says".into(),
                    });
                }
            }
            Err(e) => report.problems.push(Problem {
                path,
                offset: None,
                detail: e.to_string(),
            }),
        }
    }
}

/// See [`crate::Session::verify_snapshot`].
pub(crate) fn verify(
    session: &Arc<SessionCore>,
    name: &str,
    options: VerifyOptions,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<VerifyReport> {
    let fs = &**session.fs();
    let dir = snapshot_path(session, name)?;
    let mut report = VerifyReport::default();
    let total = count_files(fs, &dir).map(|(_, b)| b).unwrap_or(0);
    let mut done = 0u64;
    let mut files = |n: u64| {
        done += n;
        progress(VerifyProgress {
            phase: VerifyPhase::Files,
            done,
            total,
        });
    };
    let meta = check_dir(fs, &dir, session.salt(), &mut report, &mut files);
    if let Some(meta) = &meta {
        if meta.auth.is_some() {
            check_trie_dir(fs, &dir.join(TRIE_DIR), &mut report, &mut files);
        }
    }
    let Some(meta) = meta else {
        return Ok(report);
    };
    if !report.problems.is_empty() {
        report
            .skipped
            .push("the table was not read whole: its files are damaged".into());
        return Ok(report);
    }
    // Every file is sound: open the table (the level shape and the trie's retained pages are
    // checked on the way) and read it whole.
    let overrides = crate::SnapshotOverrides::default();
    if let ResolveTag::Custom(_) = meta.resolve {
        report.skipped.push(format!(
            "the table was not read whole: it needs its {} resolve function",
            resolve_name(&meta.resolve)
        ));
        return Ok(report);
    }
    let blame = dir.join("metadata");
    let table = match Lsm::open_snapshot(session.clone(), name, &meta.label, overrides) {
        Ok(table) => table,
        Err(e) => {
            report.problems.push(problem_of(e, &blame));
            return Ok(report);
        }
    };
    let stored = report.stored_entries;
    match read_whole(&table, stored, progress) {
        Ok(entries) => report.entries = Some(entries),
        Err(e) => {
            report.problems.push(problem_of(e, &blame));
            return Ok(report);
        }
    }
    if let Some(config) = meta.config.auth {
        match check_root(
            &table,
            config.hash,
            report.entries.unwrap_or(0),
            options,
            progress,
        ) {
            Ok(root) => report.root = Some(root),
            Err(e) => report.problems.push(problem_of(e, &blame)),
        }
    }
    Ok(report)
}

/// A problem made of an error: in the file it names, or in `blame`.
fn problem_of(e: Error, blame: &Path) -> Problem {
    Problem {
        path: e.path().unwrap_or(blame).to_path_buf(),
        offset: None,
        detail: e.with_causes(),
    }
}

/// Reads every entry of the table; returns how many there are.
fn read_whole(table: &Lsm, stored: u64, progress: &mut dyn FnMut(VerifyProgress)) -> Result<u64> {
    let mut entries = 0u64;
    for entry in table.cursor()? {
        let entry = entry?;
        if let Some(blob) = &entry.blob {
            table.retrieve_blob(blob)?;
        }
        entries += 1;
        if entries.is_multiple_of(65_536) {
            progress(VerifyProgress {
                phase: VerifyPhase::Contents,
                done: entries,
                total: stored,
            });
        }
    }
    Ok(entries)
}

/// Recomputes the state root of `table` (holding `entries` entries) from its contents and
/// compares it with the root its snapshot recorded (see [`contents_root`]).
fn check_root(
    table: &Lsm,
    kind: HashKind,
    entries: u64,
    options: VerifyOptions,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<Root> {
    let computed = contents_root(table, kind, entries, options.root_memory_bytes, progress)?;
    let recorded = table.commit()?.root;
    if computed != recorded {
        return Err(Error::corrupt(
            "state root",
            format!(
                "the contents hash to {}, the snapshot records {}",
                hex::encode(computed.hash),
                hex::encode(recorded.hash)
            ),
        ));
    }
    Ok(computed)
}

/// The state root of `table`'s contents (about `entries` entries, an upper bound), computed
/// from the contents alone, never from the trie. Leaves are sorted by key path a part of the
/// key space at a time: 2^d passes over the table for the smallest d that keeps a pass's
/// leaves within `memory_bytes`; each pass hashes every key, and the whole leaf of the keys in
/// its part. The parts' subtrees are then combined up the top d levels.
pub(crate) fn contents_root(
    table: &Lsm,
    kind: HashKind,
    entries: u64,
    memory_bytes: usize,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<Root> {
    let leaf_bytes = std::mem::size_of::<Leaf>() as u64;
    let budget = (memory_bytes as u64).max(leaf_bytes);
    let mut depth = 0usize;
    while depth < 16 && entries.saturating_mul(leaf_bytes) > budget << depth {
        depth += 1;
    }
    let parts = 1u64 << depth;
    let in_part = |path: &[u8; 32], part: u64| {
        depth == 0 || (u64::from(u16::from_be_bytes([path[0], path[1]])) >> (16 - depth)) == part
    };
    // (hash, leaves) of each part's subtree, in key-path order.
    let mut level: Vec<([u8; 32], u64)> = Vec::with_capacity(parts as usize);
    for part in 0..parts {
        progress(VerifyProgress {
            phase: VerifyPhase::Root,
            done: part,
            total: parts,
        });
        let mut leaves = Vec::new();
        for entry in table.cursor()? {
            let entry = entry?;
            let key_path = kind.key_path(&entry.key);
            if !in_part(&key_path, part) {
                continue;
            }
            let blob = match &entry.blob {
                Some(b) => Some(table.retrieve_blob(b)?),
                None => None,
            };
            leaves.push(Leaf {
                key_path,
                value_hash: kind.value_hash(&entry.value),
                blob_hash: blob.map_or(ZERO, |b| kind.blob_hash(&b)),
            });
        }
        leaves.sort_unstable_by_key(|l| l.key_path);
        if leaves.windows(2).any(|w| w[0].key_path == w[1].key_path) {
            return Err(Error::corrupt(
                "table",
                "two keys hash to the same key path",
            ));
        }
        level.push((
            cairn_proof::subtree_of_sorted(kind, &leaves, depth),
            leaves.len() as u64,
        ));
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| match (pair[0], pair[1]) {
                ((_, 0), (_, 0)) => (ZERO, 0),
                (one @ (_, 1), (_, 0)) | ((_, 0), one @ (_, 1)) => one,
                ((l, a), (r, b)) => (kind.node(&l, &r), a + b),
            })
            .collect();
    }
    progress(VerifyProgress {
        phase: VerifyPhase::Root,
        done: parts,
        total: parts,
    });
    Ok(Root {
        kind,
        hash: level[0].0,
    })
}

/// See [`crate::Session::snapshot_stats`].
pub(crate) fn stats(session: &SessionCore, name: &str, sample: u64) -> Result<Vec<RunStats>> {
    let fs = &**session.fs();
    let info = info(session, name)?;
    let dir = snapshot_path(session, name)?;
    let mut out = Vec::with_capacity(info.runs.len());
    for run in info.runs {
        let scanned = scan_run(fs, &dir, run.number as u64, session.salt(), &mut |_| {});
        if let Some(p) = scanned.problems.into_iter().next() {
            return Err(Error::CorruptFile {
                path: p.path,
                what: "run",
                detail: format!("{} (run `cairn verify` for every problem)", p.detail),
            });
        }
        let (Some(filter), Some(index)) = (scanned.filter, scanned.index) else {
            return Err(Error::corrupt("run", "filter or index missing"));
        };
        let mut positives = 0u64;
        for i in 0..sample {
            // Keys of 16 bytes from a fixed sequence: absent from the run but for a chance of
            // about one in 2^128 per key.
            let key = xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes()).to_le_bytes();
            positives += u64::from(filter.contains_hash(key_hash(session.salt(), &key)));
        }
        let filter_bytes = filter.block_count() * 64;
        out.push(RunStats {
            ops: scanned.ops,
            blobs: scanned.blobs,
            overflow_pages: scanned.overflow_pages,
            keyops_bytes: scanned.sizes[0],
            blob_bytes: scanned.sizes[1],
            filter_bytes,
            filter_bits_per_key: if run.entries == 0 {
                0.0
            } else {
                (filter_bytes * 8) as f64 / run.entries as f64
            },
            filter_hashes: filter.hashes(),
            filter_fpr: if sample == 0 {
                0.0
            } else {
                positives as f64 / sample as f64
            },
            filter_sample: sample,
            index: index.kind(),
            index_bytes: scanned.sizes[3],
            run,
        });
    }
    Ok(out)
}
