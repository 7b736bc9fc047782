//! Deferred removals: [`DeferredRemovals`], the session's queue of released files, removed in
//! bounded steps or kept in a pool of recycled files for new ones to be written over.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use super::FileSystem;
use crate::error::{Error, Result};

/// Files whose last user let go, waiting to be removed; one queue per session.
///
/// A run is released in `Drop`, which cannot report an error, so it only queues its files here.
/// The session's operations remove them in bounded steps ([`DeferredRemovals::remove_step`]) at
/// their start, and if a removal fails that operation fails before doing anything else (so it
/// can simply be retried): no error is swallowed, and the failed file stays queued. Reads
/// (lookups, cursors) take a step only when no other operation has for
/// [`DeferredRemovals::READS_PER_STEP`] reads ([`DeferredRemovals::remove_step_for_read`]): while
/// updates go on they pay for the removals their merges caused, and a lookup never waits for a
/// `truncate` (measured at 100M entries, lookups that took steps were most of the pipelined
/// run's slow batches: `docs/benchmarks/notes/2026-11-26-read-ahead.md`); in a phase of reads only the
/// reads still empty the queue. Files still
/// queued when the session closes are removed then ([`DeferredRemovals::remove_all`]), or, if
/// that fails, when the directory is next opened (opening empties `active/`).
///
/// **Why in steps.** Freeing a file's blocks is not free: a file system mounted with online
/// discard (ext4 `-o discard`, common on SSDs and virtual disks) sends the freed ranges to the
/// device as TRIM, and reads queued behind it wait. Measured at 10M entries (serial UTxO run),
/// removing a merge's inputs at once made the next batch's lookups take 12 to 22 ms instead of 3
/// (`docs/benchmarks/notes/2026-11-25-tail-latency.md`). So a step frees at most
/// [`DeferredRemovals::STEP_BYTES`] plus twice the bytes the session's writers appended since the
/// previous step (the credit keeps the backlog from growing while a bulk load writes much more
/// than a step per operation), cutting a large file from its end (`truncate`) and removing it
/// once it fits. A file that another name still links to (a snapshot's hard link) frees nothing
/// when removed, so it costs only its removal; it is never cut.
///
/// Cost per operation: an atomic load when the queue is empty, plus an atomic increment for a
/// read that leaves the step to others; otherwise one `stat` and one `remove_file` or
/// `truncate` per file it reaches, freeing at most the step's budget, and one `stat` and one
/// `rename` per file it keeps for reuse (pooling frees nothing, so it is not counted against
/// the budget: a step pools every recyclable file it reaches while the pool has room, at most
/// the four files of each run released since the last step). The backlog is bounded:
/// each step frees at least `STEP_BYTES` while any file waits, and at least twice what was
/// written since the last one; every operation but a read takes a step, and reads do once 32
/// of them pass without one.
///
/// **Recycling.** Better still is not to free the blocks at all. Files queued with
/// [`DeferredRemovals::defer_recyclable`] (run files that only this session ever opened: never
/// linked into a snapshot, never handed out) are renamed `<n>.free` and kept in a pool of at
/// most `recycle_bytes` bytes ([`crate::SessionOptions::recycle_bytes`]) and
/// [`DeferredRemovals::POOL_FILES_MAX`] files instead of being removed; to make room for a new
/// one, the oldest pooled files are removed (sizes no writer took lately). A writer of a new run
/// file takes the largest pooled file no larger than its size hint
/// ([`DeferredRemovals::take_recycled`]), renames it and writes over its blocks
/// ([`FileSystem::reuse`]), growing it as it needs. In a table of steady size, the runs a
/// level frees and the runs it later writes have about the same sizes, so most of the space is
/// written over and never trimmed. Pooled files are removed by [`DeferredRemovals::remove_all`]
/// (when the session's last open table closes, or the session does; after a crash, opening
/// empties `active/`); files larger than the whole pool, and pooled files evicted to make room,
/// are removed in the steps above.
#[derive(Debug, Default)]
pub(crate) struct DeferredRemovals {
    pending: AtomicBool,
    /// Bytes appended by the session's writers since the last step (see
    /// [`FileWriter::credit`](super::FileWriter::credit)).
    written: AtomicU64,
    /// Reads that came since the last step an operation other than a read took.
    reads_since_step: AtomicU32,
    queue: Mutex<Queue>,
    /// The most bytes of files kept for reuse; 0 recycles nothing.
    recycle_bytes: u64,
    /// The only directory whose files are pooled (the session's `active/`): a file queued
    /// from elsewhere (an unfinished run in a snapshot being written, whose directory is
    /// removed as a whole) is removed, never pooled.
    recycle_dir: PathBuf,
    /// Key/ops bytes and entries of the runs written so far, each older run weighing less
    /// ([`DeferredRemovals::note_run`]), for the size hints of new ones.
    run_bytes: AtomicU64,
    run_entries: AtomicU64,
    /// Files pooled so far: the next pooled file's name.
    pooled: AtomicU64,
    /// Steps are put off ([`DeferredRemovals::pause`]).
    paused: AtomicBool,
}

/// The extension of a file kept for reuse (`<n>.free`, beside the file it was).
pub(crate) const RECYCLED_EXTENSION: &str = "free";

/// What waits in [`DeferredRemovals`]: files to remove and files kept for reuse.
#[derive(Debug, Default)]
struct Queue {
    /// Files to remove (or to pool, when marked recyclable), removed newest first.
    paths: Vec<(PathBuf, bool)>,
    /// Files kept for reuse, with their sizes, oldest first; at most
    /// [`DeferredRemovals::POOL_FILES_MAX`].
    pool: Vec<(PathBuf, u64)>,
    /// The sum of the pooled sizes.
    pool_bytes: u64,
}

impl DeferredRemovals {
    /// Reads in a row, with no other operation's step among them, after which reads take steps
    /// too.
    pub(crate) const READS_PER_STEP: u32 = 32;

    /// The most files kept for reuse. A writer's pick and an eviction pass over the pool, so
    /// this bounds their cost; a table's released runs of useful sizes number far fewer (at
    /// 100M entries the pool held tens of files).
    pub(crate) const POOL_FILES_MAX: usize = 256;

    /// Bytes a removal step frees besides its credit (4 MiB: at 16 MiB per operation the
    /// measured lookup stall was back; see the type's doc).
    pub(crate) const STEP_BYTES: u64 = 4 << 20;

    /// A step does not cut a file by less than this; it leaves it to the next step instead.
    const CUT_MIN_BYTES: u64 = 64 << 10;

    /// A queue that keeps up to `recycle_bytes` bytes of recyclable files in directory `dir`
    /// for reuse (see the type's doc); [`DeferredRemovals::default`] recycles nothing.
    pub(crate) fn with_recycling(recycle_bytes: u64, dir: PathBuf) -> DeferredRemovals {
        DeferredRemovals {
            recycle_bytes,
            recycle_dir: dir,
            ..DeferredRemovals::default()
        }
    }

    /// Queues files for removal (no I/O).
    pub(crate) fn defer(&self, paths: impl IntoIterator<Item = PathBuf>) {
        self.enqueue(paths.into_iter().map(|path| (path, false)));
    }

    /// Queues files for removal that may be kept for reuse instead (no I/O). Only for files no
    /// one else can have open or linked: a reused file is written over in place.
    pub(crate) fn defer_recyclable(&self, paths: impl IntoIterator<Item = PathBuf>) {
        let recycle = self.recycle_bytes > 0;
        self.enqueue(paths.into_iter().map(|path| (path, recycle)));
    }

    fn enqueue(&self, paths: impl Iterator<Item = (PathBuf, bool)>) {
        let mut queue = self.lock();
        if queue.paths.is_empty() {
            // Writes made while nothing waited earn no credit for later removals.
            self.written.store(0, Ordering::Relaxed);
        }
        queue.paths.extend(paths);
        self.pending
            .store(!queue.paths.is_empty(), Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the pooled file best suited to a new file of about `hint` bytes, if any (no I/O):
    /// the largest no larger than `hint` (the writer grows it as it needs), never a larger one.
    /// A file larger than what is written into it is cut at the end, and the cut frees, and on
    /// a file system with online discard trims, the rest while the writer waits and reads queue
    /// behind the trim: measured at 100M entries, key/ops files cut by 2.4 to 9.8 MB held a
    /// merge's last chunk for 6 ms and stalled the lookups beside it as long
    /// (`docs/benchmarks/notes/2026-11-27-complete-merges.md`). Growing a file
    /// frees nothing. Cost: one pass over the pool.
    pub(crate) fn take_recycled(&self, hint: u64) -> Option<PathBuf> {
        let mut queue = self.lock();
        let best = (queue.pool.iter().enumerate())
            .filter(|(_, (_, len))| *len <= hint)
            .max_by_key(|(_, (_, len))| *len)
            .map(|(i, _)| i)?;
        // `remove`, not `swap_remove`: the pool stays oldest first, for eviction.
        let (path, len) = queue.pool.remove(best);
        queue.pool_bytes -= len;
        Some(path)
    }

    /// Bytes kept for reuse.
    #[cfg(test)]
    pub(crate) fn recycled_bytes(&self) -> u64 {
        self.lock().pool_bytes
    }

    /// Records a finished run's key/ops bytes and entries, for [`DeferredRemovals::keyops_hint`]:
    /// each sum loses an eighth of what it held, then gains the run's, so the hint follows the
    /// runs written lately (a table loaded with inserts and then updated with deletes too
    /// writes smaller entries than its load did).
    pub(crate) fn note_run(&self, keyops_bytes: u64, entries: u64) {
        let decay = |add: u64| move |sum: u64| Some((sum - sum / 8).saturating_add(add));
        // Two separate updates: a hint read between them is off by one run, which is harmless.
        let _ = (self.run_bytes).fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            decay(keyops_bytes),
        );
        let _ =
            (self.run_entries).fetch_update(Ordering::Relaxed, Ordering::Relaxed, decay(entries));
    }

    /// The key/ops bytes a run of `entries` entries will hold at least, as far as one can
    /// tell: the bytes per entry of the runs written lately ([`DeferredRemovals::note_run`];
    /// 0 before the first), less 1/16 for the error of that estimate, in whole pages of
    /// `page_bytes` rounded down (a key/ops file is made of pages). Low rather than high: a
    /// pooled file no larger than this is grown, never cut ([`DeferredRemovals::take_recycled`]).
    pub(crate) fn keyops_hint(&self, entries: u64, page_bytes: u64) -> u64 {
        let bytes = self.run_bytes.load(Ordering::Relaxed);
        let counted = self.run_entries.load(Ordering::Relaxed);
        if counted == 0 || entries == 0 || page_bytes == 0 {
            return 0;
        }
        let expected = (bytes as u128 * entries as u128 / counted as u128).min(u64::MAX as u128);
        let low = expected - expected / 16;
        (low / page_bytes as u128 * page_bytes as u128) as u64
    }

    /// Counts `bytes` appended by one of the session's writers towards the next step's budget.
    pub(crate) fn note_written(&self, bytes: u64) {
        if self.pending.load(Ordering::Relaxed) {
            self.written.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Whether files wait for removal.
    #[cfg(test)]
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Puts off every step until [`DeferredRemovals::resume`] (a session's open, which replays
    /// its log through operations that would each take one: freeing an earlier session's
    /// leftovers there made the open wait for the file system, 1.6 s of a 3.9 s open measured at
    /// 100M entries after a kill). [`DeferredRemovals::remove_all`] still removes everything.
    pub(crate) fn pause(&self) {
        self.paused.store(true, Ordering::Release);
    }

    /// Ends [`DeferredRemovals::pause`]. What was written meanwhile earns no credit: the steps
    /// after it free [`DeferredRemovals::STEP_BYTES`] plus twice what is written from now on,
    /// not the whole replay's worth at once.
    pub(crate) fn resume(&self) {
        self.written.store(0, Ordering::Relaxed);
        self.paused.store(false, Ordering::Release);
    }

    /// One bounded step (see the type's doc): removes queued files, newest first, and cuts the
    /// end off the one that does not fit in the budget. A file already gone counts as removed;
    /// any other failure is returned, and that file and the ones not yet reached stay queued.
    pub(crate) fn remove_step(&self, fs: &dyn FileSystem) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) || self.paused.load(Ordering::Acquire) {
            return Ok(());
        }
        self.reads_since_step.store(0, Ordering::Relaxed);
        self.step(fs)
    }

    /// A read's step: nothing until [`DeferredRemovals::READS_PER_STEP`] reads have come since
    /// another operation's step, then the same step as [`DeferredRemovals::remove_step`].
    pub(crate) fn remove_step_for_read(&self, fs: &dyn FileSystem) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) || self.paused.load(Ordering::Acquire) {
            return Ok(());
        }
        let reads = self
            .reads_since_step
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(1))
            })
            .unwrap_or(u32::MAX);
        if reads < Self::READS_PER_STEP {
            return Ok(());
        }
        self.step(fs)
    }

    fn step(&self, fs: &dyn FileSystem) -> Result<()> {
        let credit = self.written.swap(0, Ordering::Relaxed);
        self.remove_within(
            fs,
            Self::STEP_BYTES.saturating_add(credit.saturating_mul(2)),
            true,
        )
    }

    /// Removes every queued file whatever its size (closing). Errors as for
    /// [`DeferredRemovals::remove_step`].
    /// The files kept for reuse are removed too.
    pub(crate) fn remove_all(&self, fs: &dyn FileSystem) -> Result<()> {
        {
            let mut queue = self.lock();
            let pooled: Vec<PathBuf> = queue.pool.drain(..).map(|(path, _)| path).collect();
            queue.pool_bytes = 0;
            if !pooled.is_empty() {
                queue
                    .paths
                    .extend(pooled.into_iter().map(|path| (path, false)));
                self.pending.store(true, Ordering::Release);
            }
        }
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        self.remove_within(fs, u64::MAX, false)
    }

    /// Removes queued files until `budget` bytes are freed; `pool`: recyclable files go to the
    /// pool while it has room (they free nothing).
    fn remove_within(&self, fs: &dyn FileSystem, mut budget: u64, pool: bool) -> Result<()> {
        let not_found = |e: &Error| matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
        let mut queue = self.lock();
        let queue = &mut *queue;
        while let Some((path, recyclable)) = queue.paths.last().cloned() {
            let path = &path;
            let space = match fs.file_space(path) {
                Ok(space) => Some(space),
                Err(e) if not_found(&e) => None,
                Err(e) => return Err(e),
            };
            if let Some(space) = space {
                let frees = space.links <= 1;
                if pool
                    && recyclable
                    && path.parent() == Some(self.recycle_dir.as_path())
                    && frees
                    && space.len > 0
                    && space.len <= self.recycle_bytes
                {
                    // Room first: the oldest pooled files go back to the queue, to be removed
                    // after the rest. A file no writer took for that long is one whose size
                    // the runs written lately do not need; kept, it would hold the pool's room
                    // for ever (a writer never takes a file larger than its hint).
                    while queue.pool.len() >= Self::POOL_FILES_MAX
                        || queue.pool_bytes + space.len > self.recycle_bytes
                    {
                        let (old, len) = queue.pool.remove(0);
                        queue.pool_bytes -= len;
                        queue.paths.insert(0, (old, false));
                    }
                    // Kept for a new run to write over: nothing freed, nothing trimmed. Renamed,
                    // so that no one mistakes it for the run file it was.
                    let seq = self.pooled.fetch_add(1, Ordering::Relaxed);
                    let pooled = path.with_file_name(format!("{seq}.{RECYCLED_EXTENSION}"));
                    fs.rename(path, &pooled)?;
                    queue.pool_bytes += space.len;
                    queue.pool.push((pooled, space.len));
                    queue.paths.pop();
                    continue;
                }
                if frees && space.len > budget {
                    if budget >= Self::CUT_MIN_BYTES {
                        fs.truncate(path, space.len - budget)?;
                    }
                    return Ok(());
                }
                match fs.remove_file(path) {
                    Ok(()) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(e),
                }
                if frees {
                    budget -= space.len;
                }
            }
            queue.paths.pop();
        }
        self.pending.store(false, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileWriter, MemFs};
    use std::path::Path;
    use std::sync::Arc;

    /// A file of `len` bytes at `path` on `fs`.
    fn file_of(fs: &dyn FileSystem, path: &Path, len: usize) {
        let mut w = FileWriter::create(fs, path).unwrap();
        w.write(&vec![1u8; len]).unwrap();
        w.finish(false).unwrap();
    }

    /// A step frees at most its budget: a large file is cut from its end over several steps and
    /// removed once it fits; small files go whole; a file with another name goes at once (its
    /// removal frees nothing) and is never cut.
    #[test]
    fn removal_steps_free_a_bounded_amount() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES as usize;
        let big = dir.join("big");
        file_of(&fs, &big, 2 * step + step / 2);
        let small = dir.join("small");
        file_of(&fs, &small, step / 4);
        let shared = dir.join("shared");
        file_of(&fs, &shared, 3 * step);
        fs.hard_link(&shared, &dir.join("link")).unwrap();
        let removals = DeferredRemovals::default();
        // Removed newest first: shared, small, then big.
        removals.defer([big.clone(), small.clone(), shared.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(!fs.exists(&shared).unwrap() && !fs.exists(&small).unwrap());
        assert_eq!(
            fs.file_space(&dir.join("link")).unwrap().len,
            3 * step as u64,
            "the other name keeps every byte"
        );
        // The rest of the budget (three quarters of a step) came off the big file.
        assert_eq!(
            fs.file_space(&big).unwrap().len,
            (2 * step + step / 2 - 3 * step / 4) as u64
        );
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, (step - step / 4) as u64);
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert!(!fs.exists(&big).unwrap());
        assert!(!removals.is_pending());
        assert_eq!(fs.list_dir(dir).unwrap(), vec!["link".to_string()]);
    }

    /// Bytes written while files wait raise the next step's budget (twice the bytes); bytes
    /// written while nothing waited do not.
    #[test]
    fn removal_steps_keep_pace_with_writes() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES;
        let removals = Arc::new(DeferredRemovals::default());
        let mut w = FileWriter::create(&fs, &dir.join("w"))
            .unwrap()
            .credit(&removals);
        w.write(&vec![0u8; step as usize]).unwrap();
        let big = dir.join("big");
        file_of(&fs, &big, 6 * step as usize);
        removals.defer([big.clone()]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, 5 * step, "no credit yet");
        w.write(&vec![0u8; 2 * step as usize]).unwrap();
        removals.remove_step(&fs).unwrap();
        assert!(
            !fs.exists(&big).unwrap(),
            "a step plus twice 2 steps' writes"
        );
        w.finish(false).unwrap();
    }

    /// Reads leave the removals to the other operations while those take steps: a read steps
    /// only after `READS_PER_STEP` reads in a row with no other step, and then every read does
    /// until another operation steps again.
    #[test]
    fn reads_take_removal_steps_only_when_nothing_else_does() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES;
        let big = dir.join("big");
        file_of(&fs, &big, 20 * step as usize);
        let removals = DeferredRemovals::default();
        removals.defer([big.clone()]);
        let len = || fs.file_space(&big).unwrap().len;
        for steps in 0..3 {
            for _ in 0..DeferredRemovals::READS_PER_STEP {
                removals.remove_step_for_read(&fs).unwrap();
            }
            assert_eq!(
                len(),
                (20 - steps) * step,
                "reads while others step remove nothing"
            );
            removals.remove_step(&fs).unwrap();
        }
        assert_eq!(len(), 17 * step);
        for _ in 0..DeferredRemovals::READS_PER_STEP + 2 {
            removals.remove_step_for_read(&fs).unwrap();
        }
        assert_eq!(
            len(),
            15 * step,
            "reads alone step once they are the only ones"
        );
        removals.remove_step(&fs).unwrap();
        removals.remove_step_for_read(&fs).unwrap();
        assert_eq!(len(), 14 * step, "another operation's step hands it back");
    }

    /// A failed cut or removal fails the step and leaves the file queued; the next step
    /// finishes the job. Closing removes everything whatever its size.
    #[test]
    fn failed_removal_steps_keep_the_file_queued() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let step = DeferredRemovals::STEP_BYTES as usize;
        let big = dir.join("big");
        file_of(&fs, &big, 3 * step);
        let removals = DeferredRemovals::default();
        removals.defer([big.clone()]);
        fs.fail_after(1); // the stat passes, the cut fails
        assert!(removals.remove_step(&fs).is_err());
        assert_eq!(fs.file_space(&big).unwrap().len, 3 * step as u64);
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.file_space(&big).unwrap().len, 2 * step as u64);
        removals.remove_all(&fs).unwrap();
        assert!(!fs.exists(&big).unwrap());
        assert!(!removals.is_pending());
    }

    /// Recyclable files within the pool's size are kept, not freed; a writer takes the largest
    /// no larger than its size hint, writes over it and cuts it to what it wrote. Files beyond the pool's
    /// size, files with another name and files not marked recyclable are removed as before;
    /// closing removes the pool.
    #[test]
    fn recycled_files_are_written_over_not_freed() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let kib = 1usize << 10;
        let removals = DeferredRemovals::with_recycling(200 * kib as u64, dir.to_path_buf());
        let (a, b, c, d, e) = (
            dir.join("a"),
            dir.join("b"),
            dir.join("c"),
            dir.join("d"),
            dir.join("e"),
        );
        file_of(&fs, &a, 100 * kib);
        file_of(&fs, &b, 40 * kib);
        file_of(&fs, &c, 90 * kib); // a, the oldest pooled, makes room for it
        file_of(&fs, &d, 10 * kib);
        fs.hard_link(&d, &dir.join("d-link")).unwrap();
        file_of(&fs, &e, 10 * kib);
        removals.defer([e.clone()]);
        removals.defer_recyclable([d.clone(), c.clone(), b.clone(), a.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(!removals.is_pending());
        assert_eq!(removals.recycled_bytes(), 130 * kib as u64);
        // Newest first: a became 0.free, b 1.free, then c 2.free, for which 0.free was
        // removed (100 + 40 + 90 KiB would not fit); d's name and e are gone.
        assert_eq!(fs.list_dir(dir).unwrap(), ["1.free", "2.free", "d-link"]);

        // Nothing as small as 1 KiB: a new file.
        assert_eq!(removals.take_recycled(kib as u64), None);
        // 45 KiB: b, the largest no larger (never c, which would be cut); 1 MiB: c.
        let mut w =
            FileWriter::create_reusing(&fs, &dir.join("n1"), &removals, 45 * kib as u64).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), ["2.free", "d-link", "n1"]);
        w.write(b"short").unwrap();
        assert_eq!(w.finish(false).unwrap().0, 5);
        assert_eq!(fs.file_bytes(&dir.join("n1")).unwrap(), b"short");
        let mut w = FileWriter::create_reusing(&fs, &dir.join("n2"), &removals, 1 << 20).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), ["d-link", "n1", "n2"]);
        let long = vec![7u8; 150 * kib];
        w.write(&long).unwrap();
        w.finish(false).unwrap();
        assert_eq!(fs.file_bytes(&dir.join("n2")).unwrap(), long);
        assert_eq!(removals.recycled_bytes(), 0);

        // Closing removes what the pool holds.
        file_of(&fs, &a, 100 * kib);
        removals.defer_recyclable([a.clone()]);
        removals.remove_step(&fs).unwrap();
        assert!(fs.exists(&dir.join("3.free")).unwrap());
        removals.remove_all(&fs).unwrap();
        assert!(!fs.exists(&dir.join("3.free")).unwrap());
        assert_eq!(removals.recycled_bytes(), 0);

        // A file outside the pool's directory is removed, not pooled.
        fs.create_dir_all(Path::new("/elsewhere")).unwrap();
        let outside = Path::new("/elsewhere/f");
        file_of(&fs, outside, 10 * kib);
        removals.defer_recyclable([outside.to_path_buf()]);
        removals.remove_step(&fs).unwrap();
        assert!(fs.list_dir(Path::new("/elsewhere")).unwrap().is_empty());
        assert_eq!(removals.recycled_bytes(), 0);

        // A queue without a pool removes recyclable files like any other.
        let plain = DeferredRemovals::default();
        file_of(&fs, &a, 100 * kib);
        plain.defer_recyclable([a.clone()]);
        plain.remove_step(&fs).unwrap();
        assert!(!fs.exists(&a).unwrap());
    }

    /// The pool keeps at most `POOL_FILES_MAX` files however small: each file pooled beyond
    /// that removes the oldest, so files no writer takes (larger than every hint) leave in time
    /// and a writer's pick stays a pass over a bounded list.
    #[test]
    fn the_pool_keeps_the_newest_files_within_its_count() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let removals = DeferredRemovals::with_recycling(1 << 30, dir.to_path_buf());
        let max = DeferredRemovals::POOL_FILES_MAX;
        for i in 0..max + 10 {
            let path = dir.join(format!("f{i}"));
            file_of(&fs, &path, 100);
            removals.defer_recyclable([path]);
            removals.remove_step(&fs).unwrap();
        }
        assert!(!removals.is_pending());
        assert_eq!(removals.recycled_bytes(), 100 * max as u64);
        let mut names = fs.list_dir(dir).unwrap();
        names.sort_by_key(|n| n.trim_end_matches(".free").parse::<usize>().unwrap());
        let want: Vec<String> = (10..max + 10).map(|i| format!("{i}.free")).collect();
        assert_eq!(names, want, "the ten oldest were removed");
        // A pick takes one out of the middle; the order of the rest is kept for eviction.
        let taken = removals.take_recycled(100).unwrap();
        fs.remove_file(&taken).unwrap(); // as if written over under another name
        let path = dir.join("g");
        file_of(&fs, &path, 100);
        removals.defer_recyclable([path]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap().len(), max);
        assert_eq!(removals.recycled_bytes(), 100 * max as u64);
    }

    /// A reuse that fails (the rename, here) leaves the pooled file at its name, queued for
    /// removal, and the new name absent.
    #[test]
    fn failed_reuse_queues_the_old_file_for_removal() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let removals = DeferredRemovals::with_recycling(1 << 20, dir.to_path_buf());
        let old = dir.join("old");
        file_of(&fs, &old, 4096);
        removals.defer_recyclable([old.clone()]);
        removals.remove_step(&fs).unwrap();
        let pooled = dir.join("0.free");
        assert!(fs.exists(&pooled).unwrap());
        fs.fail_after(1); // the open passes, the rename fails
        assert!(FileWriter::create_reusing(&fs, &dir.join("new"), &removals, 4096).is_err());
        assert!(fs.exists(&pooled).unwrap() && !fs.exists(&dir.join("new")).unwrap());
        assert!(removals.is_pending());
        removals.remove_step(&fs).unwrap();
        assert_eq!(fs.list_dir(dir).unwrap(), Vec::<String>::new());
    }

    /// The key/ops size hint scales the bytes per entry seen so far, less 1/16, and rounds
    /// down to whole pages; nothing is guessed before the first run.
    #[test]
    fn keyops_hints_are_whole_pages_at_the_rate_seen() {
        let removals = DeferredRemovals::default();
        assert_eq!(removals.keyops_hint(1000, 4096), 0);
        removals.note_run(8192, 100); // ~82 bytes an entry
        assert_eq!(removals.keyops_hint(0, 4096), 0);
        assert_eq!(removals.keyops_hint(1, 4096), 0);
        assert_eq!(removals.keyops_hint(53, 4096), 0); // 4342 bytes less 1/16
        assert_eq!(removals.keyops_hint(54, 4096), 4096);
        assert_eq!(removals.keyops_hint(100, 4096), 4096);
        assert_eq!(removals.keyops_hint(110, 4096), 8192);
        assert_eq!(removals.keyops_hint(1000, 0), 0);
    }

    /// The hint follows the runs written lately: after a long load at 100 bytes an entry, 60
    /// runs a tenth of the size at 60 bytes bring it within 1% of the new rate, however long
    /// the load.
    #[test]
    fn keyops_hints_follow_the_recent_rate() {
        let removals = DeferredRemovals::default();
        for _ in 0..1000 {
            removals.note_run(100_000_000, 1_000_000);
        }
        // 100 MB less 1/16, in whole pages.
        assert_eq!(removals.keyops_hint(1_000_000, 4096), 93_749_248);
        for _ in 0..60 {
            removals.note_run(6_000_000, 100_000);
        }
        let hint = removals.keyops_hint(1_000_000, 4096);
        assert!(
            hint.abs_diff(60_000_000 - 60_000_000 / 16) <= 600_000,
            "hint {hint} after the rate fell to 60 bytes an entry"
        );
    }

    /// A writer never takes a pooled file larger than its hint: cutting one back frees (and
    /// trims) the rest while reads wait.
    #[test]
    fn recycling_never_takes_a_larger_file() {
        let fs = MemFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let kib = 1u64 << 10;
        let removals = DeferredRemovals::with_recycling(1 << 20, dir.to_path_buf());
        let (a, b, c) = (dir.join("a"), dir.join("b"), dir.join("c"));
        file_of(&fs, &a, 100 * kib as usize);
        file_of(&fs, &b, 40 * kib as usize);
        file_of(&fs, &c, 91 * kib as usize);
        removals.defer_recyclable([a, b, c]);
        removals.remove_step(&fs).unwrap();
        assert_eq!(removals.recycled_bytes(), 231 * kib);
        // 90 KiB: not c (91) nor a (100), the nearest ones, but b, the largest no larger.
        assert!(removals.take_recycled(90 * kib).is_some());
        assert_eq!(removals.recycled_bytes(), 191 * kib);
        // 99 KiB: c; 39 KiB: nothing left that small.
        assert!(removals.take_recycled(99 * kib).is_some());
        assert_eq!(removals.recycled_bytes(), 100 * kib);
        assert_eq!(removals.take_recycled(39 * kib), None);
        assert_eq!(removals.take_recycled(100 * kib).map(|_| ()), Some(()));
        assert_eq!(removals.recycled_bytes(), 0);
    }
}
