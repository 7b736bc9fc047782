//! Write batches: updates across several durable tables, each with keys of its own type, built
//! up one update at a time and written atomically by [`crate::Session::write_batch`].
//!
//! Owns: [`WriteBatch`], its byte arena and its parts. May call: `table` (the handles it holds),
//! `lsm` (the update type). Must never touch: the log or a table's state (the session front
//! writes a batch through `durable`).

use std::ops::Range;

use crate::lsm::{Lsm, Update};
use crate::table::Table;

/// One table's part of a batch, borrowing the batch's arena.
pub(crate) type BatchPart<'a> = (&'a Lsm, Vec<(&'a [u8], Update<'a>)>);

/// What one update of a batch does; its bytes are ranges of the batch's arena.
#[derive(Clone, Debug)]
enum Op {
    Insert(Range<usize>),
    InsertWithBlob(Range<usize>, Range<usize>),
    Upsert(Range<usize>),
    Delete,
}

/// The updates of one table, in order.
#[derive(Clone, Debug)]
struct Part {
    table: Table,
    /// Each update's key and what it does.
    updates: Vec<(Range<usize>, Op)>,
}

/// A batch of updates across durable tables of one session: inserts, upserts and deletes, each
/// table's with keys of whatever type suits it, applied all or nothing by
/// [`crate::Session::write_batch`] (one log record).
///
/// Updates apply in the order they were added, a table's after the earlier ones of the same
/// table. Building a batch does no I/O and checks nothing: the write validates it whole first
/// and refuses it before anything is logged or applied. The bytes of every key, value and blob
/// are copied into one arena (one allocation that grows), so a batch owns what it holds and can
/// be kept, cloned or sent to another thread.
///
/// ```
/// use cairn::{Session, TableConfig, WriteBatch};
/// # let dir = tempfile::tempdir().unwrap();
/// let session = Session::open(dir.path())?;
/// let balances = session.table("balances", TableConfig::default())?;
/// let utxo = session.table("utxo", TableConfig::default())?;
/// let mut batch = WriteBatch::new();
/// batch.insert(&balances, "alice", 90u64.to_le_bytes());
/// batch.delete(&utxo, [7u8; 34]);
/// batch.insert(&utxo, [8u8; 34], b"output");
/// session.write_batch(&batch)?.wait()?;
/// assert_eq!(balances.get("alice")?, Some(90u64.to_le_bytes().to_vec()));
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    parts: Vec<Part>,
    bytes: Vec<u8>,
    len: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Adds `update` of `key` in `table`. Returns the batch, so that calls chain.
    pub fn update(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        update: Update<'_>,
    ) -> &mut Self {
        let key = self.push_bytes(key.as_ref());
        let op = match update {
            Update::Insert(v) => Op::Insert(self.push_bytes(v)),
            Update::InsertWithBlob(v, b) => {
                let v = self.push_bytes(v);
                Op::InsertWithBlob(v, self.push_bytes(b))
            }
            Update::Upsert(v) => Op::Upsert(self.push_bytes(v)),
            Update::Delete => Op::Delete,
        };
        match self.parts.last_mut() {
            Some(part) if part.table.lsm().is_same(table.lsm()) => part.updates.push((key, op)),
            _ => self.parts.push(Part {
                table: table.clone(),
                updates: vec![(key, op)],
            }),
        }
        self.len += 1;
        self
    }

    /// Adds an insert of `key` with `value` into `table` (see [`Update::Insert`]).
    pub fn insert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.update(table, key, Update::Insert(value.as_ref()))
    }

    /// Adds an insert of `key` with `value` and `blob` into `table`.
    pub fn insert_with_blob(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        blob: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.update(
            table,
            key,
            Update::InsertWithBlob(value.as_ref(), blob.as_ref()),
        )
    }

    /// Adds an upsert of `key` with `value` into `table` (see [`Update::Upsert`]).
    pub fn upsert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.update(table, key, Update::Upsert(value.as_ref()))
    }

    /// Adds a delete of `key` from `table`.
    pub fn delete(&mut self, table: &Table, key: impl AsRef<[u8]>) -> &mut Self {
        self.update(table, key, Update::Delete)
    }

    /// Updates in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no update.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of keys, values and blobs the batch holds.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Empties the batch, keeping its memory for reuse.
    pub fn clear(&mut self) {
        self.parts.clear();
        self.bytes.clear();
        self.len = 0;
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        start..self.bytes.len()
    }

    /// Each part's table and its updates, borrowing the arena: what a write hands down.
    pub(crate) fn parts(&self) -> Vec<BatchPart<'_>> {
        let b = &self.bytes;
        self.parts
            .iter()
            .map(|part| {
                let updates = part
                    .updates
                    .iter()
                    .map(|(key, op)| {
                        let update = match op {
                            Op::Insert(v) => Update::Insert(&b[v.clone()]),
                            Op::InsertWithBlob(v, blob) => {
                                Update::InsertWithBlob(&b[v.clone()], &b[blob.clone()])
                            }
                            Op::Upsert(v) => Update::Upsert(&b[v.clone()]),
                            Op::Delete => Update::Delete,
                        };
                        (&b[key.clone()], update)
                    })
                    .collect();
                (part.table.lsm(), updates)
            })
            .collect()
    }
}
