//! Sequential reads of a run ([`RunCursor`]), for merges and cursors: a chunk of pages at a
//! time, read ahead, every page checked against its checksum before it is decoded.
//!
//! Part of the `run` module (its header says what the module may call).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{ReadOptions, ReadableFile};
use crate::index::IndexType;
use crate::page::{self, BlobSpan, EntryRef, Op, PageView, PAGE_BYTES};

use super::{run_file_path, Run, RunFile};

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
        crate::observe::bytes_read(bytes as u64);
        if let Err(e) = self.run.check_pages(first, &self.chunk) {
            self.chunk.clear(); // nothing of it may be read
            return Err(e);
        }
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
}
