//! Flushes: a full write buffer written out as a level-1 run, a chunk at a time.
//!
//! Owns: [`SharedFlush`] (a frozen write buffer, the writer of its run and the progress made),
//! shared by the table that froze the buffer, its duplicates and, in a session with background
//! merges, the background thread. The updates that follow the freeze pay for the flush a few
//! entries each and write what the background has not written yet (`table`); the background
//! writes ahead of them. Whoever writes the last entry finishes the run; each table handle adds
//! it to its own level 1 when its own credits have paid for the whole buffer.
//!
//! May call: `write_buffer` (the frozen entries), `sorted` (writing the run in parts). Must
//! never touch: the levels, credits, tables.
//!
//! Waiting: as for merges, a foreground user announces itself before it waits for the lock,
//! the background never takes the lock while one waits and holds it for one chunk
//! ([`BACKGROUND_CHUNK_ENTRIES`] entries or [`BACKGROUND_CHUNK_BYTES`] bytes, whichever comes
//! first), which bounds the wait.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::sorted::{PartWriter, SortedRun};
use crate::write_buffer::WriteBuffer;

/// Entries the background thread writes under one acquisition of a flush's lock.
pub(crate) const BACKGROUND_CHUNK_ENTRIES: usize = 256;

/// Key and value bytes after which the background thread ends a chunk early (large values).
pub(crate) const BACKGROUND_CHUNK_BYTES: usize = 1 << 20;

/// A frozen write buffer on its way to level 1 (see the module documentation).
#[derive(Debug)]
pub(crate) struct SharedFlush {
    job: Mutex<FlushJob>,
    /// Entries of the buffer.
    len: usize,
    /// Entries written so far, as last published (a lower bound, readable without the lock).
    written: AtomicUsize,
    /// Foreground threads waiting for (or about to wait for) `job`.
    waiting: AtomicU32,
}

#[derive(Debug)]
struct FlushJob {
    /// The frozen entries; dropped once written (the table keeps its own O(1) clone for
    /// lookups until it adds the run to level 1).
    buffer: Option<WriteBuffer>,
    /// The run being written; `None` once finished.
    writer: Option<PartWriter>,
    /// The last key written, `None` before the first.
    written_up_to: Option<Vec<u8>>,
    written: usize,
    /// The run, once every entry is written (`None` inside for an empty buffer).
    output: Option<Option<Arc<SortedRun>>>,
    /// Set when a write failed, with the cause: the flush refuses further work.
    failed: Option<String>,
}

impl SharedFlush {
    /// A flush of `buffer` into the run `writer` writes (no I/O yet).
    pub(crate) fn new(buffer: WriteBuffer, writer: PartWriter) -> SharedFlush {
        SharedFlush {
            len: buffer.len(),
            job: Mutex::new(FlushJob {
                buffer: Some(buffer),
                writer: Some(writer),
                written_up_to: None,
                written: 0,
                output: None,
                failed: None,
            }),
            written: AtomicUsize::new(0),
            waiting: AtomicU32::new(0),
        }
    }

    /// Entries of the frozen buffer.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entries written so far, as last published: never more than the truth.
    pub(crate) fn written(&self) -> usize {
        self.written.load(Ordering::Acquire)
    }

    /// Whether entries remain to be written.
    pub(crate) fn needs_work(&self) -> bool {
        self.written() < self.len
    }

    /// Writes entries until at least `target` of them are written (the foreground: an update
    /// paying for its share, or a settle with `target = len`); at `len` the run is finished.
    /// Returns the run once finished. Waits at most one background chunk for the lock.
    ///
    /// Errors: the write's own (the flush then refuses further work, and every handle sharing
    /// it gets [`Error::TableBroken`] with the cause), or [`Error::TableBroken`] for a flush
    /// that failed earlier or whose lock a panic poisoned.
    pub(crate) fn write_up_to(&self, target: usize) -> Result<Option<Option<Arc<SortedRun>>>> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let locked = self.job.lock();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        let mut job = locked.map_err(|_| {
            Error::TableBroken("a panic interrupted a flush shared with this table".into())
        })?;
        if let Some(cause) = &job.failed {
            return Err(Error::TableBroken(format!(
                "a flush shared with this table failed earlier: {cause}"
            )));
        }
        let target = target.min(self.len);
        if job.written < target {
            let entries = target - job.written;
            self.write(&mut job, entries, usize::MAX)?;
        }
        Ok(job.output.clone())
    }

    /// The background thread's chunk: `None` when a foreground user holds or waits for the
    /// lock (or the flush needs no work); otherwise the entries written.
    pub(crate) fn background_chunk(&self) -> Option<usize> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        let mut job = self.job.try_lock().ok()?;
        if job.failed.is_some() || job.written >= self.len {
            return None;
        }
        let before = job.written;
        // A failure is kept (with its cause) and reported to the next update that needs it.
        let _ = self.write(&mut job, BACKGROUND_CHUNK_ENTRIES, BACKGROUND_CHUNK_BYTES);
        Some(job.written - before)
    }

    /// Writes up to `entries` more entries (stopping after `bytes` of keys and values), and
    /// finishes the run after the last one.
    fn write(
        &self,
        job: &mut MutexGuard<'_, FlushJob>,
        entries: usize,
        bytes: usize,
    ) -> Result<()> {
        if let Some(cause) = &job.failed {
            return Err(Error::TableBroken(format!(
                "a flush shared with this table failed earlier: {cause}"
            )));
        }
        let result = Self::write_unchecked(job, entries, bytes);
        match &result {
            Ok(()) => self.written.store(job.written, Ordering::Release),
            Err(e) => job.failed = Some(e.with_causes()),
        }
        result
    }

    fn write_unchecked(job: &mut FlushJob, entries: usize, bytes: usize) -> Result<()> {
        let FlushJob {
            buffer,
            writer,
            written_up_to,
            written,
            output,
            ..
        } = job;
        let (Some(frozen), Some(out)) = (buffer.as_ref(), writer.as_mut()) else {
            return Ok(());
        };
        let from = match written_up_to {
            Some(key) => std::ops::Bound::Excluded(key.as_slice()),
            None => std::ops::Bound::Unbounded,
        };
        let (mut count, mut size) = (0, 0);
        let mut last = None;
        for entry in frozen.iter_from(from) {
            if count >= entries || size >= bytes {
                break;
            }
            let blob = entry.blob().map(|blob| &blob[..]);
            out.push(entry.key(), entry.op(), entry.value(), blob)?;
            last = Some(entry.key());
            count += 1;
            size += entry.key().len() + entry.value().len();
        }
        *written += count;
        if let Some(key) = last {
            *written_up_to = Some(key.to_vec());
        }
        if *written >= frozen.len() {
            if let Some(out) = writer.take() {
                *output = Some(out.finish()?);
            }
            *buffer = None;
            *written_up_to = None;
        }
        Ok(())
    }
}
