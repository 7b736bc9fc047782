//! Runs: immutable sorted files of 4 KiB pages, with their blob file, Bloom filter, index and
//! checksums.
//!
//! Owns: [`RunWriter`] (builds a run from entries given in key order), [`Run`] (an open run: its
//! filter and index in memory, its files open for reads), [`RunCursor`] (reads a run sequentially
//! for merges) and the checksums file. A run's files are queued for removal when the last
//! `Arc<Run>` is dropped, or, for a run this session wrote and never shared, for reuse by a new
//! run (`fs::DeferredRemovals`).
//!
//! May call: `fs`, `page`, `bloom`, `index`, `observe` (bytes, per run and per cursor chunk).
//! Must never touch: the levels, tables or sessions.
//!
//! Files of run `N` in a directory (formats in `docs/format/`):
//! `N.keyops` (pages), `N.blobs` (blob bytes), `N.filter` (Bloom filter), `N.index` (fence
//! pointers) and `N.checksums` (size and CRC32C of the other four, computed while writing).
//!
//! Costs: writing a run streams every file once through 64 KiB buffers; the filter and index are
//! built in memory while pages are written and written out at the end, and the CRC32C of every
//! page and 4 KiB of blobs is kept for the checksums file. Opening a run from disk
//! ([`Run::open`]) reads its checksums file, filter, index and two spans, and checks every data
//! page when it is read ([`OpenCheck::Full`]: every file, O(run size)).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bloom::{BloomBuilder, BloomFilter, BloomParams};
use crate::error::{Error, Result};
use crate::fs::{DeferredRemovals, FileSystem, FileWriter, ReadOptions, ReadableFile};
use crate::index::{Index, IndexBuilder, IndexType};
use crate::page::{self, BlobSpan, EntryRef, Op, PageBuilder, PageView, PAGE_BYTES};

mod checksums;
mod cursor;

pub(crate) use checksums::{check_chunks, PageSums, RunChecksums};
pub(crate) use cursor::RunCursor;

/// The kinds of file a run is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunFile {
    KeyOps,
    Blobs,
    Filter,
    Index,
    Checksums,
}

impl RunFile {
    pub(crate) const ALL: [RunFile; 5] = [
        RunFile::KeyOps,
        RunFile::Blobs,
        RunFile::Filter,
        RunFile::Index,
        RunFile::Checksums,
    ];
    /// The files whose checksums the checksums file records, in its order.
    pub(crate) const CHECKSUMMED: [RunFile; 4] = [
        RunFile::KeyOps,
        RunFile::Blobs,
        RunFile::Filter,
        RunFile::Index,
    ];

    /// The kind of run file a path names, by its extension.
    pub(crate) fn from_path(path: Option<&Path>) -> Option<RunFile> {
        let ext = path?.extension()?.to_str()?;
        RunFile::ALL.into_iter().find(|f| f.extension() == ext)
    }

    pub(crate) fn extension(self) -> &'static str {
        match self {
            RunFile::KeyOps => "keyops",
            RunFile::Blobs => "blobs",
            RunFile::Filter => "filter",
            RunFile::Index => "index",
            RunFile::Checksums => "checksums",
        }
    }
}

/// Run numbers are unique per process: a new session wipes `active/`, so numbers need not be
/// unique across processes.
static RUN_NUMBERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A run number never used before in this process, so that a run kept alive past its session
/// (by a cursor, say) can never share file names with a later session's runs.
pub(crate) fn next_run_number() -> u64 {
    RUN_NUMBERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The path of one file of run `number` in `dir`.
pub(crate) fn run_file_path(dir: &Path, number: u64, file: RunFile) -> PathBuf {
    dir.join(format!("{number}.{}", file.extension()))
}

/// Parameters shared by every run a table writes.
#[derive(Clone, Debug)]
pub(crate) struct RunParams {
    pub(crate) dir: PathBuf,
    /// Where released runs queue their files for removal (the session's queue).
    pub(crate) removals: Arc<DeferredRemovals>,
    pub(crate) salt: u64,
    pub(crate) bloom: BloomParams,
    /// The filters of runs written by merges into the deepest level
    /// ([`crate::TableConfig::last_level_bloom`]; the same as `bloom` unless configured).
    pub(crate) last_level_bloom: BloomParams,
    /// Under [`crate::BloomAlloc::LevelScaledFpr`]: the filters of runs 1, 2, ... levels above
    /// the deepest level that `bloom` is for; empty otherwise.
    pub(crate) bloom_above: Arc<[BloomParams]>,
    /// Whether the deepest level has a sizing of its own (`last_level_bloom` configured), so
    /// that `bloom` is for the level above it.
    pub(crate) last_level_own: bool,
    pub(crate) index: IndexType,
    /// Bytes of the run files written with these parameters (the table's, shared with its
    /// duplicates): every writer adds its files' sizes when it finishes.
    pub(crate) written: Arc<std::sync::atomic::AtomicU64>,
}

impl RunParams {
    /// The parameters of a table with `config`, writing into `dir`.
    pub(crate) fn for_table(
        dir: &Path,
        removals: Arc<DeferredRemovals>,
        salt: u64,
        config: &crate::TableConfig,
    ) -> Result<RunParams> {
        Ok(RunParams {
            dir: dir.to_path_buf(),
            removals,
            salt,
            bloom: config.bloom_params()?,
            last_level_bloom: config.last_level_bloom_params()?,
            bloom_above: config.bloom_above_params()?.into(),
            last_level_own: config.last_level_bloom.is_some(),
            index: config.index,
            written: Arc::default(),
        })
    }

    /// These parameters with the filter sizing of a run written to level `level` (1-based) of
    /// a table with `levels` levels, other than a merge into the deepest level (see
    /// [`RunParams::for_last_level`]): under [`crate::BloomAlloc::LevelScaledFpr`], `d` levels
    /// above the deepest level it covers, the rate of `bloom_above[d - 1]`. O(1).
    pub(crate) fn for_level(&self, level: usize, levels: usize) -> std::borrow::Cow<'_, RunParams> {
        let deepest = if self.last_level_own {
            levels.saturating_sub(1)
        } else {
            levels
        };
        let above = deepest.saturating_sub(level);
        let scaled = above.checked_sub(1).and_then(|i| {
            self.bloom_above
                .get(i.min(self.bloom_above.len().saturating_sub(1)))
        });
        match scaled {
            Some(&bloom) => std::borrow::Cow::Owned(RunParams {
                bloom,
                ..self.clone()
            }),
            None => std::borrow::Cow::Borrowed(self),
        }
    }

    /// These parameters with the deepest level's filter sizing, for a merge into that level.
    pub(crate) fn for_last_level(&self) -> RunParams {
        RunParams {
            bloom: self.last_level_bloom,
            ..self.clone()
        }
    }
}

/// Removes the files of a run that was never finished (a merge abandoned when its table closed, or
/// a write that failed half way).
#[derive(Debug)]
struct UnfinishedFiles {
    removals: Arc<DeferredRemovals>,
    dir: PathBuf,
    number: u64,
    armed: bool,
}

impl Drop for UnfinishedFiles {
    fn drop(&mut self) {
        if self.armed {
            // Removed (or kept for reuse) by the session's next operation (see
            // `DeferredRemovals`): no one but the writer ever had them open.
            defer_run_files(&self.removals, &self.dir, self.number, true);
        }
    }
}

/// Queues the files of run `number` for removal; `recyclable`: all but its blob file may be
/// kept for reuse (see [`DeferredRemovals`]). The blob file never is: a blob reference handed
/// to a user reads it through its own descriptor, after the run is gone.
fn defer_run_files(removals: &DeferredRemovals, dir: &Path, number: u64, recyclable: bool) {
    let path = |file| run_file_path(dir, number, file);
    if recyclable {
        removals.defer([path(RunFile::Blobs)]);
        removals.defer_recyclable(
            [
                RunFile::KeyOps,
                RunFile::Filter,
                RunFile::Index,
                RunFile::Checksums,
            ]
            .map(path),
        );
    } else {
        removals.defer(RunFile::ALL.map(path));
    }
}

/// Builds a run from entries pushed in strictly increasing key order.
///
/// Memory: one page builder, one 64 KiB buffer per file, and the filter (sized for
/// `entries_max`) and index being built.
#[derive(Debug)]
pub(crate) struct RunWriter {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    number: u64,
    caching: bool,
    keyops: FileWriter,
    blobs: FileWriter,
    page: PageBuilder,
    page_bytes: Vec<u8>,
    index: IndexBuilder,
    bloom: BloomBuilder,
    entries: u64,
    unfinished: UnfinishedFiles,
    /// The last key pushed (empty before the first): a run's inputs come from files whose
    /// checksums a forger can fix, so their order is checked, not assumed.
    last_key: Vec<u8>,
    /// The first key pushed (empty before the first).
    first_key: Vec<u8>,
    /// Where the run's bytes are counted when it is finished ([`RunParams::written`]).
    written: Arc<std::sync::atomic::AtomicU64>,
    /// The CRC32C of every page written so far.
    page_sums: Vec<u32>,
    /// The CRC32C of every whole 4 KiB chunk of blob bytes written so far...
    blob_sums: Vec<u32>,
    /// ...and of the chunk being filled: its CRC so far and its length.
    blob_chunk: (u32, usize),
}

impl RunWriter {
    /// Creates the files of run `number`. `entries_max` bounds the entries that will be pushed
    /// (it sizes the Bloom filter).
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        entries_max: u64,
        caching: bool,
    ) -> Result<RunWriter> {
        let mut unfinished = UnfinishedFiles {
            removals: params.removals.clone(),
            dir: params.dir.clone(),
            number,
            armed: false,
        };
        let keyops = FileWriter::create_reusing(
            &*fs,
            &run_file_path(&params.dir, number, RunFile::KeyOps),
            &params.removals,
            params.removals.keyops_hint(entries_max, PAGE_BYTES as u64),
        )?
        .credit(&params.removals);
        unfinished.armed = true;
        let blobs = FileWriter::create(&*fs, &run_file_path(&params.dir, number, RunFile::Blobs))?
            .credit(&params.removals);
        Ok(RunWriter {
            unfinished,
            fs,
            dir: params.dir.clone(),
            number,
            caching,
            keyops,
            blobs,
            page: PageBuilder::new(),
            page_bytes: Vec::with_capacity(PAGE_BYTES),
            index: IndexBuilder::new(params.index),
            bloom: BloomBuilder::new(params.bloom, entries_max, params.salt),
            entries: 0,
            last_key: Vec::new(),
            first_key: Vec::new(),
            written: params.written.clone(),
            page_sums: Vec::new(),
            blob_sums: Vec::new(),
            blob_chunk: (0, 0),
        })
    }

    /// Appends one entry; `blob` holds the blob's bytes for an insert that has one. A key not
    /// above the previous one is [`Error::Corrupt`] (damaged input), never a malformed run.
    pub(crate) fn push(
        &mut self,
        key: &[u8],
        op: Op,
        value: &[u8],
        blob: Option<&[u8]>,
    ) -> Result<()> {
        // A merge of runs whose keys are out of order (a hostile snapshot with forged
        // checksums, say) must fail, not write a run that breaks the format.
        if self.entries > 0 && key <= self.last_key.as_slice() {
            return Err(Error::corrupt(
                "run",
                "entries out of key order (an input run is damaged)",
            ));
        }
        if self.entries == 0 {
            self.first_key = key.to_vec();
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        debug_assert!(blob.is_none() || op == Op::Insert);
        // Values from users are checked at the API; a custom resolve function may still produce
        // an oversized one.
        if value.len() > crate::page::VALUE_SIZE_MAX {
            return Err(Error::ValueTooLarge {
                len: value.len(),
                max: crate::page::VALUE_SIZE_MAX,
            });
        }
        let blob_span = match blob {
            Some(bytes) => {
                let len = u32::try_from(bytes.len()).map_err(|_| Error::BlobTooLarge {
                    len: bytes.len() as u64,
                    max: u32::MAX as u64,
                })?;
                let span = BlobSpan {
                    offset: self.blobs.written_bytes(),
                    len,
                };
                self.blobs.write(bytes)?;
                self.sum_blob_bytes(bytes);
                Some(span)
            }
            None => None,
        };
        if !self.page.fits(key.len(), value.len(), blob_span.is_some()) {
            self.finish_page()?;
        }
        self.page.push(EntryRef {
            key,
            op,
            value,
            blob: blob_span,
        });
        self.bloom.insert_key(key);
        self.entries += 1;
        Ok(())
    }

    fn finish_page(&mut self) -> Result<()> {
        let (Some(first), Some(last)) = (self.page.first_key(), self.page.last_key()) else {
            return Ok(());
        };
        self.index.push_span(first, last, self.page.pages())?;
        self.page_bytes.clear();
        self.page.finish_into(&mut self.page_bytes);
        self.page_sums
            .extend(self.page_bytes.chunks(PAGE_BYTES).map(crc32c::crc32c));
        self.keyops.write(&self.page_bytes)
    }

    /// Adds blob bytes just written to the per-chunk checksums of the blob file.
    fn sum_blob_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (crc, len) = &mut self.blob_chunk;
            let take = (PAGE_BYTES - *len).min(bytes.len());
            *crc = crc32c::crc32c_append(*crc, &bytes[..take]);
            *len += take;
            bytes = &bytes[take..];
            if *len == PAGE_BYTES {
                self.blob_sums.push(*crc);
                self.blob_chunk = (0, 0);
            }
        }
    }

    /// Entries pushed so far.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the remaining page, the filter, the index and the checksums, and opens the run.
    /// Returns `None` for a run without entries (its files are removed).
    pub(crate) fn finish(mut self) -> Result<Option<Arc<Run>>> {
        self.finish_page()?;
        let fs = self.fs.clone();
        let dir = self.dir.clone();
        let number = self.number;
        let entries = self.entries;
        let filter = self.bloom.finish_fitted();
        let index = self.index.finish(entries);
        let keyops = self.keyops.finish(false)?;
        let blobs = self.blobs.finish(false)?;
        if entries == 0 {
            for file in [RunFile::KeyOps, RunFile::Blobs] {
                fs.remove_file(&run_file_path(&dir, number, file))?;
            }
            self.unfinished.armed = false;
            return Ok(None);
        }
        let credit = &self.unfinished.removals;
        credit.note_run(keyops.0, entries);
        let create = |file: RunFile, len: usize| {
            FileWriter::create_reusing(&*fs, &run_file_path(&dir, number, file), credit, len as u64)
        };
        let mut filter_file = create(RunFile::Filter, filter.encoded_len())?.credit(credit);
        filter.write_to(&mut |chunk| filter_file.write(chunk))?;
        let filter_sum = filter_file.finish(false)?;
        let mut index_file = create(RunFile::Index, index.encoded_len())?.credit(credit);
        index.write_to(&mut |chunk| index_file.write(chunk))?;
        let index_sum = index_file.finish(false)?;
        if self.blob_chunk.1 > 0 {
            self.blob_sums.push(self.blob_chunk.0);
        }
        let checksums = RunChecksums {
            files: [keyops, blobs, filter_sum, index_sum],
            pages: Some(PageSums {
                keyops: std::mem::take(&mut self.page_sums).into(),
                blobs: std::mem::take(&mut self.blob_sums).into(),
            }),
        };
        let sums_bytes = checksums.encode();
        let mut sums_file = create(RunFile::Checksums, sums_bytes.len())?;
        sums_file.write(&sums_bytes)?;
        sums_file.finish(false)?;
        let bytes =
            checksums.files.iter().map(|(size, _)| size).sum::<u64>() + sums_bytes.len() as u64;
        self.written
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        crate::observe::bytes_written(bytes);
        let removals = self.unfinished.removals.clone();
        let bounds = KeyBounds {
            first: std::mem::take(&mut self.first_key).into(),
            last: std::mem::take(&mut self.last_key).into(),
        };
        let run = Run::from_parts(
            true,
            fs,
            removals,
            dir,
            number,
            self.caching,
            filter,
            index,
            checksums,
            bounds,
        )?;
        // From here on the run owns its files.
        self.unfinished.armed = false;
        Ok(Some(run))
    }
}

/// The first and last key of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyBounds {
    pub(crate) first: Box<[u8]>,
    pub(crate) last: Box<[u8]>,
}

/// An immutable run, open for lookups and sequential reads.
#[derive(Debug)]
pub(crate) struct Run {
    fs: Arc<dyn FileSystem>,
    /// Where the run's files are queued for removal when it is dropped.
    removals: Arc<DeferredRemovals>,
    dir: PathBuf,
    number: u64,
    caching: bool,
    /// The key/ops file as lookups read it (`O_DIRECT` unless cached).
    keyops: Arc<dyn ReadableFile>,
    /// The blob file, read through the page cache.
    blobs: BlobFile,
    filter: BloomFilter,
    index: Index,
    checksums: RunChecksums,
    /// The CRC32C of the checksums file.
    checksums_crc: u32,
    /// Its first and last key: a run that is one part of a larger sorted run
    /// ([`crate::sorted`]) is found by them.
    bounds: KeyBounds,
    /// When set, dropping the run leaves its files in place (a run written into a snapshot).
    keep_files: std::sync::atomic::AtomicBool,
    /// Whether its files may be kept for reuse once it is dropped: set for a run this session
    /// wrote, cleared once a file of it is linked elsewhere ([`Run::share_files`]). A run
    /// opened from existing files never is.
    recyclable: std::sync::atomic::AtomicBool,
    /// Set when an fsync of one of its files failed: the kernel may have dropped the dirty pages,
    /// and a later fsync would report success without making them durable, so snapshots copy
    /// this run instead of linking it.
    sync_failed: std::sync::atomic::AtomicBool,
}

impl Run {
    #[allow(clippy::too_many_arguments)]
    fn from_parts(
        recyclable: bool,
        fs: Arc<dyn FileSystem>,
        removals: Arc<DeferredRemovals>,
        dir: PathBuf,
        number: u64,
        caching: bool,
        filter: BloomFilter,
        index: Index,
        checksums: RunChecksums,
        bounds: KeyBounds,
    ) -> Result<Arc<Run>> {
        let keyops = fs.open(
            &run_file_path(&dir, number, RunFile::KeyOps),
            ReadOptions {
                direct: !caching,
                random: true,
            },
        )?;
        let blobs = BlobFile(Arc::new(BlobFileParts {
            file: fs.open(
                &run_file_path(&dir, number, RunFile::Blobs),
                ReadOptions::default(),
            )?,
            sums: checksums.pages.as_ref().map(|p| p.blobs.clone()),
        }));
        let checksums_crc = RunChecksums::pin(&checksums.encode());
        Ok(Arc::new(Run {
            fs,
            removals,
            dir,
            number,
            caching,
            keyops,
            blobs,
            filter,
            index,
            checksums,
            checksums_crc,
            bounds,
            keep_files: std::sync::atomic::AtomicBool::new(false),
            recyclable: std::sync::atomic::AtomicBool::new(recyclable),
            sync_failed: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The path of one of the run's files.
    pub(crate) fn file_path(&self, file: RunFile) -> PathBuf {
        run_file_path(&self.dir, self.number, file)
    }

    /// The CRC32C of the run's checksums file (its canonical encoding), which pins every file
    /// of the run.
    pub(crate) fn checksums_crc(&self) -> u32 {
        self.checksums_crc
    }

    /// Reads every file of the run again and checks it against the checksums file: each file's
    /// size and CRC32C, and each page and blob chunk's CRC32C (run format version 2). For
    /// scrubs ([`crate::Session::scrub`]). `progress` gets the bytes of each read (1 MiB at
    /// most). Cost: one sequential read of the run.
    pub(crate) fn verify_files(&self, progress: &mut dyn FnMut(u64) -> Result<()>) -> Result<()> {
        for (file, recorded) in RunFile::CHECKSUMMED.iter().zip(self.checksums.files) {
            let sums = self.checksums.pages.as_ref().and_then(|p| match file {
                RunFile::KeyOps => Some(&p.keyops[..]),
                RunFile::Blobs => Some(&p.blobs[..]),
                _ => None,
            });
            let path = self.file_path(*file);
            let read = checksum_file(&*self.fs, &path, false, sums, progress)?;
            check_file(path, recorded, read)?;
        }
        Ok(())
    }

    /// Checks pages read from the key/ops file, starting at page `first`, against their
    /// recorded CRC32C: a page whose bytes differ is [`Error::CorruptFile`] naming the file and
    /// the page, never data. A run of format version 1 has no per-page checksums; its files
    /// were checked whole when it was opened. Cost: one CRC32C per page (about 0.2 us).
    pub(crate) fn check_pages(&self, first: u64, bytes: &[u8]) -> Result<()> {
        let Some(sums) = &self.checksums.pages else {
            return Ok(());
        };
        debug_assert_eq!(bytes.len() % PAGE_BYTES, 0);
        check_chunks(self.keyops.path(), first, bytes, &sums.keyops)
    }

    /// Records that an fsync of one of the run's files failed (see `sync_failed`).
    pub(crate) fn mark_sync_failed(&self) {
        self.sync_failed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether an fsync of one of the run's files ever failed.
    pub(crate) fn sync_failed(&self) -> bool {
        self.sync_failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The size and CRC32C recorded for one of the checksummed files.
    pub(crate) fn recorded_checksum(&self, file: RunFile) -> Option<(u64, u32)> {
        RunFile::CHECKSUMMED
            .iter()
            .position(|f| *f == file)
            .map(|i| self.checksums.files[i])
    }

    /// The encoding of the run's checksums file.
    pub(crate) fn checksums_bytes(&self) -> Vec<u8> {
        self.checksums.encode()
    }

    /// Its files are about to get another name (a snapshot's hard link), which a reader may
    /// open: dropping the run must then remove them, never keep them for reuse (written over,
    /// they would change under that reader).
    pub(crate) fn share_files(&self) {
        self.recyclable
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Leaves the run's files in place when it is dropped.
    pub(crate) fn keep_files(&self) {
        self.keep_files
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Opens run `number` in `params.dir`: checks the filter and index files against their
    /// recorded size and CRC32C, the filter's salt against `params.salt`, that the index agrees
    /// with the key/ops file, and the size of the key/ops and blob files. Their contents are
    /// checked page by page as they are read ([`Run::check_pages`], [`BlobFile::read`]), or
    /// here, whole, under [`OpenCheck::Full`], or for a run of format version 1, which has no
    /// per-page checksums.
    ///
    /// Cost: [`OpenCheck::Lazy`] reads the checksums file, the filter, the index and the two
    /// spans holding the run's first and last key (about 2% of a run of 94-byte entries);
    /// [`OpenCheck::Full`] reads every file once (O(run size)).
    pub(crate) fn open(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        caching: bool,
        check: OpenCheck,
    ) -> Result<Arc<Run>> {
        let (dir, salt) = (&params.dir, params.salt);
        let sums_path = run_file_path(dir, number, RunFile::Checksums);
        let checksums = RunChecksums::decode(&crate::fs::read_all(&*fs, &sums_path)?)
            .map_err(|e| e.in_file(&sums_path))?;
        let whole = check == OpenCheck::Full || checksums.pages.is_none();
        let mut contents = Vec::new();
        let mut filter = None;
        for (file, (size, crc)) in RunFile::CHECKSUMMED.iter().zip(checksums.files) {
            let path = run_file_path(dir, number, *file);
            let recorded = checksums.pages.as_ref().and_then(|p| match file {
                RunFile::KeyOps => Some(&p.keyops),
                RunFile::Blobs => Some(&p.blobs),
                _ => None,
            });
            let wanted = matches!(file, RunFile::Filter | RunFile::Index);
            if *file == RunFile::Filter {
                // Read straight into the filter's blocks (most of what an open reads).
                let f = fs.open(&path, ReadOptions::default())?;
                let actual_size = f.len_bytes()?;
                if actual_size != size {
                    return Err(Error::CorruptFile {
                        path,
                        what: "run file",
                        detail: format!("{actual_size} bytes, expected {size}"),
                    });
                }
                let read = BloomFilter::read_file(&*f).map_err(|e| e.in_file(&path));
                match read {
                    // A filter that does not decode but matches its CRC is the filter's
                    // damage; one that does not match, the file's.
                    Err(e) => {
                        let (_, actual, _) =
                            checksum_file(&*fs, &path, false, None, &mut |_| Ok(()))?;
                        if actual != crc {
                            return Err(Error::ChecksumMismatch {
                                path,
                                expected: crc,
                                actual,
                            });
                        }
                        return Err(e);
                    }
                    Ok((_, actual)) if actual != crc => {
                        return Err(Error::ChecksumMismatch {
                            path,
                            expected: crc,
                            actual,
                        });
                    }
                    Ok((decoded, _)) => filter = Some(decoded),
                }
                contents.push(Vec::new());
                continue;
            }
            if !wanted && !whole {
                let actual_size = fs.open(&path, ReadOptions::default())?.len_bytes()?;
                if actual_size != size {
                    return Err(Error::CorruptFile {
                        path,
                        what: "run file",
                        detail: format!("{actual_size} bytes, expected {size}"),
                    });
                }
                contents.push(Vec::new());
                continue;
            }
            let checked = checksum_file(&*fs, &path, wanted, recorded.map(|r| &r[..]), &mut |_| {
                Ok(())
            });
            contents.push(check_file(path, (size, crc), checked?)?);
        }
        let filter_path = run_file_path(dir, number, RunFile::Filter);
        let filter = filter.ok_or_else(|| Error::corrupt("run", "no filter read"))?;
        if filter.salt() != salt {
            return Err(Error::CorruptFile {
                path: filter_path,
                what: "bloom filter",
                detail: format!("salt {:#x} does not match the session's", filter.salt()),
            });
        }
        let index_path = run_file_path(dir, number, RunFile::Index);
        let index = Index::decode(&contents[3]).map_err(|e| e.in_file(&index_path))?;
        if index.page_count().checked_mul(PAGE_BYTES as u64) != Some(checksums.files[0].0) {
            return Err(Error::CorruptFile {
                path: index_path,
                what: "index",
                detail: format!(
                    "covers {} pages but the key/ops file has {} bytes",
                    index.page_count(),
                    checksums.files[0].0
                ),
            });
        }
        // Every entry takes at least 4 bytes of its page (its key and value offsets): a larger
        // count could only be made up, and merges size their Bloom filter and debt from it.
        let entries_max = index.page_count() * (PAGE_BYTES / 4) as u64;
        if index.entry_count() > entries_max {
            return Err(Error::CorruptFile {
                path: index_path,
                what: "index",
                detail: format!(
                    "{} entries cannot fit in {} pages",
                    index.entry_count(),
                    index.page_count()
                ),
            });
        }
        let keyops_path = run_file_path(dir, number, RunFile::KeyOps);
        let page_sums = checksums.pages.as_ref().map(|p| &p.keyops[..]);
        let bounds = read_key_bounds(&*fs, &keyops_path, &index, page_sums)?;
        Run::from_parts(
            false,
            fs,
            params.removals.clone(),
            dir.to_path_buf(),
            number,
            caching,
            filter,
            index,
            checksums,
            bounds,
        )
    }

    /// The run's first key.
    pub(crate) fn first_key(&self) -> &[u8] {
        &self.bounds.first
    }

    /// The run's last key.
    pub(crate) fn last_key(&self) -> &[u8] {
        &self.bounds.last
    }

    /// The run's number (unique within its session directory).
    #[allow(dead_code)]
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// Number of entries.
    pub(crate) fn entries(&self) -> u64 {
        self.index.entry_count()
    }

    /// Whether lookups read this run through the page cache.
    #[allow(dead_code)]
    pub(crate) fn caching(&self) -> bool {
        self.caching
    }

    pub(crate) fn filter(&self) -> &BloomFilter {
        &self.filter
    }

    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The key/ops file as lookups read it.
    pub(crate) fn keyops(&self) -> &Arc<dyn ReadableFile> {
        &self.keyops
    }

    /// The blob file.
    pub(crate) fn blobs(&self) -> &BlobFile {
        &self.blobs
    }

    #[allow(dead_code)]
    pub(crate) fn checksums(&self) -> &RunChecksums {
        &self.checksums
    }

    /// Memory held by the filter and index.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.filter.size_bytes() + self.index.size_bytes()
    }

    /// The first key of the span holding the run's greatest key below `upper` (`None`: no
    /// bound): a key `< upper` such that the run has at least one entry in `[key, upper)`, the
    /// window a backward read takes next ([`crate::Cursor`]'s `next_back`). `None` when the run
    /// holds no key below `upper`.
    ///
    /// Cost: one index search and one span read (through the page cache), rarely a few more
    /// when the index answers a span whose keys are all `>= upper`.
    pub(crate) fn first_key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        if upper.is_some_and(|u| u <= self.first_key()) {
            return Ok(None);
        }
        let index = &self.index;
        let span = match upper.filter(|u| *u <= self.last_key()) {
            Some(u) => index.search(u),
            None => index.last_span(),
        };
        let Some(mut span) = span else {
            return Ok(None);
        };
        let file = RunCursor::open_file(self)?;
        let sums = self.checksums.pages.as_ref().map(|p| &p.keyops[..]);
        loop {
            let bytes = read_span(&*file, index.page_count(), span.first, sums)?;
            let first = PageView::new(&bytes)?.first_key()?.to_vec();
            if upper.is_none_or(|u| first.as_slice() < u) {
                return Ok(Some(first));
            }
            span = match span.first.checked_sub(1) {
                Some(last) => index.span_ending_at(last).ok_or_else(|| {
                    Error::corrupt("index", format!("no span ends at page {last}"))
                })?,
                None => return Ok(None),
            };
        }
    }

    /// Reads one blob.
    pub(crate) fn read_blob(&self, span: BlobSpan) -> Result<Vec<u8>> {
        self.blobs.read(span)
    }
}

#[cfg(test)]
impl RunParams {
    /// Parameters for unit tests: runs in `/r`, salt 42, 10-bit filters.
    pub(crate) fn for_tests(index: IndexType) -> RunParams {
        RunParams {
            dir: PathBuf::from("/r"),
            removals: Arc::default(),
            salt: 42,
            bloom: BloomParams::for_bits_per_entry(10.0).unwrap(),
            last_level_bloom: BloomParams::for_bits_per_entry(10.0).unwrap(),
            bloom_above: Arc::new([]),
            last_level_own: false,
            index,
            written: Arc::default(),
        }
    }
}

/// A run's blob file and the checksums of its 4 KiB chunks: what blob references hold, so that
/// a blob is checked when it is read. One pointer: lookups keep one per key found with a blob.
#[derive(Clone, Debug)]
pub(crate) struct BlobFile(Arc<BlobFileParts>);

#[derive(Debug)]
struct BlobFileParts {
    file: Arc<dyn ReadableFile>,
    /// Per-chunk CRC32C (run format version 2); `None` for a version 1 run, whose blob file
    /// was checked whole when it was opened.
    sums: Option<Arc<[u32]>>,
}

impl BlobFile {
    /// Reads the blob at `span`, checking every chunk it touches. Cost: one read of the
    /// chunks the blob touches (at most 8 KiB more than the blob) and one CRC32C per chunk.
    pub(crate) fn read(&self, span: BlobSpan) -> Result<Vec<u8>> {
        let file = &*self.0.file;
        // A corrupt reference must not make us allocate gigabytes before the read fails.
        let size = file.len_bytes()?;
        let end = span.offset.checked_add(span.len as u64);
        let Some(end) = end.filter(|&end| end <= size) else {
            return Err(Error::corrupt(
                "blob reference",
                format!(
                    "{} bytes at offset {} lie outside {}",
                    span.len,
                    span.offset,
                    file.path().display()
                ),
            ));
        };
        let Some(sums) = self.0.sums.as_ref().filter(|_| span.len > 0) else {
            let mut bytes = vec![0u8; span.len as usize];
            file.read_exact_at(&mut bytes, span.offset)?;
            return Ok(bytes);
        };
        let page = PAGE_BYTES as u64;
        let first = span.offset / page;
        let from = first * page;
        let to = end.div_ceil(page).saturating_mul(page).min(size);
        let mut chunks = vec![0u8; (to - from) as usize];
        file.read_exact_at(&mut chunks, from)?;
        check_chunks(file.path(), first, &chunks, sums)?;
        let start = (span.offset - from) as usize;
        chunks.drain(..start);
        chunks.truncate(span.len as usize);
        Ok(chunks)
    }
}

/// The first key of a run's first span and the last key of its last span (the span the index
/// gives for a key above every key). Two span reads; a run has at least one entry.
fn read_key_bounds(
    fs: &dyn FileSystem,
    path: &Path,
    index: &Index,
    page_sums: Option<&[u32]>,
) -> Result<KeyBounds> {
    let file = fs.open(path, ReadOptions::default())?;
    let span_keys = |first_page: u64, first: bool| -> Result<Box<[u8]>> {
        let page = read_span(&*file, index.page_count(), first_page, page_sums)?;
        let view = PageView::new(&page).map_err(|e| e.in_file(path))?;
        let key = if first {
            view.first_key()
        } else {
            view.last_key()
        }
        .map_err(|e| e.in_file(path))?;
        Ok(key.into())
    };
    let above_every_key = [0xffu8; page::KEY_SIZE_MAX + 1];
    let last_span = match index {
        // The compact index gives a key above every key the last span.
        Index::Compact(c) => c.search(&above_every_key),
        // The ordinary index knows each span's last key: search for the last one.
        Index::Ordinary(o) => (o.span_count() as usize)
            .checked_sub(1)
            .and_then(|j| o.search(o.last_key(j))),
    }
    .ok_or_else(|| Error::corrupt("run", "an index without spans"))?
    .first;
    let bounds = KeyBounds {
        first: span_keys(0, true)?,
        last: span_keys(last_span, false)?,
    };
    if bounds.first > bounds.last {
        return Err(Error::corrupt("run", "keys out of order").in_file(path));
    }
    Ok(bounds)
}

/// Reads the span starting at page `first_page` of a key/ops file of `page_count` pages
/// (through `file`, not opened for direct I/O), checked against `page_sums` when the run has
/// them. Cost: one read of its first page, one more for its overflow pages if any.
fn read_span(
    file: &dyn ReadableFile,
    page_count: u64,
    first_page: u64,
    page_sums: Option<&[u32]>,
) -> Result<Vec<u8>> {
    let path = file.path();
    let mut page = vec![0u8; PAGE_BYTES];
    file.read_exact_at(&mut page, first_page * PAGE_BYTES as u64)?;
    // The first page is checked before its header is trusted for the span's length: damage
    // there must be reported as the page's checksum failure, in this file.
    if let Some(sums) = page_sums {
        check_chunks(path, first_page, &page, sums)?;
    }
    let pages = page::span_pages(&page).map_err(|e| e.in_file(path))?;
    if first_page
        .checked_add(pages)
        .is_none_or(|end| end > page_count)
    {
        return Err(Error::corrupt("run", "a span runs past the end of the file").in_file(path));
    }
    let bytes = usize::try_from(pages * PAGE_BYTES as u64)
        .map_err(|_| Error::corrupt("run", "span too large").in_file(path))?;
    if pages > 1 {
        page.resize(bytes, 0);
        file.read_exact_at(
            &mut page[PAGE_BYTES..],
            (first_page + 1) * PAGE_BYTES as u64,
        )?;
    }
    if let Some(sums) = page_sums {
        check_chunks(path, first_page + 1, &page[PAGE_BYTES..], sums)?;
    }
    Ok(page)
}

/// Compares what [`checksum_file`] read (size, CRC32C, bytes) with the recorded size and CRC;
/// returns the bytes.
fn check_file(
    path: PathBuf,
    (size, crc): (u64, u32),
    read: (u64, u32, Vec<u8>),
) -> Result<Vec<u8>> {
    let (actual_size, actual_crc, bytes) = read;
    if actual_size != size {
        return Err(Error::CorruptFile {
            path,
            what: "run file",
            detail: format!("{actual_size} bytes, expected {size}"),
        });
    }
    if actual_crc != crc {
        return Err(Error::ChecksumMismatch {
            path,
            expected: crc,
            actual: actual_crc,
        });
    }
    Ok(bytes)
}

/// Reads a file in 1 MiB chunks, returning its size, CRC32C and (if `keep`) its bytes; with
/// `chunk_sums`, also checks each 4 KiB chunk against its recorded CRC32C.
fn checksum_file(
    fs: &dyn FileSystem,
    path: &Path,
    keep: bool,
    chunk_sums: Option<&[u32]>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(u64, u32, Vec<u8>)> {
    let file = fs.open(path, ReadOptions::default())?;
    let size = file.len_bytes()?;
    let mut crc = 0u32;
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(chunk.len() as u64) as usize;
        file.read_exact_at(&mut chunk[..n], offset)?;
        crc = crc32c::crc32c_append(crc, &chunk[..n]);
        if let Some(sums) = chunk_sums {
            check_chunks(path, offset / PAGE_BYTES as u64, &chunk[..n], sums)?;
        }
        if keep {
            kept.extend_from_slice(&chunk[..n]);
        }
        offset += n as u64;
        progress(n as u64)?;
    }
    Ok((size, crc, kept))
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.keep_files.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // Errors cannot be returned from drop: the files are queued, and the session's next
        // operation removes them (or keeps them for reuse) and reports any failure (see
        // `DeferredRemovals`).
        let recyclable = self.recyclable.load(std::sync::atomic::Ordering::Acquire);
        defer_run_files(&self.removals, &self.dir, self.number, recyclable);
    }
}

/// How much of a run [`Run::open`] reads and checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpenCheck {
    /// The checksums file, the filter and the index (each checked whole), the spans holding
    /// the first and last key, and the sizes of the data files; every data page and blob chunk
    /// is checked when it is read. A run of format version 1 is read whole regardless.
    Lazy,
    /// Also every byte of the key/ops and blob files, against their CRC32C and each page's.
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    fn params(index: IndexType) -> RunParams {
        RunParams::for_tests(index)
    }

    fn write_run(fs: &Arc<dyn FileSystem>, p: &RunParams, n: u32) -> Arc<Run> {
        let mut w = RunWriter::new(fs.clone(), p, 7, n as u64, true).unwrap();
        for i in 0..n {
            let key = format!("key-{i:08}");
            let value = if i % 100 == 7 {
                vec![b'v'; 9000]
            } else {
                format!("v{i}").into_bytes()
            };
            let blob = format!("blob-{i}");
            let with_blob = i % 3 == 0;
            w.push(
                key.as_bytes(),
                Op::Insert,
                &value,
                with_blob.then_some(blob.as_bytes()),
            )
            .unwrap();
        }
        w.finish().unwrap().unwrap()
    }

    /// A run of `n` entries numbered `number`, whose values depend on `tag`.
    fn write_tagged(
        fs: &Arc<dyn FileSystem>,
        p: &RunParams,
        number: u64,
        n: u32,
        tag: &str,
    ) -> Arc<Run> {
        let mut w = RunWriter::new(fs.clone(), p, number, n as u64, true).unwrap();
        for i in 0..n {
            let key = format!("key-{i:08}");
            w.push(
                key.as_bytes(),
                Op::Insert,
                format!("{tag}{i}").as_bytes(),
                None,
            )
            .unwrap();
        }
        w.finish().unwrap().unwrap()
    }

    /// A dropped run's files (all but its blob file) are kept and written over (and grown) by
    /// the next run at least their size, which reads back exactly (every checksum checked on
    /// opening);
    /// a run whose files were shared with a snapshot is never kept, and the linked names keep
    /// their bytes.
    #[test]
    fn released_runs_are_written_over_unless_shared() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let p = RunParams {
            removals: Arc::new(DeferredRemovals::with_recycling(
                1 << 30,
                PathBuf::from("/r"),
            )),
            ..params(IndexType::Compact)
        };
        fs.create_dir_all(&p.dir).unwrap();
        drop(write_tagged(&fs, &p, 1, 3000, "old"));
        p.removals.remove_step(&*fs).unwrap();
        assert!(p.removals.recycled_bytes() > 0);
        // Four files renamed into the pool; the blob file removed.
        let pooled = |mem: &MemFs| {
            let names = mem.list_dir(&p.dir).unwrap();
            names.iter().filter(|n| n.ends_with(".free")).count()
        };
        assert_eq!(pooled(&mem), 4);
        assert_eq!(mem.list_dir(&p.dir).unwrap().len(), 4);
        // 3,400 entries (more than the hint's 1/16 margin above 3,000): grown, not cut.
        let new = write_tagged(&fs, &p, 2, 3400, "new");
        assert_eq!(pooled(&mem), 0, "every pooled file reused");
        assert_eq!(p.removals.recycled_bytes(), 0);
        let reopened = Run::open(fs.clone(), &p, 2, true, OpenCheck::Full).unwrap();
        let mut cursor = RunCursor::new(reopened).unwrap();
        let mut i = 0;
        while let Some(e) = cursor.peek().unwrap() {
            assert_eq!(e.value, format!("new{i}").as_bytes());
            i += 1;
            cursor.advance().unwrap();
        }
        assert_eq!(i, 3400);

        // Shared with a snapshot: removed, never reused.
        new.share_files();
        let link = PathBuf::from("/r/link.keyops");
        let before = mem
            .file_bytes(&run_file_path(&p.dir, 2, RunFile::KeyOps))
            .unwrap();
        fs.hard_link(&run_file_path(&p.dir, 2, RunFile::KeyOps), &link)
            .unwrap();
        drop(new);
        p.removals.remove_all(&*fs).unwrap();
        assert_eq!(p.removals.recycled_bytes(), 0);
        drop(write_tagged(&fs, &p, 3, 2900, "other"));
        assert_eq!(mem.file_bytes(&link).unwrap(), before);
        assert!(!mem
            .exists(&run_file_path(&p.dir, 2, RunFile::KeyOps))
            .unwrap());
    }

    #[test]
    fn write_then_read_sequentially_and_reopen() {
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            let mem = MemFs::new();
            let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
            let p = params(kind);
            fs.create_dir_all(&p.dir).unwrap();
            let run = write_run(&fs, &p, 2000);
            assert_eq!(run.entries(), 2000);
            let mut cursor = RunCursor::new(run.clone()).unwrap();
            let mut i = 0;
            while let Some(e) = cursor.peek().unwrap() {
                assert_eq!(e.key, format!("key-{i:08}").as_bytes());
                if let Some(span) = e.blob {
                    assert_eq!(run.read_blob(span).unwrap(), format!("blob-{i}").as_bytes());
                }
                i += 1;
                cursor.advance().unwrap();
            }
            assert_eq!(i, 2000);
            let reopened = Run::open(fs.clone(), &p, 7, true, OpenCheck::Full).unwrap();
            assert_eq!(reopened.entries(), 2000);
            let other_salt = RunParams {
                salt: 43,
                ..p.clone()
            };
            assert!(matches!(
                Run::open(fs.clone(), &other_salt, 7, true, OpenCheck::Full),
                Err(Error::CorruptFile {
                    what: "bloom filter",
                    ..
                })
            ));
            // Flip one bit of each file: opening must fail.
            for file in RunFile::ALL {
                let path = run_file_path(&p.dir, 7, file);
                let good = mem.file_bytes(&path).unwrap();
                if good.is_empty() {
                    continue;
                }
                let mut bad = good.clone();
                let at = bad.len() / 2;
                bad[at] ^= 0x10;
                mem.set_file_bytes(&path, bad);
                assert!(
                    Run::open(fs.clone(), &p, 7, true, OpenCheck::Full).is_err(),
                    "{file:?}"
                );
                mem.set_file_bytes(&path, good);
            }
            drop((run, reopened, cursor));
            assert!(!mem.file_paths().is_empty(), "removal is deferred");
            p.removals.remove_all(&*fs).unwrap();
            assert!(
                mem.file_paths().is_empty(),
                "files removed when the run is dropped"
            );
        }
    }

    /// A one-entry page can hold a key of up to 4082 bytes; the cursor refuses one above
    /// `KEY_SIZE_MAX` instead of handing it to a merge.
    #[test]
    fn cursor_refuses_an_oversized_key() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let p = params(IndexType::Ordinary);
        fs.create_dir_all(&p.dir).unwrap();
        let mut w = RunWriter::new(fs.clone(), &p, 7, 1, true).unwrap();
        w.push(&[b'k'; page::KEY_SIZE_MAX], Op::Insert, b"0123456789", None)
            .unwrap();
        let run = w.finish().unwrap().unwrap();
        assert!(RunCursor::new(run.clone()).is_ok());
        // One entry, no blob: the key starts at 14; move the value's start 6 bytes later.
        let path = run_file_path(&p.dir, 7, RunFile::KeyOps);
        let mut bytes = mem.file_bytes(&path).unwrap();
        let value_start = 14 + page::KEY_SIZE_MAX as u16;
        assert_eq!(bytes[12..14], value_start.to_le_bytes());
        bytes[12..14].copy_from_slice(&(value_start + 6).to_le_bytes());
        mem.set_file_bytes(&path, bytes);
        // With the page's checksum forged to match (a damaged page is refused before that).
        assert!(matches!(
            RunCursor::new(run.clone()),
            Err(Error::CorruptFile {
                what: "run data",
                ..
            })
        ));
        let bytes = |f| mem.file_bytes(&run_file_path(&p.dir, 7, f)).unwrap();
        let forged = RunChecksums::of_files(
            &bytes(RunFile::KeyOps),
            &bytes(RunFile::Blobs),
            &bytes(RunFile::Filter),
            &bytes(RunFile::Index),
        );
        drop(run);
        let sums = run_file_path(&p.dir, 7, RunFile::Checksums);
        mem.set_file_bytes(&sums, forged.encode());
        let run = Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy).unwrap();
        assert!(matches!(
            RunCursor::new(run),
            Err(Error::Corrupt { what: "run", .. })
        ));
    }

    /// An index (with valid checksums) claiming more entries than its pages can hold is refused
    /// when the run is opened.
    #[test]
    fn open_refuses_an_impossible_entry_count() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let p = params(IndexType::Compact);
        fs.create_dir_all(&p.dir).unwrap();
        let run = write_run(&fs, &p, 100);
        let pages = run.index().page_count();
        let index_path = run_file_path(&p.dir, 7, RunFile::Index);
        let sums_path = run_file_path(&p.dir, 7, RunFile::Checksums);
        let good = (mem.file_bytes(&index_path), mem.file_bytes(&sums_path));
        for (entries, ok) in [(pages * 1024, true), (pages * 1024 + 1, false)] {
            let mut index = good.0.clone().unwrap();
            let at = index.len() - 8;
            index[at..].copy_from_slice(&entries.to_le_bytes());
            let mut sums = run.checksums().clone();
            sums.files[3] = (index.len() as u64, crc32c::crc32c(&index));
            mem.set_file_bytes(&index_path, index);
            mem.set_file_bytes(&sums_path, sums.encode());
            let opened = Run::open(fs.clone(), &p, 7, true, OpenCheck::Full);
            assert_eq!(opened.is_ok(), ok, "{entries} entries in {pages} pages");
            if let Err(e) = opened {
                assert!(
                    matches!(e, Error::CorruptFile { what: "index", .. }),
                    "{e:?}"
                );
            }
        }
    }

    /// A lazy open reads the filter and index but no data page beyond the two holding the
    /// run's first and last key; a damaged page or blob chunk is then found when it is read,
    /// named by file and page, and never returned as data. A full open finds it at once.
    #[test]
    fn lazy_open_reads_no_data_and_reads_check_each_page() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let p = params(IndexType::Compact);
        fs.create_dir_all(&p.dir).unwrap();
        let run = write_run(&fs, &p, 3000);
        let pages = run.index().page_count();
        assert!(pages > 40, "{pages} pages");
        let blob_bytes = run.checksums().files[1].0;
        assert!(blob_bytes > 2 * PAGE_BYTES as u64, "{blob_bytes}");
        drop(run);
        let read = |ext| mem.bytes_read(ext);
        let before = (read("keyops"), read("blobs"));
        let lazy = Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy).unwrap();
        let keyops_read = read("keyops") - before.0;
        assert!(keyops_read <= 8 * PAGE_BYTES as u64, "{keyops_read} bytes");
        assert_eq!(read("blobs"), before.1);
        let full = Run::open(fs.clone(), &p, 7, true, OpenCheck::Full).unwrap();
        assert!(read("keyops") - before.0 - keyops_read >= pages * PAGE_BYTES as u64);
        drop((lazy, full));

        // One bit of a page in the middle.
        let keyops = run_file_path(&p.dir, 7, RunFile::KeyOps);
        let good = mem.file_bytes(&keyops).unwrap();
        let mut bad = good.clone();
        let page = pages / 2;
        bad[(page as usize) * PAGE_BYTES + 100] ^= 4;
        mem.set_file_bytes(&keyops, bad);
        let run = Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy).unwrap();
        let mut cursor = RunCursor::new(run.clone()).unwrap();
        let damage = loop {
            let failed = match cursor.peek() {
                Ok(Some(_)) => cursor.advance().err(),
                Ok(None) => panic!("the damaged page was read as data"),
                Err(e) => Some(e),
            };
            if let Some(e) = failed {
                break e;
            }
        };
        match damage {
            Error::CorruptFile { path, detail, .. } => {
                assert_eq!(path, keyops);
                assert!(detail.contains(&format!("page {page} ")), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Run::open(fs.clone(), &p, 7, true, OpenCheck::Full),
            Err(Error::CorruptFile { .. })
        ));
        drop((run, cursor));
        mem.set_file_bytes(&keyops, good);

        // One bit of the blob file's second chunk: only blobs in that chunk fail to read.
        let blobs = run_file_path(&p.dir, 7, RunFile::Blobs);
        let good = mem.file_bytes(&blobs).unwrap();
        let mut bad = good.clone();
        bad[PAGE_BYTES + 10] ^= 1;
        mem.set_file_bytes(&blobs, bad);
        let run = Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy).unwrap();
        let mut cursor = RunCursor::new(run.clone()).unwrap();
        let (mut ok, mut failed) = (0, 0);
        while let Some(e) = cursor.peek().unwrap() {
            if let Some(span) = e.blob {
                let touches = span.offset < 2 * PAGE_BYTES as u64
                    && span.offset + span.len as u64 > PAGE_BYTES as u64;
                match run.read_blob(span) {
                    Ok(_) => {
                        assert!(!touches);
                        ok += 1;
                    }
                    Err(Error::CorruptFile { path, .. }) => {
                        assert!(touches && path == blobs);
                        failed += 1;
                    }
                    Err(other) => panic!("{other:?}"),
                }
            }
            cursor.advance().unwrap();
        }
        assert!(ok > 400 && failed > 0, "{ok} {failed}");
        assert!(Run::open(fs.clone(), &p, 7, true, OpenCheck::Full).is_err());
    }

    /// `first_key_before` names, for every bound, a key below it whose span holds the run's
    /// greatest key below the bound, with either index, overflow spans included.
    #[test]
    fn first_key_before_finds_the_span_below_every_bound() {
        for kind in [IndexType::Compact, IndexType::Ordinary] {
            let mem = MemFs::new();
            let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
            let p = params(kind);
            fs.create_dir_all(&p.dir).unwrap();
            let n = 1500;
            let run = write_run(&fs, &p, n);
            let key = |i: u32| format!("key-{i:08}").into_bytes();
            assert_eq!(run.first_key_before(Some(&key(0))).unwrap(), None);
            assert_eq!(run.first_key_before(Some(b"a")).unwrap(), None);
            for i in 1..=n {
                // Between key i-1 and key i (or past the last key).
                let upper = if i == n { b"l".to_vec() } else { key(i) };
                let below = run.first_key_before(Some(&upper)).unwrap().unwrap();
                assert!(below <= key(i - 1), "{i}");
                // No more than a span of entries between it and the bound.
                let first = String::from_utf8(below).unwrap();
                let j: u32 = first["key-".len()..].parse().unwrap();
                assert!(i - j <= 100, "{i}: {first}");
            }
            let last = run.first_key_before(None).unwrap().unwrap();
            assert!(last <= key(n - 1));
        }
    }

    /// A run written in format version 1 (no per-page checksums) still opens, and is read and
    /// checked whole even by a lazy open.
    #[test]
    fn version_1_runs_are_read_whole() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let p = params(IndexType::Ordinary);
        fs.create_dir_all(&p.dir).unwrap();
        let run = write_run(&fs, &p, 1000);
        let v1 = RunChecksums {
            files: run.checksums().files,
            pages: None,
        };
        let pages = run.index().page_count();
        drop(run);
        let sums = run_file_path(&p.dir, 7, RunFile::Checksums);
        mem.set_file_bytes(&sums, v1.encode());
        let before = mem.bytes_read("keyops");
        let run = Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy).unwrap();
        assert!(mem.bytes_read("keyops") - before >= pages * PAGE_BYTES as u64);
        assert_eq!(
            RunCursor::new(run.clone())
                .unwrap()
                .peek()
                .unwrap()
                .unwrap()
                .key,
            b"key-00000000"
        );
        drop(run);
        let keyops = run_file_path(&p.dir, 7, RunFile::KeyOps);
        let mut bad = mem.file_bytes(&keyops).unwrap();
        bad[PAGE_BYTES * 3 + 7] ^= 1;
        mem.set_file_bytes(&keyops, bad);
        assert!(matches!(
            Run::open(fs.clone(), &p, 7, true, OpenCheck::Lazy),
            Err(Error::ChecksumMismatch { .. })
        ));
    }
}
