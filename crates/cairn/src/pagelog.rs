//! The page log: trie pages appended to segment files, each page found through a pointer
//! ([`PageLoc`]) held by the page above it, so that no index of pages is kept anywhere.
//!
//! Owns: [`PageLoc`] and its encoding, the segment file format (`docs/format/trie.md`, "Page
//! log"), [`Segment`] (one immutable-once-written file, removed when its last user lets go),
//! [`PageLog`] (a session's segment writer and its registry of open segments), [`Appender`]
//! (the writes of one commit), [`Segments`] (the segments one trie version reaches, with its
//! live bytes in each), and what a snapshot records of them ([`Manifest`], [`TrieFiles`]). May call: `fs`, `io`. Must never touch: tables, runs, or what a page
//! holds (it stores an opaque record body under an opaque key: the trie's page id).
//!
//! Why a log and not a table: a page rewritten by a commit is appended once, and the pages of
//! the old version become dead bytes in their segments; a table rewrites every page again at
//! every level its merges pass through (measured at 2^22 keys: 4.3 times fewer bytes written
//! per 10,000-key commit, `docs/benchmarks/notes/2026-11-26-page-log.md`).
//!
//! Two streams: the log appends to two segments at a time ([`Stream`]): pages whose parent is
//! retained in memory, and deeper pages, so that segments of the first kind, cheap to empty,
//! are not mixed with the second (`docs/design.md`, "Reclamation").
//!
//! Bounds: an append buffers the commit's records in memory and writes them with one append per
//! stream (two when it fills a segment); a read of `n` pages is batched reads of `n` spans
//! of one or a few 4 KiB blocks each (each record spans the fewest blocks its length allows),
//! at most 4 MiB of them per batch, so that each reuses a pooled read arena.
//! Memory per version and deep segment: a live map of one bit per 64 bytes (128 KiB for a
//! 64 MiB segment).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};
use crate::fs::{DeferredRemovals, FileSystem, ReadOptions, ReadableFile, WritableFile};
use crate::io::{AlignedBuf, BlockIo, ReadRequest, ALIGN_BYTES};

/// Most bytes of record spans read in one batch by [`PageLog::read_each`]: what the session's
/// pool of read batches keeps an arena for, so that every batch reuses one.
pub(crate) const READ_BATCH_BYTES: usize = crate::io::POOLED_ARENA_BYTES_MAX;
/// The first bytes of every segment file.
const MAGIC: [u8; 8] = *b"CAIRNPGL";
/// The segment format version.
const FORMAT: u32 = 1;
/// Bytes of a segment's header block; records start after it.
pub(crate) const HEADER_BYTES: u64 = ALIGN_BYTES as u64;
/// Bytes of a record's header: body length (u32) and CRC32C of the body (u32).
pub(crate) const RECORD_HEADER_BYTES: usize = 8;
/// Longest record body: a page key and the largest page (64 leaves and their pointers) fit.
pub(crate) const RECORD_BODY_MAX: usize = u16::MAX as usize;
/// A segment takes no more appends once it is this long (64 KiB in the unit tests, so that
/// they fill, roll and clean many).
#[cfg(not(test))]
pub(crate) const SEGMENT_BYTES_TARGET: u64 = 64 << 20;
#[cfg(test)]
pub(crate) const SEGMENT_BYTES_TARGET: u64 = 64 << 10;
/// Bytes of a segment per bit of a deep segment's live map ([`Segments::maybe_live`]): no
/// two records of the trie start within one such span, since every page it stores encodes to
/// at least 65 bytes (a version byte, 32 bytes of slot kinds and one node).
const LIVE_GRANULE: u64 = 64;
/// Bytes of an encoded [`PageLoc`].
pub(crate) const LOC_BYTES: usize = 14;
/// The extension of a segment file.
pub(crate) const SEGMENT_EXT: &str = "pages";

/// The two streams of segments a page log appends to. Pages are sorted by what it costs to
/// move them out of a segment later: a page whose parent is held in memory (a retained page)
/// moves for the price of its own append, while moving a deeper one means reading and
/// rewriting its parent, which is stored too. Kept apart, the cheap segments can be cleaned
/// often and the dear ones rarely (see `Auth::clean`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    /// Pages whose parent is retained in memory.
    Near = 0,
    /// Pages whose parent is stored in the log.
    Deep = 1,
}

impl Stream {
    /// Both streams, in index order.
    pub(crate) const ALL: [Stream; 2] = [Stream::Near, Stream::Deep];
}

/// Where a page record is: its segment, its byte offset there and its body's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PageLoc {
    pub(crate) segment: u64,
    pub(crate) offset: u32,
    pub(crate) len: u16,
}

impl PageLoc {
    /// The 14-byte encoding: segment id, offset, body length, little-endian.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }

    /// Decodes [`PageLoc::encode_into`]'s bytes (exactly [`LOC_BYTES`]; total).
    pub(crate) fn decode(bytes: &[u8]) -> Result<PageLoc> {
        if bytes.len() != LOC_BYTES {
            return Err(Error::corrupt("page pointer", "not 14 bytes"));
        }
        let loc = PageLoc {
            segment: u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes")),
            offset: u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")),
            len: u16::from_le_bytes(bytes[12..14].try_into().expect("2 bytes")),
        };
        if loc.segment == 0 || (loc.offset as u64) < HEADER_BYTES || loc.len == 0 {
            return Err(Error::corrupt("page pointer", "outside any record"));
        }
        Ok(loc)
    }

    /// Bytes of the whole record (header and body).
    fn record_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + self.len as u64
    }

    /// The aligned span of blocks that holds the record.
    fn span(&self) -> (u64, usize) {
        let start = self.offset as u64 / HEADER_BYTES * HEADER_BYTES;
        let end = (self.offset as u64 + self.record_bytes()).div_ceil(HEADER_BYTES) * HEADER_BYTES;
        (start, (end - start) as usize)
    }
}

/// The file name of segment `id`.
pub(crate) fn segment_file_name(id: u64) -> String {
    format!("{id:016x}.{SEGMENT_EXT}")
}

/// The segment id a file name gives, if it names a segment.
pub(crate) fn segment_id_of(name: &str) -> Option<u64> {
    let (stem, ext) = name.split_once('.')?;
    if ext != SEGMENT_EXT || stem.len() != 16 {
        return None;
    }
    u64::from_str_radix(stem, 16).ok().filter(|&id| id != 0)
}

/// A random nonzero segment id (64 bits: two segments of one trie version, or of two sessions
/// whose snapshots meet, collide with probability about n²/2⁶⁵).
pub(crate) fn random_id(dir: &Path) -> Result<u64> {
    loop {
        let mut raw = [0u8; 8];
        getrandom::fill(&mut raw)
            .map_err(|e| Error::io("getrandom", dir, std::io::Error::other(e.to_string())))?;
        let id = u64::from_le_bytes(raw);
        if id != 0 {
            return Ok(id);
        }
    }
}

/// The header block of segment `id`.
fn encode_header(id: u64) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_BYTES as usize];
    out[0..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[16..24].copy_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&out[..HEADER_BYTES as usize - 4]);
    out[HEADER_BYTES as usize - 4..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Checks a header block: magic, version, checksum, and that it names segment `id` (total).
pub(crate) fn check_header(bytes: &[u8], id: u64) -> Result<()> {
    let bad = |detail: &str| Error::corrupt("page log segment", detail.to_string());
    if bytes.len() != HEADER_BYTES as usize {
        return Err(bad("short header"));
    }
    let crc = u32::from_le_bytes(bytes[HEADER_BYTES as usize - 4..].try_into().expect("4"));
    if crc32c::crc32c(&bytes[..HEADER_BYTES as usize - 4]) != crc {
        return Err(bad("header checksum mismatch"));
    }
    if bytes[0..8] != MAGIC {
        return Err(bad("not a segment"));
    }
    if u32::from_le_bytes(bytes[8..12].try_into().expect("4")) != FORMAT {
        return Err(bad("unknown segment format version"));
    }
    if u64::from_le_bytes(bytes[16..24].try_into().expect("8")) != id {
        return Err(bad("the header names another segment"));
    }
    Ok(())
}

/// A record's bytes: header, then the body (key length, key, page bytes).
fn encode_record(key: &[u8], page: &[u8], out: &mut Vec<u8>) -> Result<u16> {
    let body_len = 1 + key.len() + page.len();
    if key.len() > u8::MAX as usize || body_len > RECORD_BODY_MAX {
        return Err(Error::InvalidUpdate(format!(
            "a page record of {body_len} bytes is over the page log's limit"
        )));
    }
    let start = out.len();
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out.extend_from_slice(page);
    let crc = crc32c::crc32c(&out[start + RECORD_HEADER_BYTES..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(body_len as u16)
}

/// Appends the record of `page` under `key` to `buffer`, whose first byte is at `base` in
/// segment `id`, padding first to the next block boundary where the record would otherwise
/// span more blocks than its length needs (so that reading it takes the fewest blocks: one for a
/// record that fits a block) or where its header would cross a boundary; returns its pointer.
/// (Until 2026-11-26 a record larger than a block always started at a boundary: pages of
/// 4-6 KiB, common at 2^24 keys, then left up to half of each second block as padding. Files
/// written that way keep the property and read alike.)
fn place_record(
    id: u64,
    base: u64,
    buffer: &mut Vec<u8>,
    key: &[u8],
    page: &[u8],
) -> Result<PageLoc> {
    let record = (RECORD_HEADER_BYTES + 1 + key.len() + page.len()) as u64;
    let mut offset = base + buffer.len() as u64;
    let in_block = offset % HEADER_BYTES;
    let fewest = record.div_ceil(HEADER_BYTES);
    if (in_block + record).div_ceil(HEADER_BYTES) > fewest
        || in_block + RECORD_HEADER_BYTES as u64 > HEADER_BYTES
    {
        let pad = HEADER_BYTES - in_block;
        buffer.resize(buffer.len() + pad as usize, 0);
        offset += pad;
    }
    let offset = u32::try_from(offset)
        .map_err(|_| Error::InvalidUpdate("a page log segment would pass 4 GiB".to_string()))?;
    let len = encode_record(key, page, buffer)?;
    Ok(PageLoc {
        segment: id,
        offset,
        len,
    })
}

/// A whole segment built in memory (a snapshot's own: its retained pages), then written as one
/// file by the snapshot.
pub(crate) struct SegmentBuilder {
    id: u64,
    bytes: Vec<u8>,
    /// Bytes of its records (without padding).
    records: u64,
}

impl SegmentBuilder {
    /// An empty segment with a fresh random id (`dir` only names a failure of the system's
    /// random source).
    pub(crate) fn new(dir: &Path) -> Result<SegmentBuilder> {
        Ok(SegmentBuilder::with_id(random_id(dir)?))
    }

    /// An empty segment with id `id` (nonzero).
    pub(crate) fn with_id(id: u64) -> SegmentBuilder {
        SegmentBuilder {
            id,
            bytes: encode_header(id),
            records: 0,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Adds a record and returns its pointer.
    pub(crate) fn push(&mut self, key: &[u8], page: &[u8]) -> Result<PageLoc> {
        let loc = place_record(self.id, 0, &mut self.bytes, key, page)?;
        self.records += loc.record_bytes();
        Ok(loc)
    }

    /// The file's bytes (padded to whole blocks) and the bytes of its records.
    pub(crate) fn finish(mut self) -> (Vec<u8>, u64) {
        let records = self.records;
        let end = (self.bytes.len() as u64).div_ceil(HEADER_BYTES) * HEADER_BYTES;
        self.bytes.resize(end as usize, 0);
        (self.bytes, records)
    }
}

/// Splits the record at the start of `bytes` into key and page bytes, checking it against its
/// pointer: length, checksum, and a key of the length it claims (total).
fn decode_record<'a>(bytes: &'a [u8], loc: &PageLoc) -> Result<(&'a [u8], &'a [u8])> {
    let bad = |detail: &str| Error::corrupt("page log record", detail.to_string());
    let total = loc.record_bytes() as usize;
    if bytes.len() < total {
        return Err(bad("truncated"));
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4"));
    if len != loc.len as u32 {
        return Err(bad("its length is not the pointer's"));
    }
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4"));
    let body = &bytes[RECORD_HEADER_BYTES..total];
    if crc32c::crc32c(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    let key_len = body[0] as usize;
    if 1 + key_len > body.len() {
        return Err(bad("key longer than the record"));
    }
    Ok((&body[1..1 + key_len], &body[1 + key_len..]))
}

/// One segment file. Immutable once its writer has moved on; read by any number of trie
/// versions; its file is queued for removal when the last [`Arc`] of it is dropped.
pub(crate) struct Segment {
    /// The id pointers name it by.
    id: u64,
    /// The id in its file's name: the same, except for a segment of an imported snapshot,
    /// whose files get fresh names (so that two copies never share one). The header always
    /// holds `id`.
    file_id: u64,
    path: PathBuf,
    file: Arc<dyn ReadableFile>,
    removals: Arc<DeferredRemovals>,
    /// Set by a read-only session: the file is not its to remove.
    keep_file: AtomicBool,
    /// Bytes of the file (it grows while it is the segment being written).
    len: AtomicU64,
    /// Whether it holds pages of the deep stream (a segment adopted from a snapshot counts as
    /// deep: it may hold pages of any level).
    deep: bool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("id", &self.id).finish()
    }
}

impl Segment {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn file_id(&self) -> u64 {
        self.file_id
    }

    /// Bytes of its file.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if !self.keep_file.load(Ordering::Relaxed) {
            // Removed by the session's next operation (see `DeferredRemovals`).
            self.removals.defer([self.path.clone()]);
        }
    }
}

/// The segment being appended to.
/// The segment being appended to. The log holds it weakly: once no table version (and no
/// appender) holds it, its file is removed and the next append starts a new segment.
struct Current {
    segment: Weak<Segment>,
    id: u64,
    writer: Box<dyn WritableFile>,
    len: u64,
}

/// A session's page log: the segment being written and every segment open in the session (so
/// that two versions reaching the same segment share one file handle, and a segment restored
/// twice from snapshots is linked once).
pub(crate) struct PageLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    removals: Arc<DeferredRemovals>,
    /// How segment files are opened for reading: always with the random-access hint (a page
    /// is read by pointer, a scan in one large read: read-ahead only adds bytes, a fifth of
    /// the bytes a 10,000-key commit read from the device at 2^23 keys, measured in
    /// `docs/benchmarks/notes/2026-12-02-segment-reads.md`), and with
    /// `O_DIRECT` when the session asks for it ([`PageLog::with_direct_reads`]).
    read_options: ReadOptions,
    state: Mutex<LogState>,
}

#[derive(Default)]
struct LogState {
    open: HashMap<u64, Weak<Segment>>,
    /// The segment being written in each stream.
    current: [Option<Current>; 2],
}

impl std::fmt::Debug for PageLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageLog").field("dir", &self.dir).finish()
    }
}

impl PageLog {
    /// The page log of the session whose live files are in `dir`.
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        removals: Arc<DeferredRemovals>,
    ) -> PageLog {
        PageLog {
            fs,
            dir,
            removals,
            read_options: ReadOptions {
                direct: false,
                random: true,
            },
            state: Mutex::new(LogState::default()),
        }
    }

    /// This log, its segment files opened for `O_DIRECT` reads when `direct` is true
    /// ([`crate::SessionOptions::direct_page_reads`]): every read of a segment is then of
    /// whole aligned blocks into aligned memory, as all of them already are.
    pub(crate) fn with_direct_reads(mut self, direct: bool) -> PageLog {
        self.read_options.direct = direct;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        // Nothing under this lock can panic half way through a change of the state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the appends of one commit; other commits' appends wait until it is finished.
    pub(crate) fn appender(&self) -> Appender<'_> {
        Appender {
            log: self,
            state: self.lock(),
            buffer: [Vec::new(), Vec::new()],
            held: [None, None],
            written: Vec::new(),
        }
    }

    /// The ids of the segments being written, one per stream.
    pub(crate) fn current_ids(&self) -> Vec<u64> {
        self.lock().current.iter().flatten().map(|c| c.id).collect()
    }

    /// Ends the segments being written, if any: later appends go to new ones. A snapshot does
    /// this first, so that every segment it links is immutable.
    pub(crate) fn roll(&self) {
        self.lock().current = [None, None];
    }

    /// The segment named `id` by pointers whose file is `source` (in a snapshot; file id
    /// `file_id`): the open one if the session has that file open (its header checked), else
    /// `source` linked into the live directory (or, with `link` false, opened where it is and
    /// never removed) and read whole to check it ([`scan_file`]: O(segment size), as opening a
    /// run checksums its files).
    pub(crate) fn adopt(
        &self,
        id: u64,
        file_id: u64,
        source: &Path,
        link: bool,
    ) -> Result<Arc<Segment>> {
        let mut state = self.lock();
        if let Some(segment) = state.open.get(&file_id).and_then(Weak::upgrade) {
            if segment.id != id {
                return Err(Error::corrupt(
                    "trie manifest",
                    format!("segment file {file_id:016x} is open under another id"),
                ));
            }
            // The file is the snapshot's too: its header is checked whichever name opened it.
            let mut header = AlignedBuf::zeroed(HEADER_BYTES as usize);
            segment.file.read_exact_at(&mut header, 0)?;
            check_header(&header, id)?;
            return Ok(segment);
        }
        let path = if link {
            let path = self.dir.join(segment_file_name(file_id));
            if self.fs.exists(&path)? {
                self.fs.remove_file(&path)?;
            }
            self.fs.hard_link(source, &path)?;
            path
        } else {
            source.to_path_buf()
        };
        let segment = Arc::new(Segment {
            id,
            file_id,
            path: path.clone(),
            file: self.fs.open(&path, self.read_options)?,
            removals: self.removals.clone(),
            keep_file: AtomicBool::new(!link),
            len: AtomicU64::new(0),
            deep: true,
        });
        segment
            .len
            .store(segment.file.len_bytes()?, Ordering::Relaxed);
        // Like a run's files when a snapshot opens, the whole file is read and checked once:
        // header, every record's checksum, zero padding.
        scan_file(&*segment.file, id)?;
        state.open.insert(file_id, Arc::downgrade(&segment));
        Ok(segment)
    }

    /// Reads the records at `locs`, each from its segment in `segments` (in batches, see
    /// [`PageLog::read_each`]), and returns each one's key and page bytes. Errors: as
    /// [`PageLog::read_each`].
    #[cfg(test)]
    pub(crate) fn read(
        io: &BlockIo,
        segments: &Segments,
        locs: &[PageLoc],
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::with_capacity(locs.len());
        PageLog::read_each(io, segments, locs, &mut |_, key, page| {
            out.push((key.to_vec(), page.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }

    /// Reads the records at `locs`, each from its segment in `segments`, and calls `visit`
    /// with each one's index in `locs`, key and page bytes, in order, where the read left them
    /// (no copy). The reads go in batches of at most [`READ_BATCH_BYTES`] of spans (one
    /// record at least), all through one read batch taken from the session's pool: a commit's
    /// page level can be tens of MB of reads, and one batch for all of it would allocate a
    /// fresh arena of that size, zero it and free it again for each level (8.5% of a
    /// 10,000-key commit's CPU at 2^25 keys went to the page faults of that zeroing,
    /// `docs/benchmarks/notes/2026-11-28-pooled-page-reads.md`). Each batch still keeps the device's queue full (its reads
    /// are submitted in waves of up to `io::QUEUE_DEPTH_MAX`). Memory: one arena of at most
    /// [`READ_BATCH_BYTES`] (a record's span is at most 72 KiB). Errors: I/O, a pointer to a
    /// segment the version does not reach, a record that does not match its pointer
    /// (corruption), and `visit`'s; an error in a batch comes after the records of the batches
    /// before it were visited.
    pub(crate) fn read_each(
        io: &BlockIo,
        segments: &Segments,
        locs: &[PageLoc],
        visit: &mut VisitRecord<'_>,
    ) -> Result<()> {
        let mut requests = Vec::with_capacity(locs.len());
        for loc in locs {
            let segment = segments.get(loc.segment).ok_or_else(|| {
                Error::corrupt(
                    "page pointer",
                    format!("segment {:016x} is not one the trie reaches", loc.segment),
                )
            })?;
            let (offset, len_bytes) = loc.span();
            requests.push(ReadRequest {
                file: segment.file.clone(),
                offset,
                len_bytes,
            });
        }
        let mut batch = io.take_batch();
        let mut read_all = || -> Result<()> {
            let mut start = 0;
            while start < locs.len() {
                let mut end = start + 1;
                let mut bytes = requests[start].len_bytes;
                while end < requests.len() && bytes + requests[end].len_bytes <= READ_BATCH_BYTES {
                    bytes += requests[end].len_bytes;
                    end += 1;
                }
                io.read_fixed_into(&requests[start..end], &mut batch)?;
                for (j, loc) in locs[start..end].iter().enumerate() {
                    let skip = (loc.offset as u64 - loc.span().0) as usize;
                    let (key, page) = decode_record(&batch.get(j)[skip..], loc)?;
                    visit(start + j, key, page)?;
                }
                start = end;
            }
            Ok(())
        };
        let result = read_all();
        io.recycle_batch(batch);
        result
    }

    /// Every record of `segment`, in file order. See [`scan_file`].
    #[cfg(test)]
    pub(crate) fn scan(segment: &Segment) -> Result<Vec<Scanned>> {
        scan_file(&*segment.file, segment.id)
    }

    /// The records of `segment` starting in `from..until` that `keep` accepts (see
    /// [`scan_range`]), for cleaning a segment a piece at a time; `buf` is reused between calls.
    pub(crate) fn scan_range(
        segment: &Segment,
        from: u64,
        until: u64,
        buf: &mut AlignedBuf,
        keep: &mut dyn FnMut(&PageLoc) -> bool,
    ) -> Result<(Vec<Scanned>, u64)> {
        scan_range(&*segment.file, segment.id, from, until, buf, keep)
    }
}

/// Called with a record's index in a batch of reads, its key and its page bytes.
pub(crate) type VisitRecord<'a> = dyn FnMut(usize, &[u8], &[u8]) -> Result<()> + 'a;

/// A record as a scan finds it: its pointer, key and page bytes.
pub(crate) type Scanned = (PageLoc, Vec<u8>, Vec<u8>);

/// Every record of the file of segment `id`, in file order. Reads the whole file; total (a bad
/// header, a damaged record or padding that is not zero is an error).
pub(crate) fn scan_file(file: &dyn ReadableFile, id: u64) -> Result<Vec<Scanned>> {
    let len = file.len_bytes()?;
    let len = usize::try_from(len)
        .map_err(|_| Error::corrupt("page log segment", "too large to read"))?;
    // Read into aligned memory, for a file opened with `O_DIRECT`, which reads only whole
    // blocks: a length that is not a whole number of them is corruption, found before reading.
    if !len.is_multiple_of(ALIGN_BYTES) {
        return Err(Error::corrupt(
            "page log segment",
            format!("{len} bytes is not a whole number of blocks"),
        ));
    }
    let mut bytes = AlignedBuf::try_zeroed(len)
        .ok_or_else(|| Error::corrupt("page log segment", "too large to read"))?;
    file.read_exact_at(&mut bytes, 0)?;
    scan_bytes(&bytes, id)
}

/// [`scan_file`] on a file's bytes (total).
pub(crate) fn scan_bytes(bytes: &[u8], id: u64) -> Result<Vec<Scanned>> {
    let len = bytes.len();
    if len < HEADER_BYTES as usize || !len.is_multiple_of(ALIGN_BYTES) {
        return Err(Error::corrupt(
            "page log segment",
            format!("{len} bytes is not a whole number of blocks"),
        ));
    }
    check_header(&bytes[..HEADER_BYTES as usize], id)?;
    let mut out = Vec::new();
    scan_blocks(
        bytes,
        0,
        HEADER_BYTES as usize,
        len,
        len,
        id,
        &mut |_| true,
        &mut out,
    )?;
    Ok(out)
}

/// The records of segment `id` starting at or after byte `from` and before `until` that `keep`
/// accepts (it sees every record's pointer), in file order, and where the scan stopped: the
/// end of the last of them or of the padding after it, at or after `until` (the file's length
/// at its end), where the next scan of the segment starts. `from` is the header's end or
/// where an earlier scan stopped: where a record or padding starts. Reads from the start of
/// `from`'s block to the block boundary after `until` plus one record's largest bytes (the
/// file's end at most) into `buf` (grown as needed, never shrunk: reused, it costs no
/// allocation or zeroing); checks every record, kept or not: total, like [`scan_file`].
///
/// (Until 2026-11-27 a scan went on to the next block boundary, which records larger than a
/// block, placed across boundaries, can put megabytes later: such a scan ran out of the bytes
/// it had read and reported the segment corrupt.)
pub(crate) fn scan_range(
    file: &dyn ReadableFile,
    id: u64,
    from: u64,
    until: u64,
    buf: &mut AlignedBuf,
    keep: &mut dyn FnMut(&PageLoc) -> bool,
) -> Result<(Vec<Scanned>, u64)> {
    let bad = |detail: String| Error::corrupt("page log segment", detail);
    let len = file.len_bytes()?;
    if !len.is_multiple_of(HEADER_BYTES) || from < HEADER_BYTES || from > len {
        return Err(bad(format!("a scan from {from} of a file of {len} bytes")));
    }
    let until = until.clamp(from, len);
    let base = from / HEADER_BYTES * HEADER_BYTES;
    // Enough for every record starting before `until` (and any padding before it).
    let record_max = (RECORD_HEADER_BYTES + RECORD_BODY_MAX) as u64;
    let end = (until + record_max).div_ceil(HEADER_BYTES) * HEADER_BYTES;
    let end = end.min(len);
    let want = (end - base) as usize;
    if buf.len() < want {
        *buf =
            AlignedBuf::try_zeroed(want).ok_or_else(|| bad(format!("a scan of {want} bytes")))?;
    }
    let bytes = &mut buf[..want];
    file.read_exact_at(bytes, base)?;
    let mut out = Vec::new();
    let next = scan_blocks(
        bytes,
        base as usize,
        from as usize,
        until as usize,
        len as usize,
        id,
        keep,
        &mut out,
    )?;
    Ok((out, next as u64))
}

/// Parses the records of segment `id` from file offset `at` (where a record or padding
/// starts) on, until the first record or padding that ends at or after `until`; `bytes` holds
/// the file from offset `base` (block aligned) on, and the file is `file_len` bytes long.
/// Checks every record and copies out those `keep` accepts. Returns where it stopped.
#[allow(clippy::too_many_arguments)]
fn scan_blocks(
    bytes: &[u8],
    base: usize,
    mut at: usize,
    until: usize,
    file_len: usize,
    id: u64,
    keep: &mut dyn FnMut(&PageLoc) -> bool,
    out: &mut Vec<Scanned>,
) -> Result<usize> {
    let bad = |detail: String| Error::corrupt("page log segment", detail);
    let have = base + bytes.len();
    while at < have && at < until {
        let block_end = (at / ALIGN_BYTES + 1) * ALIGN_BYTES;
        if block_end > have {
            return Err(bad(format!("a scan stopped inside the block at {at}")));
        }
        let local = at - base;
        let body_len = if at + RECORD_HEADER_BYTES <= block_end {
            u32::from_le_bytes(bytes[local..local + 4].try_into().expect("4")) as usize
        } else {
            0 // too little room left in the block for a record: padding
        };
        if body_len == 0 {
            // Padding to the end of the block: zeros only (a flipped bit there is damage too).
            if bytes[local..block_end - base].iter().any(|&b| b != 0) {
                return Err(bad(format!("padding at {at} is not zero")));
            }
            at = block_end;
            continue;
        }
        if body_len > RECORD_BODY_MAX || at + RECORD_HEADER_BYTES + body_len > file_len {
            return Err(bad(format!("a record at {at} runs past the file")));
        }
        if at + RECORD_HEADER_BYTES + body_len > have {
            return Err(bad(format!("a scan stopped inside the record at {at}")));
        }
        let loc = PageLoc {
            segment: id,
            offset: u32::try_from(at).map_err(|_| bad("offset over 4 GiB".into()))?,
            len: body_len as u16,
        };
        let (key, page) = decode_record(&bytes[local..], &loc)?;
        if keep(&loc) {
            out.push((loc, key.to_vec(), page.to_vec()));
        }
        at += RECORD_HEADER_BYTES + body_len;
    }
    Ok(at)
}

/// The appends of one commit: records are placed in memory as they come (so each gets its
/// pointer at once, for the page above it) and written by [`Appender::finish`], one append
/// per stream it used.
pub(crate) struct Appender<'a> {
    log: &'a PageLog,
    state: std::sync::MutexGuard<'a, LogState>,
    /// Per stream: records not written yet, to go at the current segment's end.
    buffer: [Vec<u8>; 2],
    /// Per stream: the current segment, held while this appender places records in it.
    held: [Option<Arc<Segment>>; 2],
    /// Bytes appended to each segment by this appender (records and padding).
    written: Vec<(Arc<Segment>, u64)>,
}

impl Appender<'_> {
    /// A new segment of stream `s` with a fresh random id, its header written.
    fn start_segment(&mut self, s: usize) -> Result<()> {
        let fs = &self.log.fs;
        let (id, path) = loop {
            let id = random_id(&self.log.dir)?;
            let path = self.log.dir.join(segment_file_name(id));
            if !self.state.open.contains_key(&id) && !fs.exists(&path)? {
                break (id, path);
            }
        };
        let mut writer = fs.create(&path)?;
        let segment = Arc::new(Segment {
            id,
            file_id: id,
            path: path.clone(),
            file: fs.open(&path, self.log.read_options)?,
            removals: self.log.removals.clone(),
            keep_file: AtomicBool::new(false),
            len: AtomicU64::new(HEADER_BYTES),
            deep: s == Stream::Deep as usize,
        });
        writer.append(&encode_header(id))?; // on failure the segment is dropped unused
        self.state.open.retain(|_, s| s.strong_count() > 0);
        self.state.open.insert(id, Arc::downgrade(&segment));
        self.state.current[s] = Some(Current {
            segment: Arc::downgrade(&segment),
            id,
            writer,
            len: HEADER_BYTES,
        });
        self.held[s] = Some(segment);
        Ok(())
    }

    /// Writes the buffered records of stream `s` (padded to a whole block) to its current
    /// segment.
    fn flush(&mut self, s: usize) -> Result<()> {
        if self.buffer[s].is_empty() {
            return Ok(());
        }
        let buffer = &mut self.buffer[s];
        let current = self.state.current[s]
            .as_mut()
            .expect("records go to a current segment");
        let end = (current.len + buffer.len() as u64).div_ceil(HEADER_BYTES) * HEADER_BYTES;
        buffer.resize((end - current.len) as usize, 0);
        if let Err(e) = current.writer.append(buffer) {
            // The file may hold part of the buffer: no later record may be placed after it.
            self.state.current[s] = None;
            return Err(e);
        }
        current.len = end;
        let bytes = buffer.len() as u64;
        // Like a run writer's, the log's appends earn the session's file removals their budget:
        // segments let go of by reclamation are freed as fast as the log writes.
        self.log.removals.note_written(bytes);
        let segment = self.held[s]
            .clone()
            .expect("an appender holds the segment it writes to");
        segment.len.store(end, Ordering::Relaxed);
        match self.written.iter_mut().find(|(w, _)| w.id == current.id) {
            Some((_, n)) => *n += bytes,
            None => self.written.push((segment, bytes)),
        }
        buffer.clear();
        Ok(())
    }

    /// Places a record of `page` under `key` in `stream` and returns where it will be. Starts
    /// a new segment when the stream's current one is full (writing the records before it
    /// first).
    pub(crate) fn push(&mut self, stream: Stream, key: &[u8], page: &[u8]) -> Result<PageLoc> {
        let s = stream as usize;
        let record = (RECORD_HEADER_BYTES + 1 + key.len() + page.len()) as u64;
        if self.held[s].is_none() {
            // The first record of this appender in the stream: the current segment, if anyone
            // still has it.
            self.held[s] = self.state.current[s]
                .as_ref()
                .and_then(|c| c.segment.upgrade());
            if self.held[s].is_none() {
                self.state.current[s] = None;
            }
        }
        let next = self.state.current[s]
            .as_ref()
            .map(|c| c.len + self.buffer[s].len() as u64);
        match next {
            // A record larger than the target still gets a segment of its own.
            Some(n) if n == HEADER_BYTES || n + record + HEADER_BYTES <= SEGMENT_BYTES_TARGET => {}
            _ => {
                self.flush(s)?;
                self.start_segment(s)?;
            }
        }
        let current = self.state.current[s]
            .as_ref()
            .expect("a segment was started");
        place_record(current.id, current.len, &mut self.buffer[s], key, page)
    }

    /// Writes what was pushed and returns the segments written to, with the bytes each got
    /// (records and padding).
    pub(crate) fn finish(mut self) -> Result<Vec<(Arc<Segment>, u64)>> {
        for s in 0..2 {
            self.flush(s)?;
        }
        Ok(std::mem::take(&mut self.written))
    }
}

/// The segments one trie version reaches, each with the bytes of that version's records in
/// it: cheap to clone (shared until either side changes it), so a duplicate shares it in O(1).
#[derive(Clone, Debug, Default)]
pub(crate) struct Segments {
    map: imbl::OrdMap<u64, Reach>,
}

/// What one version has in one segment.
#[derive(Clone, Debug)]
struct Reach {
    segment: Arc<Segment>,
    /// Bytes of the version's records there.
    live: u64,
    /// For a deep segment: one bit per [`LIVE_GRANULE`] bytes, set where a record of the
    /// version starts (so that cleaning reads the parents of live records only). `None`
    /// where it is not known (a near segment, or one a snapshot restored).
    starts: Option<Arc<Vec<u64>>>,
}

impl Reach {
    /// The word and bit of the live map for the record at `loc`.
    fn bit(loc: &PageLoc) -> (usize, u64) {
        let granule = loc.offset as u64 / LIVE_GRANULE;
        ((granule / 64) as usize, 1 << (granule % 64))
    }
}

impl Segments {
    /// The segment `id`, if the version reaches it.
    pub(crate) fn get(&self, id: u64) -> Option<&Arc<Segment>> {
        self.map.get(&id).map(|r| &r.segment)
    }

    /// Counts the record at `loc`, just appended to `segment`, as the version's.
    pub(crate) fn add(&mut self, segment: &Arc<Segment>, loc: &PageLoc) {
        debug_assert_eq!(segment.id, loc.segment);
        debug_assert!(loc.record_bytes() >= LIVE_GRANULE || !segment.deep);
        let reach = self.map.entry(segment.id).or_insert_with(|| Reach {
            segment: segment.clone(),
            live: 0,
            starts: segment.deep.then(|| Arc::new(Vec::new())),
        });
        reach.live += loc.record_bytes();
        if let Some(starts) = &mut reach.starts {
            let (word, bit) = Reach::bit(loc);
            let starts = Arc::make_mut(starts);
            if starts.len() <= word {
                starts.resize(word + 1, 0);
            }
            starts[word] |= bit;
        }
    }

    /// Counts `bytes` of records in `segment` as the version's, without knowing where they
    /// are (a version restored from a snapshot's manifest).
    pub(crate) fn add_bytes(&mut self, segment: &Arc<Segment>, bytes: u64) {
        let reach = self.map.entry(segment.id).or_insert_with(|| Reach {
            segment: segment.clone(),
            live: 0,
            starts: None,
        });
        reach.live += bytes;
        reach.starts = None;
    }

    /// The record at `loc` is no longer the version's; a segment left with none is let go.
    pub(crate) fn release(&mut self, loc: &PageLoc) -> Result<()> {
        let bytes = loc.record_bytes();
        let Some(reach) = self.map.get_mut(&loc.segment) else {
            return Err(Error::corrupt(
                "page log accounting",
                format!("segment {:016x} is not the version's", loc.segment),
            ));
        };
        reach.live = reach.live.saturating_sub(bytes);
        if reach.live == 0 {
            self.map.remove(&loc.segment);
        } else if let Some(starts) = &mut reach.starts {
            let (word, bit) = Reach::bit(loc);
            if let Some(w) = Arc::make_mut(starts).get_mut(word) {
                *w &= !bit;
            }
        }
        Ok(())
    }

    /// Whether the record at `loc` may be one of the version's: false only where the version
    /// knows it has no record starting there (a deep segment's live map). A hint for
    /// cleaning, which still checks each record against its parent's pointer.
    pub(crate) fn maybe_live(&self, loc: &PageLoc) -> bool {
        let Some(reach) = self.map.get(&loc.segment) else {
            return false;
        };
        match &reach.starts {
            Some(starts) => {
                let (word, bit) = Reach::bit(loc);
                starts.get(word).is_some_and(|w| w & bit != 0)
            }
            None => true,
        }
    }

    /// Each segment with the version's bytes in it, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<Segment>, u64)> {
        self.map.values().map(|r| (&r.segment, r.live))
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The version's bytes in segment `id` (zero where it has none).
    pub(crate) fn live_in(&self, id: u64) -> u64 {
        self.map.get(&id).map_or(0, |r| r.live)
    }

    /// Lets go of segment `id` whatever the version's bytes there (a snapshot's own segment,
    /// once its pages are in memory).
    pub(crate) fn forget(&mut self, id: u64) {
        self.map.remove(&id);
    }

    /// Bytes of the files of the version's segments (its records, padding, and records of
    /// other or older versions).
    pub(crate) fn file_bytes(&self) -> u64 {
        self.iter().map(|(s, _)| s.file_bytes()).sum()
    }

    /// The version's bytes in all its segments.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.iter().map(|(_, live)| live).sum()
    }

    /// Bytes of the files of the version's segments of one kind (deep or near), and the
    /// version's bytes in them.
    pub(crate) fn usage(&self, deep: bool) -> (u64, u64) {
        self.iter()
            .filter(|(s, _)| s.deep == deep)
            .fold((0, 0), |(f, l), (s, live)| (f + s.file_bytes(), l + live))
    }

    /// The segment of one kind (deep or near) where the version has the fewest bytes, other
    /// than those in `except` (the ones being written): the cheapest to empty.
    pub(crate) fn emptiest(&self, deep: bool, except: &[u64]) -> Option<Arc<Segment>> {
        self.iter()
            .filter(|(s, _)| s.deep == deep && !except.contains(&s.id))
            .min_by_key(|(s, live)| (*live, s.id))
            .map(|(s, _)| s.clone())
    }
}

/// The first bytes of a snapshot's trie manifest.
const MANIFEST_MAGIC: [u8; 8] = *b"CAIRNTRM";
/// The manifest format version.
const MANIFEST_FORMAT: u32 = 1;
/// Most segments a manifest may list (a trie of 2^32 pages in 64 MiB segments needs far
/// fewer).
pub(crate) const MANIFEST_SEGMENTS_MAX: u32 = 1 << 24;
/// The name of the manifest file in a snapshot's `trie/` directory.
pub(crate) const MANIFEST_NAME: &str = "manifest";

/// What a snapshot records of a trie version's pages: the pointer to its top page and each
/// segment it reaches with its bytes there (`docs/format/trie.md`, "Trie manifest").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) top: Option<PageLoc>,
    /// Each segment, by increasing id.
    pub(crate) segments: Vec<ManifestSegment>,
}

/// A segment as a manifest lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ManifestSegment {
    /// The id pointers name it by.
    pub(crate) id: u64,
    /// The id of its file (`<file_id>.pages` beside the manifest).
    pub(crate) file_id: u64,
    /// The version's bytes of records in it.
    pub(crate) bytes: u64,
}

impl Manifest {
    /// Magic, version, top pointer (flag byte, then 14 bytes if set), segment count, each
    /// segment's id, file id and bytes, CRC32C of all that; little-endian.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_FORMAT.to_le_bytes());
        match &self.top {
            Some(loc) => {
                out.push(1);
                loc.encode_into(&mut out);
            }
            None => out.push(0),
        }
        out.extend_from_slice(&(self.segments.len() as u32).to_le_bytes());
        for s in &self.segments {
            out.extend_from_slice(&s.id.to_le_bytes());
            out.extend_from_slice(&s.file_id.to_le_bytes());
            out.extend_from_slice(&s.bytes.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes [`Manifest::encode`]'s bytes (total: any bytes give a manifest or an error).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Manifest> {
        let bad = |detail: &str| Error::corrupt("trie manifest", detail.to_string());
        if bytes.len() < 8 + 4 + 1 + 4 + 4 {
            return Err(bad("too short"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4")) {
            return Err(bad("checksum mismatch"));
        }
        if body[0..8] != MANIFEST_MAGIC {
            return Err(bad("not a trie manifest"));
        }
        if u32::from_le_bytes(body[8..12].try_into().expect("4")) != MANIFEST_FORMAT {
            return Err(bad("unknown manifest format version"));
        }
        let mut at = 13;
        let top = match body[12] {
            0 => None,
            1 => {
                let loc = body
                    .get(at..at + LOC_BYTES)
                    .ok_or_else(|| bad("truncated"))?;
                at += LOC_BYTES;
                Some(PageLoc::decode(loc)?)
            }
            _ => return Err(bad("bad top flag")),
        };
        let count = body
            .get(at..at + 4)
            .ok_or_else(|| bad("truncated"))
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")))?;
        at += 4;
        if count > MANIFEST_SEGMENTS_MAX || body.len() - at != count as usize * 24 {
            return Err(bad("segment list of the wrong length"));
        }
        let mut segments: Vec<ManifestSegment> = Vec::with_capacity(count as usize);
        for chunk in body[at..].chunks_exact(24) {
            let s = ManifestSegment {
                id: u64::from_le_bytes(chunk[0..8].try_into().expect("8")),
                file_id: u64::from_le_bytes(chunk[8..16].try_into().expect("8")),
                bytes: u64::from_le_bytes(chunk[16..24].try_into().expect("8")),
            };
            if s.id == 0
                || s.file_id == 0
                || s.bytes == 0
                || segments.last().is_some_and(|last| last.id >= s.id)
            {
                return Err(bad("segments not in increasing order of id, or empty"));
            }
            segments.push(s);
        }
        if top.is_some_and(|t| segments.binary_search_by_key(&t.segment, |s| s.id).is_err()) {
            return Err(bad("the top page is in no listed segment"));
        }
        Ok(Manifest { top, segments })
    }
}

/// What a snapshot saves of a trie version besides its root: the segments of the page log it
/// reaches (linked into the snapshot), its own segment of retained pages (written there), and
/// the manifest naming them all.
pub(crate) struct TrieFiles {
    pub(crate) segments: Vec<Arc<Segment>>,
    /// The snapshot's own segment: its id and file bytes (`None` for an empty trie).
    pub(crate) own: Option<(u64, Vec<u8>)>,
    pub(crate) manifest: Manifest,
}

/// The bytes a record at `loc` counts for in [`Segments`].
pub(crate) fn record_bytes(loc: &PageLoc) -> u64 {
    loc.record_bytes()
}

/// The bytes reading the record at `loc` asks of its file: the whole blocks that hold it.
pub(crate) fn read_bytes(loc: &PageLoc) -> u64 {
    loc.span().1 as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::sim::MemFs;
    use crate::io::IoBackendKind;

    fn log() -> (Arc<MemFs>, PageLog) {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/a")).unwrap();
        let log = PageLog::new(
            fs.clone(),
            PathBuf::from("/a"),
            Arc::new(DeferredRemovals::default()),
        );
        (fs, log)
    }

    fn page(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    }

    #[test]
    fn manifests_roundtrip_are_pinned_and_refuse_junk() {
        let manifest = Manifest {
            top: Some(PageLoc {
                segment: 0x0123_4567_89ab_cdef,
                offset: 4096,
                len: 1234,
            }),
            segments: vec![
                ManifestSegment {
                    id: 0x0123_4567_89ab_cdef,
                    file_id: 0x0123_4567_89ab_cdef,
                    bytes: 5000,
                },
                ManifestSegment {
                    id: 0xfedc_ba98_7654_3210,
                    file_id: 42,
                    bytes: 1 << 40,
                },
            ],
        };
        let bytes = manifest.encode();
        crate::golden::check_golden("trie-manifest-v1.bin", &bytes);
        assert_eq!(Manifest::decode(&bytes).unwrap(), manifest);
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[i / 8] ^= 1 << (i % 8);
            assert!(Manifest::decode(&flipped).is_err(), "bit {i}");
        }
    }

    #[test]
    fn records_read_back_through_their_pointers() {
        let (_, log) = log();
        let io = BlockIo::new(IoBackendKind::Pread).unwrap();
        let mut segments = Segments::default();
        let mut want = Vec::new();
        for round in 0..3 {
            let mut a = log.appender();
            let mut locs = Vec::new();
            for i in 0..200 {
                let len = [10, 500, 4000, 5000, 9000][(i + round) % 5];
                let key = vec![(i % 7) as u8; 1 + i % 9];
                let stream = Stream::ALL[i % 2];
                let loc = a.push(stream, &key, &page(i + round, len)).unwrap();
                locs.push((loc, key, page(i + round, len)));
            }
            let written = a.finish().unwrap();
            for (loc, _, _) in &locs {
                let (segment, _) = written.iter().find(|(s, _)| s.id() == loc.segment).unwrap();
                segments.add_bytes(segment, record_bytes(loc));
            }
            want.extend(locs);
        }
        let locs: Vec<PageLoc> = want.iter().map(|w| w.0).collect();
        let got = PageLog::read(&io, &segments, &locs).unwrap();
        for ((_, key, bytes), (k, b)) in want.iter().zip(&got) {
            assert_eq!((key, bytes), (k, b));
        }
        // Each record spans the fewest blocks its length allows (one if it fits a block), and
        // large ones do not all start at a boundary (their padding would be wasted).
        for loc in &locs {
            let (start, len) = loc.span();
            let fewest = loc.record_bytes().div_ceil(HEADER_BYTES) as usize;
            assert_eq!(len, fewest * ALIGN_BYTES, "{loc:?} from {start}");
        }
        assert!(locs
            .iter()
            .any(|l| l.record_bytes() > HEADER_BYTES
                && !(l.offset as u64).is_multiple_of(HEADER_BYTES)));
        // A scan finds every record, in order.
        let mut scanned = Vec::new();
        let mut ids: Vec<u64> = locs.iter().map(|l| l.segment).collect();
        ids.sort();
        ids.dedup();
        for id in &ids {
            scanned.extend(PageLog::scan(segments.get(*id).unwrap()).unwrap());
        }
        let mut records: Vec<Scanned> = want.to_vec();
        let by_place = |r: &Scanned| (r.0.segment, r.0.offset);
        records.sort_by_key(by_place);
        scanned.sort_by_key(by_place);
        assert_eq!(scanned, records);
        // Scans of pieces of a segment, each from where the last stopped, find the same
        // records (those the filter keeps), through one buffer reused from piece to piece.
        let mut buf = AlignedBuf::zeroed(7);
        let keep = |l: &PageLoc| (l.offset / 8) % 3 != 1;
        for (i, id) in ids.iter().enumerate() {
            let segment = segments.get(*id).unwrap();
            let mut whole = PageLog::scan(segment).unwrap();
            whole.retain(|r| keep(&r.0));
            let mut pieces = Vec::new();
            let mut from = HEADER_BYTES;
            let step = [1u64, 4096, 5000, 20000][i % 4];
            while from < segment.file_bytes() {
                let (got, next) =
                    PageLog::scan_range(segment, from, from + step, &mut buf, &mut |l| keep(l))
                        .unwrap();
                assert!(next > from, "{from} -> {next}");
                pieces.extend(got);
                from = next;
            }
            assert_eq!(pieces, whole);
        }
    }

    /// A read of more records than one batch holds goes in batches of at most
    /// `READ_BATCH_BYTES` through one pooled arena: every record visited once, in order, with
    /// its index, and the arena left in the pool is no larger than a batch. A record too
    /// corrupt to decode stops the read with its error, and the batch still goes back to the
    /// pool.
    #[test]
    fn reads_larger_than_a_batch_go_in_pooled_batches() {
        let (fs, log) = log();
        let io = BlockIo::new(IoBackendKind::Pread).unwrap();
        let mut segments = Segments::default();
        let mut want = Vec::new();
        let mut a = log.appender();
        let mut spans = 0;
        let mut i = 0;
        while spans < 3 * READ_BATCH_BYTES {
            let len = [100, 4000, 4100, 9000, 60000][i % 5];
            let loc = a
                .push(Stream::ALL[i % 2], &[i as u8], &page(i, len))
                .unwrap();
            spans += loc.span().1;
            want.push((loc, page(i, len)));
            i += 1;
        }
        let written = a.finish().unwrap();
        for (loc, _) in &want {
            let (segment, _) = written.iter().find(|(s, _)| s.id() == loc.segment).unwrap();
            segments.add_bytes(segment, record_bytes(loc));
        }
        let locs: Vec<PageLoc> = want.iter().map(|w| w.0).collect();
        let mut seen = 0;
        PageLog::read_each(&io, &segments, &locs, &mut |j, key, page| {
            assert_eq!(j, seen);
            assert_eq!((key, page), (&[j as u8][..], &want[j].1[..]));
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, locs.len());
        let pooled = io.take_batch();
        assert!(pooled.arena_bytes() > 0 && pooled.arena_bytes() <= READ_BATCH_BYTES);
        io.recycle_batch(pooled);
        // A damaged record in the third batch: the records before it are visited, then the
        // read fails, and no record after it is.
        let victim = locs
            .iter()
            .scan(0, |total, l| {
                *total += l.span().1;
                Some(*total)
            })
            .position(|total| total > 2 * READ_BATCH_BYTES + (READ_BATCH_BYTES / 2))
            .unwrap();
        let loc = locs[victim];
        let path = segments.get(loc.segment).unwrap().file.path().to_path_buf();
        let mut bytes = fs.file_bytes(&path).unwrap();
        bytes[loc.offset as usize + RECORD_HEADER_BYTES] ^= 0x40;
        assert!(fs.set_file_bytes(&path, bytes));
        let mut visited = 0;
        let result = PageLog::read_each(&io, &segments, &locs, &mut |_, _, _| {
            visited += 1;
            Ok(())
        });
        assert!(result.is_err());
        assert_eq!(visited, victim, "the records before it, and none after");
        let pooled = io.take_batch();
        assert!(pooled.arena_bytes() > 0, "the batch went back to the pool");
    }

    /// Records a little larger than a block, placed across block boundaries, can go a whole
    /// segment without ending on one. A scan of a piece stops where the record it is in ends,
    /// not at the next boundary, which a 64 MiB segment of such records puts megabytes on:
    /// a scan that went there ran out of what it had read and reported the segment corrupt.
    #[test]
    fn pieces_of_a_segment_of_records_across_boundaries_scan_alike() {
        let id = 0x0123_4567_89ab_cdef;
        let mut bytes = encode_header(id);
        let mut locs = Vec::new();
        // Records of 4,100 bytes and now and then a small one: each large one ends 4 bytes
        // further into its last block than it started, so that hundreds in a row end on no
        // block boundary (none of these 1,500 does).
        for i in 0..1500 {
            let len = if i % 97 == 5 {
                300
            } else {
                4100 - RECORD_HEADER_BYTES - 2
            };
            let mut buffer = Vec::new();
            let base = bytes.len() as u64;
            locs.push(place_record(id, base, &mut buffer, &[i as u8], &page(i, len)).unwrap());
            bytes.extend(buffer);
        }
        bytes.resize(bytes.len().div_ceil(ALIGN_BYTES) * ALIGN_BYTES, 0);
        let longest_unaligned_run = locs
            .iter()
            .map(|l| (l.offset as u64 + l.record_bytes()).is_multiple_of(HEADER_BYTES))
            .fold((0u64, 0u64), |(run, max), aligned| {
                let run = if aligned { 0 } else { run + 1 };
                (run, max.max(run))
            })
            .1;
        assert!(
            longest_unaligned_run * 4100 > 1 << 20,
            "{longest_unaligned_run}"
        );
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/a")).unwrap();
        let path = Path::new("/a/segment");
        let mut writer = fs.create(path).unwrap();
        writer.append(&bytes).unwrap();
        drop(writer);
        let file = fs.open(path, ReadOptions::default()).unwrap();
        let whole = scan_file(&*file, id).unwrap();
        assert_eq!(
            whole.iter().map(|r| r.0).collect::<Vec<_>>(),
            locs,
            "a whole scan finds every record"
        );
        let mut buf = AlignedBuf::zeroed(0);
        for step in [1u64, 4096, 70_000] {
            let (mut from, mut pieces) = (HEADER_BYTES, Vec::new());
            while from < bytes.len() as u64 {
                let (got, next) =
                    scan_range(&*file, id, from, from + step, &mut buf, &mut |_| true).unwrap();
                assert!(
                    next > from && next <= from + step + 4100 + 4096,
                    "{from} -> {next}"
                );
                pieces.extend(got);
                from = next;
            }
            assert_eq!(pieces, whole, "pieces of {step} bytes");
        }
        // A scan from inside a record finds damage, not records.
        assert!(scan_range(
            &*file,
            id,
            HEADER_BYTES + 100,
            HEADER_BYTES + 200,
            &mut buf,
            &mut |_| true
        )
        .is_err());
    }
}
