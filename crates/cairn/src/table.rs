//! Tables: the public key-value API over one write buffer and its levels.
//!
//! Owns: [`Table`], [`Update`], [`TableStats`], and the update path (validation, credits, flushes).
//! May call: `write_buffer`, `flush` (a frozen write buffer's run), `schedule`, `lookup`, `run`,
//! `sorted` (writing runs in parts),
//! `entry`, `page` (operation codes),
//! `cursor` (streams), `union`, `snapshot`, `session` (its shared parts), `auth`, `trie` and
//! `pagelog` (an authenticated table's Merkle trie and where its snapshot keeps it), `durable` (a durable table's writes go through the
//! log). Must never
//! touch: page, index or filter bytes directly (that is `run`'s and `lookup`'s job).
//!
//! Concurrency: a table's state sits behind one reader-writer lock. Lookups hold the read lock
//! only to read the write buffer and collect the runs to consult (`Arc`s), then do their I/O
//! without it, so lookups run concurrently with each other and with updates. Updates take the
//! write lock, so writes to one table are serialised by the API.
//!
//! Consistency after an error: an update batch that fails half way (an I/O error while writing a
//! run or merging) leaves the table *broken*: every later operation fails with
//! [`Error::TableBroken`] rather than risk a wrong answer. As in lsm-tree, the remedy is to close
//! the table and reopen from a snapshot. Input errors (an oversized key, say) are found before
//! anything is applied and leave the table usable.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use std::ops::Bound;

use cairn_proof::{Hash, Leaf, Proof, Root};

use crate::auth::{Auth, AuthStats, Commit};
use crate::config::{MergeSchedule, Resolve, TableConfig};
use crate::cursor::{Cursor, CursorEntry, KeyRange, StampedEntries};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::flush::SharedFlush;
use crate::lookup::{lookup_runs, results, BlobRef, BlobSource, LookupResult, Partial};
use crate::page::{Op, KEY_SIZE_MAX, VALUE_SIZE_MAX};
use crate::run::RunParams;
use crate::schedule::{merge_steps_per_update_max, Levels};
use crate::session::SessionInner;
use crate::snapshot::{self};
use crate::snapshot::{with_merge_context, SnapshotOverrides};
use crate::sorted::{PartWriter, SortedRun};
use crate::trie::Change;
use crate::union::{TableView, UnionLevel};
use crate::write_buffer::{MemBlob, WriteBuffer};

/// Why a table whose lock was poisoned is broken.
const PANICKED: &str = "a panic (in a resolve function) interrupted an update of this table";

/// Keys per commit when a union's trie is built by re-insertion.
const TRIE_BUILD_CHUNK: usize = 1 << 16;

/// Largest blob, in bytes.
pub const BLOB_SIZE_MAX: u64 = u32::MAX as u64;

/// One update in a batch given to [`Table::updates`].
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
}

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

#[derive(Debug)]
pub(crate) struct TableInner {
    id: u64,
    session: Arc<SessionInner>,
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
/// (cursors, unions, snapshots) first finish it ([`Table::settle_flush`]): at most `B` entries,
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

/// A table: a sorted map from byte-string keys to byte-string values (with optional blobs).
///
/// `Table` is a cheap, cloneable handle (an `Arc` inside), `Send + Sync`: clone it to use the
/// same table from several threads. A clone is the *same* table (an update through one handle is
/// seen through every other); [`Table::duplicate`] makes an independent copy instead.
///
/// A table keeps its session open: it stays usable after every [`crate::Session`] handle is
/// dropped, and its memory and files are released when its last handle (and the last cursor
/// reading it) is dropped. Only an explicit [`Table::close`] or [`crate::Session::close`] ends it
/// early; later calls then fail with [`Error::TableClosed`].
#[derive(Debug, Clone)]
pub struct Table {
    inner: Arc<TableInner>,
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

impl TableInner {
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

impl Table {
    pub(crate) fn new(session: Arc<SessionInner>, config: TableConfig) -> Result<Table> {
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
        Table::with_contents(
            session,
            config,
            params,
            (WriteBuffer::default(), imbl::OrdSet::new()),
            Levels::default(),
            None,
            auth,
        )
    }

    fn with_contents(
        session: Arc<SessionInner>,
        config: TableConfig,
        params: RunParams,
        (write_buffer, dirty): (WriteBuffer, imbl::OrdSet<Vec<u8>>),
        levels: Levels,
        union: Option<Arc<UnionLevel>>,
        auth: Option<Auth>,
    ) -> Result<Table> {
        let inner = Arc::new(TableInner {
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
        inner.session.register_table(&inner)?;
        Ok(Table { inner })
    }

    /// An independently writable copy of the table, made without disk I/O: it shares every run
    /// (files are reference-counted and deleted when the last user lets go) and every merge in
    /// progress (merge work paid through one handle is not done again through the other), and
    /// shares the write buffer (persistent maps in two layers: O(1) to share; while both
    /// handles live, each one's updates go to a layer of its own rather than copying shared
    /// nodes). A write buffer being flushed is shared too, and the copy writes its own run of
    /// it only if it is updated or settled (at most `B` entries, spread over its updates; see
    /// `docs/design.md`, "Update path"). Cost: O(levels + runs) reference counts, one removal
    /// step of released files, and, when no other copy shares the buffer's older layer, moving
    /// the newer layer into it in place (the entries updated since the last duplicate: at most
    /// `B`, O(log B) each).
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::SessionClosed`],
    /// [`Error::Io`] (removing released files).
    pub fn duplicate(&self) -> Result<Table> {
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
        let (write_buffer, frozen, dirty, levels, union) = {
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
        let copy = Table::with_contents(
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
    pub fn config(&self) -> &TableConfig {
        &self.inner.config
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
    /// reads are to take one (`SessionInner::remove_released_for_read`; a failed
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
    /// marks the table broken (see [`Table::read`]).
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

    // --------------------------------------------------------------------------------------------
    // Updates

    /// Sets `key` to `value` (dropping any blob).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::TableClosed`],
    /// [`Error::TableBroken`], [`Error::Io`] (the table is then broken, unless the error came from
    /// removing released files before the update started).
    pub fn insert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.updates(&[(key, Update::Insert(value.as_ref()))])
    }

    /// Sets `key` to `value` with a blob.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::BlobTooLarge`],
    /// [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`] (the table is then broken,
    /// unless the error came from removing released files before the update started).
    pub fn insert_with_blob(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        blob: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.updates(&[(key, Update::InsertWithBlob(value.as_ref(), blob.as_ref()))])
    }

    /// Removes `key`.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`] (the table is then broken, unless the error came from removing released files
    /// before the update started).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.updates(&[(key, Update::Delete)])
    }

    /// Combines `value` with the key's current value (see [`Update::Upsert`]).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::InvalidUpdate`] (an
    /// `AddU64Le` value that is not 8 bytes), [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`] (the table is then broken, unless the error came from removing released files
    /// before the update started).
    pub fn upsert(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.updates(&[(key, Update::Upsert(value.as_ref()))])
    }

    /// Inserts every pair, in order.
    ///
    /// Errors: as [`Table::updates`].
    pub fn inserts<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<()> {
        let batch: Vec<_> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref(), Update::Insert(v.as_ref())))
            .collect();
        self.updates(&batch)
    }

    /// Deletes every key, in order.
    ///
    /// Errors: as [`Table::updates`].
    pub fn deletes<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        let batch: Vec<_> = keys.iter().map(|k| (k.as_ref(), Update::Delete)).collect();
        self.updates(&batch)
    }

    /// Upserts every pair, in order.
    ///
    /// Errors: as [`Table::updates`].
    pub fn upserts<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<()> {
        let batch: Vec<_> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref(), Update::Upsert(v.as_ref())))
            .collect();
        self.updates(&batch)
    }

    /// Applies a batch of inserts, upserts and deletes, in order.
    ///
    /// The whole batch is validated first: an oversized key, value or blob rejects the batch
    /// before anything is applied. Each update then costs O(log B) in the write buffer plus at
    /// most [`TableStats::merge_steps_bound_per_update`] merge steps (incremental schedule); the
    /// update that fills the write buffer also writes it out as a run (B entries, sequential I/O).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], [`Error::BlobTooLarge`],
    /// [`Error::InvalidUpdate`] (input errors refuse the whole batch before anything is applied),
    /// [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`] (the table is then broken,
    /// unless the error came from removing released files before the update started).
    ///
    /// Keys may be anything that is `AsRef<[u8]>` (`&[u8]`, `Vec<u8>`, `&str`, `[u8; N]`, ...):
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let session = cairn::Session::open(dir.path()).unwrap();
    /// # let table = session.new_table(cairn::TableConfig::default()).unwrap();
    /// use cairn::Update;
    /// table.updates(&[("alice", Update::Insert(b"10")), ("bob", Update::Delete)])?;
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// An empty batch changes nothing (blob references stay valid).
    pub fn updates<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<()> {
        if self.inner.durable_id.get().is_some() {
            return self.write(batch).map(drop);
        }
        self.validate_batch(batch)?;
        self.apply_updates(batch)
    }

    /// Applies `batch` to a durable table and logs it as one record: returns once it is applied
    /// in memory and appended to the log's buffer, with a [`crate::Durability`] that tells when
    /// it is on disk. The one-table case of [`crate::Session::write`]; `updates` on a durable
    /// table does the same and drops the handle.
    ///
    /// Errors: [`Error::NotDurable`] for a table that is not durable, [`Error::LogFailed`], and
    /// as [`Table::updates`].
    pub fn write<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<crate::Durability> {
        crate::durable::write(&self.inner.session, &[(self, batch)])
    }

    /// Whether the table is durable (made by [`crate::Session::create_durable_table`]).
    pub fn is_durable(&self) -> bool {
        self.inner.durable_id.get().is_some()
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
    pub(crate) fn in_session(&self, session: &Arc<SessionInner>) -> bool {
        Arc::ptr_eq(&self.inner.session, session)
    }

    /// Checks every update of `batch` against the table's limits and rules, before anything is
    /// applied or logged.
    pub(crate) fn validate_batch<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<()> {
        for (key, update) in batch {
            validate(key.as_ref(), update, &self.inner.config.resolve)?;
        }
        Ok(())
    }

    /// Applies a validated batch (no logging).
    pub(crate) fn apply_updates<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<()> {
        if batch.is_empty() {
            // Still report a closed or broken table.
            drop(self.read()?);
            return Ok(());
        }
        self.inner.session.check_writable("an update")?;
        let mut state = self.lock_write()?;
        for (key, update) in batch {
            let key = key.as_ref();
            if let Err(e) = self.apply_one(&mut state, key, update) {
                // A run or merge failed half way: answers could be wrong from now on, so the
                // table refuses every further operation.
                state.broken = Some(e.with_causes());
                return Err(e);
            }
            if self.inner.auth.is_some() {
                // No hashing and no trie I/O here: the commit rehashes (lazily).
                state.dirty.insert(key.to_vec());
            }
        }
        Ok(())
    }

    fn apply_one(&self, state: &mut TableState, key: &[u8], update: &Update<'_>) -> Result<()> {
        state.epoch += 1;
        let config = &self.inner.config;
        migrate_finished_union(state, config.write_buffer_entries);
        let union_below = state.union.is_some();
        let steps = with_merge_context(
            &self.inner.session,
            config,
            &self.inner.params,
            union_below,
            |ctx| {
                let mut steps = state.levels.supply_credits(ctx, 1)?;
                let (op, value, blob) = match *update {
                    Update::Insert(v) => (Op::Insert, v, None),
                    Update::InsertWithBlob(v, b) => (Op::Insert, v, Some(MemBlob::from(b))),
                    Update::Upsert(v) => (Op::Upsert, v, None),
                    Update::Delete => (Op::Delete, &[][..], None),
                };
                state
                    .write_buffer
                    .apply(key, op, value, blob, &config.resolve);
                steps += self.advance_flush(state, ctx, FLUSH_ENTRIES_PER_UPDATE)?;
                if state.write_buffer.len() >= config.write_buffer_entries {
                    // The previous flush had at least `B` updates to finish in: normally done.
                    steps += self.advance_flush(state, ctx, usize::MAX)?;
                    self.start_flush(state)?;
                }
                Ok(steps)
            },
        )?;
        state.merge_steps_total += steps;
        state.merge_steps_max_per_update = state.merge_steps_max_per_update.max(steps);
        state.merge_steps_last_update = steps;
        Ok(())
    }

    /// Freezes the full write buffer as [`Flushing`] and gives the table a fresh one, handing
    /// the flush to the background thread if the session has one. O(1) memory work; the run's
    /// first file is created with its first entry.
    fn start_flush(&self, state: &mut TableState) -> Result<()> {
        debug_assert!(state.flushing.is_none());
        let buffer = std::mem::take(&mut state.write_buffer);
        let writer = self.flush_writer(buffer.len(), state.levels.level_count());
        let shared = Arc::new(SharedFlush::new(buffer.clone(), writer));
        if let Some(background) = self.inner.session.background() {
            background.register_flush(&shared);
        }
        state.flushing = Some(Flushing {
            buffer,
            shared,
            paid: 0,
        });
        Ok(())
    }

    /// A writer for the run of a frozen buffer of `entries` entries (its first file is created
    /// with its first entry), for level 1 of a table with `levels` levels.
    fn flush_writer(&self, entries: usize, levels: usize) -> PartWriter {
        let session = &self.inner.session;
        PartWriter::new(
            session.fs().clone(),
            &self.inner.params.for_level(1, levels),
            session.next_run_number(),
            entries as u64,
            self.inner.config.part_entries,
            self.inner.config.disk_cache.caches_level(1),
        )
    }

    /// Pays for `entries` more entries of the frozen buffer (if there is one) and writes those
    /// not written yet once a chunk's worth is due (all that remain for `usize::MAX`); once all
    /// are paid for, finishes the run (if nobody has) and adds it to level 1. Returns the merge
    /// steps adding it performed.
    fn advance_flush(
        &self,
        state: &mut TableState,
        ctx: &crate::schedule::MergeContext<'_>,
        entries: usize,
    ) -> Result<u64> {
        let Some(flushing) = state.flushing.as_mut() else {
            return Ok(0);
        };
        let len = flushing.shared.len();
        flushing.paid = flushing.paid.saturating_add(entries).min(len);
        let written = flushing.shared.written();
        if flushing.paid < len && flushing.paid.saturating_sub(written) < FLUSH_CHUNK {
            return Ok(0);
        }
        let output = flushing.shared.write_up_to(flushing.paid)?;
        if flushing.paid < len {
            return Ok(0);
        }
        let Some(run) = output else {
            return Err(Error::TableBroken(
                "a flush wrote every entry but has no run".into(),
            ));
        };
        let Some(flushing) = state.flushing.take() else {
            return Ok(0);
        };
        match self.inner.session.background() {
            // Freeing B entries (an allocation each) is the background thread's work.
            Some(background) => background.free(Box::new(flushing.buffer)),
            None => drop(flushing.buffer),
        }
        match run {
            Some(run) => state.levels.add_flushed_run(ctx, run),
            None => Ok(0),
        }
    }

    /// Finishes a flush in progress (see [`Flushing`]): at most `B` entries written and one run
    /// added to level 1. Returns the merge steps the run's arrival performed. An error breaks
    /// the table, as it would have broken the update.
    fn settle_flush(&self, state: &mut TableState) -> Result<u64> {
        if state.flushing.is_none() {
            return Ok(0);
        }
        let union_below = state.union.is_some();
        let outcome = with_merge_context(
            &self.inner.session,
            &self.inner.config,
            &self.inner.params,
            union_below,
            |ctx| self.advance_flush(state, ctx, usize::MAX),
        );
        match outcome {
            Ok(steps) => {
                state.merge_steps_total += steps;
                Ok(steps)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }

    /// Finishes the work updates leave in progress in memory: a full write buffer still being
    /// written out as a run, a few entries per update (`docs/design.md`, "Update path").
    /// Cursors, range lookups, unions, snapshots and duplicates do this themselves; call it to
    /// pay that work at a moment of your choosing. Cost: at most `write_buffer_entries` entries
    /// written and one run added to level 1 (which may start merges and pay merge steps that
    /// the run's arrival makes due); nothing when no flush is in progress.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`] (the table is then
    /// broken).
    pub fn settle(&self) -> Result<()> {
        self.with_settled(|_| ())
    }

    /// Brings the table to rest: settles a flush in progress (as [`Table::settle`]), then
    /// finishes every merge in progress, so that [`TableStats::merges_in_progress`] is 0 and no
    /// update pays for merges started before this call. Use it after a bulk load, before saving
    /// the snapshot later sessions start from, or before a measurement that should not pay
    /// for the load's merges. Returns the merge steps performed (the settled flush's included).
    ///
    /// Apart from the settled flush's run arriving at level 1 (which, as at any flush, may move
    /// full levels down and start merges, all finished here too), no run moves between levels
    /// and no merge starts. The schedule's bound on the merge steps of any single update still
    /// holds afterwards: every merge is finished, and the flushes after the settled one arrive
    /// at their usual pace (one per `write_buffer_entries` updates), so every merge started
    /// later has its usual number of updates to be paid by. Merges are shared with duplicates, which see them finished
    /// too. An incremental union below the levels is not touched (see
    /// [`Table::supply_union_credits`]).
    ///
    /// Cost: every step left in the merges in progress, each level's entries read and written
    /// at most once per level they pass through (the settled flush can make merges cascade), in
    /// the memory of one merge at a time. It holds the table's write lock throughout, so
    /// updates and lookups on this handle wait for it, and holds each merge's lock until that
    /// merge is finished, so a duplicate's update that needs the same merge waits too.
    ///
    /// Errors: [`Error::ReadOnly`], [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`]
    /// (the table is then broken).
    pub fn complete_merges(&self) -> Result<u64> {
        self.inner.session.check_writable("completing merges")?;
        let mut state = self.lock_write()?;
        let settled = self.settle_flush(&mut state)?;
        match state.levels.complete_merges() {
            Ok(steps) => {
                state.merge_steps_total += steps;
                Ok(settled + steps)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }

    /// Runs `f` on the table's state with no flush in progress (settling one first, under the
    /// write lock): for operations that hand the structure elsewhere.
    fn with_settled<T>(&self, f: impl FnOnce(&TableState) -> T) -> Result<T> {
        let state = self.read()?;
        if state.flushing.is_none() {
            return Ok(f(&state));
        }
        drop(state);
        let mut state = self.lock_write()?;
        self.settle_flush(&mut state)?;
        Ok(f(&state))
    }

    // --------------------------------------------------------------------------------------------
    // Lookups

    /// Looks up one key.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn lookup(&self, key: impl AsRef<[u8]>) -> Result<LookupResult> {
        let mut results = self.lookups(&[key])?;
        Ok(results.pop().unwrap_or(LookupResult::NotFound))
    }

    /// Looks up a batch of keys: the fast path. Every key is hashed once, every run's filter is
    /// probed, and the page reads of the batch are submitted together.
    ///
    /// Bounds: at most `keys.len() * runs` page-span reads (in practice about one per present
    /// key, plus `fpr * runs` per key), in waves of at most 16 MiB of pages (one arena, reused);
    /// memory besides the results: that arena plus 68 bytes per key (module `lookup`).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn lookups<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<LookupResult>> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        let plan = {
            let state = self.read()?;
            Self::plan_lookups(&state, keys, &self.inner.config.resolve)
        };
        self.finish_lookups(keys, plan)
    }

    /// The write buffer's entries for `keys` and the runs to consult: O(keys · log B + runs).
    /// A key's entry in the write buffer combines with an older one in the buffer being
    /// flushed, as entries of runs do (`resolve`).
    fn plan_lookups<K: AsRef<[u8]>>(
        state: &TableState,
        keys: &[K],
        resolve: &Resolve,
    ) -> LookupPlan {
        let frozen = state.flushing.as_ref().map(|f| &f.buffer);
        let partial: Vec<Partial> = keys
            .iter()
            .map(|k| {
                let newest = state.write_buffer.get(k.as_ref()).map(to_partial);
                match (newest, frozen) {
                    // A final entry, or nothing older in memory: as it is.
                    (Some(e), _) if e.is_final() => Some(e),
                    (newest, None) => newest,
                    (None, Some(frozen)) => frozen.get(k.as_ref()).map(to_partial),
                    (Some(upsert), Some(frozen)) => match frozen.get(k.as_ref()) {
                        None => Some(upsert),
                        Some(older) => {
                            Some(upsert.combine_older(older.op(), older.value(), resolve))
                        }
                    },
                }
            })
            .collect();
        let mut runs = Vec::new();
        state.levels.runs_newest_first(&mut runs);
        LookupPlan {
            partial,
            runs,
            epoch: state.epoch,
            union: state.union.clone(),
        }
    }

    /// The lookups' I/O, without any lock.
    fn finish_lookups<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        plan: LookupPlan,
    ) -> Result<Vec<LookupResult>> {
        let session = &self.inner.session;
        let resolve = &self.inner.config.resolve;
        let mut partial = lookup_runs(
            session.io(),
            session.salt(),
            keys,
            plan.partial,
            &plan.runs,
            resolve,
        )?;
        if let Some(union) = plan.union {
            partial =
                union.complete_lookups(session.io(), session.salt(), keys, partial, resolve)?;
        }
        Ok(results(partial, self.inner.id, plan.epoch))
    }

    /// Whether `key` is present.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn member(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.lookup(key)?.value().is_some())
    }

    /// Whether each key is present.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn members<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        Ok(self
            .lookups(keys)?
            .iter()
            .map(|r| r.value().is_some())
            .collect())
    }

    /// Reads the blob a lookup returned a reference to. Fails with [`Error::BlobRefInvalid`] if
    /// the table has been updated since that lookup (an empty [`Table::updates`] batch does not
    /// count), or if the reference came from another table.
    ///
    /// Errors: [`Error::BlobRefInvalid`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn retrieve_blob(&self, blob: &BlobRef) -> Result<Vec<u8>> {
        let state = self.read()?;
        if blob.table_id != self.inner.id || blob.epoch != state.epoch {
            return Err(Error::BlobRefInvalid);
        }
        blob.read()
    }

    /// Whether `blob` can still be read through this table: it came from this table (or from a
    /// cursor over it) and the table has not been updated since.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn blob_ref_is_valid(&self, blob: &BlobRef) -> Result<bool> {
        let state = self.read()?;
        Ok(blob.table_id == self.inner.id && blob.epoch == state.epoch)
    }

    /// Reads several blobs; fails on the first invalid reference.
    ///
    /// Errors: [`Error::BlobRefInvalid`] (a reference from another table or made stale by an
    /// update), [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn retrieve_blobs(&self, blobs: &[BlobRef]) -> Result<Vec<Vec<u8>>> {
        blobs.iter().map(|b| self.retrieve_blob(b)).collect()
    }

    // --------------------------------------------------------------------------------------------
    // Cursors and range lookups

    /// The table's entries from the first key `>= from` (or the first key) up to `end`, as a
    /// stable view. Cost: O(1) memory for the write buffer (a persistent map, shared).
    fn merged_entries(&self, from: Option<&[u8]>, end: Bound<Vec<u8>>) -> Result<StampedEntries> {
        if let Some(key) = from {
            check_key(key)?;
        }
        let view = self.view()?;
        let entries = view.stream(from, &self.inner.config.resolve)?;
        Ok(StampedEntries::new(entries, self.inner.id, view.epoch, end))
    }

    /// A frozen view of the table (for a union or a stream): an O(1) clone of the write buffer
    /// and `Arc`s of the runs; no copy, no disk I/O.
    ///
    /// A write-buffer flush in progress is finished first (at most `B` entries written).
    fn view(&self) -> Result<TableView> {
        self.with_settled(|state| {
            let mut runs = Vec::new();
            state.levels.runs_newest_first(&mut runs);
            TableView {
                buffer: state.write_buffer.clone(),
                runs,
                union: state.union.clone(),
                epoch: state.epoch,
            }
        })
    }

    // --------------------------------------------------------------------------------------------
    // Unions

    /// A new table holding the union of `tables`: for a key in several of them, the values are
    /// combined left to right with the first table's resolve function (`resolve(left, right)`;
    /// with `KeepNewest` the leftmost table wins). The result has the first table's config.
    ///
    /// Starting costs O(1) I/O (write buffers are copied in memory, runs are shared); the work is
    /// paid with [`Table::supply_union_credits`], one output key per credit, while lookups, range
    /// lookups and cursors see the whole union at all times. Errors: [`Error::InvalidConfig`]
    /// for no tables, tables of different sessions, or tables with different resolve functions
    /// (custom functions are the same when their names are, see [`Resolve`]).
    ///
    /// When a key is in several inputs their values are combined and the result has no blob
    /// (as an upsert drops a blob), even with `KeepNewest`.
    pub fn incremental_unions(tables: &[&Table]) -> Result<Table> {
        let Some(first) = tables.first() else {
            return Err(Error::InvalidConfig(
                "a union needs at least one table".into(),
            ));
        };
        let session = first.inner.session.clone();
        session.check_writable("a union")?;
        if tables
            .iter()
            .any(|t| !Arc::ptr_eq(&t.inner.session, &session))
        {
            return Err(Error::InvalidConfig(
                "every table of a union must belong to the same session".into(),
            ));
        }
        if !tables
            .iter()
            .all(|t| t.inner.config.auth.map(|a| a.hash) == first.inner.config.auth.map(|a| a.hash))
        {
            return Err(Error::InvalidConfig(
                "every table of a union must be authenticated alike (with the same hash) or \
                 not at all"
                    .into(),
            ));
        }
        if !tables
            .iter()
            .all(|t| t.inner.config.resolve == first.inner.config.resolve)
        {
            return Err(Error::InvalidConfig(
                "every table of a union must use the same resolve function".into(),
            ));
        }
        let views = tables
            .iter()
            .map(|t| t.view().map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let config = first.inner.config.clone();
        let params = first.inner.params.clone();
        let union = UnionLevel::for_table(session.fs().clone(), &config, &params, views);
        let auth = config
            .auth
            .as_ref()
            .map(|auth| Auth::new(session.clone(), auth));
        let table = Table::with_contents(
            session,
            config,
            params,
            (WriteBuffer::default(), imbl::OrdSet::new()),
            Levels::default(),
            Some(Arc::new(union)),
            auth,
        )?;
        if table.inner.auth.is_some() {
            table.build_trie()?;
        }
        Ok(table)
    }

    /// The union of `self` and `other`, started incrementally (see [`Table::incremental_unions`]).
    ///
    /// Errors: as [`Table::incremental_unions`].
    pub fn incremental_union(&self, other: &Table) -> Result<Table> {
        Table::incremental_unions(&[self, other])
    }

    /// The union of `tables`, done at once (see [`Table::incremental_unions`]).
    ///
    /// Errors: as [`Table::incremental_unions`], plus I/O errors of the union work.
    pub fn unions(tables: &[&Table]) -> Result<Table> {
        let table = Table::incremental_unions(tables)?;
        while table.remaining_union_debt()? > 0 {
            let debt = table.remaining_union_debt()?;
            table.supply_union_credits(debt)?;
        }
        Ok(table)
    }

    /// The union of `self` and `other`, done at once.
    ///
    /// Errors: as [`Table::unions`].
    pub fn union(&self, other: &Table) -> Result<Table> {
        Table::unions(&[self, other])
    }

    /// An upper bound on the union credits still needed to finish this table's union (0 when it
    /// has none or it is finished). It never increases; work supplied through a duplicate
    /// lowers it too.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn remaining_union_debt(&self) -> Result<u64> {
        let state = self.read()?;
        Ok(state.union.as_ref().map_or(0, |u| u.remaining_debt()))
    }

    /// Does up to `credits` steps of union work (one output key each) and returns the credits
    /// left over, which is positive only when the union has finished.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`] (the table is then
    /// broken, unless the error came from removing released files before the update started).
    pub fn supply_union_credits(&self, credits: u64) -> Result<u64> {
        self.inner.session.check_writable("union work")?;
        let mut state = self.lock_write()?;
        let Some(union) = state.union.clone() else {
            return Ok(credits);
        };
        let session = &self.inner.session;
        let result = union.supply_credits(credits, || session.next_run_number());
        match result {
            Ok(leftover) => {
                migrate_finished_union(&mut state, self.inner.config.write_buffer_entries);
                Ok(leftover)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }

    /// A cursor over the whole table in key order. It is a stable view: updates made after it
    /// opens are invisible through it. See [`Cursor`].
    ///
    /// Cost: one span read per run to start; memory: a 64 KiB chunk per run and a small chunk of
    /// the write buffer, whatever the table's size (the write buffer is shared, not copied).
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn cursor(&self) -> Result<Cursor> {
        self.range(..)
    }

    /// A cursor starting at the first key `>= key` (see [`Table::cursor`]).
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn cursor_at(&self, key: impl AsRef<[u8]>) -> Result<Cursor> {
        self.range(key.as_ref()..)
    }

    /// A cursor over every entry whose key lies in `range`, in key order (see [`Table::cursor`]).
    /// Both bounds may be inclusive, exclusive or open: `a..b`, `a..=b`, `a..`, `..b`, `..`, or
    /// a pair of [`Bound`]s such as `(Bound::Excluded(a), Bound::Unbounded)`, with `a` and `b`
    /// anything `AsRef<[u8]>` (`&[u8]`, `Vec<u8>`, `&str`, ...). An empty range gives nothing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let session = cairn::Session::open(dir.path()).unwrap();
    /// # let table = session.new_table(cairn::TableConfig::default()).unwrap();
    /// table.inserts(&[("a", "1"), ("b", "2"), ("c", "3")])?;
    /// let keys: Vec<Vec<u8>> = table
    ///     .range("a".."c")?
    ///     .map(|entry| entry.map(|e| e.key))
    ///     .collect::<cairn::Result<_>>()?;
    /// assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// Errors: [`Error::KeyTooLarge`] when either bound is longer than [`KEY_SIZE_MAX`],
    /// [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn range(&self, range: impl KeyRange) -> Result<Cursor> {
        if let Bound::Included(k) | Bound::Excluded(k) = range.end_key() {
            check_key(k)?;
        }
        let from = match range.start_key() {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        let end = range.end_key().map(<[u8]>::to_vec);
        let entries = self.merged_entries(from, end)?;
        let mut cursor = Cursor::new(entries, self.inner.session.clone());
        self.inner.session.register_cursor(cursor.inner())?;
        if let Bound::Excluded(k) = range.start_key() {
            if cursor.peek()?.is_some_and(|e| e.key == k) {
                if let Some(Err(e)) = cursor.next() {
                    return Err(e);
                }
            }
        }
        Ok(cursor)
    }

    /// Every entry whose key lies in `range`, in key order, collected (see [`Table::range`]).
    ///
    /// Cost: as a cursor, plus the entries returned (all held in memory). Errors: as
    /// [`Table::range`].
    pub fn range_lookup(&self, range: impl KeyRange) -> Result<Vec<CursorEntry>> {
        self.range(range)?.collect()
    }

    // --------------------------------------------------------------------------------------------
    // Snapshots

    /// Saves the table as snapshot `name` with `label` (checked when the snapshot is opened).
    ///
    /// Costs O(runs) = O(log n) file operations: five hard links and one fsync per run, the write
    /// buffer written once, and the metadata. Durable when it returns; atomic (a crash leaves no
    /// snapshot or a complete one). Errors: [`Error::InvalidSnapshotName`],
    /// [`Error::SnapshotExists`], I/O errors.
    pub fn save_snapshot(&self, name: &str, label: &str) -> Result<()> {
        snapshot::validate_name(name)?;
        self.save_snapshot_as(name, label)
    }

    /// Saves the table as snapshot `name`, which is not checked (a checkpoint's internal name).
    pub(crate) fn save_snapshot_as(&self, name: &str, label: &str) -> Result<()> {
        self.inner.session.check_writable("saving a snapshot")?;
        if let Some(mut auth) = self.lock_auth()? {
            return self.save_authenticated(&mut auth, name, label);
        }
        // What is saved is planned first, without I/O: a closed or broken table writes nothing.
        let contents = self.snapshot_contents()?;
        snapshot::save_table(
            &self.inner.session,
            &self.inner.params,
            name,
            label,
            contents,
            None,
        )
    }

    /// Saves an authenticated table: commits what changed (so the snapshot records the root of
    /// exactly the contents it saves), writes the retained trie pages changed since the last
    /// snapshot to the page log, and saves the table with the trie's segments in one snapshot.
    fn save_authenticated(&self, auth: &mut Auth, name: &str, label: &str) -> Result<()> {
        let (pending, mut contents) = {
            let mut state = self.lock_write()?;
            self.settle_flush(&mut state)?;
            let pending = Self::take_dirty(&mut state, &self.inner.config.resolve);
            (pending, self.plan_snapshot(&state))
        };
        self.commit_pending(auth, pending)?;
        let (meta, files) = auth.snapshot_meta()?;
        contents.auth = Some(meta);
        snapshot::save_table(
            &self.inner.session,
            &self.inner.params,
            name,
            label,
            contents,
            Some(files),
        )
    }

    /// The table's contents planned for a snapshot, at one instant.
    fn snapshot_contents(&self) -> Result<snapshot::SnapshotContents> {
        self.with_settled(|state| self.plan_snapshot(state))
    }

    /// The contents of `state` planned for a snapshot: O(runs) reference counts, no I/O.
    fn plan_snapshot(&self, state: &TableState) -> snapshot::SnapshotContents {
        snapshot::plan(
            &self.inner.config,
            &state.levels,
            &state.write_buffer,
            state.union.as_ref(),
        )
    }

    /// Opens snapshot `name` as a new table of `session` (see [`crate::Session::open_snapshot`]).
    pub(crate) fn open_snapshot(
        session: Arc<SessionInner>,
        name: &str,
        label: &str,
        overrides: SnapshotOverrides,
    ) -> Result<Table> {
        let restored = snapshot::restore(&session, name, label, overrides)?;
        let auth = match (&restored.auth, &restored.config.auth) {
            (Some(meta), Some(config)) => match Table::restore_auth(&session, name, meta, config) {
                Ok(auth) => Some(auth),
                Err(e) => {
                    // Release the table's runs opened so far, and remove their links now.
                    drop(restored);
                    session.try_remove_released();
                    return Err(e);
                }
            },
            _ => None,
        };
        Table::with_contents(
            session,
            restored.config,
            restored.params,
            (restored.write_buffer, imbl::OrdSet::new()),
            restored.levels,
            restored.union,
            auth,
        )
    }

    // --------------------------------------------------------------------------------------------
    // Authentication (tables created with `TableConfig::auth`)

    /// Commits the updates made since the last commit to the table's Merkle trie and returns
    /// the new version and its state root (the same ones again if nothing changed). The root
    /// depends only on the table's contents (`docs/format/trie.md`).
    ///
    /// Cost, for `k` keys updated since the last commit in a table of `n` keys: one batched
    /// lookup of those keys (memory only for keys still in the write buffer; upserts are
    /// resolved by it), reading each blob among them once; 3 hashes per key (4 with a blob) plus
    /// about `k·(log₂ n − log₂ k + 2)` node hashes; one round of batched page reads (at most
    /// 4 MiB per batch) per trie page level below the retained ones, for pages not prefetched
    /// ([`Table::prefetch`]); one append of the changed pages to the session's page log (one
    /// write per stream); and, while the
    /// version's segments of a stream hold more than their bound (`docs/design.md`,
    /// "Reclamation"), a piece of the emptying of an old segment: a sequential read of twice
    /// the bytes the commit appended to that stream (at least 1 MiB), the appends of the pages
    /// still live in it, and for deep pages their parents' reads and appends. Where the time
    /// goes is counted in [`Table::auth_stats`] ([`crate::CommitTime`]). Updates and lookups
    /// of the table proceed meanwhile (the commit works on the contents as of its start);
    /// commits, proofs and duplicates of this table wait for it.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`] and corruption of a trie page (the table is then broken: a later root could
    /// be wrong).
    pub fn commit(&self) -> Result<Commit> {
        let mut auth = self.auth()?;
        let pending = {
            let mut state = self.lock_write()?;
            Self::take_dirty(&mut state, &self.inner.config.resolve)
        };
        self.commit_pending(&mut auth, pending)
    }

    /// The keys updated since the last commit and the lookup of their values, taken at one
    /// instant (under the write lock).
    fn take_dirty(state: &mut TableState, resolve: &Resolve) -> Option<(Vec<Vec<u8>>, LookupPlan)> {
        if state.dirty.is_empty() {
            return None;
        }
        let keys: Vec<Vec<u8>> = std::mem::take(&mut state.dirty).into_iter().collect();
        let plan = Self::plan_lookups(state, &keys, resolve);
        Some((keys, plan))
    }

    /// Commits what [`Table::take_dirty`] took; an error breaks the table (the keys' changes
    /// never reached the trie, so a later root would be wrong).
    fn commit_pending(
        &self,
        auth: &mut Auth,
        pending: Option<(Vec<Vec<u8>>, LookupPlan)>,
    ) -> Result<Commit> {
        let Some((keys, plan)) = pending else {
            return Ok(auth.current());
        };
        let result = self.commit_keys(auth, &keys, plan);
        if let Err(e) = &result {
            let mut state = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
            state.broken.get_or_insert_with(|| e.with_causes());
        }
        result
    }

    fn commit_keys(&self, auth: &mut Auth, keys: &[Vec<u8>], plan: LookupPlan) -> Result<Commit> {
        let kind = auth.trie.kind;
        let started = std::time::Instant::now();
        let found = self.finish_lookups(keys, plan)?;
        let mut changes = Vec::with_capacity(keys.len());
        let mut hashes = 0u64;
        for (key, result) in keys.iter().zip(found) {
            // Key path, value hash, and the blob's hash if any (the leaf hash is the trie's).
            hashes += match &result {
                LookupResult::NotFound => 1,
                LookupResult::Found(_) => 2,
                LookupResult::FoundWithBlob(..) => 3,
            };
            let leaf = match &result {
                LookupResult::NotFound => None,
                LookupResult::Found(v) => Some(Leaf::new(kind, key, v, None)),
                LookupResult::FoundWithBlob(v, blob) => {
                    Some(Leaf::new(kind, key, v, Some(&blob.read()?)))
                }
            };
            let key_path = match &leaf {
                Some(l) => l.key_path,
                None => kind.key_path(key),
            };
            changes.push(Change { key_path, leaf });
        }
        changes.sort_unstable_by_key(|a| a.key_path);
        auth.count_hashes(hashes);
        auth.count_values_time(started.elapsed());
        auth.commit(&changes)
    }

    /// The state root of the table's current contents: [`Table::commit`]'s root (committing
    /// first if anything changed since the last commit).
    ///
    /// Errors: as [`Table::commit`].
    pub fn root(&self) -> Result<Root> {
        Ok(self.commit()?.root)
    }

    /// A multiproof for `keys` against the latest commit (call [`Table::commit`] first to prove
    /// the current contents): for each key, its leaf (inclusion: the hashes of its value and
    /// blob) or the empty subtree or other leaf where its path ends (exclusion); nodes shared by
    /// several paths are included once. Verify with [`cairn_proof::verify`].
    ///
    /// Cost: one round of batched page reads (at most 4 MiB per batch) per trie page level
    /// below the retained ones; about `32·(log₂ n + 1.3)` bytes per key proved alone, less per
    /// key together.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::KeyTooLarge`], [`Error::TableClosed`],
    /// [`Error::TableBroken`], [`Error::Io`], corruption of a trie page.
    pub fn prove<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Proof> {
        let (mut auth, paths) = self.key_paths(keys)?;
        auth.prove(&paths)
    }

    /// Loads the trie pages a commit of `keys` will touch (a warm-up, done while a block is
    /// being executed, say), through the same batched reads as lookups, so that the next
    /// commit reads only pages for keys not prefetched. The pages are held until that commit.
    ///
    /// Errors: as [`Table::prove`].
    pub fn prefetch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        let (mut auth, paths) = self.key_paths(keys)?;
        auth.prefetch(&paths)
    }

    /// A proof opening every trie node above depth `levels` (1 to 32) of the latest commit: what
    /// a verifier keeps as a [`cairn_proof::TopWitness`] so that proofs compacted with
    /// [`Proof::compact`] can omit those levels. Cost: O(2^levels) nodes.
    ///
    /// Errors: [`Error::InvalidUpdate`] for `levels` out of range, and as [`Table::prove`].
    pub fn top_witness(&self, levels: u8) -> Result<Proof> {
        let mut auth = self.auth()?;
        drop(self.read()?);
        auth.top_witness(levels as usize)
    }

    /// Counters of the table's trie.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`].
    pub fn auth_stats(&self) -> Result<AuthStats> {
        let auth = self.auth()?;
        drop(self.read()?);
        Ok(auth.stats())
    }

    /// Builds the trie of a new table (a union) by re-inserting its whole contents: one pass of
    /// a cursor over it, every key hashed into its leaf, committed in chunks of
    /// [`TRIE_BUILD_CHUNK`] keys (each sorted by key path, so memory stays at one chunk).
    ///
    /// Cost: O(n) entry reads (the union's inputs streamed once, the union's debt untouched),
    /// 3 hashes per key plus the node hashes of `⌈n / chunk⌉` commits, and the page writes of
    /// those commits. The cheaper merge of input tries that reuses disjoint subtrees is not
    /// built yet.
    fn build_trie(&self) -> Result<()> {
        let mut auth = self.auth()?;
        let kind = auth.trie.kind;
        let mut chunk: Vec<Change> = Vec::with_capacity(TRIE_BUILD_CHUNK);
        let flush = |auth: &mut Auth, chunk: &mut Vec<Change>| -> Result<()> {
            chunk.sort_unstable_by_key(|c| c.key_path);
            auth.commit(chunk)?;
            chunk.clear();
            Ok(())
        };
        for entry in self.cursor()? {
            let entry = entry?;
            let blob = match &entry.blob {
                Some(b) => Some(b.read()?),
                None => None,
            };
            let leaf = Leaf::new(kind, &entry.key, &entry.value, blob.as_deref());
            chunk.push(Change {
                key_path: leaf.key_path,
                leaf: Some(leaf),
            });
            if chunk.len() == TRIE_BUILD_CHUNK {
                flush(&mut auth, &mut chunk)?;
            }
        }
        flush(&mut auth, &mut chunk)
    }

    /// The locked trie and the sorted, distinct key paths of `keys`.
    fn key_paths<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<(MutexGuard<'_, Auth>, Vec<Hash>)> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        let auth = self.auth()?;
        drop(self.read()?); // a closed or broken table answers nothing
        let kind = auth.trie.kind;
        let mut paths: Vec<Hash> = keys.iter().map(|k| kind.key_path(k.as_ref())).collect();
        paths.sort_unstable();
        paths.dedup();
        Ok((auth, paths))
    }

    /// The trie of authenticated snapshot `name`: its segments (from `trie/`) and its retained
    /// pages, checked; corruption is reported as the snapshot's, naming `trie/`.
    fn restore_auth(
        session: &Arc<SessionInner>,
        name: &str,
        meta: &snapshot::AuthMeta,
        config: &crate::config::AuthConfig,
    ) -> Result<Auth> {
        let (manifest, segments) = snapshot::restore_trie(session, name)?;
        // The retained pages are all in the snapshot's own segment, the one of the top page.
        let trie_dir = session.snapshots_dir().join(name).join(snapshot::TRIE_DIR);
        let blame = manifest
            .top
            .and_then(|top| manifest.segments.iter().find(|s| s.id == top.segment))
            .map_or(trie_dir.clone(), |s| {
                trie_dir.join(crate::pagelog::segment_file_name(s.file_id))
            });
        Auth::restore(session.clone(), config, meta, &manifest, segments)
            .map_err(snapshot::blame_in(name, &blame))
    }

    // --------------------------------------------------------------------------------------------
    // Life cycle and statistics

    /// Closes the table and releases its runs. Idempotent.
    ///
    /// Files no other handle uses are removed now where possible; one whose removal fails stays
    /// queued, and the session's next operation retries it and reports the error (or the next
    /// session removes it when it empties `active/`).
    pub fn close(&self) {
        self.inner.close();
    }

    /// Counters describing the table.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn stats(&self) -> Result<TableStats> {
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
        })
    }
}

impl Drop for TableInner {
    /// The last handle is gone: release the runs now and remove the files nobody else uses.
    fn drop(&mut self) {
        self.close();
    }
}

/// A write buffer's entry as a lookup's partial result.
fn to_partial(entry: Entry<MemBlob>) -> Entry<BlobSource> {
    match entry {
        Entry::Insert(v, blob) => Entry::Insert(v, blob.map(BlobSource::Memory)),
        Entry::Upsert(v) => Entry::Upsert(v),
        Entry::Delete => Entry::Delete,
    }
}

/// Once a table's union has finished, its run becomes the table's new last level (and deletes
/// may be dropped again by last-level merges).
fn migrate_finished_union(state: &mut TableState, write_buffer_entries: usize) {
    let Some(done) = state.union.as_ref().and_then(|u| u.finished()) else {
        return;
    };
    state.union = None;
    if let Some(run) = done {
        state
            .levels
            .push_last_level(run, write_buffer_entries as u64);
    }
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_SIZE_MAX {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: KEY_SIZE_MAX,
        });
    }
    Ok(())
}

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
