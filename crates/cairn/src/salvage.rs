//! Salvage: reading what is intact of a damaged snapshot, resolved as the table would resolve
//! it, for [`crate::Session::salvage_snapshot`] (and `cairn repair --salvage`).
//!
//! Owns: [`SalvageReport`], [`SalvageLoss`], [`LostKeys`], [`SalvageProgress`] and [`Salvage`],
//! the stream of a snapshot's surviving contents: each run's key/ops file read page by page,
//! every page checked against its recorded CRC32C (when the run's checksums file is itself sound)
//! and decoded, a page that fails either dropped and recorded as a loss; every blob read and
//! checked the same way, an entry whose blob is damaged dropped and recorded. The runs are then
//! combined as the table's reads combine them: the write buffer, then each level's runs newest
//! first (a merge in progress through its inputs, which still hold every entry; its output so far
//! is not read), then a pending union, whose inputs are resolved one by one and folded left to
//! right with the resolve function.
//!
//! May call: `fs` (reads only), `session_core` (the session's file system and directories),
//! `snapshot` (metadata, directory, the resolve function to use), `schedule` (the levels'
//! shapes), `run` (file names, the checksums file), `page` (the decoders), `kmerge` and `entry`
//! (the newest-first fold every read uses). Must never write: [`crate::Session::salvage_snapshot`]
//! writes what this reads into a new table and saves it.
//!
//! What a loss means: the entries of a lost page are gone, so a key they held is either missing
//! from the salvaged contents or has the value an older run gave it (the newest version was
//! lost). Every such key lies strictly between the loss's bounds ([`LostKeys::Between`]): the
//! last intact key before the lost pages and the first intact key after them, in that run.
//! Keys outside every loss's bounds have exactly their value in the snapshot.
//!
//! Cost: one sequential read of every run file the table reads (1 MiB at a time; each blob
//! read where it is referenced), one CRC32C per 4 KiB; memory: one 1 MiB buffer per run being
//! read (a table reads about `4 * levels + 2` at once), the entries of one page per run, and
//! the losses.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use crate::config::{Resolve, TableConfig};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fs::{read_all, FileSystem, ReadOptions, ReadableFile};
use crate::kmerge::{Head, KMerge, MergeSource};
use crate::page::{self, BlobSpan, Op, PageView, PAGE_BYTES};
use crate::run::{run_file_path, PageSums, RunChecksums, RunFile};
use crate::schedule::IncomingShape;
use crate::session_core::SessionCore;
use crate::snapshot::format::UnionShape;
use crate::snapshot::{self, SnapshotMeta, SnapshotOverrides};

/// The keys a loss may have affected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostKeys {
    /// Keys strictly between `after` and `before` (`None`: from the first key; to the last).
    Between {
        /// The last intact key before the lost pages in their run, if any.
        after: Option<Vec<u8>>,
        /// The first intact key after them, if any.
        before: Option<Vec<u8>>,
    },
    /// This one key (an entry dropped because its blob is damaged).
    One(Vec<u8>),
}

impl LostKeys {
    /// Whether `key` is among the keys this loss may have affected.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            LostKeys::Between { after, before } => {
                after.as_deref().is_none_or(|a| key > a)
                    && before.as_deref().is_none_or(|b| key < b)
            }
            LostKeys::One(k) => k.as_slice() == key,
        }
    }
}

/// One piece of a snapshot that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvageLoss {
    /// The damaged file.
    pub path: PathBuf,
    /// The first page lost, for pages of a key/ops file (`None`: the whole file, or a blob).
    pub first_page: Option<u64>,
    /// How many pages were lost (0 for a blob or a whole file).
    pub pages: u64,
    /// The keys affected.
    pub keys: LostKeys,
    /// What was wrong (the first error met).
    pub detail: String,
}

/// What a salvage read, lost and wrote ([`crate::Session::salvage_snapshot`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvageReport {
    /// Run files read (a sorted run of several parts counts each part).
    pub runs: u64,
    /// Pages read and found intact.
    pub pages_read: u64,
    /// Pages lost.
    pub pages_lost: u64,
    /// Stored entries read intact (deletes and older versions included).
    pub entries_read: u64,
    /// Entries dropped because their blob was damaged.
    pub entries_lost: u64,
    /// Keys salvaged: the keys of the new snapshot (what a lookup finds), or of the one that
    /// would be written.
    pub keys_written: u64,
    /// What was lost, in the order it was found.
    pub losses: Vec<SalvageLoss>,
    /// Runs whose checksums file is missing, damaged or not the one the metadata pins: their
    /// pages were decoded and checked for order, but not against checksums.
    pub unchecked: Vec<PathBuf>,
    /// The state root of the salvaged table, for an authenticated one (`None` when nothing
    /// was written).
    pub root: Option<cairn_proof::Root>,
}

impl SalvageReport {
    /// Whether everything was read, and checked against its checksums.
    pub fn is_complete(&self) -> bool {
        self.losses.is_empty() && self.unchecked.is_empty()
    }

    /// Whether `key` may have lost its value: it lies within some loss's keys.
    pub fn may_have_lost(&self, key: &[u8]) -> bool {
        self.losses.iter().any(|l| l.keys.contains(key))
    }
}

/// How far a salvage has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SalvageProgress {
    /// Bytes of run files read so far.
    pub bytes: u64,
    /// Bytes of key/ops and blob files in the snapshot (an upper bound on `bytes`, as pages of a
    /// merge's output so far are not read).
    pub total: u64,
    /// Keys salvaged so far.
    pub keys: u64,
}

/// Counters and losses, shared by every run reader of one salvage.
#[derive(Default)]
struct Tally {
    report: SalvageReport,
    bytes: u64,
}

type Shared = Rc<RefCell<Tally>>;

/// One stored entry, owned.
struct Owned {
    key: Vec<u8>,
    op: Op,
    value: Vec<u8>,
    blob: Option<Arc<Vec<u8>>>,
}

/// Bytes read from a key/ops file at once.
const READ_BYTES: u64 = 1 << 20;

/// A key/ops file read ahead in 1 MiB reads.
struct Pages {
    file: Arc<dyn ReadableFile>,
    /// Whole pages in the file.
    pages: u64,
    /// Bytes of the file from page `buf_page` on.
    buf: Vec<u8>,
    buf_page: u64,
}

impl Pages {
    /// Pages `first..first + count` (which lie inside the file).
    fn at(&mut self, first: u64, count: u64, tally: &Shared) -> Result<&[u8]> {
        let page = PAGE_BYTES as u64;
        let have = self.buf.len() as u64 / page;
        if first < self.buf_page || first + count > self.buf_page + have {
            let want = (count * page)
                .max(READ_BYTES)
                .min((self.pages - first) * page);
            self.buf.resize(want as usize, 0);
            self.buf_page = first;
            if let Err(e) = self.file.read_exact_at(&mut self.buf, first * page) {
                self.buf.clear();
                return Err(e);
            }
            tally.borrow_mut().bytes += want;
        }
        let from = ((first - self.buf_page) * page) as usize;
        Ok(&self.buf[from..from + (count * page) as usize])
    }
}

/// One run file set being read: its key/ops file, its blobs, its recorded page checksums.
struct Part {
    /// `None` when the key/ops file could not be opened (recorded as a loss).
    keyops: Option<Pages>,
    keyops_path: PathBuf,
    blobs_path: PathBuf,
    blobs: Option<(Arc<dyn ReadableFile>, u64)>,
    sums: Option<PageSums>,
    /// Bytes after the last whole page (damage: the file should be whole pages), reported once
    /// the pages before them are read.
    trailing: u64,
    next: u64,
}

impl Part {
    /// Opens run `i` of snapshot directory `dir`; whatever cannot be opened is recorded.
    fn open(fs: &dyn FileSystem, dir: &Path, i: usize, sum: u32, tally: &Shared) -> Part {
        let path = |file| run_file_path(dir, i as u64, file);
        let sums = read_all(fs, &path(RunFile::Checksums))
            .ok()
            .filter(|bytes| RunChecksums::pin(bytes) == sum)
            .and_then(|bytes| RunChecksums::decode(&bytes).ok())
            .and_then(|sums| sums.pages);
        let mut t = tally.borrow_mut();
        t.report.runs += 1;
        if sums.is_none() {
            t.report.unchecked.push(path(RunFile::KeyOps));
        }
        let opened = |file| {
            fs.open(&path(file), ReadOptions::default())
                .and_then(|f| f.len_bytes().map(|len| (f, len)))
        };
        let (keyops, trailing) = match opened(RunFile::KeyOps) {
            Ok((file, len)) => (
                Some(Pages {
                    file,
                    pages: len / PAGE_BYTES as u64,
                    buf: Vec::new(),
                    buf_page: 0,
                }),
                len % PAGE_BYTES as u64,
            ),
            Err(e) => {
                t.report.losses.push(SalvageLoss {
                    path: path(RunFile::KeyOps),
                    first_page: None,
                    pages: 0,
                    keys: LostKeys::Between {
                        after: None,
                        before: None,
                    },
                    detail: e.to_string(),
                });
                (None, 0)
            }
        };
        Part {
            keyops,
            keyops_path: path(RunFile::KeyOps),
            blobs_path: path(RunFile::Blobs),
            blobs: opened(RunFile::Blobs).ok(),
            sums,
            trailing,
            next: 0,
        }
    }

    /// The next intact page's entries (`Ok(None)` at the end of the file); a damaged page is an
    /// `Err` with its page number, span and what is wrong, and is skipped.
    fn next_page(
        &mut self,
        tally: &Shared,
    ) -> Option<std::result::Result<Vec<Owned>, (u64, u64, String)>> {
        let keyops = self.keyops.as_mut()?;
        if self.next >= keyops.pages {
            let trailing = std::mem::take(&mut self.trailing);
            return (trailing > 0).then(|| {
                Err((
                    keyops.pages,
                    1,
                    format!("{trailing} bytes after the last whole page"),
                ))
            });
        }
        let at = self.next;
        self.next += 1;
        let lost = |e: Error| Some(Err((at, 1, e.to_string())));
        let check = |first: u64, bytes: &[u8]| match &self.sums {
            Some(sums) => crate::run::check_chunks(&self.keyops_path, first, bytes, &sums.keyops),
            None => Ok(()),
        };
        // The first page is checked before its header is trusted with the span's length.
        let span = match keyops.at(at, 1, tally).and_then(|first| {
            check(at, first)?;
            page::span_pages(first)
        }) {
            Ok(span) if span <= keyops.pages - at => span,
            Ok(span) => {
                return Some(Err((
                    at,
                    1,
                    format!("a span of {span} pages runs past the end"),
                )))
            }
            Err(e) => return lost(e),
        };
        let decoded = keyops.at(at, span, tally).and_then(|bytes| {
            check(at + 1, &bytes[PAGE_BYTES..])?;
            page::validate(bytes)?;
            PageView::new(bytes)?
                .entries()
                .map(|e| e.map(|e| (e.key.to_vec(), e.op, e.value.to_vec(), e.blob)))
                .collect::<Result<Vec<_>>>()
        });
        let entries = match decoded {
            Ok(entries) => entries,
            Err(e) => return lost(e),
        };
        self.next = at + span;
        let mut out = Vec::with_capacity(entries.len());
        for (key, op, value, span) in entries {
            let blob = match span {
                None => None,
                Some(span) => match self.read_blob(span, tally) {
                    Ok(blob) => Some(Arc::new(blob)),
                    Err(e) => {
                        let mut t = tally.borrow_mut();
                        t.report.entries_lost += 1;
                        t.report.losses.push(SalvageLoss {
                            path: self.blobs_path.clone(),
                            first_page: None,
                            pages: 0,
                            keys: LostKeys::One(key),
                            detail: e.to_string(),
                        });
                        continue;
                    }
                },
            };
            out.push(Owned {
                key,
                op,
                value,
                blob,
            });
        }
        let mut t = tally.borrow_mut();
        t.report.pages_read += span;
        Some(Ok(out))
    }

    /// The blob at `span`, its 4 KiB chunks checked against their recorded CRC32Cs.
    fn read_blob(&self, span: BlobSpan, tally: &Shared) -> Result<Vec<u8>> {
        let Some((file, size)) = &self.blobs else {
            return Err(Error::corrupt("blob file", "missing or unreadable"));
        };
        let end = span
            .offset
            .checked_add(u64::from(span.len))
            .filter(|&end| end <= *size)
            .ok_or_else(|| Error::corrupt("blob file", "a blob reference runs past its end"))?;
        let chunk = PAGE_BYTES as u64;
        let (from, to) = match &self.sums {
            Some(_) => (
                span.offset / chunk * chunk,
                end.div_ceil(chunk).saturating_mul(chunk).min(*size),
            ),
            None => (span.offset, end),
        };
        let mut bytes = vec![0u8; (to - from) as usize];
        file.read_exact_at(&mut bytes, from)?;
        tally.borrow_mut().bytes += bytes.len() as u64;
        if let Some(sums) = &self.sums {
            crate::run::check_chunks(&self.blobs_path, from / chunk, &bytes, &sums.blobs)?;
        }
        let at = (span.offset - from) as usize;
        Ok(bytes[at..at + span.len as usize].to_vec())
    }
}

/// A sorted run (its parts in key order) read tolerantly: a [`MergeSource`] whose entries are
/// the intact ones, keys strictly increasing (a page whose keys are not above the last key
/// taken is dropped as damaged).
struct RunSource {
    parts: VecDeque<(usize, u32)>,
    part: Option<Part>,
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    entries: VecDeque<Owned>,
    last_key: Option<Vec<u8>>,
    /// Losses whose upper bound is the next intact key, by index into the report.
    open_losses: Vec<usize>,
    tally: Shared,
}

impl RunSource {
    fn new(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        parts: Vec<(usize, u32)>,
        tally: Shared,
    ) -> RunSource {
        let mut source = RunSource {
            parts: parts.into(),
            part: None,
            dir: dir.to_path_buf(),
            fs,
            entries: VecDeque::new(),
            last_key: None,
            open_losses: Vec::new(),
            tally,
        };
        source.fill();
        source
    }

    /// Reads pages until one gives an entry or every part is done.
    fn fill(&mut self) {
        while self.entries.is_empty() {
            if self.part.is_none() {
                let Some((i, sum)) = self.parts.pop_front() else {
                    return;
                };
                let before = self.tally.borrow().report.losses.len();
                self.part = Some(Part::open(&*self.fs, &self.dir, i, sum, &self.tally));
                let mut t = self.tally.borrow_mut();
                for n in before..t.report.losses.len() {
                    if let LostKeys::Between { after, .. } = &mut t.report.losses[n].keys {
                        *after = self.last_key.clone();
                    }
                    self.open_losses.push(n);
                }
            }
            let part = self.part.as_mut().expect("set above");
            match part.next_page(&self.tally) {
                None => self.part = None,
                Some(Err((first, pages, detail))) => self.lose(first, pages, detail),
                Some(Ok(entries)) => {
                    let ordered = entries.windows(2).all(|w| w[0].key < w[1].key)
                        && entries.first().is_none_or(|e| {
                            self.last_key
                                .as_deref()
                                .is_none_or(|last| e.key.as_slice() > last)
                        });
                    if !ordered {
                        let first = part.next.saturating_sub(1);
                        self.lose(first, 1, "keys not above the previous page's".into());
                        continue;
                    }
                    self.tally.borrow_mut().report.entries_read += entries.len() as u64;
                    self.entries.extend(entries);
                }
            }
        }
        // The first intact key after open losses bounds them from above.
        if let Some(first) = self.entries.front() {
            let mut t = self.tally.borrow_mut();
            for n in self.open_losses.drain(..) {
                if let LostKeys::Between { before, .. } = &mut t.report.losses[n].keys {
                    *before = Some(first.key.clone());
                }
            }
        }
    }

    /// Records lost pages of the current part, merged with a loss just before them.
    fn lose(&mut self, first: u64, pages: u64, detail: String) {
        let path = self
            .part
            .as_ref()
            .map(|p| p.keyops_path.clone())
            .unwrap_or_default();
        let mut t = self.tally.borrow_mut();
        t.report.pages_lost += pages;
        if let Some(&n) = self.open_losses.last() {
            let loss = &mut t.report.losses[n];
            if loss.path == path && loss.first_page.map(|f| f + loss.pages) == Some(first) {
                loss.pages += pages;
                return;
            }
        }
        t.report.losses.push(SalvageLoss {
            path,
            first_page: Some(first),
            pages,
            keys: LostKeys::Between {
                after: self.last_key.clone(),
                before: None,
            },
            detail,
        });
        self.open_losses.push(t.report.losses.len() - 1);
    }
}

/// A stream of the resolved entries of one view (a table, or an input of a union): deletes
/// dropped, upserts settled.
struct View {
    merge: KMerge<Source>,
    resolve: Resolve,
}

impl View {
    fn next(&mut self) -> Result<Option<Owned>> {
        loop {
            let Some((key, entry, _)) = self.merge.next_combined(&self.resolve)? else {
                return Ok(None);
            };
            let (value, blob) = match entry {
                Entry::Insert(value, blob) => (value, blob),
                Entry::Upsert(value) => (value, None),
                Entry::Delete => continue,
            };
            return Ok(Some(Owned {
                key: key.to_vec(),
                op: Op::Insert,
                value,
                blob,
            }));
        }
    }
}

/// A view with its next entry read ahead, to be merged.
struct PeekedView {
    view: View,
    head: Option<Owned>,
}

impl MergeSource for PeekedView {
    type Blob = Arc<Vec<u8>>;
    fn head(&self) -> Result<Option<Head<'_, Self::Blob>>> {
        Ok(self.head.as_ref().map(owned_head))
    }
    fn advance(&mut self) -> Result<()> {
        self.head = self.view.next()?;
        Ok(())
    }
}

/// A value and its blob.
type Valued = (Vec<u8>, Option<Arc<Vec<u8>>>);

/// A pending union: its inputs' resolved streams folded left to right.
struct UnionSource {
    merge: KMerge<PeekedView>,
    resolve: Resolve,
    head: Option<Owned>,
}

impl UnionSource {
    fn step(&mut self) -> Result<()> {
        self.head = None;
        let Some(group) = self.merge.peek_group()? else {
            return Ok(());
        };
        let resolve = &self.resolve;
        let (key, combined) =
            self.merge
                .fold_group(group, None, |left: Option<Valued>, _, right| {
                    Some(match left {
                        None => (right.value.to_vec(), right.blob),
                        Some((left, _)) => (resolve.apply(&left, right.value), None),
                    })
                })?;
        if let Some((value, blob)) = combined {
            self.head = Some(Owned {
                key: key.to_vec(),
                op: Op::Insert,
                value,
                blob,
            });
        }
        Ok(())
    }
}

/// One source of a view: a sorted run, or the view's pending union (its oldest source).
enum Source {
    Run(Box<RunSource>),
    Union(Box<UnionSource>),
}

fn owned_head(e: &Owned) -> Head<'_, Arc<Vec<u8>>> {
    Head {
        key: &e.key,
        op: e.op,
        value: &e.value,
        blob: e.blob.clone(),
    }
}

impl MergeSource for Source {
    type Blob = Arc<Vec<u8>>;
    fn head(&self) -> Result<Option<Head<'_, Self::Blob>>> {
        Ok(match self {
            Source::Run(run) => run.entries.front().map(owned_head),
            Source::Union(union) => union.head.as_ref().map(owned_head),
        })
    }
    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Run(run) => {
                run.last_key = run
                    .entries
                    .pop_front()
                    .map(|e| e.key)
                    .or(run.last_key.take());
                run.fill();
                Ok(())
            }
            Source::Union(union) => union.step(),
        }
    }
}

/// One salvaged key: its value and blob.
pub(crate) type Salvaged = (Vec<u8>, Vec<u8>, Option<Arc<Vec<u8>>>);

/// The surviving contents of a damaged snapshot, in key order ([`Salvage::next`]).
pub(crate) struct Salvage {
    view: View,
    tally: Shared,
    total: u64,
    keys: u64,
    pub(crate) config: TableConfig,
    pub(crate) label: String,
}

impl Salvage {
    /// Starts reading snapshot `name` of `session`. Only its metadata must be intact (it says
    /// which runs the table reads and in what order); anything else that is damaged is lost
    /// and recorded. Errors: [`Error::SnapshotMissing`], [`Error::SnapshotCorrupted`] for a
    /// damaged metadata file, [`Error::InvalidConfig`] for a custom resolve function not given
    /// in `overrides` (or a built-in one other than the saved one), [`Error::Io`].
    pub(crate) fn open(
        session: &SessionCore,
        name: &str,
        overrides: SnapshotOverrides,
    ) -> Result<Salvage> {
        snapshot::validate_name(name)?;
        if !snapshot::exists(session, name)? {
            return Err(Error::SnapshotMissing(name.to_string()));
        }
        let dir = snapshot::snapshot_dir(session.snapshots_dir(), name);
        let fs = session.fs().clone();
        let meta = snapshot::read_meta(&*fs, &dir)
            .map_err(snapshot::blame_in(name, &dir.join("metadata")))?;
        let resolve = snapshot::resolve_for(name, meta.resolve.clone(), overrides.resolve)?;
        let mut config = meta.config.clone();
        config.resolve = resolve.clone();
        let mut total = 0;
        for i in 0..meta.run_count {
            for file in [RunFile::KeyOps, RunFile::Blobs] {
                total += fs
                    .open(&run_file_path(&dir, i as u64, file), ReadOptions::default())
                    .and_then(|f| f.len_bytes())
                    .unwrap_or(0);
            }
        }
        let tally = Shared::default();
        let make = Maker {
            fs,
            dir,
            meta: &meta,
            resolve: &resolve,
            tally: &tally,
        };
        let mut sorted = Vec::new();
        for level in &meta.levels {
            match &level.incoming {
                IncomingShape::Single(s) => sorted.push(*s),
                IncomingShape::Merging { inputs, .. } => sorted.extend(inputs),
                IncomingShape::Empty => {}
            }
            sorted.extend(&level.resident);
        }
        let view = make.view(meta.write_buffer, &sorted, meta.union.as_ref())?;
        Ok(Salvage {
            view,
            tally,
            total,
            keys: 0,
            config,
            label: meta.label.clone(),
        })
    }

    /// The next surviving key with its value and blob.
    pub(crate) fn next(&mut self) -> Result<Option<Salvaged>> {
        let next = self.view.next()?;
        self.keys += u64::from(next.is_some());
        Ok(next.map(|e| (e.key, e.value, e.blob)))
    }

    /// How far it has come.
    pub(crate) fn progress(&self) -> SalvageProgress {
        SalvageProgress {
            bytes: self.tally.borrow().bytes,
            total: self.total,
            keys: self.keys,
        }
    }

    /// What was read and lost (with `keys_written` counted so far).
    pub(crate) fn report(&self) -> SalvageReport {
        let mut report = self.tally.borrow().report.clone();
        report.keys_written = self.keys;
        report
    }
}

/// Builds the sources of a snapshot's views.
struct Maker<'a> {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    meta: &'a SnapshotMeta,
    resolve: &'a Resolve,
    tally: &'a Shared,
}

impl Maker<'_> {
    /// A run source over run indices `parts`.
    fn run(&self, parts: &[usize]) -> Source {
        let parts = parts
            .iter()
            .map(|&i| (i, self.meta.run_sums.get(i).copied().unwrap_or(0)))
            .collect();
        Source::Run(Box::new(RunSource::new(
            self.fs.clone(),
            &self.dir,
            parts,
            self.tally.clone(),
        )))
    }

    /// The view of a write buffer's run, sorted runs newest first and a pending union.
    fn view(
        &self,
        buffer: Option<usize>,
        sorted: &[usize],
        union: Option<&UnionShape>,
    ) -> Result<View> {
        let mut sources: Vec<Source> = Vec::new();
        sources.extend(buffer.map(|i| self.run(&[i])));
        for &s in sorted {
            let parts = self
                .meta
                .sorted
                .get(s)
                .map(Vec::as_slice)
                .unwrap_or_default();
            sources.push(self.run(parts));
        }
        if let Some(union) = union {
            let inputs = union
                .inputs
                .iter()
                .map(|input| {
                    let mut view = self.view(input.buffer, &input.runs, input.union.as_deref())?;
                    let head = view.next()?;
                    Ok(PeekedView { view, head })
                })
                .collect::<Result<Vec<_>>>()?;
            let mut source = UnionSource {
                merge: KMerge::new(inputs)?,
                resolve: self.resolve.clone(),
                head: None,
            };
            source.step()?;
            sources.push(Source::Union(Box::new(source)));
        }
        Ok(View {
            merge: KMerge::new(sources)?,
            resolve: self.resolve.clone(),
        })
    }
}
