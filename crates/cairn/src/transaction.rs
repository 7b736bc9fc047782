//! Transactions: read-modify-write across a session's durable tables with serializable
//! isolation, by optimistic concurrency control validated by value at commit.
//!
//! Owns: [`Transaction`] (its view, read set and write set) and what a transaction reads.
//!
//! May call: `batch` (its write set), `durable` (the view taken and the validated commit, both
//! under the write order), `lsm` (reads of the view), `table` (the handles it is given),
//! `session_core` (the session it commits in), `wal` (the durability notice a commit returns).
//! Must never touch: the log's bytes, or a table's state.
//!
//! The protocol (`docs/design.md`, "Transactions"):
//!
//! 1. **Begin** ([`crate::Session::transaction`]): under the write order (no batch half
//!    applied), every durable table is duplicated (O(1) I/O each: shared runs and write
//!    buffer). The duplicates are the transaction's *view*: every read sees the tables as of
//!    that one instant, across tables.
//! 2. **Read**: a key the transaction wrote is answered from its write set; any other is read
//!    from the view once, and what was seen (value and blob, or absence) joins the read set.
//! 3. **Write**: buffered in a [`WriteBatch`] (nothing is logged or applied before commit).
//! 4. **Commit**: under the write order, every key of the read set is looked up again in the
//!    live tables (one batched lookup per table); if any differs from what was seen, the
//!    transaction fails with [`Error::TransactionConflict`] and nothing is written. Otherwise
//!    its writes are logged as one record and applied, still under the order: the transaction
//!    happened at that instant, with exactly the reads it made (validation by value), so
//!    committed transactions are serializable in log order.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::batch::WriteBatch;
use crate::durable::{Durable, Seen, TablePart, TableReads, ViewTable};
use crate::error::{Error, Result};
use crate::lsm::Update;
use crate::session_core::SessionCore;
use crate::table::Table;
use crate::wal::Durability;

/// What a transaction wrote to a key, for reading its own writes.
#[derive(Clone, Debug)]
enum Pending {
    /// Inserted (with a blob or not) or deleted: reads see exactly this.
    Set(Seen),
    /// Upserted, not read since: the combined upsert value, to resolve against the view's.
    Upsert(Vec<u8>),
}

/// One durable table as the transaction knows it.
#[derive(Debug)]
struct Known {
    view: ViewTable,
    /// Keys read from the view and what was seen.
    reads: BTreeMap<Vec<u8>, Seen>,
    /// Keys written, for reading them back.
    writes: BTreeMap<Vec<u8>, Pending>,
}

/// A read-modify-write transaction across a session's durable tables, serializable
/// ([`crate::Session::transaction`]).
///
/// Reads see the tables as of the transaction's start, consistently across tables, plus the
/// transaction's own writes; writes are buffered until [`Transaction::commit`], which validates
/// that every key read still holds what was read and then writes everything as one atomic log
/// record. A transaction dropped without a commit leaves no trace.
///
/// ```
/// use cairn::{Error, Session, TableConfig};
/// # let dir = tempfile::tempdir().unwrap();
/// let session = Session::open(dir.path())?;
/// let accounts = session.table("accounts", TableConfig::default())?;
/// accounts.insert("alice", 100u64.to_le_bytes())?;
/// let balance = |v: Option<Vec<u8>>| v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
/// // Move 30 from alice to bob if alice has it; retry on a conflict.
/// let moved = session.transact(|tx| {
///     let from = balance(tx.get(&accounts, "alice")?);
///     if from < 30 {
///         return Ok(false);
///     }
///     let to = balance(tx.get(&accounts, "bob")?);
///     tx.insert(&accounts, "alice", (from - 30).to_le_bytes())?;
///     tx.insert(&accounts, "bob", (to + 30).to_le_bytes())?;
///     Ok(true)
/// })?;
/// assert!(moved.0);
/// assert_eq!(balance(accounts.get("bob")?), 30);
/// # Ok::<(), cairn::Error>(())
/// ```
///
/// Bounds: memory for the keys read and the values written; a read costs a lookup in the view
/// (the first time a key is read); the commit costs one batched lookup per table read, in the
/// live tables, while holding the session's write order (other writers wait).
#[derive(Debug)]
pub struct Transaction {
    session: Arc<SessionCore>,
    durable: Arc<Durable>,
    /// The session's durable tables as of the start, by durable id.
    tables: BTreeMap<u32, Known>,
    batch: WriteBatch,
}

impl Transaction {
    /// A transaction over a view of every durable table (see the module doc).
    pub(crate) fn begin(session: Arc<SessionCore>, durable: Arc<Durable>) -> Result<Transaction> {
        let tables = durable
            .view()?
            .into_iter()
            .map(|view| {
                let known = Known {
                    view,
                    reads: BTreeMap::new(),
                    writes: BTreeMap::new(),
                };
                (known.view.id, known)
            })
            .collect();
        Ok(Transaction {
            session,
            durable,
            tables,
            batch: WriteBatch::new(),
        })
    }

    fn known(&mut self, table: &Table) -> Result<&mut Known> {
        let id = crate::durable::durable_id(table.lsm())?;
        match self.tables.get_mut(&id) {
            Some(known) if known.view.live.is_same(table.lsm()) => Ok(known),
            _ => Err(Error::InvalidConfig(
                "the table is not one of the transaction's: of another session, or created \
                 after the transaction began"
                    .into(),
            )),
        }
    }

    /// The value of `key` in `table` as this transaction sees it: its own write if it wrote
    /// the key, otherwise the table as of the transaction's start. The key joins the read set
    /// (validated at commit) unless it is answered by a write alone.
    ///
    /// Errors: [`Error::NotDurable`], [`Error::InvalidConfig`] (a table that is not the
    /// transaction's), [`Error::KeyTooLarge`], [`Error::TableClosed`], [`Error::TableBroken`],
    /// [`Error::Io`].
    pub fn get(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        Ok(self.get_many(table, &[key])?.pop().flatten())
    }

    /// Whether `key` is present in `table` as this transaction sees it (see
    /// [`Transaction::get`]).
    ///
    /// Errors: as [`Transaction::get`].
    pub fn contains_key(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(table, key)?.is_some())
    }

    /// The values of `keys` in `table` as this transaction sees them (see
    /// [`Transaction::get`]), with one batched lookup for the keys not read before.
    ///
    /// Errors: as [`Transaction::get`].
    pub fn get_many<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        keys: &[K],
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let known = self.known(table)?;
        // The keys that need the view: not read before, and not answered by a write alone.
        let mut missing: Vec<&[u8]> = keys
            .iter()
            .map(AsRef::as_ref)
            .filter(|k| {
                !known.reads.contains_key(*k)
                    && !matches!(known.writes.get(*k), Some(Pending::Set(_)))
            })
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let found = known.view.view.lookups(&missing)?;
            for (key, result) in missing.iter().zip(found) {
                known
                    .reads
                    .insert(key.to_vec(), crate::durable::seen(result)?);
            }
        }
        let resolve = &known.view.live.config().resolve;
        Ok(keys
            .iter()
            .map(|k| {
                let k = k.as_ref();
                let base = || known.reads.get(k).cloned().flatten().map(|(v, _)| v);
                match known.writes.get(k) {
                    Some(Pending::Set(s)) => s.as_ref().map(|(v, _)| v.clone()),
                    Some(Pending::Upsert(u)) => Some(match base() {
                        Some(old) => resolve.apply(u, &old),
                        None => u.clone(),
                    }),
                    None => base(),
                }
            })
            .collect())
    }

    /// Buffers `update` of `key` in `table`, to be written at commit.
    ///
    /// Errors: [`Error::NotDurable`], [`Error::InvalidConfig`] (as [`Transaction::get`]); the
    /// input errors of the update are reported by [`Transaction::commit`].
    pub fn update(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        update: Update<'_>,
    ) -> Result<()> {
        let key = key.as_ref();
        let known = self.known(table)?;
        let resolve = &known.view.live.config().resolve;
        let pending = match update {
            Update::Insert(v) => Pending::Set(Some((v.to_vec(), None))),
            Update::InsertWithBlob(v, b) => Pending::Set(Some((v.to_vec(), Some(b.to_vec())))),
            Update::Delete => Pending::Set(None),
            Update::Upsert(v) => match known.writes.get(key) {
                Some(Pending::Set(Some((old, _)))) => {
                    Pending::Set(Some((resolve.apply(v, old), None)))
                }
                Some(Pending::Set(None)) => Pending::Set(Some((v.to_vec(), None))),
                Some(Pending::Upsert(old)) => Pending::Upsert(resolve.apply(v, old)),
                None => Pending::Upsert(v.to_vec()),
            },
        };
        known.writes.insert(key.to_vec(), pending);
        self.batch.update(table, key, update);
        Ok(())
    }

    /// Buffers an insert (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn insert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.update(table, key, Update::Insert(value.as_ref()))
    }

    /// Buffers an upsert (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn upsert(
        &mut self,
        table: &Table,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.update(table, key, Update::Upsert(value.as_ref()))
    }

    /// Buffers a delete (see [`Transaction::update`]).
    ///
    /// Errors: as [`Transaction::update`].
    pub fn delete(&mut self, table: &Table, key: impl AsRef<[u8]>) -> Result<()> {
        self.update(table, key, Update::Delete)
    }

    /// Keys read so far (the read set validated at commit).
    pub fn reads(&self) -> usize {
        self.tables.values().map(|k| k.reads.len()).sum()
    }

    /// Updates buffered so far.
    pub fn writes(&self) -> usize {
        self.batch.len()
    }

    /// Validates the read set against the live tables and writes the buffered updates as one
    /// log record, atomically (see the module doc). Returns the write's
    /// [`crate::Durability`], or `None` for a transaction that wrote nothing (it is
    /// serializable at its start and needs no validation).
    ///
    /// Errors: [`Error::TransactionConflict`] when a key read changed since (nothing was
    /// written; run the transaction again, as [`crate::Session::transact`] does), the input
    /// errors of [`crate::Table::updates`] (nothing written), [`Error::TableClosed`],
    /// [`Error::TableBroken`], [`Error::LogFailed`], [`Error::Io`].
    pub fn commit(self) -> Result<Option<Durability>> {
        if self.batch.is_empty() {
            return Ok(None);
        }
        let reads: Vec<TableReads<'_>> = self
            .tables
            .values()
            .filter(|k| !k.reads.is_empty())
            .map(|k| {
                (
                    &k.view.live,
                    &k.view.name[..],
                    k.reads.iter().map(|(key, s)| (&key[..], s)).collect(),
                )
            })
            .collect();
        let parts = self.batch.parts();
        let parts: Vec<TablePart<'_>> = parts
            .iter()
            .map(|(t, updates)| (*t, &updates[..]))
            .collect();
        self.durable
            .commit_transaction(&self.session, &reads, &parts)
            .map(Some)
    }
}
