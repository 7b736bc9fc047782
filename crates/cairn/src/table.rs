//! Tables: the public handle of one table.
//!
//! Owns: [`Table`], the public table API: every call a user makes on a table, documented with
//! its costs and errors, and the choice of path for a durable table's writes (through the
//! write-ahead log). The work is done below: the LSM tree in `lsm`, the log in `durable`.
//!
//! May call: `lsm` (every operation's work), `durable` (a durable table's writes are logged),
//! `snapshot` (snapshot names), `inspect` (a root recomputed from the contents), and for the
//! types it hands out `cursor` (cursors), `lookup` (lookup results, blob references) and `auth`
//! (commits and trie counters). Must never touch: a table's state, pages, runs or files.

use std::sync::Arc;

use cairn_proof::{Proof, Root};

use crate::auth::{AuthStats, Commit, VersionedProof};
use crate::config::TableConfig;
use crate::cursor::{Cursor, CursorEntry, KeyRange};
use crate::durable::Durable;
use crate::error::{Error, Result};
use crate::lookup::{BlobRef, LookupResult};
use crate::lsm::{Lsm, TableStats, Update};
use crate::snapshot;

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
    lsm: Lsm,
    /// The session's log writer, for a durable table: its updates are logged through it.
    durable: Option<Arc<Durable>>,
}

impl Table {
    /// A handle over `lsm`; `durable` is the session's log writer for a durable table.
    pub(crate) fn new(lsm: Lsm, durable: Option<Arc<Durable>>) -> Table {
        Table { lsm, durable }
    }

    /// The table's LSM tree.
    pub(crate) fn lsm(&self) -> &Lsm {
        &self.lsm
    }

    /// The session's log, for a durable authenticated table, whose commits are logged.
    fn logged_commits(&self) -> Option<&Arc<Durable>> {
        let logged = self.lsm.durable_id().is_some() && self.lsm.config().auth.is_some();
        self.durable.as_ref().filter(|_| logged)
    }

    /// An independently writable copy of the table, made without disk I/O: it shares every run
    /// (files are reference-counted and deleted when the last user lets go) and every merge in
    /// progress (merge work paid through one handle is not done again through the other), and
    /// shares the write buffer (persistent maps in two layers: O(1) to share; while both
    /// handles live, each one's updates go to a layer of its own rather than copying shared
    /// nodes). A write buffer being flushed is shared too: its run is written once, and each
    /// copy pays for that writing with credits of its own updates (see `docs/design.md`,
    /// "Update path"). Cost: O(levels + runs) reference counts, one removal
    /// step of released files, and, when no other copy shares the buffer's older layer, moving
    /// the newer layer into it in place (the entries updated since the last duplicate: at most
    /// `B`, O(log B) each).
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::SessionClosed`],
    /// [`Error::Io`] (removing released files).
    pub fn duplicate(&self) -> Result<Table> {
        Ok(Table::new(self.lsm.duplicate()?, None))
    }

    /// The table's configuration.
    pub fn config(&self) -> &TableConfig {
        self.lsm.config()
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
    /// update that fills the write buffer freezes it, and the next `B / 4` updates write it out
    /// as a run, 4 entries each (sequential I/O). One exception: a merge restored from a
    /// snapshot or checkpoint redoes, spread over its remaining credits, the steps it had done
    /// before the save (so that opening reads no data), so until it finishes, updates do up to
    /// `D / (D - c0)` times their share of it (`c0` of `D` nominal credits paid at the save;
    /// `docs/format/snapshot.md`, "Opening"); with background merges the session's thread
    /// does that work ahead of them.
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
        if self.lsm.durable_id().is_some() {
            return self.write(batch).map(drop);
        }
        self.lsm.validate_batch(batch)?;
        self.lsm.apply_updates(batch)
    }

    /// Applies `batch` to a durable table and logs it as one record: returns once it is applied
    /// in memory and appended to the log's buffer, with a [`crate::Durability`] that tells when
    /// it is on disk. The one-table case of [`crate::Session::write`]; `updates` on a durable
    /// table does the same and drops the handle.
    ///
    /// Errors: [`Error::NotDurable`] for a table that is not durable, [`Error::LogFailed`], and
    /// as [`Table::updates`].
    pub fn write<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<crate::Durability> {
        let durable = self.durable.as_ref().ok_or_else(|| {
            Error::NotDurable("the table is not durable (open it with Session::table)".into())
        })?;
        durable.write(self.lsm.session(), &[(&self.lsm, batch)])
    }

    /// Whether the table is durable (made by [`crate::Session::create_durable_table`]).
    pub fn is_durable(&self) -> bool {
        self.lsm.durable_id().is_some()
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
        self.lsm.settle()
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
        self.lsm.complete_merges()
    }

    // --------------------------------------------------------------------------------------------
    // Lookups

    /// The value of `key`, or `None` if it is absent. A blob stored with it is not read (see
    /// [`Table::lookup`] for the blob reference).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let session = cairn::Session::open(dir.path()).unwrap();
    /// let table = session.table("t", cairn::TableConfig::default())?;
    /// table.insert("k", "v")?;
    /// assert_eq!(table.get("k")?, Some(b"v".to_vec()));
    /// assert_eq!(table.get("absent")?, None);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// Cost: as one key of [`Table::lookups`], the batched path to use for many keys.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.lookup(key)?.into_value())
    }

    /// Whether `key` is present.
    ///
    /// Errors: [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.lookup(key)?.value().is_some())
    }

    /// Looks up one key, with a reference to its blob if it has one.
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
        self.lsm.lookups(keys)
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
        self.lsm.retrieve_blob(blob)
    }

    /// Whether `blob` can still be read through this table: it came from this table (or from a
    /// cursor over it) and the table has not been updated since.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn blob_ref_is_valid(&self, blob: &BlobRef) -> Result<bool> {
        self.lsm.blob_ref_is_valid(blob)
    }

    /// Reads several blobs; fails on the first invalid reference.
    ///
    /// Errors: [`Error::BlobRefInvalid`] (a reference from another table or made stale by an
    /// update), [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn retrieve_blobs(&self, blobs: &[BlobRef]) -> Result<Vec<Vec<u8>>> {
        blobs.iter().map(|b| self.retrieve_blob(b)).collect()
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
    /// (custom functions are the same when their names are, see [`crate::Resolve`]).
    ///
    /// When a key is in several inputs their values are combined and the result has no blob
    /// (as an upsert drops a blob), even with `KeepNewest`.
    pub fn incremental_unions(tables: &[&Table]) -> Result<Table> {
        let inputs: Vec<&Lsm> = tables.iter().map(|t| &t.lsm).collect();
        Ok(Table::new(Lsm::incremental_unions(&inputs)?, None))
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
        self.lsm.remaining_union_debt()
    }

    /// Does up to `credits` steps of union work (one output key each) and returns the credits
    /// left over, which is positive only when the union has finished.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`] (the table is then
    /// broken, unless the error came from removing released files before the update started).
    pub fn supply_union_credits(&self, credits: u64) -> Result<u64> {
        self.lsm.supply_union_credits(credits)
    }

    // --------------------------------------------------------------------------------------------
    // Cursors and range lookups

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
    /// a pair of [`std::ops::Bound`]s such as `(Bound::Excluded(a), Bound::Unbounded)`, with `a` and `b`
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
    /// Errors: [`Error::KeyTooLarge`] when either bound is longer than [`crate::KEY_SIZE_MAX`],
    /// [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn range(&self, range: impl KeyRange) -> Result<Cursor> {
        self.lsm.range(range)
    }

    /// A cursor over every entry whose key starts with `prefix`, in key order (see
    /// [`Table::range`]; an empty prefix is the whole table).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let session = cairn::Session::open(dir.path()).unwrap();
    /// # let table = session.new_table(cairn::TableConfig::default()).unwrap();
    /// table.inserts(&[("acct/1", "a"), ("acct/2", "b"), ("acctz", "c"), ("tx/1", "d")])?;
    /// let keys: Vec<Vec<u8>> = table.prefix("acct/")?.map(|e| e.map(|e| e.key)).collect::<cairn::Result<_>>()?;
    /// assert_eq!(keys, [b"acct/1".to_vec(), b"acct/2".to_vec()]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    ///
    /// Errors: as [`Table::range`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<Cursor> {
        let prefix = prefix.as_ref();
        self.range((
            std::ops::Bound::Included(prefix.to_vec()),
            prefix_end(prefix),
        ))
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
        match self.logged_commits() {
            // Saving an authenticated table commits what changed: a durable one logs that
            // commit first, with writes held back until the save is done.
            Some(durable) => durable.save_snapshot(&self.lsm, name, label),
            None => self.lsm.save_snapshot_as(name, label),
        }
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
        Ok(self.commit_logged()?.0)
    }

    /// [`Table::commit`], with the handle of the commit's log record (a durable table's commit
    /// is logged; `None` for other tables, and when nothing changed since the last commit):
    /// wait on it, or, when a later write's handle covers it, let go of it with
    /// [`crate::Durability::release`]. [`Table::commit`] drops it, which under
    /// [`crate::SyncPolicy::Immediate`] asks the log to write the record at once.
    ///
    /// Errors: as [`Table::commit`].
    pub fn commit_logged(&self) -> Result<(Commit, Option<crate::Durability>)> {
        match self.logged_commits() {
            // A durable table's commit is logged (a record after the updates it covers), so
            // that recovery reaches the same version and root; the record is durable with the
            // next write's notice, or `Session::sync_log`.
            Some(durable) => durable.commit(&self.lsm),
            None => Ok((self.lsm.commit()?, None)),
        }
    }

    /// The version and state root of the table's current contents: [`Table::commit`] (which
    /// makes a new version if anything changed since the last commit, and says which). To
    /// read the last commit without making one, [`Table::last_commit`].
    ///
    /// Errors: as [`Table::commit`].
    pub fn root(&self) -> Result<Commit> {
        self.commit()
    }

    /// The version and state root of the last commit, without committing: updates made since
    /// are not covered. O(1).
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`].
    pub fn last_commit(&self) -> Result<Commit> {
        self.lsm.last_commit()
    }

    /// A multiproof for `keys` of the table's current contents, with the version and root it
    /// proves ([`VersionedProof`]): commits first if anything changed since the last commit
    /// (as [`Table::commit`]; another thread's commit in between may make the version proved
    /// newer still, and the proof then says so). For each key, its leaf (inclusion: the hashes
    /// of its value and blob) or the empty subtree or other leaf where its path ends
    /// (exclusion); nodes shared by several paths are included once. Verify with
    /// [`cairn_proof::verify`] against the returned root.
    ///
    /// Cost: a commit's when updates are pending; then one round of batched page reads (at most 4 MiB per batch) per trie page level
    /// below the retained ones; about `32·(log₂ n + 1.3)` bytes per key proved alone, less per
    /// key together.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::KeyTooLarge`], [`Error::TableClosed`],
    /// [`Error::TableBroken`], [`Error::Io`], corruption of a trie page.
    pub fn prove<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<VersionedProof> {
        for key in keys {
            crate::lsm::check_key(key.as_ref())?;
        }
        self.commit()?;
        self.lsm.prove(keys)
    }

    /// Loads the trie pages a commit of `keys` will touch (a warm-up, done while a block is
    /// being executed, say), through the same batched reads as lookups, so that the next
    /// commit reads only pages for keys not prefetched. The pages are held until that commit.
    ///
    /// Errors: as [`Table::prove`].
    pub fn prefetch<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        self.lsm.prefetch(keys)
    }

    /// [`Table::prefetch`] on a thread of its own: starts loading the trie pages a commit of
    /// `keys` will touch and returns at once, so that the reads overlap whatever the caller
    /// does next (applying a block's updates, writing them to the log) as NOMT's warm-up
    /// does. The next commit waits for what is still loading (so does a `prefetch`, another
    /// warm-up, or closing the table); a proof does not use the pages. The warm-up's read
    /// errors are not reported: the commit reads again whatever it did not load, and reports
    /// its own.
    ///
    /// Cost here: the keys' paths hashed and sorted, one thread started. Memory: the pages
    /// loaded, until the commit.
    ///
    /// Errors: as [`Table::prove`] (a key too long, a closed or broken table, a plain table).
    pub fn warm_up<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<()> {
        self.lsm.warm_up(keys)
    }

    /// A proof opening every trie node above depth `levels` (1 to 32) of the latest commit: what
    /// a verifier keeps as a [`cairn_proof::TopWitness`] so that proofs compacted with
    /// [`Proof::compact`] can omit those levels. Cost: O(2^levels) nodes.
    ///
    /// Errors: [`Error::InvalidUpdate`] for `levels` out of range, and as [`Table::prove`].
    pub fn top_witness(&self, levels: u8) -> Result<Proof> {
        self.lsm.top_witness(levels)
    }

    /// The state root of the table's contents, recomputed from the contents alone (never from
    /// the trie): what an auditor compares with [`Table::last_commit`] to find a trie or data
    /// that was tampered with. Cost: one pass over the table to count its entries, then `2^d`
    /// passes, `d` the smallest keeping a pass's leaves (about 72 bytes each) within
    /// `memory_bytes`; one key-path hash per entry per pass and the leaf and node hashes of the
    /// entries once; `progress` hears of each pass.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`] and corruption met while reading.
    pub fn contents_root(
        &self,
        memory_bytes: usize,
        progress: &mut dyn FnMut(crate::inspect::VerifyProgress),
    ) -> Result<Root> {
        let kind = self.lsm.config().auth.ok_or(Error::NotAuthenticated)?.hash;
        let mut entries = 0u64;
        for entry in self.lsm.cursor()? {
            entry?;
            entries += 1;
        }
        crate::inspect::contents_root(&self.lsm, kind, entries, memory_bytes, progress)
    }

    /// Counters of the table's trie.
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`].
    pub fn auth_stats(&self) -> Result<AuthStats> {
        self.lsm.auth_stats()
    }

    /// The page-log segment files (in the session's `active/` directory) that this handle's
    /// trie version reaches, in no particular order. A segment file exists exactly while some
    /// open version reaches it (its last user's release queues its removal, which later
    /// operations or [`Session::remove_released_files`] carry out), so the union of this
    /// list over every open handle is what the session's tries keep on disk. Cost: O(segments).
    ///
    /// Errors: [`Error::NotAuthenticated`], [`Error::TableClosed`], [`Error::TableBroken`].
    ///
    /// [`Session::remove_released_files`]: crate::Session::remove_released_files
    pub fn trie_files(&self) -> Result<Vec<std::path::PathBuf>> {
        self.lsm.trie_files()
    }

    // --------------------------------------------------------------------------------------------
    // Life cycle and statistics

    /// Closes the table and releases its runs. Idempotent.
    ///
    /// Files no other handle uses are removed now where possible; one whose removal fails stays
    /// queued, and the session's next operation retries it and reports the error (or the next
    /// session removes it when it empties `active/`).
    pub fn close(&self) {
        self.lsm.close();
    }

    /// Counters describing the table.
    ///
    /// Errors: [`Error::TableClosed`], [`Error::TableBroken`], [`Error::Io`].
    pub fn stats(&self) -> Result<TableStats> {
        self.lsm.stats()
    }
}

/// The first key after every key that starts with `prefix`: the prefix with its last byte below
/// 0xff incremented and what follows it cut (unbounded when every byte is 0xff, or none).
pub(crate) fn prefix_end(prefix: &[u8]) -> std::ops::Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return std::ops::Bound::Excluded(end);
        }
    }
    std::ops::Bound::Unbounded
}

#[cfg(test)]
mod tests {
    use super::prefix_end;
    use std::ops::Bound;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"ab"), Bound::Excluded(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Bound::Excluded(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), Bound::Unbounded);
        assert_eq!(prefix_end(b""), Bound::Unbounded);
    }
}
