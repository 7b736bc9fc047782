//! Runs: immutable sorted files of 4 KiB pages, with their blob file, Bloom filter, index and
//! checksums.
//!
//! Owns: [`RunWriter`] (builds a run from entries given in key order), [`Run`] (an open run: its
//! filter and index in memory, its files open for reads), [`RunCursor`] (reads a run sequentially
//! for merges) and the checksums file. A run's files are queued for removal when the last
//! `Arc<Run>` is dropped, or, for a run this session wrote and never shared, for reuse by a new
//! run (`fs::DeferredRemovals`).
//!
//! May call: `fs`, `page`, `bloom`, `index`. Must never touch: the levels, tables or sessions.
//!
//! Files of run `N` in a directory (formats in `docs/format/`):
//! `N.keyops` (pages), `N.blobs` (blob bytes), `N.filter` (Bloom filter), `N.index` (fence
//! pointers) and `N.checksums` (size and CRC32C of the other four, computed while writing).
//!
//! Costs: writing a run streams every file once through 64 KiB buffers; the filter and index are
//! built in memory while pages are written and written out at the end. Opening a run from disk
//! ([`Run::open`]) reads and checksums every file (O(run size)).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bloom::{BloomBuilder, BloomFilter, BloomParams};
use crate::error::{Error, Result};
use crate::fs::{DeferredRemovals, FileSystem, FileWriter, ReadOptions, ReadableFile};
use crate::index::{Index, IndexBuilder, IndexType};
use crate::page::{self, BlobSpan, EntryRef, Op, PageBuilder, PageView, PAGE_BYTES};

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

/// Size and CRC32C of each data file of a run, as recorded in its checksums file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RunChecksums {
    /// `(size_bytes, crc32c)` for keyops, blobs, filter, index, in that order.
    pub(crate) files: [(u64, u32); 4],
}

const CHECKSUMS_HEADER: &str = "cairn-run-checksums 1";

impl RunChecksums {
    /// Encodes the checksums file: a versioned text file whose last line checksums the rest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut text = format!("{CHECKSUMS_HEADER}\n");
        for (file, (size, crc)) in RunFile::CHECKSUMMED.iter().zip(self.files) {
            text.push_str(&format!("{} {size} {crc:08x}\n", file.extension()));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("end {crc:08x}\n"));
        text.into_bytes()
    }

    /// Total decoder of the checksums file.
    pub(crate) fn decode(bytes: &[u8]) -> Result<RunChecksums> {
        let bad = |detail: &str| Error::corrupt("run checksums file", detail.to_string());
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad("too short"))?;
        let (body, last) = text.split_at(body_end);
        let expected = last
            .strip_prefix("end ")
            .and_then(|s| s.strip_suffix('\n'))
            .and_then(|s| u32::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("missing end line"))?;
        let actual = crc32c::crc32c(body.as_bytes());
        if expected != actual {
            return Err(bad(&format!(
                "self-checksum mismatch: recorded {expected:08x}, computed {actual:08x}"
            )));
        }
        let mut lines = body.lines();
        match lines.next() {
            Some(CHECKSUMS_HEADER) => {}
            Some(other) if other.starts_with("cairn-run-checksums ") => {
                let found = other["cairn-run-checksums ".len()..]
                    .parse()
                    .unwrap_or(u32::MAX);
                return Err(Error::UnsupportedVersion {
                    what: "run checksums file",
                    found,
                    supported: 1,
                });
            }
            _ => return Err(bad("missing header")),
        }
        let mut out = RunChecksums::default();
        for (slot, file) in out.files.iter_mut().zip(RunFile::CHECKSUMMED) {
            let line = lines.next().ok_or_else(|| bad("missing line"))?;
            let mut parts = line.split(' ');
            let (name, size, crc) = (parts.next(), parts.next(), parts.next());
            if name != Some(file.extension()) || parts.next().is_some() {
                return Err(bad(&format!("bad line {line:?}")));
            }
            let size = size.and_then(|s| s.parse::<u64>().ok());
            let crc = crc.and_then(|s| u32::from_str_radix(s, 16).ok());
            match (size, crc) {
                (Some(size), Some(crc)) => *slot = (size, crc),
                _ => return Err(bad(&format!("bad line {line:?}"))),
            }
        }
        if lines.next().is_some() {
            return Err(bad("trailing lines"));
        }
        // Only the canonical spelling is accepted (e.g. no upper-case hex, no leading zeros).
        if out.encode() != bytes {
            return Err(bad("not in canonical form"));
        }
        Ok(out)
    }
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
        self.keyops.write(&self.page_bytes)
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
        let filter = self.bloom.finish();
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
        let checksums = RunChecksums {
            files: [keyops, blobs, filter_sum, index_sum],
        };
        let sums_bytes = checksums.encode();
        let mut sums_file = create(RunFile::Checksums, sums_bytes.len())?;
        sums_file.write(&sums_bytes)?;
        sums_file.finish(false)?;
        let bytes =
            checksums.files.iter().map(|(size, _)| size).sum::<u64>() + sums_bytes.len() as u64;
        self.written
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
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
    blobs: Arc<dyn ReadableFile>,
    filter: BloomFilter,
    index: Index,
    checksums: RunChecksums,
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
        let blobs = fs.open(
            &run_file_path(&dir, number, RunFile::Blobs),
            ReadOptions::default(),
        )?;
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
        crc32c::crc32c(&self.checksums.encode())
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

    /// Opens run `number` in `params.dir`, verifying every file against its recorded size and
    /// CRC32C, the filter's salt against `params.salt`, and that the index agrees with the
    /// key/ops file. Cost: reads every file once (O(run size)).
    pub(crate) fn open(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        caching: bool,
    ) -> Result<Arc<Run>> {
        let (dir, salt) = (&params.dir, params.salt);
        let sums_path = run_file_path(dir, number, RunFile::Checksums);
        let checksums = RunChecksums::decode(&crate::fs::read_all(&*fs, &sums_path)?)
            .map_err(|e| e.in_file(&sums_path))?;
        let mut contents = Vec::new();
        for (file, (size, crc)) in RunFile::CHECKSUMMED.iter().zip(checksums.files) {
            let path = run_file_path(dir, number, *file);
            let (actual_size, actual_crc, bytes) = checksum_file(
                &*fs,
                &path,
                matches!(file, RunFile::Filter | RunFile::Index),
            )?;
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
            contents.push(bytes);
        }
        let filter_path = run_file_path(dir, number, RunFile::Filter);
        let filter = BloomFilter::decode(&contents[2]).map_err(|e| e.in_file(&filter_path))?;
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
        let bounds = read_key_bounds(&*fs, &run_file_path(dir, number, RunFile::KeyOps), &index)?;
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
    pub(crate) fn blobs(&self) -> &Arc<dyn ReadableFile> {
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

    /// Reads one blob.
    pub(crate) fn read_blob(&self, span: BlobSpan) -> Result<Vec<u8>> {
        read_blob(&*self.blobs, span)
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

/// Reads the blob at `span` of a blob file.
pub(crate) fn read_blob(file: &dyn ReadableFile, span: BlobSpan) -> Result<Vec<u8>> {
    // A corrupt reference must not make us allocate gigabytes before the read fails.
    let size = file.len_bytes()?;
    let end = span.offset.checked_add(span.len as u64);
    if end.is_none_or(|end| end > size) {
        return Err(Error::corrupt(
            "blob reference",
            format!(
                "{} bytes at offset {} lie outside {}",
                span.len,
                span.offset,
                file.path().display()
            ),
        ));
    }
    let mut bytes = vec![0u8; span.len as usize];
    file.read_exact_at(&mut bytes, span.offset)?;
    Ok(bytes)
}

/// The first key of a run's first span and the last key of its last span (the span the index
/// gives for a key above every key). Two span reads; a run has at least one entry.
fn read_key_bounds(fs: &dyn FileSystem, path: &Path, index: &Index) -> Result<KeyBounds> {
    let file = fs.open(path, ReadOptions::default())?;
    let span_keys = |first_page: u64, first: bool| -> Result<Box<[u8]>> {
        let mut page = vec![0u8; PAGE_BYTES];
        file.read_exact_at(&mut page, first_page * PAGE_BYTES as u64)?;
        let pages = page::span_pages(&page)?;
        if first_page
            .checked_add(pages)
            .is_none_or(|end| end > index.page_count())
        {
            return Err(Error::corrupt(
                "run",
                format!("a span runs past the end of {}", path.display()),
            ));
        }
        let bytes = usize::try_from(pages * PAGE_BYTES as u64)
            .map_err(|_| Error::corrupt("run", "span too large"))?;
        page.resize(bytes, 0);
        file.read_exact_at(&mut page, first_page * PAGE_BYTES as u64)?;
        let view = PageView::new(&page)?;
        let key = if first {
            view.first_key()?
        } else {
            view.last_key()?
        };
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
        return Err(Error::corrupt(
            "run",
            format!("keys out of order in {}", path.display()),
        ));
    }
    Ok(bounds)
}

/// Reads a file in 1 MiB chunks, returning its size, CRC32C and (if `keep`) its bytes.
fn checksum_file(fs: &dyn FileSystem, path: &Path, keep: bool) -> Result<(u64, u32, Vec<u8>)> {
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
        if keep {
            kept.extend_from_slice(&chunk[..n]);
        }
        offset += n as u64;
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

/// Pages a cursor reads from the file at once.
const CURSOR_CHUNK_PAGES: u64 = 16;

/// Pages a cursor keeps requested ahead of the chunk it reads (256 KiB), through
/// [`ReadableFile::prefetch`]: when less than half of that is left ahead, it asks for the pages
/// up to a whole window ahead, so the device gets requests of 128 to 256 KiB.
///
/// The file is opened without the kernel's own read-ahead (`POSIX_FADV_RANDOM`), whose window
/// is the device's setting: 8 MiB on the machine the benchmarks run on, read in 4 MiB
/// requests, each of which held up every lookup read queued behind it for milliseconds (a
/// merge's input reads were the periodic slow lookup batches at 100M entries; see
/// `docs/benchmarks/notes/2026-11-26-read-ahead.md`). A merge reads about 2 KB of input per update at
/// 100M entries, so a quarter MiB ahead keeps it from waiting on the disk.
const CURSOR_AHEAD_PAGES: u64 = 64;

/// The pages `from .. to` a cursor asks for ahead of a chunk ending at page `end`, when pages
/// before `ahead_to` are asked for already and the file has `page_count` pages: none while at
/// least half of [`CURSOR_AHEAD_PAGES`] lie ahead, else up to a whole window past `end`.
fn ahead_request(ahead_to: u64, end: u64, page_count: u64) -> Option<(u64, u64)> {
    let from = ahead_to.max(end);
    if from - end >= CURSOR_AHEAD_PAGES / 2 {
        return None;
    }
    let to = end.saturating_add(CURSOR_AHEAD_PAGES).min(page_count);
    (to > from).then_some((from, to))
}

/// Reads a run's entries in key order, a chunk of pages at a time (for merges).
///
/// Memory: one chunk of `CURSOR_CHUNK_PAGES` pages (64 KiB), more only for a span of overflow
/// pages longer than that, plus the current span's decoded entry positions (a few words per entry
/// of the span); at most [`CURSOR_AHEAD_PAGES`] more pages in the page cache, read ahead. One
/// `read` per chunk, one read-ahead request per 32 to 64 pages; one header parse per span.
#[derive(Debug)]
pub(crate) struct RunCursor {
    run: Arc<Run>,
    file: Arc<dyn ReadableFile>,
    page_count: u64,
    /// Pages before this one have been read or asked for ahead of time.
    ahead_to: u64,
    /// Pages `chunk_first .. chunk_first + chunk.len() / PAGE_BYTES` are in `chunk`.
    chunk: Vec<u8>,
    chunk_first: u64,
    /// The current span: its first page and page count.
    span_first: u64,
    span_pages: u64,
    /// The current entry within the span.
    entry: usize,
    /// The span's entries, decoded together when the cursor reaches the span (one header
    /// parse per span; merges peek at an input's entry more than once per output entry).
    decoded: Vec<Decoded>,
    done: bool,
}

/// Where the current entry's parts lie in [`RunCursor`]'s chunk.
#[derive(Clone, Copy, Debug)]
struct Decoded {
    key: (usize, usize),
    op: Op,
    value: (usize, usize),
    blob: Option<BlobSpan>,
}

/// The position of `part`, a subslice of `whole`, as a start and end offset.
fn offsets_in(whole: &[u8], part: &[u8]) -> (usize, usize) {
    let start = (part.as_ptr() as usize).wrapping_sub(whole.as_ptr() as usize);
    (start, start.wrapping_add(part.len()))
}

impl RunCursor {
    /// A cursor at the run's first entry.
    pub(crate) fn new(run: Arc<Run>) -> Result<RunCursor> {
        let file = RunCursor::open_file(&run)?;
        RunCursor::at_page(run, file, 0)
    }

    /// The run's key/ops file, opened as a cursor reads it (through the page cache, without
    /// the kernel's read-ahead). Cost: one `open`.
    pub(crate) fn open_file(run: &Run) -> Result<Arc<dyn ReadableFile>> {
        run.fs.open(
            &run_file_path(&run.dir, run.number, RunFile::KeyOps),
            ReadOptions {
                direct: false,
                random: true,
            },
        )
    }

    /// Asks for the pages a cursor at the run's first entry reads first
    /// ([`ReadableFile::prefetch`] on `file`, from [`RunCursor::open_file`]), without waiting
    /// for them: cursors opened together over several runs then wait for the disk once
    /// rather than once each. A hint; no I/O is waited for.
    pub(crate) fn prefetch_start(run: &Run, file: &dyn ReadableFile) {
        let pages = CURSOR_CHUNK_PAGES.min(run.index.page_count());
        file.prefetch(0, pages * PAGE_BYTES as u64);
    }

    /// A cursor at the run's first entry that reads through `file` (from
    /// [`RunCursor::open_file`] on `run`).
    pub(crate) fn with_file(run: Arc<Run>, file: Arc<dyn ReadableFile>) -> Result<RunCursor> {
        RunCursor::at_page(run, file, 0)
    }

    /// A cursor at the first entry whose key is `>= key`. Cost: one index search, then reads
    /// from the span that can hold `key` (entries before `key` in it are skipped).
    pub(crate) fn seek(run: Arc<Run>, key: &[u8]) -> Result<RunCursor> {
        let start_page = match (run.index.search(key), run.index.kind()) {
            (Some(span), _) => span.first,
            // The compact index knows only that `key` precedes the run's first key...
            (None, IndexType::Compact) => 0,
            // ...the ordinary index that it follows the run's last key.
            (None, IndexType::Ordinary) => run.index.page_count(),
        };
        let file = RunCursor::open_file(&run)?;
        let mut cursor = RunCursor::at_page(run, file, start_page)?;
        while let Some(entry) = cursor.peek()? {
            if entry.key >= key {
                break;
            }
            cursor.advance()?;
        }
        Ok(cursor)
    }

    fn at_page(run: Arc<Run>, file: Arc<dyn ReadableFile>, start_page: u64) -> Result<RunCursor> {
        let page_count = run.index.page_count();
        let mut cursor = RunCursor {
            run,
            file,
            page_count,
            ahead_to: 0,
            chunk: Vec::new(),
            chunk_first: 0,
            span_first: 0,
            span_pages: 0,
            entry: 0,
            decoded: Vec::new(),
            done: false,
        };
        cursor.load_span(start_page)?;
        Ok(cursor)
    }

    /// The run being read.
    pub(crate) fn run(&self) -> &Arc<Run> {
        &self.run
    }

    fn chunk_pages(&self) -> u64 {
        (self.chunk.len() / PAGE_BYTES) as u64
    }

    /// Makes pages `first .. first + pages` resident in the chunk.
    fn ensure_pages(&mut self, first: u64, pages: u64) -> Result<()> {
        let end = first.saturating_add(pages);
        if first >= self.chunk_first && end <= self.chunk_first + self.chunk_pages() {
            return Ok(());
        }
        if end > self.page_count {
            return Err(Error::corrupt(
                "run",
                format!(
                    "span ends at page {end} but {} has {} pages",
                    self.file.path().display(),
                    self.page_count
                ),
            ));
        }
        let want = pages.max(CURSOR_CHUNK_PAGES).min(self.page_count - first);
        let bytes = usize::try_from(want * PAGE_BYTES as u64)
            .map_err(|_| Error::corrupt("run", "span too large"))?;
        self.read_ahead(first + want);
        self.chunk.resize(bytes, 0);
        self.file
            .read_exact_at(&mut self.chunk, first * PAGE_BYTES as u64)?;
        self.chunk_first = first;
        Ok(())
    }

    /// Asks for the pages up to [`CURSOR_AHEAD_PAGES`] past `end` (where the chunk being read
    /// ends) once fewer than half of them are asked for already.
    fn read_ahead(&mut self, end: u64) {
        if let Some((from, to)) = ahead_request(self.ahead_to, end, self.page_count) {
            let page = PAGE_BYTES as u64;
            self.file.prefetch(from * page, (to - from) * page);
            self.ahead_to = to;
        }
    }

    fn load_span(&mut self, first: u64) -> Result<()> {
        if first >= self.page_count {
            self.done = true;
            return Ok(());
        }
        self.ensure_pages(first, 1)?;
        let offset = ((first - self.chunk_first) as usize) * PAGE_BYTES;
        let pages = page::span_pages(&self.chunk[offset..offset + PAGE_BYTES])?;
        self.ensure_pages(first, pages)?;
        self.span_first = first;
        self.span_pages = pages;
        self.entry = 0;
        self.decode_span()
    }

    /// Decodes every entry of the current span into `decoded`. Cost: one header parse and
    /// O(entries) work, no I/O.
    fn decode_span(&mut self) -> Result<()> {
        self.decoded.clear();
        let start = ((self.span_first - self.chunk_first) as usize) * PAGE_BYTES;
        let end = start + (self.span_pages as usize) * PAGE_BYTES;
        let chunk = &self.chunk;
        let span = PageView::new(&chunk[start..end])?;
        for i in 0..span.len() {
            let e = span.entry(i)?;
            // A page may hold a key a little longer than the engine writes; a merge copying it
            // would fail an assertion of the page builder.
            if e.key.len() > page::KEY_SIZE_MAX {
                return Err(Error::corrupt(
                    "run",
                    format!("{}-byte key in {}", e.key.len(), self.file.path().display()),
                ));
            }
            self.decoded.push(Decoded {
                key: offsets_in(chunk, e.key),
                op: e.op,
                value: offsets_in(chunk, e.value),
                blob: e.blob,
            });
        }
        Ok(())
    }

    /// Whether every entry has been read.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// The current entry, or `None` at the end of the run.
    ///
    /// Cost: O(1); the entry was decoded when the cursor reached its span.
    pub(crate) fn peek(&self) -> Result<Option<EntryRef<'_>>> {
        let Some(&d) = self.decoded.get(self.entry).filter(|_| !self.done) else {
            return Ok(None);
        };
        let part = |(start, end): (usize, usize)| {
            self.chunk
                .get(start..end)
                .ok_or_else(|| Error::corrupt("run", "cursor entry outside its chunk"))
        };
        Ok(Some(EntryRef {
            key: part(d.key)?,
            op: d.op,
            value: part(d.value)?,
            blob: d.blob,
        }))
    }

    /// Moves to the next entry.
    pub(crate) fn advance(&mut self) -> Result<()> {
        if self.done {
            return Ok(());
        }
        self.entry += 1;
        if self.entry >= self.decoded.len() {
            self.load_span(self.span_first + self.span_pages)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    /// A cursor reading chunk after chunk asks for every page ahead exactly once, in requests of
    /// half a window to a window (only the file's end cuts one shorter), and always has at least
    /// half a window asked for ahead of the chunk it reads, unless the file ends sooner.
    #[test]
    fn read_ahead_requests_are_bounded_contiguous_and_ahead() {
        for page_count in [1, 15, 16, 17, 64, 100, 1_000, 4_099] {
            for chunk in [1, 16, 40, 100] {
                let (mut ahead_to, mut asked, mut first) = (0u64, 0u64, 0u64);
                while first < page_count {
                    let end = (first + chunk).min(page_count);
                    if let Some((from, to)) = ahead_request(ahead_to, end, page_count) {
                        assert_eq!(from, ahead_to.max(end), "a gap or an overlap");
                        assert!(to - from <= CURSOR_AHEAD_PAGES);
                        assert!(to - from >= CURSOR_AHEAD_PAGES / 2 || to == page_count);
                        asked += to - from;
                        ahead_to = to;
                    }
                    let ahead = ahead_to.max(end);
                    assert!(ahead >= (end + CURSOR_AHEAD_PAGES / 2).min(page_count));
                    first = end;
                }
                assert!(asked <= page_count);
            }
        }
    }

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
        let reopened = Run::open(fs.clone(), &p, 2, true).unwrap();
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
            let reopened = Run::open(fs.clone(), &p, 7, true).unwrap();
            assert_eq!(reopened.entries(), 2000);
            let other_salt = RunParams {
                salt: 43,
                ..p.clone()
            };
            assert!(matches!(
                Run::open(fs.clone(), &other_salt, 7, true),
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
                assert!(Run::open(fs.clone(), &p, 7, true).is_err(), "{file:?}");
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
            let mut sums = *run.checksums();
            sums.files[3] = (index.len() as u64, crc32c::crc32c(&index));
            mem.set_file_bytes(&index_path, index);
            mem.set_file_bytes(&sums_path, sums.encode());
            let opened = Run::open(fs.clone(), &p, 7, true);
            assert_eq!(opened.is_ok(), ok, "{entries} entries in {pages} pages");
            if let Err(e) = opened {
                assert!(
                    matches!(e, Error::CorruptFile { what: "index", .. }),
                    "{e:?}"
                );
            }
        }
    }

    #[test]
    fn checksums_file_round_trip_and_totality() {
        let sums = RunChecksums {
            files: [(4096, 1), (0, 0), (100, 0xdead_beef), (7, 9)],
        };
        let bytes = sums.encode();
        assert_eq!(RunChecksums::decode(&bytes).unwrap(), sums);
        for len in 0..bytes.len() {
            assert!(RunChecksums::decode(&bytes[..len]).is_err());
        }
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(RunChecksums::decode(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn checksums_golden_file() {
        let sums = RunChecksums {
            files: [
                (8192, 0x1234_abcd),
                (0, 0),
                (168, 0xdead_beef),
                (248, 0x0102_0304),
            ],
        };
        let golden = crate::golden::check_golden("run-checksums-v1.txt", &sums.encode());
        assert_eq!(RunChecksums::decode(&golden).unwrap(), sums);
    }

    proptest::proptest! {
        #[test]
        fn checksums_decoder_is_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = RunChecksums::decode(&bytes);
        }
    }
}
