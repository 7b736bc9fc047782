//! One table's LSM tree and its operations, below the public [`crate::Table`] handle.
//!
//! Owns: [`Lsm`] (a cheap handle over [`LsmInner`]: the configuration, run parameters, the
//! state behind one reader-writer lock, and the trie of an authenticated table),
//! [`Update`], [`TableStats`], and the table's locks and life cycle. Its work is in one file
//! per concept: `update` (the update path: validation, credits, flushes), `read` (lookups,
//! blobs, views and cursors), `unions` (starting and paying for unions), `persist` (saving and
//! opening snapshots) and `commit` (an authenticated table's commits, proofs and warm-ups).
//!
//! May call: `session_core` (its session's shared parts; registering as a member), `write_buffer`,
//! `flush` (a frozen write buffer's run), `schedule`, `lookup`, `run`, `sorted` (writing runs
//! in parts), `entry`, `page` (operation codes), `cursor` (streams), `union`, `snapshot`,
//! `auth`, `trie` and `pagelog` (an authenticated table's Merkle trie and where its snapshot
//! keeps it), `observe` (counts per batch; the spans of commits and snapshots). Must never touch: page, index or filter bytes directly (that is `run`'s and
//! `lookup`'s job), the write-ahead log (a durable table's writes are logged by `durable`
//! before they reach [`Lsm::apply_updates`]), or the public handles above it.
//!
//! Concurrency: a table's state sits behind one reader-writer lock. Lookups hold the read lock
//! only to read the write buffer and collect the runs to consult (`Arc`s), then do their I/O
//! without it, so lookups run concurrently with each other and with updates. Updates take the
//! write lock, so writes to one table are serialised.
//!
//! Consistency after an error: an update batch that fails half way (an I/O error while writing a
//! run or merging) leaves the table *broken*: every later operation fails with
//! [`Error::TableBroken`] rather than risk a wrong answer. As in lsm-tree, the remedy is to close
//! the table and reopen from a snapshot. Input errors (an oversized key, say) are found before
//! anything is applied and leave the table usable.

mod commit;
mod persist;
mod read;
mod unions;
mod update;

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::auth::Auth;
use crate::config::{MergeSchedule, Resolve, TableConfig};
use crate::error::{Error, Result};
use crate::flush::SharedFlush;
use crate::lookup::Partial;
use crate::page::{KEY_SIZE_MAX, VALUE_SIZE_MAX};
use crate::run::RunParams;
use crate::schedule::{merge_steps_per_update_max, LevelMergeStats, Levels};
use crate::session_core::{Member, SessionCore};
use crate::sorted::SortedRun;
use crate::union::UnionLevel;
use crate::write_buffer::WriteBuffer;

/// Why a table whose lock was poisoned is broken.
const PANICKED: &str = "a panic (in a resolve function) interrupted an update of this table";

/// Largest blob, in bytes.
pub const BLOB_SIZE_MAX: u64 = u32::MAX as u64;

/// One update in a batch given to [`crate::Table::updates`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update<'a> {
    /// Set the key's value, dropping any blob it had.
    Insert(&'a [u8]),
    /// Set the key's value and blob.
    InsertWithBlob(&'a [u8], &'a [u8]),
    /// Combine the value with the key's current value through the table's resolve function (or
    /// set it, if the key is absent). Never reads.
    Upsert(&'a [u8]),
    /// Remove the key.
    Delete,
}

/// Counters describing a table's shape and the merge work it has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// Levels below the write buffer.
    pub levels: usize,
    /// Runs a lookup consults.
    pub runs: usize,
    /// Files (parts) those runs are made of: one per run unless merges linked parts of their
    /// inputs or [`crate::TableConfig::part_entries`] cuts runs.
    pub run_parts: usize,
    /// Merges this handle started below level 1 (a duplicate starts at 0).
    pub merges_started: u64,
    /// Parts those merges linked whole instead of rewriting them (no data read or written).
    pub parts_linked: u64,
    /// Entries in the linked parts.
    pub entries_linked: u64,
    /// Bytes of run files this table (with its duplicates, which share the count) has written:
    /// flushes, merges and the write buffers its snapshots saved. With the bytes of the updates
    /// it was given, its write amplification.
    pub bytes_written: u64,
    /// Merges started but not finished.
    pub merges_in_progress: usize,
    /// Keys in the write buffer, and in a full one still being written out as a run.
    pub write_buffer_entries: usize,
    /// Memory held by Bloom filters and indexes.
    pub filter_and_index_bytes: usize,
    /// Merge steps (input entries consumed by merges) since the table was created.
    pub merge_steps_total: u64,
    /// The most merge steps any single update has performed.
    pub merge_steps_max_per_update: u64,
    /// Merge steps the most recent update performed.
    pub merge_steps_last_update: u64,
    /// The documented bound on merge steps per update for the current number of levels
    /// (derived in `docs/design.md`, "Merges"); meaningful for the incremental schedule.
    pub merge_steps_bound_per_update: u64,
    /// Updates applied since the table was created (a duplicate, a table opened from a snapshot
    /// and a union start at 0; an empty batch counts nothing).
    pub updates: u64,
    /// The merge work of each level, level 1 first, one entry per level (`levels` of them):
    /// merges started and finished and merge steps performed by this handle, counted as
    /// `merges_started` and `merge_steps_total` are (a duplicate and a table opened from a
    /// snapshot start at 0), whose sums over the levels they are. Kept as the merges run, so
    /// reading it costs O(levels).
    pub level_merges: Vec<LevelMergeStats>,
}

/// What a table's updates change, behind its reader-writer lock.
#[derive(Debug)]
struct TableState {
    open: bool,
    /// Set when an update failed half way: the contents may be inconsistent.
    broken: Option<String>,
    write_buffer: WriteBuffer,
    /// A full write buffer being written out as a run, a few entries per update (see
    /// [`Flushing`]); older than `write_buffer`, newer than every level.
    flushing: Option<Flushing>,
    levels: Levels,
    /// The union this table was made from, below every level, until it is finished and migrated
    /// into the levels.
    union: Option<Arc<UnionLevel>>,
    /// Incremented by every update; blob references carry the epoch of their lookup.
    epoch: u64,
    merge_steps_total: u64,
    merge_steps_max_per_update: u64,
    merge_steps_last_update: u64,
    /// Keys updated since the last commit of an authenticated table (empty otherwise): O(1) to
    /// share with a duplicate, like the write buffer.
    dirty: imbl::OrdSet<Vec<u8>>,
}

/// A table's shared parts: what every handle (and the session's registry, weakly) points to.
#[derive(Debug)]
pub(crate) struct LsmInner {
    id: u64,
    session: Arc<SessionCore>,
    config: TableConfig,
    params: RunParams,
    state: RwLock<TableState>,
    /// The trie of an authenticated table. Lock order: this before `state`.
    auth: Option<Mutex<Auth>>,
    /// The table's number in the session's log catalog, for a durable table (set once, when it
    /// is created or recovered): its updates go through the write-ahead log.
    durable_id: std::sync::OnceLock<u32>,
}

/// A full write buffer on its way to level 1.
///
/// When the write buffer fills, it is frozen here and a fresh one takes the updates. Every
/// update then pays for [`FLUSH_ENTRIES_PER_UPDATE`] of its entries and writes those that are
/// not written yet into the run being built (in chunks of [`FLUSH_CHUNK`]), so the `B` entries of
/// a flush are spread over the next `B / 4` updates instead of landing on the one update that
/// filled the buffer; the update that pays for the last of them finishes the run (if it is not
/// finished yet) and adds it to level 1, before the new buffer can fill. In a session with
/// background merges the flush is shared with the background thread ([`SharedFlush`]), which
/// writes ahead of the updates, so that they usually find their share written. Lookups read the
/// frozen buffer after the write buffer. Operations that hand the table's structure elsewhere
/// (cursors, unions, snapshots) first finish it ([`Lsm::settle_flush`]): at most `B` entries,
/// the cost every flush had before it was spread. A duplicate shares the flush (the run is
/// written once) and pays for it with credits of its own.
#[derive(Debug)]
struct Flushing {
    /// The frozen buffer (an O(1) clone of the persistent map, shared with lookups' plans).
    buffer: WriteBuffer,
    /// The run being written, shared with duplicates and the background thread.
    shared: Arc<SharedFlush>,
    /// Entries of `buffer` this handle's updates have paid for (at most its length).
    paid: usize,
}

/// Entries of a frozen buffer each update writes: 4, so that a flush of `B` entries is done
/// after `B / 4` updates, a quarter of the way to the next one, and at most `B + B / 4`
/// entries are held in memory (the frozen buffer and the new one) instead of `B + B / 2`.
const FLUSH_ENTRIES_PER_UPDATE: usize = 4;

/// Entries written at once from a frozen buffer (one O(log B) seek into the map per chunk).
const FLUSH_CHUNK: usize = 64;

/// What a batched lookup needs from a table's state, taken under its read lock.
struct LookupPlan {
    partial: Vec<Partial>,
    runs: Vec<Arc<SortedRun>>,
    epoch: u64,
    union: Option<Arc<UnionLevel>>,
}

/// A handle to one table's LSM tree: cheap to clone (an `Arc` inside); a clone is the same
/// table. The public [`crate::Table`] wraps one; `durable` and `inspect` use it directly.
#[derive(Debug, Clone)]
pub(crate) struct Lsm {
    inner: Arc<LsmInner>,
}

impl TableState {
    fn check_usable(&self) -> Result<()> {
        if !self.open {
            return Err(Error::TableClosed);
        }
        if let Some(cause) = &self.broken {
            return Err(Error::TableBroken(cause.clone()));
        }
        Ok(())
    }
}

impl LsmInner {
    /// Closes the table: drops the write buffer and releases every run.
    pub(crate) fn close(&self) {
        {
            // A poisoned lock is recovered: closing only drops the state.
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            state.open = false;
            state.write_buffer.clear();
            state.flushing = None;
            state.levels = Levels::default();
            state.union = None;
            state.dirty = imbl::OrdSet::new();
        }
        if let Some(auth) = &self.auth {
            auth.lock().unwrap_or_else(|p| p.into_inner()).close();
        }
        if let Some(background) = self.session.background() {
            background.wait_released();
        }
        self.session.table_closed();
    }

    /// Whether the table is open (not closed explicitly or by its session).
    pub(crate) fn is_open(&self) -> bool {
        self.state.read().unwrap_or_else(|p| p.into_inner()).open
    }
}

impl Member for LsmInner {
    fn close(&self) {
        LsmInner::close(self);
    }
    fn is_open(&self) -> bool {
        LsmInner::is_open(self)
    }
    fn runs(&self, out: &mut Vec<Arc<crate::run::Run>>) {
        let (mut sorted, union) = {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            let mut sorted = Vec::new();
            state.levels.runs_newest_first(&mut sorted);
            (sorted, state.union.clone())
        };
        let mut unions: Vec<Arc<crate::union::UnionLevel>> = union.into_iter().collect();
        while let Some(union) = unions.pop() {
            match union.contents() {
                crate::union::UnionContents::Done(run) => sorted.extend(run),
                crate::union::UnionContents::Pending(inputs) => {
                    for view in inputs {
                        sorted.extend(view.runs.iter().cloned());
                        unions.extend(view.union.clone());
                    }
                }
            }
        }
        out.extend(sorted.iter().flat_map(|s| s.parts().iter().cloned()));
    }
}

impl Lsm {
    /// A new, empty table of `session` (see [`crate::Session::new_table`]).
    pub(crate) fn new(session: Arc<SessionCore>, config: TableConfig) -> Result<Lsm> {
        let params = RunParams::for_table(
            session.active_dir(),
            session.removals().clone(),
            session.salt(),
            &config,
        )?;
        let auth = config
            .auth
            .as_ref()
            .map(|auth| Auth::new(session.clone(), auth));
        Lsm::with_contents(
            session,
            config,
            params,
            (WriteBuffer::default(), imbl::OrdSet::new()),
            Levels::default(),
            None,
            auth,
        )
    }

    /// A table of `session` with the given contents, registered with the session so that
    /// closing it closes the table.
    fn with_contents(
        session: Arc<SessionCore>,
        config: TableConfig,
        params: RunParams,
        (write_buffer, dirty): (WriteBuffer, imbl::OrdSet<Vec<u8>>),
        levels: Levels,
        union: Option<Arc<UnionLevel>>,
        auth: Option<Auth>,
    ) -> Result<Lsm> {
        let inner = Arc::new(LsmInner {
            id: session.next_table_id(),
            durable_id: std::sync::OnceLock::new(),
            session,
            config,
            params,
            state: RwLock::new(TableState {
                open: true,
                broken: None,
                write_buffer,
                flushing: None,
                levels,
                union,
                epoch: 0,
                merge_steps_total: 0,
                merge_steps_max_per_update: 0,
                merge_steps_last_update: 0,
                dirty,
            }),
            auth: auth.map(Mutex::new),
        });
        let weak: std::sync::Weak<LsmInner> = Arc::downgrade(&inner);
        let member: std::sync::Weak<dyn Member> = weak;
        inner.session.register_table(member)?;
        Ok(Lsm { inner })
    }

    /// The work of [`crate::Table::duplicate`] (its doc gives the costs and errors).
    pub(crate) fn duplicate(&self) -> Result<Lsm> {
        // The trie first (lock order), held while the contents are read: the copy's trie
        // version and its keys updated since then belong together.
        let auth = self.lock_auth()?;
        // The write buffer's newer layer folded in first where nothing shares the older (in
        // place, no I/O): updates made while the copy lives then go to a layer of their own
        // instead of copying nodes the copy shares (`write_buffer::WriteBuffer`). A poisoned
        // lock is left to `read` to report.
        if let Ok(mut state) = self.inner.state.write() {
            state.write_buffer.fold();
        }
        let (write_buffer, frozen, dirty, mut levels, union) = {
            let state = self.read()?;
            (
                state.write_buffer.clone(),
                state.flushing.as_ref().map(|f| Flushing {
                    buffer: f.buffer.clone(),
                    shared: f.shared.clone(),
                    paid: f.paid,
                }),
                state.dirty.clone(),
                state.levels.clone(),
                state.union.clone(),
            )
        };
        let auth = auth.map(|a| a.duplicate());
        // The copy counts its own merge work, from 0.
        levels.reset_counts();
        let copy = Lsm::with_contents(
            self.inner.session.clone(),
            self.inner.config.clone(),
            self.inner.params.clone(),
            (write_buffer, dirty),
            levels,
            union,
            auth,
        )?;
        if let Some(flushing) = frozen {
            // Nobody else has the new table yet: the lock is free.
            let mut state = copy.inner.state.write().unwrap_or_else(|p| p.into_inner());
            state.flushing = Some(flushing);
        }
        Ok(copy)
    }

    /// The shared merge of the first level that has one in progress (for tests).
    #[cfg(test)]
    pub(crate) fn merge_in_progress(&self) -> Option<crate::schedule::MergeInProgress> {
        self.read().ok()?.levels.merge_in_progress()
    }

    /// The table's configuration.
    pub(crate) fn config(&self) -> &TableConfig {
        &self.inner.config
    }

    /// The table's session.
    pub(crate) fn session(&self) -> &Arc<SessionCore> {
        &self.inner.session
    }

    /// The trie of an authenticated table, locked (`None` for a plain table). A poisoned lock
    /// (a panic during a commit) makes the table broken.
    fn lock_auth(&self) -> Result<Option<MutexGuard<'_, Auth>>> {
        match &self.inner.auth {
            None => Ok(None),
            Some(auth) => match auth.lock() {
                Ok(guard) => Ok(Some(guard)),
                Err(_) => Err(Error::TableBroken(
                    "a panic interrupted a commit of this table's trie".into(),
                )),
            },
        }
    }

    /// The locked trie, for tests inside the crate.
    #[cfg(test)]
    pub(crate) fn auth_for_tests(&self) -> MutexGuard<'_, Auth> {
        self.auth().expect("an authenticated table")
    }

    /// The locked trie, or [`Error::NotAuthenticated`].
    fn auth(&self) -> Result<MutexGuard<'_, Auth>> {
        self.lock_auth()?.ok_or(Error::NotAuthenticated)
    }

    /// The table's state for reading, after a step of the session's queued file removals if
    /// reads are to take one (`SessionCore::remove_released_for_read`; a failed
    /// step fails the operation before it starts).
    ///
    /// A poisoned lock (a resolve function panicked during an update, which may have left the
    /// write buffer or a merge half done) is never read through: the table is broken.
    fn read(&self) -> Result<RwLockReadGuard<'_, TableState>> {
        let state = match self.inner.state.read() {
            Ok(state) => state,
            Err(poisoned) => {
                // Let go of the read guard the error holds, then mark the table broken for good
                // (the write path records the cause, and reports a closed table as closed).
                drop(poisoned);
                return Err(match self.lock_write() {
                    Err(e) => e,
                    Ok(_) => Error::TableBroken(PANICKED.into()),
                });
            }
        };
        state.check_usable()?;
        self.inner.session.remove_released_for_read()?;
        Ok(state)
    }

    /// The table's state for writing, after the session's queued file removals. A poisoned lock
    /// marks the table broken (see [`Lsm::read`]).
    fn lock_write(&self) -> Result<RwLockWriteGuard<'_, TableState>> {
        let state = match self.inner.state.write() {
            Ok(state) => state,
            Err(poisoned) => {
                let mut state = poisoned.into_inner();
                state.broken.get_or_insert_with(|| PANICKED.into());
                // The cause is recorded in the state: later calls see a broken table.
                self.inner.state.clear_poison();
                state
            }
        };
        state.check_usable()?;
        self.inner.session.remove_released()?;
        Ok(state)
    }

    /// The durable table's number in its session's log catalog.
    pub(crate) fn durable_id(&self) -> Option<u32> {
        self.inner.durable_id.get().copied()
    }

    /// Makes the table durable under catalog number `id`.
    pub(crate) fn set_durable_id(&self, id: u32) {
        let _ = self.inner.durable_id.set(id);
    }

    /// Fails if the table is closed or broken.
    pub(crate) fn check_usable(&self) -> Result<()> {
        drop(self.read()?);
        Ok(())
    }

    /// Whether `self` belongs to `session`.
    /// Whether `self` and `other` are handles of the same table (not merely duplicates).
    pub(crate) fn is_same(&self, other: &Lsm) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn in_session(&self, session: &Arc<SessionCore>) -> bool {
        Arc::ptr_eq(&self.inner.session, session)
    }

    /// The work of [`crate::Table::close`] (its doc gives the costs and errors).
    pub(crate) fn close(&self) {
        self.inner.close();
    }

    /// The work of [`crate::Table::stats`] (its doc gives the costs and errors).
    pub(crate) fn stats(&self) -> Result<TableStats> {
        let state = self.read()?;
        let shape = state.levels.stats();
        let levels = state.levels.level_count();
        let bound = match self.inner.config.merge_schedule {
            MergeSchedule::Incremental => {
                merge_steps_per_update_max(levels, self.inner.config.merge_batch_size as u64)
            }
            MergeSchedule::OneShot => u64::MAX,
        };
        Ok(TableStats {
            levels,
            runs: shape.runs,
            run_parts: shape.parts,
            merges_started: shape.merges_started,
            parts_linked: shape.parts_linked,
            entries_linked: shape.entries_linked,
            bytes_written: self
                .inner
                .params
                .written
                .load(std::sync::atomic::Ordering::Relaxed),
            merges_in_progress: shape.merges_in_progress,
            write_buffer_entries: state.write_buffer.len()
                + state.flushing.as_ref().map_or(0, |f| f.buffer.len()),
            filter_and_index_bytes: shape.memory_bytes,
            merge_steps_total: state.merge_steps_total,
            merge_steps_max_per_update: state.merge_steps_max_per_update,
            merge_steps_last_update: state.merge_steps_last_update,
            merge_steps_bound_per_update: bound,
            updates: state.epoch,
            level_merges: shape.per_level,
        })
    }
}

impl Drop for LsmInner {
    /// The last handle is gone: release the runs now and remove the files nobody else uses.
    fn drop(&mut self) {
        self.close();
    }
}

/// Fails with [`Error::KeyTooLarge`] for a key longer than [`KEY_SIZE_MAX`].
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_SIZE_MAX {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: KEY_SIZE_MAX,
        });
    }
    Ok(())
}

/// Checks one update against the size limits and the resolve function's rules.
fn validate(key: &[u8], update: &Update<'_>, resolve: &Resolve) -> Result<()> {
    check_key(key)?;
    if let (Resolve::AddU64Le, Update::Upsert(v)) = (resolve, update) {
        // Combining values of other lengths would not be associative.
        if v.len() != 8 {
            return Err(Error::InvalidUpdate(format!(
                "an upsert on an AddU64Le table needs an 8-byte value, got {} bytes",
                v.len()
            )));
        }
    }
    let (value, blob) = match update {
        Update::Insert(v) | Update::Upsert(v) => (*v, None),
        Update::InsertWithBlob(v, b) => (*v, Some(*b)),
        Update::Delete => (&[][..], None),
    };
    if value.len() > VALUE_SIZE_MAX {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: VALUE_SIZE_MAX,
        });
    }
    if let Some(blob) = blob {
        if blob.len() as u64 > BLOB_SIZE_MAX {
            return Err(Error::BlobTooLarge {
                len: blob.len() as u64,
                max: BLOB_SIZE_MAX,
            });
        }
    }
    Ok(())
}
