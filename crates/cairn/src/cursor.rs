//! Cursors and range lookups: stable, sorted views of a table.
//!
//! Owns: [`Cursor`], [`CursorEntry`] and the k-way merge that reads the write buffer and every run
//! of a table together, newest first, resolving each key exactly as a lookup does (through
//! [`crate::entry::Entry::combine_older`]; deletes hide older entries, upserts combine).
//!
//! May call: `run` (sequential cursors over runs), `entry`, `lookup` (blob references). Must never
//! touch: the table's live state. A cursor is a *stable view*: it owns a copy of the write buffer's
//! entries from its start key on (at most `write_buffer_entries`) and `Arc`s of the runs it reads,
//! which are immutable, so later updates of the table (and merges they trigger) are invisible.
//!
//! Costs: opening a cursor does one index search per run (plus one span read per run); each entry
//! returned costs a comparison per source (write buffer + runs) and sequential 64 KiB reads.
//! Memory: one 64 KiB chunk per run plus the write-buffer copy.

use std::sync::{Arc, Mutex};

use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::lookup::{BlobRef, BlobSource};
use crate::page::Op;
use crate::run::{Run, RunCursor};
use crate::union::{UnionContents, UnionLevel, UnionStream};
use crate::write_buffer::MemBlob;

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

/// A source of the merge: the write-buffer copy, one run, or a pending union (oldest).
#[derive(Debug)]
enum Source {
    Buffer {
        entries: Vec<(Vec<u8>, Entry<MemBlob>)>,
        next: usize,
    },
    Run(RunCursor),
    Union {
        stream: Box<UnionStream>,
        head: Option<RawEntry>,
    },
}

/// The head of a source, borrowed.
struct Head<'a> {
    key: &'a [u8],
    op: Op,
    value: &'a [u8],
    blob: Option<BlobSource>,
}

impl Source {
    fn head(&self) -> Result<Option<Head<'_>>> {
        match self {
            Source::Buffer { entries, next } => Ok(entries.get(*next).map(|(key, entry)| Head {
                key,
                op: entry.op(),
                value: entry.value(),
                blob: match entry {
                    Entry::Insert(_, Some(blob)) => Some(BlobSource::Memory(blob.clone())),
                    _ => None,
                },
            })),
            Source::Run(cursor) => Ok(cursor.peek()?.map(|e| Head {
                key: e.key,
                op: e.op,
                value: e.value,
                blob: e
                    .blob
                    .map(|span| BlobSource::File(cursor.run().blobs().clone(), span)),
            })),
            Source::Union { head, .. } => Ok(head.as_ref().map(|e| Head {
                key: &e.key,
                op: Op::Insert,
                value: &e.value,
                blob: e.blob.clone(),
            })),
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Buffer { next, .. } => {
                *next += 1;
                Ok(())
            }
            Source::Run(cursor) => cursor.advance(),
            Source::Union { stream, head } => {
                *head = stream.next()?;
                Ok(())
            }
        }
    }
}

/// The merged, resolved stream of a table's entries in key order.
#[derive(Debug)]
pub(crate) struct MergedEntries {
    /// Newest first: the write buffer, the runs, then the union level.
    sources: Vec<Source>,
    resolve: Resolve,
    key: Vec<u8>,
}

impl MergedEntries {
    /// A stream starting at the first key `>= from` (or the first key at all).
    pub(crate) fn new(
        buffer: Vec<(Vec<u8>, Entry<MemBlob>)>,
        runs: &[Arc<Run>],
        union: Option<&Arc<UnionLevel>>,
        from: Option<&[u8]>,
        resolve: Resolve,
    ) -> Result<MergedEntries> {
        let mut sources = Vec::with_capacity(runs.len() + 2);
        sources.push(Source::Buffer {
            entries: buffer,
            next: 0,
        });
        let seek = |run: &Arc<Run>| match from {
            Some(key) => RunCursor::seek(run.clone(), key),
            None => RunCursor::new(run.clone()),
        };
        for run in runs {
            sources.push(Source::Run(seek(run)?));
        }
        match union.map(|u| u.contents()) {
            Some(UnionContents::Pending(views)) => {
                let mut stream = Box::new(UnionStream::new(&views, from, &resolve)?);
                let head = stream.next()?;
                sources.push(Source::Union { stream, head });
            }
            Some(UnionContents::Done(Some(run))) => sources.push(Source::Run(seek(&run)?)),
            Some(UnionContents::Done(None)) | None => {}
        }
        Ok(MergedEntries {
            sources,
            resolve,
            key: Vec::new(),
        })
    }

    /// The next live entry, or `None` at the end.
    pub(crate) fn next_raw(&mut self) -> Result<Option<RawEntry>> {
        loop {
            let Some(first) = self.min_source()? else {
                return Ok(None);
            };
            let mut combined: Option<Entry<BlobSource>> = None;
            self.key.clear();
            for i in first..self.sources.len() {
                let Some(head) = self.sources[i].head()? else {
                    continue;
                };
                if i == first {
                    self.key.extend_from_slice(head.key);
                } else if head.key != self.key.as_slice() {
                    continue;
                }
                combined = Some(match combined {
                    None => match head.op {
                        Op::Insert => Entry::Insert(head.value.to_vec(), head.blob),
                        Op::Upsert => Entry::Upsert(head.value.to_vec()),
                        Op::Delete => Entry::Delete,
                    },
                    Some(newer) => newer.combine_older(head.op, head.value, &self.resolve),
                });
                self.sources[i].advance()?;
            }
            match combined.and_then(Entry::into_last_level) {
                Some(Entry::Insert(value, blob)) => {
                    return Ok(Some(RawEntry {
                        key: self.key.clone(),
                        value,
                        blob,
                    }))
                }
                // Deleted: move on to the next key.
                _ => continue,
            }
        }
    }

    /// The newest source holding the smallest current key.
    fn min_source(&self) -> Result<Option<usize>> {
        let mut min: Option<(usize, &[u8])> = None;
        for (i, source) in self.sources.iter().enumerate() {
            if let Some(head) = source.head()? {
                if min.is_none_or(|(_, key)| head.key < key) {
                    min = Some((i, head.key));
                }
            }
        }
        Ok(min.map(|(i, _)| i))
    }
}

/// A merged stream whose entries are handed to users, with blob references stamped with the
/// table's id and epoch.
#[derive(Debug)]
pub(crate) struct StampedEntries {
    entries: MergedEntries,
    table_id: u64,
    epoch: u64,
}

impl StampedEntries {
    pub(crate) fn new(entries: MergedEntries, table_id: u64, epoch: u64) -> StampedEntries {
        StampedEntries {
            entries,
            table_id,
            epoch,
        }
    }

    /// The next entry for a user.
    pub(crate) fn next_entry(&mut self) -> Result<Option<CursorEntry>> {
        Ok(self.entries.next_raw()?.map(|e| CursorEntry {
            key: e.key,
            value: e.value,
            blob: e.blob.map(|source| BlobRef {
                source,
                table_id: self.table_id,
                epoch: self.epoch,
            }),
        }))
    }
}

/// A stable, sorted view of a table as it was when the cursor was opened.
///
/// Reads through one cursor are serialised (it is `Send + Sync`; share it with an `Arc`).
/// Closing the cursor, or the session, makes later reads fail with [`Error::CursorClosed`].
#[derive(Debug)]
pub struct Cursor {
    inner: Arc<CursorInner>,
}

/// A cursor's state, shared with its session so that closing the session closes it.
#[derive(Debug)]
pub(crate) struct CursorInner {
    state: Mutex<Option<StampedEntries>>,
}

impl CursorInner {
    /// Releases the cursor's runs; later reads fail with [`Error::CursorClosed`].
    pub(crate) fn close(&self) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

impl Cursor {
    pub(crate) fn new(entries: StampedEntries) -> Cursor {
        Cursor {
            inner: Arc::new(CursorInner {
                state: Mutex::new(Some(entries)),
            }),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<CursorInner> {
        &self.inner
    }

    fn with<T>(&self, f: impl FnOnce(&mut StampedEntries) -> Result<T>) -> Result<T> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.as_mut() {
            Some(entries) => f(entries),
            None => Err(Error::CursorClosed),
        }
    }

    /// The next entry, or `None` at the end of the table.
    ///
    /// Errors: [`Error::CursorClosed`], [`Error::Io`].
    pub fn next(&self) -> Result<Option<CursorEntry>> {
        self.with(|e| e.next_entry())
    }

    /// Up to `n` next entries (fewer only at the end of the table).
    ///
    /// Errors: [`Error::CursorClosed`], [`Error::Io`].
    pub fn take(&self, n: usize) -> Result<Vec<CursorEntry>> {
        self.with(|e| {
            let mut out = Vec::with_capacity(n.min(4096));
            while out.len() < n {
                match e.next_entry()? {
                    Some(entry) => out.push(entry),
                    None => break,
                }
            }
            Ok(out)
        })
    }

    /// Entries while `keep(key)` holds; the first entry that fails it is consumed and dropped.
    ///
    /// Errors: [`Error::CursorClosed`], [`Error::Io`].
    pub fn take_while(&self, mut keep: impl FnMut(&[u8]) -> bool) -> Result<Vec<CursorEntry>> {
        self.with(|e| {
            let mut out = Vec::new();
            while let Some(entry) = e.next_entry()? {
                if !keep(&entry.key) {
                    break;
                }
                out.push(entry);
            }
            Ok(out)
        })
    }

    /// Closes the cursor and releases the runs it holds. Idempotent.
    pub fn close(&self) {
        self.inner.close();
    }
}
