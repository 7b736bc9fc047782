//! Background merges: one thread per session (with `SessionOptions::background_merges`) that
//! performs the steps of merges in progress ahead of the credits updates pay for them, on
//! another core, so that an update usually finds its share of merge work already done.
//!
//! Owns: [`Background`] (the thread, the lists of merges and flushes it may work on, memory to
//! free). May call: `merge` (stepping a [`SharedMerge`]), `flush` (writing a chunk of a
//! [`SharedFlush`]). Must never touch: the level structure or the credit accounting
//! (that is `schedule`'s job), tables, files directly.
//!
//! How it fits the schedule: `schedule` registers every merge it starts. An update still pays
//! its credits and still performs the shortfall between the steps its credits buy and the steps
//! done so far (see `schedule::Levels::supply_credits`); work done in the background only makes
//! that shortfall smaller. So the bound on the merge steps any one update performs is the one
//! the schedule derives without a background thread, and `tests/merge_bound.rs` asserts it in
//! both modes.
//!
//! Waiting: the background thread takes a merge's lock only when no foreground user (an update,
//! a lookup collecting runs, a snapshot) waits for it, and holds it for one chunk of at most
//! [`CHUNK_STEPS`] steps (plus, when the chunk ends the merge, writing the output's filter and
//! index). That is the longest a foreground user waits for the background.
//!
//! Flushes: a full write buffer frozen by an update is written out as a level-1 run by the
//! updates that follow, a few entries each (`table`); registered here, its entries are written
//! ahead of them, a chunk at a time, before any merge work. The updates then find their share
//! written and only add the finished run to level 1.
//!
//! It also frees memory that updates hand over (a flushed write buffer: one allocation per
//! entry), before each chunk.
//!
//! Order of work: the merge with the fewest steps left first (merges on the upper levels are
//! small and are needed soonest).
//!
//! Failures: a step that fails marks its merge failed, keeping the cause; the next update that
//! needs the merge reports [`crate::Error::TableBroken`] with that cause, exactly as if it had
//! run the step itself. Reads are unaffected: a merge in progress is read through its inputs,
//! which a failed step leaves intact.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::flush::SharedFlush;
use crate::merge::SharedMerge;

/// Steps the background thread performs under one acquisition of a merge's lock.
pub(crate) const CHUNK_STEPS: u64 = 512;

/// How long the background thread pauses when every merge with work left is held by the
/// foreground.
const BUSY_PAUSE: Duration = Duration::from_micros(50);

/// A session's background merge thread.
#[derive(Debug)]
pub(crate) struct Background {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Merge steps performed by the background thread.
    steps: AtomicU64,
    /// Whether the thread is inside a chunk (the only time it holds strong references to
    /// merges and flushes), and how many chunks it has ended (see [`Background::wait_released`]).
    working: Mutex<Working>,
    /// Signalled at the end of every chunk.
    chunk_ended: Condvar,
}

/// The thread's progress through its chunks, for [`Background::wait_released`].
#[derive(Debug, Default)]
struct Working {
    /// Inside a chunk: strong references to merges or flushes may be held.
    busy: bool,
    /// Chunks ended so far.
    ended: u64,
}

/// Marks the thread inside a chunk while it lives; ending it wakes every
/// [`Background::wait_released`] waiting for that chunk.
struct ChunkGuard<'a>(&'a Shared);

impl<'a> ChunkGuard<'a> {
    fn begin(shared: &'a Shared) -> ChunkGuard<'a> {
        lock(&shared.working).busy = true;
        ChunkGuard(shared)
    }
}

impl Drop for ChunkGuard<'_> {
    fn drop(&mut self) {
        let mut working = lock(&self.0.working);
        working.busy = false;
        working.ended = working.ended.wrapping_add(1);
        drop(working);
        self.0.chunk_ended.notify_all();
    }
}

#[derive(Default)]
struct Queue {
    /// Merges that may have work left (weak: a merge released by its tables is dropped).
    merges: Vec<Weak<SharedMerge>>,
    /// Flushes that may have entries left to write (weak, as merges).
    flushes: Vec<Weak<SharedFlush>>,
    /// Memory handed over to be freed here rather than on an update's path (a flushed write
    /// buffer: tens of thousands of allocations).
    garbage: Vec<Box<dyn Send>>,
    /// Pauses asked for and not yet ended ([`Background::pause`]): no chunk begins meanwhile.
    paused: usize,
    stop: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("merges", &self.merges.len())
            .field("flushes", &self.flushes.len())
            .field("garbage", &self.garbage.len())
            .field("paused", &self.paused)
            .field("stop", &self.stop)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Background {
    /// Starts the thread. `dir` names the session in an error.
    pub(crate) fn start(dir: &std::path::Path) -> Result<Background> {
        let shared = Arc::new(Shared::default());
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-merge".into())
            .spawn(move || run(&worker))
            .map_err(|e| Error::io("starting the background merge thread", dir, e))?;
        Ok(Background {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Hands a newly started merge to the thread. O(1) besides dropping released merges from
    /// the list.
    pub(crate) fn register(&self, merge: &Arc<SharedMerge>) {
        let mut queue = lock(&self.shared.queue);
        if queue.stop {
            return;
        }
        queue.merges.retain(|w| w.strong_count() > 0);
        queue.merges.push(Arc::downgrade(merge));
        self.shared.wake.notify_one();
    }

    /// Hands a newly frozen write buffer's flush to the thread, which writes it ahead of the
    /// updates that pay for it (before any merge work: level 1 needs it first).
    pub(crate) fn register_flush(&self, flush: &Arc<SharedFlush>) {
        let mut queue = lock(&self.shared.queue);
        if queue.stop {
            return;
        }
        queue.flushes.retain(|w| w.strong_count() > 0);
        queue.flushes.push(Arc::downgrade(flush));
        self.shared.wake.notify_one();
    }

    /// Waits until the thread has dropped the merges it held when this was called (it holds
    /// them only while it picks and works on one chunk). A table that is closing calls it after
    /// releasing its runs, so that the files of a merge the thread was working on are released
    /// (to the session's deferred removals) before the table's close removes them.
    ///
    /// Bound: the rest of the chunk in progress, if any (at most [`CHUNK_STEPS`] steps, plus
    /// the output's filter and index when the chunk ends its merge), never the chunks after it:
    /// a chunk that begins after the table released its references cannot reach the merges
    /// only that table held (their last strong reference is gone, so the thread's weak ones
    /// no longer upgrade). Waiting for the thread's lock instead, as before, could wait for
    /// many chunks in a row while the thread had work queued (a lock is not handed over in
    /// order), which stalled a pipelined lookup that dropped its duplicate table for up to
    /// 380 ms at 100M.
    pub(crate) fn wait_released(&self) {
        if let Some(chunk) = self.chunk_in_progress() {
            self.wait_chunk_end(chunk);
        }
    }

    /// The number of the chunk the thread is in, if it is in one.
    fn chunk_in_progress(&self) -> Option<u64> {
        let working = lock(&self.shared.working);
        working.busy.then_some(working.ended)
    }

    /// Waits until chunk number `chunk` has ended (at once if it has), whatever began since.
    fn wait_chunk_end(&self, chunk: u64) {
        let mut working = lock(&self.shared.working);
        while working.busy && working.ended == chunk {
            working = self
                .shared
                .chunk_ended
                .wait(working)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Frees `item` on the thread (at once, if the thread has stopped).
    pub(crate) fn free(&self, item: Box<dyn Send>) {
        let mut queue = lock(&self.shared.queue);
        if queue.stop {
            drop(queue);
            drop(item);
            return;
        }
        queue.garbage.push(item);
        self.shared.wake.notify_one();
    }

    /// Begins no chunk until as many [`Background::resume`] calls (the chunk in progress, if
    /// any, ends as usual). For a session's open, which replays its log and saves a checkpoint
    /// on the foreground: merges it restores would otherwise be stepped meanwhile on the other
    /// core, from the same disk (a third of the CPU samples of a 100M-entry open after a kill,
    /// measured). Updates still do their own share of merge work while paused, as without the
    /// thread.
    pub(crate) fn pause(&self) {
        lock(&self.shared.queue).paused += 1;
    }

    /// Ends one [`Background::pause`].
    pub(crate) fn resume(&self) {
        let mut queue = lock(&self.shared.queue);
        queue.paused = queue.paused.saturating_sub(1);
        self.shared.wake.notify_one();
    }

    /// Merge steps the thread has performed so far.
    pub(crate) fn steps(&self) -> u64 {
        self.shared.steps.load(Ordering::Relaxed)
    }

    /// Stops the thread, waiting for the chunk it is working on (if any). Idempotent.
    pub(crate) fn stop(&self) {
        {
            let mut queue = lock(&self.shared.queue);
            queue.stop = true;
            queue.merges.clear();
            queue.flushes.clear();
            let garbage = std::mem::take(&mut queue.garbage);
            self.shared.wake.notify_all();
            drop(queue);
            drop(garbage);
        }
        if let Some(thread) = lock(&self.thread).take() {
            // A panic inside a step (a user's resolve function) poisoned that merge's lock,
            // which the table reports; there is nothing more to report here.
            let _ = thread.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: picks the merge with the fewest steps left that no foreground user holds or
/// waits for, performs one chunk of it, and repeats; sleeps while no merge has work left.
fn run(shared: &Shared) {
    loop {
        let (weak, flushes, garbage) = {
            let mut queue = lock(&shared.queue);
            loop {
                if queue.stop {
                    return;
                }
                queue.merges.retain(|w| w.strong_count() > 0);
                queue
                    .flushes
                    .retain(|w| w.upgrade().is_some_and(|f| f.needs_work()));
                if queue.paused == 0
                    && (!queue.merges.is_empty()
                        || !queue.flushes.is_empty()
                        || !queue.garbage.is_empty())
                {
                    break;
                }
                queue = shared.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
            }
            (
                queue.merges.clone(),
                queue.flushes.clone(),
                std::mem::take(&mut queue.garbage),
            )
        };
        drop(garbage);
        if weak.is_empty() && flushes.is_empty() {
            continue;
        }
        // A flush first; merge work when no flush had entries to write here.
        let worked = flush_once(shared, &flushes) || (!weak.is_empty() && work_once(shared, &weak));
        if !worked {
            std::thread::sleep(BUSY_PAUSE);
        }
    }
}

/// One chunk of the first flush with entries left that no foreground user holds or waits for.
/// Returns whether it wrote anything.
fn flush_once(shared: &Shared, weak: &[Weak<SharedFlush>]) -> bool {
    let _chunk = ChunkGuard::begin(shared);
    weak.iter()
        .filter_map(Weak::upgrade)
        .any(|flush| flush.needs_work() && flush.background_chunk().is_some_and(|n| n > 0))
}

/// One pick and one chunk. Returns false when every merge with work left was held by the
/// foreground (the caller pauses). Strong references to merges exist only inside, while the
/// chunk's [`ChunkGuard`] lives.
fn work_once(shared: &Shared, weak: &[Weak<SharedMerge>]) -> bool {
    let _chunk = ChunkGuard::begin(shared);
    let candidates: Vec<Arc<SharedMerge>> = weak.iter().filter_map(Weak::upgrade).collect();
    let mut best: Option<(u64, &Arc<SharedMerge>)> = None;
    let mut finished: Vec<*const SharedMerge> = Vec::new();
    let mut busy = false;
    for merge in &candidates {
        let Some(guard) = merge.try_lock_background() else {
            busy = true;
            continue;
        };
        if !guard.needs_work() {
            finished.push(Arc::as_ptr(merge));
            continue;
        }
        let left = guard.debt().saturating_sub(guard.steps_done());
        if best.is_none_or(|(l, _)| left < l) {
            best = Some((left, merge));
        }
    }
    if !finished.is_empty() {
        lock(&shared.queue)
            .merges
            .retain(|w| !finished.contains(&w.as_ptr()));
    }
    let Some((_, merge)) = best else {
        return !busy;
    };
    if let Some(mut guard) = merge.try_lock_background() {
        let before = guard.steps_done();
        // A failure is kept by the merge (its cause included) and reported to the next update
        // that needs it; the merge then no longer needs work.
        let _ = guard.steps(CHUNK_STEPS);
        merge.publish(&guard);
        let done = guard.steps_done().saturating_sub(before);
        shared.steps.fetch_add(done, Ordering::Relaxed);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closing table waits for the chunk in progress only, not for one the thread began
    /// after it (the old lock-based wait could be overtaken by any number of those).
    #[test]
    fn wait_released_waits_for_the_chunk_in_progress_only() {
        let background = Background {
            shared: Arc::new(Shared::default()),
            thread: Mutex::new(None),
        };
        // Idle: nothing to wait for.
        assert_eq!(background.chunk_in_progress(), None);
        background.wait_released();
        let first = ChunkGuard::begin(&background.shared);
        let seen = background.chunk_in_progress();
        assert_eq!(seen, Some(0));
        drop(first);
        let second = ChunkGuard::begin(&background.shared);
        // The chunk seen has ended; the one in progress now is not waited for.
        background.wait_chunk_end(0);
        assert_eq!(background.chunk_in_progress(), Some(1));
        // Waiting on another thread returns when the chunk in progress ends.
        let waiter = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| background.wait_released());
            std::thread::sleep(Duration::from_millis(5));
            drop(second);
            waiter.join()
        });
        assert!(waiter.is_ok());
        assert_eq!(background.chunk_in_progress(), None);
    }

    #[test]
    fn stops_while_idle_and_twice() {
        let dir = tempfile::tempdir().unwrap();
        let background = Background::start(dir.path()).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        background.stop();
        background.stop();
        assert_eq!(background.steps(), 0);
    }

    #[test]
    fn a_pause_holds_every_chunk_until_as_many_resumes() {
        /// Sends on the channel when dropped (freed by the thread).
        struct Freed(std::sync::mpsc::Sender<()>);
        impl Drop for Freed {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let background = Background::start(dir.path()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        background.pause();
        background.pause();
        background.free(Box::new(Freed(tx)));
        let wait = Duration::from_millis(50);
        assert!(rx.recv_timeout(wait).is_err(), "freed while paused");
        background.resume();
        assert!(
            rx.recv_timeout(wait).is_err(),
            "freed after one resume of two"
        );
        background.resume();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("not freed after the last resume");
        background.stop();
    }
}
