//! Cursors and range lookups: stable, sorted views of a table.
//!
//! Owns: [`Cursor`], [`CursorEntry`], and [`MergedEntries`], the resolved stream of a frozen
//! table view: the write buffer, every run and (through [`EntryStream`]) a pending union, read
//! together with [`crate::kmerge::KMerge`] newest first and resolved exactly as a lookup resolves
//! them (deletes hide older entries, upserts combine).
//!
//! May call: `kmerge`, `sorted` (sequential cursors over runs), `write_buffer`, `entry`, `page`, `lookup`
//! (blob references), `session_core` (to keep the session alive and be closed with it). Must never
//! touch: the table's live state, or the union level (a pending union is just another
//! [`EntryStream`], supplied by the caller).
//!
//! A cursor is a *stable view*: it holds an O(1) clone of the persistent write buffer and `Arc`s
//! of the runs it reads, which are immutable, so later updates of the table (and the merges they
//! trigger) are invisible through it.
//!
//! Costs: opening a cursor does one index search per run (plus one span read per run); each entry
//! returned costs a comparison per source (write buffer + runs) and sequential 64 KiB reads.
//! Memory: one 64 KiB chunk per run plus [`BUFFER_CHUNK`] write-buffer entries, whatever the size
//! of the write buffer or of the range.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::kmerge::{Head, KMerge, MergeSource};
use crate::lookup::{BlobRef, BlobSource};
use crate::page::Op;
use crate::session_core::{Member, SessionCore};
use crate::sorted::{SortedCursor, SortedRun};
use crate::write_buffer::{MemBlob, WriteBuffer};

/// Write-buffer entries a stream copies out of the (shared, persistent) buffer at a time.
pub(crate) const BUFFER_CHUNK: usize = 64;

/// A range of keys, for [`crate::Table::range`]: any of Rust's range forms (`a..b`, `a..=b`,
/// `a..`, `..b`, `..=b`, `..`) or a pair of [`Bound`]s, with keys of any type that is
/// `AsRef<[u8]>` (`&[u8]`, `Vec<u8>`, `&str`, `[u8; N]`, ...).
pub trait KeyRange {
    /// The lower bound.
    fn start_key(&self) -> Bound<&[u8]>;
    /// The upper bound.
    fn end_key(&self) -> Bound<&[u8]>;
}

/// Implements [`KeyRange`] for a range type through its `RangeBounds` implementation.
macro_rules! key_range {
    ($($range:ty),*) => {$(
        impl<K: AsRef<[u8]>> KeyRange for $range {
            fn start_key(&self) -> Bound<&[u8]> {
                std::ops::RangeBounds::start_bound(self).map(|k| k.as_ref())
            }
            fn end_key(&self) -> Bound<&[u8]> {
                std::ops::RangeBounds::end_bound(self).map(|k| k.as_ref())
            }
        }
    )*};
}

key_range!(
    std::ops::Range<K>,
    std::ops::RangeInclusive<K>,
    std::ops::RangeFrom<K>,
    std::ops::RangeTo<K>,
    std::ops::RangeToInclusive<K>,
    (Bound<K>, Bound<K>)
);

impl KeyRange for std::ops::RangeFull {
    fn start_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_key(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
}

/// One entry read through a cursor or a range lookup.
#[derive(Clone, Debug)]
pub struct CursorEntry {
    /// The key.
    pub key: Vec<u8>,
    /// The key's value.
    pub value: Vec<u8>,
    /// The key's blob, if it has one (valid until the table's next update, like a lookup's).
    pub blob: Option<BlobRef>,
}

/// One resolved entry of a merged stream, before it is handed to a user.
#[derive(Clone, Debug)]
pub(crate) struct RawEntry {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) blob: Option<BlobSource>,
}

/// A stream of resolved entries (inserts only: deletes are gone, upserts are settled) in key
/// order: a table view's [`MergedEntries`], or a pending union's stream.
pub(crate) trait EntryStream: std::fmt::Debug + Send {
    /// The next entry, or `None` at the end.
    fn next_raw(&mut self) -> Result<Option<RawEntry>>;
}

/// An [`EntryStream`] with its next entry read ahead, so that it can be merged.
#[derive(Debug)]
pub(crate) struct Peeked<I> {
    stream: I,
    head: Option<RawEntry>,
}

impl<I: EntryStream> Peeked<I> {
    /// Reads the stream's first entry.
    pub(crate) fn new(mut stream: I) -> Result<Peeked<I>> {
        let head = stream.next_raw()?;
        Ok(Peeked { stream, head })
    }
}

impl<I: EntryStream> MergeSource for Peeked<I> {
    type Blob = BlobSource;

    fn head(&self) -> Result<Option<Head<'_, BlobSource>>> {
        Ok(self.head.as_ref().map(|e| Head {
            key: &e.key,
            op: Op::Insert,
            value: &e.value,
            blob: e.blob.clone(),
        }))
    }

    fn advance(&mut self) -> Result<()> {
        if self.head.is_some() {
            self.head = self.stream.next_raw()?;
        }
        Ok(())
    }
}

/// The write buffer as a merge source: an O(1) clone of the persistent map, read
/// [`BUFFER_CHUNK`] entries at a time (O(log B) per chunk), so no stream copies the buffer.
#[derive(Debug)]
pub(crate) struct BufferSource {
    buffer: WriteBuffer,
    chunk: VecDeque<(Vec<u8>, Entry<MemBlob>)>,
    /// Where the next chunk starts.
    next: Bound<Vec<u8>>,
    exhausted: bool,
}

impl BufferSource {
    /// The buffer's entries from the first key `>= from` (or the first key).
    pub(crate) fn new(buffer: WriteBuffer, from: Option<&[u8]>) -> BufferSource {
        let mut source = BufferSource {
            buffer,
            chunk: VecDeque::new(),
            next: match from {
                Some(key) => Bound::Included(key.to_vec()),
                None => Bound::Unbounded,
            },
            exhausted: false,
        };
        source.refill();
        source
    }

    fn refill(&mut self) {
        if !self.chunk.is_empty() || self.exhausted {
            return;
        }
        self.chunk.extend(
            self.buffer
                .chunk(self.next.as_ref().map(Vec::as_slice), BUFFER_CHUNK),
        );
        match self.chunk.back() {
            Some((key, _)) if self.chunk.len() == BUFFER_CHUNK => {
                self.next = Bound::Excluded(key.clone());
            }
            _ => {
                self.exhausted = true;
                // Nothing more will be read: let go of the buffer's nodes.
                self.buffer = WriteBuffer::default();
            }
        }
    }
}

impl MergeSource for BufferSource {
    type Blob = BlobSource;

    fn head(&self) -> Result<Option<Head<'_, BlobSource>>> {
        Ok(self.chunk.front().map(|(key, entry)| Head {
            key,
            op: entry.op(),
            value: entry.value(),
            blob: match entry {
                Entry::Insert(_, Some(blob)) => Some(BlobSource::Memory(blob.clone())),
                _ => None,
            },
        }))
    }

    fn advance(&mut self) -> Result<()> {
        self.chunk.pop_front();
        self.refill();
        Ok(())
    }
}

/// A source of a table view's stream, newest first: the write buffer, one run, or a pending
/// union (oldest).
#[derive(Debug)]
enum Source {
    Buffer(BufferSource),
    Run(SortedCursor),
    Nested(Peeked<Box<dyn EntryStream>>),
}

impl EntryStream for Box<dyn EntryStream> {
    fn next_raw(&mut self) -> Result<Option<RawEntry>> {
        (**self).next_raw()
    }
}

impl MergeSource for Source {
    type Blob = BlobSource;

    fn head(&self) -> Result<Option<Head<'_, BlobSource>>> {
        match self {
            Source::Buffer(buffer) => buffer.head(),
            Source::Run(cursor) => Ok(cursor.peek()?.map(|e| Head {
                key: e.key,
                op: e.op,
                value: e.value,
                blob: match (e.blob, cursor.current_part()) {
                    (Some(span), Some(part)) => Some(BlobSource::File(part.blobs().clone(), span)),
                    _ => None,
                },
            })),
            Source::Nested(stream) => stream.head(),
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Buffer(buffer) => buffer.advance(),
            Source::Run(cursor) => cursor.advance(),
            Source::Nested(stream) => stream.advance(),
        }
    }
}

/// The merged, resolved stream of a frozen table view in key order.
#[derive(Debug)]
pub(crate) struct MergedEntries {
    merge: KMerge<Source>,
    resolve: Resolve,
}

impl MergedEntries {
    /// A stream starting at the first key `>= from` (or the first key at all) over, newest
    /// first, `buffer`, `runs` and `older` (a pending union's stream, already positioned at
    /// `from`).
    pub(crate) fn new(
        buffer: WriteBuffer,
        runs: &[Arc<SortedRun>],
        older: Option<Box<dyn EntryStream>>,
        from: Option<&[u8]>,
        resolve: Resolve,
    ) -> Result<MergedEntries> {
        let mut sources = Vec::with_capacity(runs.len() + 2);
        sources.push(Source::Buffer(BufferSource::new(buffer, from)));
        for run in runs {
            let cursor = match from {
                Some(key) => SortedCursor::seek(run.clone(), key)?,
                None => SortedCursor::new(run.clone())?,
            };
            sources.push(Source::Run(cursor));
        }
        if let Some(stream) = older {
            sources.push(Source::Nested(Peeked::new(stream)?));
        }
        Ok(MergedEntries {
            merge: KMerge::new(sources)?,
            resolve,
        })
    }
}

impl EntryStream for MergedEntries {
    fn next_raw(&mut self) -> Result<Option<RawEntry>> {
        loop {
            let Some((key, combined, _)) = self.merge.next_combined(&self.resolve)? else {
                return Ok(None);
            };
            // Deleted keys are skipped.
            if let Some(Entry::Insert(value, blob)) = combined.into_last_level() {
                return Ok(Some(RawEntry {
                    key: key.to_vec(),
                    value,
                    blob,
                }));
            }
        }
    }
}

/// What a cursor keeps of its view to read it again from another key ([`Cursor::seek`]): the
/// view's write-buffer clone and runs, and a way to stream them.
pub(crate) trait Restart: std::fmt::Debug + Send {
    /// The view's merged stream from the first key `>= from` (or the first key at all).
    fn stream_from(&self, from: Option<&[u8]>) -> Result<MergedEntries>;
    /// A key `< upper` (`None`: no bound) such that some source of the view has an entry in
    /// `[key, upper)`; `None` when no source has a key below `upper`.
    fn key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>>;
}

/// A merged stream whose entries are handed to users, with blob references stamped with the
/// table's id and epoch, within bounds.
#[derive(Debug)]
pub(crate) struct StampedEntries {
    entries: MergedEntries,
    table_id: u64,
    epoch: u64,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    restart: Box<dyn Restart>,
    /// Where the front stands: keys it has passed (`Excluded(k)`: up to `k`, read; `Included(k)`:
    /// below `k`, sought past) are not the backward read's to return.
    front: Bound<Vec<u8>>,
    /// The backward read: see [`StampedEntries::next_back_entry`].
    back: Back,
}

/// Where a backward read stands: the entries of the window it read last, not yet handed out
/// (in key order: handed out from the end), the exclusive upper bound of the next window, and
/// the smallest key handed out (a forward read stops before it).
#[derive(Debug, Default)]
struct Back {
    window: Vec<CursorEntry>,
    /// `None` before the first backward read (the end bound then applies).
    upper: Option<Vec<u8>>,
    /// The smallest key handed out backwards.
    first: Option<Vec<u8>>,
    /// No key is left below `upper` (within the bounds).
    done: bool,
}

impl StampedEntries {
    pub(crate) fn new(
        entries: MergedEntries,
        table_id: u64,
        epoch: u64,
        (start, end): (Bound<Vec<u8>>, Bound<Vec<u8>>),
        restart: Box<dyn Restart>,
    ) -> StampedEntries {
        StampedEntries {
            entries,
            table_id,
            epoch,
            start,
            end,
            restart,
            front: Bound::Unbounded,
            back: Back::default(),
        }
    }

    /// Starts reading the view again at the first key `>= key` within the bounds.
    fn seek(&mut self, key: &[u8]) -> Result<()> {
        let from = match &self.start {
            Bound::Included(s) | Bound::Excluded(s) if s.as_slice() > key => s.clone(),
            _ => key.to_vec(),
        };
        self.entries = self.restart.stream_from(Some(&from))?;
        self.front = Bound::Included(from);
        Ok(())
    }

    /// Whether `key` is below the lower bound (an excluded start key, after a seek to it).
    fn before_start(&self, key: &[u8]) -> bool {
        matches!(&self.start, Bound::Excluded(s) if s.as_slice() == key)
    }

    /// The next entry for a user, or `None` past the end bound.
    fn next_entry(&mut self) -> Result<Option<CursorEntry>> {
        let Some(mut e) = self.entries.next_raw()? else {
            return Ok(None);
        };
        if self.before_start(&e.key) {
            let Some(next) = self.entries.next_raw()? else {
                return Ok(None);
            };
            e = next;
        }
        let within = match &self.end {
            Bound::Included(end) => e.key <= *end,
            Bound::Excluded(end) => e.key < *end,
            Bound::Unbounded => true,
        };
        // The two ends meet: what the backward read handed out is not read again.
        if !within || self.back.first.as_ref().is_some_and(|b| e.key >= *b) {
            return Ok(None);
        }
        self.front = Bound::Excluded(e.key.clone());
        Ok(Some(self.stamp(e)))
    }

    /// A user's entry: blob references stamped with the table's id and epoch.
    fn stamp(&self, e: RawEntry) -> CursorEntry {
        CursorEntry {
            key: e.key,
            value: e.value,
            blob: e.blob.map(|source| BlobRef {
                source,
                table_id: self.table_id,
                epoch: self.epoch,
            }),
        }
    }

    /// The previous entry from the back, or `None` once the backward read meets the start
    /// bound or what the forward read handed out.
    ///
    /// Reads backwards a window at a time: the view names a key `s` below the window's upper
    /// bound such that some source has an entry in `[s, upper)` ([`Restart::key_before`]: the
    /// first key of the span holding each run's greatest key below `upper`, the write buffer's
    /// greatest key below it), the merged stream from `s` is read up to `upper`, and its
    /// entries are handed out from the last. Then `upper` becomes `s`. A window is about one
    /// span of one source, so a backward read costs about one seek (one span read per run) per
    /// span of entries, where a forward read costs one sequential read per 16 pages: backwards
    /// is for the last few entries of a range, not for scanning a whole table.
    fn next_back_entry(&mut self) -> Result<Option<CursorEntry>> {
        // Whether the front has passed `key`: the two ends met. Nothing is consumed then, so
        // that a seek of the front backwards lets both go on.
        let met = |front: &Bound<Vec<u8>>, key: &[u8]| match front {
            Bound::Excluded(f) => key <= f.as_slice(),
            Bound::Included(f) => key < f.as_slice(),
            Bound::Unbounded => false,
        };
        loop {
            if let Some(e) = self.back.window.last() {
                if met(&self.front, &e.key) {
                    return Ok(None);
                }
                let e = self.back.window.pop();
                if let Some(e) = &e {
                    self.back.first = Some(e.key.clone());
                }
                return Ok(e);
            }
            if self.back.done {
                return Ok(None);
            }
            if let Some(upper) = &self.back.upper {
                // Every key of the next window is below `upper`.
                let passed = match &self.front {
                    Bound::Excluded(f) | Bound::Included(f) => upper <= f,
                    Bound::Unbounded => false,
                };
                if passed {
                    return Ok(None);
                }
            }
            // The window's upper bound, exclusive: an included end bound `k` is `k` + 0x00,
            // the first key after it.
            let upper = match (&self.back.upper, &self.end) {
                (Some(u), _) => Some(u.clone()),
                (None, Bound::Included(k)) => Some([k.as_slice(), &[0]].concat()),
                (None, Bound::Excluded(k)) => Some(k.clone()),
                (None, Bound::Unbounded) => None,
            };
            let Some(mut from) = self.restart.key_before(upper.as_deref())? else {
                self.back.done = true;
                return Ok(None);
            };
            // Not below the start bound: the window that reaches it is the last.
            if let Bound::Included(s) | Bound::Excluded(s) = &self.start {
                if from <= *s {
                    from = s.clone();
                    self.back.done = true;
                }
            }
            let mut stream = self.restart.stream_from(Some(&from))?;
            while let Some(e) = stream.next_raw()? {
                if upper.as_ref().is_some_and(|u| e.key >= *u) {
                    break;
                }
                if self.before_start(&e.key) {
                    continue;
                }
                let e = self.stamp(e);
                self.back.window.push(e);
            }
            self.back.upper = Some(from);
        }
    }
}

/// A stable, sorted view of a table (or of a range of it) as it was when the cursor was opened.
///
/// A cursor is an [`Iterator`] of `Result<CursorEntry>`: collect it, loop over it, or use any
/// iterator adaptor (`cursor.by_ref().take(100)`, `take_while`, ...); [`Cursor::peek`] looks at
/// the next entry without consuming it. It is also a [`DoubleEndedIterator`]: `rev()` reads from
/// the end of the table or range, and reads from both ends meet without repeating an entry
/// (backwards costs more: about a [`Cursor::seek`] per span of entries, see `next_back`). Once the cursor or its session is closed, its next read
/// returns [`Error::CursorClosed`] (even at the end, or with an entry peeked at). After an error
/// the cursor is finished: it returns the error once, then `None`.
///
/// A cursor keeps its session open (and the runs it reads alive) until it is dropped; dropping
/// the table it came from does not affect it. It is `Send + Sync`.
#[derive(Debug)]
pub struct Cursor {
    inner: Arc<CursorInner>,
    /// Keeps the session (its directory lock and its I/O engine) alive while the cursor is.
    _session: Arc<SessionCore>,
    /// An entry read ahead by [`Cursor::peek`].
    peeked: Option<CursorEntry>,
    /// Set by an error: the cursor is finished.
    failed: bool,
}

/// A cursor's state, shared with its session so that closing the session closes it.
#[derive(Debug)]
pub(crate) struct CursorInner {
    state: Mutex<Option<StampedEntries>>,
}

impl CursorInner {
    /// Whether the cursor (or its session) was closed.
    fn is_closed(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Releases the cursor's runs; later reads fail with [`Error::CursorClosed`].
    pub(crate) fn close(&self) {
        // A poisoned lock only means a resolve function panicked while this cursor read: the
        // state is dropped either way.
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Member for CursorInner {
    fn close(&self) {
        CursorInner::close(self);
    }
    fn is_open(&self) -> bool {
        !self.is_closed()
    }
}

impl Cursor {
    pub(crate) fn new(entries: StampedEntries, session: Arc<SessionCore>) -> Cursor {
        Cursor {
            inner: Arc::new(CursorInner {
                state: Mutex::new(Some(entries)),
            }),
            _session: session,
            peeked: None,
            failed: false,
        }
    }

    /// The cursor's state, as its session registers it (to close it with the session).
    pub(crate) fn member(&self) -> std::sync::Weak<dyn Member> {
        let weak: std::sync::Weak<CursorInner> = Arc::downgrade(&self.inner);
        weak
    }

    /// Runs `f` on the cursor's open stream, or reports why there is none: closed (also after
    /// a panic), or broken by a resolve function that panicked while this cursor was reading
    /// (its sources may have advanced past entries it never returned).
    fn with_stream<T>(&self, f: impl FnOnce(&mut StampedEntries) -> Result<T>) -> Result<T> {
        match self.inner.state.lock() {
            Err(poisoned) if poisoned.get_ref().is_none() => Err(Error::CursorClosed),
            Err(_) => Err(Error::TableBroken(
                "a panic interrupted a read through this cursor".into(),
            )),
            Ok(mut state) => match state.as_mut() {
                None => Err(Error::CursorClosed),
                Some(entries) => f(entries),
            },
        }
    }

    /// Reads the next entry (the peeked one first) from the shared state, which tells whether
    /// the cursor was closed; an error finishes the cursor.
    fn read_next(&mut self) -> Result<Option<CursorEntry>> {
        if self.failed {
            return Ok(None);
        }
        let peeked = self.peeked.take();
        let result = self.with_stream(|entries| match peeked {
            Some(entry) => Ok(Some(entry)),
            None => entries.next_entry(),
        });
        if result.is_err() {
            self.failed = true;
            self.peeked = None;
        }
        result
    }

    /// The next entry without consuming it: `Ok(None)` at the end.
    ///
    /// Errors: [`Error::CursorClosed`], [`Error::TableBroken`] (a resolve function panicked
    /// during an earlier read), [`Error::Io`]. After an error the cursor is finished.
    pub fn peek(&mut self) -> Result<Option<&CursorEntry>> {
        if self.peeked.is_some() && !self.failed && self.inner.is_closed() {
            // An entry peeked at before the close is not handed out after it.
            self.failed = true;
            self.peeked = None;
            return Err(Error::CursorClosed);
        }
        if self.peeked.is_none() {
            self.peeked = self.read_next()?;
        }
        Ok(self.peeked.as_ref())
    }

    /// Moves the cursor to the first entry whose key is `>= key` (and within the cursor's
    /// range; a key before the range moves it to the range's start), forwards or backwards:
    /// the next read returns that entry. The cursor keeps its view: what it reads is still the
    /// table as it was when the cursor was opened.
    ///
    /// Cost: as opening the cursor (one index search and one span read per run, whatever the
    /// distance moved).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::CursorClosed`], [`Error::TableBroken`],
    /// [`Error::Io`]. After an error the cursor is finished.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        if key.len() > crate::page::KEY_SIZE_MAX {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: crate::page::KEY_SIZE_MAX,
            });
        }
        self.peeked = None;
        let result = self.with_stream(|entries| entries.seek(key));
        self.failed = result.is_err();
        result
    }

    /// Closes the cursor and releases the runs it holds. Idempotent; later reads return
    /// [`Error::CursorClosed`] once.
    pub fn close(&self) {
        self.inner.close();
    }
}

impl DoubleEndedIterator for Cursor {
    /// The previous entry from the end of the table or range; `None` once it meets the start
    /// or the entries already read from the front (each entry is returned once, from one end
    /// or the other), and after an error. [`Cursor::seek`] moves the front only.
    ///
    /// Cost: reading backwards goes a window of about one span at a time, each window costing
    /// about what [`Cursor::seek`] costs (one span read per run); see the cursor's docs.
    fn next_back(&mut self) -> Option<Result<CursorEntry>> {
        if self.failed {
            return None;
        }
        // An entry peeked at from the front is the front's: it was read from the front, so
        // the backward read stops above it.
        let result = self.with_stream(StampedEntries::next_back_entry);
        if result.is_err() {
            self.failed = true;
            self.peeked = None;
        }
        result.transpose()
    }
}

impl Iterator for Cursor {
    type Item = Result<CursorEntry>;

    /// The next entry; `None` at the end of the table or range, and after an error.
    fn next(&mut self) -> Option<Result<CursorEntry>> {
        self.read_next().transpose()
    }
}
